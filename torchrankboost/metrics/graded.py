"""List metrics over the score order: DCG/NDCG, MAP, precision at k, reciprocal rank.

Each takes ``ties="stable"`` (tied scores keep their input order, as LightGBM) or
``"average"`` (the expectation over the orders of tied documents, McSherry & Najork 2008,
in closed form per tie run: :class:`_TieRuns`). Gains: ``"exp"`` (``2^l - 1``),
``"linear"`` or a table indexed by integer label (:func:`_gain`).
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from .._pair_engine.elementwise import exp2
from ..contract import ArrayLike
from ..groups import Groups
from ._common import (F64, accepts_padding, check_choice, check_grades, check_k, prepare,
                      reduce_per_query)
from ._memo import label_side
from ._sorting import Sorted, order_by_score

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
_EXP_GAIN_MAX = 1023.0  # 2^1023 - 1: the largest exponential gain float64 holds (2^1024 = inf)
_DCG_ADVICE = "use gain='linear', a gain table, or NDCG (normalised per query)"


def _gain(gain, y: Tensor, groups: Optional[Groups] = None) -> Tensor:
    """Gain of each label (float64). With ``groups`` (for NDCG, a ratio within each query)
    the exponential gain of large labels is scaled per query by ``2^-max label``:
    ``2^(l - m_q) - 2^-m_q`` — the same NDCG, no overflow. Without ``groups`` (plain DCG) a
    label above 1023 (gain ``2^l - 1`` beyond float64) is a ``ValueError``; labels up to
    1023 have finite gains (their discounted sum is checked by :func:`dcg_at_k`)."""
    if isinstance(gain, str):
        check_choice(gain, "gain", ("exp", "linear"))
        if gain == "linear":
            return y
        top = float(y.max()) if y.numel() else 0.0
        if top <= _EXP_GAIN_SAFE:
            return exp2(y) - 1.0
        if groups is None:
            if top > _EXP_GAIN_MAX:
                raise ValueError(
                    f"label {top:g} gives the exponential gain 2^{top:g} - 1, which overflows "
                    f"float64 (finite up to label 1023): {_DCG_ADVICE}")
            return exp2(y) - 1.0
        m = groups.segment_max(y).clamp_min(0.0)[groups.group_index]
        return exp2(y - m) - exp2(-m)
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


TIES = ("stable", "average")


def _list_common(scores, labels, groups, k, ties="stable"):
    s, y, g = prepare(scores, labels, groups)
    k = check_k(k)
    if check_choice(ties, "ties", TIES) == "average":
        return s, y, g, k, None, _TieRuns(s, g, k)
    perm, gk = order_by_score(s, g, k)  # the top min(k, n_q) documents of each query, in order
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
        st = Sorted(s, g)
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


@accepts_padding
def dcg_at_k(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
             k: Optional[int] = 10, gain: Union[str, ArrayLike] = "exp", ties: str = "stable",
             reduction: str = "mean") -> Tensor:
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
    check_grades(y, "dcg_at_k")
    out = reduce_per_query(_dcg(_gain(gain, y), perm, order), reduction)
    if not bool(torch.isfinite(out).all()):  # large finite gains whose sum overflows
        raise ValueError(f"DCG is beyond float64: the discounted sum of the gains of labels "
                         f"up to {float(y.max()):g} overflows; {_DCG_ADVICE}")
    return out


def _dcg(gains: Tensor, perm: Optional[Tensor], order) -> Tensor:
    """Per-query DCG of ``_list_common``'s order (a truncated ``Groups``, or tie runs)."""
    if perm is None:
        return order.groups.segment_sum(gains[order.perm] * order.discount_share())
    return order.segment_sum(gains[perm] * _discount(order.position))


@accepts_padding
def ndcg_at_k(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
              k: Optional[int] = 10, gain: Union[str, ArrayLike] = "exp", empty: float = 1.0,
              ties: str = "stable", reduction: str = "mean") -> Tensor:
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

    def labels_side():
        check_grades(y, "ndcg_at_k")
        gains = _gain(gain, y, g)  # scaled per query for large labels: NDCG is a ratio
        return gains, _ideal_dcg(gains, y, g, k)

    if isinstance(gain, str):  # the same labels every round of a fit: computed once
        gains_all, idcg = label_side(y, g, ("ndcg", gain, k), labels_side)
    else:
        gains_all, idcg = labels_side()
    dcg = _dcg(gains_all, perm, order)
    ok = idcg > 0
    nd = torch.where(ok, dcg / torch.where(ok, idcg, torch.ones_like(idcg)), idcg.new_tensor(float(empty)))
    return reduce_per_query(nd, reduction)


@accepts_padding
def mean_average_precision(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
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
    check_choice(denominator, "denominator", ("min_k", "relevant"))
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
    return reduce_per_query(ap, reduction)


@accepts_padding
def precision_at_k(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
                   k: Optional[int] = 10, threshold: float = 0.0, denominator: str = "k",
                   ties: str = "stable", reduction: str = "mean") -> Tensor:
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
    check_choice(denominator, "denominator", ("k", "min_k"))
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
    return reduce_per_query(hits / D.clamp_min(1.0), reduction)


@accepts_padding
def reciprocal_rank(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
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
        return reduce_per_query(torch.where(any_rel, rr, rr.new_tensor(float(empty))), reduction)
    gk = order
    rel = y[perm] > threshold
    big = torch.iinfo(torch.long).max
    pos = gk.position
    first = gk.segment_min(torch.where(rel, pos, torch.full_like(pos, big)), empty=big)
    found = first < big  # a relevant document within the top k
    rr = torch.where(found, 1.0 / (first.clamp(max=2**52).to(F64) + 1.0),
                     torch.zeros(first.shape, dtype=F64, device=first.device))
    rr = torch.where(any_rel, rr, rr.new_tensor(float(empty)))
    return reduce_per_query(rr, reduction)
