"""Input conversion and checks of a fit (``boosting/inputs.py``): the check for infinite
features gives the same answers on expanded stand-in features (binned data) as on dense
ones."""

import math

import pytest
import torch

from torchrankboost.boosting.inputs import check_no_inf


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
