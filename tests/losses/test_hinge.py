"""PairwiseHingeLoss and the sort + prefix-sum pair kernel against a dense all-pairs oracle."""

import math

import pytest
import torch
from hypothesis import given, strategies as st

import torchrankboost as trb
from torchrankboost import Bipartite, ExplicitPairs, Graded, Groups, PairwiseHingeLoss
from torchrankboost import functional as F
import torchrankboost._pair_engine.sorted_pairs as sorted_pairs
from torchrankboost._pair_engine.levels import label_levels
from torchrankboost._pair_engine.sorted_pairs import active_pair_sums, hinge_terms

from dense_oracle import check_against_oracle, dense_pairs, pair_group


# ----------------------------------------------------------------------------- oracle
def oracle_per_group(scores, labels, groups, *, margin=1.0, squared=False, pairs=None,
                     weights=None, pair_list=None):
    """Dense all-pairs per-query loss in float64 (autograd-able through ``scores``);
    ``pair_list`` reuses a ``dense_pairs`` result."""
    hi, lo, w = pair_list if pair_list is not None else dense_pairs(labels, groups, pairs, weights)
    s = scores
    dev = s.device
    hi, lo, w = hi.to(dev), lo.to(dev), w.to(dev)
    x = torch.relu(margin - (s[hi] - s[lo]))
    phi = x * x if squared else x
    pg = pair_group(hi, groups).to(dev)
    return torch.zeros(groups.num_groups, dtype=s.dtype, device=dev).index_add(0, pg, w * phi)


def oracle_hessian(n, labels, groups, scores, *, margin, pairs=None, weights=None):
    """Exact Hessian of the squared hinge (float64, dense n × n)."""
    hi, lo, w = dense_pairs(labels, groups, pairs, weights)
    s = scores.detach().double().cpu()
    act = (margin - (s[hi] - s[lo])) > 0
    H = torch.zeros(n, n, dtype=torch.float64)
    for i, j, c, a in zip(hi.tolist(), lo.tolist(), w.tolist(), act.tolist()):
        if a:
            H[i, i] += 2 * c
            H[j, j] += 2 * c
            H[i, j] -= 2 * c
            H[j, i] -= 2 * c
    return H


def make_case(sizes, seed, *, levels=4, grid=True, dtype=torch.float64, device="cpu"):
    g = Groups.from_sizes(sizes, device=device)
    n = g.num_docs
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, levels, (n,), generator=gen).double()
    if grid:  # half-integers: many score ties and pairs exactly at the kink
        s = torch.randint(-4, 5, (n,), generator=gen).double() / 2
    else:
        s = torch.randn(n, generator=gen, dtype=torch.float64)
    w = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    return g, s.to(device=device, dtype=dtype), labels.to(device), w.to(device)


sizes_st = st.lists(st.integers(0, 9), min_size=1, max_size=5)
PAIRS = [Graded(), Bipartite(1.0)]


# ----------------------------------------------------------------------------- kernel
@given(sizes_st, st.integers(0, 10**6), st.integers(1, 40), st.sampled_from([-0.5, 0.0, 1.0]))
def test_active_pair_sums_match_dense(sizes, seed, levels, delta):
    g, a, labels, _ = make_case(sizes, seed, levels=levels)
    b = a + delta
    n = g.num_docs
    gen = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(n, 2, generator=gen, dtype=torch.float64)
    Y = torch.randn(n, 3, generator=gen, dtype=torch.float64)
    lev, K, has = label_levels(labels, g, Graded())
    gi = g.group_index
    same = gi[:, None] == gi[None, :]
    A = (same & (labels[:, None] > labels[None, :]) & (b[None, :] > a[:, None])).double()
    lo, up = active_pair_sums(a, b, lev, K, g, list(X.t()), list(Y.t()))
    lo, up = torch.stack(lo, 1), torch.stack(up, 1)
    torch.testing.assert_close(lo, A @ X, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(up, A.t() @ Y, rtol=1e-12, atol=1e-12)
    exp_has = torch.tensor([bool((labels[o0:o1].unique().numel()) > 1)
                            for o0, o1 in zip(g.offsets[:-1].tolist(), g.offsets[1:].tolist())],
                           dtype=torch.bool)
    assert torch.equal(has.cpu(), exp_has)


KERNELS = {"rows": (2, 10**9), "bits": (10**9, 10**9)}  # (_LEVELS_MIN_K, _LEVELS_MAX_K)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("squared", [False, True])
@given(sizes_st, st.integers(0, 10**6), st.sampled_from([1, 2, 3, 5, 9, 70]),
       st.sampled_from([-0.5, 0.0, "same", 1.0]), st.booleans())
def test_hinge_terms_both_kernels_match_dense(kernel, squared, sizes, seed, levels, delta,
                                              weighted):
    """Both implementations of ``hinge_terms`` (threshold rows for few label levels, bit
    passes for many) give the dense loss per query, gradient and Hessian diagonal, with
    pairs exactly at the kink (half-integer grid) inactive. ``"same"`` passes ``b`` as the
    very tensor ``a`` (QBRank's grade-difference margin), which takes an n-item sort."""
    g, a, labels, w = make_case(sizes, seed, levels=levels)
    w = w if weighted else None
    alias = delta == "same"
    delta = 0.0 if alias else delta
    b = a if alias else a + delta
    lev, K, _ = label_levels(labels, g, Graded())
    old = sorted_pairs._LEVELS_MIN_K, sorted_pairs._LEVELS_MAX_K
    sorted_pairs._LEVELS_MIN_K, sorted_pairs._LEVELS_MAX_K = KERNELS[kernel]
    try:
        loss, gr, hd = hinge_terms(a, b, lev, K, g, w, squared=squared, need_hess=True)
        ad = a.clone().requires_grad_()  # differentiable inputs: the autograd-friendly path
        loss2, _, _ = hinge_terms(ad, ad if alias else ad + delta, lev, K, g, w,
                                  squared=squared)
        # (no pairs at all: a constant zero loss, zero gradient)
        (gr2,) = (torch.autograd.grad(loss2.sum(), ad) if loss2.requires_grad
                  else (torch.zeros_like(a),))
    finally:
        sorted_pairs._LEVELS_MIN_K, sorted_pairs._LEVELS_MAX_K = old
    gi = g.group_index
    ww = torch.ones_like(a) if w is None else w
    c = ((gi[:, None] == gi[None, :]) & (labels[:, None] > labels[None, :])).double()
    c = c * ww[:, None] * ww[None, :]
    x = torch.relu(b[None, :] - a[:, None])  # pair (i upper, j lower)
    act = (x > 0).double()
    phi, d1, d2 = (x * x, 2 * x, 2 * act) if squared else (x, act, torch.zeros_like(x))
    ref = torch.zeros(g.num_groups, dtype=torch.float64).index_add(0, gi, (c * phi).sum(1))
    gref = -(c * d1).sum(1) + (c * d1).sum(0)
    href = (c * d2).sum(1) + (c * d2).sum(0)
    torch.testing.assert_close(loss, ref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(gr, gref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(hd, href, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(loss2, ref, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(gr2, gref, rtol=1e-11, atol=1e-11)


@given(sizes_st, st.integers(0, 10**6), st.sampled_from([1, 2, 5, 70]), st.booleans())
def test_pair_degree_both_paths_match_dense(sizes, seed, levels, weighted):
    """The score-free pair degree behind the curvature bounds: the (query, level) table and
    the all-pairs-active dominance sums both equal the dense degree."""
    g, _, labels, w = make_case(sizes, seed, levels=levels)
    u = w if weighted else None
    lev, K, _ = label_levels(labels, g, Graded())
    gi = g.group_index
    ww = torch.ones(g.num_docs, dtype=torch.float64) if u is None else u
    c = ((gi[:, None] == gi[None, :]) & (labels[:, None] > labels[None, :])).double()
    c = c * ww[:, None] * ww[None, :]
    ref = c.sum(1) + c.sum(0)
    like = torch.zeros(g.num_docs, dtype=torch.float64)
    ones = torch.ones_like(like)
    uu = ones if u is None else u
    torch.testing.assert_close(sorted_pairs.pair_degree(lev, K, g, u, u, like), ref)
    torch.testing.assert_close(sorted_pairs._pair_degree_sorted(lev, K, g, uu, uu), ref)
    if g.num_docs:
        torch.testing.assert_close(sorted_pairs._pair_degree_table(lev, K, g, uu, uu), ref)


# ----------------------------------------------------------------------------- values + gradients
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("pairs", PAIRS, ids=["graded", "bipartite"])
@given(sizes=sizes_st, seed=st.integers(0, 10**6), margin=st.sampled_from([1.0, 0.0, -0.5, 2.5]),
       weighted=st.booleans())
def test_value_and_autograd_match_oracle(squared, pairs, sizes, seed, margin, weighted):
    g, s, labels, w = make_case(sizes, seed)
    w = w if weighted else None
    loss = PairwiseHingeLoss(margin=margin, squared=squared, reduction="none")
    # kinks included: our convention (inactive at the kink) equals autograd of relu
    gr = check_against_oracle(
        lambda x: loss(x, labels, g, pairs=pairs, weights=w),
        lambda x: oracle_per_group(x, labels, g, margin=margin, squared=squared, pairs=pairs,
                                   weights=w), s, tol=1e-10)
    # closed form equals autograd
    gc, _ = loss.grad_hess(s, labels, g, pairs=pairs, weights=w)
    torch.testing.assert_close(gc, gr, rtol=1e-10, atol=1e-10)


def test_device(device):
    g, s, labels, w = make_case([5, 0, 7, 3], 3, device=device)
    for squared in (False, True):
        loss = PairwiseHingeLoss(squared=squared, reduction="none")
        out = loss(s, labels, g, weights=w)
        assert out.device.type == device.type
        ref = oracle_per_group(s, labels, g, squared=squared, weights=w)
        torch.testing.assert_close(out, ref)
        gr, h = loss.grad_hess(s, labels, g, weights=w, hess="bound")
        assert gr.device.type == device.type and h.device.type == device.type


@pytest.mark.parametrize("squared", [False, True])
def test_gradcheck_away_from_kinks(squared):
    g, s, labels, w = make_case([6, 4, 5], 11, grid=False)
    loss = PairwiseHingeLoss(squared=squared, margin=0.3, reduction="none")
    s = s.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: loss(x, labels, g, weights=w), (s,))
    if squared:
        assert torch.autograd.gradgradcheck(lambda x: loss(x, labels, g, weights=w), (s,))


@pytest.mark.parametrize("pairs", PAIRS, ids=["graded", "bipartite"])
@pytest.mark.parametrize("weighted", [False, True])
def test_squared_hessian_diag_and_bound(pairs, weighted):
    g, s, labels, w = make_case([7, 5, 1, 6], 5, grid=False)
    w = w if weighted else None
    n = g.num_docs
    loss = PairwiseHingeLoss(squared=True, margin=0.7)
    H = torch.autograd.functional.hessian(lambda x: loss(x, labels, g, pairs=pairs, weights=w), s)
    Href = oracle_hessian(n, labels, g, s, margin=0.7, pairs=pairs, weights=w)
    torch.testing.assert_close(H, Href, rtol=1e-10, atol=1e-10)
    _, d = loss.grad_hess(s, labels, g, pairs=pairs, weights=w, hess="diag")
    torch.testing.assert_close(d, torch.diagonal(H), rtol=1e-10, atol=1e-10)
    _, bnd = loss.grad_hess(s, labels, g, pairs=pairs, weights=w, hess="bound")
    assert torch.linalg.eigvalsh(torch.diag(bnd) - H).min() >= -1e-9
    # the bound does not depend on the scores and is 4 × the weighted all-pairs degree
    _, bnd2 = loss.grad_hess(torch.randn(n, dtype=torch.float64), labels, g, pairs=pairs,
                             weights=w, hess="bound")
    torch.testing.assert_close(bnd, bnd2)
    hi, lo, c = dense_pairs(labels, g, pairs, w)
    deg = torch.zeros(n, dtype=torch.float64).index_add(0, hi, c).index_add(0, lo, c)
    torch.testing.assert_close(bnd, 4 * deg)


def test_plain_hinge_curvature_is_zero():
    g, s, labels, _ = make_case([6, 6], 2, grid=False)
    loss = PairwiseHingeLoss()
    for kind in ("diag", "bound"):
        _, h = loss.grad_hess(s, labels, g, hess=kind)
        assert torch.equal(h, torch.zeros_like(s))
    H = torch.autograd.functional.hessian(lambda x: loss(x, labels, g), s)
    assert torch.count_nonzero(H) == 0


# ----------------------------------------------------------------------------- explicit pairs
@pytest.mark.parametrize("squared", [False, True])
def test_explicit_pairs(squared):
    g, s, labels, w = make_case([5, 6], 8)
    hi = torch.tensor([0, 1, 4, 5, 7, 10, 2])
    lo = torch.tensor([3, 0, 2, 9, 6, 5, 2])  # includes a self pair (always at margin)
    pw = torch.rand(7, dtype=torch.float64) + 0.5
    pairs = ExplicitPairs(hi, lo, pw)
    loss = PairwiseHingeLoss(squared=squared, margin=0.5, reduction="none")
    gr = check_against_oracle(
        lambda x: loss(x, None, g, pairs=pairs, weights=w),
        lambda x: oracle_per_group(x, None, g, margin=0.5, squared=squared, pairs=pairs,
                                   weights=w), s)
    gc, d = loss.grad_hess(s, None, g, pairs=pairs, weights=w)
    torch.testing.assert_close(gc, gr)
    if squared:
        s3 = torch.randn(g.num_docs, dtype=torch.float64)
        H = torch.autograd.functional.hessian(lambda x: loss(x, None, g, pairs=pairs,
                                                             weights=w).sum(), s3)
        _, d = loss.grad_hess(s3, None, g, pairs=pairs, weights=w)
        torch.testing.assert_close(d, torch.diagonal(H))
        _, bnd = loss.grad_hess(s3, None, g, pairs=pairs, weights=w, hess="bound")
        assert torch.linalg.eigvalsh(torch.diag(bnd) - H).min() >= -1e-9


def test_bipartite_equals_explicit_pair_list():
    g, s, labels, _ = make_case([8, 9], 4, grid=False)
    hi, lo, _ = dense_pairs(labels, g, Bipartite(1.0))
    a = PairwiseHingeLoss(squared=True)(s, labels, g, pairs=Bipartite(1.0))
    b = PairwiseHingeLoss(squared=True)(s, None, g, pairs=ExplicitPairs(hi, lo))
    torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------- API details
def test_reductions_and_empty_queries():
    g = Groups.from_sizes([3, 0, 2, 4])
    labels = torch.tensor([0., 1, 2, 1, 1, 0, 3, 0, 1])  # query 2 has one grade: no pairs
    s = torch.randn(9, dtype=torch.float64, requires_grad=True)
    per = PairwiseHingeLoss(reduction="none")(s, labels, g)
    assert per.shape == (4,) and per[1] == 0 and per[2] == 0
    tot = PairwiseHingeLoss()(s, labels, g)
    torch.testing.assert_close(tot, per.sum())
    mean = PairwiseHingeLoss(reduction="mean")(s, labels, g)
    torch.testing.assert_close(mean, per.sum() / 2)
    (gr,) = torch.autograd.grad(mean, s)
    assert torch.all(gr[3:5] == 0)
    gc, _ = PairwiseHingeLoss(reduction="mean").grad_hess(s, labels, g)
    torch.testing.assert_close(gc, gr)
    # all queries single-grade: exactly 0 and a zero gradient, never NaN
    s0 = torch.randn(4, requires_grad=True)
    z = PairwiseHingeLoss(reduction="mean")(s0, torch.ones(4))
    z.backward()
    assert z.item() == 0 and torch.equal(s0.grad, torch.zeros(4))
    # empty input
    e = PairwiseHingeLoss(squared=True)(torch.zeros(0), torch.zeros(0))
    assert e.item() == 0


def test_padded_input_and_functional_twin():
    g, s, labels, w = make_case([4, 6], 9)
    sp, mask = g.pad(s)
    lp, _ = g.pad(labels)
    wp, _ = g.pad(w)
    a = PairwiseHingeLoss(squared=True)(s, labels, g, weights=w)
    b = PairwiseHingeLoss(squared=True)(sp, lp, weights=wp, mask=mask)
    c = F.pairwise_hinge_loss(s, labels, g, squared=True, weights=w)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    assert trb.PairwiseHingeLoss is PairwiseHingeLoss


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_inputs_accumulate_wider(dtype):
    g, s, labels, _ = make_case([50, 30], 6, grid=False)
    s = s.to(dtype)
    for squared in (False, True):
        sl = s.clone().requires_grad_()
        out = PairwiseHingeLoss(squared=squared)(sl, labels, g)
        assert out.dtype == dtype
        out.backward()
        assert sl.grad.dtype == dtype and torch.isfinite(sl.grad).all()
        ref = oracle_per_group(s.double(), labels, g, squared=squared).sum()
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)


def test_extreme_scores_float32():
    gen = torch.Generator().manual_seed(0)
    g = Groups.from_sizes([200, 100])
    labels = torch.randint(0, 5, (300,), generator=gen).double()
    s = ((torch.rand(300, generator=gen) * 2 - 1) * 1e4).float()
    pl = dense_pairs(labels, g)
    for squared in (False, True):
        sl = s.clone().requires_grad_()
        out = PairwiseHingeLoss(squared=squared)(sl, labels, g)
        out.backward()
        assert torch.isfinite(out) and torch.isfinite(sl.grad).all()
        ref = oracle_per_group(s.double(), labels, g, squared=squared, pair_list=pl).sum()
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=0)
        gref = torch.func.grad(lambda x: oracle_per_group(x, labels, g, squared=squared,
                                                          pair_list=pl).sum())(s.double())
        torch.testing.assert_close(sl.grad.double(), gref, rtol=1e-5, atol=1e-3 * gref.abs().max())
    # nearly sorted scores at 1e4 with tiny violations: the query centring keeps it accurate
    s = torch.linspace(1e4, 1e4 - 3, 300, dtype=torch.float64)
    lab = torch.arange(300, 0, -1).double()
    out = PairwiseHingeLoss(squared=True)(s, lab)
    x = torch.relu(1.0 - (s[:, None] - s[None, :]))
    ref = ((lab[:, None] > lab[None, :]).double() * x * x).sum()
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)


def test_many_levels_real_valued_labels():
    g, s, _, w = make_case([40, 33], 12, grid=False)
    labels = torch.randn(g.num_docs, dtype=torch.float64) + 10.0  # ~60 levels (grades >= 0)
    labels[::5] = labels[1::5][: labels[::5].numel()]  # some ties
    for squared in (False, True):
        out = PairwiseHingeLoss(squared=squared, reduction="none")(s, labels, g, weights=w)
        ref = oracle_per_group(s, labels, g, squared=squared, weights=w)
        torch.testing.assert_close(out, ref)


def test_larger_query_against_vectorised_dense():
    gen = torch.Generator().manual_seed(1)
    n = 600
    g = Groups.from_sizes([n])
    labels = torch.randint(0, 5, (n,), generator=gen).double()
    s = torch.randn(n, generator=gen, dtype=torch.float64).requires_grad_()
    P = (labels[:, None] > labels[None, :]).double()
    x = torch.relu(1.0 - (s[:, None] - s[None, :]))
    ref = (P * x * x).sum()
    out = PairwiseHingeLoss(squared=True)(s, labels, g)
    torch.testing.assert_close(out, ref)
    (gr,) = torch.autograd.grad(out, s)
    (gref,) = torch.autograd.grad(ref, s)
    torch.testing.assert_close(gr, gref)


def test_errors():
    s = torch.randn(4)
    lab = torch.tensor([0., 1, 0, 1])
    for bad in (float("nan"), float("inf"), "1", None, True):
        with pytest.raises(ValueError, match="margin"):
            PairwiseHingeLoss(margin=bad)
    with pytest.raises(ValueError, match="squared"):
        PairwiseHingeLoss(squared=1)
    with pytest.raises(ValueError, match="reduction"):
        PairwiseHingeLoss(reduction="avg")
    with pytest.raises(ValueError, match="scores"):
        PairwiseHingeLoss()(torch.tensor([0.0, math.nan, 1.0, 2.0]), lab)
    with pytest.raises(ValueError, match="labels"):
        PairwiseHingeLoss()(s, torch.tensor([0., 1]))
    with pytest.raises(ValueError, match="weights"):
        PairwiseHingeLoss()(s, lab, weights=torch.tensor([1.0, -1, 1, 1]))
    with pytest.raises(ValueError, match="hess"):
        PairwiseHingeLoss().grad_hess(s, lab, hess="full")
    # margin given as a 0-d tensor is accepted
    assert PairwiseHingeLoss(margin=torch.tensor(0.5)).margin == 0.5
