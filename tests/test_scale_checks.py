"""The input checks that run over every value of a big fit: the same answers on their fast
paths (grouped column maxima of the bin cache, expanded stand-in features)."""

import math

import pytest
import torch

from torchrankboost.boosting.inputs import check_no_inf
from torchrankboost.data.cache import column_max


@pytest.mark.parametrize("n, F", [(1, 5), (63, 7), (64, 7), (65, 7), (1000, 220), (129, 1),
                                  (5, 0)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16])
def test_column_max_equals_amax(n, F, dtype):
    g = torch.Generator().manual_seed(n * 31 + F)
    hi = 256 if dtype == torch.uint8 else 4000
    lo = 0 if dtype == torch.uint8 else -4000
    x = torch.randint(lo, hi, (n, F), generator=g).to(dtype)
    assert torch.equal(column_max(x), x.amax(0))
    assert torch.equal(column_max(x, group=3), x.amax(0))
    assert torch.equal(column_max(x, reduce=torch.amin), x.amin(0))
    assert torch.equal(column_max(x, group=3, reduce=torch.amin), x.amin(0))


def test_column_max_of_a_strided_view():
    x = torch.randint(0, 256, (300, 10), dtype=torch.uint8)[:, ::2]
    assert torch.equal(column_max(x), x.amax(0))


def test_check_no_inf_on_expanded_features():
    ok = torch.zeros((), dtype=torch.float32).expand(100_000, 50)  # binned data's stand-in
    assert check_no_inf(ok) is ok
    with pytest.raises(ValueError, match=r"column 0 \(row 0, value inf\)"):
        check_no_inf(torch.tensor(math.inf).expand(10, 3))
    row = torch.tensor([0.0, 1.0, 2.0, -math.inf, 4.0])
    with pytest.raises(ValueError, match=r"column 3 \(row 0, value -inf\)"):
        check_no_inf(row.expand(7, 5))
    col = torch.tensor([0.0, 1.0, math.inf, 3.0])
    with pytest.raises(ValueError, match=r"column 0 \(row 2, value inf\)"):
        check_no_inf(col[:, None].expand(4, 6))
    dense = torch.zeros(6, 4)
    dense[4, 2] = math.inf
    with pytest.raises(ValueError, match=r"column 2 \(row 4, value inf\)"):
        check_no_inf(dense)
