"""The loss as the boosting driver sees it: bound to the training labels once per fit, its
value, and its gradient and curvature (closed form, or by autograd for a plain callable).

:func:`bind` gives the bound-loss interface (``value(s)``, ``grad_hess(s, hess=...)``,
``value_grad_hess(s, hess=...)``; see :meth:`torchrankboost.losses.RankingLoss.bind`) for
any loss; :func:`autograd_grad_hess` is the gradient by autograd with the exact Hessian
diagonal (Hessian-vector products) or unit curvature for a loss without ``grad_hess``.

:func:`initial_loss` is the loss at the start of a fit, and the refusal of training data a
pairwise loss (exponential, hinge, RankNet, p-norm push, ...) cannot learn from: without a
single crucial pair (``label_i > label_j`` in one query, or positive over negative for
``Bipartite``) its value and gradient are 0 everywhere and the fit would end after 0 rounds
with a constant model; a ``ValueError`` says so instead, as RankBoost and the p-norm push
already do.
"""

from __future__ import annotations

from typing import Callable, Tuple

import torch
from torch import Tensor

from ..curvature import hessian_diagonal, hvp_probes, is_per_query
from ..losses.base import BoundLoss

__all__ = ["autograd_grad_hess", "bind", "initial_loss", "no_pairs_message", "require_pairs",
           "scalar"]


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


def no_pairs_message(pairs) -> str:
    """The one-line message for training data without a crucial pair."""
    what = (f"no query has a document with label > {pairs.threshold:g} and one with "
            f"label <= {pairs.threshold:g}" if hasattr(pairs, "threshold")
            else "every query has one class: a single label level")
    return (f"labels: no crucial pairs ({what}), so a pairwise loss has nothing to learn; "
            f"check the labels and the query ids of the training data")


def _pair_queries(bound, s: Tensor):
    """``[is_pairwise, queries with a pair]`` of this rank (``[0, 0]`` for a loss that does
    not report pairs: pointwise and listwise losses, plain callables)."""
    if not isinstance(bound, BoundLoss):
        return [0.0, 0.0]
    with torch.no_grad():
        _, has = bound.loss.per_group(bound._at(s))
    if has is None:
        return [0.0, 0.0]
    return [1.0, float(has.sum())]


def initial_loss(comm, bound, s: Tensor) -> float:
    """``L(s)`` summed over the ranks (this rank's in one process): the value of the loss at
    the initial scores ``s`` ``(n,)``. ``ValueError`` (on every rank) when the loss is
    pairwise and no query of any rank holds a crucial pair."""
    total = comm.sum(lambda: [float(scalar(bound.value(s)).detach()),
                              *_pair_queries(bound, s)], size=3)
    if total[1] > 0 and total[2] == 0:
        raise ValueError(no_pairs_message(getattr(bound, "pairs", None)))
    return float(total[0])


def require_pairs(loss, labels, groups, *, pairs=None) -> None:
    """``ValueError`` when the pairwise ``loss`` finds no crucial pair in ``labels`` /
    ``groups`` (one process; what a fit outside the boosting driver checks first)."""
    bound = loss.bind(labels, groups, pairs=pairs)
    s = torch.zeros(bound.n, dtype=torch.float64, device=groups.device)
    flag, count = _pair_queries(bound, s)
    if flag > 0 and count == 0:
        raise ValueError(no_pairs_message(bound.pairs))
