r"""The fit objective: the loss as one boosting fit sees it, at the fit's current scores.

One :class:`FitObjective` per fit owns everything the driver asks of a loss: the loss bound
once to the training labels, groups, weights and (for click data) positions; its value
:math:`L(s)` summed over the ranks of a data-parallel fit; its gradient :math:`g` and
per-document curvature :math:`h` (``(n,)`` float64; closed form from ``grad_hess``, or by
autograd with the exact Hessian diagonal from Hessian-vector probes,
:func:`~.curvature.autograd_grad_hess`); the per-round draws of a stochastic loss
(YetiRank's ``resample``) and the between-round update of a position-debiasing loss; and
the *pending* gradient and curvature: a step rule that evaluates the loss at the new scores
in one fused pass (``value_grad_hess``) hands the gradient and curvature computed with the
value to the next round, which then costs no second loss evaluation.

:class:`LossCapabilities` is the one place of the package that asks what a loss can do
(its optional hooks, looked up once). :func:`require_pairs` and :func:`no_pairs_message`
refuse training data a pairwise loss cannot learn from: without a single crucial pair
(``label_i > label_j`` in one query, or positive over negative for ``Bipartite``) its value
and gradient are 0 everywhere and the fit would end after 0 rounds with a constant model.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from ..exact import WIDTH, accumulate
from ..losses.base import BoundLoss, ValueTerms
from .curvature import autograd_grad_hess, hvp_probes, is_per_query, scalar
from .steps import exact_line, shift_minimiser
from .weights import FitWeights

__all__ = ["FitObjective", "LossCapabilities", "Pending", "Evaluation", "no_pairs_message",
           "require_pairs", "DEBIAS_KEY"]

F64 = torch.float64
#: the key of a debiasing loss's learned state in the model's ``info``
DEBIAS_KEY = "position_debias"


def _hook(obj, name: str) -> Optional[Callable]:
    fn = getattr(obj, name, None)
    return fn if callable(fn) else None


@dataclass(frozen=True)
class LossCapabilities:
    """What a loss can do: its optional hooks, looked up once.

    Attributes:
        grad_hess: the closed-form ``grad_hess(scores, labels, groups, hess=...)`` (else the
            gradient by autograd, :func:`~.curvature.autograd_grad_hess`).
        binds: ``bind(labels, groups, weights=...)`` (a :class:`~torchrankboost.losses.
            BoundLoss`; needed for document and query weights).
        debiases: ``bind_position(labels, groups, position, ...)`` (a position-debiasing
            wrapper of :mod:`torchrankboost.clicks.debias`).
        per_query: a sum of per-query terms (block-diagonal Hessian, ``per_query = True``).
        preferred_step: the step rule ``step="auto"`` takes (default ``"surrogate"``).
        reduction: ``"sum"`` or ``"mean"`` over queries (default ``"sum"``).
        diagnostics: ``round_diagnostics(scores, labels, groups) -> dict`` or ``None``.
        resample: (of the bound loss's loss) ``resample(bound, scores, *, round)``, new
            random state each round (YetiRank), or ``None``.
        position_update: (of the bound loss) ``position_update(scores, comm, round,
            pending) -> changed`` between rounds (a debiasing loss), or ``None``.
    """

    grad_hess: bool = False
    binds: bool = False
    debiases: bool = False
    per_query: bool = False
    preferred_step: str = "surrogate"
    reduction: str = "sum"
    diagnostics: Optional[Callable] = None
    resample: Optional[Callable] = None
    position_update: Optional[Callable] = None

    @classmethod
    def of(cls, loss) -> "LossCapabilities":
        """The hooks of ``loss`` (those of its bound form: :meth:`with_bound`)."""
        return cls(grad_hess=_hook(loss, "grad_hess") is not None,
                   binds=_hook(loss, "bind") is not None,
                   debiases=_hook(loss, "bind_position") is not None,
                   per_query=is_per_query(loss),
                   preferred_step=getattr(loss, "preferred_step", "surrogate"),
                   reduction=getattr(loss, "reduction", "sum"),
                   diagnostics=_hook(loss, "round_diagnostics"))

    def with_bound(self, bound) -> "LossCapabilities":
        """These capabilities with the hooks of the loss's bound form ``bound``."""
        return replace(self, resample=_hook(getattr(bound, "loss", None), "resample"),
                       position_update=_hook(bound, "position_update"))


class Pending(NamedTuple):
    """The gradient ``g`` and curvature ``h`` (``(n,)``, asked with ``hess=kind``) of the loss
    at ``scores``, computed in one pass with its value and kept for the next round."""

    scores: Tensor
    g: Tensor
    h: Tensor
    kind: str


class Evaluation(NamedTuple):
    """``L(s)`` summed over the ranks, and the fused :class:`Pending` when asked for."""

    value: float
    pending: Optional[Pending]


class _Local(NamedTuple):
    """This rank's part of ``L(s)``: the accumulator ``(WIDTH,)`` of its per-query terms
    (:mod:`torchrankboost.exact`), their count and scale, the fused :class:`Pending`."""

    acc: Tensor
    parts: ValueTerms
    pending: Optional[Pending]


def _one_term(value: Tensor) -> ValueTerms:
    """A loss without per-query terms: its value as the one term of this rank."""
    return ValueTerms(scalar(value).reshape(1))


def value_terms(bound, scores: Tensor) -> ValueTerms:
    """``bound``'s loss at ``scores`` as per-query terms (its ``value_terms``), or its value
    as one term (a plain callable, a wrapper without terms). Differentiable."""
    fn = getattr(bound, "value_terms", None)
    return fn(scores) if callable(fn) else _one_term(bound.value(scores))


def _no_terms(device) -> _Local:
    return _Local(torch.zeros(WIDTH, dtype=torch.int64, device=device),
                  ValueTerms(torch.zeros(1, dtype=F64, device=device)), None)


class _CallableBound:
    """The bound-loss interface (``value``, ``grad_hess``, ``value_grad_hess``; see
    :meth:`torchrankboost.losses.RankingLoss.bind`) for a loss that cannot bind its labels: a
    plain callable (curvature by autograd, :meth:`FitObjective.gradient`) or a module with
    ``grad_hess`` but no ``bind``."""

    loss: Any  # a callable loss with ``grad_hess``

    def __init__(self, loss: Callable, labels, groups):
        self.loss, self.labels, self.groups = loss, labels, groups

    def value(self, scores: Tensor) -> Tensor:
        return scalar(self.loss(scores, self.labels, self.groups))

    def grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        return self.loss.grad_hess(scores, self.labels, self.groups, hess=hess)

    def value_grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        g, h = self.grad_hess(scores, hess=hess)
        return self.value(scores).detach(), g, h


# ------------------------------------------------------------------------- the fit objective
class FitObjective:
    """The loss of one boosting fit at its current scores (see the module docstring).

    Args:
        loss: the fit's loss, ``loss(scores, labels, groups) -> scalar``.
        curvature: the driver's ``curvature`` (``"diag"``, ``"bound"`` or ``"none"``).
        exact_hess_max_n: most Hessian-vector products per round of the autograd diagonal.
        comm: the fit's :class:`~torchrankboost.parallel.FitComm` (values are summed over
            the ranks through it; identities in one process).

    Its life: :meth:`bind` (inside the fit's local work), :meth:`agree_probes` (with the
    other ranks' counts), :meth:`start` at the initial scores; each round
    :meth:`begin_round`, :meth:`gradient`, the step rule's :meth:`evaluate` /
    :meth:`line`, then :meth:`move_to` the accepted scores. ``scores`` ``(n,)`` float64 and
    ``value`` (``L(scores)`` over every rank) are where the fit stands.
    """

    loss: Any  # a RankingLoss or a plain callable: its capabilities are in ``caps``
    bound: Any  # the bound loss (BoundLoss, a debiasing wrapper's, or _CallableBound)
    labels: Any  # the training labels and Groups, once bound
    groups: Any

    def __init__(self, loss: Callable, *, curvature: str, exact_hess_max_n: int, comm):
        self.loss = loss
        self.caps = LossCapabilities.of(loss)
        self.curvature = curvature
        self.kind = "bound" if curvature == "bound" else "diag"  # the hess= of grad_hess
        self.exact_hess_max_n = int(exact_hess_max_n)
        self.comm = comm
        self.bound = self.labels = self.groups = None
        self.probes = 0  # Hessian-vector products of the autograd curvature, over all ranks
        self.scores: Optional[Tensor] = None
        self.value = math.nan
        self._pending: Optional[Pending] = None
        self._bound_base = False  # the base score's search on the bound loss
        self._warned_unit = False

    # ------------------------------------------------------------------ start of the fit
    def bind(self, labels: Tensor, groups, *, weights: FitWeights, position=None,
             continued: Optional[dict] = None) -> None:
        """Bind the loss to the training ``labels``, ``groups`` and ``weights`` (and, with
        ``position`` ``(n,)``, the debiasing wrapper to the positions, its learned state
        restored from ``continued``: the ``info`` of the model the fit continues).
        ``ValueError`` for weights or positions the loss cannot take."""
        self.labels, self.groups = labels, groups
        if position is not None:
            self.bound = self._bind_position(labels, groups, weights, position, continued)
        elif not weights.weighted:  # the loss's own bind: its label setup computed once
            self.bound = (self.loss.bind(labels, groups) if self.caps.binds
                          else _CallableBound(self.loss, labels, groups))
        elif not self.caps.binds:
            raise ValueError("sample_weight/group_weight need a loss with bind() (any "
                             "RankingLoss); a plain callable loss takes no weights")
        else:
            bound = self.loss.bind(labels, groups, weights=weights.sample)
            self.bound = bound.with_group_weights(weights.group)
        self._bound_base = weights.weighted or position is not None
        self.caps = self.caps.with_bound(self.bound)

    def _bind_position(self, labels, groups, weights: FitWeights, position, continued):
        if not self.caps.debiases:
            raise ValueError("position: needs a position-debiasing loss around the ranking "
                             "loss (torchrankboost.clicks: IPWLoss, RegressionEMLoss, "
                             "DualLearningLoss, AdditivePositionLoss)")
        if weights.group is not None:
            raise ValueError("position: group_weight is not supported with a debiasing loss; "
                             "use sample_weight")
        position = torch.as_tensor(position).to(labels.device)
        bound = self.loss.bind_position(labels, groups, position, weights=weights.sample,
                                        comm=self.comm)
        saved = continued.get(DEBIAS_KEY) if continued is not None else None
        if saved is not None:
            bound.load_state(saved)
            self.loss.last_state_ = bound.state()
        return bound

    def local_probes(self, n: int, groups) -> int:
        """This rank's Hessian-vector products per round of the autograd diagonal (0 with a
        closed-form curvature or ``curvature != "diag"``)."""
        if self.caps.grad_hess or self.curvature != "diag":
            return 0
        return hvp_probes(n, groups, self.caps.per_query)

    def agree_probes(self, per_rank: Tensor) -> None:
        """The products of the whole fit from every rank's :meth:`local_probes`: the largest
        (a per-query loss: the longest query's positions) or their sum."""
        self.probes = int(per_rank.max() if self.caps.per_query else per_rank.sum())

    def constant_minimiser(self, n: int, device, *, max_ratio: float) -> float:
        """The loss-minimising constant score over every rank (the base score ``"auto"``),
        its sums exact over the queries and the ranks."""
        if self._bound_base:
            def fn(x):
                return value_terms(self.bound, x)
        else:
            def fn(x):
                return value_terms(_CallableBound(self.loss, self.labels, self.groups), x)
        return shift_minimiser(self.comm, fn, n, self.groups.offsets, device,
                               max_ratio=max_ratio)

    def start(self, scores: Tensor) -> float:
        """Stand at the initial ``scores`` ``(n,)``: ``L(scores)`` summed over the ranks
        (exactly). ``ValueError`` (on every rank) when the loss is pairwise and no query of
        any rank holds a crucial pair."""
        box = []

        def parts():
            box.append(self._local(scores, False))
            return _pair_queries(self.bound, scores), box[-1].acc

        flags, total = self.comm.exact_sums(parts, plain=2, exact=1)
        if flags[0] > 0 and flags[1] == 0:
            raise ValueError(no_pairs_message(getattr(self.bound, "pairs", None)))
        value = float(box[-1].parts.value(total[0]))
        self.scores, self.value, self._pending = scores, value, None
        return self.value

    # ------------------------------------------------------------------ each round
    def begin_round(self, rnd: int) -> None:
        """Before round ``rnd``: a stochastic loss draws its random state at the current
        scores from ``(seed, rnd)``; a debiasing loss runs its update (EM or DLA
        propensities, the position table; its sums all-reduced through the fit's comm). When
        the loss changed, its value, gradient and curvature at the scores are taken again in
        one pass, so the step rule compares values of one loss and a resumed fit draws what
        the uninterrupted one drew. Nothing for other losses."""
        if self.caps.resample is not None:
            ev = _no_terms(self.scores.device)
            self._pending = None
            with self.comm.local():
                self.caps.resample(self.bound, self.scores, round=rnd)
                ev = self._local(self.scores, self.caps.grad_hess)
            self.value, self._pending = self._summed(ev), ev.pending
        if self.caps.position_update is not None:
            s, pending = self.scores, self._pending
            if pending is not None and pending.scores is not s:
                pending = None
            if self.caps.position_update(s, self.comm, rnd, pending):
                self.value, self._pending = self.evaluate(s, fused=True)

    def model_info(self) -> dict:
        """What the model's ``info`` keeps of the loss: a debiasing loss's learned state
        (exact float hex JSON, saved with the model and every checkpoint); else nothing."""
        if self.caps.position_update is None:
            return {}
        return {DEBIAS_KEY: self.bound.state()}

    def gradient(self) -> Tuple[Tensor, Tensor, str]:
        """``(g, h, kind)`` at the current scores: ``(n,)`` float64 gradient and curvature
        (the pending pair when the last step computed it here), ``kind`` the curvature's:
        ``"diag"`` / ``"bound"`` (closed form), ``"autograd-diag"``, ``"unit"`` or
        ``"none"``. This rank's documents (local work: no collective)."""
        s = self.scores
        pending, self._pending = self._pending, None
        if self.caps.grad_hess and pending is not None and pending.scores is s:
            _, g, h, kind = pending  # computed with the loss at these scores (last step)
        elif self.caps.grad_hess:
            kind = self.kind
            g, h = self.bound.grad_hess(s, hess=kind)
        else:
            g, h, kind = self._autograd(s)
        g, h = g.to(F64), h.to(F64)
        if self.curvature == "none":
            kind = "none"
        return g, h, kind

    def _autograd(self, s: Tensor) -> Tuple[Tensor, Tensor, str]:
        """The autograd gradient and curvature: the exact diagonal when the fit's
        :attr:`probes` are at most ``exact_hess_max_n`` (decided on every rank's sizes),
        else unit curvature, with a warning once per fit."""
        want = "diag" if self.curvature == "diag" else "none"
        probes, limit = self.probes, self.exact_hess_max_n
        if want == "diag" and probes > limit and not self._warned_unit:
            hint = ("" if self.caps.per_query else "; a loss that is a sum of per-query terms "
                    "can say so with @torchrankboost.per_query (then the longest query's "
                    "length is the count)")
            warnings.warn(
                f"curvature='diag': the loss has no grad_hess and its exact Hessian diagonal "
                f"needs {probes} Hessian-vector products > exact_hess_max_n = {limit}; using "
                f"unit curvature (Friedman gradient boosting){hint}",
                stacklevel=7)  # the fit's caller: + Booster's round and FitState's wrapper
            self._warned_unit = True
        if want == "diag" and probes > limit:
            want = "none"  # unit curvature (this rank alone may be under the limit)
        return autograd_grad_hess(self.loss, s, self.labels, self.groups, hess=want,
                                  max_exact=limit)

    def evaluate(self, scores: Tensor, *, fused: bool = False) -> Evaluation:
        """``L(scores)`` summed over the ranks (its per-query terms summed exactly: the same
        float for any order of the queries and any split over the ranks); with ``fused`` (a
        loss with ``grad_hess``) the gradient and curvature at ``scores`` from the same pass
        (``value_grad_hess``), this rank's, as the :class:`Pending` to hand to
        :meth:`move_to`."""
        ev = _no_terms(scores.device)
        with self.comm.local():
            ev = self._local(scores, fused)
        return Evaluation(self._summed(ev), ev.pending)

    def _local(self, scores: Tensor, fused: bool) -> _Local:
        """This rank's part of ``L(scores)`` (and the fused gradient and curvature): local
        work."""
        pending = None
        fn = getattr(self.bound, "value_terms_grad_hess", None)
        if fused and callable(fn):
            vt, g, h = fn(scores, hess=self.kind)
            pending = Pending(scores, g, h, self.kind)
        elif fused:
            v, g, h = self.bound.value_grad_hess(scores, hess=self.kind)
            vt, pending = _one_term(v.detach()), Pending(scores, g, h, self.kind)
        else:
            with torch.no_grad():
                vt = value_terms(self.bound, scores)
        return _Local(accumulate(vt.terms.detach()), vt, pending)

    def _summed(self, local: _Local) -> float:
        """A rank's part summed over the ranks exactly (one collective carrying the failure
        flag), as the loss value."""
        _, total = self.comm.exact_sums(lambda: ((), local.acc), plain=0, exact=1)
        return float(local.parts.value(total[0]))

    def phi(self, f: Tensor) -> Callable[[Tensor], Tensor]:
        """``φ(α) = L(s + α f)`` at the current scores ``s`` (this rank's; ``α`` a 0-d float64
        tensor, differentiable): the loss along the weak model's output ``f`` ``(n,)``."""
        s = self.scores

        def phi(a: Tensor) -> Tensor:
            return scalar(self.bound.value(s + a.to(s.device) * f))

        return phi

    def line(self, f: Tensor, order: int = 2) -> Callable[[float], Tuple[float, float, float]]:
        """``α ↦ (φ(α), φ'(α), φ''(α))`` along ``f``, every sum exact over the queries and
        the ranks (``order=1``: no ``φ''``; :func:`~.steps.exact_line`): the ``evaluate`` of
        :func:`~.steps.line_search`."""
        return exact_line(self.comm, lambda x: value_terms(self.bound, x), self.scores, f,
                          self.groups.offsets, order)

    def move_to(self, scores: Tensor, value: float, pending: Optional[Pending] = None) -> None:
        """Stand at ``scores`` with ``value = L(scores)`` over the ranks; ``pending``: the
        gradient and curvature there from the value's fused pass (the next round's)."""
        self.scores, self.value, self._pending = scores, value, pending

    def round_diagnostics(self) -> dict:
        """The loss's own ``round_diagnostics`` at the current scores (e.g. AdaBoostLoss's
        F₊, F₋ and F-skew), in one process only: they are not sums over queries."""
        more = self.caps.diagnostics
        if more is None:
            return {}
        return self.comm.per_rank(lambda: more(self.scores, self.labels, self.groups))

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict:
        """What a checkpoint keeps: the value (exact float hex) and whether the next round's
        gradient was fused with it (a resume then makes that fused call again)."""
        fused = self._pending is not None and self._pending.scores is self.scores
        return {"loss": float(self.value).hex(), "fused": fused}

    def restore(self, state: dict) -> None:
        """Continue from :meth:`checkpoint_state` ``state`` at the current scores (those of
        the checkpointed ensemble): the saved value, and the fused call made again."""
        self.value = float.fromhex(state["loss"])
        if state.get("fused"):  # the continuous fit's fused call, made again
            s, kind = self.scores, self.kind
            with self.comm.local():
                _, g, h = self.bound.value_grad_hess(s, hess=kind)
            self.comm.check()
            self._pending = Pending(s, g, h, kind)


# ------------------------------------------------------------------------- crucial pairs
def no_pairs_message(pairs) -> str:
    """The one-line message for training data without a crucial pair."""
    what = (f"no query has a document with label > {pairs.threshold:g} and one with "
            f"label <= {pairs.threshold:g}" if hasattr(pairs, "threshold")
            else "every query has one class: a single label level")
    return (f"labels: no crucial pairs ({what}), so a pairwise loss has nothing to learn; "
            f"check the labels and the query ids of the training data")


def _pair_queries(bound, s: Tensor) -> List[float]:
    """``[is_pairwise, queries with a pair]`` of this rank (``[0, 0]`` for a loss that does
    not report pairs: pointwise and listwise losses, plain callables)."""
    if not isinstance(bound, BoundLoss):
        return [0.0, 0.0]
    with torch.no_grad():
        _, has = bound.loss.per_group(bound.prepared_at(s))
    if has is None:
        return [0.0, 0.0]
    return [1.0, float(has.sum())]


def require_pairs(loss, labels, groups, *, pairs=None) -> None:
    """``ValueError`` when the pairwise ``loss`` finds no crucial pair in ``labels`` /
    ``groups`` (one process; what a fit outside the boosting driver checks first)."""
    bound = loss.bind(labels, groups, pairs=pairs)
    s = torch.zeros(bound.n, dtype=torch.float64, device=groups.device)
    flag, count = _pair_queries(bound, s)
    if flag > 0 and count == 0:
        raise ValueError(no_pairs_message(bound.pairs))
