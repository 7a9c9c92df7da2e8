"""The :class:`~.booster.Booster`'s options: the names of its curvatures and unbounded-direction
policies (the step rules' are :data:`~.step_rules.STEPS`) and the constructor's checks, each a
one-line ``ValueError`` naming the option, in the order of the constructor's arguments.
"""

from __future__ import annotations

import math
from typing import Union

from ..parallel import DistContext
from .step_rules import STEPS

__all__ = ["CURVATURES", "UNBOUNDED", "check_options", "base_score_option"]

CURVATURES = ("diag", "bound", "none")
UNBOUNDED = ("stop", "raise", "cap")

_OPTIONS = (  # (name, valid, what it must be, shown as repr): the constructor's checks
    ("n_rounds", lambda v: int(v) == v and v >= 0, "a non-negative integer", False),
    ("learning_rate", lambda v: v > 0 and math.isfinite(v), "positive", False),
    ("step", lambda v: v in STEPS, f"one of {STEPS + ('auto',)}", True),
    ("curvature", lambda v: v in CURVATURES, f"one of {CURVATURES}", True),
    ("subsample", lambda v: 0.0 < v <= 1.0, "in (0, 1]", False),
    ("on_unbounded", lambda v: v in UNBOUNDED, f"one of {UNBOUNDED}", True),
    ("hess_floor", lambda v: v > 0, "positive", False),
    ("verbose", lambda v: v == "auto" or isinstance(v, (bool, int)),
     "'auto', a bool or an int", True),
    ("line_search_tol", lambda v: 0 < v < 1, "in (0, 1)", False),
    ("line_search_order", lambda v: v in (1, 2) and not isinstance(v, bool), "1 or 2", True),
    ("distributed", lambda v: v is None or isinstance(v, (bool, DistContext)),
     "None, True, False or a DistContext", True),
)


def check_options(loss, learner, options: dict) -> None:
    """``ValueError`` for the first of the constructor's options that is not valid."""
    if not callable(loss):
        raise ValueError("loss must be callable: loss(scores, labels, groups) -> scalar")
    for meth in ("prepare", "fit"):
        if not callable(getattr(learner, meth, None)):
            raise ValueError(f"learner must have a {meth}() method (a weak learner: "
                             f"prepare(X, *, context), fit(prepared, target, weight, "
                             f"*, rows, generator))")
    for name, valid, what, as_repr in _OPTIONS:
        v = options[name]
        if not valid(v):
            raise ValueError(f"{name} must be {what}, got {v!r}" if as_repr
                             else f"{name} must be {what}, got {v}")


def base_score_option(base_score) -> Union[str, float]:
    """``base_score`` as ``"auto"`` or a float (``ValueError`` for anything else)."""
    if isinstance(base_score, str) and base_score == "auto":
        return base_score
    try:
        return float(base_score)
    except (TypeError, ValueError):
        raise ValueError(f"base_score must be 'auto' or a float, got {base_score!r}") from None
