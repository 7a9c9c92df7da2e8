"""Ranking metrics over ragged query groups, vectorised (no Python loop over queries).

Every metric takes a flat 1-D ``scores`` tensor, a flat 1-D ``labels`` tensor of the same
length and optional :class:`~torchrankboost.groups.Groups` (``None`` = one query holding
every document), and works on whatever device the scores live on. The recipe is the same
everywhere: **one segmented sort by score** (descending, stable; see ``_order``: a row-wise
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
"""

from __future__ import annotations

import functools
import math
from numbers import Integral, Real
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ._pair_engine.levels import dense_levels, label_levels, label_pair_chunks
from ._pair_engine.margin import explicit_margin, label_margin
from .groups import Groups, as_groups, as_vector
from .pairs import Bipartite, ExplicitPairs, Graded, resolve_pairs

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

F64 = torch.float64


# ----------------------------------------------------------------------------- helpers
def _as_1d(x, name: str, device=None) -> Tensor:
    return as_vector(x, name, device=device,
                     hint=" (flat, with groups); padded (B, L) input needs mask=...")


def _unpad(scores, labels, groups, mask) -> Tuple[Tensor, Tensor, Groups]:
    """Padded ``(B, L)`` scores and labels with a boolean ``mask`` → flat tensors and the
    ``Groups`` of the rows (one query per row, empty rows included)."""
    if groups is not None:
        raise ValueError("pass either groups (flat input) or mask (padded input), not both")
    mask = torch.as_tensor(mask)
    scores = torch.as_tensor(scores)
    labels = torch.as_tensor(labels, device=scores.device)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a boolean tensor, got {mask.dtype}")
    if scores.dim() != 2 or mask.shape != scores.shape or labels.shape != scores.shape:
        raise ValueError(f"padded input: scores, labels and mask must share one (B, L) shape; "
                         f"got {tuple(scores.shape)}, {tuple(labels.shape)} and "
                         f"{tuple(mask.shape)}")
    mask = mask.to(scores.device)
    return scores[mask], labels[mask], Groups.from_padded(mask).to(scores.device)


def _accepts_padding(fn):
    """Let a metric take padded ``(B, L)`` scores/labels with ``mask=`` (same result as the
    flat tensors with the row ``Groups``)."""
    @functools.wraps(fn)
    def metric(scores, labels, groups=None, *, mask=None, **kwargs):
        if mask is not None:
            scores, labels, groups = _unpad(scores, labels, groups, mask)
        return fn(scores, labels, groups, **kwargs)

    return metric


def _check_grades(y: Tensor, what: str) -> None:
    """Graded relevance (gains, label-induced pairs) needs labels >= 0; a negative label is
    most often padding (allRank pads with -1)."""
    if y.numel() and float(y.min()) < 0:
        raise ValueError(
            f"{what} needs non-negative relevance labels, got {float(y.min()):g}; a label of "
            f"-1 usually marks padding: pass the padded (B, L) tensors with mask=... (or drop "
            f"the padded slots) instead; real-valued grades can be shifted to >= 0 (only their "
            f"order counts for pairs)")


def _prepare(scores, labels, groups) -> Tuple[Tensor, Tensor, Groups]:
    """Validate and return ``(scores, labels as float64, groups)`` on the scores' device."""
    s = _as_1d(scores, "scores")
    y = _as_1d(labels, "labels", device=s.device)
    if s.shape[0] != y.shape[0]:
        raise ValueError(
            f"scores and labels disagree in length: scores has {s.shape[0]} documents, "
            f"labels has {y.shape[0]}"
        )
    g = as_groups(groups, s.shape[0], device=s.device)
    return s, y.to(F64), g


def _check_k(k, *, allow_none: bool = True) -> Optional[int]:
    if k is None:
        if allow_none:
            return None
        raise ValueError("k must be a positive integer, got None")
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise ValueError(f"k must be a positive integer or None, got {k!r}")
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return int(k)


def _check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _tie_weight(ties: str, choices=("error", "half")) -> float:
    _check_choice(ties, "ties", choices)
    return {"error": 0.0, "half": 0.5, "correct": 1.0}[ties]


def _reduce(per_query: Tensor, reduction: str, *, valid: Optional[Tensor] = None) -> Tensor:
    """``"none"`` → the (G,) tensor; ``"mean"`` → mean over ``valid`` queries (all when
    ``valid`` is None; NaN when no query is valid)."""
    _check_choice(reduction, "reduction", ("mean", "none"))
    if reduction == "none":
        return per_query
    if valid is None:
        if per_query.numel() == 0:
            return per_query.new_tensor(float("nan"))
        return per_query.mean()
    cnt = valid.sum()
    tot = torch.where(valid, per_query, torch.zeros_like(per_query)).sum()
    return torch.where(cnt > 0, tot / cnt.clamp_min(1), tot.new_tensor(float("nan")))


_PAD_FACTOR = 4  # internal padded sorts only while G * max_size <= 4 n (or _PAD_MIN)
_PAD_MIN = 1 << 20
_SORT32 = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16,
           torch.int8, torch.uint8)


def _order(s: Tensor, g: Groups, k: Optional[int] = None) -> Tuple[Tensor, Groups]:
    """Each query's documents by score descending, ties in input order, truncated to
    the first ``k``: returns ``(perm, gk)`` with ``s[perm]`` laid out by ``gk`` (the groups
    of sizes ``min(n_q, k)``; ``gk`` is ``g`` itself when nothing is truncated).

    Kernels (same result, chosen by shape): while the padded size ``G · max_size`` stays
    within ``_PAD_FACTOR · n`` a temporary ``(G, max_size)`` matrix is sorted row-wise
    (``torch.topk`` on unique int64 keys ``bits(score) << b | (L-1-position)`` when only the
    top ``k`` is needed and scores have ≤ 32 bits, else a stable row sort); otherwise one
    global segmented sort (:meth:`Groups.argsort`). Memory stays O(n) either way.
    """
    n = s.shape[0]
    G, L = g.num_groups, g.max_size
    kk = L if k is None else min(k, L)
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=s.device), g
    gk = g if kk >= L else Groups.from_sizes(g.sizes.clamp(max=kk))
    if G * L <= max(_PAD_FACTOR * n, _PAD_MIN):
        gi, pos = g.group_index, g.position
        if kk < L and s.dtype in _SORT32 and L < (1 << 30):
            from .groups import _sortable_bits32

            shift = max(1, (L - 1).bit_length())
            key = (_sortable_bits32(s) << shift) + (L - 1 - pos)
            P = torch.full((G, L), -1, dtype=torch.long, device=s.device)
            P[gi, pos] = key
            idx = torch.topk(P, kk, dim=1)[1]
        else:
            low = float("-inf") if s.dtype.is_floating_point else torch.iinfo(s.dtype).min
            P = torch.full((G, L), low, dtype=s.dtype, device=s.device)
            P[gi, pos] = s
            idx = torch.sort(P, dim=1, descending=True, stable=True)[1][:, :kk]
        # real documents fill the first min(n_q, k) cells of each row (pads sort last)
        ggi = gk.group_index
        perm = idx.reshape(-1)[ggi * kk + gk.position] + g.offsets[ggi]
    else:
        perm = g.argsort(s, descending=True)
        if kk < L:
            perm = perm[g.position < kk]
    return perm, gk


class _Sorted:
    """One segmented sort by score (descending, stable) and its tie blocks."""

    def __init__(self, s: Tensor, groups: Groups):
        self.groups = groups
        self.perm, _ = _order(s, groups)
        self.s = s[self.perm]
        self.pos = groups.position  # position inside the query after sorting
        self.gi = groups.group_index
        n = self.s.shape[0]
        start = torch.ones(n, dtype=torch.bool, device=s.device)
        if n > 1:
            start[1:] = (self.s[1:] != self.s[:-1]) | (self.pos[1:] == 0)
        self.block_start = start
        self.block_id = torch.cumsum(start.to(torch.long), 0) - 1
        self.block_first = torch.nonzero(start).flatten()
        self.num_blocks = int(self.block_first.numel())

    def block_sum(self, x: Tensor) -> Tensor:
        """Per-document sum of ``x`` (sorted order) over its tie block."""
        b = x.new_zeros(self.num_blocks).index_add_(0, self.block_id, x)
        return b[self.block_id]

    def above(self, x: Tensor) -> Tensor:
        """Per-document sum of ``x`` (sorted order) over documents of the same query with a
        strictly higher score."""
        c = self.groups.segment_cumsum(x, exclusive=True)
        return c[self.block_first][self.block_id]


def _discount_table(L: int, device) -> Tensor:
    """``D[m] = Σ_{r<m} 1/log2(r+2)`` for ``m = 0..L``."""
    d = torch.zeros(L + 1, dtype=F64, device=device)
    if L:
        d[1:] = torch.cumsum(_discount(torch.arange(L, device=device)), 0)
    return d


def _ideal_dcg(gains: Tensor, y: Tensor, g: Groups, k: Optional[int]) -> Tensor:
    """Per-query DCG@k of the documents sorted by gain.

    For labels that are small non-negative integers (≤ 64 values) no sort is needed: count
    the documents of each (query, label) cell with one ``bincount``, order the label values
    by gain, and each cell fills the ideal positions ``[start, end)`` worth
    ``gain · (D[min(end, k)] - D[min(start, k)])`` with ``D`` the prefix sums of the
    discounts. Other labels: one segmented sort by gain.
    """
    L = g.max_size
    kk = L if k is None else min(k, L)
    n, G = y.numel(), g.num_groups
    if n:
        lo, hi = torch.aminmax(y)
        V = int(hi) + 1
        small = (float(lo) >= 0 and V <= 64 and G * V <= 4 * n + (1 << 20)
                 and torch.equal(y, torch.floor(y)))
    else:
        small = False
    if small:
        yl = y.long()
        counts = torch.bincount(g.group_index * V + yl, minlength=G * V).view(G, V)
        lab_gain = gains.new_zeros(V).scatter_(0, yl, gains)  # one gain per label value
        order = torch.argsort(lab_gain, descending=True, stable=True)
        end = torch.cumsum(counts[:, order], 1)
        start = end - counts[:, order]
        D = _discount_table(kk, gains.device)
        part = D[end.clamp(max=kk)] - D[start.clamp(max=kk)]
        return part @ lab_gain[order]
    ideal = gains[g.argsort(gains, descending=True)]
    in_top = g.position < kk
    return g.segment_sum(torch.where(in_top, ideal * _discount(g.position), torch.zeros_like(ideal)))


_EXP_GAIN_SAFE = 512.0  # 2^512 · any list length stays far below float64's 1.8e308


def _gain(gain, y: Tensor, groups: Optional[Groups] = None) -> Tensor:
    """Gain of each label (float64). With ``groups`` (for NDCG, a ratio within each query)
    the exponential gain of large labels is scaled per query by ``2^-max label``:
    ``2^(l - m_q) - 2^-m_q`` — the same NDCG, no overflow. Without ``groups`` (plain DCG) a
    gain beyond float64 is a ``ValueError``, never an inf or a NaN downstream."""
    if isinstance(gain, str):
        _check_choice(gain, "gain", ("exp", "linear"))
        if gain == "linear":
            return y
        top = float(y.max()) if y.numel() else 0.0
        if top <= _EXP_GAIN_SAFE:
            return torch.exp2(y) - 1.0
        if groups is None:
            raise ValueError(
                f"label {top:g} gives the exponential gain 2^{top:g} - 1, beyond float64 "
                f"(labels above 1023 overflow): use gain='linear', a gain table, or NDCG "
                f"(normalised per query)")
        m = groups.segment_max(y).clamp_min(0.0)[groups.group_index]
        return torch.exp2(y - m) - torch.exp2(-m)
    try:
        table = torch.as_tensor(gain, dtype=F64, device=y.device)
    except Exception:
        raise ValueError(
            f"gain must be 'exp', 'linear' or a 1-D table indexed by integer label; got {gain!r}"
        ) from None
    if table.dim() != 1 or table.numel() == 0:
        raise ValueError("gain table must be a non-empty 1-D sequence indexed by label")
    if not bool(torch.isfinite(table).all()):
        raise ValueError("gain table must hold finite values")
    if y.numel():
        if not torch.equal(y, y.round()):
            raise ValueError("labels must be integers to index the gain table")
        lo, hi = int(y.min()), int(y.max())
        if lo < 0 or hi >= table.numel():
            raise ValueError(
                f"labels must lie in [0, {table.numel()}) to index the gain table; got "
                f"range [{lo}, {hi}]"
            )
    return table[y.long()]


def _discount(pos: Tensor) -> Tensor:
    return 1.0 / torch.log2(pos.to(F64) + 2.0)


# ----------------------------------------------------------------------------- AUC / ROC
@_accepts_padding
def auc(scores, labels, groups: Optional[Groups] = None, *, threshold: float = 0.0,
        ties: str = "half", reduction: str = "mean") -> Tensor:
    r"""Area under the ROC curve, per query (or globally with ``groups=None``).

    .. math::
        \mathrm{AUC}_q = \frac{1}{n_+ n_-}\sum_{i\in +}\sum_{j\in -}
            \big(\mathbf 1[s_i > s_j] + w\,\mathbf 1[s_i = s_j]\big)

    Positives are documents with ``label > threshold``. Computed from ranks (one sort, tie
    blocks and counts), never from pairs: O(n log n) time, O(n) memory.

    Args:
        scores: ``(n,)`` scores. labels: ``(n,)`` labels. groups: query groups or ``None``.
        threshold: positives are ``label > threshold``.
        ties: ``"half"`` (default; tied positive/negative pairs count ½ — Mann–Whitney,
            sklearn's ``roc_auc_score``), ``"error"`` (ties count as misranked, the
            Rudin–Schapire convention, AUC_>) or ``"correct"`` (AUC_≥).
        reduction: ``"mean"`` (mean over the queries that have at least one positive and
            one negative; the others are excluded, NaN when none qualifies) or ``"none"``
            (``(G,)``, NaN for excluded queries).
    """
    s, y, g = _prepare(scores, labels, groups)
    w = _tie_weight(ties, ("half", "error", "correct"))
    st = _Sorted(s, g)
    pos = (y[st.perm] > threshold).to(F64)
    neg = 1.0 - pos
    n_pos = g.segment_sum(pos)
    n_neg = g.segment_sum(neg)
    neg_tied = st.block_sum(neg)
    neg_above = st.above(neg)
    neg_below = n_neg[st.gi] - neg_above - neg_tied
    correct = g.segment_sum(pos * (neg_below + w * neg_tied))
    valid = (n_pos > 0) & (n_neg > 0)
    per_q = torch.where(valid, correct / (n_pos * n_neg).clamp_min(1.0),
                        correct.new_tensor(float("nan")))
    return _reduce(per_q, reduction, valid=valid)


def roc_curve(scores, labels, *, threshold: float = 0.0) -> Tuple[Tensor, Tensor, Tensor]:
    """ROC curve over all documents: ``(fpr, tpr, thresholds)`` like
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``.

    ``thresholds`` are the distinct scores in decreasing order preceded by ``+inf``; point
    ``i`` classifies ``score >= thresholds[i]`` as positive. The first point is ``(0, 0)``.
    Tied positives and negatives move both rates at once (a diagonal segment). Positives
    are ``label > threshold``. With no negatives (positives) ``fpr`` (``tpr``) is NaN, as in
    sklearn.
    """
    s, y, g = _prepare(scores, labels, None)
    st = _Sorted(s, g)
    pos = (y[st.perm] > threshold).to(F64)
    tp = torch.cumsum(pos, 0)
    fp = torch.cumsum(1.0 - pos, 0)
    n = s.shape[0]
    last = torch.ones(n, dtype=torch.bool, device=s.device)
    if n > 1:
        last[:-1] = st.s[1:] != st.s[:-1]
    zero = tp.new_zeros(1)
    tp = torch.cat([zero, tp[last]])
    fp = torch.cat([zero, fp[last]])
    thr = torch.cat([st.s.new_full((1,), float("inf")), st.s[last]])
    return fp / fp[-1], tp / tp[-1], thr


# ----------------------------------------------------------------------------- pair errors
_MANY_LEVELS = 32  # above this many distinct labels, counting switches to merge passes


def _label_pair_counts(st: _Sorted, lev: Tensor, K: int):
    """Per-document counts over label-induced pairs where the document is the preferred
    one: (#lower-labelled docs scored strictly above, #tied, #lower-labelled docs), from
    the label levels ``lev`` (``(n,)`` in ``[0, K)``, the pair engine's) in sorted order.

    Up to ``_MANY_LEVELS`` distinct labels: one prefix-sum pass per label level, O(K·n).
    More levels (e.g. real-valued labels): bottom-up merge counting, O(n log n · log L)."""
    g = st.groups
    if K > _MANY_LEVELS:
        return _label_pair_counts_many(st, lev, K)
    above = torch.zeros(lev.shape, dtype=F64, device=lev.device)
    tied = torch.zeros_like(above)
    lower = torch.zeros_like(above)
    for v in range(1, K):  # a loop over label levels, not queries
        low = (lev < v).to(F64)
        at = lev == v
        above = torch.where(at, st.above(low), above)
        tied = torch.where(at, st.block_sum(low), tied)
        lower = torch.where(at, g.segment_sum(low)[st.gi], lower)
    return above, tied, lower


def _count_preceding_smaller(r: Tensor, g: Groups, R: int) -> Tensor:
    """For each element, the number of earlier elements of its query with a strictly
    smaller integer rank ``r`` (in ``[0, R)``). Bottom-up merge counting: at stage ``w``
    every block of ``2w`` positions counts, for its right half, the left-half elements
    with smaller rank (one sort by (block, rank, right-before-left)); each pair of
    positions meets in exactly one stage. O(n log n) per stage, ``ceil(log2 L)`` stages."""
    n = r.numel()
    out = torch.zeros(n, dtype=torch.long, device=r.device)
    pos = g.position
    qstart = g.offsets[:-1][g.group_index]
    w = 1
    while w < g.max_size:
        bstart = qstart + (pos // (2 * w)) * (2 * w)  # a unique id per (query, block)
        right = ((pos // w) % 2) == 1
        key = (bstart * (2 * R) + r * 2) + (~right).long()
        perm = torch.argsort(key)
        left_s = (~right[perm]).long()
        cex = torch.cumsum(left_s, 0) - left_s
        b_s = bstart[perm]
        seg_start = torch.ones(n, dtype=torch.bool, device=r.device)
        seg_start[1:] = b_s[1:] != b_s[:-1]
        seg_id = torch.cumsum(seg_start.long(), 0) - 1
        cnt = cex - cex[seg_start][seg_id]
        out[perm] += torch.where(right[perm], cnt, torch.zeros_like(cnt))
        w *= 2
    return out


def _label_pair_counts_many(st: _Sorted, rank: Tensor, R: int):
    g = st.groups
    # order 1: score desc, then label desc inside a tie block -> earlier & smaller label
    # means strictly higher score; order 2: label asc inside a tie block -> higher or tied
    counts = []
    for inner in (R - 1 - rank, rank):
        perm = torch.argsort(st.block_id * R + inner, stable=True)
        c = torch.empty_like(rank)
        c[perm] = _count_preceding_smaller(rank[perm], g, R)
        counts.append(c.to(F64))
    above, above_or_tied = counts
    # lower: position of the first document of the same label in (query, label) order
    perm = torch.argsort(st.gi * R + rank)
    key_s = (st.gi * R + rank)[perm]
    run_start = torch.ones_like(key_s, dtype=torch.bool)
    run_start[1:] = key_s[1:] != key_s[:-1]
    run_id = torch.cumsum(run_start.long(), 0) - 1
    pos_sorted = g.position  # (query, label) order keeps the query layout
    lower = torch.empty(rank.shape, dtype=F64, device=rank.device)
    lower[perm] = pos_sorted[run_start][run_id].to(F64)
    return above, above_or_tied - above, lower


@_accepts_padding
def pair_error(scores, labels, groups: Optional[Groups] = None, *, pairs=None,
               ties: str = "error", reduction: str = "pooled") -> Tensor:
    r"""Weighted fraction of misordered crucial pairs: R̂1 (``ties="error"``) and R̂2
    (``ties="half"``) of RankBoost+ (Connamacher et al. 2019, eqs. 3–4).

    .. math::
        \hat R = \frac{\sum_{(h,l)} w_{hl}\,\big(\mathbf 1[s_h < s_l] + t\,\mathbf 1[s_h = s_l]\big)}
                      {\sum_{(h,l)} w_{hl}},\qquad t = 1\ (\hat R_1),\ \tfrac12\ (\hat R_2)

    Args:
        pairs: the crucial pairs — ``"graded"``/``Graded()`` (default; every pair of a
            query with different labels, higher preferred), ``"bipartite"``/
            ``Bipartite(threshold)`` or ``ExplicitPairs(hi, lo[, weight])``. Label-induced
            pairs are counted in O(K·n + n log n) (K distinct labels) without materialising
            them; explicit pairs cost O(#pairs).
        ties: ``"error"`` (R̂1, default) or ``"half"`` (R̂2).
        reduction: ``"pooled"`` (default; the paper's definition: one fraction over all
            crucial pairs of all queries, so queries with more pairs weigh more; NaN when
            there is no pair), ``"sum"`` (weighted count of misordered pairs), ``"mean"``
            (mean of the per-query fractions over queries with at least one pair) or
            ``"none"`` (per-query fractions ``(G,)``, NaN for queries without pairs).
    """
    s, y, g = _prepare(scores, labels, groups)
    t = {"error": 1.0, "half": 0.5}[_check_choice(ties, "ties", ("error", "half"))]
    _check_choice(reduction, "reduction", ("pooled", "sum", "mean", "none"))
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        _check_grades(y, "pair_error with graded pairs")
    if isinstance(spec, ExplicitPairs):
        p = spec.validate(g)
        s64 = s.to(F64)
        d = s64[p.hi] - s64[p.lo]
        w = torch.ones_like(d) if p.weight is None else p.weight.to(device=d.device, dtype=F64)
        bad = w * ((d < 0).to(F64) + t * (d == 0).to(F64))
        gp = g.group_index[p.hi]
        err = d.new_zeros(g.num_groups).index_add_(0, gp, bad)
        tot = d.new_zeros(g.num_groups).index_add_(0, gp, w)
    else:
        lev, K, _ = label_levels(y, g, spec)
        st = _Sorted(s, g)
        above, tied, lower = _label_pair_counts(st, lev[st.perm], K)
        err = g.segment_sum(above + t * tied)
        tot = g.segment_sum(lower)
    if reduction == "sum":
        return err.sum()
    if reduction == "pooled":
        T = tot.sum()
        return torch.where(T > 0, err.sum() / torch.where(T > 0, T, torch.ones_like(T)),
                           T.new_tensor(float("nan")))
    valid = tot > 0
    per_q = torch.where(valid, err / torch.where(valid, tot, torch.ones_like(tot)),
                        tot.new_tensor(float("nan")))
    return _reduce(per_q, reduction, valid=valid)


# ----------------------------------------------------------------------------- DCG family
TIES = ("stable", "average")


def _list_common(scores, labels, groups, k, ties="stable"):
    s, y, g = _prepare(scores, labels, groups)
    k = _check_k(k)
    if _check_choice(ties, "ties", TIES) == "average":
        return s, y, g, k, None, _TieRuns(s, g, k)
    perm, gk = _order(s, g, k)  # the top min(k, n_q) documents of each query, in order
    return s, y, g, k, perm, gk


class _TieRuns:
    r"""Documents sorted by score with their tie runs, for ``ties="average"``.

    A run of ``m`` tied documents starting at position ``a`` (0-based) occupies positions
    ``[a, a + m)`` in a uniformly random order, so each of its documents sits at each of
    those positions with probability ``1/m`` (McSherry & Najork, 2008). Per document (sorted
    order): ``a``, ``m``, the position ``pos``, and the cutoff ``k`` (the list length when
    ``None``). ``groups`` lays the sorted documents out (the same as the input's).
    """

    def __init__(self, s: Tensor, g: Groups, k: Optional[int]):
        st = _Sorted(s, g)
        self.sorted, self.perm, self.groups = st, st.perm, g
        self.pos = st.pos
        self.a = self.pos[st.block_first][st.block_id]
        self.m = st.block_sum(torch.ones_like(self.pos, dtype=F64))
        self.k = g.max_size if k is None else min(k, max(g.max_size, 1))

    def share_in_top(self) -> Tensor:
        """Probability that the document lies in the top ``k``."""
        a = self.a.to(F64)
        return ((a + self.m).clamp(max=self.k) - a.clamp(max=self.k)) / self.m

    def discount_share(self) -> Tensor:
        """Expected discount ``E[1/log2(rank + 1)]`` of the document, counting only ranks
        within the top ``k``."""
        D = _discount_table(self.k, self.pos.device)
        end = (self.a + self.m.long()).clamp(max=self.k)
        return (D[end] - D[self.a.clamp(max=self.k)]) / self.m

    def expected_precision_sum(self, rel: Tensor) -> Tensor:
        """Per query, ``E[Σ_{relevant d, rank ≤ k} P@rank(d)]`` (``rel`` in sorted order).

        Position ``j`` (1-based) of a run holds a relevant document with probability
        ``r/m``; the other relevant documents of the run before it are hypergeometric with
        mean ``(j − 1)(r − 1)/(m − 1)``; with ``c`` relevant documents above the run the
        precision there is ``(c + 1 + (j − 1)(r − 1)/(m − 1)) / (a + j)``.
        """
        st = self.sorted
        c, r = st.above(rel), st.block_sum(rel)
        j1 = (self.pos - self.a).to(F64)  # j - 1
        prec = (c + 1.0 + j1 * (r - 1.0) / (self.m - 1.0).clamp_min(1.0)) / (self.pos + 1.0)
        term = torch.where((r > 0) & (self.pos < self.k), r / self.m * prec,
                           torch.zeros_like(prec))
        return self.groups.segment_sum(term)

    def expected_reciprocal_rank(self, rel: Tensor) -> Tensor:
        """Per query, ``E[1/rank]`` of the first relevant document within the top ``k``
        (0 when it lies beyond): in the first run with ``r`` relevant documents among
        ``m``, offset ``j`` is the first relevant one with probability
        ``C(m − j − 1, r − 1) / C(m, r)``."""
        st, g = self.sorted, self.groups
        r = st.block_sum(rel)
        big = torch.iinfo(torch.long).max
        first_a = g.segment_min(torch.where(r > 0, self.a, torch.full_like(self.a, big)),
                                empty=big)
        in_first = (r > 0) & (self.a == first_a[g.group_index]) & (self.pos < self.k)
        j = (self.pos - self.a).to(F64)
        top, sub = self.m - j - 1.0, r - 1.0
        ok = in_first & (top >= sub)
        zero, one = torch.zeros_like(j), torch.ones_like(j)
        top, sub = torch.where(ok, top, zero), torch.where(ok, sub, zero)
        m, rr = torch.where(ok, self.m, one), torch.where(ok, r, one)
        log_p = (_log_choose(top, sub) - _log_choose(m, rr))
        term = torch.where(ok, torch.exp(log_p) / (self.pos + 1.0), torch.zeros_like(j))
        return g.segment_sum(term)


def _log_choose(n: Tensor, k: Tensor) -> Tensor:
    return torch.lgamma(n + 1.0) - torch.lgamma(k + 1.0) - torch.lgamma(n - k + 1.0)


@_accepts_padding
def dcg_at_k(scores, labels, groups: Optional[Groups] = None, *, k: Optional[int] = 10,
             gain="exp", ties: str = "stable", reduction: str = "mean") -> Tensor:
    r"""Discounted cumulative gain at ``k``:
    :math:`\mathrm{DCG@k} = \sum_{r=1}^{\min(k, n_q)} G(l_{(r)}) / \log_2(r+1)`.

    Args:
        k: cutoff (``>= 1``), or ``None`` for the whole list.
        gain: ``"exp"`` (default, :math:`2^l - 1`, as LightGBM/XGBoost/LETOR), ``"linear"``
            (:math:`l`) or a table (sequence/tensor) indexed by integer label (like
            LightGBM's ``label_gain``).
        ties: ``"stable"`` (default: tied scores keep their input order, as LightGBM) or
            ``"average"`` (the expectation over the orders of tied documents, McSherry &
            Najork 2008; independent of the input order).
        reduction: ``"mean"`` over queries or ``"none"`` (``(G,)``).

    Documents are ranked by score descending.
    """
    s, y, g, k, perm, order = _list_common(scores, labels, groups, k, ties)
    _check_grades(y, "dcg_at_k")
    return _reduce(_dcg(_gain(gain, y), perm, order), reduction)


def _dcg(gains: Tensor, perm: Optional[Tensor], order) -> Tensor:
    """Per-query DCG of ``_list_common``'s order (a truncated ``Groups``, or tie runs)."""
    if perm is None:
        return order.groups.segment_sum(gains[order.perm] * order.discount_share())
    return order.segment_sum(gains[perm] * _discount(order.position))


@_accepts_padding
def ndcg_at_k(scores, labels, groups: Optional[Groups] = None, *, k: Optional[int] = 10,
              gain="exp", empty: float = 1.0, ties: str = "stable",
              reduction: str = "mean") -> Tensor:
    r"""Normalised DCG at ``k``: ``DCG@k / IDCG@k``, IDCG being the DCG@k of the
    documents sorted by gain.

    Args:
        k: cutoff (``>= 1``) or ``None`` (all documents).
        gain: ``"exp"`` (:math:`2^l - 1`, default), ``"linear"`` or a table indexed by
            integer label.
        empty: the value of a query whose IDCG@k is 0 (no relevant document): ``1.0``
            (default, LightGBM/XGBoost) or e.g. ``0.0`` (LETOR evaluation tools).
        ties: ``"stable"`` (default: tied scores keep their input order, as LightGBM) or
            ``"average"`` (the expectation over the orders of tied documents, McSherry &
            Najork 2008; independent of the input order).
        reduction: ``"mean"`` over all queries (those scored ``empty`` included) or
            ``"none"``.

    With ``ties="stable"`` this matches LightGBM's evaluation to ~1e-15 on its lambdarank
    example and MQ2008 (see the tests).
    """
    s, y, g, k, perm, order = _list_common(scores, labels, groups, k, ties)
    _check_grades(y, "ndcg_at_k")
    gains_all = _gain(gain, y, g)  # scaled per query for large labels: NDCG is a ratio
    dcg = _dcg(gains_all, perm, order)
    idcg = _ideal_dcg(gains_all, y, g, k)
    ok = idcg > 0
    nd = torch.where(ok, dcg / torch.where(ok, idcg, torch.ones_like(idcg)), idcg.new_tensor(float(empty)))
    return _reduce(nd, reduction)


@_accepts_padding
def mean_average_precision(scores, labels, groups: Optional[Groups] = None, *,
                           threshold: float = 0.0, k: Optional[int] = None,
                           denominator: str = "min_k", empty: float = 1.0,
                           ties: str = "stable", reduction: str = "mean") -> Tensor:
    r"""Mean (over queries) of the average precision at ``k``.

    .. math::
        \mathrm{AP@k} = \frac{1}{D}\sum_{r \le k,\ \mathrm{rel}_{(r)}} \mathrm{P@}r,\qquad
        D = \min(R, k)\ (\texttt{"min\_k"})\ \text{or}\ R\ (\texttt{"relevant"})

    with ``R`` the number of relevant documents (``label > threshold``) of the query.

    Args:
        threshold: relevant documents are ``label > threshold`` (0: any positive grade).
        k: cutoff or ``None`` (whole list; then both denominators agree).
        denominator: ``"min_k"`` (default, LightGBM's ``map@k``) or ``"relevant"``
            (TREC-style, divides by all relevant documents).
        empty: AP of a query with no relevant document (default ``1.0`` as LightGBM;
            ``0.0`` is the other common choice).
        ties: ``"stable"`` (default: tied scores keep their input order, as LightGBM) or
            ``"average"`` (the expectation over the orders of tied documents, McSherry &
            Najork 2008; independent of the input order).
        reduction: ``"mean"`` or ``"none"``.
    """
    _check_choice(denominator, "denominator", ("min_k", "relevant"))
    s, y, g, k, perm, order = _list_common(scores, labels, groups, k, ties)
    if perm is None:
        sum_ap = order.expected_precision_sum((y[order.perm] > threshold).to(F64))
    else:
        rel = (y[perm] > threshold).to(F64)
        hits = order.segment_cumsum(rel)
        sum_ap = order.segment_sum(rel * hits / (order.position.to(F64) + 1.0))
    R = g.segment_sum((y > threshold).to(F64))
    D = R if (k is None or denominator == "relevant") else torch.clamp(R, max=float(k))
    ok = R > 0
    ap = torch.where(ok, sum_ap / torch.where(ok, D, torch.ones_like(D)), R.new_tensor(float(empty)))
    return _reduce(ap, reduction)


@_accepts_padding
def precision_at_k(scores, labels, groups: Optional[Groups] = None, *, k: Optional[int] = 10,
                   threshold: float = 0.0, denominator: str = "k", ties: str = "stable",
                   reduction: str = "mean") -> Tensor:
    r"""Fraction of relevant documents (``label > threshold``) among the top ``k``.

    Args:
        k: cutoff or ``None`` (the whole list: the fraction of relevant documents).
        denominator: ``"k"`` (default, textbook P@k: a query shorter than ``k`` is padded
            with non-relevant documents) or ``"min_k"`` (divide by ``min(k, n_q)``, as
            LightGBM's and TF-Ranking's precision). A query with no document scores 0.
        ties: ``"stable"`` (default: tied scores keep their input order, as LightGBM) or
            ``"average"`` (the expectation over the orders of tied documents, McSherry &
            Najork 2008; independent of the input order).
        reduction: ``"mean"`` or ``"none"``.
    """
    _check_choice(denominator, "denominator", ("k", "min_k"))
    s, y, g, k, perm, order = _list_common(scores, labels, groups, k, ties)
    if perm is None:
        rel = (y[order.perm] > threshold).to(F64)
        hits = g.segment_sum(rel * order.share_in_top())
    else:
        hits = order.segment_sum((y[perm] > threshold).to(F64))
    sizes = g.sizes.to(F64)
    if k is None:
        D = sizes
    elif denominator == "k":
        D = torch.full_like(sizes, float(k))
    else:
        D = torch.clamp(sizes, max=float(k))
    return _reduce(hits / D.clamp_min(1.0), reduction)


@_accepts_padding
def reciprocal_rank(scores, labels, groups: Optional[Groups] = None, *,
                    threshold: float = 0.0, k: Optional[int] = None, empty: float = 0.0,
                    ties: str = "stable", reduction: str = "mean") -> Tensor:
    r"""Reciprocal rank of the first relevant document (``label > threshold``):
    ``1 / rank`` (1-based), 0 when the first relevant document lies beyond ``k``.

    Args:
        k: cutoff (RR@k) or ``None``.
        empty: value for a query with no relevant document at all (default ``0.0``).
        ties: ``"stable"`` (default: tied scores keep their input order, as LightGBM) or
            ``"average"`` (the expectation over the orders of tied documents, McSherry &
            Najork 2008; independent of the input order).
        reduction: ``"mean"`` (MRR) or ``"none"``.
    """
    s, y, g, k, perm, order = _list_common(scores, labels, groups, k, ties)
    any_rel = g.segment_sum((y > threshold).to(F64)) > 0
    if perm is None:
        rr = order.expected_reciprocal_rank((y[order.perm] > threshold).to(F64))
        return _reduce(torch.where(any_rel, rr, rr.new_tensor(float(empty))), reduction)
    gk = order
    rel = y[perm] > threshold
    big = torch.iinfo(torch.long).max
    pos = gk.position
    first = gk.segment_min(torch.where(rel, pos, torch.full_like(pos, big)), empty=big)
    found = first < big  # a relevant document within the top k
    rr = torch.where(found, 1.0 / (first.clamp(max=2**52).to(F64) + 1.0),
                     torch.zeros(first.shape, dtype=F64, device=first.device))
    rr = torch.where(any_rel, rr, rr.new_tensor(float(empty)))
    return _reduce(rr, reduction)


# ----------------------------------------------------------------------------- top of list
def _top_negative_counts(scores, labels, groups, threshold):
    s, y, g = _prepare(scores, labels, groups)
    s64 = s.to(F64)
    pos = y > threshold
    top_neg = g.segment_max(torch.where(pos, torch.full_like(s64, float("-inf")), s64))
    above = pos & (s64 > top_neg[g.group_index])
    n_above = g.segment_sum(above.to(F64))
    n_pos = g.segment_sum(pos.to(F64))
    return n_above, n_pos


@_accepts_padding
def positives_above_first_negative(scores, labels, groups: Optional[Groups] = None, *,
                                   threshold: float = 0.0, normalize: bool = False,
                                   reduction: str = "mean") -> Tensor:
    r"""Number of positives scored strictly above the highest-scored negative — the
    p-norm push paper's experimental "R_max" (Rudin 2005, §5, to be *maximised*: "the
    number of positives before the first negative", i.e. the true positives of the ROC
    curve in counts just before its first false positive).

    .. math:: \#\{i \in + : s_i > \max_{k \in -} s_k\}

    A positive tied with the top negative does **not** count (ties count against the
    positive, the tie-consistent reading (A18) of the spec). This is the complement of the
    paper's §2 definition (A4), :func:`positives_below_top_negative`:
    ``above + below = #positives``. A query without negatives counts all its positives.

    Args:
        threshold: positives are ``label > threshold``.
        normalize: divide by the query's number of positives (0 for a query without one).
        reduction: ``"mean"`` over queries (``groups=None``: the single global count) or
            ``"none"``.
    """
    n_above, n_pos = _top_negative_counts(scores, labels, groups, threshold)
    if normalize:
        n_above = n_above / n_pos.clamp_min(1.0)
    return _reduce(n_above, reduction)


@_accepts_padding
def positives_below_top_negative(scores, labels, groups: Optional[Groups] = None, *,
                                 threshold: float = 0.0, normalize: bool = False,
                                 reduction: str = "mean") -> Tensor:
    r"""Number of positives scored at or below the highest-scored negative — R_max of the
    p-norm push paper's §2, eq. (A4) (to be *minimised*):
    :math:`\max_k \sum_i \mathbf 1[s_i \le t_k] = \#\{i\in+ : s_i \le \max_k t_k\}`.
    The complement of :func:`positives_above_first_negative`; same arguments.
    """
    n_above, n_pos = _top_negative_counts(scores, labels, groups, threshold)
    below = n_pos - n_above
    if normalize:
        below = below / n_pos.clamp_min(1.0)
    return _reduce(below, reduction)


# ----------------------------------------------------------------------------- precision at K%
def _label_pair_diffs(s64: Tensor, y: Tensor, g: Groups, max_pairs: int,
                      chunk: int = 1 << 22) -> Tensor:
    """``s_hi - s_lo`` of every label-induced pair (``y_hi > y_lo``, same query).

    The ``Σ n_q²`` ordered candidate pairs are enumerated in ranges of ``chunk`` candidates
    (whatever the query sizes), keeping only the crucial ones, so the transient memory is
    O(chunk) and the result O(m)."""
    # number of crucial pairs (for the max_pairs guard), without materialising them
    st = _Sorted(s64, g)
    lev, K = dense_levels(y)
    _, _, lower = _label_pair_counts(st, lev[st.perm], K)
    m = int(lower.sum().item())
    if m > max_pairs:
        raise ValueError(
            f"precision_at_percent would materialise {m} crucial pairs, more than "
            f"max_pairs={max_pairs}; evaluate fewer queries at a time or raise max_pairs"
        )
    out = [s64[i] - s64[j] for i, j in label_pair_chunks(y, g, chunk)]
    return torch.cat(out) if out else s64.new_zeros(0)


@_accepts_padding
def precision_at_percent(scores, labels, groups: Optional[Groups] = None, *,
                         percent: Union[float, Sequence[float]] = 100.0, pairs=None,
                         ties: str = "error", max_pairs: int = 50_000_000) -> Tensor:
    r"""Zheng et al.'s precision at K%: sort all crucial pairs (pooled over queries) by
    their score gap :math:`|s_x - s_y|`, most confident first, and return the fraction of
    **non-contradicting** pairs (:math:`s_{hi} > s_{lo}`) among the top K% of them.
    Precision at 100% is the overall pairwise accuracy (``1 - R̂1`` with ``ties="error"``).

    Conventions (the paper leaves them open):

    * the top K% holds ``N = ceil(K/100 · m)`` of the ``m`` pairs (at least 1);
    * pairs whose gap equals the gap of the N-th pair all straddle the cut, so they enter
      with their *average* correctness (the result does not depend on pair order);
    * a pair with equal scores (gap 0) is contradicting with ``ties="error"`` (default)
      and counts ½ with ``ties="half"``;
    * NaN when there is no crucial pair.

    Args:
        percent: K in (0, 100], or a sequence of them (returns one value per K).
        pairs: ``"graded"`` (default; pairs of the same query with different labels, as
            the paper's P3), ``"bipartite"``/``Bipartite(t)`` or ``ExplicitPairs`` (weights
            ignored).
        max_pairs: this metric materialises the ``s_hi - s_lo`` of every crucial pair
            (float64, 8 bytes each; candidates are enumerated in bounded chunks) because it
            needs a global order of all pair gaps; more than ``max_pairs`` raises
            ``ValueError`` (memory stays O(m)).

    Returns a scalar, or a ``(len(percent),)`` tensor for a sequence.
    """
    s, y, g = _prepare(scores, labels, groups)
    t = {"error": 0.0, "half": 0.5}[_check_choice(ties, "ties", ("error", "half"))]
    scalar = isinstance(percent, Real)
    ps = [percent] if scalar else list(percent)
    for p in ps:
        if isinstance(p, bool) or not isinstance(p, Real) or not (0 < float(p) <= 100):
            raise ValueError(f"percent must lie in (0, 100], got {p!r}")
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        _check_grades(y, "precision_at_percent with graded pairs")
    s64 = s.to(F64)
    if isinstance(spec, ExplicitPairs):
        pp = spec.validate(g)
        d = s64[pp.hi] - s64[pp.lo]
    else:
        if isinstance(spec, Bipartite):
            y = (y > spec.threshold).to(F64)
        d = _label_pair_diffs(s64, y, g, int(max_pairs))
    m = d.numel()
    if m == 0:
        out = s64.new_full((len(ps),), float("nan"))
        return out[0] if scalar else out
    gap = d.abs()
    c = (d > 0).to(F64) + t * (d == 0).to(F64)
    order = torch.argsort(gap, descending=True)
    gap_s = gap[order]
    cum_c = torch.cumsum(c[order], 0)
    res = []
    for p in ps:
        N = max(1, math.ceil(float(p) / 100.0 * m - 1e-9))
        N = min(N, m)
        cut = gap_s[N - 1]
        n_gt = int((gap_s > cut).sum())
        n_eq = int((gap_s == cut).sum())
        c_gt = cum_c[n_gt - 1] if n_gt > 0 else cum_c.new_zeros(())
        c_eq = cum_c[n_gt + n_eq - 1] - c_gt
        res.append((c_gt + (N - n_gt) * c_eq / n_eq) / N)
    out = torch.stack(res)
    return out[0] if scalar else out


# ----------------------------------------------------------------------------- margin
@_accepts_padding
def ranking_margin(scores, labels, groups: Optional[Groups] = None, *, pairs=None,
                   scale: float = 1.0, reduction: str = "min") -> Tensor:
    r"""Ranking margin: the smallest score gap over crucial pairs,
    :math:`\mu = \min_{(h,l)} (s_h - s_l) / \mathrm{scale}` (Rudin & Schapire 2009, §1.2;
    pass ``scale = ‖λ‖₁`` to get the normalised margin of a combination of weak rankers
    with values in [0, 1]). Positive means every crucial pair is ranked correctly.

    Label-induced pairs (``"graded"`` default, ``"bipartite"``): per query and label level,
    the lowest score of that level minus the highest score of all lower levels (a
    (query, level) table, or a sort and a running maximum for many label levels).
    ``ExplicitPairs`` directly (pairs with weight 0 are ignored).

    Args:
        scale: positive divisor.
        reduction: ``"min"`` (default; the margin of the whole sample, the minimum over
            all pairs of all queries; ``+inf`` when there is no pair), ``"mean"`` (mean of
            the per-query margins over queries with a pair) or ``"none"`` (``(G,)``,
            ``+inf`` for queries without a pair).
    """
    s, y, g = _prepare(scores, labels, groups)
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    _check_choice(reduction, "reduction", ("min", "mean", "none"))
    s64 = s.to(F64)
    inf = float("inf")
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        _check_grades(y, "ranking_margin with graded pairs")
    if isinstance(spec, ExplicitPairs):
        p = spec.validate(g)
        per_q = explicit_margin(s64, p.hi, p.lo, g, p.weight)
    else:
        lev, K, _ = label_levels(y, g, spec)
        per_q = label_margin(s64, lev, K, g, many=K > _MANY_LEVELS)
    per_q = per_q / scale
    if reduction == "none":
        return per_q
    if reduction == "min":
        return per_q.min() if per_q.numel() else s64.new_tensor(inf)
    return _reduce(per_q, "mean", valid=torch.isfinite(per_q))
