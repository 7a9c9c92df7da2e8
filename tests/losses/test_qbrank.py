"""QBRankLoss against a dense all-pairs oracle (value, gradients, Hessian diagonal, bound)."""

import pytest
import torch
from hypothesis import given, strategies as st

import torchrankboost as trb
from torchrankboost import Bipartite, ExplicitPairs, Graded, Groups, PairwiseHingeLoss, QBRankLoss
from torchrankboost import functional as F

from dense_oracle import check_against_oracle, dense_pairs, pair_group


def oracle_per_group(s, labels, groups, *, w=0.5, tau=1.0, c=1.0, pairs=None, weights=None):
    """w/2 Σ_pairs c_ij relu(s_lo − s_hi + τ)² + (1−w)/2 Σ ω (l − s)², per query, float64."""
    hi, lo, pw = dense_pairs(labels, groups, pairs, weights)
    dev = s.device
    hi, lo, pw = hi.to(dev), lo.to(dev), pw.to(dev)
    if tau == "grade_difference":
        t = c * (labels[hi] - labels[lo]).double()
    else:
        t = tau
    x = torch.relu(s[lo] - s[hi] + t)
    G = groups.num_groups
    pg = pair_group(hi, groups).to(dev)
    out = torch.zeros(G, dtype=s.dtype, device=dev).index_add(0, pg, (w / 2) * pw * x * x)
    if w < 1:
        om = torch.ones_like(s) if weights is None else weights.double()
        r = (labels.double() - s)
        out = out + groups.segment_sum((1 - w) / 2 * om * r * r)
    return out


def oracle_hessian(s, labels, groups, *, w, tau, c=1.0, pairs=None, weights=None):
    n = s.numel()
    hi, lo, pw = dense_pairs(labels, groups, pairs, weights)
    t = c * (labels[hi] - labels[lo]).double() if tau == "grade_difference" else torch.full(
        (hi.numel(),), float(tau), dtype=torch.float64)
    act = (s[lo] - s[hi] + t) > 0
    H = torch.zeros(n, n, dtype=torch.float64)
    for i, j, cij, a in zip(hi.tolist(), lo.tolist(), pw.tolist(), act.tolist()):
        if a:
            H[i, i] += w * cij
            H[j, j] += w * cij
            H[i, j] -= w * cij
            H[j, i] -= w * cij
    om = torch.ones(n, dtype=torch.float64) if weights is None else weights.double()
    return H + torch.diag((1 - w) * om)


def make_case(sizes, seed, *, levels=5, grid=True, device="cpu"):
    g = Groups.from_sizes(sizes, device=device)
    n = g.num_docs
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, levels, (n,), generator=gen).double()
    if grid:  # half-integers: ties and exact kinks (τ and grade differences are integers)
        s = torch.randint(-6, 7, (n,), generator=gen).double() / 2
    else:
        s = torch.randn(n, generator=gen, dtype=torch.float64) * 2
    wts = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    return g, s.to(device), labels.to(device), wts.to(device)


TAUS = [1.0, "grade_difference"]


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("pairs", [Graded(), Bipartite(1.0)], ids=["graded", "bipartite"])
@given(sizes=st.lists(st.integers(0, 9), min_size=1, max_size=5), seed=st.integers(0, 10**6),
       w=st.sampled_from([0.0, 0.5, 0.8, 1.0]), weighted=st.booleans(),
       c=st.sampled_from([1.0, 0.5]))
def test_value_and_gradients_match_oracle(tau, pairs, sizes, seed, w, weighted, c):
    g, s, labels, wts = make_case(sizes, seed)
    wts = wts if weighted else None
    loss = QBRankLoss(w=w, tau=tau, c=c, reduction="none")
    gr = check_against_oracle(
        lambda x: loss(x, labels, g, pairs=pairs, weights=wts),
        lambda x: oracle_per_group(x, labels, g, w=w, tau=tau, c=c, pairs=pairs, weights=wts),
        s, tol=1e-10)
    gc, _ = loss.grad_hess(s, labels, g, pairs=pairs, weights=wts)
    torch.testing.assert_close(gc, gr, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tau", TAUS)
@pytest.mark.parametrize("weighted", [False, True])
def test_hessian_diag_and_zheng_bound(tau, weighted):
    g, s, labels, wts = make_case([6, 7, 1, 5], 21, grid=False)
    wts = wts if weighted else None
    loss = QBRankLoss(w=0.6, tau=tau)
    H = torch.autograd.functional.hessian(lambda x: loss(x, labels, g, weights=wts), s)
    Href = oracle_hessian(s, labels, g, w=0.6, tau=tau, weights=wts)
    torch.testing.assert_close(H, Href, rtol=1e-10, atol=1e-10)
    _, d = loss.grad_hess(s, labels, g, weights=wts, hess="diag")
    torch.testing.assert_close(d, torch.diagonal(H), rtol=1e-10, atol=1e-10)
    _, bnd = loss.grad_hess(s, labels, g, weights=wts, hess="bound")
    assert torch.linalg.eigvalsh(torch.diag(bnd) - H).min() >= -1e-9
    # Zheng's global bound: 2w · (weighted pair degree) + (1 − w) ω, independent of scores
    hi, lo, c = dense_pairs(labels, g, None, wts)
    deg = torch.zeros(s.numel(), dtype=torch.float64).index_add(0, hi, c).index_add(0, lo, c)
    om = torch.ones_like(s) if wts is None else wts
    torch.testing.assert_close(bnd, 2 * 0.6 * deg + 0.4 * om)
    # the bound dominates the Hessian at any other scores too
    s2 = torch.randn_like(s) * 3
    H2 = torch.autograd.functional.hessian(lambda x: loss(x, labels, g, weights=wts), s2)
    assert torch.linalg.eigvalsh(torch.diag(bnd) - H2).min() >= -1e-9


def test_gradcheck_away_from_kinks():
    g, s, labels, wts = make_case([5, 6, 4], 3, grid=False)
    for tau in TAUS:
        loss = QBRankLoss(w=0.7, tau=tau, reduction="none")
        x = s.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda v: loss(v, labels, g, weights=wts), (x,))
        assert torch.autograd.gradgradcheck(lambda v: loss(v, labels, g, weights=wts), (x,))


def test_special_cases():
    g, s, labels, _ = make_case([6, 9, 4], 4, grid=False)
    # w = 0: least squares on the labels (GBT); w = 1 with constant τ: half the squared hinge
    torch.testing.assert_close(QBRankLoss(w=0.0)(s, labels, g), 0.5 * ((labels - s) ** 2).sum())
    torch.testing.assert_close(QBRankLoss(w=1.0, tau=0.7)(s, labels, g),
                               0.5 * PairwiseHingeLoss(margin=0.7, squared=True)(s, labels, g))
    # grade difference with c = 0 is a zero margin
    torch.testing.assert_close(QBRankLoss(tau="grade_difference", c=0.0)(s, labels, g),
                               QBRankLoss(tau=0.0)(s, labels, g))
    # functional twin and top-level export
    torch.testing.assert_close(F.qbrank_loss(s, labels, g, w=0.3, tau="grade_difference"),
                               QBRankLoss(w=0.3, tau="grade_difference")(s, labels, g))
    assert trb.QBRankLoss is QBRankLoss


def test_single_grade_queries_keep_the_label_part():
    g = Groups.from_sizes([3, 4])
    labels = torch.tensor([2., 2, 2, 0, 1, 2, 3])
    s = torch.tensor([0.5, 1.0, 3.0, 0.0, 0.1, 0.2, 0.3], dtype=torch.float64, requires_grad=True)
    per = QBRankLoss(reduction="none")(s, labels, g)
    torch.testing.assert_close(per[0], 0.25 * ((labels[:3] - s[:3]) ** 2).sum())
    per.sum().backward()
    torch.testing.assert_close(s.grad[:3], -0.5 * (labels[:3] - s[:3]).detach())
    # "mean" counts every query that contributes a term (here both), or only those with a
    # pair when w == 1
    torch.testing.assert_close(QBRankLoss(reduction="mean")(s, labels, g), per.sum() / 2)
    p1 = QBRankLoss(w=1.0, reduction="none")(s, labels, g)
    assert p1[0] == 0
    torch.testing.assert_close(QBRankLoss(w=1.0, reduction="mean")(s, labels, g), p1[1])
    gm, hm = QBRankLoss(reduction="mean").grad_hess(s, labels, g)
    gs, hs = QBRankLoss().grad_hess(s, labels, g)
    torch.testing.assert_close(gm, gs / 2)
    torch.testing.assert_close(hm, hs / 2)


def test_explicit_pairs():
    g, s, labels, wts = make_case([5, 6], 7)
    hi = torch.tensor([0, 1, 4, 5, 7, 10])
    lo = torch.tensor([3, 0, 2, 9, 6, 5])
    pw = torch.rand(6, dtype=torch.float64) + 0.5
    pairs = ExplicitPairs(hi, lo, pw)
    for tau in TAUS:
        loss = QBRankLoss(w=0.4, tau=tau, reduction="none")
        gr = check_against_oracle(
            lambda x: loss(x, labels, g, pairs=pairs, weights=wts),
            lambda x: oracle_per_group(x, labels, g, w=0.4, tau=tau, pairs=pairs, weights=wts),
            s)
        gc, _ = loss.grad_hess(s, labels, g, pairs=pairs, weights=wts)
        torch.testing.assert_close(gc, gr)
        s3 = torch.randn_like(s)
        H = torch.autograd.functional.hessian(
            lambda x: loss(x, labels, g, pairs=pairs, weights=wts).sum(), s3)
        _, d = loss.grad_hess(s3, labels, g, pairs=pairs, weights=wts)
        torch.testing.assert_close(d, torch.diagonal(H))
        _, bnd = loss.grad_hess(s3, labels, g, pairs=pairs, weights=wts, hess="bound")
        assert torch.linalg.eigvalsh(torch.diag(bnd) - H).min() >= -1e-9
    # labels may be omitted with explicit pairs only when w == 1 and τ is a number
    QBRankLoss(w=1.0)(s, None, g, pairs=pairs)
    with pytest.raises(ValueError, match="labels"):
        QBRankLoss(w=0.5)(s, None, g, pairs=pairs)
    with pytest.raises(ValueError, match="labels"):
        QBRankLoss(w=1.0, tau="grade_difference")(s, None, g, pairs=pairs)


def test_device(device):
    g, s, labels, wts = make_case([4, 0, 8], 5, device=device)
    loss = QBRankLoss(tau="grade_difference", reduction="none")
    out = loss(s, labels, g, weights=wts)
    assert out.device.type == device.type
    torch.testing.assert_close(out, oracle_per_group(s, labels, g, tau="grade_difference",
                                                     weights=wts))
    gr, h = loss.grad_hess(s, labels, g, weights=wts, hess="bound")
    assert gr.device.type == device.type and h.device.type == device.type


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_and_extreme_inputs(dtype):
    gen = torch.Generator().manual_seed(2)
    g = Groups.from_sizes([60, 40])
    labels = torch.randint(0, 5, (100,), generator=gen).double()
    big = 1e4 if dtype == torch.float32 else 2.0  # the fp16 loss itself must fit in fp16
    s = ((torch.rand(100, generator=gen) * 2 - 1) * big).to(dtype)
    sl = s.clone().requires_grad_()
    out = QBRankLoss(tau="grade_difference")(sl, labels, g)
    assert out.dtype == dtype
    out.backward()
    assert torch.isfinite(out) and sl.grad.dtype == dtype and torch.isfinite(sl.grad).all()
    ref = oracle_per_group(s.double(), labels, g, tau="grade_difference").sum()
    torch.testing.assert_close(out.double(), ref, rtol=1e-2 if dtype != torch.float32 else 1e-5,
                               atol=0)


def test_errors():
    for bad in (-0.1, 1.5, float("nan"), "0.5", None):
        with pytest.raises(ValueError, match="w"):
            QBRankLoss(w=bad)
    for bad in ("grade", "", float("inf"), None):
        with pytest.raises(ValueError, match="tau"):
            QBRankLoss(tau=bad)
    with pytest.raises(ValueError, match="c must"):
        QBRankLoss(tau="grade_difference", c=float("nan"))
    with pytest.raises(ValueError, match="reduction"):
        QBRankLoss(reduction="max")
    s = torch.randn(4)
    with pytest.raises(ValueError, match="labels"):
        QBRankLoss()(s, None)
    with pytest.raises(ValueError, match="scores"):
        QBRankLoss()(torch.tensor([1.0, float("inf"), 0, 0]), torch.zeros(4))
