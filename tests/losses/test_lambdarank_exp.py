"""LambdaRankExpLoss against a dense all-pairs oracle in float64 (ties, weights, both
normalisations, both sweep kernels, many label levels), gradcheck, the closed-form
``grad_hess``, and the booster / LightGBM adapter / CLI names."""

import pytest
import torch

import torchrankboost._pair_engine.lambdarank as LR
from torchrankboost import Groups, LambdaRankExpLoss, registry

F64 = torch.float64


def dense(s, y, g, w=None, *, sigma=1.0, normalize=True):
    """Per-query ``Σ_{y_i > y_j} w_i w_j |ΔG| |ΔD| e^{−σ (s_i − s_j)} / Z`` over an explicit
    ``(n_q, n_q)`` pair table; ranks by (score desc, label asc, index)."""
    out = []
    for q in range(g.num_groups):
        a, b = int(g.offsets[q]), int(g.offsets[q + 1])
        ss, yy = s[a:b], y[a:b].to(F64)
        n = b - a
        if n == 0:
            out.append(s.new_zeros(()))
            continue
        order = torch.argsort(yy, stable=True)
        order = order[torch.argsort(-ss.detach()[order], stable=True)]
        r = torch.empty(n, dtype=F64)
        r[order] = torch.arange(1, n + 1, dtype=F64)
        D, G = 1 / torch.log2(1 + r), 2 ** yy - 1
        ww = torch.ones(n, dtype=F64) if w is None else w[a:b]
        W = ((G[:, None] - G[None, :]).abs() * (D[:, None] - D[None, :]).abs()
             * ww[:, None] * ww[None, :] * (yy[:, None] > yy[None, :]))
        v = (W * torch.exp(-sigma * (ss[:, None] - ss[None, :]))).sum()
        if normalize:
            z = (torch.sort(G, descending=True).values
                 / torch.log2(1 + torch.arange(1, n + 1, dtype=F64))).sum()
            v = v / z if z > 0 else v * 0
        out.append(v)
    return torch.stack(out)


def _case(seed, sizes=(5, 0, 1, 9, 7), levels=4):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(list(sizes))
    n = g.num_docs
    s = torch.randn(n, generator=gen, dtype=F64)
    s[torch.rand(n, generator=gen) < 0.3] = 0.5  # tied scores
    y = torch.randint(0, levels, (n,), generator=gen).to(F64)
    w = torch.rand(n, generator=gen, dtype=F64) + 0.1
    return s, y, g, w


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "bits"])
def test_equals_dense_oracle(rows, monkeypatch):
    if not rows:
        monkeypatch.setattr(LR, "ROWS_MAX_K", 0)
    for seed, weighted, normalize, sigma in [(0, False, True, 1.0), (1, True, True, 0.6),
                                             (2, True, False, 1.7)]:
        s, y, g, w = _case(seed)
        w = w if weighted else None
        loss = LambdaRankExpLoss(sigma=sigma, normalize=normalize, reduction="none")
        x = s.clone().requires_grad_()
        v = loss(x, y, g, weights=w)
        (ga,) = torch.autograd.grad(v.sum(), x)
        z = s.clone().requires_grad_()
        ref = dense(z, y, g, w, sigma=sigma, normalize=normalize)
        (gr,) = torch.autograd.grad(ref.sum(), z)
        torch.testing.assert_close(v, ref.detach(), rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(ga, gr, rtol=1e-11, atol=1e-13)
        H = torch.autograd.functional.hessian(
            lambda t: dense(t, y, g, w, sigma=sigma, normalize=normalize).sum(), s)
        gg, hd = LambdaRankExpLoss(sigma=sigma, normalize=normalize).grad_hess(
            s, y, g, weights=w)
        torch.testing.assert_close(gg, gr, rtol=1e-11, atol=1e-13)
        torch.testing.assert_close(hd, H.diagonal(), rtol=1e-11, atol=1e-13)
        u = torch.randn(s.shape[0], dtype=F64)
        st = LR.lambdarank_setup(y, g, w, normalize=normalize)
        torch.testing.assert_close(LR.lambdarank_hvp(s, st, sigma, u), H @ u, rtol=1e-10,
                                   atol=1e-12)


def test_many_levels_and_a_long_query_agree_across_kernels(monkeypatch):
    # real-valued labels (K > 64: the bit sweep) against the oracle
    s, _, g, _ = _case(4, sizes=(40, 30), levels=2)
    y = torch.rand(s.shape[0], generator=torch.Generator().manual_seed(4), dtype=F64) * 4
    torch.testing.assert_close(LambdaRankExpLoss(reduction="none")(s, y, g), dense(s, y, g),
                               rtol=1e-12, atol=1e-13)
    # 1,200 documents, 5 grades: rows kernel == bit sweep == vectorised oracle
    s, y, g, _ = _case(5, sizes=(1200,), levels=5)
    loss = LambdaRankExpLoss()
    v1, (g1, h1) = loss(s, y, g), loss.grad_hess(s, y, g)
    monkeypatch.setattr(LR, "ROWS_MAX_K", 0)
    v2, (g2, h2) = loss(s, y, g), loss.grad_hess(s, y, g)
    torch.testing.assert_close(v1, v2, rtol=1e-11, atol=0.0)
    torch.testing.assert_close(g1, g2, rtol=1e-9, atol=1e-13)
    torch.testing.assert_close(h1, h2, rtol=1e-9, atol=1e-13)
    torch.testing.assert_close(v1, dense(s, y, g).sum(), rtol=1e-11, atol=0.0)


def test_gradcheck_padded_and_bound():
    s, y, g, w = _case(6, sizes=(4, 1, 3))
    loss = LambdaRankExpLoss(sigma=0.8)
    x = s.clone().requires_grad_()
    f = lambda t: loss(t, y, g, weights=w)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))
    sp, mask = g.pad(s)
    yp, _ = g.pad(y)
    torch.testing.assert_close(loss(sp, yp, mask=mask), loss(s, y, g), rtol=1e-13, atol=0.0)
    H = torch.autograd.functional.hessian(lambda t: loss(t, y, g), s)
    _, hb = loss.grad_hess(s, y, g, hess="bound")
    assert float(torch.linalg.eigvalsh(torch.diag(hb) - H).min()) >= -1e-12


def test_extreme_scores_are_finite_and_nan_free():
    s = torch.tensor([2000.0, -2000.0, 0.0, 1.0], dtype=F64)
    y = torch.tensor([0.0, 2.0, 1.0, 0.0])
    x = s.clone().requires_grad_()
    v = LambdaRankExpLoss()(x, y)
    v.backward()
    assert torch.isfinite(v) and not torch.isnan(x.grad).any()


def test_registry_booster_and_lightgbm_adapter():
    from torchrankboost.boosting import Booster, RegressionTree

    loss = registry.create("loss", "lambdarank_exp", sigma=2.0)
    assert isinstance(loss, LambdaRankExpLoss) and loss.sigma == 2.0
    gen = torch.Generator().manual_seed(0)
    g = Groups.from_sizes([20] * 10)
    X = torch.randn(200, 4, generator=gen)
    y = (X[:, 0] + 0.3 * torch.randn(200, generator=gen)).clamp(-1, 2).round() + 1
    b = Booster(LambdaRankExpLoss(), RegressionTree(max_leaves=4, min_samples_leaf=5),
                n_rounds=5, step="fixed", seed=0)
    ens = b.fit(X, y.double(), g)
    assert ens.n_rounds == 5
    lgb = pytest.importorskip("lightgbm")
    from torchrankboost.integrations import lightgbm_objective

    ds = lgb.Dataset(X.numpy(), y.numpy(), group=[20] * 10).construct()
    gr, h = lightgbm_objective(LambdaRankExpLoss())(torch.zeros(200).numpy(), ds)
    assert gr.shape == (200,) and (h > 0).all()
