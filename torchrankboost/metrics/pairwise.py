"""Pairwise metrics: AUC and the ROC curve, the crucial-pair error (R̂1/R̂2) and Zheng et
al.'s precision at K%.

Label-induced pairs are counted without materialising them: one prefix-sum pass per label
level up to ``_MANY_LEVELS`` levels (:func:`_label_pair_counts`), bottom-up merge counting
beyond; only :func:`precision_at_percent` enumerates the pairs (in bounded chunks).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._pair_engine.levels import dense_levels, label_levels, label_pair_chunks
from ..contract import ArrayLike
from ..exact import exact_sum
from ..groups import Groups
from ..pairs import Bipartite, ExplicitPairs, Graded, PairSpec, resolve_pairs
from ._common import (F64, accepts_padding, check_choice, check_grades, many_levels,
                      prepare, reduce_per_query, tie_weight)
from ._sorting import Sorted

@accepts_padding
def auc(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
        threshold: float = 0.0, ties: str = "half", reduction: str = "mean") -> Tensor:
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
    s, y, g = prepare(scores, labels, groups)
    w = tie_weight(ties, ("half", "error", "correct"))
    st = Sorted(s, g)
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
    return reduce_per_query(per_q, reduction, valid=valid)


def roc_curve(scores: ArrayLike, labels: ArrayLike, *, threshold: float = 0.0
             ) -> Tuple[Tensor, Tensor, Tensor]:
    """ROC curve over all documents: ``(fpr, tpr, thresholds)`` like
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``.

    ``thresholds`` are the distinct scores in decreasing order preceded by ``+inf``; point
    ``i`` classifies ``score >= thresholds[i]`` as positive. The first point is ``(0, 0)``.
    Tied positives and negatives move both rates at once (a diagonal segment). Positives
    are ``label > threshold``. With no negatives (positives) ``fpr`` (``tpr``) is NaN, as in
    sklearn.
    """
    s, y, g = prepare(scores, labels, None)
    st = Sorted(s, g)
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



def _label_pair_counts(st: Sorted, lev: Tensor, K: int):
    """Per-document counts over label-induced pairs where the document is the preferred
    one: (#lower-labelled docs scored strictly above, #tied, #lower-labelled docs), from
    the label levels ``lev`` (``(n,)`` in ``[0, K)``, the pair engine's) in sorted order.

    Up to ``_MANY_LEVELS`` distinct labels: one prefix-sum pass per label level, O(K·n).
    More levels (e.g. real-valued labels): bottom-up merge counting, O(n log n · log L)."""
    g = st.groups
    if many_levels(K):
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


def _label_pair_counts_many(st: Sorted, rank: Tensor, R: int):
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


@accepts_padding
def pair_error(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
               pairs: PairSpec = None, ties: str = "error", reduction: str = "pooled") -> Tensor:
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
    s, y, g = prepare(scores, labels, groups)
    t = {"error": 1.0, "half": 0.5}[check_choice(ties, "ties", ("error", "half"))]
    check_choice(reduction, "reduction", ("pooled", "sum", "mean", "none"))
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        check_grades(y, "pair_error with graded pairs")
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
        st = Sorted(s, g)
        above, tied, lower = _label_pair_counts(st, lev[st.perm], K)
        err = g.segment_sum(above + t * tied)
        tot = g.segment_sum(lower)
    if reduction == "sum":
        return exact_sum(err)
    if reduction == "pooled":
        T = exact_sum(tot)
        return torch.where(T > 0, exact_sum(err) / torch.where(T > 0, T, torch.ones_like(T)),
                           T.new_tensor(float("nan")))
    valid = tot > 0
    per_q = torch.where(valid, err / torch.where(valid, tot, torch.ones_like(tot)),
                        tot.new_tensor(float("nan")))
    return reduce_per_query(per_q, reduction, valid=valid)


def label_pair_diffs(s64: Tensor, y: Tensor, g: Groups, max_pairs: int,
                     chunk: int = 1 << 22) -> Tensor:
    """``s_hi - s_lo`` of every label-induced pair (``y_hi > y_lo``, same query).

    The ``Σ n_q²`` ordered candidate pairs are enumerated in ranges of ``chunk`` candidates
    (whatever the query sizes), keeping only the crucial ones, so the transient memory is
    O(chunk) and the result O(m)."""
    # number of crucial pairs (for the max_pairs guard), without materialising them
    st = Sorted(s64, g)
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


@accepts_padding
def precision_at_percent(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
                         percent: Union[float, Sequence[float]] = 100.0, pairs: PairSpec = None,
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
    s, y, g = prepare(scores, labels, groups)
    t = {"error": 0.0, "half": 0.5}[check_choice(ties, "ties", ("error", "half"))]
    scalar = isinstance(percent, Real)
    ps = [percent] if scalar else list(percent)
    for p in ps:
        if isinstance(p, bool) or not isinstance(p, Real) or not (0 < float(p) <= 100):
            raise ValueError(f"percent must lie in (0, 100], got {p!r}")
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        check_grades(y, "precision_at_percent with graded pairs")
    s64 = s.to(F64)
    if isinstance(spec, ExplicitPairs):
        pp = spec.validate(g)
        d = s64[pp.hi] - s64[pp.lo]
    else:
        if isinstance(spec, Bipartite):
            y = (y > spec.threshold).to(F64)
        d = label_pair_diffs(s64, y, g, int(max_pairs))
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
