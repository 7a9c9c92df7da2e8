"""ListNet, ListMLE and RankNet (``losses/listwise.py``) against dense per-query oracles
(float64, gradcheck); their padded fast paths (``losses/_padded.py``) against the segmented
paths on ragged lists; RankNet warns of its quadratic cost on a long query."""

import math
import warnings

import pytest
import torch
from hypothesis import given, strategies as st

from torchrankboost import Bipartite, ExplicitPairs, Groups
from torchrankboost.losses import ListMLELoss, ListNetLoss, RankNetLoss

from dense_oracle import dense_pairs


def make_case(seed, *, max_groups=4, max_size=7, levels=3):
    gen = torch.Generator().manual_seed(seed)
    G = int(torch.randint(1, max_groups + 1, (1,), generator=gen))
    sizes = torch.randint(1, max_size + 1, (G,), generator=gen)
    g = Groups.from_sizes(sizes)
    n = g.num_docs
    s = torch.randn(n, generator=gen, dtype=torch.float64) * 2
    y = torch.randint(0, levels, (n,), generator=gen).to(torch.float64)
    w = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
    return s, y, g, w


def listnet_oracle(s, y, g, targets):
    out, has = [], []
    for a, b in zip(g.offsets[:-1].tolist(), g.offsets[1:].tolist()):
        sq, yq = s[a:b], y[a:b]
        if targets == "softmax":
            P = torch.softmax(yq, 0)
        else:
            gain = 2.0 ** yq - 1
            if float(gain.sum()) == 0:
                out.append(s.new_zeros(())), has.append(False)
                continue
            P = gain / gain.sum()
        out.append(-(P * torch.log_softmax(sq, 0)).sum())
        has.append(True)
    return torch.stack(out), torch.tensor(has)


def listmle_oracle(s, y, g):
    out = []
    for a, b in zip(g.offsets[:-1].tolist(), g.offsets[1:].tolist()):
        order = sorted(range(a, b), key=lambda i: (-float(y[i]), -float(s[i])))  # ties: score
        sq = s[order]
        out.append(sum(torch.logsumexp(sq[k:], 0) - sq[k] for k in range(len(order))))
    return torch.stack([torch.as_tensor(v, dtype=s.dtype) for v in out])


def ranknet_oracle(s, y, g, pairs=None, weights=None, sigma=1.0):
    hi, lo, w = dense_pairs(y, g, pairs, weights)
    per = torch.zeros(g.num_groups, dtype=s.dtype)
    vals = w * torch.nn.functional.softplus(sigma * (s[lo] - s[hi]))
    return per.index_add(0, g.group_index[hi], vals), torch.bincount(
        g.group_index[hi], minlength=g.num_groups) > 0


def reduce(per, has, reduction):
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / max(int(has.sum()), 1)


def check_grad_hess(loss, s, y, g, **kw):
    """Closed-form grad_hess against autograd on the reduced loss; bound ⪰ diag."""
    x = s.clone().requires_grad_(True)
    fn = lambda z: loss(z, y, g, **kw).sum()  # noqa: E731
    H = torch.autograd.functional.hessian(fn, s)
    (gr,) = torch.autograd.grad(fn(x), x)
    g1, h1 = loss.grad_hess(s, y, g, hess="diag", **kw)
    g2, h2 = loss.grad_hess(s, y, g, hess="bound", **kw)
    torch.testing.assert_close(g1, gr, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(g2, gr, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h1, torch.diagonal(H), rtol=1e-9, atol=1e-12)
    assert bool(torch.linalg.eigvalsh(torch.diag(h2) - H).min() > -1e-9)
    assert bool((h2 >= h1 - 1e-12).all())
    return h1


@given(seed=st.integers(0, 10_000), targets=st.sampled_from(["softmax", "gain"]),
       reduction=st.sampled_from(["sum", "mean", "none"]))
def test_listnet_matches_oracle(seed, targets, reduction):
    s, y, g, _ = make_case(seed)
    loss = ListNetLoss(targets=targets, reduction=reduction)
    per, has = listnet_oracle(s, y, g, targets)
    torch.testing.assert_close(loss(s, y, g), reduce(per, has, reduction), rtol=1e-10, atol=1e-12)
    if reduction != "none":
        check_grad_hess(loss, s, y, g)


@given(seed=st.integers(0, 10_000), reduction=st.sampled_from(["sum", "mean", "none"]))
def test_listmle_matches_oracle(seed, reduction):
    s, y, g, _ = make_case(seed)
    loss = ListMLELoss(reduction=reduction)
    per = listmle_oracle(s, y, g)
    torch.testing.assert_close(loss(s, y, g), reduce(per, g.sizes > 1, reduction),
                               rtol=1e-10, atol=1e-12)
    if reduction != "none":
        check_grad_hess(loss, s, y, g)


@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["graded", "bipartite", "explicit"]),
       weighted=st.booleans(), reduction=st.sampled_from(["sum", "mean", "none"]),
       block=st.sampled_from([1, 5, 1 << 22]))
def test_ranknet_matches_oracle(seed, kind, weighted, reduction, block):
    s, y, g, w = make_case(seed, levels=4)
    w = w if weighted else None
    if kind == "explicit":
        hi, lo, _ = dense_pairs(y, g)
        pairs = ExplicitPairs(hi, lo, torch.rand(len(hi), dtype=torch.float64))
    else:
        pairs = Bipartite(1.0) if kind == "bipartite" else None
    loss = RankNetLoss(sigma=1.5, block_pairs=block, reduction=reduction)
    per, has = ranknet_oracle(s, y, g, pairs, w, sigma=1.5)
    torch.testing.assert_close(loss(s, y, g, pairs=pairs, weights=w), reduce(per, has, reduction),
                               rtol=1e-10, atol=1e-12)
    if reduction != "none":
        h = check_grad_hess(loss, s, y, g, pairs=pairs, weights=w)
        hi, lo, pw = dense_pairs(y, g, pairs, w)
        p = torch.sigmoid(1.5 * (s[lo] - s[hi]))
        ref = torch.zeros_like(s).index_add(0, hi, 2.25 * pw * p * (1 - p)).index_add(
            0, lo, 2.25 * pw * p * (1 - p))
        if reduction == "mean":
            ref = ref / max(int(has.sum()), 1)
        torch.testing.assert_close(h, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", [ListNetLoss(), ListNetLoss(targets="gain"), ListMLELoss(),
                                  RankNetLoss(block_pairs=3)])
def test_gradcheck(loss):
    s, y, g, _ = make_case(7, max_groups=3, max_size=5)
    x = s.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: loss(z, y, g), (x,))
    assert torch.autograd.gradgradcheck(lambda z: loss(z, y, g), (x,))


def test_padded_input_equals_flat():
    s, y, g, _ = make_case(11)
    for loss in (ListNetLoss(), ListMLELoss(), RankNetLoss()):
        flat = loss(s, y, g)
        (S, mask), (Y, _) = g.pad(s), g.pad(y)
        padded = loss(S, Y, mask=mask)
        torch.testing.assert_close(padded, flat)


def test_huge_scores_stay_finite():
    g = Groups.from_sizes([3, 2])
    y = torch.tensor([2.0, 1, 0, 1, 0], dtype=torch.float64)
    s = torch.tensor([1e4, -1e4, 0, 5e3, -5e3], dtype=torch.float64)
    for loss in (ListNetLoss(), ListMLELoss(), RankNetLoss()):
        v = loss(s, y, g)
        gr, h = loss.grad_hess(s, y, g)
        assert math.isfinite(float(v)) and bool(torch.isfinite(gr).all())
        assert bool(torch.isfinite(h).all())


def test_bad_inputs():
    s, y, g, w = make_case(3)
    with pytest.raises(ValueError, match="listwise"):
        ListNetLoss()(s, y, g, pairs="bipartite")
    with pytest.raises(ValueError, match="weights"):
        ListMLELoss()(s, y, g, weights=w)
    with pytest.raises(ValueError, match="targets"):
        ListNetLoss(targets="exp")
    with pytest.raises(ValueError, match="sigma"):
        RankNetLoss(sigma=0)


# --------------------------------------------------------------------------- label sign rule
@pytest.mark.parametrize("name", ["ExponentialPairwiseLoss", "PNormPushLoss", "SmoothMarginLoss",
                                  "PairwiseHingeLoss", "QBRankLoss", "ListNetLoss",
                                  "ListMLELoss", "RankNetLoss"])
def test_allrank_padding_without_a_mask_is_refused(name):
    import torchrankboost.losses as L

    loss = getattr(L, name)(**({"scale": 1.0} if name == "SmoothMarginLoss" else {}))
    s = torch.tensor([0.3, 0.2, 0.1, 0.0, 0.5, 0.4], dtype=torch.float64)
    y = torch.tensor([2.0, 1.0, -1.0, -1.0, 1.0, 0.0], dtype=torch.float64)  # -1: padding
    g = Groups.from_sizes([4, 2])
    with pytest.raises(ValueError, match="mask="):
        loss(s, y, g)
    with pytest.raises(ValueError, match="mask="):
        loss.grad_hess(s, y, g)
    S, mask = g.pad(s)
    Y, _ = g.pad(y, fill=-1.0)
    mask = mask & (Y >= 0)  # the same padding, declared: fine
    flat = mask.flatten()
    torch.testing.assert_close(loss(S, Y, mask=mask),
                               loss(S.flatten()[flat], Y.flatten()[flat],
                                    Groups.from_padded(mask)))


def test_negative_labels_where_a_loss_gives_them_a_meaning():
    import torchrankboost.losses as L

    s = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64)
    pm = torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)
    assert float(L.AdaBoostLoss()(s, pm)) > 0          # +/-1 labels around the threshold
    assert float(L.SquaredErrorLoss()(s, pm)) > 0      # a real target
    assert float(L.ExponentialPairwiseLoss()(s, pm, pairs="bipartite")) > 0


def test_listnet_gain_targets_do_not_overflow_for_large_labels():
    g = Groups.from_sizes([3, 2])
    s = torch.tensor([0.3, 0.2, 0.1, 0.5, -0.5], dtype=torch.float64)
    y = torch.tensor([2000.0, 1000.0, 0.0, 3.0, 1.0], dtype=torch.float64)
    loss = ListNetLoss(targets="gain", reduction="none")
    v = loss(s, y, g)
    assert bool(torch.isfinite(v).all())
    # query 0: all the mass on the label-2000 document; query 1 as with small labels
    torch.testing.assert_close(v[0], -torch.log_softmax(s[:3], 0)[0])
    small = loss(s, torch.tensor([2.0, 1.0, 0.0, 3.0, 1.0], dtype=torch.float64), g)
    torch.testing.assert_close(v[1], small[1])


def test_listmle_padded_and_segmented_scans_agree(monkeypatch):
    """The right-aligned padded scan and the segmented scan give the same loss, gradient and
    curvature (the padded one is taken while padding is cheap)."""
    import torchrankboost.losses.listwise as LW

    s, y, g, _ = make_case(5, max_groups=6, max_size=9)
    loss = ListMLELoss()
    x = s.clone().requires_grad_(True)
    v = loss(x, y, g)
    (gr,) = torch.autograd.grad(v, x)
    gh = loss.grad_hess(s, y, g)
    monkeypatch.setattr(LW, "_PAD_MIN", 0)
    monkeypatch.setattr(LW, "_PAD_FACTOR", 0)  # force the segmented scan
    x2 = s.clone().requires_grad_(True)
    v2 = loss(x2, y, g)
    (gr2,) = torch.autograd.grad(v2, x2)
    torch.testing.assert_close(v, v2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gr, gr2, rtol=1e-12, atol=1e-12)
    for a, b in zip(gh, loss.grad_hess(s, y, g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_ranknet_warns_of_its_quadratic_cost_on_a_long_query():
    n = 10_000
    y = torch.zeros(n)
    y[:10] = 1.0
    with pytest.warns(UserWarning, match=r"query 0 has 10,000 documents and 99,900 preferred "
                                         r"pairs; RankNet costs O\(n²\)"):
        RankNetLoss().bind(y, Groups.single(n))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RankNetLoss().bind(y[:5000], Groups.single(5000))


def ragged_case(seed, sizes=(5, 3, 7, 1), levels=4):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(list(sizes))
    n = g.num_docs
    s = torch.randn(n, generator=gen, dtype=torch.float64) * 1.5
    y = torch.randint(0, levels, (n,), generator=gen).to(torch.float64)
    return s, y, g


@pytest.mark.parametrize("loss", [ListNetLoss(), ListNetLoss(targets="gain"), ListMLELoss(),
                                  RankNetLoss(block_pairs=5)])
def test_padded_fast_path_equals_segmented(loss, monkeypatch):
    import torchrankboost.losses.listwise as LW

    s, y, g = ragged_case(6, sizes=(6, 1, 9, 4, 0, 3), levels=3)
    s[1] = s[0]  # an exact tie of scores
    def run():
        x = s.clone().requires_grad_()
        v = loss(x, y, g)
        return (v, *torch.autograd.grad(v, x))
    a = run()
    monkeypatch.setattr(LW, "_PAD_MIN", 0)
    monkeypatch.setattr(LW, "_PAD_FACTOR", 0)
    b = run()
    for u, w in zip(a, b):
        torch.testing.assert_close(u, w, rtol=1e-12, atol=1e-12)


def test_repeated_calls_see_new_labels_and_options():
    s, y, g = ragged_case(7)
    loss = ListNetLoss()
    v1 = loss(s, y, g)
    y2 = y.clone()
    y2[0] += 1
    assert not torch.equal(loss(s, y2, g), v1)
    y.add_(0.0)  # in place (new version), same values
    torch.testing.assert_close(loss(s, y, g), v1)
    loss.targets = "gain"
    assert not torch.equal(loss(s, y, g), v1)
