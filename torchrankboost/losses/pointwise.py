"""Pointwise losses.

:class:`SquaredErrorLoss` is the squared error between scores and labels,

.. math::

    L(s) = \\tfrac12 \\sum_i w_i\\,(l_i - s_i)^2 ,

the objective of Friedman's least-squares gradient boosting (GBT). With it the boosting
driver reproduces plain gradient boosting; it is also the label part of QBRank's objective.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .base import BindState, Prepared, RankingLoss

__all__ = ["SquaredErrorLoss"]


class SquaredErrorLoss(RankingLoss):
    """Pointwise squared error ``½ Σ_i w_i (l_i − s_i)²``, summed per query.

    Shapes: ``scores`` ``(n,)`` float, ``labels`` ``(n,)`` real, optional ``weights`` ``(n,)``
    non-negative (default 1). Per-query loss ``(G,)`` is ``½ Σ_{i∈q} w_i (l_i − s_i)²``;
    ``reduction="sum"`` (default) adds the queries, ``"mean"`` averages them over all queries
    (every query counts, a pointwise loss has no "pairs"), ``"none"`` returns the ``(G,)``
    tensor. ``pairs`` are ignored (a pointwise loss needs labels).

    ``grad_hess`` (closed form): ``grad = w (s − l)``, curvature ``w`` for both
    ``hess="diag"`` and ``hess="bound"`` (the Hessian is exactly ``diag(w)``, a global bound),
    divided by the number of queries under ``reduction="mean"``.

    Example::

        >>> loss = SquaredErrorLoss()
        >>> loss(torch.tensor([1., 2.]), torch.tensor([0., 2.]))
        tensor(0.5000)
    """

    negative_labels = True  # a real-valued regression target

    def __init__(self, *, reduction: str = "sum"):
        super().__init__(reduction=reduction)

    def _bind_state(self, inp: Prepared) -> BindState:
        if inp.labels is None:
            raise ValueError("SquaredErrorLoss needs labels (explicit pairs are not enough)")
        return BindState(labels=inp.labels, weights=inp.weights)

    def _targets(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        """The labels and the weights (or ``None``) in the scores' dtype."""
        st = self._state(inp)
        dt = inp.scores.dtype
        return st.cached(dt, lambda: (st.labels.to(dt),
                                      None if st.weights is None else st.weights.to(dt)))

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        labels, w = self._targets(inp)
        r2 = (inp.scores - labels).square()
        if w is not None:
            r2 = r2 * w
        return 0.5 * inp.groups.segment_sum(r2), None

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        labels, w = self._targets(inp)
        s = inp.scores
        if w is None:
            w = torch.ones_like(s)
        grad = w * (s - labels)
        curv = w.clone()
        if self.reduction == "mean":
            G = max(inp.groups.num_groups, 1)
            grad = grad / G
            curv = curv / G
        return grad, curv
