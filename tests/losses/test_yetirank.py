"""YetiRankLoss: the gradient, curvature and value equal a dense oracle that enumerates the
perturbed orderings of small lists one by one (the same generator draws); seeds make runs
reproducible (module calls, the bound loss's per-round draws, whole boosted fits); the
weighted logistic part passes gradcheck / gradgradcheck; CatBoost's PairLogit is RankNet's
loss over all label-ordered pairs divided by their count."""

import math

import pytest
import torch

from torchrankboost import Bipartite, Booster, Groups, RankNetLoss, RegressionTree, registry
from torchrankboost.losses import YetiRankLoss
from torchrankboost.losses.yetirank import yetirank_noise

F64 = torch.float64


def _case(seed, sizes=(5, 0, 1, 6, 4, 3), levels=4):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(list(sizes))
    n = g.num_docs
    s = torch.randn(n, generator=gen, dtype=F64)
    s[torch.rand(n, generator=gen) < 0.25] = 0.5  # tied scores
    y = torch.randint(0, levels, (n,), generator=gen).to(F64)
    w = torch.rand(n, generator=gen, dtype=F64) + 0.5
    return s, y, g, w


def oracle(s, y, sizes, noise, decay, weights=None):
    """Dense reference: per query and permutation, a Python stable sort of the perturbed
    scores and a loop over adjacent positions filling an (n_q, n_q) weight matrix; the loss
    Σ W[w, l] softplus(s_l − s_w) per query ``(G,)`` (differentiable in ``s``)."""
    P = noise.shape[0]
    out, off = [], 0
    for nq in sizes:
        W = torch.zeros(nq, nq, dtype=F64)
        for p in range(P):
            z = [float(s[off + i].detach() + noise[p, off + i]) for i in range(nq)]
            order = sorted(range(nq), key=lambda i: -z[i])
            for t in range(nq - 1):
                a, b = order[t], order[t + 1]
                ya, yb = float(y[off + a]), float(y[off + b])
                if ya == yb:
                    continue
                win, lose = (a, b) if ya > yb else (b, a)
                c = 0.15 / P * decay ** t * abs(ya - yb)
                if weights is not None:
                    c *= float(weights[off + win] * weights[off + lose])
                W[win, lose] += c
        sq = s[off:off + nq]
        diff = sq.unsqueeze(0) - sq.unsqueeze(1)  # [w, l] = s_l - s_w
        out.append((W * torch.nn.functional.softplus(diff)).sum())
        off += nq
    return torch.stack(out) if out else s.new_zeros(0)


@pytest.mark.parametrize("kw", [{}, {"num_permutations": 3, "decay": 0.5},
                                {"noise": "gauss", "noise_power": 0.7, "seed": 4},
                                {"noise": "none", "num_permutations": 1}])
@pytest.mark.parametrize("weighted", [False, True])
def test_gradient_equals_dense_oracle(kw, weighted):
    loss_kw = dict(kw)
    P = loss_kw.get("num_permutations", 10)
    for seed in range(2):
        s, y, g, w = _case(seed)
        w = w if weighted else None
        sizes = g.sizes.tolist()
        noise = yetirank_noise(P, g.num_docs, torch.Generator().manual_seed(kw.get("seed", 0)),
                               noise=kw.get("noise", "logistic"),
                               noise_power=kw.get("noise_power", 1.0))
        x = s.clone().requires_grad_()
        per = oracle(x, y, sizes, noise, kw.get("decay", 0.85), w)
        (grad,) = torch.autograd.grad(per.sum(), x)
        H = torch.autograd.functional.hessian(
            lambda z: oracle(z, y, sizes, noise, kw.get("decay", 0.85), w).sum(), s)
        # each fresh module's first draw is the oracle's noise
        torch.testing.assert_close(YetiRankLoss(**loss_kw, reduction="none")(s, y, g,
                                                                             weights=w),
                                   per.detach(), rtol=1e-12, atol=1e-12)
        gg, hd = YetiRankLoss(**loss_kw).grad_hess(s, y, g, weights=w)
        torch.testing.assert_close(gg, grad, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(hd, H.diagonal(), rtol=1e-12, atol=1e-13)
        _, hb = YetiRankLoss(**loss_kw).grad_hess(s, y, g, weights=w, hess="bound")
        assert torch.linalg.eigvalsh(torch.diag(hb) - H).min() >= -1e-12
        # mean: over the queries with two label levels
        k = sum(1 for a, b in zip(g.offsets[:-1], g.offsets[1:]) if y[a:b].unique().numel() > 1)
        gm, _ = YetiRankLoss(**loss_kw, reduction="mean").grad_hess(s, y, g, weights=w)
        torch.testing.assert_close(gm * k, grad, rtol=1e-12, atol=1e-13)


def test_seeds_make_runs_reproducible():
    s, y, g, _ = _case(3)
    a, b, c = YetiRankLoss(seed=1), YetiRankLoss(seed=1), YetiRankLoss(seed=2)
    ga = [a.grad_hess(s, y, g)[0] for _ in range(3)]
    gb = [b.grad_hess(s, y, g)[0] for _ in range(3)]
    assert all(torch.equal(u, v) for u, v in zip(ga, gb))
    assert not torch.equal(ga[0], ga[1])  # each call draws anew
    assert not torch.equal(ga[0], c.grad_hess(s, y, g)[0])
    # the bound loss keeps its draw; resample(round=r) depends on (seed, r) only
    bound = a.bind(y, g)
    v0 = bound.value(s)
    assert torch.equal(bound.value(s + 0.3), v0)  # a shift keeps every ordering
    a.resample(bound, s, round=7)
    v7 = bound.value(s)
    other = YetiRankLoss(seed=1).bind(y, g)
    YetiRankLoss(seed=1).resample(other, s, round=7)
    assert torch.equal(other.value(s), v7)
    a.resample(bound, s, round=8)
    assert not torch.equal(bound.value(s), v7)


def test_weighted_logistic_part_gradcheck():
    s, y, g, w = _case(5, sizes=(4, 3, 5))
    bound = YetiRankLoss(num_permutations=4).bind(y, g, weights=w)
    bound.value(s)  # draws the pairs: fixed from here on
    x = s.clone().requires_grad_()
    assert torch.autograd.gradcheck(bound.value, (x,))
    assert torch.autograd.gradgradcheck(bound.value, (x,))
    v, gg, hd = bound.value_grad_hess(s * 1.3)
    xs = (s * 1.3).requires_grad_()
    (ag,) = torch.autograd.grad(bound.value(xs), xs)
    torch.testing.assert_close(gg, ag, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(v, bound.value(s * 1.3))


def test_queries_without_pairs_and_bad_options():
    s = torch.tensor([1.0, -2.0, 3.0, 0.5, 0.2, -0.3, 1.5], dtype=F64)
    y = torch.tensor([2.0, 2.0, 2.0, 1.0, 0.0, 1.0, 3.0], dtype=F64)
    g = Groups.from_sizes([3, 0, 1, 3])
    v = YetiRankLoss(reduction="none")(s, y, g)
    assert torch.equal(v[:3], torch.zeros(3, dtype=F64)) and float(v[3]) > 0
    gg, hh = YetiRankLoss().grad_hess(s, y, g)
    assert torch.equal(gg[:4], torch.zeros(4, dtype=F64))
    assert float(YetiRankLoss(reduction="mean")(s[:3], y[:3], Groups.from_sizes([3]))) == 0.0
    sp, mask = g.pad(s, fill=9.0)
    yp, _ = g.pad(y)
    torch.testing.assert_close(YetiRankLoss()(sp, yp, mask=mask), YetiRankLoss()(s, y, g))
    with pytest.raises(ValueError, match="graded labels"):
        YetiRankLoss()(s, y, g, pairs=Bipartite(0.5))
    for bad in (dict(num_permutations=0), dict(decay=0.0), dict(noise="gumbel"),
                dict(noise_power=-1.0)):
        with pytest.raises(ValueError):
            YetiRankLoss(**bad)
    loss = registry.create("loss", "yetirank", decay=0.9)
    assert isinstance(loss, YetiRankLoss) and loss.decay == 0.9
    assert type(loss)(**loss.get_params()).get_params() == loss.get_params()


def test_booster_redraws_each_round_and_is_reproducible():
    gen = torch.Generator().manual_seed(0)
    g = Groups.from_sizes([12] * 15)
    X = torch.randn(g.num_docs, 4, generator=gen)
    y = (X[:, 0] + 0.5 * torch.randn(g.num_docs, generator=gen)).clamp(-1.0, 1.0).round() + 1

    def fit(seed):
        b = Booster(YetiRankLoss(seed=seed), RegressionTree(max_leaves=4, min_samples_leaf=3),
                    n_rounds=4, learning_rate=0.3, verbose=False)
        return b, b.fit(X, y, g)

    b1, m1 = fit(0)
    _, m2 = fit(0)
    _, m3 = fit(1)
    assert torch.equal(m1.predict(X), m2.predict(X))
    assert not torch.equal(m1.predict(X), m3.predict(X))
    # every round's starting loss is the round's own draw at the round's scores
    first = [r.extra["loss_before"] for r in b1.history_]
    for i, rec in enumerate(b1.history_):  # rounds are numbered from 1
        scores = m1.truncate(i).predict(X).to(F64)
        bound = YetiRankLoss(seed=0).bind(y, g)
        YetiRankLoss(seed=0).resample(bound, scores, round=rec.round)
        assert math.isclose(float(bound.value(scores)), first[i], rel_tol=1e-9)


def test_catboost_pairlogit_is_ranknet_over_all_pairs_divided_by_their_count():
    catboost = pytest.importorskip("catboost")
    import numpy as np

    s, y, g, _ = _case(7, sizes=(5, 7, 4), levels=3)
    X = np.random.default_rng(0).normal(size=(g.num_docs, 3))
    qid = g.group_index.numpy()
    gw = torch.tensor([2.0, 1.0, 3.0], dtype=F64)
    per = RankNetLoss(reduction="none")(s, y, g)  # sigma = 1
    yy = y.unsqueeze(0) > y.unsqueeze(1)
    same = qid[:, None] == qid[None, :]
    count = torch.tensor([float((yy & torch.as_tensor(same))[g.group_index == q].sum())
                          for q in range(3)], dtype=F64)
    for group_weight, expect in ((None, per.sum() / count.sum()),
                                 (gw, (per * gw).sum() / (count * gw).sum())):
        m = catboost.CatBoost({"loss_function": "PairLogit", "iterations": 1,
                               "learning_rate": 1e-6, "depth": 1, "verbose": 0,
                               "thread_count": 1, "random_seed": 0,
                               "boost_from_average": False, "allow_writing_files": False})
        kw = {} if group_weight is None else {"group_weight": group_weight[g.group_index].numpy()}
        m.fit(catboost.Pool(X, y.numpy(), group_id=qid, baseline=s.numpy(), **kw))
        got = m.get_evals_result()["learn"]["PairLogit"][0]  # at the baseline (+ 1e-6 step)
        assert math.isclose(got, float(expect), rel_tol=1e-5)
