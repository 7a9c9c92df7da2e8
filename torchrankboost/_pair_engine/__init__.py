"""The private pair engine: every pairwise computation of the library, without pairs.

One set of kernels serves the pairwise losses (``torchrankboost.losses``), the metrics that
count pairs or levels (``torchrankboost.metrics``) and the RankBoost-family paper algorithms
(``torchrankboost.boosting.papers`` through its ``pair_stats``):

* :mod:`.segment` — the segment log-sum-exp (NaN-free gradients on empty / all ``-inf``
  segments) and its exclusive scans, log-space helpers.
* :mod:`.levels` — labels to per-query label levels, ``(query, level)`` buckets and cells,
  pair counts, and materialised label pairs when an algorithm needs them.
* :mod:`.exponential` — the exponential pair family ``F_p`` (RankBoost's loss at ``p = 1``,
  the p-norm push) per query and pooled: values, gradients, Hessian diagonals.
* :mod:`.sorted_pairs` — sort + prefix-sum kernels for hinge-type pairs (dominance sums,
  hinge / squared hinge terms, pair degrees).
* :mod:`.hinge` — the score-independent setup of hinge-type losses built on those kernels.
* :mod:`.margin` — the ranking margin per query.
* :mod:`.lambdarank` — LambdaRank's |ΔNDCG| weights times the exponential pair function over
  all pairs, by (label level × rank) dominance sums (``LambdaRankExpLoss``).

Nothing here is public API; shapes are flat ragged tensors described by a
:class:`~torchrankboost.groups.Groups`.
"""
