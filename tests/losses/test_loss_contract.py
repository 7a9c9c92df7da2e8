"""The shared loss contract, checked for EVERY ``RankingLoss`` exported by
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
"""

import pytest
import torch

from test_exponential import make_case
from loss_registry import exported_losses
from torchrankboost import Groups, registry
from torchrankboost.data import make_letor
from torchrankboost.losses import prepare_inputs

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
