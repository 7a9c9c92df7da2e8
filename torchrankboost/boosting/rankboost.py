r"""The papers' RankBoost-family algorithms, exactly as published.

* :class:`RankBoost` — ``variant="rb-d"`` (Freund et al.'s RankBoost with binary rankers:
  choose the ranker with the smallest normaliser ``Z = ε⁰ + 2√(ε⁺ε⁻)``, rule (5) of
  Rudin & Schapire 2009, step ``α = ½ ln(ε⁺/ε⁻)``), ``"rb-c"`` (RankBoost with the
  continuous bound, Connamacher et al. 2019 eqs. (13), (19): ``argmax |r|``, ``α = atanh r``)
  and ``"coordinate"`` (coordinate descent RankBoost, Rudin & Schapire Fig. 1: ``argmax``
  edge ``r = ε⁺ - ε⁻``, exact line search ``α = ½ ln(ε⁺/ε⁻)`` for binary rankers, a 1-D
  convex line search for real-valued ones).

  Which one is "RB-D" depends on the paper: Freund et al. and Rudin & Schapire's RankBoost
  choose the ranker by the smallest ``Z`` (``variant="rb-d"`` here), while Connamacher et al.
  (2019) print the rule ``argmax |ε⁺ - ε⁻|`` with the same ``α = ½ ln(ε⁺/ε⁻)`` — for binary
  rankers that is exactly ``variant="coordinate"``, which is what reproduces their Table 4
  (``scripts/exp_rankboost_plus.py``).
* :class:`RankBoostPlus` — Connamacher et al.'s RankBoost+ (Ê2 with the cosh tie cost,
  accumulated per-ranker weights α′, the efficient Algorithm 2 with the pair-space
  independent set and pruning). Pairs are materialised here (the tie factor is pair-specific).
* :class:`AdaBoost` — AdaBoost on ±1 stumps with the constant weak classifier, tracking
  ``F₊``, ``F₋`` and the F-skew (Rudin & Schapire §5); :func:`with_zero_skew_intercept`
  applies Corollary 13 to any model.
* :class:`SmoothMarginRanking` — RankBoost warm-up until ``G̃ > 0`` then the eq. (12) step
  (stable rationalised form), reporting the margin ``μ`` and the smooth margin ``G̃``.
* :class:`PNormPush` — Rudin's p-norm push, coordinate descent with the closed-form step for
  binary rankers (C12) and a convex line search otherwise, O(n) per candidate through the
  factorisation ``F_p = (Σ_i e^{-s_i})^p Σ_k e^{p t_k}``.

Shared conventions
------------------
* Scores are accumulated in float64 in round order; ``‖λ‖₁ = Σ_t |α_t|`` (a negative step on
  ``h`` is a positive step on the complement ``1 - h`` plus a constant, which no pair sees).
* Pair statistics for label-induced pairs come from sorted prefix sums / bucket sums
  (:mod:`._pair_stats`), never from materialised pair weights; explicit pair lists are O(#pairs).
* **Halting policy** (``on_unbounded``) when a step is undefined or infinite — RB-D with
  ``ε⁻ = 0`` (or ``ε⁺ = 0``), a perfect ranker for RB-C (``r = ±1``), p-norm push with a
  separating ranker, smooth margin ranking with ``r ≤ g``:

  - ``"stop"`` (default): halt *before* appending the ranker and return the ensemble so far
    (Connamacher et al. Appendix B Remedy 1; keeps every α finite, but the model is not the
    minimiser of Ê1 — Obs. 1/Thm 1 need the step).
  - ``"cap"``: append the ranker with ``|α| = alpha_cap`` and stop (Remedy 2/3 with a finite
    "infinity"; Lemma 2 shows ∏Z = Ê1 can then fail by Θ(1)).
  - ``"smooth"`` (:class:`RankBoost` only): Schapire–Singer smoothing
    ``α = ½ ln((ε⁺ + δ)/(ε⁻ + δ))`` with ``δ = smoothing``, and continue (finite steps; no
    longer the exact minimiser).
  - ``"raise"``: raise :class:`~torchrankboost.contract.UnboundedDirectionError` (a
    ``NumericalError``) with ``round`` and ``model`` (the ensemble before that round).

  The reason is recorded in ``stop_reason_``.
* Every class follows the ranker contract (:mod:`torchrankboost.contract`):
  ``fit(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
  early_stopping_rounds=None, callbacks=(), pairs=None)`` (``X`` a tensor, numpy array or
  scipy matrix; ``groups`` a ``Groups``, query ids or ``None``) returns an
  :class:`~.ensemble.Ensemble`. The evaluation sets are scored incrementally (each round adds
  its weak rankers' outputs times their weights), early stopping cuts the model back to the
  best round, and ``"loss"`` is the algorithm's objective on the set. ``history_`` holds one
  :class:`~torchrankboost.contract.RoundRecord` per round: ``loss`` (the training objective
  after the step: ln F̃, ln F, ln F_p or ln Ê2), ``step`` (α) and ``weight`` (the signed
  ensemble weight); ``extra`` (read as ``record["alpha"]``) holds ``alpha``,
  ``loss_before`` and the algorithm's own statistics.
* **Data-parallel** (:class:`RankBoost` only, ``distributed=``; see
  :mod:`torchrankboost.distributed`): each rank holds whole queries (and a shard of each
  evaluation set) under a ``torch.distributed`` process group. Every crucial pair lies inside
  one query, so RankBoost's pair distribution, its per-document masses and every candidate's
  ``ε⁺``, ``ε⁻``, ``r`` are per-rank sums over the global normaliser ``F̃ = Σ_r F̃_r``
  (:mod:`._pair_stats`): per round one all-reduce of the ranks' normalisers, one of the
  candidates' histograms (``F·(T+1)`` sums for ``rb-c``/``coordinate``, two for ``rb-d``),
  one of the chosen ranker's ``(ε⁺, ε⁻, ε⁰)``, and the evaluation's. The stump thresholds are
  those of all ranks' rows (the gathered binning sample), so every rank picks the same stump
  and step as one process on the whole data. Stumps and label-induced pairs only (binary
  rankers: the closed-form steps need no line search across ranks).
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from ..contract import FitInfo, RoundRecord, UnboundedDirectionError
from ..distributed import get_context
from ..groups import Groups
from ..pairs import Bipartite, ExplicitPairs, resolve_pairs
from ..losses.exponential import AdaBoostLoss
from ._dictionaries import MatrixRankers, _MatrixSource, make_source  # noqa: F401 (re-exported)
from .._pair_engine.exponential import log_cosh as _logcosh, pooled_log_loss
from .._pair_engine.levels import label_pairs
from ._dictionaries import PairMatrixDictionary
from .learners import Stumps
from ._data_parallel import check_data_parallel, supports_data_parallel
from ._dictionaries import DATA_PARALLEL_NEEDS, source_class
from ._pair_stats import LabelPairStats, make_pair_stats
from .steps import exact_step
from ._model import StumpEnsembleBuilder
from .evaluation import FitComm, FitMonitor, FitState
from .inputs import fit_inputs

__all__ = [
    "RankBoost", "RankBoostPlus", "AdaBoost", "SmoothMarginRanking", "PNormPush",
    "MatrixRankers", "with_zero_skew_intercept", "smooth_margin_alpha", "label_pairs",
    "HALTING_POLICIES",
]

HALTING_POLICIES = ("stop", "cap", "smooth", "raise")


class _Halt(Exception):
    pass


def _flush_denormals(fit):
    """Run ``fit`` with CPU denormal flushing on (restored to off afterwards): exponential
    pair weights spanning hundreds of orders of magnitude otherwise hit subnormal floats, which
    are ~100x slower on x86. Values below ~1e-308 only ever matter relative to O(1) masses."""
    import functools

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        on = torch.set_flush_denormal(True)
        try:
            return fit(self, *args, **kwargs)
        finally:
            if on:
                torch.set_flush_denormal(False)

    return wrapper


#: a MatrixRankers dictionary runs on the materialised pair matrix M (P, J) when P·J is at
#: most this (Rudin–Schapire Fig. 1 verbatim, fewest ops per round)
DENSE_PAIR_LIMIT = 4_000_000


def _stats_and_dictionary(source, labels, groups, p, context):
    """Pair statistics and candidate dictionary (restricted to documents in crucial pairs);
    small matrix dictionaries use the materialised pair matrix M, everything else the
    factorised kernels. ``context``: the fit's (identities in one process)."""
    stats, D = _stats_and_dictionary0(source, labels, groups, p, context)
    if hasattr(D, "set_active"):
        D.set_active(stats.active)
    return stats, D


def _stats_and_dictionary0(source, labels, groups, p, context):
    if isinstance(source, _MatrixSource):  # never data-parallel (make_source checks)
        if isinstance(p, ExplicitPairs):
            stats = make_pair_stats(labels, groups, p)
        else:
            lp = LabelPairStats(labels, groups, p)
            if lp.num_pairs * source.F <= DENSE_PAIR_LIMIT:
                hi, lo, _ = label_pairs(labels, groups, p)
                stats = make_pair_stats(None, groups, ExplicitPairs(hi, lo))
            else:
                return lp, source.dictionary
        if stats.num_pairs * source.F <= DENSE_PAIR_LIMIT:
            return stats, PairMatrixDictionary(source.dictionary.H, stats, source.dictionary.valid)
        return stats, source.dictionary
    return make_pair_stats(labels, groups, p, context=context), source.dictionary


def _check_policy(p, allowed=("stop", "raise", "cap")):
    if p not in allowed:
        raise ValueError(f"on_unbounded must be one of {allowed}, got {p!r}")
    return p


def _check_rounds(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n_rounds must be a non-negative int, got {n!r}")
    return n


class _Base(FitState):
    """Shared fit plumbing: inputs, dictionary, evaluation and callbacks (the shared
    :class:`~.evaluation.FitMonitor`), records, model assembly."""

    #: the ``on_unbounded`` policies this algorithm supports
    UNBOUNDED = ("stop", "raise", "cap")
    _algorithm = ""
    #: data-parallel training (``distributed=``): only :class:`RankBoost` takes it; the
    #: other algorithms always fit in this process alone
    distributed = False

    def __init__(self, *, learner=None, n_rounds: int = 100, pairs=None, callbacks=(),
                 on_unbounded: str = "stop", alpha_cap: float = 50.0, smoothing: float = 1e-6,
                 complement: bool = True):
        self.learner = learner
        self.n_rounds = _check_rounds(n_rounds)
        self.pairs = pairs
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

    # -------------------------------------------------------------------------- helpers
    def _setup(self, X, labels, groups, pairs, eval_set=None, eval_metric="ndcg@10",
               early_stopping_rounds=None, callbacks=()):
        """Checked inputs, the dictionary source and the fit's monitor (evaluation sets,
        metrics, early stopping, callbacks)."""
        comm = self._comm = FitComm(get_context(self.distributed))
        with comm.local():  # a bad shard on one rank: DistributedError on every rank
            p = resolve_pairs(pairs if pairs is not None else self.pairs)
            X, labels, groups = fit_inputs(X, labels, groups,
                                           labels_required=not isinstance(p, ExplicitPairs))
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
        self._sizes = (int(tot[0]), int(tot[1]))
        with comm.local():
            self.monitor_ = FitMonitor(self, n_features=X.shape[1], device=X.device,
                                       eval_set=eval_set, eval_metric=eval_metric,
                                       early_stopping_rounds=early_stopping_rounds,
                                       callbacks=list(self.callbacks) + list(callbacks),
                                       loss=self._eval_objective(p), comm=comm,
                                       loss_combine="logsumexp")
        comm.check()
        self.source_ = make_source(self.learner, X, context=comm.ctx)
        self.groups_ = groups
        return X, labels, groups, p

    def _eval_objective(self, pairs):
        """The training objective as ``f(scores, labels, groups)`` for the ``"loss"`` metric
        (``None`` when it is not a function of the scores): ln F̃ over the crucial pairs."""
        if isinstance(pairs, ExplicitPairs):
            return None  # explicit pairs index the training documents only
        return _per_set(lambda y, g: make_pair_stats(y, g, pairs).log_loss)

    def _start(self, X, groups, builder):
        self._builder = builder
        params = {"learner": repr(self.learner), "on_unbounded": self.on_unbounded}
        for k in ("variant", "p", "warmup"):
            if hasattr(self, k):
                params[k] = getattr(self, k)
        if self._comm.ctx.world_size > 1:
            params["world_size"] = self._comm.ctx.world_size
        n_docs, n_queries = self._sizes
        self.monitor_.start(FitInfo(algorithm=self._algorithm, n_docs=n_docs,
                                    n_queries=n_queries, n_features=int(X.shape[1]),
                                    n_rounds=self.n_rounds, params=params),
                            build=builder.build)

    def _record(self, t, diag):
        """Close round ``t + 1`` (0-based ``t``): the running evaluation scores get the
        round's weak rankers, its :class:`RoundRecord` (``step`` = α, ``weight`` = the signed
        ensemble weight, ``loss`` = the objective after the step; the rest of ``diag`` in
        ``extra``) goes to the monitor; ``True`` when training stops."""
        terms, intercept = self._builder.end_round()
        self.monitor_.add(terms, intercept)
        alpha = diag.get("alpha", 0.0)
        record = RoundRecord(round=t + 1, loss=diag.get("loss"), step=alpha,
                             weight=diag.get("alpha_signed", alpha), extra=diag)
        return self.monitor_.end_round(record)

    def _undefined(self, reason):
        """The halting policy for an undefined or infinite step."""
        if self.on_unbounded == "raise":
            rnd = len(self.history_) + 1
            raise UnboundedDirectionError(f"round {rnd}: undefined step: {reason}", round=rnd,
                                          model=self._builder.build())
        self.stop_reason_ = reason

    def _atanh_step(self, x: float, reason: str) -> Optional[float]:
        """``atanh(x)`` (AdaBoost's and smooth margin ranking's step); at ``|x| >= 1`` the
        halting policy: the capped step ``±alpha_cap`` under ``"cap"``, else ``None`` (stop)."""
        if abs(x) < 1:
            return math.atanh(x)
        self._undefined(reason)
        return math.copysign(self.alpha_cap, x) if self.on_unbounded == "cap" else None

    def _select(self, score: Tensor, valid: Tensor, signed: bool) -> int:
        """Index of the best candidate (lowest index on ties)."""
        sc = score.abs() if signed else score.clone()
        return int(torch.argmax(sc.masked_fill_(~valid, float("-inf"))))

    def _finish(self, builder, s):
        self.scores_ = s
        info = {"algorithm": type(self).__name__, "n_rounds_run": len(self.history_)}
        for k in ("variant", "p", "warmup"):
            if hasattr(self, k):
                info[k] = getattr(self, k)
        builder.info.update(info)
        return self.monitor_.finish(builder.build)


def _count_sets(eval_set) -> int:
    from .booster import _count_sets as count

    return count(eval_set)


def _per_set(make):
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


# ====================================================================================
# RankBoost: RB-D, RB-C, coordinate descent
# ====================================================================================
class RankBoost(_Base):
    r"""RankBoost over crucial pairs (label-induced or explicit), binary or real rankers.

    Args:
        variant: ``"rb-d"`` | ``"rb-c"`` | ``"coordinate"`` (see the module docstring).
        learner: the weak rankers: ``Stumps(max_thresholds=...)`` (binary threshold stumps,
            the default), ``FeatureRankers()`` (real-valued scaled features), or
            ``MatrixRankers()`` (``X`` *is* the matrix ``H`` of ranker outputs).
        n_rounds: number of boosting rounds.
        pairs: ``"graded"`` (default), ``"bipartite"``/``Bipartite(threshold)`` or
            ``ExplicitPairs(hi, lo[, weight])``.
        allow_negative_alpha: if False, only rankers with ``ε⁺ > ε⁻`` (``r > 0``) are chosen
            and ``α > 0`` (the textbook rule (13)); training stops when none is left
            (Connamacher et al. Lemma 3). Default True (signed α, like the reference code).
        tol: an edge ``|r| <= tol`` counts as zero (training stops: converged / no
            improving ranker), so rounding noise never drives a step.
        on_unbounded, alpha_cap, smoothing: the halting policy (module docstring).
        callbacks: see the module docstring.
        distributed: data-parallel training over a ``torch.distributed`` process group (see
            the module docstring): ``None`` (default: when a process group of more than one
            process is initialised), ``True``, ``False`` or a
            :class:`~torchrankboost.distributed.DistContext`; each rank passes its shard of
            whole queries. Stumps and label-induced pairs; callbacks run on rank 0 only.

    ``fit(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
    early_stopping_rounds=None, callbacks=(), pairs=None, init_scores=None)`` returns the model
    (an ensemble of the chosen rankers, ``predict(X)``; ``init_scores`` offsets the training
    scores only); per-round diagnostics (``alpha``, ``eps_plus``,
    ``eps_minus``, ``eps_zero``, ``r``, ``Z``, ``feature``, ``threshold``, ``loss_before`` /
    ``loss`` = ln F̃ before / after the step, ``margin`` with ``track_margin=True``, ``l1``)
    are in ``history_``.
    """

    VARIANTS = ("rb-d", "rb-c", "coordinate")
    UNBOUNDED = ("stop", "raise", "cap", "smooth")
    _algorithm = "rankboost"

    def __init__(self, variant: str = "rb-c", *, learner=None, n_rounds: int = 100, pairs=None,
                 allow_negative_alpha: bool = True, on_unbounded: str = "stop",
                 alpha_cap: float = 50.0, smoothing: float = 1e-6, callbacks=(),
                 track_margin: bool = False, tol: float = 1e-12, distributed=None):
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {self.VARIANTS}, got {variant!r}")
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap, smoothing=smoothing,
                         complement=allow_negative_alpha)
        self.variant = variant
        from ..distributed import DistContext

        if not (distributed is None or isinstance(distributed, (bool, DistContext))):
            raise ValueError(f"distributed must be None, True, False or a DistContext, got "
                             f"{distributed!r}")
        self.distributed = distributed
        self.allow_negative_alpha = bool(allow_negative_alpha)
        self.track_margin = bool(track_margin)
        self.tol = float(tol)

    @_flush_denormals
    def fit(self, X, labels=None, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds=None, callbacks=(), pairs=None,
            init_scores=None):
        X, labels, groups, p = self._setup(X, labels, groups, pairs, eval_set, eval_metric,
                                           early_stopping_rounds, callbacks)
        stats, D = _stats_and_dictionary(self.source_, labels, groups, p, self._comm.ctx)
        self.stats_ = stats
        src = self.source_
        if self.variant == "rb-d" and not D.binary:
            raise ValueError("variant='rb-d' needs binary {0,1} rankers (stumps or a 0/1 matrix)")
        s = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        if init_scores is not None:
            s = s + torch.as_tensor(init_scores, dtype=torch.float64, device=X.device)
        builder = StumpEnsembleBuilder(src)
        self._start(X, groups, builder)
        l1 = 0.0
        valid = D.valid
        for t in range(self.n_rounds):
            w = stats.weights(s)
            try:
                c, alpha, diag = self._round(stats, D, w, s, valid)
            except _Halt:
                break
            h = self._h
            s = s + alpha * h
            l1 += abs(alpha)
            builder.add(c, alpha)
            diag.update(src.describe(c))
            lb = float(w.log_loss)
            z = diag.get("Z", float("nan"))
            la = lb + math.log(z) if (z == z and z > 0) else float(stats.log_loss(s))
            diag.update(candidate=c, alpha=alpha, loss_before=lb, loss=la, l1=l1)
            if self.track_margin:
                mu = float(stats.margin(s))
                diag["margin"] = mu / l1 if l1 > 0 else float("nan")
            if self._record(t, diag) or self.stop_reason_ is not None:
                break
        return self._finish(builder, s)

    def _round(self, stats, D, w, s, valid):
        v = self.variant
        signed = self.allow_negative_alpha
        if v == "rb-d":
            ep_all, em_all, e0_all = D.all_stats(stats, w)
            Z = e0_all + 2 * torch.sqrt(ep_all * em_all)
            ok = valid if signed else valid & (ep_all - em_all > self.tol)
            if not bool(ok.any()):
                self.stop_reason_ = "no ranker with positive edge (eps_plus <= eps_minus)"
                raise _Halt
            c = self._select(-Z, ok, signed=False)
        else:
            r_all = D.edges(stats, w)
            ok = valid if signed else valid & (r_all > self.tol)
            if not bool(ok.any()):
                self.stop_reason_ = "no ranker with positive edge (eps_plus <= eps_minus)"
                raise _Halt
            c = self._select(r_all, ok, signed=signed)
        h = self._h = D.column(c)
        diag = {}
        if D.binary:
            ep, em, e0 = (float(x) for x in stats.chosen_stats(w, h))
            r = ep - em
            diag.update(eps_plus=ep, eps_minus=em, eps_zero=e0, r=r)
        else:
            r = float(((w.U - w.L) * h).sum())
            diag.update(r=r)
        if abs(r) <= self.tol or (not signed and r <= 0):
            # edge zero up to rounding: converged (signed) or no improving ranker (α ≥ 0)
            self.stop_reason_ = ("converged: best edge |r| <= tol" if signed
                                 else "no ranker with positive edge (eps_plus <= eps_minus)")
            raise _Halt
        if v == "rb-c":
            if abs(r) >= 1:
                alpha = self._undefined_alpha("perfect ranker (|r| = 1) for RB-C", r)
            else:
                alpha = math.atanh(r)
        elif D.binary:
            if ep <= 0 or em <= 0:
                if self.on_unbounded == "smooth":
                    d = self.smoothing
                    alpha = 0.5 * math.log((ep + d) / (em + d))
                else:
                    alpha = self._undefined_alpha(
                        f"eps_minus = 0 (eps_plus={ep:.3g}, eps_zero={e0:.3g})" if em <= 0
                        else f"eps_plus = 0 (eps_minus={em:.3g})", r)
            else:
                alpha = 0.5 * (math.log(ep) - math.log(em))
        else:
            lz0 = float(w.log_loss)

            alpha, bounded = exact_step(stats.line_function(s, h), max_alpha=self.alpha_cap)
            if not bounded:
                alpha = self._undefined_alpha("loss decreases without bound along the ranker", r)
            diag["Z"] = math.exp(float(stats.log_loss(s + alpha * h)) - lz0)
        if D.binary:
            diag["Z"] = (e0 + ep * math.exp(-alpha) + em * math.exp(alpha)) if abs(alpha) < 700 else float("nan")
        return c, float(alpha), diag

    def _undefined_alpha(self, reason, r):
        if self.on_unbounded == "cap":
            self._undefined(reason)
            return math.copysign(self.alpha_cap, r)
        if self.on_unbounded == "smooth" and self.variant == "rb-c":
            d = self.smoothing
            return 0.5 * math.log((1 + r + d) / (1 - r + d))
        self._undefined(reason)
        raise _Halt


# ====================================================================================
# Smooth margin ranking
# ====================================================================================
def smooth_margin_alpha(g: float, dp: float, dm: float, d0: float) -> float:
    """Eq. (12) in the stable rationalised form:
    ``e^α = 2(1-g)d₊ / (g d₀ + sqrt(g² d₀² + 4(1-g²) d₊ d₋))``. ``g = 0`` gives RankBoost's
    ``½ ln(d₊/d₋)``."""
    den = g * d0 + math.sqrt(g * g * d0 * d0 + 4 * (1 - g * g) * dp * dm)
    return math.log(2 * (1 - g) * dp) - math.log(den)


class SmoothMarginRanking(_Base):
    r"""Smooth margin ranking (Rudin & Schapire 2009, §4): approximate coordinate ascent on
    ``G̃(λ) = -ln F̃(λ)/‖λ‖₁``.

    RankBoost (``warmup`` variant, default coordinate descent) runs until ``G̃ > 0``
    (``ln F̃ < 0``); then each round picks ``j = argmax`` edge and steps by eq. (12) (for
    binary rankers; a 1-D root find of eq. (11) ``g τ = -τ'`` for real-valued ones). Stops
    (``on_unbounded``) when the best edge ``r ≤ g`` (no ascent direction) or when
    ``d₋ = d₀ = 0``.

    Diagnostics per round: ``phase`` ("warmup"/"smooth"), ``alpha``, ``eps_*``, ``r``,
    ``g`` (= G̃ before the step), ``g_next``, ``margin`` (μ after the step), ``smooth_margin``
    (G̃ after the step), ``l1`` (s_{t+1}), ``loss_before``/``loss`` (ln F̃), ``theorem7_condition``
    (``d₀ < ⅔(1-r)(1-r²)`` and ``0 ≤ g < r < 1``).
    """

    _algorithm = "smooth_margin"

    def __init__(self, *, learner=None, n_rounds: int = 1000, pairs=None, warmup: str = "coordinate",
                 max_warmup_rounds: Optional[int] = None, complement: bool = True,
                 on_unbounded: str = "stop", alpha_cap: float = 50.0, callbacks=()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap, complement=complement)
        if warmup not in RankBoost.VARIANTS:
            raise ValueError(f"warmup must be one of {RankBoost.VARIANTS}, got {warmup!r}")
        self.warmup = warmup
        self.max_warmup_rounds = max_warmup_rounds

    @_flush_denormals
    def fit(self, X, labels=None, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds=None, callbacks=(), pairs=None):
        X, labels, groups, p = self._setup(X, labels, groups, pairs, eval_set, eval_metric,
                                           early_stopping_rounds, callbacks)
        stats, D = _stats_and_dictionary(self.source_, labels, groups, p, self._comm.ctx)
        self.stats_ = stats
        src = self.source_
        s = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        builder = StumpEnsembleBuilder(src)
        self._start(X, groups, builder)
        l1 = 0.0
        warm = RankBoost(self.warmup, learner=self.learner, allow_negative_alpha=self.complement,
                         on_unbounded=self.on_unbounded, alpha_cap=self.alpha_cap)
        warm._builder, warm.history_ = builder, self.history_  # its halts are this fit's
        max_warm = self.n_rounds if self.max_warmup_rounds is None else self.max_warmup_rounds
        nwarm = 0
        for t in range(self.n_rounds):
            w = stats.weights(s)
            lz = float(w.log_loss)
            if lz >= 0:
                if nwarm >= max_warm:
                    self._undefined("warm-up did not reach G > 0")
                    break
                nwarm += 1
                try:
                    c, alpha, diag = warm._round(stats, D, w, s, D.valid)
                except _Halt:
                    self.stop_reason_ = warm.stop_reason_
                    break
                diag["phase"] = "warmup"
                g = -lz / l1 if l1 > 0 else float("nan")
                h = warm._h
                s = s + alpha * h
            else:
                g = -lz / l1
                step = self._smooth_step(stats, D, w, s, g)
                if step is None:
                    break
                c, h, alpha, flip, diag = step
                if flip:
                    # positive step on the complement 1 - h: score shift alpha - alpha*h
                    s = s + alpha * (1 - h)
                    builder.add(c, -alpha)
                    builder.add_intercept(alpha)
                    alpha_signed = -alpha
                else:
                    s = s + alpha * h
                    builder.add(c, alpha)
                    alpha_signed = alpha
                diag["alpha"] = alpha
                diag["alpha_signed"] = alpha_signed
                diag["complemented"] = flip
            if diag.get("phase") == "warmup":
                builder.add(c, alpha)
                diag["alpha"] = alpha
            l1 += abs(alpha)
            lz_new = float(stats.log_loss(s))
            diag.update(src.describe(c))
            diag.update(candidate=c, loss_before=lz, loss=lz_new, g=g, l1=l1,
                        smooth_margin=-lz_new / l1 if l1 > 0 else float("nan"),
                        margin=float(stats.margin(s)) / l1 if l1 > 0 else float("nan"))
            diag["g_next"] = diag["smooth_margin"]
            if self._record(t, diag) or self.stop_reason_ is not None:
                break
        return self._finish(builder, s)

    def _smooth_step(self, stats, D, w, s, g):
        """One smooth-phase step (eq. (12) for binary rankers, the root of eq. (11) for real
        ones): ``(candidate, column, α, complemented, diagnostics)``, or ``None`` when the
        halting policy stops."""
        r_all = D.edges(stats, w)
        c = self._select(r_all, D.valid, signed=self.complement)
        h = D.column(c)
        diag = {"phase": "smooth"}
        flip = False
        if D.binary:
            ep, em, e0 = (float(x) for x in stats.chosen_stats(w, h))
            if ep - em < 0 and self.complement:
                ep, em, flip = em, ep, True
            r = ep - em
            diag.update(eps_plus=ep, eps_minus=em, eps_zero=e0, r=r)
            if r <= g:
                self._undefined(f"best edge r={r:.6g} <= g={g:.6g}: no ascent step")
                return None
            if em <= 0 and e0 <= 0:
                self._undefined("perfect ranker (d_minus = d_zero = 0)")
                if self.on_unbounded != "cap":
                    return None
                alpha = self.alpha_cap
            else:
                alpha = smooth_margin_alpha(g, ep, em, e0)
            diag["theorem7_condition"] = bool(0 <= g < r < 1 and e0 < (2 / 3) * (1 - r) * (1 - r * r))
        else:
            r = float(((w.U - w.L) * h).sum())
            if r < 0 and self.complement:
                flip, r = True, -r
            diag.update(r=r)
            if r <= g:
                self._undefined(f"best edge r={r:.6g} <= g={g:.6g}: no ascent step")
                return None
            hh = 1 - h if flip else h

            line = stats.line_function(s, hh)

            def phi(a, line=line):  # eq. (11): the root of d/dα ln F̃ + g
                v, d, *curv = line(a)
                return (v + g * a, d + g, *curv)

            alpha, bounded = exact_step(phi, max_alpha=self.alpha_cap)
            if not bounded:
                self._undefined("eq. (11) has no finite root")
                if self.on_unbounded != "cap":
                    return None
                alpha = self.alpha_cap
        return c, h, alpha, flip, diag


# ====================================================================================
# AdaBoost with the constant weak classifier
# ====================================================================================
def with_zero_skew_intercept(model, X, labels, *, threshold: float = 0.0):
    """Corollary 13 (Rudin & Schapire): a copy of ``model`` (an :class:`Ensemble`) whose base
    score is shifted by ``b = ½ ln(F₊/F₋)`` computed on the training data ``(X, labels)``
    (``F₊ = Σ_{label > threshold} e^{-s}``, ``F₋ = Σ_{label <= threshold} e^{s}``, pooled over
    all documents).

    Every pair margin (so F̃, the ranking and AUC) is unchanged, the F-skew ``F₊ - F₋``
    becomes 0 and AdaBoost's loss becomes ``F = 2√F̃``: a RankBoost model then also minimises
    AdaBoost's objective in the limit. Returns ``(new_model, b)``.
    """
    from ..losses import zero_skew_intercept
    from .ensemble import Ensemble

    labels = torch.as_tensor(labels)
    s = model.predict(X)
    b = float(zero_skew_intercept(s, labels.to(s.device), None, threshold=threshold))
    if not math.isfinite(b):
        raise ValueError("labels: need both positives and negatives for the F-skew intercept")
    out = Ensemble(model.models, model.weights, base_score=model.base_score + b,
                   num_features=model.num_features, info=dict(model.info, zero_skew_intercept=b))
    return out, b


def _fskew_stats(s: Tensor, pos: Tensor):
    """AdaBoostLoss's own F₊, F₋ and F-skew of the scores (pooled), and ln F̃ = ln F₊ + ln F₋."""
    d = AdaBoostLoss(threshold=0.5).round_diagnostics(s, pos.to(s.dtype))
    return dict(d, log_F_tilde_bipartite=d["log_F_plus"] + d["log_F_minus"])


class AdaBoost(_Base):
    r"""AdaBoost (Rudin & Schapire §5) on ±1 versions ``2h - 1`` of the binary rankers plus,
    by default, the constant weak classifier ``h₀ = 1``.

    Instances are labelled ``y = +1`` if ``label > threshold`` else ``-1``; query groups are
    ignored by AdaBoost's loss ``F = F₊ + F₋`` (classification), but the RankBoost loss
    ``ln F̃`` over the bipartite pairs inside each query is reported too. Each round picks
    ``argmax |r|`` with ``r = Σ_i d_i y_i h(x_i)`` and ``α = ½ ln((1+r)/(1-r))``.

    Diagnostics: ``alpha``, ``r``, ``feature``/``threshold`` (``feature=None`` for the
    constant), ``F_plus``, ``F_minus``, ``F``, ``f_skew``, ``relative_f_skew`` (after the
    step), ``loss_before``/``loss`` (ln F), ``loss_tilde`` (ln F̃ after the step).
    """

    _algorithm = "adaboost"

    def __init__(self, *, learner=None, n_rounds: int = 100, threshold: float = 0.0,
                 include_constant: bool = True, on_unbounded: str = "stop",
                 alpha_cap: float = 50.0, callbacks=()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=Bipartite(threshold),
                         callbacks=callbacks, on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.threshold = float(threshold)
        self.include_constant = bool(include_constant)

    def _eval_objective(self, pairs):
        """AdaBoost's ``ln F = ln Σ_i exp(-y_i s_i)`` (pooled over the set's documents)."""
        threshold = self.threshold

        def objective(scores, labels, groups=None):
            y = torch.where(labels.to(scores.device) > threshold, 1.0, -1.0)
            return torch.logsumexp(-y.to(torch.float64) * scores.to(torch.float64), 0)

        return objective

    @_flush_denormals
    def fit(self, X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds=None, callbacks=()):
        X, labels, groups, p = self._setup(X, labels, groups, Bipartite(self.threshold),
                                           eval_set, eval_metric, early_stopping_rounds,
                                           callbacks)
        src = self.source_
        D = src.dictionary
        if not D.binary:
            raise ValueError("AdaBoost needs binary {0,1} rankers (used as ±1 classifiers 2h-1)")
        pos = labels > self.threshold
        y = torch.where(pos, 1.0, -1.0).to(torch.float64)
        stats = LabelPairStats(labels, groups, Bipartite(self.threshold))
        self.stats_ = stats
        s = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        builder = StumpEnsembleBuilder(src)
        self._start(X, groups, builder)
        l1 = 0.0
        for t in range(self.n_rounds):
            z = -y * s
            logF = torch.logsumexp(z, 0)
            d = torch.exp(z - logF)
            dy = d * y
            c0 = float(dy.sum())
            r_all = 2 * D.linear_sums(dy) - c0
            c = self._select(r_all, D.valid, signed=True)
            r = float(r_all[c])
            const = self.include_constant and abs(c0) > abs(r)
            if const:
                r = c0
            alpha = self._atanh_step(r, "perfect weak classifier (|r| = 1)")
            if alpha is None:
                break
            if const:
                s = s + alpha
                builder.add_intercept(alpha)
                desc = {"feature": None, "threshold": None, "constant": True}
            else:
                h = D.column(c)
                s = s + alpha * (2 * h - 1)
                builder.add(c, 2 * alpha)
                builder.add_intercept(-alpha)
                desc = dict(src.describe(c), constant=False)
            l1 += abs(alpha)
            diag = dict(desc, candidate=None if const else c, alpha=alpha, r=r,
                        loss_before=float(logF), loss=float(torch.logsumexp(-y * s, 0)), l1=l1,
                        loss_tilde=float(stats.log_loss(s)))
            diag.update(_fskew_stats(s, pos))
            if self._record(t, diag) or self.stop_reason_ is not None:
                break
        return self._finish(builder, s)


# ====================================================================================
# p-norm push
# ====================================================================================
class _PNormObjective:
    """ln F_p(s) pooled over the queries, ``ln Σ_q Σ_j L_j^p`` (Rudin 2009; graded labels:
    every document is a "negative" against all higher grades), and its gradient: the pair
    engine's exponential family, the kernels of ``PNormPushLoss``."""

    def __init__(self, labels, groups, pairs, p):
        self.st = LabelPairStats(labels, groups, pairs)
        self.p = float(p)

    def log_loss(self, s):
        return pooled_log_loss(s, self.st.levels, self.st.groups, self.p)[0]

    def grad(self, s):
        """(ln F_p, -∂ ln F_p/∂s)."""
        v, g = pooled_log_loss(s.detach(), self.st.levels, self.st.groups, self.p, grad=True)
        return v, -g


class PNormPush(_Base):
    r"""Rudin's p-norm push (``F_p = Σ_k (Σ_i e^{-(s_i - t_k)})^p``), coordinate descent.

    Each round picks ``j = argmax |⟨-∇ ln F_p, h_j⟩|`` (Gauss–Southwell, the paper's Fig. 1
    step (a); equal to ``p·|g_j|`` with ``g = Pᵀπ - Nᵀν``) and steps by the exact line
    search: the closed form ``α = ln(a(1-b)/((1-a)b))/(p+1)`` (C12) for binary rankers on a
    single bipartite query, otherwise a safeguarded 1-D root find of the convex
    ``φ'(α) = ∂ ln F_p(s + α h)/∂α``. Several queries: ``F_p`` is summed over queries;
    graded labels use the C14 extension (every document is a "negative" against all
    higher grades). ``p = 1`` is RankBoost's coordinate descent.

    Diagnostics: ``alpha``, ``g`` (the selection score ⟨-∇ ln F_p, h⟩/p), ``loss_before`` /
    ``loss`` (ln F_p), ``feature``/``threshold``, ``closed_form``.
    """

    _algorithm = "pnorm_push"

    def __init__(self, p: float = 4.0, *, learner=None, n_rounds: int = 200, pairs="bipartite",
                 tol: float = 1e-14, on_unbounded: str = "stop", alpha_cap: float = 50.0,
                 callbacks=()):
        if not (isinstance(p, (int, float)) and p >= 1 and math.isfinite(p)):
            raise ValueError(f"p must be a finite number >= 1 (F_p is convex only for p >= 1), got {p!r}")
        self.p = float(p)
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.tol = float(tol)

    def _eval_objective(self, pairs):
        """``ln F_p`` of the set."""
        if isinstance(pairs, ExplicitPairs):
            return None
        return _per_set(lambda y, g: _PNormObjective(y, g, pairs, self.p).log_loss)

    @_flush_denormals
    def fit(self, X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds=None, callbacks=(), pairs=None):
        X, labels, groups, pr = self._setup(X, labels, groups, pairs, eval_set, eval_metric,
                                           early_stopping_rounds, callbacks)
        if isinstance(pr, ExplicitPairs):
            raise ValueError("PNormPush needs label-induced pairs ('bipartite' or 'graded')")
        obj = _PNormObjective(labels, groups, pr, self.p)
        self.objective_ = obj
        src = self.source_
        D = src.dictionary
        single = obj.st.K == 2 and int((obj.st.pairs_per_group > 0).sum()) == 1
        closed = D.binary and single
        if single:  # one bipartite query: π over positives, ν over negatives (Rudin 2009)
            has = obj.st.pairs_per_group[obj.st.gi] > 0
            pm, nm = (obj.st.level == 1) & has, (obj.st.level == 0) & has
        s = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        builder = StumpEnsembleBuilder(src)
        self._start(X, groups, builder)
        p = self.p
        l1 = 0.0
        for t in range(self.n_rounds):
            lz, wneg = obj.grad(s)
            gsel = D.linear_sums(wneg) / p
            c = self._select(gsel, D.valid, signed=True)
            gj = float(gsel[c])
            if abs(gj) < self.tol:
                self.stop_reason_ = "converged (max |g| below tol)"
                break
            h = D.column(c)
            used_closed = False
            if closed:
                # a = Σ π h over positives, b = Σ ν h over negatives (π ∝ e^{-s}, ν ∝ e^{p s})
                pi = torch.softmax(-s[pm], 0)
                nu = torch.softmax(p * s[nm], 0)
                a = float((pi * h[pm]).sum())
                b = float((nu * h[nm]).sum())
                num, den = a * (1 - b), (1 - a) * b
                if num <= 0 or den <= 0:
                    self._undefined(f"unbounded step (a={a:.6g}, b={b:.6g})")
                    if self.on_unbounded != "cap":
                        break
                    alpha = math.copysign(self.alpha_cap, gj)
                else:
                    alpha = (math.log(num) - math.log(den)) / (p + 1)
                used_closed = True
            else:
                if single:
                    sp, sn, hp, hn = s[pm], p * s[nm], h[pm], h[nm]

                    def phi(a_):  # ln F_p = p LSE(-s - αh) + LSE(p s + pαh)
                        zp, zn = -sp - a_ * hp, sn + (p * a_) * hn
                        lp, ln = torch.logsumexp(zp, 0), torch.logsumexp(zn, 0)
                        pa, na = torch.exp(zp - lp), torch.exp(zn - ln)
                        mp, mn = float((pa * hp).sum()), float((na * hn).sum())
                        vp = float((pa * hp * hp).sum()) - mp * mp  # Var_π(h)
                        vn = float((na * hn * hn).sum()) - mn * mn  # Var_ν(h)
                        # φ' = -p E_π[h] + p E_ν[h], φ'' = p Var_π(h) + p² Var_ν(h)
                        return float(p * lp + ln), p * (mn - mp), p * vp + p * p * vn
                else:
                    def phi(a_, h=h):
                        lz_a, wn = obj.grad(s + a_ * h)
                        return float(lz_a), float(-(wn * h).sum())

                alpha, bounded = exact_step(phi, max_alpha=self.alpha_cap)
                if not bounded:
                    self._undefined("ln F_p decreases without bound along the ranker")
                    if self.on_unbounded != "cap":
                        break
                    alpha = math.copysign(self.alpha_cap, gj)
            s = s + alpha * h
            l1 += abs(alpha)
            builder.add(c, alpha)
            diag = dict(src.describe(c), candidate=c, alpha=alpha, g=gj, loss_before=float(lz),
                        loss=float(obj.log_loss(s)), closed_form=used_closed, l1=l1)
            if self._record(t, diag) or self.stop_reason_ is not None:
                break
        return self._finish(builder, s)


# ====================================================================================
# RankBoost+
# ====================================================================================
def _int8_vecmat(v: Tensor, M: Tensor, chunk: int = 1024) -> Tensor:
    """``v @ M`` for a float64 vector and an int8 matrix, widening ``chunk`` columns at a time."""
    out = torch.empty(M.shape[1], dtype=v.dtype, device=v.device)
    for c in range(0, M.shape[1], chunk):
        out[c:c + chunk] = v @ M[:, c:c + chunk].to(v.dtype)
    return out


class RankBoostPlus(_Base):
    r"""RankBoost+ (Connamacher, Pancha, Liu & Ray 2019), efficient Algorithm 2.

    Minimises ``Ê2(η) = (1/m) Σ_i exp(-Σ_s A_{is} η_s + Σ_s 1[A_{is}=0] ln cosh η_s)`` over
    a linearly independent (in pair space) set ``S`` of binary rankers, where
    ``A_{is} = h_s(hi_i) - h_s(lo_i)``. Each round computes ``δ_s = ε⁻ - ε⁺ + ε⁰ tanh η_s``
    for the members of ``S`` and ``|ε⁺ - ε⁻|`` for the new candidates; takes the larger;
    steps ``α = atanh(-δ)`` (eq. 34 with ``α′ = η_s``); reweights with the tie factor
    ``cosh(α + α′)/cosh α′`` (eq. 25). The first time the best new candidate lies in
    ``span(S)`` the candidate set is pruned once to an independent set containing ``S``
    (QR of ``[S, permute(R)]``, seeded) and ``S`` becomes static (greedy regime ends).

    Pairs are materialised (the tie factor is pair-specific): the candidate pair vectors
    ``(m, C)`` (int8 entries in {-1, 0, 1}, one byte each; at most ``max_pair_entries``
    entries, default 4e8 ≈ 400 MB, else ``ValueError``) are
    deduplicated first (identical or negated columns, zero columns). The span test uses an
    incrementally orthonormalised basis of ``S`` (Gram–Schmidt twice, float64, relative
    tolerance ``rank_tol``) instead of the paper's least squares; pruning adds the remaining
    candidates in a seeded random order whenever they are independent of the basis so far
    (the paper's QR of ``[S, permute(R)]``).
    Diagnostics: ``alpha``, ``alpha_prime``, ``eps_plus/minus/zero``, ``delta``,
    ``loss_e2`` = ``loss`` (ln Ê2 after the step, recomputed from η), ``loss_before``,
    ``greedy``, ``new_ranker``.
    """

    _algorithm = "rankboost_plus"

    def __init__(self, *, learner=None, n_rounds: int = 100, pairs=None, seed: int = 0,
                 rank_tol: float = 1e-9, on_unbounded: str = "stop", alpha_cap: float = 50.0,
                 max_pair_entries: int = 400_000_000, callbacks=()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.seed = int(seed)
        self.rank_tol = float(rank_tol)
        self.max_pair_entries = int(max_pair_entries)

    def _eval_objective(self, pairs):
        """None: Ê2 depends on each ranker's ties and accumulated weight, not on the scores
        alone (evaluate RankBoost+ with ranking metrics)."""
        return None

    @_flush_denormals
    def fit(self, X, labels=None, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds=None, callbacks=(), pairs=None):
        X, labels, groups, p = self._setup(X, labels, groups, pairs, eval_set, eval_metric,
                                           early_stopping_rounds, callbacks)
        src = self.source_
        if not src.dictionary.binary:
            raise ValueError("RankBoostPlus needs binary {0,1} rankers")
        R, cand, logD = self._pair_matrix(src.dictionary, labels, groups, p, X.shape[0])
        self.num_candidates_ = R.shape[1]
        log_d1 = logD.clone()
        st = _PlusState(R, self.rank_tol)
        builder = StumpEnsembleBuilder(src)
        self._start(X, groups, builder)
        le2 = 0.0  # ln Ê2 at η = 0 (D_1 normalised)
        for t in range(self.n_rounds):
            Dw = torch.exp(logD)
            choice = st.choose(Dw, self.seed)
            if choice is None:
                self._undefined("no candidate ranker")
                break
            kind, k, col, (ep, em, e0), ap = choice
            arg = ep - em - e0 * math.tanh(ap)  # = -δ
            alpha = self._atanh_step(arg, "perfect ranker (atanh argument = ±1)")
            if alpha is None:
                break
            cidx = int(cand[st.commit(kind, k, col, alpha)])
            # reweight (eq. 25) in log space
            tie = (_logcosh(torch.tensor(alpha + ap, dtype=torch.float64))
                   - _logcosh(torch.tensor(ap, dtype=torch.float64))).item()
            vals = torch.tensor([-alpha, alpha, tie], dtype=torch.float64, device=X.device)
            logw = torch.where(col > 0, vals[0], torch.where(col < 0, vals[1], vals[2]))
            logD = logD + logw
            logD = logD - torch.logsumexp(logD, 0)
            builder.add(cidx, alpha)
            prev_le2, le2 = le2, st.log_e2(log_d1)
            diag = dict(src.describe(cidx), candidate=cidx, alpha=alpha, alpha_prime=ap,
                        loss_before=prev_le2, loss=le2,
                        eps_plus=ep, eps_minus=em, eps_zero=e0, delta=-arg, loss_e2=le2,
                        greedy=st.greedy, new_ranker=kind == "new", basis_size=len(st.S))
            if self._record(t, diag) or self.stop_reason_ is not None:
                break
        self.eta_ = st.eta
        self.basis_ = [int(cand[k]) for k in st.S]
        return self._finish(builder, None)

    def _pair_matrix(self, D, labels, groups, p, n):
        """The pair × candidate matrix ``R`` (entries ``h(hi) - h(lo)`` in {-1, 0, 1}, int8:
        8x less memory than float64), its columns deduplicated up to sign and without zero
        columns; the candidates they stand for; ``log D_1`` (normalised pair weights)."""
        hi, lo, pw = label_pairs(labels, groups, p)
        m = hi.numel()
        if m == 0:
            raise ValueError("no crucial pairs")
        cand = torch.nonzero(D.valid).flatten()
        dev = cand.device
        cols = torch.stack([D.column(int(c)) for c in cand], 1) if cand.numel() else torch.zeros(n, 0)
        if m * cand.numel() > self.max_pair_entries:
            raise ValueError(
                f"RankBoostPlus materialises the pair x candidate matrix: {m} pairs x "
                f"{cand.numel()} candidates exceeds max_pair_entries={self.max_pair_entries}; "
                "use fewer thresholds (Stumps(max_thresholds=...)), per-query tasks as in the "
                "paper, or raise max_pair_entries")
        cols = cols.to(torch.int8)
        R = cols[hi] - cols[lo]  # (m, C) int8
        nz = (R != 0).any(0)
        R, cand = R[:, nz], cand[nz]
        first_nz = (R != 0).to(torch.int8).argmax(0)
        sgn = torch.gather(R, 0, first_nz[None]).squeeze(0)
        Rc = (R * sgn).to(torch.int8).T.contiguous()  # canonical orientation
        _, inv = torch.unique(Rc, dim=0, return_inverse=True)
        first = torch.full((int(inv.max()) + 1,), R.shape[1], dtype=torch.long, device=dev)
        first = first.scatter_reduce(0, inv, torch.arange(R.shape[1], device=dev), "amin")
        keep = torch.sort(first).values
        logD = torch.zeros(m, dtype=torch.float64, device=dev)
        if pw is not None:
            logD = torch.log(pw.to(torch.float64))
        return R[:, keep], cand[keep], logD - torch.logsumexp(logD, 0)


class _PlusState:
    """RankBoost+'s working set: the member rankers ``S`` (columns of ``R``) with their
    accumulated weights ``η``, an orthonormal basis of ``span(S)`` in pair space (Gram–Schmidt
    twice, float64), the candidates not tried yet, and the greedy/static regime."""

    def __init__(self, R: Tensor, rank_tol: float):
        self.R, self.rank_tol = R, rank_tol
        self.S: List[int] = []
        self.eta: List[float] = []
        self.Q = torch.zeros(R.shape[0], 0, dtype=torch.float64, device=R.device)
        self.available = torch.ones(R.shape[1], dtype=torch.bool, device=R.device)
        self.greedy = True

    def in_span(self, col) -> bool:
        if self.Q.shape[1] == 0:
            return False
        col = col.to(torch.float64)
        res = col - self.Q @ (self.Q.T @ col)
        return float(res.norm()) <= self.rank_tol * max(1.0, float(col.norm()))

    def add_basis(self, col) -> None:
        Q = self.Q
        col = col.to(torch.float64)
        v = col - Q @ (Q.T @ col)
        v = v - Q @ (Q.T @ v)
        self.Q = torch.cat([Q, (v / v.norm())[:, None]], 1)

    def member_stats(self, Dw):
        """``(ε⁺, ε⁻, ε⁰, δ)`` of every member (``δ = ε⁻ - ε⁺ + ε⁰ tanh η``)."""
        AS = self.R[:, self.S]
        ep = (Dw[:, None] * (AS > 0)).sum(0)
        em = (Dw[:, None] * (AS < 0)).sum(0)
        e0 = (Dw[:, None] * (AS == 0)).sum(0)
        eta = torch.tensor(self.eta, dtype=torch.float64, device=Dw.device)
        return ep, em, e0, em - ep + e0 * torch.tanh(eta)

    def prune(self, seed: int) -> None:
        """Add the remaining candidates in a seeded random order whenever independent of the
        basis so far (the paper's QR of ``[S, permute(R)]``); ``S`` becomes static."""
        gen = torch.Generator().manual_seed(seed)
        rest = torch.nonzero(self.available).flatten()
        rest = rest[torch.randperm(rest.numel(), generator=gen).to(rest.device)]
        for k in rest.tolist():
            if not self.in_span(self.R[:, k]):
                self.add_basis(self.R[:, k])
                self.S.append(k)
                self.eta.append(0.0)
        self.greedy = False

    def choose(self, Dw, seed: int):
        """The round's ranker: ``(kind, index, pair column, (ε⁺, ε⁻, ε⁰), α′)`` with kind
        ``"new"`` (a column of ``R``) or ``"S"`` (a member's position), ``None`` if none."""
        stats = self.member_stats(Dw) if self.S else None
        best_s = float(stats[3].abs().max()) if stats is not None else -1.0
        if self.greedy:
            gr = _int8_vecmat(Dw, self.R).abs()
            gr = torch.where(self.available, gr, torch.full_like(gr, -1.0))
            j = int(torch.argmax(gr))
            if float(gr[j]) > best_s and float(gr[j]) >= 0:
                self.available[j] = False
                col = self.R[:, j]
                if not self.in_span(col):
                    eps = (float(Dw[col > 0].sum()), float(Dw[col < 0].sum()),
                           float(Dw[col == 0].sum()))
                    return "new", j, col, eps, 0.0
                self.prune(seed)
                stats = self.member_stats(Dw)
        if not self.S:
            return None
        i = int(torch.argmax(stats[3].abs()))
        eps = (float(stats[0][i]), float(stats[1][i]), float(stats[2][i]))
        return "S", i, self.R[:, self.S[i]], eps, self.eta[i]

    def commit(self, kind: str, k: int, col, alpha: float) -> int:
        """Take the step; the chosen column of ``R``."""
        if kind == "new":
            self.add_basis(col)
            self.S.append(k)
            self.eta.append(alpha)
            return k
        self.eta[k] += alpha
        return self.S[k]

    def log_e2(self, log_d1) -> float:
        """ln Ê2 recomputed from η (log form)."""
        AS = self.R[:, self.S]
        et = torch.tensor(self.eta, dtype=torch.float64, device=log_d1.device)
        logl = -(AS * et).sum(1) + ((AS == 0).to(torch.float64) * _logcosh(et)).sum(1)
        return float(torch.logsumexp(logl + log_d1, 0))
