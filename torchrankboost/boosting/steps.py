r"""Step sizes for the boosting driver: exact 1-D line search and one Newton step.

Both work on a scalar function of one variable, :math:`\varphi(\alpha) = L(s + \alpha f)`,
the loss along the weak learner's output ``f``. Derivatives come from autograd on the
scalar ``α`` (a 0-d float64 tensor with ``requires_grad``): ``φ'`` by one backward pass and
``φ''`` by a second (double backward), i.e. ``⟨∇L, f⟩`` and ``fᵀ∇²L f`` without ever forming a
gradient or Hessian in ``n`` dimensions. When the loss cannot be differentiated twice (a custom
autograd function without double backward) the search falls back to first derivatives only
(safeguarded secant / bisection on ``φ'``).

:func:`line_search` minimises ``φ`` for a (locally) convex ``φ``; see its docstring for the
algorithm, the stopping rules and how an unbounded direction is reported. A NaN ``φ`` at any
trial point is a :class:`~torchrankboost.contract.NumericalError` (never "no decrease,
converged"); ``±inf`` is an overshoot and backtracked from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from ..contract import NumericalError
from ..exact import WIDTH, accumulate, query_accumulate

__all__ = ["LineSearchResult", "line_search", "newton_step", "newton_from_values", "evaluate_phi",
           "summed_evaluate", "exact_line", "shift_minimiser", "exact_step", "decreases"]

F64 = torch.float64


@dataclass
class LineSearchResult:
    """Outcome of :func:`line_search`.

    Attributes:
        alpha: the step (a Python float; ``0.0`` when no decrease was possible).
        value: ``φ(alpha)``.
        value0: ``φ(0)``.
        deriv0: ``φ'(0)``.
        deriv: ``φ'(alpha)`` (NaN when it was not evaluated there).
        status: ``"converged"`` (a bracketed or Newton-certified minimiser),
            ``"stationary"`` (``φ'(0) == 0``: nothing to do, ``alpha = 0``),
            ``"unbounded"`` (``φ'`` still negative along the descent direction at
            ``max_alpha``: the loss keeps decreasing — e.g. separable data under an
            exponential loss; ``alpha`` is the cap), ``"max_iter"`` (best point found within
            the evaluation budget), or ``"no_decrease"`` (no evaluated point beat ``φ(0)``).
        n_evals: number of evaluations of ``φ``.
        history: ``[(alpha, φ, φ'), ...]`` of every evaluation.
    """

    alpha: float
    value: float
    value0: float
    deriv0: float
    deriv: float
    status: str
    n_evals: int
    history: List[Tuple[float, float, float]] = field(default_factory=list)

    @property
    def unbounded(self) -> bool:
        return self.status == "unbounded"


def evaluate_phi(phi: Callable[[Tensor], Tensor], alpha: float, order: int = 2
                 ) -> Tuple[float, float, float]:
    """``(φ(α), φ'(α), φ''(α))`` by autograd on a 0-d float64 ``α``.

    ``order=1`` skips the second derivative (returns NaN for it). ``φ''`` is 0 when ``φ'``
    does not depend on ``α`` (piecewise-linear losses). Raises ``RuntimeError`` when the
    graph does not support double backward (callers fall back to ``order=1``).
    """
    a = torch.tensor(float(alpha), dtype=F64, requires_grad=True)
    with torch.enable_grad():
        v = phi(a)
        if not isinstance(v, Tensor) or v.numel() != 1:
            raise ValueError("phi must return a scalar tensor")
        v = v.reshape(())
        fv = float(v.detach())
        if not v.requires_grad:  # constant along the direction
            return fv, 0.0, 0.0
        (d,) = torch.autograd.grad(v, a, create_graph=order >= 2, allow_unused=True)
        if d is None:
            return fv, 0.0, 0.0
        if order < 2:
            return fv, float(d.detach()), float("nan")
        if not d.requires_grad:
            return fv, float(d.detach()), 0.0
        (h,) = torch.autograd.grad(d, a, allow_unused=True)
        return fv, float(d.detach()), (0.0 if h is None else float(h))


def summed_evaluate(comm, phi: Callable[[Tensor], Tensor], order: int = 2
                    ) -> Callable[[float], Tuple[float, float, float]]:
    """``α ↦ (φ, φ', φ'')`` summed over the ranks of a data-parallel fit: each rank's ``φ``
    by autograd (:func:`evaluate_phi`), one ``comm.sum`` of the three numbers (``comm``: a
    :class:`~torchrankboost.parallel.FitComm`; the local values in one process). The
    ``evaluate`` of :func:`line_search` and :func:`newton_from_values`. Without double
    backward: first derivatives from then on (``φ''`` NaN, as :func:`line_search` does
    with ``phi``)."""
    use = [order]

    def local(a):
        if use[0] >= 2:
            try:
                return list(evaluate_phi(phi, a, use[0]))
            except RuntimeError:  # no double backward: first derivatives only
                use[0] = 1
        return list(evaluate_phi(phi, a, 1))

    def evaluate(a):
        t = comm.sum(lambda: local(a), size=3)
        return float(t[0]), float(t[1]), float(t[2])

    return evaluate


class _Phi:
    """Evaluation bookkeeping: order fallback, history, best point."""

    def __init__(self, phi, sign: float, order: int, evaluate=None):
        self.phi = phi
        self.evaluate = evaluate
        self.sign = sign
        self.order = order
        self.history: List[Tuple[float, float, float]] = []

    def __call__(self, beta: float) -> Tuple[float, float, float]:
        a = self.sign * beta
        if self.evaluate is not None:
            r = self.evaluate(a)
            v, d = float(r[0]), float(r[1])
            h = float(r[2]) if len(r) > 2 and self.order >= 2 else float("nan")
        elif self.order >= 2:
            try:
                v, d, h = evaluate_phi(self.phi, a, 2)
            except RuntimeError:
                self.order = 1
                v, d, h = evaluate_phi(self.phi, a, 1)
        else:
            v, d, h = evaluate_phi(self.phi, a, 1)
        self.history.append((a, v, d))
        if math.isnan(v) and a != 0.0:  # a failure of the loss, not "no decrease" (φ(0):
            # line_search's own ValueError)
            raise NumericalError(f"the loss is NaN at step {a:.6g} along the weak model's "
                                 f"output")
        # in the oriented variable β = sign·α: ψ(β) = φ(sign β), ψ' = sign φ', ψ'' = φ''
        return v, self.sign * d, h


def line_search(phi: Optional[Callable[[Tensor], Tensor]] = None, *, alpha0: float = 1.0,
                max_alpha: Optional[float] = None, max_ratio: float = 100.0, xtol: float = 1e-6, gtol: float = 1e-9,
                max_evals: int = 60, order: int = 2, value0: Optional[float] = None,
                deriv0: Optional[float] = None,
                evaluate: Optional[Callable[[float], Tuple[float, ...]]] = None,
                select: str = "value", min_scale: float = 0.0) -> LineSearchResult:
    r"""Minimise the scalar function ``φ(α)`` (exact 1-D line search).

    ``phi`` takes a 0-d float64 tensor ``α`` and returns a scalar tensor differentiable in
    ``α`` (typically ``lambda a: loss(s + a * f, labels, groups)``; move ``α`` to the
    scores' device inside ``phi`` if needed — 0-d CPU tensors mix with CUDA tensors).

    Algorithm (safeguarded Newton with bracketing):

    1. Evaluate ``φ(0), φ'(0), φ''(0)``. If ``φ'(0) = 0`` return ``α = 0`` (``"stationary"``).
       Otherwise search along the descent direction ``σ = −sign φ'(0)`` (a negative step is
       allowed: the learner's output may point uphill, e.g. correlation-selected rankers).
    2. **Expansion** (no point with ``φ' > 0`` seen yet): the next trial is the Newton step
       from the current point for the first two moves, then ``max(Newton step, 2·current)``
       — starting from the Newton step
       ``−φ'(0)/φ''(0)`` when ``φ''(0) > 0``, else ``alpha0``. A point with a non-finite
       ``φ`` or ``φ'`` becomes an upper bracket (backtracking). A trial whose Newton
       increment ``|φ'/φ''|`` is below ``xtol·max(α₁, |α|)`` (``α₁`` the first trial) is accepted (a Newton-certified
       minimiser, e.g. the first step on a quadratic). If ``|α|`` reaches ``max_alpha``
       (default: ``max_ratio = 100`` times the first trial step) with
       ``φ'`` still negative the function keeps decreasing: status ``"unbounded"`` and
       ``alpha = ±max_alpha``.
    3. **Bracketed** (``φ'(lo) < 0 < φ'(hi)``): Newton steps from the last point, replaced by
       a secant step on ``φ'`` (without second derivatives) and by bisection whenever the
       step leaves the bracket; stop when the bracket or the step is below
       ``xtol·max(α₁, |α|)`` or ``|φ'| ≤ gtol·|φ'(0)|``.
    4. The returned point is the best evaluated one (lowest ``φ``), so the result never
       increases ``φ`` (``"no_decrease"`` and ``α = 0`` if nothing beat ``φ(0)``, which can
       only happen for non-convex or noisy ``φ``).

    An exactly zero derivative ``φ'(α) = 0`` at a trial point is taken as a minimiser
    (convex ``φ``): flat tails of piecewise-quadratic losses (squared hinge, QBRank) end
    there. Choose ``max_alpha`` so that ``φ'`` cannot underflow to 0 before the cap on an
    asymptotically flat direction (exponential losses in float64 underflow near
    ``α·margin ≈ 745``); the relative default does this for Newton-scaled directions.

    Args:
        phi: the scalar function.
        alpha0: first trial step when ``φ''(0) ≤ 0`` (no curvature information).
        max_alpha: cap on ``|α|`` for the unbounded-direction test; default
            ``max_ratio`` times the first trial step (the Newton step from 0, or ``alpha0``).
        max_ratio: see ``max_alpha`` (default 100: a minimiser more than 100 Newton steps
            away is reported as an unbounded direction).
        xtol: relative step tolerance.
        gtol: relative derivative tolerance (``|φ'| ≤ gtol·|φ'(0)|``).
        max_evals: budget of evaluations of ``φ``.
        order: 2 (Newton, default) or 1 (derivative-only secant/bisection).
        evaluate: instead of ``phi``, a closed form ``α ↦ (φ(α), φ'(α))`` or ``(φ, φ', φ'')``
            on Python floats (no autograd): the paper algorithms pass their pair-statistics
            kernels here. Without a third value the search runs with ``order=1``.
        min_scale: a floor on the scale of the relative tolerances (``xtol·max(α₁, |α|,
            min_scale)``): ``1.0`` makes ``xtol`` an absolute tolerance for small steps.
        select: which evaluated point is returned: ``"value"`` (default, the lowest ``φ``)
            or ``"derivative"`` (the smallest ``|φ'|``: the root of ``φ'`` of a convex
            ``φ`` to the tolerance, where ``φ`` itself is flat to rounding).
        value0: ``φ(0)`` when the caller already knows it, with ``deriv0`` (the booster
            does: the current loss); the evaluation at 0 is then skipped and the first
            trial is ``alpha0`` (pass a curvature-scaled guess, e.g. the surrogate's
            ``−⟨g, f⟩ / Σ h f²``).
        deriv0: ``φ'(0)`` when the caller already knows it, with ``value0`` (the booster's
            ``⟨∇L, f⟩``).

    Returns:
        :class:`LineSearchResult`.
    """
    _check_line_search_args(max_alpha, max_ratio, alpha0, order)
    if select not in ("value", "derivative"):
        raise ValueError(f"select must be 'value' or 'derivative', got {select!r}")
    if (phi is None) == (evaluate is None):
        raise ValueError("line_search needs exactly one of phi and evaluate")
    ev0 = _Phi(phi, 1.0, order, evaluate)
    if value0 is not None and deriv0 is not None:
        f0, d0, h0 = float(value0), float(deriv0), float("nan")
        ev0.history.append((0.0, f0, d0))
    else:
        f0, d0, h0 = ev0(0.0)
    if not (math.isfinite(f0) and math.isfinite(d0)):
        raise ValueError(f"line_search: phi(0) = {f0} and phi'(0) = {d0} must be finite")
    if d0 == 0.0:
        return LineSearchResult(0.0, f0, f0, d0, d0, "stationary", 1, ev0.history)
    sign = -1.0 if d0 > 0 else 1.0
    ev = _Phi(phi, sign, ev0.order, evaluate)
    ev.history = ev0.history
    return _search(ev, sign, f0, d0, h0, alpha0=alpha0, max_alpha=max_alpha,
                   max_ratio=max_ratio, xtol=xtol, gtol=gtol, max_evals=max_evals,
                   select=select, min_scale=min_scale)


def _search(ev: _Phi, sign: float, f0: float, d0: float, h0: float, *, alpha0, max_alpha,
            max_ratio, xtol, gtol, max_evals, select, min_scale) -> LineSearchResult:
    """Steps 2–4 of :func:`line_search` in the oriented variable ``β = sign·α``."""
    g0 = -abs(d0)  # ψ'(0) < 0 in the oriented variable
    best_b, best_f = 0.0, f0
    lo, f_lo, d_lo = 0.0, f0, g0
    hi: Optional[float] = None
    d_hi = float("nan")
    b = _first_trial(ev.order, g0, h0, alpha0)
    scale = max(b, min_scale)  # the natural scale of α for the relative tolerances
    if max_alpha is None:
        max_alpha = max_ratio * b
    status = "max_iter"
    last_b, last_d = 0.0, g0
    dx_old: Optional[float] = None
    n_expand = 0
    for _ in range(max_evals - 1):
        if hi is None and b >= max_alpha:
            b = max_alpha
        f, d, h = ev(b)
        finite = math.isfinite(f) and math.isfinite(d)
        if finite and f < best_f:
            best_b, best_f = b, f
        if not finite:
            hi, d_hi = b, float("inf")
        elif d == 0.0:
            best_b, best_f = (b, f) if f <= best_f else (best_b, best_f)
            status = "converged"
            break
        elif d > 0 or f > f_lo:  # past the minimum (f > f_lo guards non-convex φ)
            hi, d_hi = b, d
        else:
            lo, f_lo, d_lo = b, f, d
        tol = xtol * max(scale, abs(b))
        if finite and h is not None and math.isfinite(h) and h > 0 and abs(d / h) <= tol:
            status = "converged"
            break
        if finite and abs(d) <= gtol * abs(g0) and hi is not None:
            status = "converged"
            break
        if hi is None:
            if b >= max_alpha:
                status = "unbounded"
                break
            n_expand += 1
            nb = _expansion_trial(ev.order, b, d, h, last_b, last_d, n_expand)
            last_b, last_d = b, d
            b = min(nb, max_alpha) if b < max_alpha else nb
            continue
        if hi - lo <= xtol * max(scale, abs(hi)):
            status = "converged"
            break
        cand, dx_old = _bracketed_trial(ev.order, finite, b, d, h, last_b, last_d, lo, d_lo,
                                        hi, d_hi, dx_old)
        last_b, last_d = b, d
        b = cand
    if select == "derivative" and status != "unbounded":
        # the root of φ' (φ is flat to rounding there: its value need not beat φ(0))
        best_b, best_f = _derivative_root(ev, sign)
    return _line_search_result(ev, status, sign, best_b, best_f, f0, d0)


def _first_trial(order: int, g0: float, h0: float, alpha0: float) -> float:
    """The first trial step: Newton's ``-ψ'(0)/ψ''(0)`` when the curvature at 0 is known
    and positive, else ``alpha0``."""
    if order >= 2 and math.isfinite(h0) and h0 > 0:
        return -g0 / h0
    return alpha0


def _derivative_root(ev: _Phi, sign: float) -> Tuple[float, float]:
    """``(α, φ(α))`` of the evaluated point with the smallest finite ``|φ'|``."""
    fin = [(abs(dd), a, v) for a, v, dd in ev.history
           if math.isfinite(v) and math.isfinite(dd)]
    _, a_root, f = min(fin)
    return sign * a_root, f


def _check_line_search_args(max_alpha, max_ratio, alpha0, order) -> None:
    if max_alpha is not None and not (max_alpha > 0 and math.isfinite(max_alpha)):
        raise ValueError(f"max_alpha must be a positive finite number, got {max_alpha}")
    if not (max_ratio > 1 and math.isfinite(max_ratio)):
        raise ValueError(f"max_ratio must be a finite number > 1, got {max_ratio}")
    if not alpha0 > 0:
        raise ValueError(f"alpha0 must be positive, got {alpha0}")
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order}")


def _expansion_trial(order, b, d, h, last_b, last_d, n_expand) -> float:
    """The next trial while no point past the minimum is known: the first two moves trust
    Newton (or the secant on φ') when it points forward; after that at least double, so
    that an asymptotically flat direction reaches the cap in O(log(max_ratio))
    evaluations."""
    fwd = None
    if order >= 2 and math.isfinite(h) and h > 0:
        fwd = b - d / h
    elif d != last_d and b != last_b:
        sec = b - d * (b - last_b) / (d - last_d)
        fwd = min(sec, 8.0 * b) if sec > b else None
    if fwd is not None and fwd > b and n_expand <= 2:
        return fwd
    return 2.0 * b if fwd is None else max(2.0 * b, fwd)


def _bracketed_trial(order, finite, b, d, h, last_b, last_d, lo, d_lo, hi, d_hi, dx_old):
    """The next trial inside the bracket ``(lo, hi)``: Newton / secant, safeguarded by
    bisection (as in Numerical Recipes' rtsafe: bisect when the step leaves the bracket or
    does not halve the last step). Returns ``(trial, new dx_old)``."""
    cand = None
    if finite and order >= 2 and math.isfinite(h) and h > 0:
        cand = b - d / h
    elif finite and d != last_d and b != last_b:
        cand = b - d * (b - last_b) / (d - last_d)  # secant through the last two points
    elif math.isfinite(d_hi) and d_hi != d_lo:
        cand = lo - d_lo * (hi - lo) / (d_hi - d_lo)
    if (cand is None or not (lo < cand < hi)
            or (dx_old is not None and 2.0 * abs(cand - b) > dx_old)):
        return 0.5 * (lo + hi), 0.5 * (hi - lo)
    return cand, abs(cand - b)


def _line_search_result(ev, status, sign, best_b, best_f, f0, d0) -> LineSearchResult:
    if status == "unbounded":
        a_cap, v_cap, d_cap = ev.history[-1]
        return LineSearchResult(a_cap, v_cap, f0, d0, d_cap, status, len(ev.history),
                                ev.history)
    if best_b == 0.0:
        return LineSearchResult(0.0, f0, f0, d0, d0, "no_decrease", len(ev.history),
                                ev.history)
    d_best = float("nan")
    for a, v, dd in ev.history:
        if a == sign * best_b:
            d_best = dd
    return LineSearchResult(sign * best_b, best_f, f0, d0, d_best, status, len(ev.history),
                            ev.history)


def decreases(value: float, value0: float, alpha: float, rnd: Optional[int] = None) -> bool:
    """Accept a backtracking trial: ``value ≤ value0`` and finite (``±inf``: step too long,
    halve it). A NaN ``value`` raises :class:`~torchrankboost.contract.NumericalError`
    (``rnd``: the round, named in the message) instead of ending as "no decrease"."""
    if math.isnan(value):
        where = "" if rnd is None else f"round {rnd}: "
        raise NumericalError(f"{where}the loss is NaN at step {alpha:.6g} along the weak "
                             f"model's output", round=rnd)
    return math.isfinite(value) and value <= value0


def exact_step(evaluate: Callable[[float], Tuple[float, ...]], *, max_alpha: float,
               xtol: float = 1e-12, max_evals: int = 200) -> Tuple[float, bool]:
    """The exact minimiser of a convex ``φ`` given in closed form (``evaluate``: ``α ↦ (φ(α),
    φ'(α)[, φ''(α)])``), by :func:`line_search` to a tight tolerance (Newton steps when
    ``φ''`` is given, else secant steps; the point with the smallest ``|φ'|``): the step of
    the paper algorithms' coordinate descent (Rudin & Schapire 2009, Fig. 1; Rudin 2009's
    p-norm push) for real-valued rankers. Returns ``(alpha, bounded)``; ``bounded`` is False when ``φ`` still
    decreases at ``|α| = max_alpha`` (the minimum is at infinity, ``alpha`` is the cap)."""
    res = line_search(evaluate=evaluate, max_alpha=max_alpha, xtol=xtol, gtol=0.0,
                      max_evals=max_evals, order=2, select="derivative", min_scale=1.0)
    return res.alpha, not res.unbounded


def newton_step(phi: Callable[[Tensor], Tensor], *, fallback_curvature: Optional[float] = None
                ) -> Tuple[float, float, float, float]:
    """One Newton step on ``α`` from 0: ``α = −φ'(0)/φ''(0)``.

    When ``φ''(0) ≤ 0`` (or not available) ``fallback_curvature`` (e.g. the surrogate's
    ``Σ h f²``) replaces it; without one the step is ``−sign φ'(0)`` (unit curvature).

    Returns ``(alpha, φ(0), φ'(0), φ''(0))``.
    """
    try:
        f0, d0, h0 = evaluate_phi(phi, 0.0, 2)
    except RuntimeError:
        f0, d0, h0 = evaluate_phi(phi, 0.0, 1)
    return newton_from_values(f0, d0, h0, fallback_curvature)


def newton_from_values(f0: float, d0: float, h0: float,
                       fallback_curvature: Optional[float] = None
                       ) -> Tuple[float, float, float, float]:
    """:func:`newton_step` from known ``φ(0), φ'(0), φ''(0)`` (e.g. sums over the ranks of a
    data-parallel fit): ``(alpha, φ(0), φ'(0), φ''(0))``."""
    if not (math.isfinite(f0) and math.isfinite(d0)):
        raise ValueError(f"newton_step: phi(0) = {f0} and phi'(0) = {d0} must be finite")
    curv = h0
    if not (math.isfinite(curv) and curv > 0):
        curv = fallback_curvature if fallback_curvature and fallback_curvature > 0 else None
    if d0 == 0.0:
        return 0.0, f0, d0, h0
    alpha = -d0 / curv if curv is not None else -math.copysign(1.0, d0)
    return alpha, f0, d0, h0


def _line_parts(terms: Callable, s: Tensor, f: Tensor, offsets: Tensor, a: float,
                order: int):
    """This rank's ``(accumulators (3, WIDTH), value terms)`` of ``φ(a)``, ``φ'(a)``,
    ``φ''(a)`` at ``x = s + a f``: the loss's per-query terms; the per-document gradient
    ``∂L/∂x`` (backward of the terms' sum) times ``f``; the Hessian-vector product
    ``(∇²L f)`` (double backward) times ``f``; the last two summed per query in row
    order. ``order=1``: no ``φ''`` (NaN); a term or gradient that does not depend on
    ``x``: derivatives 0. ``RuntimeError`` when the loss has no double backward."""
    x = (s + f * a).detach().requires_grad_(True)
    out = torch.zeros(3, WIDTH, dtype=torch.int64, device=s.device)
    with torch.enable_grad():
        vt = terms(x)
        t = vt.terms.reshape(-1)
        out[0] = accumulate(t.detach())
        if order < 2:
            out[2, -3] = 1  # φ'' is NaN (a NaN count)
        if not t.requires_grad:
            return out, vt
        (gx,) = torch.autograd.grad(t.sum(), x, create_graph=order >= 2, allow_unused=True)
        if gx is None:
            return out, vt
        out[1] = query_accumulate(gx.detach() * f, offsets)
        if order >= 2 and gx.requires_grad:
            (hx,) = torch.autograd.grad(gx, x, grad_outputs=f, allow_unused=True)
            if hx is not None:
                out[2] = query_accumulate(hx * f, offsets)
    return out, vt


def exact_line(comm, terms: Callable, s: Tensor, f: Tensor, offsets: Tensor, order: int = 2
               ) -> Callable[[float], Tuple[float, float, float]]:
    """``α ↦ (φ, φ', φ'')`` of ``φ(α) = L(s + α f)`` with every sum exact: the loss's
    per-query terms (``terms(x)``: a :class:`~torchrankboost.losses.ValueTerms`,
    differentiable in ``x``), ``φ' = Σ_d ∂L/∂x_d f_d`` and ``φ'' = Σ_d (∇²L f)_d f_d``
    (one backward and one double backward, as autograd on ``α`` costs), the per-document
    products summed per query in row order (``offsets``: the queries' CSR offsets), all
    three summed over the queries and the ranks exactly (one
    :meth:`~torchrankboost.parallel.FitComm.exact_sums`): the same floats for any order of
    the queries and any split over the ranks. The ``evaluate`` of :func:`line_search` and
    :func:`newton_from_values`. Without double backward: first derivatives from then on
    (``φ''`` NaN)."""
    use = [order]

    def local(a):
        if use[0] >= 2:
            try:
                return _line_parts(terms, s, f, offsets, a, use[0])
            except RuntimeError:  # no double backward: first derivatives only
                use[0] = 1
        return _line_parts(terms, s, f, offsets, a, 1)

    def evaluate(a):
        box = []

        def parts():
            acc, vt = local(a)
            box.append(vt)
            return (), acc

        _, tot = comm.exact_sums(parts, plain=0, exact=3)
        v, d, h = (float(box[0].value(t)) for t in tot)
        return v, d, h

    return evaluate


def shift_minimiser(comm, terms: Callable, n: int, offsets: Tensor, device=None, *,
                    max_ratio: float = 100.0) -> float:
    """The constant score ``c`` minimising the loss of ``c·1`` over every rank (``terms``:
    this rank's loss of its ``n`` scores as a :class:`~torchrankboost.losses.ValueTerms`,
    ``offsets`` its queries' CSR offsets): a :func:`line_search` along the all-ones
    direction with every sum exact over the queries and the ranks (:func:`exact_line`;
    ``comm`` a :class:`~torchrankboost.parallel.FitComm`). 0 when the loss ignores a common
    shift (``Σ g ≈ 0`` relative to ``Σ |g|``, or no gradient) or the search does not
    converge."""
    ones = torch.ones(n, dtype=F64, device=device)
    zero = torch.zeros(n, dtype=F64, device=device)

    def grad_sums():
        acc = torch.zeros(2, WIDTH, dtype=torch.int64, device=device)
        x = zero.clone().requires_grad_(True)
        with torch.enable_grad():
            t = terms(x).terms
            if not t.requires_grad:
                return [0.0], acc
            (g,) = torch.autograd.grad(t.sum(), x, allow_unused=True)
        if g is None:
            return [0.0], acc
        return [1.0], query_accumulate(torch.stack([g, g.abs()]), offsets)

    (has,), (tot, mass) = (v.tolist() for v in comm.exact_sums(grad_sums, plain=1, exact=2))
    if has == 0 or abs(tot) <= 1e-9 * mass or tot == 0.0:
        return 0.0
    res = line_search(evaluate=exact_line(comm, terms, zero, ones, offsets, 2),
                      max_ratio=max_ratio)
    if res.status in ("converged", "max_iter"):
        return float(res.alpha)
    return 0.0
