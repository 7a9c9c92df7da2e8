"""PNormPushLoss against a dense float64 oracle; curvature bound; large p; the log gradient at
huge scores; validation."""

import math

import pytest
import torch
from hypothesis import given, strategies as st

from test_exponential import KINDS, expected, family_oracle, make_case, pair_spec
from torchrankboost import Bipartite, ExplicitPairs, Groups
from torchrankboost import functional as TF
from torchrankboost.losses import ExponentialPairwiseLoss, PNormPushLoss

F64 = torch.float64


@given(seed=st.integers(0, 10_000), kind=st.sampled_from(KINDS), weighted=st.booleans(),
       p=st.sampled_from([1.0, 1.5, 2.0, 3.0, 8.0]), log=st.booleans(),
       normalize=st.booleans(), reduction=st.sampled_from(["sum", "mean", "none"]))
def test_pnorm_matches_dense_oracle(seed, kind, weighted, p, log, normalize, reduction):
    s, y, g, w = make_case(seed, weighted=weighted, scale=1.0)
    pairs = pair_spec(kind, g, seed)
    loss = PNormPushLoss(p, log=log, normalize=normalize, reduction=reduction)
    got = loss(s, y, g, pairs=pairs, weights=w)
    per, norm = family_oracle(s, y, g, pairs, w, p=p)
    exp = expected(per, norm, log=log, normalize=normalize, reduction=reduction)
    torch.testing.assert_close(got, exp, rtol=1e-9, atol=1e-12)
    fun = TF.pnorm_push_loss(s, y, g, p=p, pairs=pairs, weights=w, log=log,
                             normalize=normalize, reduction=reduction)
    torch.testing.assert_close(fun, got)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("p", [1.0, 1.5, 2.0, 4.0])
@pytest.mark.parametrize("log", [False, True])
def test_pnorm_grad_hess_against_autograd(kind, p, log):
    for seed in range(4):
        s, y, g, w = make_case(seed + 40, weighted=seed % 2 == 0, max_groups=3, max_size=6,
                               scale=0.7)
        pairs = pair_spec(kind, g, seed)
        loss = PNormPushLoss(p, log=log, normalize=seed == 3, reduction="sum")
        x = s.clone().requires_grad_()
        (ag,) = torch.autograd.grad(loss(x, y, g, pairs=pairs, weights=w), x)
        xo = s.clone().requires_grad_()
        per, norm = family_oracle(xo, y, g, pairs, w, p=p)
        eo = expected(per, norm, log=log, normalize=seed == 3, reduction="sum")
        (og,) = torch.autograd.grad(eo, xo)
        torch.testing.assert_close(ag, og, rtol=1e-9, atol=1e-10)
        gg, hd = loss.grad_hess(s, y, g, pairs=pairs, weights=w, hess="diag")
        torch.testing.assert_close(gg, ag, rtol=1e-9, atol=1e-10)
        Ho = torch.autograd.functional.hessian(
            lambda z: expected(*family_oracle(z, y, g, pairs, w, p=p), log=log,
                               normalize=seed == 3, reduction="sum"), s)
        torch.testing.assert_close(hd, Ho.diagonal(), rtol=1e-8, atol=1e-9)
        H = torch.autograd.functional.hessian(lambda z: loss(z, y, g, pairs=pairs, weights=w), s)
        torch.testing.assert_close(H, Ho, rtol=1e-8, atol=1e-9)
        _, hb = loss.grad_hess(s, y, g, pairs=pairs, weights=w, hess="bound")
        if s.numel():
            ev = torch.linalg.eigvalsh(torch.diag(hb) - H).min()
            assert ev >= -1e-9 * max(1.0, float(H.abs().max())), (ev, p, kind)


def test_pnorm_bound_is_needed_and_diag_is_not_a_bound():
    """For p > 1, diag(H) alone is not an upper bound (rank-one terms), the returned one is."""
    y = torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=F64)
    s = torch.tensor([0.1, -0.2, 0.3, 0.0], dtype=F64)
    loss = PNormPushLoss(4.0)
    H = torch.autograd.functional.hessian(lambda z: loss(z, y), s)
    _, hd = loss.grad_hess(s, y, hess="diag")
    _, hb = loss.grad_hess(s, y, hess="bound")
    assert torch.linalg.eigvalsh(torch.diag(hd) - H).min() < -1e-6
    assert torch.linalg.eigvalsh(torch.diag(hb) - H).min() >= -1e-9


def test_bipartite_factorisation_and_normalised_form():
    """(C2): ln F_p = p·LSE(−s₊) + LSE(p s₋); (C3) from normalize=True, log=True."""
    g = torch.Generator().manual_seed(1)
    pos, neg = torch.randn(30, generator=g, dtype=F64), torch.randn(20, generator=g, dtype=F64)
    s = torch.cat([pos, neg])
    y = torch.cat([torch.ones(30), torch.zeros(20)]).to(F64)
    for p in (1.0, 2.5, 16.0, 64.0):
        ln = PNormPushLoss(p, log=True)(s, y, pairs="bipartite")
        ref = p * torch.logsumexp(-pos, 0) + torch.logsumexp(p * neg, 0)
        torch.testing.assert_close(ln, ref)
        lnn = PNormPushLoss(p, log=True, normalize=True)(s, y, pairs="bipartite") / p
        ref_n = (torch.logsumexp(-pos, 0) - math.log(30)
                 + (torch.logsumexp(p * neg, 0) - math.log(20)) / p)
        torch.testing.assert_close(lnn, ref_n)


@pytest.mark.parametrize("p", [1.0, 8.0, 64.0])
def test_large_p_and_huge_scores_float32(p):
    g = torch.Generator().manual_seed(2)
    n = 300
    s = (torch.randn(n, generator=g) * 5e3).clamp(-1e4, 1e4)
    s[:2] = torch.tensor([1e4, -1e4])
    y = torch.randint(0, 5, (n,), generator=g).float()
    groups = Groups.from_sizes([100, 1, 199])
    x = s.clone().requires_grad_()
    v = PNormPushLoss(p, log=True)(x, y, groups)
    v.backward()
    assert torch.isfinite(v) and torch.isfinite(x.grad).all()
    for hess in ("diag", "bound"):
        gg, hh = PNormPushLoss(p, log=True).grad_hess(s, y, groups, hess=hess)
        assert torch.isfinite(gg).all() and torch.isfinite(hh).all()
        gr, hr = PNormPushLoss(p).grad_hess(s, y, groups, hess=hess)
        assert not torch.isnan(gr).any() and not torch.isnan(hr).any()
    x2 = s.clone().requires_grad_()
    raw = PNormPushLoss(p)(x2, y, groups)
    raw.backward()
    assert not torch.isnan(raw) and not torch.isnan(x2.grad).any()
    # the float32 log-loss agrees with float64
    ref = PNormPushLoss(p, log=True)(s.double(), y, groups)
    assert abs(float(v.detach()) - float(ref)) <= 1e-5 * abs(float(ref)) + 1e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pnorm_half_precision(dtype):
    s, y, g, _ = make_case(5, tie_scores=False)
    x = s.to(dtype).requires_grad_()
    v = PNormPushLoss(4.0, log=True)(x, y, g)
    v.backward()
    assert v.dtype == dtype and torch.isfinite(v) and torch.isfinite(x.grad).all()
    ref = PNormPushLoss(4.0, log=True)(s.to(dtype).double(), y, g)
    torch.testing.assert_close(v.double(), ref, rtol=1e-2, atol=5e-2)


def test_p1_equals_exponential_pairwise():
    for seed in range(5):
        s, y, g, w = make_case(seed + 70, weighted=True)
        for pairs in (None, Bipartite(0.5)):
            for log in (False, True):
                a = ExponentialPairwiseLoss(log=log, reduction="none")(s, y, g, pairs=pairs,
                                                                       weights=w)
                b = PNormPushLoss(1, log=log, reduction="none")(s, y, g, pairs=pairs, weights=w)
                torch.testing.assert_close(a, b)


def test_explicit_non_transitive_cycle():
    s = torch.tensor([0.3, -0.1, 0.7], dtype=F64)
    pairs = ExplicitPairs([0, 1, 2], [1, 2, 0])  # 0 > 1 > 2 > 0
    p = 3.0
    L = torch.exp(torch.stack([-(s[0] - s[1]), -(s[1] - s[2]), -(s[2] - s[0])]))
    v = PNormPushLoss(p)(s, None, pairs=pairs)
    torch.testing.assert_close(v, (L ** p).sum())


@pytest.mark.parametrize("bad", [0.5, 0.0, -1.0, float("inf"), float("nan"), "x"])
def test_bad_p_raises(bad):
    with pytest.raises(ValueError, match="p must"):
        PNormPushLoss(bad)


@pytest.mark.parametrize("scale", [1e30, 1e100, 1e300])
def test_pnorm_push_log_gradient_at_huge_scores_matches_moderate_scores(scale):
    from torchrankboost.losses import PNormPushLoss

    loss = PNormPushLoss(p=4, log=True)
    y = torch.tensor([1., 0, 1, 0, 0])
    base = torch.tensor([0.3, 0.1, -0.2, 0.5, -0.4], dtype=torch.float64)
    g_ref, _ = loss.grad_hess(base * 1e3, y)
    g, h = loss.grad_hess(base * scale, y)
    assert torch.isfinite(g).all() and torch.isfinite(h).all()
    torch.testing.assert_close(g, g_ref, atol=1e-9, rtol=0)
    assert sorted(g.tolist())[0] == -4.0 and sorted(g.tolist())[-1] == 4.0
    s = (base * scale).requires_grad_(True)
    loss(s, y).backward()
    torch.testing.assert_close(s.grad, g_ref, atol=1e-9, rtol=0)
