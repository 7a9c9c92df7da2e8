"""SquaredErrorLoss: value against a per-query loop, closed-form grad/curvature against autograd."""

import pytest
import torch

from torchrankboost import Groups
from torchrankboost.losses import RankingLoss, SquaredErrorLoss

F64 = torch.float64


def _data(device, sizes=(3, 1, 5, 0, 4), seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(list(sizes)).to(device)
    n = sum(sizes)
    s = torch.randn(n, generator=gen, dtype=F64).to(device)
    y = torch.randint(0, 4, (n,), generator=gen).to(F64).to(device)
    w = torch.rand(n, generator=gen, dtype=F64).to(device)
    return s, y, g, w


def _reference(s, y, g, w=None):
    out = []
    offs = g.offsets.tolist()
    for a, b in zip(offs[:-1], offs[1:]):
        tot = 0.0
        for i in range(a, b):
            wi = 1.0 if w is None else float(w[i])
            tot += 0.5 * wi * (float(y[i]) - float(s[i])) ** 2
        out.append(tot)
    return torch.tensor(out, dtype=F64)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
def test_value_matches_loop(device, weighted, reduction):
    s, y, g, w = _data(device)
    w = w if weighted else None
    loss = SquaredErrorLoss(reduction=reduction)
    assert isinstance(loss, RankingLoss)
    ref = _reference(s.cpu(), y.cpu(), g.to("cpu"), None if w is None else w.cpu())
    got = loss(s, y, g, weights=w).cpu()
    if reduction == "sum":
        ref = ref.sum()
    elif reduction == "mean":
        ref = ref.mean()
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("hess", ["diag", "bound"])
def test_grad_hess_matches_autograd(device, weighted, reduction, hess):
    s, y, g, w = _data(device, seed=3)
    w = w if weighted else None
    loss = SquaredErrorLoss(reduction=reduction)
    x = s.clone().requires_grad_(True)
    val = loss(x, y, g, weights=w)
    val = val.sum() if reduction == "none" else val  # "none" is treated as "sum"
    (ga,) = torch.autograd.grad(val, x)
    H = torch.autograd.functional.hessian(
        lambda z: (lambda v: v.sum() if reduction == "none" else v)(loss(z, y, g, weights=w)), s)
    grad, curv = loss.grad_hess(s, y, g, weights=w, hess=hess)
    torch.testing.assert_close(grad, ga, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(curv, torch.diagonal(H), rtol=1e-12, atol=1e-12)
    # the Hessian is diagonal, so the diagonal is also a (tight) upper bound
    torch.testing.assert_close(H, torch.diag(torch.diagonal(H)))


def test_float32_and_functional_shape(device):
    s = torch.tensor([1.0, 2.0], device=device)
    y = torch.tensor([0.0, 2.0], device=device)
    out = SquaredErrorLoss()(s, y)
    assert out.dtype == torch.float32 and out.shape == ()
    assert float(out) == pytest.approx(0.5)
    g, h = SquaredErrorLoss().grad_hess(s, y)
    assert g.dtype == torch.float32 and h.tolist() == [1.0, 1.0]


def test_bad_inputs(device):
    loss = SquaredErrorLoss()
    s = torch.zeros(3, device=device)
    with pytest.raises(ValueError, match="labels"):
        loss(s, torch.tensor([0.0, float("nan"), 1.0], device=device))
    with pytest.raises(ValueError, match="labels"):
        loss(s, torch.zeros(4, device=device))
    with pytest.raises(ValueError, match="weights"):
        loss(s, torch.zeros(3, device=device), weights=-torch.ones(3, device=device))
    with pytest.raises(ValueError, match="reduction"):
        SquaredErrorLoss(reduction="avg")
    with pytest.raises(ValueError, match="hess"):
        loss.grad_hess(s, torch.zeros(3, device=device), hess="full")
