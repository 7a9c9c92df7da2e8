"""The node histogram (kernels/histogram.py): int64 sums of fixed-point channels, so
histogram subtraction equals the direct histogram exactly, any order of the rows gives the
same histogram bit for bit, and its shortcuts (no gather, known counts) are the plain
histogram."""

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.kernels.fixed_point import quantize
from torchrankboost.kernels.histogram import histogram


def _data(n=300, F=4, seed=0, nan=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[:, 1] = torch.round(X[:, 1] * 3)
    if nan:
        X[torch.rand(n, generator=g) < 0.15, 2] = float("nan")
    y = X[:, 0] + torch.sin(2 * X[:, 1]) + torch.nan_to_num(X[:, 2], nan=1.5) + 0.3 * torch.randn(n, generator=g)
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.2
    return X.to(dtype), y.to(dtype), w.to(dtype)


def _fixed(y, w, device):
    return quantize(torch.stack([w * y, w], 1).to(device), num_rows=y.numel()).q


def test_histogram_subtraction_equals_direct(device):
    X, y, w = _data(n=2000, F=5, seed=5)
    p = RegressionTree().prepare(X.to(device))
    q = _fixed(y, w, device)
    rows = torch.arange(2000, device=device)
    left = rows[p.codes[:, 0].long() <= 100]
    right = rows[p.codes[:, 0].long() > 100]
    hp, hl, hr = (histogram(p.codes, r, q, slots=256) for r in (rows, left, right))
    assert hp.dtype == torch.int64 and hp.shape == (3, 5, 256)
    assert torch.equal(hp - hl, hr)
    # against a dense integer reference
    dense = torch.zeros(5, 256, dtype=torch.int64)
    for f in range(5):
        dense[f].index_add_(0, p.codes[:, f].long().cpu(), q[:, 0].cpu())
    assert torch.equal(hp[0].cpu(), dense)


def test_histogram_is_the_same_for_any_row_order(device):
    """Integer sums: a permutation of the rows (or their split into parts summed apart)
    gives the same histogram bit for bit, on every device."""
    X, y, w = _data(n=5000, F=4, seed=3)
    p = RegressionTree().prepare(X.to(device))
    q = _fixed(y * 1e3, w, device)
    rows = torch.arange(0, 5000, 2, device=device)
    ref = histogram(p.codes, rows, q, slots=256)
    g = torch.Generator().manual_seed(0)
    perm = rows[torch.randperm(rows.numel(), generator=g).to(device)]
    assert torch.equal(histogram(p.codes, perm, q, slots=256), ref)
    parts = histogram(p.codes, perm[:777], q, slots=256) + histogram(p.codes, perm[777:], q, slots=256)
    assert torch.equal(parts, ref)


def test_histogram_shortcuts_are_bitwise_equal(device):
    """The histogram's shortcuts (all rows without a gather, known counts, no count
    channel) give the plain histogram bit for bit."""
    X, y, w = _data(n=3000, F=6, seed=11)
    p = RegressionTree().prepare(X.to(device))
    q = _fixed(y, w, device)
    rows = torch.arange(3000, device=device)
    sub = rows[p.codes[:, 1].long() <= 60]
    for r, all_rows in ((rows, True), (sub, False)):
        ref = histogram(p.codes, r, q, slots=256)
        got = histogram(p.codes, None if all_rows else r, q, slots=256)
        assert torch.equal(got, ref)
        got = histogram(p.codes, None if all_rows else r, q, slots=256, count=ref[2])
        assert torch.equal(got, ref)
        assert torch.equal(histogram(p.codes, r, q, slots=256, count=None), ref[:2])


def test_histogram_refuses_float_channels():
    X, y, w = _data(n=50)
    p = RegressionTree().prepare(X)
    with pytest.raises(ValueError, match="int64"):
        histogram(p.codes, None, torch.stack([y, w], 1), slots=256)
