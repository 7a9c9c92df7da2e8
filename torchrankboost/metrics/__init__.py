"""Ranking metrics over ragged query groups, vectorised (no Python loop over queries).

Every metric takes a flat 1-D ``scores`` tensor, a flat 1-D ``labels`` tensor of the same
length and optional :class:`~torchrankboost.groups.Groups` (``None`` = one query holding
every document), and works on whatever device the scores live on. The recipe is the same
everywhere: **one segmented sort by score** (descending, stable; see ``order_by_score``: a row-wise
``topk``/sort of a temporary padded matrix while padding stays within 4n, else
:meth:`Groups.argsort`), then positions, tie blocks, prefix sums
(:meth:`Groups.segment_cumsum`) and segment reductions. Pairwise metrics over label-induced
pairs never materialise the pairs: up to 32 distinct labels they take one prefix-sum pass
per label level (the only Python loop besides ``log2(max query size)`` merge stages used for
real-valued labels); only :func:`precision_at_percent` needs the pairs themselves (see its
docstring).

Conventions (each is a named argument with a documented default):

* **Score ties** in list metrics (DCG/NDCG, MAP, P@k, RR): the ``ties`` argument.
  ``"stable"`` (default): documents with equal scores keep their input order (stable
  descending sort), exactly as LightGBM's ``ndcg``/``map`` evaluation
  (``std::stable_sort`` by score, descending); deterministic, but it depends on the document
  order inside a query. ``"average"``: the expectation over all orders of the tied
  documents (McSherry & Najork, 2008), which does not depend on the input order; computed in
  closed form per tie run, in the same O(n log n).
* **Ties in pairwise metrics** (AUC, R̂1/R̂2, precision at K%): the ``ties`` argument.
* **Queries with nothing to measure**: list metrics return ``empty`` for such a query (NDCG,
  MAP: no relevant document; RR: no relevant document); AUC and the pair error have no value
  for a query without a positive/negative (without a crucial pair): ``reduction="none"``
  gives NaN there and ``reduction="mean"`` averages over the other queries only.
* **Reductions**: ``"mean"`` is always the mean over queries (every query weighted equally),
  ``"none"`` the per-query ``(G,)`` tensor; some metrics add their natural pooled form.

* **Padded input**: every metric that takes ``groups`` also takes padded ``(B, L)`` scores
  and labels with a boolean ``mask`` (``True`` = a real document) instead, with the same
  result as the flat tensors and one query per row.
* **Labels**: graded relevance (DCG/NDCG gains, label-induced graded pairs) needs labels
  ``>= 0``; a negative label is refused (``-1`` is allRank's padding: pass ``mask=``).
  Metrics with a ``threshold`` (AUC, MAP, P@k, RR, the top-of-list measures, bipartite
  pairs) read any label ``<= threshold`` as non-relevant, negative ones included.

Results are float64 tensors (scalars for reductions) on the scores' device.

Bad input raises ``ValueError`` naming the problem: lengths that disagree, groups that do
not cover the documents, NaN/inf scores or labels, ``k < 1``, unknown options.

Layout: :mod:`.pairwise` (AUC, ROC, pair error, precision at K%), :mod:`.graded`
(DCG/NDCG, MAP, P@k, RR), :mod:`.top` (top-of-list counts), :mod:`.margin` (ranking
margin); shared plumbing in ``_common`` (checks, padding, reductions) and ``_sorting`` (the
segmented sort and its tie blocks).
"""

from ._common import F64  # noqa: F401
from .graded import (TIES, dcg_at_k, mean_average_precision, ndcg_at_k,  # noqa: F401
                     precision_at_k, reciprocal_rank)
from .margin import ranking_margin
from .pairwise import auc, pair_error, precision_at_percent, roc_curve
from .top import positives_above_first_negative, positives_below_top_negative

__all__ = [
    "auc",
    "roc_curve",
    "pair_error",
    "dcg_at_k",
    "ndcg_at_k",
    "mean_average_precision",
    "precision_at_k",
    "reciprocal_rank",
    "positives_above_first_negative",
    "positives_below_top_negative",
    "precision_at_percent",
    "ranking_margin",
]
