"""The ``step="fixed"`` rule (``α = 1``) with the loss at the updated scores fused with the
next round's gradient and curvature.

With a loss that has ``grad_hess`` (bound: ``value_grad_hess``), the fixed step evaluates
``L(s + ν f)`` together with its gradient and curvature in one pass, kept for the next round
(``run.pending``) as the ``"surrogate"`` rule does: one loss evaluation per round instead of
a value now and a gradient at the start of the next round. The scores, the value and the
gradient are those of the separate evaluations (``s + ν·1·f`` is the update of the driver's
``_apply``; the fused pass computes the per-query values and the gradient as ``value`` and
``grad_hess`` do). A loss with per-round random state (``resample``) recomputes its
gradient at the next round's start anyway, so it is left to the separate evaluation.
"""

from __future__ import annotations

from typing import Optional, Tuple

from torch import Tensor

__all__ = ["fixed_update"]


def fixed_update(booster, run, f: Tensor) -> Tuple[Optional[float], dict, Optional[Tensor]]:
    """``(L(s + ν f), info, s + ν f)`` with the gradient and curvature at ``s + ν f`` kept in
    ``run.pending``; ``(None, {}, None)`` (the driver computes the value) when the loss has no
    ``grad_hess`` or resamples per round."""
    loss = getattr(run.bound, "loss", None)
    if not booster._has_gh or callable(getattr(loss, "resample", None)):
        return None, {}, None
    s_new = run.scores + (booster.learning_rate * 1.0) * f
    kind = booster._curv_kind()
    v, g, h = booster._value_at(run, s_new, True, kind)
    run.pending = (s_new, g, h, kind)
    return v, {}, s_new
