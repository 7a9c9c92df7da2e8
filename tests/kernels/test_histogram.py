"""The node histogram (kernels/histogram.py): histogram subtraction equals the direct
histogram, and its shortcuts (no gather, known counts, unit-weight counts, the packed complex
scatter) give the plain histogram bit for bit."""

import torch

from torchrankboost.boosting.learners import RegressionTree
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


def test_histogram_subtraction_equals_direct(device):
    X, y, w = _data(n=2000, F=5, seed=5)
    tree = RegressionTree()
    p = tree.prepare(X.to(device))
    vals = torch.stack([(w * y), w], 1).to(device)
    packed = torch.complex(vals[:, 0], vals[:, 1])
    rows = torch.arange(2000, device=device)
    left = rows[p.codes[:, 0].long() <= 100]
    right = rows[p.codes[:, 0].long() > 100]
    for pk in (packed, None):
        hp, hl, hr = (histogram(p.codes, r, vals, slots=256, packed=pk) for r in (rows, left, right))
        assert torch.allclose(hp[:2] - hl[:2], hr[:2], atol=1e-10) and torch.equal(hp[2] - hl[2], hr[2])
    # direct histogram against a dense count
    dense = torch.zeros(5, 256, dtype=torch.float64)
    for f in range(5):
        dense[f].index_add_(0, p.codes[:, f].long().cpu(), (w * y))
    assert torch.allclose(hp[0].cpu(), dense)


def test_histogram_shortcuts_are_bitwise_equal(device):
    """The histogram's shortcuts (all rows without a gather, known counts, unit-weight counts,
    the packed complex scatter) give the plain histogram bit for bit (same accumulation order)."""
    X, y, w = _data(n=3000, F=6, seed=11)
    p = RegressionTree().prepare(X.to(device))
    vals = torch.stack([(w * y), w], 1).to(device)
    pk = torch.complex(vals[:, 0], vals[:, 1])
    rows = torch.arange(3000, device=device)
    sub = rows[p.codes[:, 1].long() <= 60]
    for r, all_rows in ((rows, True), (sub, False)):
        ref = histogram(p.codes, r, vals, slots=256)
        got = histogram(p.codes, None if all_rows else r, vals, slots=256, packed=pk)
        assert torch.equal(got, ref)
        got = histogram(p.codes, None if all_rows else r, vals, slots=256, packed=pk, count=ref[2])
        assert torch.equal(got, ref)
        assert torch.equal(histogram(p.codes, r, vals, slots=256, count=None), ref[:2])
    ones = torch.ones(3000, dtype=torch.float64, device=device)
    v1 = torch.stack([y.to(device), ones], 1)
    ref = histogram(p.codes, sub, v1, slots=256)
    got = histogram(p.codes, sub, v1, slots=256, packed=torch.complex(v1[:, 0], v1[:, 1]), count="weight")
    assert torch.equal(got, ref)
