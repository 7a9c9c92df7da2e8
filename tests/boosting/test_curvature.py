"""Exact Hessian diagonals by per-query probes, against the dense Hessian."""

import warnings

import pytest
import torch

from torchrankboost import ExponentialPairwiseLoss, Groups, PNormPushLoss
from torchrankboost.boosting.curvature import (autograd_grad_hess, hessian_diagonal, hvp_probes,
                                               is_per_query, per_query)

F64 = torch.float64


def _listnet(scores, labels, groups):
    """A user's ListNet: softmax cross-entropy per query, summed (not one of ours)."""
    p = groups.segment_softmax(labels.to(scores.dtype))
    logp = scores - groups.broadcast(groups.segment_logsumexp(scores))
    return -(p * logp).sum()


@pytest.mark.parametrize("sizes", [[1, 4, 7, 2], [9], [3, 3, 3, 5, 1, 6]])
@pytest.mark.parametrize("loss", [_listnet, ExponentialPairwiseLoss(), PNormPushLoss(p=3)])
@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_per_query_probes_equal_the_dense_diagonal(sizes, loss, block):
    torch.manual_seed(sum(sizes) + block)
    g = Groups.from_sizes(sizes)
    n = g.num_docs
    s = torch.randn(n, dtype=torch.float64)
    y = torch.randint(0, 3, (n,)).to(torch.float64)
    fn = lambda x: loss(x, y, g)  # noqa: E731
    dense = torch.diagonal(torch.autograd.functional.hessian(fn, s))
    fast = hessian_diagonal(fn, s, g, per_query_hessian=True, block_elements=block)
    full = hessian_diagonal(fn, s, g, per_query_hessian=False, block_elements=block)
    torch.testing.assert_close(fast, dense, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(full, dense, rtol=1e-10, atol=1e-12)


def test_probe_count_is_the_longest_query():
    g = Groups.from_sizes([3, 121, 40])
    assert hvp_probes(g.num_docs, g, True) == 121
    assert hvp_probes(g.num_docs, g, False) == 164


def test_per_query_declaration():
    assert is_per_query(ExponentialPairwiseLoss()) and is_per_query(PNormPushLoss())
    assert not is_per_query(_listnet)
    marked = per_query(lambda s, y, g: s.sum())
    assert is_per_query(marked)


class _Cube(torch.autograd.Function):
    """x³ as an old-style autograd.Function (no setup_context): torch.func refuses it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, gout):
        (x,) = ctx.saved_tensors
        return gout * 3 * x ** 2


def test_a_loss_torch_func_cannot_transform_falls_back_with_a_warning():
    g = Groups.from_sizes([3, 4])
    s = torch.randn(7, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="torch.func path failed"):
        d = hessian_diagonal(lambda x: _Cube.apply(x).sum(), s, g, per_query_hessian=True)
    torch.testing.assert_close(d, 6 * s)


def test_linear_loss_has_zero_curvature():
    s = torch.randn(5, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(hessian_diagonal(lambda x: (2 * x).sum(), s), torch.zeros(5, dtype=torch.float64))


# ----------------------------------------------------------------------------- autograd fallback
def listnet_loss(scores, labels, groups):
    """A loss without grad_hess: ListNet cross-entropy per query (non-diagonal Hessian)."""
    p = groups.segment_softmax(labels.to(scores.dtype))
    return -(p * torch.log(groups.segment_softmax(scores))).sum()


def ranking_data(G=30, size=12, F=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(size // 2, size + size // 2, (G,), generator=gen)
    g = Groups.from_sizes(sizes)
    n = int(sizes.sum())
    X = torch.randn(n, F, generator=gen)
    latent = X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.7 * torch.randn(n, generator=gen)
    y = torch.bucketize(latent, torch.tensor([0.0, 1.0, 2.0])).to(F64)
    return X, y, g


def test_autograd_fallback_curvature_is_exact_diagonal():
    X, y, g = ranking_data(G=5, size=6, seed=6)
    s = torch.randn(y.shape[0], dtype=F64)
    H = torch.autograd.functional.hessian(lambda z: listnet_loss(z, y, g), s)
    assert float((H - torch.diag(torch.diagonal(H))).abs().max()) > 1e-3  # not diagonal
    grad, h, kind = autograd_grad_hess(listnet_loss, s, y, g, hess="diag")
    assert kind == "autograd-diag"
    torch.testing.assert_close(h, torch.diagonal(H), rtol=1e-10, atol=1e-12)
    x = s.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(listnet_loss(x, y, g), x)
    torch.testing.assert_close(grad, ga)
    # the generic helper on a plain function
    torch.testing.assert_close(hessian_diagonal(lambda z: (z ** 3).sum() + z.prod(), s[:5]),
                               6 * s[:5], rtol=1e-10, atol=1e-12)
    # above the size limit: unit curvature (Friedman)
    _, h1, kind1 = autograd_grad_hess(listnet_loss, s, y, g, hess="diag", max_exact=3)
    assert kind1 == "unit" and bool((h1 == 1).all())
