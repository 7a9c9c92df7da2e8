"""ExponentialPairwiseLoss and AdaBoostLoss (+ F-skew helpers) against dense float64 oracles.

Also hosts the shared helpers of the exponential-family tests (``make_case``,
``family_oracle``), imported by test_pnorm.py / test_margin.py.
"""

import math

import pytest
import torch
from hypothesis import given, strategies as st

from dense_oracle import dense_pairs
from torchrankboost import Bipartite, ExplicitPairs, Groups
from torchrankboost import functional as TF
from torchrankboost.losses import (
    AdaBoostLoss,
    ExponentialPairwiseLoss,
    PNormPushLoss,
    f_skew,
    relative_f_skew,
    zero_skew_intercept,
)

F64 = torch.float64


# ----------------------------------------------------------------------------- helpers
def make_case(seed, *, max_groups=4, max_size=7, levels=3, weighted=False, tie_scores=True,
              scale=2.0, device="cpu"):
    """Random ragged case: empty/singleton groups, tied labels and (optionally) tied scores."""
    g = torch.Generator().manual_seed(seed)
    G = int(torch.randint(1, max_groups + 1, (1,), generator=g))
    sizes = torch.randint(0, max_size + 1, (G,), generator=g)
    n = int(sizes.sum())
    scores = torch.randn(n, generator=g, dtype=F64) * scale
    if tie_scores and n:
        k = torch.rand(n, generator=g) < 0.3
        scores[k] = scores[k].round()
    labels = torch.randint(0, levels, (n,), generator=g).to(F64)
    w = None
    if weighted:
        w = torch.rand(n, generator=g, dtype=F64) * 2
        w[torch.rand(n, generator=g) < 0.15] = 0.0
    groups = Groups.from_sizes(sizes)
    return (scores.to(device), labels.to(device), groups.to(device),
            None if w is None else w.to(device))


def random_explicit(groups, seed, *, num=12, weighted=True, duplicates=True):
    """Random explicit pairs inside queries (non-transitive, duplicates allowed), no hi == lo."""
    g = torch.Generator().manual_seed(seed + 999)
    off = groups.offsets.cpu()
    sizes = groups.sizes.cpu()
    ok = torch.nonzero(sizes >= 2).flatten()
    if ok.numel() == 0:
        return ExplicitPairs(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    q = ok[torch.randint(0, ok.numel(), (num,), generator=g)]
    a = torch.floor(torch.rand(num, generator=g, dtype=F64) * sizes[q]).long()
    b = torch.floor(torch.rand(num, generator=g, dtype=F64) * (sizes[q] - 1)).long()
    b = torch.where(b >= a, b + 1, b)
    hi, lo = off[q] + a, off[q] + b
    if duplicates:
        hi = torch.cat([hi, hi[:2]])
        lo = torch.cat([lo, lo[:2]])
    w = torch.rand(hi.numel(), generator=g, dtype=F64) * 2 if weighted else None
    return ExplicitPairs(hi, lo, w)


def family_oracle(scores, labels, groups, pairs=None, weights=None, *, p=1.0):
    """Dense float64 per-query ``F_p = Σ_lo (Σ_{hi} w e^{-(s_hi - s_lo)})^p`` and pair weight
    ``N_q = F_p`` at zero scores; differentiable in ``scores``."""
    hi, lo, w = dense_pairs(labels, groups, pairs, weights)
    s = scores.to(F64).cpu() if not scores.requires_grad else scores.to(F64)
    dev = s.device
    hi, lo, w = hi.to(dev), lo.to(dev), w.to(dev)
    n, G = s.shape[0], groups.num_groups
    gi = groups.group_index.to(dev)

    def fp(x):
        t = w * torch.exp(-(x[hi] - x[lo]))
        L = torch.zeros(n, dtype=F64, device=dev).index_add(0, lo, t)
        return torch.zeros(G, dtype=F64, device=dev).index_add(0, gi, L ** p)

    return fp(s), fp(torch.zeros_like(s).detach())


def expected(per, norm, *, log, normalize, reduction):
    has = norm > 0
    v = per / torch.where(has, norm, torch.ones_like(norm)) if normalize else per
    if log:
        v = torch.where(has, torch.log(torch.where(has, v, torch.ones_like(v))),
                        torch.zeros_like(v))
    if reduction == "none":
        return v
    if reduction == "sum":
        return v.sum()
    return v.sum() / max(int(has.sum()), 1)


def pair_spec(kind, groups, seed):
    if kind == "graded":
        return None
    if kind == "bipartite":
        return Bipartite(0.5)
    return random_explicit(groups, seed)


KINDS = ["graded", "bipartite", "explicit"]


# ----------------------------------------------------------------------------- values
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(KINDS), weighted=st.booleans(),
       log=st.booleans(), normalize=st.booleans(),
       reduction=st.sampled_from(["sum", "mean", "none"]))
def test_exponential_matches_dense_oracle(seed, kind, weighted, log, normalize, reduction):
    s, y, g, w = make_case(seed, weighted=weighted)
    pairs = pair_spec(kind, g, seed)
    loss = ExponentialPairwiseLoss(log=log, normalize=normalize, reduction=reduction)
    got = loss(s, y, g, pairs=pairs, weights=w)
    per, norm = family_oracle(s, y, g, pairs, w)
    exp = expected(per, norm, log=log, normalize=normalize, reduction=reduction)
    torch.testing.assert_close(got, exp, rtol=1e-10, atol=1e-12)
    fun = TF.exponential_pairwise_loss(s, y, g, pairs=pairs, weights=w, log=log,
                                       normalize=normalize, reduction=reduction)
    torch.testing.assert_close(fun, got)


def test_two_document_sign_convention():
    s = torch.tensor([2.0, 0.5], dtype=F64)
    y = torch.tensor([1.0, 0.0], dtype=F64)
    assert float(ExponentialPairwiseLoss()(s, y)) == pytest.approx(math.exp(-1.5))
    hi_first = ExplicitPairs([0], [1])
    assert float(ExponentialPairwiseLoss()(s, None, pairs=hi_first)) == pytest.approx(
        math.exp(-1.5))


def test_normalize_counts_crucial_pairs():
    # query 0: grades (2, 1, 1, 0) -> 2 + 1 + 2 = 5 pairs ; at zero scores F = 5
    y = torch.tensor([2, 1, 1, 0, 3, 3], dtype=F64)
    g = Groups.from_sizes([4, 2])
    z = torch.zeros(6, dtype=F64)
    none = ExponentialPairwiseLoss(reduction="none")(z, y, g)
    torch.testing.assert_close(none, torch.tensor([5.0, 0.0], dtype=F64))
    normed = ExponentialPairwiseLoss(normalize=True, reduction="none")(z, y, g)
    torch.testing.assert_close(normed, torch.tensor([1.0, 0.0], dtype=F64))


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("log,normalize", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_exponential_grad_hess_against_autograd(kind, log, normalize, reduction):
    for seed in range(4):
        s, y, g, w = make_case(seed + 100, weighted=seed % 2 == 1, max_groups=3, max_size=6)
        pairs = pair_spec(kind, g, seed)
        loss = ExponentialPairwiseLoss(log=log, normalize=normalize, reduction=reduction)
        x = s.clone().requires_grad_()
        val = loss(x, y, g, pairs=pairs, weights=w)
        (ag,) = torch.autograd.grad(val, x)
        # against the oracle's autograd
        xo = s.clone().requires_grad_()
        per, norm = family_oracle(xo, y, g, pairs, w)
        eo = expected(per, norm, log=log, normalize=normalize, reduction=reduction)
        (og,) = torch.autograd.grad(eo, xo)
        torch.testing.assert_close(ag, og, rtol=1e-9, atol=1e-11)
        gg, hd = loss.grad_hess(s, y, g, pairs=pairs, weights=w, hess="diag")
        torch.testing.assert_close(gg, ag, rtol=1e-9, atol=1e-11)
        H = torch.autograd.functional.hessian(
            lambda z: loss(z, y, g, pairs=pairs, weights=w), s)
        torch.testing.assert_close(hd, H.diagonal(), rtol=1e-8, atol=1e-10)
        _, hb = loss.grad_hess(s, y, g, pairs=pairs, weights=w, hess="bound")
        if s.numel():
            ev = torch.linalg.eigvalsh(torch.diag(hb) - H).min()
            assert ev >= -1e-9 * max(1.0, float(H.abs().max()))
        if not log and not normalize:  # RankBoost's bound is exactly 2 diag(H)
            torch.testing.assert_close(hb, 2 * hd)


def test_gradcheck_small():
    s, y, g, w = make_case(7, max_groups=2, max_size=5, weighted=True, tie_scores=False)
    for log in (False, True):
        loss = ExponentialPairwiseLoss(log=log, reduction="none")
        x = s.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda z: loss(z, y, g, weights=w), (x,))
        assert torch.autograd.gradgradcheck(lambda z: loss(z, y, g, weights=w).sum(), (x,))


# ----------------------------------------------------------------------------- numerics
def test_huge_scores_float32():
    g = torch.Generator().manual_seed(0)
    n = 200
    s = (torch.randn(n, generator=g) * 1e4).clamp(-1e4, 1e4)
    s[0], s[1] = 1e4, -1e4
    y = torch.randint(0, 4, (n,), generator=g).float()
    y[0], y[1] = 0.0, 3.0  # a badly misranked pair: margin -2e4
    groups = Groups.from_sizes([50, 150])
    x = s.clone().requires_grad_()
    lg = ExponentialPairwiseLoss(log=True)(x, y, groups)
    lg.backward()
    assert torch.isfinite(lg) and torch.isfinite(x.grad).all()
    # log-loss ≈ the largest negated margin (2e4) plus the other query's part
    assert float(lg.detach()) > 1.9e4
    x2 = s.clone().requires_grad_()
    raw = ExponentialPairwiseLoss()(x2, y, groups)
    raw.backward()
    assert not torch.isnan(raw) and raw == float("inf")
    assert not torch.isnan(x2.grad).any()
    gg, hh = ExponentialPairwiseLoss().grad_hess(s, y, groups)
    assert not torch.isnan(gg).any() and not torch.isnan(hh).any()
    gl, hl = ExponentialPairwiseLoss(log=True).grad_hess(s, y, groups, hess="bound")
    assert torch.isfinite(gl).all() and torch.isfinite(hl).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(dtype):
    s, y, g, w = make_case(3, max_groups=3, max_size=7, tie_scores=False)
    loss = ExponentialPairwiseLoss(log=True)
    x = s.to(dtype).requires_grad_()
    v = loss(x, y, g)
    v.backward()
    assert v.dtype == dtype and x.grad.dtype == dtype
    ref = loss(s.to(dtype).to(F64), y, g)
    torch.testing.assert_close(v.to(F64), ref, rtol=1e-2, atol=1e-2)


def test_single_grade_query_zero_and_no_nan():
    s = torch.tensor([1.0, 2.0, 3.0, 0.0, -1.0], dtype=F64, requires_grad=True)
    y = torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0], dtype=F64)
    g = Groups.from_sizes([3, 0, 2])
    for log in (False, True):
        loss = ExponentialPairwiseLoss(log=log, reduction="none")
        v = loss(s, y, g)
        assert float(v[0].detach()) == 0.0 and float(v[1].detach()) == 0.0
        (gr,) = torch.autograd.grad(v.sum(), s)
        assert torch.equal(gr[:3], torch.zeros(3, dtype=F64))
        gg, hh = loss.grad_hess(s.detach(), y, g)
        assert torch.equal(gg[:3], torch.zeros(3, dtype=F64)) and not torch.isnan(hh).any()


# ----------------------------------------------------------------------------- errors
def test_bad_inputs_raise():
    s = torch.randn(4, dtype=F64)
    y = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=F64)
    loss = ExponentialPairwiseLoss()
    with pytest.raises(ValueError, match="labels"):
        loss(s, y[:3])
    with pytest.raises(ValueError, match="NaN"):
        loss(torch.tensor([0.0, float("nan"), 1.0, 2.0]), y)
    with pytest.raises(ValueError, match="inf"):
        loss(torch.tensor([0.0, float("inf"), 1.0, 2.0]), y)
    with pytest.raises(ValueError, match="weights"):
        loss(s, y, weights=torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="spans two queries"):
        loss(s, None, Groups.from_sizes([2, 2]), pairs=ExplicitPairs([0], [3]))
    with pytest.raises(ValueError, match="hi == lo"):
        loss(s, None, pairs=ExplicitPairs([1], [1]))
    with pytest.raises(ValueError, match="reduction"):
        ExponentialPairwiseLoss(reduction="avg")
    with pytest.raises(ValueError, match="hess"):
        loss.grad_hess(s, y, hess="full")
    with pytest.raises(ValueError, match="pairs"):
        AdaBoostLoss()(s, y, pairs="graded")


# ----------------------------------------------------------------------------- AdaBoost
def ada_oracle(s, y, g, thr=0.0, w=None):
    s = s.to(F64)
    yy = torch.where(y > thr, 1.0, -1.0).to(F64)
    e = torch.exp(-yy * s) * (1.0 if w is None else w)
    Fp = g.segment_sum(torch.where(yy > 0, e, torch.zeros_like(e)))
    Fm = g.segment_sum(torch.where(yy < 0, e, torch.zeros_like(e)))
    return Fp, Fm


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_adaboost_value_grad_hess(log, reduction, weighted):
    for seed in range(5):
        s, y, g, w = make_case(seed + 300, weighted=weighted)
        loss = AdaBoostLoss(threshold=0.5, log=log, reduction=reduction)
        x = s.clone().requires_grad_()
        v = loss(x, y, g, weights=w)
        Fp, Fm = ada_oracle(x, y, g, 0.5, w)
        F = Fp + Fm
        has = F.detach() > 0
        per = torch.where(has, torch.log(torch.where(has, F, torch.ones_like(F))),
                          torch.zeros_like(F)) if log else F
        exp = {"none": per, "sum": per.sum(),
               "mean": per.sum() / max(int(has.sum()), 1)}[reduction]
        torch.testing.assert_close(v, exp, rtol=1e-10, atol=1e-12)
        if s.numel() == 0:
            continue
        (ag,) = torch.autograd.grad(v.sum(), x)
        red = "sum" if reduction == "none" else reduction
        l2 = AdaBoostLoss(threshold=0.5, log=log, reduction=red)
        gg, hd = l2.grad_hess(s, y, g, weights=w, hess="diag")
        torch.testing.assert_close(gg, ag, rtol=1e-9, atol=1e-11)
        H = torch.autograd.functional.hessian(lambda z: l2(z, y, g, weights=w), s)
        torch.testing.assert_close(hd, H.diagonal(), rtol=1e-8, atol=1e-10)
        _, hb = l2.grad_hess(s, y, g, weights=w, hess="bound")
        assert torch.linalg.eigvalsh(torch.diag(hb) - H).min() >= -1e-9
        # Bipartite(t) in the call overrides the constructor threshold
        v2 = AdaBoostLoss(threshold=7.0, log=log, reduction=reduction)(
            s, y, g, weights=w, pairs=Bipartite(0.5))
        torch.testing.assert_close(v2, v.detach())


@pytest.mark.parametrize("seed", range(6))
def test_adaboost_rankboost_identities(seed):
    """Rudin & Schapire (2009), §5: F̃ = F₊F₋, F² − Fskew² = 4F̃, min_c F(s + c) = 2√F̃ at c = b."""
    s, y, g, w = make_case(seed + 500, levels=2, max_size=8, weighted=seed % 2 == 0)
    thr = 0.5
    pairs = Bipartite(thr)
    Ft = ExponentialPairwiseLoss(reduction="none")(s, y, g, pairs=pairs, weights=w)
    Fp, Fm = ada_oracle(s, y, g, thr, w)
    torch.testing.assert_close(Ft, Fp * Fm, rtol=1e-10, atol=1e-12)  # T1
    F = AdaBoostLoss(threshold=thr, reduction="none")(s, y, g, weights=w)
    sk = f_skew(s, y, g, threshold=thr, weights=w)
    torch.testing.assert_close(sk, Fp - Fm, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(F * F - sk * sk, 4 * Ft, rtol=1e-9, atol=1e-9)  # T2
    b = zero_skew_intercept(s, y, g, threshold=thr, weights=w)
    both = (Fp > 0) & (Fm > 0)
    torch.testing.assert_close(b[both], 0.5 * torch.log(Fp[both] / Fm[both]))
    assert torch.all(b[(Fp > 0) & (Fm == 0)] == float("inf"))
    assert torch.all(b[(Fp == 0) & (Fm > 0)] == float("-inf"))
    assert torch.all(b[(Fp == 0) & (Fm == 0)] == 0)
    # T3: shifting each query by its b zeroes the skew and gives F = 2 sqrt(F̃)
    bb = torch.where(both, b, torch.zeros_like(b))
    s2 = s + g.broadcast(bb)
    F2 = AdaBoostLoss(threshold=thr, reduction="none")(s2, y, g, weights=w)
    torch.testing.assert_close(F2[both], 2 * torch.sqrt(Ft[both]), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(f_skew(s2, y, g, threshold=thr, weights=w)[both],
                               torch.zeros_like(F2[both]), rtol=0, atol=1e-9)
    for c in (-0.7, 0.3, 1.1):  # b is the minimiser of c -> F(s + c)
        Fc = AdaBoostLoss(threshold=thr, reduction="none")(s2 + c, y, g, weights=w)
        assert torch.all(Fc[both] >= F2[both] - 1e-12)
    torch.testing.assert_close(
        ExponentialPairwiseLoss(reduction="none")(s2, y, g, pairs=pairs, weights=w), Ft)
    rel = relative_f_skew(s, y, g, threshold=thr, weights=w)
    torch.testing.assert_close(rel[both], ((Fp - Fm) / (Fp + Fm))[both])
    torch.testing.assert_close(rel, torch.tanh(b))


def test_f_skew_pooled_and_huge_scores():
    s = torch.tensor([3.0, -1.0, 0.5, 2.0, -2.0], dtype=F64)
    y = torch.tensor([1, 0, 1, 0, 0], dtype=F64)
    g = Groups.from_sizes([2, 3])
    Fp = math.exp(-3.0) + math.exp(-0.5)
    Fm = math.exp(-1.0) + math.exp(2.0) + math.exp(-2.0)
    b = zero_skew_intercept(s, y, g, per_query=False)
    assert b.dim() == 0 and float(b) == pytest.approx(0.5 * math.log(Fp / Fm))
    assert float(zero_skew_intercept(s, y)) == pytest.approx(float(b))
    assert float(f_skew(s, y, g, per_query=False)) == pytest.approx(Fp - Fm)
    big = torch.tensor([1e4, -1e4, 5e3], dtype=torch.float32)
    yb = torch.tensor([0.0, 1.0, 1.0])
    bi = zero_skew_intercept(big, yb)
    assert torch.isfinite(bi) and float(bi) == pytest.approx(0.5 * (1e4 - 1e4), abs=1.0)
    assert float(relative_f_skew(big, yb)) == pytest.approx(math.tanh(float(bi)), abs=1e-6)
    assert not torch.isnan(f_skew(big, yb))


def test_pnorm_p1_equals_exponential_module():
    s, y, g, w = make_case(11, weighted=True)
    a = ExponentialPairwiseLoss(reduction="none")(s, y, g, weights=w)
    b = PNormPushLoss(1.0, reduction="none")(s, y, g, weights=w)
    torch.testing.assert_close(a, b)
