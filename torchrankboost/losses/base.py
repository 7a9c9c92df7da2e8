"""The shared contract of every ranking loss.

Every loss is a :class:`torch.nn.Module` called as::

    loss(scores, labels, groups=None, *, pairs=None, weights=None) -> Tensor

* ``scores``: ``(n,)`` float tensor, the flat scores of all documents of all queries
  (or ``(B, L)`` padded with ``mask=...``, converted to ragged form by :meth:`prepare`).
* ``labels``: ``(n,)`` relevance grades (any real dtype; may be ``None`` with
  :class:`~torchrankboost.pairs.ExplicitPairs`).
* ``groups``: a :class:`~torchrankboost.Groups` (``None`` = one query).
* ``pairs``: which pairs count (see :mod:`torchrankboost.pairs`); default graded labels.
* ``weights``: optional ``(n,)`` non-negative per-document weights; a label-induced pair
  ``(i, j)`` is weighted ``weights[i] * weights[j]`` (the product form keeps the O(n log n)
  factorisation; RankBoost's bipartite initial distribution is of this form).
  Explicit pairs carry their own weights.

``reduction`` (constructor option): ``"sum"`` over queries (default), ``"mean"`` over
queries that have at least one pair, or ``"none"`` for a ``(G,)`` tensor of per-query losses.

``grad_hess(scores, labels, groups=None, *, pairs=None, weights=None, hess="diag")``
returns the per-document gradient of the loss as reduced by ``reduction`` (``"none"`` is
treated as ``"sum"``) and a per-document curvature:
``hess="diag"`` the exact Hessian diagonal, ``hess="bound"`` a diagonal ``D`` with
``D - H`` positive semi-definite (a quadratic upper bound around the current scores).
Both ``(n,)``, closed form, no autograd.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from ..groups import Groups, as_groups
from ..pairs import Bipartite, ExplicitPairs, PairSpec, resolve_pairs

__all__ = ["RankingLoss", "Prepared", "prepare_inputs", "reduce_per_group", "REDUCTIONS"]

REDUCTIONS = ("sum", "mean", "none")


@dataclass
class Prepared:
    """Validated inputs: flat scores/labels/weights, groups and resolved pairs."""

    scores: Tensor
    labels: Optional[Tensor]
    groups: Groups
    pairs: object
    weights: Optional[Tensor]


def _check_finite(x: Tensor, name: str) -> None:
    if not bool(torch.isfinite(x).all()):
        bad = "NaN" if bool(torch.isnan(x).any()) else "inf"
        raise ValueError(f"{name} contains {bad} values")


def prepare_inputs(scores: Tensor, labels: Optional[Tensor], groups: Optional[Groups] = None,
                   *, pairs: PairSpec = None, weights: Optional[Tensor] = None,
                   mask: Optional[Tensor] = None) -> Prepared:
    """Validate and normalise the common loss arguments.

    Accepts flat ``(n,)`` inputs with optional ``groups``, or padded ``(B, L)`` scores and
    labels with a ``(B, L)`` boolean ``mask`` (then ``groups`` must be ``None``). Raises
    ``ValueError`` naming the argument for: non-tensor or non-float scores, shape
    mismatches, NaN/inf scores, NaN/inf labels, negative or NaN/inf weights, groups that do not
    cover the scores, explicit pairs outside their query.
    """
    if not isinstance(scores, Tensor):
        raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if not scores.dtype.is_floating_point:
        raise ValueError(f"scores must be a floating tensor, got {scores.dtype}")
    if labels is not None and not isinstance(labels, Tensor):
        labels = torch.as_tensor(labels, device=scores.device)
    if weights is not None and not isinstance(weights, Tensor):
        weights = torch.as_tensor(weights, device=scores.device)

    if mask is not None:
        if groups is not None:
            raise ValueError("pass either groups (ragged input) or mask (padded input), not both")
        if scores.dim() != 2 or mask.shape != scores.shape:
            raise ValueError(
                f"mask must have the shape of the padded scores; got scores "
                f"{tuple(scores.shape)} and mask {tuple(mask.shape)}"
            )
        mask = mask.to(device=scores.device, dtype=torch.bool)
        groups = Groups.from_padded(mask).to(scores.device)
        if labels is not None:
            if labels.shape != scores.shape:
                raise ValueError("labels must have the shape of the padded scores")
            labels = labels[mask]
        if weights is not None:
            if weights.shape != scores.shape:
                raise ValueError("weights must have the shape of the padded scores")
            weights = weights[mask]
        scores = scores[mask]

    if scores.dim() != 1:
        raise ValueError(
            f"scores must be 1-D (flat, with groups) or 2-D with a mask; got shape "
            f"{tuple(scores.shape)}"
        )
    n = scores.shape[0]
    groups = as_groups(groups, n, device=scores.device)
    _check_finite(scores.detach(), "scores")

    p = resolve_pairs(pairs)
    if labels is None:
        if not isinstance(p, ExplicitPairs):
            raise ValueError("labels are required unless pairs=ExplicitPairs(...)")
    else:
        if labels.dim() != 1 or labels.shape[0] != n:
            raise ValueError(
                f"labels must have shape ({n},) like scores, got {tuple(labels.shape)}"
            )
        labels = labels.to(scores.device)
        if labels.dtype.is_floating_point and not bool(torch.isfinite(labels).all()):
            _check_finite(labels, "labels")
    if isinstance(p, ExplicitPairs):
        p = p.validate(groups)
    if weights is not None:
        if weights.dim() != 1 or weights.shape[0] != n:
            raise ValueError(
                f"weights must have shape ({n},) like scores, got {tuple(weights.shape)}"
            )
        weights = weights.to(scores.device)
        if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
            raise ValueError("weights must be finite and non-negative (no NaN or inf)")
    return Prepared(scores, labels, groups, p, weights)


def reduce_per_group(per_group: Tensor, reduction: str, has_pairs: Optional[Tensor] = None
                     ) -> Tensor:
    """Apply ``reduction`` to a ``(G,)`` tensor of per-query losses.

    ``"mean"`` averages over queries where ``has_pairs`` is true (all queries if ``None``);
    with no such query it returns 0 (never NaN).
    """
    if reduction == "none":
        return per_group
    if reduction == "sum":
        return per_group.sum()
    if reduction == "mean":
        if has_pairs is None:
            return per_group.mean() if per_group.numel() else per_group.sum()
        cnt = has_pairs.sum()
        return per_group.sum() / cnt.clamp_min(1).to(per_group.dtype)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


class RankingLoss(nn.Module):
    """Base class: stores ``reduction`` and defines the call/``grad_hess`` contract.

    Subclasses implement :meth:`per_group` (``(G,)`` per-query losses from
    :class:`Prepared` inputs, differentiable) and :meth:`_grad_hess` (closed-form gradient
    and curvature of the summed loss). ``has_pairs`` (``(G,)`` bool) feeds ``"mean"``.
    """

    #: the loss is a sum of per-query terms (a block-diagonal Hessian by query), which the
    #: exact autograd curvature of :mod:`torchrankboost.curvature` exploits
    per_query = True
    #: labels are relevance grades (``>= 0``) unless a loss documents a meaning for negative
    #: ones (``AdaBoostLoss``: below the threshold; ``SquaredErrorLoss``: a real target)
    negative_labels = False

    def __init__(self, *, reduction: str = "sum"):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    # -- to implement -------------------------------------------------------------
    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        """Return ``(per_group_loss (G,), has_pairs (G,) bool or None)``."""
        raise NotImplementedError

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        raise NotImplementedError(f"{type(self).__name__} has no closed-form grad_hess")

    # -- public -------------------------------------------------------------------
    def forward(self, scores: Tensor, labels: Optional[Tensor] = None,
                groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                weights: Optional[Tensor] = None, mask: Optional[Tensor] = None) -> Tensor:
        inp = self._inputs(scores, labels, groups, pairs=pairs, weights=weights, mask=mask)
        per_group, has_pairs = self.per_group(inp)
        return reduce_per_group(per_group, self.reduction, has_pairs)

    def grad_hess(self, scores: Tensor, labels: Optional[Tensor] = None,
                  groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                  weights: Optional[Tensor] = None, hess: str = "diag"
                  ) -> Tuple[Tensor, Tensor]:
        """Per-document gradient and curvature of the reduced loss (``"none"`` = sum).

        Args:
            hess: ``"diag"`` for the exact Hessian diagonal, ``"bound"`` for a diagonal
                that upper-bounds the Hessian (``D - H ⪰ 0``).

        Returns:
            ``(grad, curvature)``, both ``(n,)`` in the dtype of ``scores``.
        """
        if hess not in ("diag", "bound"):
            raise ValueError(f"hess must be 'diag' or 'bound', got {hess!r}")
        inp = self._inputs(scores.detach(), labels, groups, pairs=pairs, weights=weights)
        return self._grad_hess(inp, hess)

    def _inputs(self, scores, labels, groups, **kw) -> Prepared:
        """:func:`prepare_inputs`, then the label-sign rule: negative labels are refused
        (allRank pads with -1) unless the loss gives them a meaning (``negative_labels``) or
        the pairs do not read grades (``Bipartite``: below the threshold; explicit pairs)."""
        inp = prepare_inputs(scores, labels, groups, **kw)
        y = inp.labels
        if (not self.negative_labels and y is not None and y.numel()
                and not isinstance(inp.pairs, (Bipartite, ExplicitPairs))
                and float(y.min()) < 0):
            raise ValueError(
                f"{type(self).__name__} needs non-negative relevance labels, got "
                f"{float(y.min()):g}; a label of -1 usually marks padding: pass the padded "
                f"(B, L) tensors with mask=... (or drop the padded slots); real-valued grades "
                f"can be shifted to >= 0 (only their order counts)")
        return inp

    def round_diagnostics(self, scores: Tensor, labels: Optional[Tensor] = None,
                          groups: Optional[Groups] = None) -> Dict[str, float]:
        """Scalars a boosting driver logs each round for this loss, besides the loss itself
        (plain floats keyed by name). None by default; ``AdaBoostLoss`` gives the F-skew."""
        return {}

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
