r"""The papers' algorithms, exactly as published: the RankBoost family over one
coordinate-boosting loop, QBRank / GBT over the stagewise driver, and the RankSVM baseline.
This package's ``__init__`` is their one public face (``torchrankboost.boosting`` and
``torchrankboost`` re-export the same names); every registered algorithm but the generic
``Booster`` lives here.

* :class:`RankBoost` (:mod:`.rankboost`) — Freund et al.'s RankBoost in three variants:
  ``"rb-d"`` (smallest normaliser ``Z``, step ``α = ½ ln(ε⁺/ε⁻)``), ``"rb-c"`` (the continuous
  bound of Connamacher et al. 2019, ``α = atanh r``) and ``"coordinate"`` (coordinate descent,
  Rudin & Schapire 2009 Fig. 1); data-parallel over several processes.
* :class:`RankBoostPlus` (:mod:`.rankboost_plus`) — Connamacher et al.'s RankBoost+ (Ê2 with the
  cosh tie cost, accumulated per-ranker weights α′, the efficient Algorithm 2 with the
  pair-space independent set and pruning). Pairs are materialised here (the tie factor is
  pair-specific).
* :class:`AdaBoost` (:mod:`.adaboost`) — AdaBoost on ±1 stumps with the constant weak
  classifier, tracking ``F₊``, ``F₋`` and the F-skew (Rudin & Schapire §5);
  :func:`with_zero_skew_intercept` applies Corollary 13 to any model.
* :class:`SmoothMarginRanking` (:mod:`.rankboost`) — RankBoost warm-up until ``G̃ > 0`` then the
  eq. (12) step (stable rationalised form), reporting the margin ``μ`` and the smooth margin
  ``G̃``.
* :class:`PNormPush` (:mod:`.pnorm_push`) — Rudin's p-norm push, coordinate descent with the
  closed-form step for binary rankers (C12) and a convex line search otherwise, O(n) per
  candidate through the factorisation ``F_p = (Σ_i e^{-s_i})^p Σ_k e^{p t_k}``.
* :class:`QBRank` and :class:`GBT` (:mod:`.qbrank`) — Zheng et al. 2007, configurations of the
  stagewise driver :class:`~torchrankboost.boosting.Booster` (not of the coordinate loop).
* :class:`RankSVM` (:mod:`.ranksvm`) — Herbrich et al. 2000 / Joachims 2002, the linear
  pairwise-hinge baseline, returning a :class:`LinearRanker` (not an ensemble).

Shared conventions of the RankBoost family (the coordinate loop)
----------------------------------------------------------------
* Scores are accumulated in float64 in round order; ``‖λ‖₁ = Σ_t |α_t|`` (a negative step on
  ``h`` is a positive step on the complement ``1 - h`` plus a constant, which no pair sees).
* Pair statistics for label-induced pairs come from sorted prefix sums / bucket sums
  (:mod:`.pair_stats`), never from materialised pair weights; explicit pair lists are O(#pairs).
* Every algorithm is a strategy over the one coordinate-boosting loop of :mod:`.coordinate` (how
  it scores the candidates, its step, its halts): a new coordinate method subclasses
  :class:`CoordinateBoosting`. The finite dictionaries of candidate weak rankers are in
  :mod:`.dictionaries`, the assembly of the rounds into a plain
  :class:`~torchrankboost.boosting.Ensemble` in :mod:`.ensemble_builder`.
* **Halting policy** (``on_unbounded``, one policy for all) when a step is undefined or infinite
  — RB-D with ``ε⁻ = 0`` (or ``ε⁺ = 0``), a perfect ranker for RB-C (``r = ±1``), p-norm push
  with a separating ranker, smooth margin ranking with ``r ≤ g``:

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
* Every class follows the ranker contract (:mod:`torchrankboost.contract`): ``fit(X, labels,
  groups=None, *, eval_set=None, eval_metric="ndcg@10", early_stopping_rounds=None,
  callbacks=(), pairs=None)`` (``X`` a tensor, numpy array or scipy matrix; ``groups`` a
  ``Groups``, query ids or ``None``) returns an :class:`~torchrankboost.boosting.Ensemble`. The
  evaluation sets are scored incrementally (each round adds its weak rankers' outputs times
  their weights), early stopping cuts the model back to the best round, and ``"loss"`` is the
  algorithm's objective on the set. ``history_`` holds one
  :class:`~torchrankboost.contract.RoundRecord` per round: ``loss`` (the training objective
  after the step: ln F̃, ln F, ln F_p or ln Ê2), ``step`` (α) and ``weight`` (the signed
  ensemble weight); ``extra`` (read as ``record["alpha"]``) holds ``alpha``, ``loss_before`` and
  the algorithm's own statistics.
"""

from .coordinate import CoordinateBoosting  # noqa: F401
from .dictionaries import MatrixRankers  # noqa: F401
from .rankboost import RankBoost, RankBoostRule, SmoothMarginRanking  # noqa: F401
from .adaboost import AdaBoost, with_zero_skew_intercept  # noqa: F401
from .pnorm_push import PNormPush  # noqa: F401
from .rankboost_plus import RankBoostPlus  # noqa: F401
from .qbrank import GBT, QBRank  # noqa: F401
from .ranksvm import LinearRanker, RankSVM  # noqa: F401

__all__ = [
    "AdaBoost", "CoordinateBoosting", "GBT", "LinearRanker", "MatrixRankers", "PNormPush",
    "QBRank", "RankBoost", "RankBoostPlus", "RankBoostRule", "RankSVM", "SmoothMarginRanking",
    "with_zero_skew_intercept",
]
