"""The loss as the boosting driver sees it: bound to the training labels once per fit, its
value, and its gradient and curvature (closed form, or by autograd for a plain callable).

:func:`bind` gives the bound-loss interface (``value(s)``, ``grad_hess(s, hess=...)``,
``value_grad_hess(s, hess=...)``; see :meth:`torchrankboost.losses.RankingLoss.bind`) for
any loss; :func:`autograd_grad_hess` is the gradient by autograd with the exact Hessian
diagonal (Hessian-vector products) or unit curvature for a loss without ``grad_hess``.
"""

from __future__ import annotations

from typing import Callable, Tuple

import torch
from torch import Tensor

from ..curvature import hessian_diagonal, hvp_probes, is_per_query

__all__ = ["autograd_grad_hess", "bind", "scalar"]


def scalar(v) -> Tensor:
    """The loss's value as a 0-d tensor (summed when the loss returned a vector)."""
    if not isinstance(v, Tensor):
        raise ValueError(f"the loss must return a tensor, got {type(v).__name__}")
    return v.sum() if v.dim() > 0 else v


def autograd_grad_hess(loss: Callable, scores: Tensor, labels, groups, *, hess: str = "diag",
                       max_exact: int = 2048) -> Tuple[Tensor, Tensor, str]:
    """Gradient by autograd and a curvature for a loss without ``grad_hess``.

    ``hess="diag"``: the exact Hessian diagonal by Hessian-vector products
    (:func:`torchrankboost.curvature.hessian_diagonal`) when they number at most
    ``max_exact`` — one per position of the longest query for a loss that declares itself
    per-query (:func:`torchrankboost.curvature.per_query`; the library's losses do), else one
    per document — and unit curvature (Friedman's gradient boosting) beyond.
    ``hess="none"``: unit curvature. Returns ``(grad, curvature, kind)`` with ``kind``
    ``"autograd-diag"`` or ``"unit"``.
    """
    s = scores.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        v = scalar(loss(s, labels, groups))
        (g,) = torch.autograd.grad(v, s, allow_unused=True)
    g = torch.zeros_like(s) if g is None else g.detach()
    blocks = is_per_query(loss)
    if hess == "diag" and hvp_probes(s.shape[0], groups, blocks) <= max_exact:
        h = hessian_diagonal(lambda x: loss(x, labels, groups), scores, groups,
                             per_query_hessian=blocks)
        return g, h, "autograd-diag"
    return g, torch.ones_like(g), "unit"


class _CallableBound:
    """The bound-loss interface (``value``, ``grad_hess``, ``value_grad_hess``; see
    :meth:`torchrankboost.losses.RankingLoss.bind`) for a loss that cannot bind its labels: a
    plain callable (curvature by autograd, see :meth:`Booster._grad_curv`) or a module with
    ``grad_hess`` but no ``bind``."""

    def __init__(self, loss: Callable, labels, groups):
        self.loss, self.labels, self.groups = loss, labels, groups

    def value(self, scores: Tensor) -> Tensor:
        return scalar(self.loss(scores, self.labels, self.groups))

    def grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        return self.loss.grad_hess(scores, self.labels, self.groups, hess=hess)

    def value_grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        g, h = self.grad_hess(scores, hess=hess)
        return self.value(scores).detach(), g, h


def bind(loss: Callable, labels, groups):
    """The loss with its labels bound once for the whole fit (the loss's own ``bind`` when it
    has one: label levels, buckets and pair setups are computed once, not every call)."""
    if callable(getattr(loss, "bind", None)):
        return loss.bind(labels, groups)
    return _CallableBound(loss, labels, groups)
