r"""The step rules of a boosting round: how far to go along the weak model's output.

Each rule is a small callable object over one :class:`StepProblem` (the fit objective at the
current scores :math:`s`, the weak model's output :math:`f` ``(n,)``, the sums
:math:`\sum g f` and :math:`\sum h f^2` over every rank, the learning rate :math:`\nu`) that
returns a :class:`StepResult` (the step :math:`\alpha`; the update is
:math:`s \leftarrow s + \nu\alpha f`):

* :class:`SurrogateStep` (``step="surrogate"``): the quadratic model's minimiser
  :math:`\alpha = -\sum g f / \sum h f^2`, halved while :math:`L(s+\nu\alpha f) > L(s)`;
* :class:`LineSearchStep` (``"line_search"``): the exact line search of
  :math:`\varphi(\alpha) = L(s+\alpha f)` (:func:`~.steps.line_search`);
* :class:`NewtonStep` (``"newton"``): :math:`\alpha = -\varphi'(0)/\varphi''(0)`, halved
  until the loss does not increase;
* :class:`FixedStep` (``"fixed"``): :math:`\alpha = 1`.

The surrogate and fixed rules evaluate the loss at the new scores together with its gradient
and curvature (one fused pass of the objective) and hand them on in the result, so the next
round needs no second evaluation. A rule that cannot give a step raises :class:`StepFailed`
(a numerical failure, or a direction along which the loss decreases without bound), which the
round catches once and turns into the fit's error or stop; a NaN loss at a backtracking trial
is the :class:`~torchrankboost.contract.NumericalError` of :func:`~.steps.decreases`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from ..contract import NumericalError
from ._round_sums import moved
from .objective import FitObjective, Pending
from .steps import decreases, line_search, newton_from_values

__all__ = ["StepProblem", "StepResult", "StepFailed", "SurrogateStep", "LineSearchStep",
           "NewtonStep", "FixedStep", "step_rule", "STEPS"]

F64 = torch.float64
STEPS = ("surrogate", "line_search", "newton", "fixed")
MAX_HALVINGS = 30


@dataclass(frozen=True)
class StepProblem:
    """One round's step problem.

    Attributes:
        objective: the fit objective, standing at the current scores ``s`` with
            ``value = L(s)`` over every rank (what the rules evaluate the loss with).
        f: the weak model's output ``(n,)`` float64, the direction.
        gf: ``Σ g f`` over every rank (``φ'(0)``).
        hff: ``Σ h f²`` over every rank, ``h`` the curvature the learner was fitted with.
        learning_rate: the shrinkage ``ν``.
        round: the round's number (named in errors).
    """

    objective: FitObjective
    f: Tensor
    gf: float
    hff: float
    learning_rate: float
    round: int


@dataclass
class StepResult:
    """A rule's step.

    Attributes:
        alpha: the step ``α`` (``0.0``: no step along ``f`` decreases the loss).
        value: ``L(s + ν α f)`` over every rank when the rule computed it, else ``None``.
        info: the rule's diagnostics (``status``, ``n_evals``, ``deriv0``, ...; the
            record's ``line_search``).
        scores: ``s + ν α f`` when the rule computed it (with ``value``).
        pending: the gradient and curvature at ``scores`` from ``value``'s fused pass.
    """

    alpha: float
    value: Optional[float] = None
    info: dict = field(default_factory=dict)
    scores: Optional[Tensor] = None
    pending: Optional[Pending] = None


class StepFailed(Exception):
    """A rule could not give a step: ``message`` says why (without the round). ``capped``:
    the loss decreases without bound along ``f`` and this is the capped step (the
    ``on_unbounded`` policy decides: raise, stop, or take it); ``None``: a numerical
    failure."""

    def __init__(self, message: str, *, capped: Optional[StepResult] = None):
        super().__init__(message)
        self.message = message
        self.capped = capped

    @property
    def unbounded(self) -> bool:
        return self.capped is not None


class SurrogateStep:
    """``α = −Σ g f / Σ h f²`` (the quadratic model's minimiser along ``f``; negative when
    ``f`` points uphill, e.g. a correlation-selected ranker), halved while
    ``L(s + ν α f) > L(s)`` (30 times at most, then ``α = 0``). The loss at the accepted
    point comes with its gradient and curvature (fused, for a loss with ``grad_hess``)."""

    def __call__(self, p: StepProblem) -> StepResult:
        obj, v0, gf, hff = p.objective, p.objective.value, p.gf, p.hff
        if not (hff > 0 and gf != 0.0 and math.isfinite(gf) and math.isfinite(hff)):
            return StepResult(0.0, None, {"status": "no_descent", "n_evals": 0, "deriv0": gf,
                                          "value0": v0})
        alpha = -gf / hff
        for tries in range(MAX_HALVINGS + 1):
            s_new = moved(obj.scores, p.learning_rate * alpha, p.f)
            ev = obj.evaluate(s_new, fused=obj.caps.grad_hess)
            if decreases(ev.value, v0, p.learning_rate * alpha, p.round):
                return StepResult(alpha, ev.value, {
                    "status": "surrogate", "n_evals": tries + 1, "deriv0": gf, "curv0": hff,
                    "value0": v0, "backtracks": tries}, scores=s_new, pending=ev.pending)
            alpha *= 0.5
        return StepResult(0.0, None, {"status": "no_decrease", "n_evals": MAX_HALVINGS + 1,
                                      "deriv0": gf, "value0": v0,
                                      "backtracks": MAX_HALVINGS + 1})


class NewtonStep:
    """One Newton step on ``α`` (``φ``, ``φ'``, ``φ''`` summed over the ranks; ``Σ h f²``
    when ``φ''(0)`` is not positive), halved until ``L(s + ν α f) ≤ L(s)`` (30 times at
    most, then ``α = 0``)."""

    def __call__(self, p: StepProblem) -> StepResult:
        obj, s, f = p.objective, p.objective.scores, p.f
        alpha, v0, d0, h0 = newton_from_values(*obj.line(f, 2)(0.0), p.hff)
        tries, new = 0, None
        while alpha != 0.0 and tries < MAX_HALVINGS:
            a = torch.tensor(p.learning_rate * alpha, dtype=F64)
            v = obj.evaluate(s + a.to(s.device) * f).value  # φ(ν α), over the ranks
            if decreases(v, v0, float(a)):
                new = v
                break
            alpha *= 0.5
            tries += 1
        else:
            if tries >= MAX_HALVINGS:
                alpha = 0.0
        return StepResult(alpha, new, {"status": "newton", "n_evals": 1 + tries + 1,
                                       "deriv0": d0, "curv0": h0, "value0": v0,
                                       "backtracks": tries})


class LineSearchStep:
    """The exact line search of ``L(s + α f)`` from the quadratic model's minimiser along
    ``f``, ``|Σ g f| / Σ h f²`` (exact for a quadratic loss; a guaranteed decrease under a
    valid curvature bound); ``φ(0)`` and ``φ'(0) = Σ g f`` are known.

    Args:
        order, tol, max_ratio: the search's ``order`` (2: Newton steps with ``φ''``, 1:
            secant), ``xtol`` and ``max_ratio`` (the cap on ``α`` in first trial steps).
    """

    def __init__(self, *, order: int = 2, tol: float = 1e-3, max_ratio: float = 100.0):
        self.order, self.tol, self.max_ratio = int(order), float(tol), float(max_ratio)

    def __call__(self, p: StepProblem) -> StepResult:
        obj, gf, hff = p.objective, p.gf, p.hff
        a0 = abs(gf) / hff if (hff > 0 and gf != 0.0) else 1.0
        try:
            res = line_search(evaluate=obj.line(p.f, self.order), max_ratio=self.max_ratio,
                              order=self.order, xtol=self.tol, value0=obj.value, deriv0=gf,
                              alpha0=a0 if math.isfinite(a0) and a0 > 0 else 1.0)
        except (ValueError, NumericalError) as exc:  # bad φ(0), a NaN φ at a trial step
            raise StepFailed(f"line search failed: {exc}") from None
        known = res.value if (p.learning_rate == 1.0 and res.status != "unbounded") else None
        step = StepResult(res.alpha, known, {"status": res.status, "n_evals": res.n_evals,
                                             "deriv0": res.deriv0, "value0": res.value0})
        if res.unbounded:
            raise StepFailed(
                f"the loss decreases without bound along the weak learner's output (line "
                f"search reached alpha = {res.alpha:.4g}, {self.max_ratio:g} times its first "
                f"trial step, with the loss still falling: {res.value0:.6g} -> "
                f"{res.value:.6g}); e.g. the training data are separated by the ensemble "
                f"plus this weak model", capped=step)
        return step


class FixedStep:
    """``α = 1``. With a loss that has ``grad_hess`` and no per-round random state, the loss
    at ``s + ν f`` comes with its gradient and curvature from one fused pass, kept for the
    next round as the surrogate rule does (a resampling loss recomputes its gradient at the
    next round's start anyway); otherwise the round evaluates the loss."""

    def __call__(self, p: StepProblem) -> StepResult:
        obj = p.objective
        if not obj.caps.grad_hess or obj.caps.resample is not None:
            return StepResult(1.0)
        s_new = obj.scores + (p.learning_rate * 1.0) * p.f
        ev = obj.evaluate(s_new, fused=True)
        return StepResult(1.0, ev.value, {}, scores=s_new, pending=ev.pending)


def step_rule(step: str, *, line_search_order: int = 2, line_search_tol: float = 1e-3,
              max_step_ratio: float = 100.0):
    """The rule of ``step`` (one of :data:`STEPS`; ``ValueError`` for another name)."""
    if step == "line_search":
        return LineSearchStep(order=line_search_order, tol=line_search_tol,
                              max_ratio=max_step_ratio)
    rules = {"surrogate": SurrogateStep, "newton": NewtonStep, "fixed": FixedStep}
    if step not in rules:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    return rules[step]()
