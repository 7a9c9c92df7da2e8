"""The segment log-sum-exps of the pair engine (``_pair_engine/segment.py``) without autograd
(no double-where masks) give the values of the masked reference path bit for bit."""

import math

import torch

from torchrankboost._pair_engine.segment import safe_logaddexp, seg_lse

INF = math.inf
EDGE = [0.0, -0.0, 1.5, -2.25, 700.0, -700.0, 1e-300, -INF, INF, math.nan]


def _masked(fn, *xs):
    """The reference (masked) path: the same call on inputs that track gradients."""
    out = fn(*[x.clone().requires_grad_(True) for x in xs])
    return out.detach()


def _same(a, b):
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan], b[~nan]) and torch.equal(
        torch.signbit(a[~nan]), torch.signbit(b[~nan]))


def test_safe_logaddexp_lean_equals_masked_on_edge_values():
    a = torch.tensor([x for x in EDGE for _ in EDGE], dtype=torch.float64)
    b = torch.tensor([y for _ in EDGE for y in EDGE], dtype=torch.float64)
    assert _same(safe_logaddexp(a, b), _masked(safe_logaddexp, a, b))


def test_seg_lse_lean_equals_masked_with_empty_and_infinite_segments():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, generator=g, dtype=torch.float64) * 50
    x[torch.randint(0, 400, (60,), generator=g)] = -INF
    x[:7] = torch.tensor(EDGE[3:], dtype=torch.float64)
    index = torch.randint(0, 90, (400,), generator=g)  # some of the 100 segments are empty
    index[10:20] = 95  # a segment of -inf only
    x[10:20] = -INF
    assert _same(seg_lse(x, index, 100), _masked(lambda t: seg_lse(t, index, 100), x))
    X = torch.stack([x, x.flip(0)], 1)  # (n, 2) values
    assert _same(seg_lse(X, index, 100), _masked(lambda t: seg_lse(t, index, 100), X))
