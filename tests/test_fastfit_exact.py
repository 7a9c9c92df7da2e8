"""The fast paths of the fit give the values of the reference paths bit for bit: the
segment log-sum-exps without autograd (no double-where masks), the memoised label side of
NDCG."""

import math

import torch

from torchrankboost import metrics as M
from torchrankboost.groups import Groups
from torchrankboost.metrics._memo import new_label_memo, remembering_label_side
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


def test_ndcg_label_side_is_recomputed_after_an_in_place_change():
    g = Groups.from_sizes(torch.tensor([5, 7, 3]))
    gen = torch.Generator().manual_seed(1)
    y = torch.randint(0, 3, (15,), generator=gen).double()
    s = torch.randn(15, generator=gen, dtype=torch.float64)
    with remembering_label_side(new_label_memo()):
        first = M.ndcg_at_k(s, y, g, k=3)
        assert torch.equal(M.ndcg_at_k(s, y, g, k=3), first)  # memoised: the same value
        y[0] = 2.0 - y[0]
        y[6] = 2.0 - y[6]
        fresh = M.ndcg_at_k(s, y.clone(), g, k=3)
        assert torch.equal(M.ndcg_at_k(s, y, g, k=3), fresh)


def test_ndcg_outside_a_fit_never_reuses_a_label_side():
    """A user's NumPy labels changed in place (memory shared, no version counter) between two
    calls: outside a fit's memo the second call sees the new labels."""
    import numpy as np

    g = Groups.from_sizes(torch.tensor([4, 4]))
    y = np.array([0, 1, 2, 0, 2, 1, 0, 0], dtype=np.float64)
    s = torch.arange(8, dtype=torch.float64)
    M.ndcg_at_k(s, torch.from_numpy(y), g, k=3)
    y[:] = y[::-1].copy()
    assert torch.equal(M.ndcg_at_k(s, torch.from_numpy(y), g, k=3),
                       M.ndcg_at_k(s, torch.from_numpy(y.copy()), g, k=3))
