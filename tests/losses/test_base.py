"""The loss contract of ``losses/base.py`` (``RankingLoss`` and its bound form
``BoundLoss``), checked for EVERY loss exported by ``torchrankboost.losses``.

**The contract.** Checked for EVERY ``RankingLoss`` exported by
``torchrankboost.losses`` (new losses join automatically; give them constructor variants in
``VARIANTS`` if their defaults are not enough, and list pointwise-type losses in
``NOT_PAIR_ONLY``).

Invariances: permuting documents within queries, splitting/merging batches of queries
(``"sum"`` additive, ``"none"`` concatenates), padded + mask vs ragged input, ``none`` /
``sum`` / ``mean`` consistency (``mean`` over the queries ``per_group`` reports as having
pairs), queries without pairs give 0 loss and 0 gradient, ``grad_hess`` gradient = autograd
gradient and its ``"bound"`` dominates the autograd Hessian, extreme inputs (|s| = 1e4 in
float32, float16/bfloat16) never give NaN, CPU/CUDA parity; every registered loss refuses
infinite labels and weights.

**The bound form.** ``loss.bind(labels, groups, ...)`` evaluates exactly what the unbound
calls do. For every exported loss (constructor variants in ``BIND_VARIANTS``) and the pair
kinds / weights each one accepts: the bound value, its autograd
gradient, ``grad_hess`` (``"diag"`` and ``"bound"``) and ``value_grad_hess`` equal the
unbound calls in float64 on random ragged inputs (bitwise, or to 1e-12 where the fused
kernels order their sums differently), for several scores on one bound object and for
float32 scores on the same object; Hessians and gradchecks through the bound value; bad
scores and bad bind inputs raise ``ValueError`` (the unbound call's message for the latter).
"""

import pytest
import torch

import torchrankboost as trb
import torchrankboost.losses as L
from test_exponential import make_case, random_explicit
from loss_registry import exported_losses
from torchrankboost import Bipartite, Groups, registry
from torchrankboost.data import make_letor
from torchrankboost.losses import BoundLoss, prepare_inputs
from torchrankboost import registry
from torchrankboost.exact import exact_sum
from torchrankboost.groups import Groups

F64 = torch.float64

# constructor variants per loss class name; unknown classes use their defaults
VARIANTS = {
    "ExponentialPairwiseLoss": [{}, {"log": True}, {"normalize": True}],
    "PNormPushLoss": [{"p": 2.0}, {"p": 8.0, "log": True}],
    "SmoothMarginLoss": [{"scale": 2.0}],
    "AdaBoostLoss": [{"threshold": 0.5}, {"threshold": 0.5, "log": True}],
}
# losses that may be non-zero on a query without crucial pairs (pointwise terms)
NOT_PAIR_ONLY = {"AdaBoostLoss", "SquaredErrorLoss", "QBRankLoss", "ListNetLoss", "ListMLELoss"}


REGISTRY = exported_losses(VARIANTS)
PAIR_ONLY = [p for p in REGISTRY if p.values[0].__name__ not in NOT_PAIR_ONLY]


def _make(cls, kw, reduction="sum"):
    return cls(**kw, reduction=reduction)


def _case(seed, **kw):
    kw.setdefault("scale", 1.0)
    return make_case(seed, **kw)


def _grad(loss, s, y, g, **kw):
    x = s.clone().requires_grad_()
    v = loss(x, y, g, **kw)
    (gr,) = torch.autograd.grad(v.sum(), x, allow_unused=True)
    return v.detach(), (torch.zeros_like(s) if gr is None else gr)


def test_registry_is_not_empty():
    names = {p.values[0].__name__ for p in REGISTRY}
    assert {"ExponentialPairwiseLoss", "PNormPushLoss", "SmoothMarginLoss",
            "AdaBoostLoss"} <= names


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_permutation_within_queries(cls, kw):
    for seed in range(3):
        s, y, g, _ = _case(seed)
        key = torch.rand(s.shape[0], generator=torch.Generator().manual_seed(seed), dtype=F64)
        perm = g.argsort(key)
        loss = _make(cls, kw, "none")
        v, gr = _grad(loss, s, y, g)
        vp, grp = _grad(loss, s[perm], y[perm], g)
        torch.testing.assert_close(vp, v, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(grp, gr[perm], rtol=1e-9, atol=1e-10)
        for hess in ("diag", "bound"):
            a = _make(cls, kw).grad_hess(s, y, g, hess=hess)
            b = _make(cls, kw).grad_hess(s[perm], y[perm], g, hess=hess)
            torch.testing.assert_close(b[0], a[0][perm], rtol=1e-9, atol=1e-10)
            torch.testing.assert_close(b[1], a[1][perm], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_split_and_merge_queries(cls, kw):
    s1, y1, g1, _ = _case(11)
    s2, y2, g2, _ = _case(12)
    s = torch.cat([s1, s2])
    y = torch.cat([y1, y2])
    g = Groups.from_sizes(torch.cat([g1.sizes, g2.sizes]))
    lsum = _make(cls, kw, "sum")
    torch.testing.assert_close(lsum(s, y, g), lsum(s1, y1, g1) + lsum(s2, y2, g2),
                               rtol=1e-10, atol=1e-10)
    lnone = _make(cls, kw, "none")
    torch.testing.assert_close(lnone(s, y, g), torch.cat([lnone(s1, y1, g1), lnone(s2, y2, g2)]),
                               rtol=1e-10, atol=1e-10)
    ga, ha = lsum.grad_hess(s, y, g)
    gb1, hb1 = lsum.grad_hess(s1, y1, g1)
    gb2, hb2 = lsum.grad_hess(s2, y2, g2)
    torch.testing.assert_close(ga, torch.cat([gb1, gb2]), rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(ha, torch.cat([hb1, hb2]), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_padded_equals_ragged(cls, kw):
    s, y, g, _ = _case(21, max_groups=4)
    sp, mask = g.pad(s, fill=123.0)
    yp, _ = g.pad(y, fill=0.0)
    for red in ("sum", "mean", "none"):
        loss = _make(cls, kw, red)
        torch.testing.assert_close(loss(sp, yp, mask=mask), loss(s, y, g), rtol=1e-10,
                                   atol=1e-10)
    loss = _make(cls, kw)
    x = sp.clone().requires_grad_()
    loss(x, yp, mask=mask).backward()
    _, gr = _grad(loss, s, y, g)
    torch.testing.assert_close(x.grad[mask], gr, rtol=1e-9, atol=1e-10)
    assert torch.all(x.grad[~mask] == 0)


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_reductions_consistent(cls, kw):
    for seed in range(3):
        s, y, g, _ = _case(30 + seed)
        none = _make(cls, kw, "none")(s, y, g)
        assert none.shape == (g.num_groups,)
        torch.testing.assert_close(_make(cls, kw, "sum")(s, y, g), none.sum())
        per, has = _make(cls, kw, "none").per_group(prepare_inputs(s, y, g))
        cnt = g.num_groups if has is None else int(has.sum())
        torch.testing.assert_close(_make(cls, kw, "mean")(s, y, g),
                                   none.sum() / max(cnt, 1))
        gs, hs = _make(cls, kw, "sum").grad_hess(s, y, g)
        gn, hn = _make(cls, kw, "none").grad_hess(s, y, g)
        gm, hm = _make(cls, kw, "mean").grad_hess(s, y, g)
        torch.testing.assert_close(gn, gs)
        torch.testing.assert_close(hn, hs)
        torch.testing.assert_close(gm * max(cnt, 1), gs)
        torch.testing.assert_close(hm * max(cnt, 1), hs)


@pytest.mark.parametrize("cls,kw", PAIR_ONLY)
def test_queries_without_pairs_give_zero(cls, kw):
    # query 0: one grade; 1: empty; 2: single doc; 3: has pairs
    s = torch.tensor([1.0, -2.0, 3.0, 0.5, 0.2, -0.3, 1.5], dtype=F64)
    y = torch.tensor([2.0, 2.0, 2.0, 1.0, 0.0, 1.0, 3.0], dtype=F64)
    g = Groups.from_sizes([3, 0, 1, 3])
    loss = _make(cls, kw, "none")
    v, gr = _grad(loss, s, y, g)
    assert torch.equal(v[:3], torch.zeros(3, dtype=F64))
    assert torch.equal(gr[:4], torch.zeros(4, dtype=F64))
    assert not torch.isnan(v).any() and not torch.isnan(gr).any()
    for hess in ("diag", "bound"):
        gg, hh = loss.grad_hess(s, y, g, hess=hess)
        assert torch.equal(gg[:4], torch.zeros(4, dtype=F64))
        assert torch.equal(hh[:4], torch.zeros(4, dtype=F64))
        assert not torch.isnan(hh).any()
    # no pairs at all: 0 and mean 0 (never NaN)
    one = torch.ones(3, dtype=F64)
    for red in ("sum", "mean"):
        assert float(_make(cls, kw, red)(s[:3], one, Groups.from_sizes([3]))) == 0.0


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_grad_hess_matches_autograd_and_bound_dominates(cls, kw):
    for seed in range(3):
        s, y, g, _ = _case(60 + seed, max_groups=3, max_size=6)
        if s.numel() == 0:
            continue
        loss = _make(cls, kw)
        _, ag = _grad(loss, s, y, g)
        gg, hd = loss.grad_hess(s, y, g, hess="diag")
        torch.testing.assert_close(gg, ag, rtol=1e-8, atol=1e-10)
        H = torch.autograd.functional.hessian(lambda z: loss(z, y, g), s)
        torch.testing.assert_close(hd, H.diagonal(), rtol=1e-7, atol=1e-9)
        _, hb = loss.grad_hess(s, y, g, hess="bound")
        ev = torch.linalg.eigvalsh(torch.diag(hb) - H).min()
        assert ev >= -1e-9 * max(1.0, float(H.abs().max()))


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_extreme_float32_scores(cls, kw):
    g0 = torch.Generator().manual_seed(5)
    n = 120
    s = (torch.randn(n, generator=g0) * 1e4).clamp(-1e4, 1e4)
    s[0], s[1] = 1e4, -1e4
    y = torch.randint(0, 4, (n,), generator=g0).float()
    y[0], y[1] = 0.0, 3.0
    g = Groups.from_sizes([60, 1, 59])
    loss = _make(cls, kw)
    x = s.clone().requires_grad_()
    v = loss(x, y, g)
    v.backward()
    assert v.dtype == torch.float32
    assert not torch.isnan(v) and not torch.isnan(x.grad).any()
    if kw.get("log") or cls.__name__ == "SmoothMarginLoss":
        assert torch.isfinite(v) and torch.isfinite(x.grad).all()
    for hess in ("diag", "bound"):
        gg, hh = loss.grad_hess(s, y, g, hess=hess)
        assert not torch.isnan(gg).any() and not torch.isnan(hh).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_half_precision(cls, kw, dtype):
    s, y, g, _ = _case(77, tie_scores=False)
    loss = _make(cls, kw)
    x = s.to(dtype).requires_grad_()
    v = loss(x, y, g)
    v.backward()
    assert v.dtype == dtype and x.grad.dtype == dtype
    assert not torch.isnan(v) and not torch.isnan(x.grad).any()
    ref = loss(s.to(dtype).to(F64), y, g)
    torch.testing.assert_close(v.to(F64), ref, rtol=2e-2, atol=5e-2)
    gg, hh = loss.grad_hess(s.to(dtype), y, g)
    assert gg.dtype == dtype and not torch.isnan(gg).any() and not torch.isnan(hh).any()


@pytest.mark.parametrize("cls,kw", REGISTRY)
def test_device_parity(cls, kw, device):
    s, y, g, _ = _case(88)
    loss = _make(cls, kw, "none")
    v, gr = _grad(loss, s, y, g)
    vd, grd = _grad(loss, s.to(device), y.to(device), g.to(device))
    assert vd.device.type == device.type and grd.device.type == device.type
    torch.testing.assert_close(vd.cpu(), v, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(grd.cpu(), gr, rtol=1e-9, atol=1e-10)
    gg, hh = _make(cls, kw).grad_hess(s.to(device), y.to(device), g.to(device))
    g0, h0 = _make(cls, kw).grad_hess(s, y, g)
    torch.testing.assert_close(gg.cpu(), g0, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(hh.cpu(), h0, rtol=1e-9, atol=1e-10)


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


def _losses():
    for name in registry.names("loss"):
        kw = {"scale": 1.0} if name == "smooth_margin" else {}
        yield name, registry.resolve_loss(name, **kw)


@pytest.mark.parametrize("what", ["label", "weight"])
def test_every_loss_refuses_infinite_labels_and_weights(what):
    X, y, g = _data()
    s = torch.randn(len(y), dtype=torch.float64)
    for name, loss in _losses():
        yy, w = y.clone().double(), torch.ones(len(y), dtype=torch.float64)
        (yy if what == "label" else w)[0] = float("inf")
        with pytest.raises(ValueError, match="inf" if what == "label" else "finite"):
            loss(s, yy, g, weights=w)


# ============================== the bound form: bind(...) gives exactly the unbound calls

# the bound form: constructor variants per loss class name; unknown classes use their defaults
BIND_VARIANTS = {
    "ExponentialPairwiseLoss": [{}, {"log": True}, {"normalize": True},
                                {"log": True, "normalize": True}],
    "PNormPushLoss": [{"p": 2.0}, {"p": 3.0, "log": True, "normalize": True}],
    "SmoothMarginLoss": [{"scale": 2.0}],
    "AdaBoostLoss": [{"threshold": 0.5}, {"threshold": 0.5, "log": True}],
    "PairwiseHingeLoss": [{}, {"squared": True, "margin": 0.5}],
    "QBRankLoss": [{}, {"tau": "grade_difference", "w": 0.7}, {"w": 1.0}],
    "ListNetLoss": [{}, {"targets": "gain"}],
    "RankNetLoss": [{"sigma": 1.5}, {"block_pairs": 7}],
}
PAIR_KINDS = ["graded", "bipartite", "explicit"]
REDUCTIONS = ["sum", "mean", "none"]


BIND_REGISTRY = exported_losses(BIND_VARIANTS)


def _pairs(kind, g, seed):
    if kind == "graded":
        return None
    if kind == "bipartite":
        return Bipartite(0.5)
    return random_explicit(g, seed)


def _scores(n, seed, dtype=F64):
    gen = torch.Generator().manual_seed(1000 + seed)
    s = torch.randn(n, generator=gen, dtype=F64) * 2
    s[torch.rand(n, generator=gen) < 0.2] = 0.5  # ties
    return s.to(dtype)


def _unbound_or_error(fn):
    try:
        return fn(), None
    except ValueError as e:
        return None, str(e)


def _autograd(f, s):
    x = s.clone().requires_grad_()
    v = f(x)
    (gr,) = torch.autograd.grad(v.sum(), x, allow_unused=True)
    return v.detach(), (torch.zeros_like(s) if gr is None else gr)


def _equal(a, b, tol=0.0):
    assert a.shape == b.shape and a.dtype == b.dtype
    if tol == 0.0:
        assert torch.equal(a, b), (a, b)
    else:
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ------------------------------------------------------------------ the bound form is exact
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("kind", PAIR_KINDS)
@pytest.mark.parametrize("cls,kw", BIND_REGISTRY)
def test_bound_equals_unbound(cls, kw, kind, weighted, reduction):
    loss = cls(**kw, reduction=reduction)
    checked = 0
    for seed in range(3):
        _, y, g, w = make_case(seed, max_groups=5, max_size=8, weighted=weighted)
        p = _pairs(kind, g, seed)
        s0 = _scores(y.shape[0], seed)
        ref, err = _unbound_or_error(lambda: loss(s0, y, g, pairs=p, weights=w))
        if err is not None:  # the loss refuses this input: bind refuses it alike
            with pytest.raises(ValueError) as e:
                loss.bind(y, g, pairs=p, weights=w)
            assert str(e.value) == err
            continue
        bound = loss.bind(y, g, pairs=p, weights=w)
        assert isinstance(bound, BoundLoss) and bound.loss is loss
        assert bound.n == y.shape[0] and bound.groups == g and torch.equal(bound.labels, y)
        for k in range(3):  # several scores on one bound object
            s = _scores(y.shape[0], 10 * seed + k)

            def unbound(x):
                return loss(x, y, g, pairs=p, weights=w)

            v0, a0 = _autograd(unbound, s)
            v1, a1 = _autograd(bound, s)
            _equal(v1, v0)
            _equal(bound.value(s), v0)
            _equal(a1, a0)
            for hess in ("diag", "bound"):
                g0, h0 = loss.grad_hess(s, y, g, pairs=p, weights=w, hess=hess)
                g1, h1 = bound.grad_hess(s, hess=hess)
                _equal(g1, g0)
                _equal(h1, h0)
                # value_grad_hess: the value reduced as the gradient ("none" summed)
                vv, gv, hv = bound.value_grad_hess(s, hess=hess)
                assert vv.dim() == 0 and not vv.requires_grad
                _equal(vv, v0.sum() if reduction == "none" else v0, 1e-12)
                _equal(gv, g0, 1e-12)
                _equal(hv, h0, 1e-12)
            checked += 1
    if kind == "graded" and not weighted:
        assert checked  # every loss takes graded labels


@pytest.mark.parametrize("cls,kw", BIND_REGISTRY)
def test_float32_and_float64_scores_on_one_bound_object(cls, kw):
    """The dtype-dependent parts of the state are built per dtype, on first use."""
    _, y, g, _ = make_case(4, max_groups=5, max_size=8)
    loss = cls(**kw)
    bound = loss.bind(y, g)
    for dtype in (F64, torch.float32, F64, torch.float32):
        s = _scores(y.shape[0], 7, dtype)
        _equal(bound(s), loss(s, y, g))
        v0, a0 = _autograd(lambda x: loss(x, y, g), s)
        _, a1 = _autograd(bound, s)
        _equal(a1, a0)
        for hess in ("diag", "bound"):
            g0, h0 = loss.grad_hess(s, y, g, hess=hess)
            g1, h1 = bound.grad_hess(s, hess=hess)
            _equal(g1, g0)
            _equal(h1, h0)
            vv, gv, hv = bound.value_grad_hess(s, hess=hess)
            assert vv.dtype == dtype and gv.dtype == dtype and hv.dtype == dtype
            _equal(vv, v0, 1e-5 if dtype == torch.float32 else 1e-12)
            _equal(gv, g0, 1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("cls,kw", BIND_REGISTRY)
def test_bound_hessian_equals_unbound(cls, kw):
    """Double backward through the bound value where the loss supports it."""
    _, y, g, _ = make_case(61, max_groups=3, max_size=6)
    s = _scores(y.shape[0], 3)
    loss = cls(**kw)
    bound = loss.bind(y, g)
    H0 = torch.autograd.functional.hessian(lambda z: loss(z, y, g), s)
    H1 = torch.autograd.functional.hessian(bound, s)
    _equal(H1, H0)


@pytest.mark.parametrize("make", [
    lambda: L.ExponentialPairwiseLoss(normalize=True),
    lambda: L.PNormPushLoss(2.0, log=True),
    lambda: L.QBRankLoss(tau="grade_difference"),
    lambda: L.PairwiseHingeLoss(squared=True),
    lambda: L.RankNetLoss(),
    lambda: L.ListMLELoss(),
], ids=["exp-normalize", "pnorm-log", "qbrank-grade", "sqhinge", "ranknet", "listmle"])
def test_gradcheck_bound_value(make):
    _, y, g, w = make_case(8, max_groups=3, max_size=5, weighted=True)
    loss = make()
    wts = None if isinstance(loss, L.ListMLELoss) else w
    bound = loss.bind(y, g, weights=wts)
    # scores at least 1e-3 apart (gradcheck's finite differences must not cross a kink)
    n = y.shape[0]
    s = (torch.randperm(n, generator=torch.Generator().manual_seed(2)).to(F64) * 0.37
         ).requires_grad_()
    assert torch.autograd.gradcheck(bound, (s,))
    assert torch.autograd.gradgradcheck(bound, (s,))


def test_value_grad_hess_fuses_and_matches_on_letor_sized_input():
    """A larger case (many queries, several levels, both hinge kernels): the fused calls of
    the exponential family, QBRank and the hinge equal the separate ones."""
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 60, (80,), generator=gen)
    n = int(sizes.sum())
    g = Groups.from_sizes(sizes)
    for levels in (3, 100):  # threshold rows, then bit passes
        y = torch.randint(0, levels, (n,), generator=gen).to(F64)
        s = torch.randn(n, generator=gen, dtype=F64)
        for loss in (L.ExponentialPairwiseLoss(), L.PNormPushLoss(4.0),
                     L.QBRankLoss(), L.PairwiseHingeLoss(), L.ListMLELoss()):
            bound = loss.bind(y, g)
            for hess in ("diag", "bound"):
                v, gr, h = bound.value_grad_hess(s, hess=hess)
                _equal(v, loss(s, y, g), 1e-12)
                g0, h0 = loss.grad_hess(s, y, g, hess=hess)
                _equal(gr, g0, 1e-12)
                _equal(h, h0, 1e-12)


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("cls,kw", BIND_REGISTRY)
def test_bad_scores_raise(cls, kw):
    _, y, g, _ = make_case(3, max_groups=4, max_size=6)
    n = y.shape[0]
    bound = cls(**kw).bind(y, g)
    s = _scores(n, 0)
    bad = [s[:-1], torch.cat([s, s[:1]]), s.reshape(1, -1), s.to(torch.int64), s.tolist()]
    nan = s.clone()
    nan[0] = float("nan")
    for x in bad:
        for call in (bound, bound.value, bound.grad_hess, bound.value_grad_hess):
            with pytest.raises(ValueError, match="scores"):
                call(x)
    for call in (bound.grad_hess, bound.value_grad_hess):
        with pytest.raises(ValueError, match="scores contains NaN"):
            call(nan)
    # the bound forward reads no score on the host (no device synchronisation): a NaN
    # score gives a NaN loss instead of an error (an infinite one too)
    assert torch.isnan(bound(nan)).all()
    inf = s.clone()
    inf[1] = float("inf")
    assert torch.isnan(bound.value(inf)).all()
    with pytest.raises(ValueError, match=f"scores must have shape \\({n},\\)"):
        bound(s[:-1])
    with pytest.raises(ValueError, match="hess"):
        bound.grad_hess(s, hess="full")
    with pytest.raises(ValueError, match="hess"):
        bound.value_grad_hess(s, hess="exact")


def _bad_inputs(loss):
    """(labels, groups, pairs, weights) that the loss refuses: the generic ones."""
    _, y, g, _ = make_case(5, max_groups=4, max_size=6)
    n = y.shape[0]
    nan = y.clone()
    nan[1] = float("nan")
    inf = y.clone()
    inf[0] = float("inf")
    neg = y.clone()
    neg[2] = -1.0
    wneg = torch.ones(n, dtype=F64)
    wneg[0] = -1.0
    wnan = torch.ones(n, dtype=F64)
    wnan[0] = float("nan")
    off = g.offsets
    big = int(torch.argmax(g.sizes))
    span = trb.ExplicitPairs([int(off[0])], [n - 1]) if g.num_groups > 1 else None
    yield y.clone(), g, None, wneg
    yield y.clone(), g, None, wnan
    yield nan, g, None, None
    yield inf, g, None, None
    yield neg, g, None, None  # refused unless negative labels have a meaning
    yield y.clone(), Groups.from_sizes([n + 1]), None, None
    yield y.clone(), g, trb.ExplicitPairs([0], [n + 3]), None
    yield y.clone(), g, trb.ExplicitPairs([int(off[big])], [int(off[big])]), None
    if span is not None:
        yield y.clone(), g, span, None
    yield y.clone(), g, "listwise", None
    yield None, g, None, None


@pytest.mark.parametrize("cls,kw", BIND_REGISTRY)
def test_bind_refuses_what_the_call_refuses(cls, kw):
    loss = cls(**kw)
    refused = 0
    for y, g, p, w in _bad_inputs(loss):
        n = g.num_docs if y is None else y.shape[0]
        s = _scores(n, 1)
        _, err = _unbound_or_error(lambda: loss(s, y, g, pairs=p, weights=w))
        _, err_gh = _unbound_or_error(lambda: loss.grad_hess(s, y, g, pairs=p, weights=w))
        assert err == err_gh
        if err is None:  # accepted (e.g. negative labels of AdaBoost / SquaredError)
            bound = loss.bind(y, g, pairs=p, weights=w)
            _equal(bound(s), loss(s, y, g, pairs=p, weights=w))
            continue
        refused += 1
        with pytest.raises(ValueError) as e:
            loss.bind(y, g, pairs=p, weights=w)
        assert str(e.value) == err
    assert refused >= 6


def test_bind_specific_refusals():
    _, y, g, w = make_case(6, max_groups=4, max_size=6, weighted=True)
    ex = random_explicit(g, 6)
    cases = [
        (L.ListNetLoss(), dict(pairs=Bipartite(0.5)), "listwise"),
        (L.ListMLELoss(), dict(weights=w), "document weights"),
        (L.AdaBoostLoss(), dict(pairs=ex), "bipartite"),
        (L.SmoothMarginLoss(), dict(), "scale is required"),
    ]
    for loss, kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            loss(_scores(y.shape[0], 0), y, g, **kw)
        with pytest.raises(ValueError, match=msg):
            loss.bind(y, g, **kw)
    for loss, msg in [(L.QBRankLoss(), "labels are required by QBRankLoss"),
                      (L.SquaredErrorLoss(), "SquaredErrorLoss needs labels"),
                      (L.ListMLELoss(), "is listwise"),
                      (L.ExponentialPairwiseLoss(), None)]:
        s = _scores(y.shape[0], 0)
        if msg is None:  # explicit pairs without labels: fine for the exponential family
            _equal(loss.bind(None, g, pairs=ex)(s), loss(s, None, g, pairs=ex))
            continue
        with pytest.raises(ValueError, match=msg):
            loss(s, None, g, pairs=ex)
        with pytest.raises(ValueError, match=msg):
            loss.bind(None, g, pairs=ex)
    with pytest.raises(ValueError, match="labels must be 1-D"):
        L.ExponentialPairwiseLoss().bind(y.reshape(1, -1))
    with pytest.raises(ValueError, match="bind needs labels"):
        L.ExponentialPairwiseLoss().bind(None, pairs=ex)
    with pytest.raises(ValueError, match=r"weights must have shape"):
        L.ExponentialPairwiseLoss().bind(y, g, weights=w[:-1])


# ------------------------------------------------------------------ options and attributes
def test_smooth_margin_bind_scale():
    _, y, g, _ = make_case(9, max_groups=4, max_size=6)
    s = _scores(y.shape[0], 9)
    loss = L.SmoothMarginLoss()
    b = loss.bind(y, g, scale=3.0)
    _equal(b(s), loss(s, y, g, scale=3.0))
    for hess in ("diag", "bound"):
        g0, h0 = loss.grad_hess(s, y, g, scale=3.0, hess=hess)
        g1, h1 = b.grad_hess(s, hess=hess)
        _equal(g1, g0)
        _equal(h1, h0)
        v, g2, h2 = b.value_grad_hess(s, hess=hess)
        _equal(v, loss(s, y, g, scale=3.0), 1e-12)
        _equal(g2, g0, 1e-12)
    # a tensor scale receives its gradient through the bound value too
    sc = torch.tensor(2.0, dtype=F64, requires_grad=True)
    loss.bind(y, g, scale=sc)(s).backward()
    sc2 = torch.tensor(2.0, dtype=F64, requires_grad=True)
    loss(s, y, g, scale=sc2).backward()
    _equal(sc.grad, sc2.grad)
    with pytest.raises(ValueError, match="scale must be positive"):
        loss.bind(y, g, scale=-1.0)


def test_bound_attributes_and_defaults():
    _, y, g, w = make_case(2, max_groups=4, max_size=6, weighted=True)
    loss = L.ExponentialPairwiseLoss()
    b = loss.bind(y, g, weights=w)
    assert b.loss is loss and b.groups is g and b.n == y.shape[0]
    assert torch.equal(b.labels, y) and torch.equal(b.weights, w)
    assert isinstance(b.pairs, trb.Graded)
    assert "BoundLoss" in repr(b)
    assert trb.BoundLoss is BoundLoss
    # groups=None is one query; labels as a list
    one = loss.bind(y.tolist())
    s = _scores(y.shape[0], 2)
    _equal(one(s), loss(s, y))
    assert one.groups.num_groups == 1


def test_repeated_calls_do_not_mutate_the_state():
    """Calling the bound object (value, grad_hess, value_grad_hess, backward) in any order
    leaves its results unchanged."""
    _, y, g, w = make_case(14, max_groups=5, max_size=8, weighted=True)
    for loss in (L.ExponentialPairwiseLoss(normalize=True), L.QBRankLoss(),
                 L.PairwiseHingeLoss(squared=True), L.RankNetLoss(), L.ListNetLoss()):
        wts = None if isinstance(loss, L.ListNetLoss) else w
        b = loss.bind(y, g, weights=wts)
        s = _scores(y.shape[0], 14)
        first = [b(s)] + list(b.grad_hess(s, hess="bound")) + list(b.value_grad_hess(s))
        for k in range(3):
            _autograd(b, _scores(y.shape[0], 20 + k))
            b.value_grad_hess(_scores(y.shape[0], 30 + k), hess="bound")
        again = [b(s)] + list(b.grad_hess(s, hess="bound")) + list(b.value_grad_hess(s))
        for a, c in zip(first, again):
            _equal(c, a)


def test_bound_device_parity(device):
    _, y, g, w = make_case(15, max_groups=4, max_size=7, weighted=True)
    s = _scores(y.shape[0], 15)
    for loss in (L.ExponentialPairwiseLoss(), L.QBRankLoss()):
        b = loss.bind(y.to(device), g.to(device), weights=w.to(device))
        assert b.groups.device.type == device.type
        torch.testing.assert_close(b(s.to(device)).cpu(), loss(s, y, g, weights=w),
                                   rtol=1e-10, atol=1e-12)
        if device.type != "cpu":
            with pytest.raises(ValueError, match="bound on"):
                b(s)


# ------------------------------------------------------------------------------------------
# Every loss the booster can use is segment-local: its per-query values, gradients and
# curvatures depend on each query's own documents (in their order) only, bit for bit.
#
# Moving whole queries (another order of the queries; a subset of them, as a rank of a
# data-parallel fit holds) changes nothing once un-moved, and the reduced value is the same
# float (the per-query values summed exactly). What used to break it: prefix sums taken
# over the whole batch and differenced at the query starts, elementwise functions whose last
# bit depended on the position of the value in its tensor (``torch.sigmoid``, ``log1p``,
# ``softplus``, ``exp2`` on the CPU), a one-query batch summed by another code path.


F64 = torch.float64
#: the stochastic loss draws its noise over the documents of the whole batch (a seeded draw
#: in document order): a query's draws depend on where it sits, by definition
STOCHASTIC = {n for n in registry.names("loss")
              if getattr(registry.lookup("loss", n).resolve(), "stochastic", False)}
LOSSES = [n for n in registry.names("loss") if n not in STOCHASTIC]
#: losses whose batched (G, L) tables (L the longest query of the batch) sum a query's
#: pairs in an order that depends on L and on the row blocks: the same under another order
#: of the queries, not always on a subset of them (a rank's shard)
PADDED = {"ranknet"}


def batch(seed: int = 0):
    """Queries of 1 to 70 documents, grades 0-4, scores with exact ties, ``-0.0`` and a wide
    range of magnitudes, positive document weights."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 70, (37,), generator=gen)
    sizes[:3] = torch.tensor([1, 2, 9])
    n = int(sizes.sum())
    labels = torch.randint(0, 5, (n,), generator=gen).to(F64)
    scores = torch.randn(n, generator=gen, dtype=F64) * torch.exp(
        2 * torch.randn(n, generator=gen, dtype=F64))
    scores[::5] = torch.round(scores[::5])  # ties
    scores[::11] = -0.0
    weights = torch.rand(n, generator=gen, dtype=F64) + 0.1
    return Groups.from_sizes(sizes), labels, scores, weights


def take(groups: Groups, queries, *xs):
    """The documents of ``queries`` (in that order, each query's rows in their order)."""
    off = groups.offsets
    idx = torch.cat([torch.arange(int(off[q]), int(off[q + 1])) for q in queries])
    return Groups.from_sizes(groups.sizes[list(queries)]), [x[idx] for x in xs]


def per_query_docs(groups: Groups, x):
    return [x[int(groups.offsets[q]):int(groups.offsets[q + 1])] for q in range(len(groups))]


def evaluate(name: str, groups, labels, scores, weights):
    """Per-query values (``reduction="none"``), the summed value and its terms, and the
    gradient and curvature of every kind the loss has."""
    extra = {"scale": 2.0} if name == "smooth_margin" else {}
    loss = registry.create("loss", name, reduction="none", **extra)
    kw = {} if name in ("squared_error",) else {"weights": weights}
    try:
        bound = loss.bind(labels, groups, **kw)
    except ValueError:  # a loss without document weights
        bound = loss.bind(labels, groups)
    out = {"per": bound.value(scores).detach()}
    loss.reduction = "sum"
    bound = loss.bind(labels, groups, **kw) if "weights" in kw and bound.weights is not None \
        else loss.bind(labels, groups)
    out["value"] = bound.value(scores).detach()
    vt = bound.value_terms(scores)
    assert torch.equal(vt.value(exact_sum(vt.terms.detach())), out["value"])
    for hess in ("diag", "bound"):
        try:
            out["g_" + hess], out["h_" + hess] = bound.grad_hess(scores, hess=hess)
        except (ValueError, NotImplementedError):
            pass
    return out


def same(a, b) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int64), b.view(torch.int64)) \
        if a.dtype == F64 else torch.equal(a, b)


@pytest.mark.parametrize("name", LOSSES)
def test_queries_in_another_order_or_apart_give_the_same_bits(name):
    groups, labels, scores, weights = batch()
    G = len(groups)
    ref = evaluate(name, groups, labels, scores, weights)
    perm = torch.randperm(G, generator=torch.Generator().manual_seed(1)).tolist()
    subsets = [] if name in PADDED else [list(range(G // 2, G)), [G - 1]]
    for queries in [perm] + subsets:
        sub, xs = take(groups, queries, labels, scores, weights)
        got = evaluate(name, sub, *xs)
        for key, want in ref.items():
            if key == "value":
                if queries is perm:
                    assert same(got[key], want), key
                continue
            if key == "per":
                assert same(got[key], want[queries]), (key, queries[:3])
                continue
            mine = per_query_docs(sub, got[key])
            theirs = per_query_docs(groups, want)
            for q, m in zip(queries, mine):
                assert same(m, theirs[q]), (key, q)


@pytest.mark.parametrize("make", [lambda: trb.LambdaLoss(), lambda: trb.LambdaRankExpLoss(),
                                  lambda: trb.ApproxNDCGLoss(), lambda: trb.NeuralNDCGLoss(n_iter=5)])
def test_exponential_gain_labels_are_bounded(make):
    """Labels whose gain ``2^l − 1`` overflows (1e9 gave NaN values and gradients, silently)
    are one ValueError saying the limit; labels at the limit give finite values and
    gradients, float32 scores included."""
    from torchrankboost.losses.base import MAX_GAIN_LABEL

    loss = make()
    g = Groups.from_sizes([4, 3])
    for top in (1e9, MAX_GAIN_LABEL + 1.0, 2.0 ** 80):
        y = torch.tensor([0.0, 1.0, top, 2.0, 0.0, 3.0, 1.0])
        with pytest.raises(ValueError, match=f"at most {MAX_GAIN_LABEL}") as err:
            loss(torch.zeros(7), y, g)
        assert "\n" not in str(err.value)
    y = torch.tensor([0.0, 1.0, float(MAX_GAIN_LABEL), 2.0, 0.0, MAX_GAIN_LABEL - 1.0, 1.0])
    for dt in (torch.float32, torch.float64):
        s = torch.linspace(-1, 1, 7, dtype=dt).requires_grad_()
        value = loss(s, y, g)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(s.grad).all()
