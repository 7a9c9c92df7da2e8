"""LambdaLoss against allRank's ``lambdaLoss`` formula (re-written below on padded
``(B, L)`` tensors with its ``-1`` padding, in float64), gradcheck, the blocked pairs,
truncation, weights and the closed-form ``grad_hess``; every scheme."""

import pytest
import torch

from torchrankboost import Groups, LambdaLoss, registry

F64 = torch.float64
SCHEMES = [None, "ndcgLoss1", "ndcgLoss2", "ndcgLoss2++", "lambdaRank"]


def allrank_lambda_loss(y_pred, y_true, *, scheme, k=None, sigma=1.0, mu=10.0,
                        log="binary", eps=1e-10):
    """allRank's ``lambdaLoss`` (its padded formula, padding = label -1), with its discounts
    in float64 (allRank builds them with ``.float()``: float32)."""
    y_pred, y_true = y_pred.clone(), y_true.clone()
    pad = y_true == -1
    y_pred[pad] = float("-inf")
    y_true[pad] = float("-inf")
    y_pred_sorted, idx = y_pred.sort(descending=True, dim=-1)
    y_true_sorted, _ = y_true.sort(descending=True, dim=-1)
    t = torch.gather(y_true, 1, idx)
    diffs = t[:, :, None] - t[:, None, :]
    pm = torch.isfinite(diffs)
    if scheme != "ndcgLoss1":
        pm = pm & (diffs > 0)
    L = y_pred.shape[1]
    km = torch.zeros((L, L), dtype=torch.bool)
    km[:k, :k] = True
    t = t.clamp(min=0.0)
    y_true_sorted = y_true_sorted.clamp(min=0.0)
    pos = torch.arange(1, L + 1, dtype=F64)
    D = torch.log2(1.0 + pos)[None, :]
    maxdcg = ((2 ** y_true_sorted - 1) / D)[:, :k].sum(-1).clamp(min=eps)
    G = (2 ** t - 1) / maxdcg[:, None]
    lam = (1 / D[:, :, None] - 1 / D[:, None, :]).abs() * (G[:, :, None] - G[:, None, :]).abs()
    d = (pos[:, None] - pos[None, :]).abs().long()
    n2 = (1 / D[0, d - 1] - 1 / D[0, d]).abs()
    n2.diagonal().zero_()
    n2 = n2[None] * (G[:, :, None] - G[:, None, :]).abs()
    w = {None: torch.ones(()), "ndcgLoss1": (G / D)[:, :, None], "ndcgLoss2": n2,
         "lambdaRank": lam, "ndcgLoss2++": mu * n2 + lam}[scheme]
    sd = (y_pred_sorted[:, :, None] - y_pred_sorted[:, None, :]).clamp(-1e8, 1e8)
    p = (torch.sigmoid(sigma * sd).clamp(min=eps) ** w).clamp(min=eps)
    losses = torch.log2(p) if log == "binary" else torch.log(p)
    return -losses[pm & km].sum()


def _padded(seed, B=5, L=9, levels=5):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, L, generator=g, dtype=F64) * 2
    y = torch.randint(0, levels, (B, L), generator=g).to(F64)
    sizes = torch.randint(1, L + 1, (B,), generator=g)
    mask = torch.arange(L)[None, :] < sizes[:, None]
    return s, y, mask


@pytest.mark.parametrize("scheme", SCHEMES)
def test_equals_allrank_formula_every_scheme(scheme):
    for seed, k, sigma, log in [(0, None, 1.0, "binary"), (1, 4, 2.5, "natural"),
                                (2, 1, 0.7, "binary")]:
        s, y, mask = _padded(seed)
        yp = torch.where(mask, y, torch.full_like(y, -1.0))
        x = s.clone().requires_grad_()
        ref = allrank_lambda_loss(x, yp, scheme=scheme, k=k, sigma=sigma, log=log)
        (gref,) = torch.autograd.grad(ref, x)
        z = s.clone().requires_grad_()
        loss = LambdaLoss(scheme=scheme, k=k, sigma=sigma, log=log, block_pairs=13)
        v = loss(z, y, mask=mask)
        (g,) = torch.autograd.grad(v, z)
        torch.testing.assert_close(v, ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(g, gref, rtol=1e-10, atol=1e-12)
        # flat form, and the closed-form gradient
        flat = Groups.from_padded(mask)
        torch.testing.assert_close(loss(s[mask], y[mask], flat), ref, rtol=1e-12, atol=1e-12)
        gg, _ = loss.grad_hess(s[mask], y[mask], flat)
        torch.testing.assert_close(gg, gref[mask], rtol=1e-10, atol=1e-12)


def test_allrank_itself_when_installed():
    mod = pytest.importorskip("allrank.models.losses.lambdaLoss")
    s, y, mask = _padded(3)
    yp = torch.where(mask, y, torch.full_like(y, -1.0))
    for ours, theirs in [(None, None), ("ndcgLoss2++", "ndcgLoss2PP_scheme"),
                         ("lambdaRank", "lambdaRank_scheme")]:
        ref = mod.lambdaLoss(s, yp, weighing_scheme=theirs)
        # allRank's discounts are float32: equal to ~1e-8 relative
        torch.testing.assert_close(LambdaLoss(scheme=ours)(s, y, mask=mask), ref,
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("scheme", ["ndcgLoss1", "ndcgLoss2++"])
def test_gradcheck_and_hessian_diagonal(scheme):
    g = Groups.from_sizes([4, 1, 3])
    gen = torch.Generator().manual_seed(7)
    s = torch.randn(8, generator=gen, dtype=F64)
    y = torch.randint(0, 3, (8,), generator=gen).to(F64)
    w = torch.rand(8, generator=gen, dtype=F64) + 0.5
    loss = LambdaLoss(scheme=scheme, k=3, block_pairs=5)
    f = lambda z: loss(z, y, g, weights=w)  # noqa: E731
    x = s.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (x,))
    if scheme == "ndcgLoss2++":
        assert torch.autograd.gradgradcheck(f, (x,))
    H = torch.autograd.functional.hessian(f, s)
    gr, hd = loss.grad_hess(s, y, g, weights=w)
    torch.testing.assert_close(hd, H.diagonal(), rtol=1e-10, atol=1e-12)
    _, hb = loss.grad_hess(s, y, g, weights=w, hess="bound")
    assert float(torch.linalg.eigvalsh(torch.diag(hb) - H).min()) >= -1e-10


def test_weights_multiply_pairs_and_blocks_do_not_matter():
    s, y, mask = _padded(5, B=3, L=7)
    g = Groups.from_padded(mask)
    s, y = s[mask], y[mask]
    w = torch.linspace(0.5, 2.0, s.shape[0], dtype=F64)
    one = LambdaLoss(scheme="lambdaRank", reduction="none")(s, y, g, weights=w)
    small = LambdaLoss(scheme="lambdaRank", block_pairs=2, reduction="none")(s, y, g, weights=w)
    torch.testing.assert_close(small, one, rtol=1e-13, atol=1e-13)
    # a constant weight c per query scales its pairs by c^2
    c = torch.tensor([1.0, 2.0, 3.0], dtype=F64)[g.group_index]
    plain = LambdaLoss(scheme="ndcgLoss2++", reduction="none")(s, y, g)
    scaled = LambdaLoss(scheme="ndcgLoss2++", reduction="none")(s, y, g, weights=c)
    torch.testing.assert_close(scaled, plain * torch.tensor([1.0, 4.0, 9.0], dtype=F64))


def test_options_and_registry():
    for bad in [dict(scheme="ndcg"), dict(sigma=0.0), dict(k=0), dict(k=2.5), dict(mu=-1.0),
                dict(log="ten"), dict(block_pairs=0)]:
        with pytest.raises(ValueError):
            LambdaLoss(**bad)
    loss = registry.create("loss", "lambdaloss", scheme=None, k=3)
    assert isinstance(loss, LambdaLoss) and loss.k == 3 and loss.scheme is None
    with pytest.raises(ValueError, match="graded labels"):
        LambdaLoss()(torch.zeros(3, dtype=F64), torch.tensor([0.0, 1.0, 1.0]),
                     pairs=__import__("torchrankboost").Bipartite(0.5))
