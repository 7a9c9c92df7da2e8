r"""One coordinate-boosting loop for the papers' RankBoost-family algorithms.

:class:`CoordinateBoosting` runs every fit of :class:`~.rankboost.RankBoost`,
:class:`~.rankboost.SmoothMarginRanking`, :class:`~.adaboost.AdaBoost`,
:class:`~.pnorm_push.PNormPush` and :class:`~.rankboost_plus.RankBoostPlus`. An algorithm
supplies:

* ``_begin(X, labels, groups, pairs, init_scores)``: its statistics and the starting scores
  ``s₀`` (float64, ``(n,)``; ``None`` when it keeps its own state, as RankBoost+ does);
* ``_step(s, l1)``: how it scores the candidates and its step, as a :class:`Step` (the score
  change ``Δs``, ``α``, the ensemble terms ``(candidate, weight)`` and intercept, the
  round's diagnostics), or a halt (:meth:`CoordinateBoosting._stop`, :meth:`~.
  CoordinateBoosting._halt`, :meth:`~.CoordinateBoosting._unbounded`);
* ``_round_diag(step, s, l1)``: the round's diagnostics after the step (the objective at
  ``s + Δs``, ``‖λ‖₁ = l1``).

The loop (:meth:`CoordinateBoosting._fit_rounds`) adds ``Δs`` to the scores and the terms
to the ensemble, accumulates ``‖λ‖₁ = Σ_t |α_t|``, and closes the round (evaluation sets,
callbacks, early stopping: the shared :class:`~torchrankboost.boosting.FitMonitor`).

**The halting policy** (``on_unbounded``; one policy for every algorithm) when a step is
undefined or infinite: ``"stop"`` halts before the round, ``"cap"`` takes ``±alpha_cap`` and
stops after it, ``"smooth"`` (RankBoost only) takes the algorithm's smoothed step and goes on,
``"raise"`` raises :class:`~torchrankboost.contract.UnboundedDirectionError` (``round``,
``model``). The reason is in ``stop_reason_``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..._pair_engine.levels import label_pairs
from ...contract import (ArrayLike, EvalSets, FitInfo, MetricSpec, PathLike, RankingModel,
                         RoundRecord, UnboundedDirectionError)
from ...groups import GroupsLike
from ...parallel import DistContext, get_context
from ...pairs import ExplicitPairs, PairSpec, resolve_pairs
from ...params import describe, from_params
from ...parallel.checks import check_data_parallel, supports_data_parallel
from .dictionaries import (DATA_PARALLEL_NEEDS, PairMatrixDictionary, MatrixSource,
                            make_source, source_class)
from .ensemble_builder import StumpEnsembleBuilder
from .pair_stats import LabelPairStats, make_pair_stats
from ...parallel import FitComm
from ..checkpoint import coordinate_resume, open_start
from ..evaluation import FitMonitor, FitState
from ..inputs import count_eval_sets as _count_sets, fit_inputs
from ..learners import Stumps
from ..weights import fit_weights, split_init_score, weighted_pairs

__all__ = ["CoordinateBoosting", "Step", "HALTING_POLICIES", "select_candidate"]

HALTING_POLICIES = ("stop", "cap", "smooth", "raise")

#: a MatrixRankers dictionary runs on the materialised pair matrix M (P, J) when P·J is at
#: most this (Rudin–Schapire Fig. 1 verbatim, fewest ops per round)
DENSE_PAIR_LIMIT = 4_000_000


class _Halt(Exception):
    """Ends the fit before the round (``stop_reason_`` says why)."""


@dataclass
class Step:
    """One round's move.

    ``delta``: added to the training scores (an ``(n,)`` tensor or a number; ``None`` when
    the algorithm keeps its own state); ``alpha``: the step (``|α|`` goes to ``‖λ‖₁``);
    ``terms``: ``[(candidate, weight)]`` for the ensemble; ``intercept``: its shift;
    ``diag``: the round's diagnostics so far; ``carry``: what ``_round_diag`` needs.
    """

    delta: Any
    alpha: float
    terms: List[tuple]
    intercept: float = 0.0
    diag: dict = field(default_factory=dict)
    carry: Any = None


def flush_denormals(fit):
    """Run ``fit`` with CPU denormal flushing on (restored to off afterwards): exponential
    pair weights spanning hundreds of orders of magnitude otherwise hit subnormal floats, which
    are ~100x slower on x86. Values below ~1e-308 only ever matter relative to O(1) masses."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        on = torch.set_flush_denormal(True)
        try:
            return fit(self, *args, **kwargs)
        finally:
            if on:
                torch.set_flush_denormal(False)

    return wrapper


def stats_and_dictionary(source, labels, groups, p, context):
    """Pair statistics and candidate dictionary (restricted to documents in crucial pairs);
    small matrix dictionaries use the materialised pair matrix M, everything else the
    factorised kernels. ``context``: the fit's (identities in one process)."""
    stats, D = _stats_and_dictionary(source, labels, groups, p, context)
    if hasattr(D, "set_active"):
        D.set_active(stats.active)
    return stats, D


def _stats_and_dictionary(source, labels, groups, p, context):
    if not isinstance(source, MatrixSource):
        return make_pair_stats(labels, groups, p, context=context), source.dictionary
    # a matrix dictionary is never data-parallel (make_source checks)
    if isinstance(p, ExplicitPairs):
        stats = make_pair_stats(labels, groups, p)
    else:
        lp = LabelPairStats(labels, groups, p)
        if lp.num_pairs * source.F > DENSE_PAIR_LIMIT:
            return lp, source.dictionary
        hi, lo, _ = label_pairs(labels, groups, p)
        stats = make_pair_stats(None, groups, ExplicitPairs(hi, lo))
    if stats.num_pairs * source.F <= DENSE_PAIR_LIMIT:
        return stats, PairMatrixDictionary(source.dictionary.H, stats, source.dictionary.valid)
    return stats, source.dictionary


def select_candidate(score: Tensor, valid: Tensor, signed: bool) -> int:
    """Index of the best candidate: ``argmax |score|`` (``signed``) or ``argmax score`` over
    the ``valid`` ones (lowest index on ties)."""
    sc = score.abs() if signed else score.clone()
    return int(torch.argmax(sc.masked_fill_(~valid, float("-inf"))))


def _check_policy(p, allowed=("stop", "raise", "cap")):
    if p not in allowed:
        raise ValueError(f"on_unbounded must be one of {allowed}, got {p!r}")
    return p


def _check_rounds(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n_rounds must be a non-negative int, got {n!r}")
    return n


class CoordinateBoosting(FitState):
    """The coordinate-boosting fit (see the module docstring): inputs, dictionary,
    evaluation and callbacks (the shared :class:`~torchrankboost.boosting.FitMonitor`), the halting
    policy, the loop, records, model assembly."""

    #: the ``on_unbounded`` policies this algorithm supports
    UNBOUNDED: Tuple[str, ...] = ("stop", "raise", "cap")
    _algorithm = ""
    #: data-parallel training (``distributed=``): only :class:`~.rankboost.RankBoost` takes
    #: it; the other algorithms always fit in this process alone
    distributed: Union[bool, DistContext, None] = False
    #: ``init_model`` / ``resume`` (:mod:`~torchrankboost.boosting.checkpoint`): only the
    #: algorithms whose state is the scores (RankBoost, PNormPush) set it
    can_continue = False
    #: weighted fits list the crucial pairs with their weights
    #: (:func:`~torchrankboost.boosting.weights.weighted_pairs`); an algorithm that weighs
    #: label-induced pairs itself (PNormPush) sets it False
    _lists_weighted_pairs = True

    def __init__(self, *, learner: Any = None, n_rounds: int = 100, pairs: PairSpec = None,
                 callbacks: Sequence[Any] = (), on_unbounded: str = "stop", alpha_cap: float = 50.0, smoothing: float = 1e-6,
                 complement: bool = True):
        self.learner = from_params(learner)
        self.n_rounds = _check_rounds(n_rounds)
        self.pairs = from_params(pairs)
        self.callbacks = list(callbacks or [])
        self.on_unbounded = _check_policy(on_unbounded, self.UNBOUNDED)
        if not alpha_cap > 0:
            raise ValueError("alpha_cap must be > 0")
        self.alpha_cap = float(alpha_cap)
        if not smoothing > 0:
            raise ValueError("smoothing must be > 0")
        self.smoothing = float(smoothing)
        self.complement = bool(complement)
        self._reset_fit_state()

    # -------------------------------------------------------------------------- the fit
    @flush_denormals
    def fit(self, X: ArrayLike, labels: Optional[ArrayLike] = None, groups: GroupsLike = None,
            *, eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            pairs: PairSpec = None, sample_weight: Optional[ArrayLike] = None,
            group_weight: Optional[ArrayLike] = None, init_model: Any = None,
            resume: Optional[PathLike] = None) -> RankingModel:
        """Fit on ``(X, labels, groups)`` (or explicit ``pairs``); the ranker contract's
        ``fit``. ``sample_weight`` ``(n,)`` / ``group_weight`` ``(Q,)``: a crucial pair
        ``(i, j)`` of query ``q`` starts with the mass ``c_q w_i w_j`` (times its explicit
        weight) in the pair distribution (the pairs are then listed: O(#pairs) memory);
        pairs of weight 0 are left out and rows of weight 0 place no threshold.
        ``init_model`` / ``resume``: continue a model / a checkpoint
        (:mod:`~torchrankboost.boosting.checkpoint`; the algorithms whose state is the
        scores: RankBoost, PNormPush). Algorithms with other fit inputs (``init_scores``, no
        ``pairs``) override it."""
        return self._fit(X, labels, groups, pairs, eval_set, eval_metric,
                         early_stopping_rounds, callbacks, more=(sample_weight, group_weight),
                         init_model=init_model, resume=resume)

    def _fit(self, X, labels, groups, pairs, eval_set, eval_metric, early_stopping_rounds,
             callbacks, init_scores=None, more=(), init_model=None, resume=None):
        """The whole fit: inputs and monitor, the algorithm's ``_begin``, the rounds (from
        a continued model's scores and ``‖λ‖₁``), the model."""
        start = open_start(self, init_model, resume, init_score=init_scores)
        X, labels, groups, p = self._setup(X, labels, groups, pairs, eval_set, eval_metric,
                                           early_stopping_rounds, callbacks, more)
        s = self._begin(X, labels, groups, p, init_scores)
        builder = StumpEnsembleBuilder(self.source_, prefix=start and start.ensemble)
        self._start(X, groups, builder)
        rounds, s, l1 = coordinate_resume(self, start, X, s)
        s = self._fit_rounds(s, builder, rounds, l1)
        return self._finish(builder, s)

    def _fit_rounds(self, s, builder, rounds=None, l1: float = 0.0):
        """The coordinate-boosting loop over ``rounds`` (0-based; default all): each round
        the algorithm's :class:`Step` (or a halt), the scores and the ensemble updated,
        ``‖λ‖₁`` accumulated, the round closed."""
        for t in (range(self.n_rounds) if rounds is None else rounds):
            try:
                step = self._step(s, l1)
            except _Halt:
                break
            if step.delta is not None:
                s = s + step.delta
            for c, a in step.terms:
                builder.add(c, a)
            if step.intercept:
                builder.add_intercept(step.intercept)
            l1 += abs(step.alpha)
            if self._record(t, self._round_diag(step, s, l1)) or self.stop_reason_ is not None:
                break
        return s

    def _begin(self, X, labels, groups, pairs, init_scores) -> Optional[Tensor]:
        raise NotImplementedError

    def _step(self, s, l1: float) -> Step:
        raise NotImplementedError

    def _round_diag(self, step: Step, s, l1: float) -> dict:
        return step.diag

    @staticmethod
    def _zero_scores(X, init_scores=None) -> Tensor:
        """``s₀``: zeros (float64, on ``X``'s device), plus ``init_scores`` when given."""
        s = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        if init_scores is not None:
            c, per = split_init_score(init_scores, X.shape[0], device=X.device)
            s = s + (per if per is not None else c)
        return s

    # -------------------------------------------------------------------------- halting
    def _stop(self, reason: str):
        """End the fit before this round (converged, no usable ranker): not a policy case."""
        self.stop_reason_ = reason
        raise _Halt

    def _undefined(self, reason: str) -> None:
        """The halting policy's record of an undefined or infinite step: ``"raise"`` raises
        :class:`UnboundedDirectionError`, the other policies keep the reason."""
        if self.on_unbounded == "raise":
            rnd = len(self.history_) + 1
            raise UnboundedDirectionError(f"round {rnd}: undefined step: {reason}", round=rnd,
                                          model=self.builder_.build())
        self.stop_reason_ = reason

    def _halt(self, reason: str):
        """No step is possible (the policy's ``"raise"`` raises, else the fit stops)."""
        self._undefined(reason)
        raise _Halt

    def _unbounded(self, reason: str, sign: float,
                   smooth: Optional[Callable[[], float]] = None) -> float:
        """The step when it is undefined or infinite, by the halting policy: ``"smooth"``
        (where the algorithm has a smoothed step ``smooth()``): that step, going on;
        ``"cap"``: ``copysign(alpha_cap, sign)``, stopping after the round; ``"stop"``:
        halt before the round; ``"raise"``: raise."""
        if self.on_unbounded == "smooth" and smooth is not None:
            return smooth()
        self._undefined(reason)
        if self.on_unbounded == "cap":
            return math.copysign(self.alpha_cap, sign)
        raise _Halt

    def _atanh(self, x: float, reason: str) -> float:
        """``atanh(x)`` (AdaBoost's, RankBoost+'s step); at ``|x| >= 1`` the halting policy."""
        if abs(x) < 1:
            return math.atanh(x)
        return self._unbounded(reason, x)

    # -------------------------------------------------------------------------- plumbing
    def _setup(self, X, labels, groups, pairs, eval_set=None, eval_metric="ndcg@10",
               early_stopping_rounds=None, callbacks=(), more=()):
        """Checked inputs, the dictionary source and the fit's monitor (evaluation sets,
        metrics, early stopping, callbacks); ``more``: ``(sample_weight, group_weight,
        eval_init_score)`` (missing ones ``None``)."""
        sample_weight, group_weight, eval_init = (tuple(more) + (None,) * 3)[:3]
        comm = self._comm = FitComm(get_context(self.distributed))
        with comm.local():  # a bad shard on one rank: DistributedError on every rank
            p = resolve_pairs(pairs if pairs is not None else self.pairs)
            X, labels, groups = fit_inputs(X, labels, groups,
                                           labels_required=not isinstance(p, ExplicitPairs))
            fw = self.weights_ = fit_weights(sample_weight, group_weight, groups,
                                             context=comm.ctx)
            if fw.weighted and self._lists_weighted_pairs and comm.ctx.world_size > 1:
                raise ValueError("sample_weight/group_weight: a data-parallel RankBoost fit "
                                 "takes no weights (its weighted pairs are listed per "
                                 "process); fit in one process, or use a Booster")
            cls, _ = source_class(self.learner)
            check_data_parallel(comm.ctx, fit="RankBoost fit", pairs=p, learner=self.learner,
                                learner_ok=cls.supports_data_parallel
                                and supports_data_parallel(self.learner or Stumps()),
                                needs=DATA_PARALLEL_NEEDS)
        comm.check()
        ctx = comm.ctx
        ctx.check_same("the number of features", int(X.shape[1]))
        ctx.check_same("the label dtype", str(getattr(labels, "dtype", None)))
        ctx.check_same("the number of eval sets", _count_sets(eval_set))
        tot = ctx.all_reduce_sum(torch.tensor([int(X.shape[0]), groups.num_groups],
                                              dtype=torch.int64))
        self.totals_ = (int(tot[0]), int(tot[1]))  # (documents, queries) on all processes
        with comm.local():
            self.monitor_ = FitMonitor(self, n_features=X.shape[1], device=X.device,
                                       eval_set=eval_set, eval_metric=eval_metric,
                                       early_stopping_rounds=early_stopping_rounds,
                                       callbacks=list(self.callbacks) + list(callbacks),
                                       loss=self._eval_objective(p), comm=comm,
                                       loss_combine="logsumexp", eval_init_score=eval_init)
        comm.check()
        self.source_ = make_source(self.learner, X, context=comm.ctx, rows=fw.rows)
        self.groups_ = groups
        if fw.weighted and self._lists_weighted_pairs:
            p = weighted_pairs(p, labels, groups, fw)
        return X, labels, groups, p

    def _eval_objective(self, pairs):
        """The training objective as ``f(scores, labels, groups)`` for the ``"loss"`` metric
        (``None`` when it is not a function of the scores): ln F̃ over the crucial pairs."""
        if isinstance(pairs, ExplicitPairs):
            return None  # explicit pairs index the training documents only
        return per_eval_set(lambda y, g: make_pair_stats(y, g, pairs).log_loss)

    def _start(self, X, groups, builder):
        self.builder_ = builder  # the ensemble so far (checkpoint snapshots build it)
        # the weak rankers used (``learner=None`` means Stumps()), not the None given
        params = {"learner": describe(source_class(self.learner)[1]),
                  "on_unbounded": self.on_unbounded}
        for k in ("variant", "p", "warmup"):
            if hasattr(self, k):
                params[k] = getattr(self, k)
        if self._comm.ctx.world_size > 1:
            params["world_size"] = self._comm.ctx.world_size
        n_docs, n_queries = self.totals_
        self.monitor_.start(FitInfo(algorithm=self._algorithm, n_docs=n_docs,
                                    n_queries=n_queries, n_features=int(X.shape[1]),
                                    n_rounds=self.n_rounds, params=params),
                            build=builder.build)

    def _record(self, t, diag):
        """Close round ``t + 1`` (0-based ``t``): the running evaluation scores get the
        round's weak rankers, its :class:`RoundRecord` (``step`` = α, ``weight`` = the signed
        ensemble weight, ``loss`` = the objective after the step; the rest of ``diag`` in
        ``extra``) goes to the monitor; ``True`` when training stops."""
        terms, intercept = self.builder_.end_round()
        self.monitor_.add(terms, intercept)
        alpha = diag.get("alpha", 0.0)
        record = RoundRecord(round=t + 1, loss=diag.get("loss"), step=alpha,
                             weight=diag.get("alpha_signed", alpha), extra=diag)
        return self.monitor_.end_round(record)

    def _finish(self, builder, s):
        self.scores_ = s
        info = {"algorithm": type(self).__name__, "n_rounds_run": len(self.history_)}
        for k in ("variant", "p", "warmup"):
            if hasattr(self, k):
                info[k] = getattr(self, k)
        builder.info.update(info)
        return self.monitor_.finish(builder.build)


def per_eval_set(make):
    """``f(scores, labels, groups)`` from ``make(labels, groups) -> f(scores)``, built once per
    evaluation set (cached while the set's tensors live)."""
    cache = {}

    def objective(scores, labels, groups=None):
        key = (id(labels), id(groups))
        if key not in cache:
            if len(cache) >= 8:
                cache.clear()
            cache[key] = (make(labels, groups), labels, groups)  # keep the ids alive
        return cache[key][0](scores)

    return objective


