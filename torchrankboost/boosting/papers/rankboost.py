r"""RankBoost in its three published variants and smooth margin ranking, over the one
coordinate-boosting loop of :mod:`.coordinate` (the family's shared conventions, halting
policy and ranker contract: :mod:`torchrankboost.boosting.papers`).

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
* :class:`SmoothMarginRanking` — RankBoost warm-up until ``G̃ > 0`` then the eq. (12) step
  (stable rationalised form), reporting the margin ``μ`` and the smooth margin ``G̃``.

**Data-parallel** (:class:`RankBoost` only, ``distributed=``; see
:mod:`torchrankboost.parallel`): each rank holds whole queries (and a shard of each
evaluation set) under a ``torch.distributed`` process group. Every crucial pair lies inside
one query, so RankBoost's pair distribution, its per-document masses and every candidate's
``ε⁺``, ``ε⁻``, ``r`` are per-rank sums over the global normaliser ``F̃ = Σ_r F̃_r``
(:mod:`.pair_stats`): per round one all-reduce of the ranks' normalisers, one of the
candidates' histograms (``F·(T+1)`` sums for ``rb-c``/``coordinate``, two for ``rb-d``),
one of the chosen ranker's ``(ε⁺, ε⁻, ε⁰)``, and the evaluation's. The stump thresholds are
those of all ranks' rows (the gathered binning sample), so every rank picks the same stump
and step as one process on the whole data. Stumps and label-induced pairs only (binary
rankers: the closed-form steps need no line search across ranks).
"""


from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch

from ...parallel import DistContext
from .coordinate import (CoordinateBoosting, Step, flush_denormals, select_candidate,
                         stats_and_dictionary)
from ..steps import exact_step
from ...contract import ArrayLike, EvalSets, MetricSpec, PathLike
from ...groups import GroupsLike
from ...pairs import PairSpec
from ..ensemble import Ensemble
from .pair_stats import PairWeights

__all__ = ["RankBoost", "RankBoostRule", "SmoothMarginRanking", "smooth_margin_alpha"]


# ====================================================================================
# RankBoost: RB-D, RB-C, coordinate descent
# ====================================================================================
class RankBoost(CoordinateBoosting):
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
        on_unbounded: the halting policy (module docstring).
        alpha_cap: the halting policy's step cap (module docstring).
        smoothing: the halting policy's smoothing (module docstring).
        callbacks: see the module docstring.
        distributed: data-parallel training over a ``torch.distributed`` process group (see
            the module docstring): ``None`` (default: when a process group of more than one
            process is initialised), ``True``, ``False`` or a
            :class:`~torchrankboost.parallel.DistContext`; each rank passes its shard of
            whole queries. Stumps and label-induced pairs; callbacks run on rank 0 only.

    ``fit(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
    early_stopping_rounds=None, callbacks=(), pairs=None, init_scores=None, init_model=None,
    resume=None)`` returns the model
    (an ensemble of the chosen rankers, ``predict(X)``; ``init_scores`` offsets the training
    scores only; ``init_model``/``resume``: :mod:`~torchrankboost.boosting.checkpoint`);
    per-round diagnostics (``alpha``, ``eps_plus``, ``eps_minus``, ``eps_zero``, ``r``,
    ``Z``, ``feature``, ``threshold``, ``loss_before`` /
    ``loss`` = ln F̃ before / after the step, ``margin`` with ``track_margin=True``, ``l1``)
    are in ``history_``.
    """

    VARIANTS = ("rb-d", "rb-c", "coordinate")
    UNBOUNDED = ("stop", "raise", "cap", "smooth")
    _algorithm = "rankboost"
    can_continue = True

    def __init__(self, variant: str = "rb-c", *, learner: Any = None, n_rounds: int = 100,
                 pairs: PairSpec = None, allow_negative_alpha: bool = True,
                 on_unbounded: str = "stop", alpha_cap: float = 50.0, smoothing: float = 1e-6,
                 callbacks: Sequence[Any] = (), track_margin: bool = False, tol: float = 1e-12,
                 distributed: Union[None, bool, DistContext] = None):
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {self.VARIANTS}, got {variant!r}")
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap, smoothing=smoothing,
                         complement=allow_negative_alpha)
        self.variant = variant
        if not (distributed is None or isinstance(distributed, (bool, DistContext))):
            raise ValueError(f"distributed must be None, True, False or a DistContext, got "
                             f"{distributed!r}")
        self.distributed = distributed
        self.allow_negative_alpha = bool(allow_negative_alpha)
        self.track_margin = bool(track_margin)
        self.tol = float(tol)

    @flush_denormals
    def fit(self, X: ArrayLike, labels: Optional[ArrayLike] = None, groups: GroupsLike = None, *,
            eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            pairs: PairSpec = None, init_scores: Optional[ArrayLike] = None,
            init_score: Union[float, ArrayLike, None] = None,
            sample_weight: Optional[ArrayLike] = None, group_weight: Optional[ArrayLike] = None,
            eval_init_score: Optional[Sequence[Any]] = None, init_model: Any = None,
            resume: Optional[PathLike] = None) -> Ensemble:
        """The ranker contract's ``fit`` (see the class docstring); ``init_score`` (a float
        or ``(n,)``; ``init_scores`` is its older name) offsets the training scores,
        ``eval_init_score`` the evaluation sets' (one entry per set); the weights and
        ``init_model`` / ``resume`` as in :meth:`CoordinateBoosting.fit`."""
        if init_score is not None and init_scores is not None:
            raise ValueError("pass init_score or init_scores (its older name), not both")
        init_scores = init_scores if init_score is None else init_score
        return self._fit(X, labels, groups, pairs, eval_set, eval_metric,
                         early_stopping_rounds, callbacks, init_scores,
                         more=(sample_weight, group_weight, eval_init_score),
                         init_model=init_model, resume=resume)

    def _begin(self, X, labels, groups, p, init_scores):
        self.stats_, self._D = stats_and_dictionary(self.source_, labels, groups, p,
                                                    self._comm.ctx)
        if self.variant == "rb-d" and not self._D.binary:
            raise ValueError("variant='rb-d' needs binary {0,1} rankers (stumps or a 0/1 matrix)")
        self._rule = RankBoostRule(self, self.variant, signed=self.allow_negative_alpha,
                                   tol=self.tol)
        return self._zero_scores(X, init_scores)

    def _step(self, s, l1):
        w = self.stats_.weights(s)
        c, h, alpha, diag = self._rule.step(self.stats_, self._D, w, s)
        return Step(delta=alpha * h, alpha=alpha, terms=[(c, alpha)], diag=diag,
                    carry=(c, w))

    def _round_diag(self, step, s, l1):
        c, w = step.carry
        diag, alpha = step.diag, step.alpha
        diag.update(self.source_.describe(c))
        lb = float(w.log_loss)
        z = diag.get("Z", float("nan"))
        la = lb + math.log(z) if (z == z and z > 0) else float(self.stats_.log_loss(s))
        diag.update(candidate=c, alpha=alpha, loss_before=lb, loss=la, l1=l1)
        if self.track_margin:
            mu = float(self.stats_.margin(s))
            diag["margin"] = mu / l1 if l1 > 0 else float("nan")
        return diag


class RankBoostRule:
    """RankBoost's choice and step (RB-D, RB-C, coordinate descent; see the module
    docstring) for one round, used by :class:`RankBoost` and by the warm-up of
    :class:`SmoothMarginRanking`. Halts through ``algo`` (its halting policy)."""

    def __init__(self, algo: CoordinateBoosting, variant: str, *, signed: bool, tol: float):
        self.algo, self.variant, self.signed, self.tol = algo, variant, signed, tol

    def step(self, stats: Any, D: Any, w: PairWeights, s: torch.Tensor
             ) -> Tuple[int, torch.Tensor, float, Dict[str, float]]:
        """``(candidate, column h, α, diagnostics)`` at the pair weights ``w``."""
        c = self._choose(stats, D, w)
        h = D.column(c)
        diag = {}
        if D.binary:
            ep, em, e0 = (float(x) for x in stats.chosen_stats(w, h))
            r = ep - em
            diag.update(eps_plus=ep, eps_minus=em, eps_zero=e0, r=r)
        else:
            r = float(((w.U - w.L) * h).sum())
            diag.update(r=r)
        if abs(r) <= self.tol or (not self.signed and r <= 0):
            # edge zero up to rounding: converged (signed) or no improving ranker (α ≥ 0)
            self.algo._stop("converged: best edge |r| <= tol" if self.signed
                            else "no ranker with positive edge (eps_plus <= eps_minus)")
        if self.variant == "rb-c":
            alpha = self._rbc_alpha(r)
        elif D.binary:
            alpha = self._binary_alpha(ep, em, e0, r)
        else:
            alpha = self._line_alpha(stats, w, s, h, r, diag)
        if D.binary:
            diag["Z"] = ((e0 + ep * math.exp(-alpha) + em * math.exp(alpha))
                         if abs(alpha) < 700 else float("nan"))
        return c, h, float(alpha), diag

    def _choose(self, stats, D, w) -> int:
        """RB-D: the smallest ``Z = ε⁰ + 2√(ε⁺ε⁻)``; otherwise the largest (|)edge(|)."""
        valid = D.valid
        if self.variant == "rb-d":
            ep_all, em_all, e0_all = D.all_stats(stats, w)
            Z = e0_all + 2 * torch.sqrt(ep_all * em_all)
            ok = valid if self.signed else valid & (ep_all - em_all > self.tol)
            score, signed = -Z, False
        else:
            score = D.edges(stats, w)
            ok = valid if self.signed else valid & (score > self.tol)
            signed = self.signed
        if not bool(ok.any()):
            self.algo._stop("no ranker with positive edge (eps_plus <= eps_minus)")
        return select_candidate(score, ok, signed=signed)

    def _rbc_alpha(self, r: float) -> float:
        if abs(r) < 1:
            return math.atanh(r)
        d = self.algo.smoothing
        return self.algo._unbounded("perfect ranker (|r| = 1) for RB-C", r,
                                    smooth=lambda: 0.5 * math.log((1 + r + d) / (1 - r + d)))

    def _binary_alpha(self, ep: float, em: float, e0: float, r: float) -> float:
        if ep > 0 and em > 0:
            return 0.5 * (math.log(ep) - math.log(em))
        d = self.algo.smoothing
        reason = (f"eps_minus = 0 (eps_plus={ep:.3g}, eps_zero={e0:.3g})" if em <= 0
                  else f"eps_plus = 0 (eps_minus={em:.3g})")
        return self.algo._unbounded(reason, r,
                                    smooth=lambda: 0.5 * math.log((ep + d) / (em + d)))

    def _line_alpha(self, stats, w, s, h, r: float, diag: dict) -> float:
        """The exact line search of ``ln F̃`` along a real-valued ranker (``diag["Z"]``)."""
        lz0 = float(w.log_loss)
        alpha, bounded = exact_step(stats.line_function(s, h), max_alpha=self.algo.alpha_cap)
        if not bounded:
            alpha = self.algo._unbounded("loss decreases without bound along the ranker", r)
        diag["Z"] = math.exp(float(stats.log_loss(s + alpha * h)) - lz0)
        return alpha


# ====================================================================================
# Smooth margin ranking
# ====================================================================================
def smooth_margin_alpha(g: float, dp: float, dm: float, d0: float) -> float:
    """Eq. (12) in the stable rationalised form:
    ``e^α = 2(1-g)d₊ / (g d₀ + sqrt(g² d₀² + 4(1-g²) d₊ d₋))``. ``g = 0`` gives RankBoost's
    ``½ ln(d₊/d₋)``."""
    den = g * d0 + math.sqrt(g * g * d0 * d0 + 4 * (1 - g * g) * dp * dm)
    return math.log(2 * (1 - g) * dp) - math.log(den)


class SmoothMarginRanking(CoordinateBoosting):
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

    def __init__(self, *, learner: Any = None, n_rounds: int = 1000, pairs: PairSpec = None,
                 warmup: str = "coordinate", max_warmup_rounds: Optional[int] = None,
                 complement: bool = True, on_unbounded: str = "stop", alpha_cap: float = 50.0,
                 callbacks: Sequence[Any] = ()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap, complement=complement)
        if warmup not in RankBoost.VARIANTS:
            raise ValueError(f"warmup must be one of {RankBoost.VARIANTS}, got {warmup!r}")
        self.warmup = warmup
        self.max_warmup_rounds = max_warmup_rounds

    def _begin(self, X, labels, groups, p, init_scores):
        self.stats_, self._D = stats_and_dictionary(self.source_, labels, groups, p,
                                                    self._comm.ctx)
        # the warm-up is RankBoost's round (its default tol), halting through this fit
        self._warm = RankBoostRule(self, self.warmup, signed=self.complement, tol=1e-12)
        self._max_warm = (self.n_rounds if self.max_warmup_rounds is None
                          else self.max_warmup_rounds)
        self._n_warm = 0
        return self._zero_scores(X)

    def _step(self, s, l1):
        stats, D = self.stats_, self._D
        w = stats.weights(s)
        lz = float(w.log_loss)
        if lz >= 0:  # warm-up: RankBoost until G > 0
            if self._n_warm >= self._max_warm:
                self._halt("warm-up did not reach G > 0")
            self._n_warm += 1
            c, h, alpha, diag = self._warm.step(stats, D, w, s)
            diag["phase"] = "warmup"
            diag["alpha"] = alpha
            g = -lz / l1 if l1 > 0 else float("nan")
            return Step(delta=alpha * h, alpha=alpha, terms=[(c, alpha)], diag=diag,
                        carry=(c, lz, g))
        g = -lz / l1
        c, h, alpha, flip, diag = self._smooth_step(stats, D, w, s, g)
        diag["alpha"] = alpha
        diag["alpha_signed"] = -alpha if flip else alpha
        diag["complemented"] = flip
        if flip:  # a positive step on the complement 1 - h: score shift alpha - alpha*h
            return Step(delta=alpha * (1 - h), alpha=alpha, terms=[(c, -alpha)],
                        intercept=alpha, diag=diag, carry=(c, lz, g))
        return Step(delta=alpha * h, alpha=alpha, terms=[(c, alpha)], diag=diag,
                    carry=(c, lz, g))

    def _round_diag(self, step, s, l1):
        c, lz, g = step.carry
        diag = step.diag
        lz_new = float(self.stats_.log_loss(s))
        diag.update(self.source_.describe(c))
        diag.update(candidate=c, loss_before=lz, loss=lz_new, g=g, l1=l1,
                    smooth_margin=-lz_new / l1 if l1 > 0 else float("nan"),
                    margin=float(self.stats_.margin(s)) / l1 if l1 > 0 else float("nan"))
        diag["g_next"] = diag["smooth_margin"]
        return diag

    def _smooth_step(self, stats, D, w, s, g):
        """One smooth-phase step (eq. (12) for binary rankers, the root of eq. (11) for real
        ones): ``(candidate, column, α, complemented, diagnostics)``; halts by the policy."""
        r_all = D.edges(stats, w)
        c = select_candidate(r_all, D.valid, signed=self.complement)
        h = D.column(c)
        diag = {"phase": "smooth"}
        if D.binary:
            alpha, flip = self._smooth_binary(stats, w, h, g, diag)
        else:
            alpha, flip = self._smooth_real(stats, w, s, h, g, diag)
        return c, h, alpha, flip, diag

    def _smooth_binary(self, stats, w, h, g, diag):
        """Eq. (12) (``(α, complemented)``)."""
        ep, em, e0 = (float(x) for x in stats.chosen_stats(w, h))
        flip = False
        if ep - em < 0 and self.complement:
            ep, em, flip = em, ep, True
        r = ep - em
        diag.update(eps_plus=ep, eps_minus=em, eps_zero=e0, r=r)
        if r <= g:
            self._halt(f"best edge r={r:.6g} <= g={g:.6g}: no ascent step")
        if em <= 0 and e0 <= 0:
            alpha = self._unbounded("perfect ranker (d_minus = d_zero = 0)", 1.0)
        else:
            alpha = smooth_margin_alpha(g, ep, em, e0)
        diag["theorem7_condition"] = bool(0 <= g < r < 1 and e0 < (2 / 3) * (1 - r) * (1 - r * r))
        return alpha, flip

    def _smooth_real(self, stats, w, s, h, g, diag):
        """The root of eq. (11) along a real-valued ranker (``(α, complemented)``)."""
        r = float(((w.U - w.L) * h).sum())
        flip = False
        if r < 0 and self.complement:
            flip, r = True, -r
        diag.update(r=r)
        if r <= g:
            self._halt(f"best edge r={r:.6g} <= g={g:.6g}: no ascent step")
        line = stats.line_function(s, 1 - h if flip else h)

        def phi(a, line=line):  # eq. (11): the root of d/dα ln F̃ + g
            v, d, *curv = line(a)
            return (v + g * a, d + g, *curv)

        alpha, bounded = exact_step(phi, max_alpha=self.alpha_cap)
        if not bounded:
            alpha = self._unbounded("eq. (11) has no finite root", 1.0)
        return alpha, flip

