"""Sort + prefix-sum kernels for hinge-type losses over label-induced pairs.

Setting (the pairwise hinge of RankSVM, Joachims 2002; QBRank's grade-difference margin,
Zheng, Zha, Zhang, Chapelle, Chen & Sun 2007). Inside each query, document ``i`` is preferred to ``j`` when its *level* is higher
(``lev_i > lev_j``; levels are the ranks of the distinct labels, or 0/1 for a bipartite
threshold). Every hinge-type pair loss of this library is written with two per-document
values, ``a`` (the document's value as the upper member of a pair) and ``b`` (its value
as the lower member), so that the pair ``(i, j)`` is *active* iff ``b_j > a_i`` and its
loss is ``φ(b_j − a_i)`` with ``φ(x) = max(0, x)`` or ``max(0, x)²``:

* constant margin ``m``: ``a = s``, ``b = s + m`` (``m − (s_i − s_j) = b_j − a_i``);
* additive margin ``c (l_i − l_j)`` (QBRank's grade difference): ``a = b = s − c·l``.

Pair weights are of product form ``u_i v_j`` (``u = v =`` the per-document weights).

The core :func:`active_pair_sums` returns, for every document ``d`` and any per-document
channels ``X`` (lower side) and ``Y`` (upper side), each a list of ``(n,)`` tensors::

    to_lower[d] = Σ_{j in q(d): lev_j < lev_d, b_j > a_d} X_j        (d as the upper member)
    to_upper[d] = Σ_{i in q(d): lev_i > lev_d, a_i < b_d} Y_i        (d as the lower member)

which is a 2-D dominance sum (level × value). Algorithm: one stable sort of the ``2n``
values ``(b_1..b_n, a_1..a_n)`` (so that at equal values ``b``-items precede ``a``-items:
ties at the kink are *inactive*, the convention of ``relu'(0) = 0``), then one pass per
bit ``t`` of the level rank (``⌈log2 K⌉`` passes): a pair ``lev_i > lev_j`` is counted at
the highest bit where the two ranks differ, where ``i`` has a 1, ``j`` a 0, and both share
the higher bits. So per pass, inside each compound segment ``(query, lev >> (t+1))``,
``a``-items of the documents with bit ``t`` set meet the ``b``-items of the documents with
the bit clear: a bipartite problem solved by one stable integer sort of the segment keys
(value order is kept from the first sort; the sort is skipped when the keys are already
in order, e.g. for the top bit of a single query) and segmented prefix sums.

Cost: ``O(n log n · ⌈log2 K⌉)`` time, ``O(n (C_X + C_Y))`` memory, with ``K`` the number of
distinct label levels over the whole batch (1 pass for bipartite pairs, 3 for 5 grades,
~20 for a million distinct real-valued labels). No Python loop over queries or pairs.
The float64 values are sorted as order-preserving int64 bit patterns (radix-friendly,
several times faster than a floating-point sort on CPU).

The loss kernel :func:`hinge_terms` has a second implementation for up to 64 levels
(:func:`_hinge_terms_levels`): the same first sort (then a stable sort by query), and
``K − 1`` *threshold rows* instead of bit passes. Row ``r`` is one ``(n + 1,)`` prefix sum
of the channels masked to ``lev <= r`` (lower side) or ``lev > r`` (upper side), read only
by the documents of the matching level, which are grouped by level once (a uint8 sort).
``O(n log n + n K)`` time, ``O(n)`` memory, no per-level sort or compaction, few and small
temporaries. When ``b`` is ``a`` (QBRank's grade-difference margin, a zero margin) one sort
of the ``n`` values serves both lists, the tie runs giving the merge positions. Measured (1 thread): 100 lists of 1,000 documents with 5 grades, forward and
backward in about 20–26 ms for the hinge (the bit passes took about 54 ms); one query of
10^6 documents with 5 grades in about 0.22 s (hinge, squared hinge and QBRank alike).

Numerics: callers pass ``a``, ``b`` and channels in float64 (accumulation dtype) and centre
each query (subtract a per-query constant from ``a`` and ``b``; ``b − a`` is unchanged) to
limit the cancellation of ``Σ v b² − 2 a Σ v b + a² Σ v`` (the usual shifted-data trick for streaming variances). Prefix sums
are global float64 cumulative sums differenced at segment boundaries.

Everything here is built from differentiable torch ops (sort/searchsorted only provide
locally constant indices), so calling the kernels with differentiable ``a``/``b``/channels
gives autograd gradients of the sums (used for double backward / Hessians).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..groups import Groups

__all__ = ["active_pair_sums", "hinge_terms", "level_cuts", "pair_degree"]


def _value_order(*values: Tensor) -> Tensor:
    """Stable order of the items of ``values`` concatenated (``(b, a)``: the ``2n`` items
    ``(b_1..b_n, a_1..a_n)``) by value, earlier lists first at equal values, so ``b``-items
    precede ``a``-items (an integer sort of the float64 bit patterns, several times faster
    than a floating-point sort on CPU)."""
    keys = torch.cat([v.detach() for v in values]).to(torch.float64).add_(0.0)  # -0.0 -> +0.0
    bits = keys.view(torch.int64)
    bits ^= (bits >> 63) & 0x7FFFFFFFFFFFFFFF  # negative floats: reverse magnitude order
    return torch.argsort(bits, stable=True)


def active_pair_sums(a: Tensor, b: Tensor, lev: Tensor, K: int, groups: Groups,
                     lower: Sequence[Tensor], upper: Sequence[Tensor]
                     ) -> Tuple[List[Tensor], List[Tensor]]:
    """Dominance sums over active label-induced pairs (see the module docstring).

    Args:
        a, b: ``(n,)`` values as upper / lower member (only their order is used here).
        lev: ``(n,)`` int64 levels in ``[0, K)``.
        K: number of levels.
        groups: the query groups.
        lower: channels (a list of ``(n,)`` tensors) summed over each document's active
            *lower* partners.
        upper: channels (a list of ``(n,)`` tensors) summed over each document's active
            *upper* partners.

    Returns:
        ``(to_lower, to_upper)``: lists of ``(n,)`` tensors matching ``lower`` / ``upper``,
        in the channels' dtype. Differentiable with respect to the channels.
    """
    n = a.numel()
    if n == 0 or K < 2:
        return [torch.zeros_like(x) for x in lower], [torch.zeros_like(x) for x in upper]
    return _sums_bits(a, b, lev, K, groups, list(lower), list(upper))


def _take(x: Tensor, idx: Tensor) -> Tensor:
    """``x[idx]`` along dim 0 via ``index_select`` (several times faster on CPU)."""
    return x.index_select(0, idx)


def _sums_bits(a, b, lev, K, groups, lower, upper):
    n = a.numel()
    dev = a.device
    G = groups.num_groups
    # items 0..n-1 are the b-values (lower role), n..2n-1 the a-values (upper role)
    order = _value_order(b, a)
    is_a_all = order >= n
    inv = torch.empty_like(order).scatter_(0, order, torch.arange(2 * n, device=dev))
    lev_all = _take(torch.cat([lev, lev]), order)
    gi_all = None
    if G > 1:
        gi = groups.group_index.to(dev)
        gi_all = _take(torch.cat([gi, gi]), order)
    # channels in item order (1-D: 1-D cumsums are much faster than 2-D ones); lower
    # channels live on b-items, upper channels on a-items, zeros elsewhere
    xl = [_take(torch.cat([x, torch.zeros_like(x)]), order) for x in lower]
    xu = [_take(torch.cat([torch.zeros_like(x), x]), order) for x in upper]
    acc_lo = [torch.zeros_like(x) for x in xl]
    acc_up = [torch.zeros_like(x) for x in xu]
    nbits = int(K - 1).bit_length()
    for t in range(nbits):
        sel = ((lev_all >> t) & 1).bool() == is_a_all  # a-items of bit-1 docs, b-items of bit-0
        idx = torch.nonzero(sel).flatten()
        key = _take(lev_all, idx) >> (t + 1)
        if gi_all is not None:
            key = _take(gi_all, idx) * (((K - 1) >> (t + 1)) + 1) + key
        if key.numel() > 1 and not bool((key[1:] >= key[:-1]).all()):
            perm = torch.argsort(key, stable=True)
            idx = _take(idx, perm)
            key = _take(key, perm)
        is_a = _take(is_a_all, idx)
        m = idx.numel()
        pos_a = torch.nonzero(is_a).flatten()
        if pos_a.numel() == 0 or pos_a.numel() == m:
            continue
        pos_b = torch.nonzero(~is_a).flatten()
        newseg = torch.ones(m, dtype=torch.bool, device=dev)
        newseg[1:] = key[1:] != key[:-1]
        seg_start = torch.nonzero(newseg).flatten()
        seg_id = torch.cumsum(newseg, 0) - 1
        if xl:
            # for each a-item: Σ over the later items of its segment = cs[last] − cs[P]
            last = torch.cat([seg_start[1:], seg_start.new_tensor([m])]) - 1
            e = _take(last, _take(seg_id, pos_a))
            ia = _take(idx, pos_a)
            for x, acc in zip(xl, acc_lo):
                cs = torch.cumsum(_take(x, idx), 0)
                acc.index_add_(0, ia, _take(cs, e) - _take(cs, pos_a))
        if xu:
            # for each b-item: Σ over the earlier items of its segment = cs[P] − cs[start] + x[start]
            st = _take(seg_start, _take(seg_id, pos_b))
            ib = _take(idx, pos_b)
            for x, acc in zip(xu, acc_up):
                xs = _take(x, idx)
                cs = torch.cumsum(xs, 0)
                acc.index_add_(0, ib, _take(cs, pos_b) - _take(cs, st) + _take(xs, st))
    ia_doc = inv[n:]
    ib_doc = inv[:n]
    return [_take(acc, ia_doc) for acc in acc_lo], [_take(acc, ib_doc) for acc in acc_up]


# hinge_terms uses the threshold-row kernel for 2 <= K <= 64 levels, the bit passes above.
# Measured (hinge, 100 lists x 1,000 docs, 1 thread, medians of 10): rows 26/23/24/26/44/72 ms
# vs bit passes 32/42/54/51/72/85 ms at K = 2/3/5/8/32/64; about even at K = 128-256.
_LEVELS_MIN_K, _LEVELS_MAX_K = 2, 64


def _query_value_order(values: Sequence[Tensor], groups: Groups) -> Tensor:
    """Stable order of the items of ``values`` (each ``(n,)``, concatenated) by (query,
    value), earlier lists first at equal values: the value sort of :func:`_value_order`,
    then a stable sort by query id in the narrowest integer type (radix-style sorts of int16
    keys are ~3x faster than of int64 ones on CPU)."""
    order = _value_order(*values)
    G = groups.num_groups
    if G > 1:
        kdt = torch.int16 if G <= 2 ** 15 else torch.int32 if G <= 2 ** 31 else torch.int64
        gk = groups.group_index.to(device=order.device, dtype=kdt)
        gk = torch.cat([gk] * len(values)) if len(values) > 1 else gk
        perm = torch.argsort(_take(gk, order), stable=True)
        order = _take(order, perm)
    return order


def level_cuts(levels: Tensor, K: int) -> List[int]:
    """``[0, c_0, c_0 + c_1, ...]``: the cumulative counts of the levels ``0..K-1`` (host
    ints; one read, at bind time: they depend on the labels only)."""
    return [0] + torch.cumsum(torch.bincount(levels, minlength=K), 0).tolist()


def _level_slices(levels: Tensor, K: int, cuts: Optional[List[int]] = None
                  ) -> Tuple[Tensor, List[int]]:
    """Stable grouping of ``levels`` (``(n,)`` ints in ``[0, K)``) by level: ``(perm,
    cuts)`` with ``levels[perm[cuts[k]:cuts[k+1]]] == k`` (a uint8 radix-style sort).
    ``cuts`` given (:func:`level_cuts` of the same multiset of levels): no host read."""
    kdt = torch.uint8 if K <= 256 else torch.int16 if K <= 2 ** 15 else torch.int64
    perm = torch.argsort(levels if levels.dtype == kdt else levels.to(kdt), stable=True)
    return perm, level_cuts(levels, K) if cuts is None else cuts


class _RowPrefix:
    """Per-query exclusive prefix sums of ``mask * x`` over one list (queries contiguous,
    at the groups' offsets), one threshold row at a time: ``table(mask, x)`` returns
    ``(P, shift)`` with ``Σ_{k in [lo, hi)} (mask x)_k = P[hi + s] − P[lo + s]`` for
    ``[lo, hi)`` inside query ``q`` and ``s = q`` when ``shift`` (else 0). Each query's sums
    come from its own values only (segment-local): float channels through
    :meth:`~torchrankboost.groups.Groups.prefix_table`; a count channel (``x`` ``None``)
    through one global prefix of whole numbers, exact, so its differences are the same
    whatever the other queries. Differentiable."""

    def __init__(self, groups: Groups, like: Tensor):
        self.groups, self.like = groups, like

    def table(self, mask: Tensor, x: Optional[Tensor]) -> Tuple[Tensor, bool]:
        if x is None:
            c = mask.to(self.like.dtype).cumsum(0)
            return torch.cat([c.new_zeros(1), c]), False
        return self.groups.prefix_table(mask * x), True


def _list_orders(a: Tensor, b: Tensor, groups: Groups):
    """The ``a``-list and the ``b``-list in (query, value) order, ``b`` before ``a`` at equal
    values: ``(doc_a, doc_b, na_before, nb_before)``, each ``(n,)`` int64 — the document of
    each list position, and for the ``j``-th ``b``-item (``a``-item) the number of
    ``a``-items (``b``-items) before it in the merged order (same query ones included)."""
    n = a.numel()
    dev = a.device
    if b is a:
        # one (query, value) order of the n documents is both lists; at a tie run the
        # b-items come first, so a b-item has the documents before its run as a-items
        # before it, and an a-item has every document up to its run's end as b-items
        doc_a = _query_value_order([a], groups)
        v = _take(a.detach(), doc_a)
        newrun = torch.ones(n, dtype=torch.bool, device=dev)
        torch.ne(v[1:], v[:-1], out=newrun[1:])
        if groups.num_groups > 1:
            qs = _take(groups.group_index.to(dev), doc_a)
            newrun[1:] |= qs[1:] != qs[:-1]
        # each position's run start (a running max) and end (a reverse running min of
        # the run starts after it): no data-dependent shapes
        ar = torch.arange(n, device=dev)
        start = torch.cummax(torch.where(newrun, ar, torch.zeros_like(ar)), 0)[0]
        nxt = torch.where(newrun, ar, torch.full_like(ar, n))
        end = torch.cat([torch.cummin(nxt.flip(0), 0)[0].flip(0)[1:], ar.new_tensor([n])])
        return doc_a, doc_a, start, end
    order = _query_value_order([b, a], groups)
    pa = _positions(order >= n, n)  # positions of the a-items
    doc_a = _take(order, pa).sub_(n)  # a-list (query, value order) -> document
    ar = torch.arange(n, device=dev)
    nb_before = pa.sub_(ar)  # b-items before each a-item (same query ones included)
    # a-items before the j-th b-item = #{a-items with nb_before <= j} (no 2nd nonzero)
    # (a scatter-add, not bincount: its output size would be read from the data)
    na_before = torch.zeros(n + 1, dtype=torch.int64, device=dev).index_add_(
        0, nb_before, torch.ones_like(nb_before))[:n].cumsum_(0)
    doc_b = _take(order, ar.add_(na_before))  # the j-th b-item sits at j + na_before[j]
    return doc_a, doc_b, na_before, nb_before


def _positions(mask: Tensor, count: int) -> Tensor:
    """``torch.nonzero(mask).flatten()`` when ``mask`` has exactly ``count`` true entries,
    without a data-dependent shape (no host read): each true entry scatters its position
    to its rank among the true entries."""
    m = mask.numel()
    rank = torch.cumsum(mask, 0).sub_(1)
    slot = torch.where(mask, rank, torch.full_like(rank, count))
    out = torch.empty(count + 1, dtype=torch.int64, device=mask.device)
    return out.scatter_(0, slot, torch.arange(m, device=mask.device))[:count]


class _RowReader:
    """Threshold rows ``r = 0..K-2`` of per-query prefix sums, each read by the documents of
    one level.

    ``read(cuts, first, lo_all, hi_all, q_all, mask_of, chans)``: the readers of level
    ``first + r`` (slice ``cuts[first + r]:cuts[first + r + 1]`` of the level order) read
    row ``r`` (masked by ``mask_of(r)``) of every channel ``x`` over ``[lo, hi)`` inside
    their query ``q`` (``lo_all``/``hi_all``/``q_all`` per reader). Returns one ``(n,)``
    tensor per channel, in reader order, 0 for readers of no row."""

    def __init__(self, groups: Groups, R: int, like: Tensor):
        self.R, self.like = R, like
        self.rows = _RowPrefix(groups, like)

    def read(self, cuts, first, lo_all, hi_all, q_all, mask_of, chans):
        R, zeros = self.R, self.like.new_zeros
        pieces = [[] for _ in chans]
        for r in range(R):
            s0, s1 = cuts[first + r], cuts[first + r + 1]
            if s1 == s0:
                continue
            mask = mask_of(r)
            q = q_all[s0:s1]
            lo, hi = lo_all[s0:s1] + q, hi_all[s0:s1] + q
            for out, x in zip(pieces, chans):
                tab, shift = self.rows.table(mask, x)
                a, b = (hi, lo) if shift else (hi_all[s0:s1], lo_all[s0:s1])
                out.append(_take(tab, a) - _take(tab, b))
        return [torch.cat([zeros(cuts[first])] + p + [zeros(cuts[-1] - cuts[first + R])])
                for p in pieces]


def _per_document(a, b, w, groups, ra_doc, rb_doc, N, S1, M, T1, *, squared, need_loss,
                  need_hess):
    """Gradient, Hessian diagonal and per-query loss from the readers' sums: the
    ``a``-readers (upper role, ``N``, ``S1`` over their active lower partners) and the
    ``b``-readers (lower role, ``M``, ``T1`` over their active upper partners), each in
    level order with documents ``ra_doc`` / ``rb_doc``."""
    n = a.numel()
    G = groups.num_groups
    if squared or need_loss:
        xa = _take(a, ra_doc)
        xb = _take(b, rb_doc)
    wa = None if w is None else _take(w, ra_doc)
    wb = None if w is None else _take(w, rb_doc)
    if squared:
        ga = (S1 - xa * N) * (-2.0)
        gb = (xb * M - T1) * 2.0
    else:
        ga = -N
        gb = M
    if wa is not None:
        ga = ga * wa
        gb = gb * wb
    g = a.new_zeros(n).index_add(0, ra_doc, ga).index_add(0, rb_doc, gb)
    h = None
    if need_hess:
        if squared:
            ha = 2.0 * N if wa is None else 2.0 * wa * N
            hb = 2.0 * M if wb is None else 2.0 * wb * M
            h = a.new_zeros(n).index_add(0, ra_doc, ha).index_add(0, rb_doc, hb)
        else:
            h = torch.zeros_like(a)
    loss = None
    if need_loss:
        # Euler's identity: the loss is positively homogeneous of degree p (1: hinge, 2:
        # squared) in (a, b) on each piece where the active set is fixed, so per query
        # L = (1/p) Σ_d (a_d ∂L/∂a_d + b_d ∂L/∂b_d): no value channels beyond the gradient's.
        # Same cancellation as Σ_d (S1_d − a_d N_d) (values are query-centred); clamped at 0.
        # per query in reader order, the same additions whatever the other queries are
        ea = xa * ga
        eb = xb * gb
        gi = groups.group_index.to(a.device)
        loss = a.new_zeros(G).index_add(0, _take(gi, ra_doc), ea).index_add(
            0, _take(gi, rb_doc), eb)
        loss = loss.clamp_min(0)
        if squared:
            loss = loss * 0.5
    return loss, g, h


def _hinge_terms_levels(a, b, lev, K, groups, w, *, squared, need_loss, need_hess,
                        cuts=None):
    """:func:`hinge_terms` for up to ``_LEVELS_MAX_K`` levels, ``O(n log n + nK)``.

    The ``2n`` items are sorted by (query, value) (``b`` before ``a`` at equal values, so
    kink ties are inactive) and split into the ``a``-list and the ``b``-list, each then
    ordered by (query, value) with query ``g`` at positions ``offsets[g]:offsets[g+1]``
    (a query has as many ``a``- as ``b``-items). An ``a``-item's later lower partners are the
    ``b``-list entries from (number of ``b``-items before it) to its query's end; a
    ``b``-item's earlier upper partners are the ``a``-list entries from its query's start to
    (number of ``a``-items before it). Level constraints by thresholds ``r = 0..K-2``: the
    ``a``-items of level ``r + 1`` read the prefix sums over the ``b``-list of the channels
    masked to ``lev <= r``; the ``b``-items of level ``r`` read those over the ``a``-list
    masked to ``lev > r``. The readers are grouped by level once (a stable uint8 sort), so
    each threshold row is one per-query prefix table (``(n + G,)`` float64, segment-local:
    :class:`_RowPrefix`) read by its own readers only: ``O(n)`` memory per row, no
    compaction, no per-level sort of the values.
    """
    dev = a.device
    same = b is a  # one value per document (QBRank's grade-difference margin, margin 0)
    doc_a, doc_b, na_before, nb_before = _list_orders(a, b, groups)
    levn = lev.to(torch.uint8) if K <= 256 else lev  # narrow gathers and compares
    la = _take(levn, doc_a)
    lb = la if same else _take(levn, doc_b)
    rows = _RowReader(groups, K - 1, a)
    gi = groups.group_index.to(dev)
    # lower side: the a-items of level r + 1 read row r (b-list channels, lev <= r) over
    # [nb_before, query end). Readers in level order: ra_* (level 0 reads nothing).
    perm_a, ca = _level_slices(la, K, cuts)
    ra_doc = _take(doc_a, perm_a)
    ra_lo = _take(nb_before, perm_a)
    ra_hi = _take(groups.doc_end.to(dev), ra_doc)
    del nb_before
    wb = None if w is None else _take(w, doc_b)
    chans = [wb]
    if squared:
        xb = _take(b, doc_b)
        chans.append(xb if wb is None else wb * xb)
    N, *S1 = rows.read(ca, 1, ra_lo, ra_hi, _take(gi, ra_doc), lambda r: lb <= r, chans)
    S1 = S1[0] if squared else None
    del ra_lo, ra_hi, chans
    # upper side: the b-items of level r read row r (a-list channels, lev > r) over
    # [query start, na_before). Readers in level order: rb_* (level K - 1 reads nothing).
    if same:  # the lists and their levels are the same: reuse the level grouping
        perm, cb, rb_doc = perm_a, ca, ra_doc
    else:
        perm, cb = _level_slices(lb, K, ca)
        rb_doc = _take(doc_b, perm)
    rb_hi = _take(na_before, perm)
    rb_lo = _take(groups.doc_start.to(dev), rb_doc)
    del na_before, perm, perm_a, doc_b
    wa = None if w is None else _take(w, doc_a)
    chans = [wa]
    if squared:
        xa = _take(a, doc_a)
        chans.append(xa if wa is None else wa * xa)
    M, *T1 = rows.read(cb, 0, rb_lo, rb_hi, _take(gi, rb_doc), lambda r: la > r, chans)
    T1 = T1[0] if squared else None
    del rb_hi, rb_lo, chans, doc_a
    return _per_document(a, b, w, groups, ra_doc, rb_doc, N, S1, M, T1, squared=squared,
                         need_loss=need_loss, need_hess=need_hess)


def hinge_terms(a: Tensor, b: Tensor, lev: Tensor, K: int, groups: Groups,
                w: Optional[Tensor], *, squared: bool, need_loss: bool = True,
                need_hess: bool = False, cuts: Optional[List[int]] = None
                ) -> Tuple[Optional[Tensor], Tensor, Optional[Tensor]]:
    """Per-query loss, gradient and exact Hessian diagonal of
    ``L = Σ_{lev_i > lev_j, same query} w_i w_j φ(b_j − a_i)``.

    ``φ(x) = max(0, x)`` (``squared=False``) or ``max(0, x)²``. With, for the upper role,
    ``N = Σ w_j``, ``S1 = Σ w_j b_j``, ``S2 = Σ w_j b_j²`` over active lower partners and,
    for the lower role, ``M = Σ w_i``, ``T1 = Σ w_i a_i`` over active upper partners:

    * hinge: ``loss_d = w_d (S1 − a_d N)``, ``g_d = −w_d N_d + w_d M_d``, ``H = 0`` a.e.;
    * squared: ``loss_d = w_d (S2 − 2 a_d S1 + a_d² N)``,
      ``g_d = −2 w_d (S1 − a_d N) + 2 w_d (b_d M − T1)``, ``diag H_d = 2 w_d (N_d + M_d)``.

    For ``2 <= K <= 64`` levels this runs :func:`_hinge_terms_levels` (one (query, value)
    order and ``K - 1`` threshold rows of prefix sums, no per-pass sort). Otherwise it is
    :func:`active_pair_sums` fused with those formulas: each bit pass gathers the
    item values once, forms the channels ``(w, w·x, w·x²)`` on the fly, and scatters only
    the combined gradient/curvature (fewer random memory accesses). Per-(document, pass)
    loss shares are clamped at 0 against rounding in the cancellation. ``w`` ``None``
    means all ones. Inputs in the accumulation dtype; returns ``(per-query loss (G,) or
    None, g (n,), hdiag (n,) or None)``; differentiable in ``a``, ``b`` and ``w``.
    """
    n = a.numel()
    if n and _LEVELS_MIN_K <= K <= _LEVELS_MAX_K:
        return _hinge_terms_levels(a, b, lev, K, groups, w, squared=squared,
                                   need_loss=need_loss, need_hess=need_hess, cuts=cuts)
    return _hinge_terms_bits(a, b, lev, K, groups, w, squared=squared, need_loss=need_loss,
                             need_hess=need_hess)


def _hinge_terms_bits(a, b, lev, K, groups, w, *, squared, need_loss, need_hess):
    """:func:`hinge_terms` by bit passes over the level ranks (any number of levels): the
    ``2n`` items in value order, then per bit ``t`` the bipartite problem of
    :func:`_hinge_bit_pass`."""
    n = a.numel()
    G = groups.num_groups
    dev = a.device
    g = torch.zeros_like(a)
    h = torch.zeros_like(a) if need_hess else None
    loss = a.new_zeros(G) if need_loss else None
    if n == 0 or K < 2:
        return loss, g, h
    order = _value_order(b, a)
    is_a_all = order >= n
    doc_all = torch.where(is_a_all, order - n, order)
    vals_all = _take(torch.cat([b, a]), order)
    lev_all = _take(lev, doc_all)
    gi_all = _take(groups.group_index.to(dev), doc_all) if G > 1 else None
    w_all = None if w is None else _take(w, doc_all)
    items = (is_a_all, doc_all, vals_all, lev_all, gi_all, w_all)
    for t in range(int(K - 1).bit_length()):
        li = _hinge_bit_pass(t, K, items, g, h, squared=squared, need_loss=need_loss)
        if li is not None:
            idx, li = li
            if gi_all is None:
                loss = loss + li.sum()
            else:
                loss = loss.index_add(0, _take(gi_all, idx), li)
    return loss, g, h


def _hinge_bit_pass(t, K, items, g, h, *, squared, need_loss):
    """Bit ``t``: inside each compound segment ``(query, lev >> (t+1))`` the ``a``-items of
    the documents with bit ``t`` set meet the ``b``-items of those with the bit clear.
    Accumulates the gradient into ``g`` and the curvature into ``h`` (in place); returns
    ``(item indices, per-item loss shares)`` when ``need_loss`` (else None)."""
    is_a_all, doc_all, vals_all, lev_all, gi_all, w_all = items
    dev = g.device
    sel = ((lev_all >> t) & 1).bool() == is_a_all  # a-items of bit-1 docs, b-items of bit-0
    idx = torch.nonzero(sel).flatten()
    key = _take(lev_all, idx) >> (t + 1)
    if gi_all is not None:
        key = _take(gi_all, idx) * (((K - 1) >> (t + 1)) + 1) + key
    m = idx.numel()
    if m < 2:
        return None
    if not bool((key[1:] >= key[:-1]).all()):
        perm = torch.argsort(key, stable=True)
        idx = _take(idx, perm)
        key = _take(key, perm)
    is_a = _take(is_a_all, idx)
    na = int(is_a.sum())
    if na == 0 or na == m:
        return None
    zero = g.new_zeros(())
    x = _take(vals_all, idx)  # a at a-items, b at b-items
    d = _take(doc_all, idx)
    wt = None if w_all is None else _take(w_all, idx)
    vb = torch.where(is_a, zero, zero + 1 if wt is None else wt)  # lower channel weight
    ua = torch.where(is_a, zero + 1 if wt is None else wt, zero)  # upper channel weight
    single = bool(key[0] == key[-1])  # one segment (keys are sorted)
    if not single:
        newseg = torch.ones(m, dtype=torch.bool, device=dev)
        newseg[1:] = key[1:] != key[:-1]
        seg_start = torch.nonzero(newseg).flatten()
        seg_id = torch.cumsum(newseg, 0) - 1
        first = _take(seg_start, seg_id)
        last = _take(torch.cat([seg_start[1:], seg_start.new_tensor([m])]) - 1, seg_id)

    def after(c):  # Σ over the later items of the segment
        cs = torch.cumsum(c, 0)
        return (cs[-1] if single else _take(cs, last)) - cs

    def before(c):  # Σ over the earlier items of the segment
        ex = torch.cumsum(c, 0) - c
        return ex if single else ex - _take(ex, first)

    N = after(vb)
    vbx = vb * x
    S1 = after(vbx)
    M = before(ua)
    one = zero + 1 if wt is None else wt
    if squared:
        T1 = before(ua * x)
        gi_item = one * torch.where(is_a, -2 * (S1 - x * N), 2 * (x * M - T1))
        if need_loss:
            S2 = after(vbx * x)
            li = torch.where(is_a, one * (S2 - 2 * x * S1 + x * x * N), zero).clamp_min(0)
        if h is not None:
            h.index_add_(0, d, 2 * one * torch.where(is_a, N, M))
    else:
        gi_item = one * torch.where(is_a, -N, M)
        if need_loss:
            li = torch.where(is_a, one * (S1 - x * N), zero).clamp_min(0)
    g.index_add_(0, d, gi_item)
    return (idx, li) if need_loss else None


def pair_degree(lev: Tensor, K: int, groups: Groups, u: Optional[Tensor],
                v: Optional[Tensor], like: Tensor) -> Tensor:
    """Weighted pair degree ``deg_d = u_d Σ_{lev_j < lev_d} v_j + v_d Σ_{lev_i > lev_d} u_i``
    over *all* label-induced pairs of ``d``'s query (active or not), ``(n,)`` in ``like``'s
    dtype: the diagonal of the all-pairs degree matrix used by the global Hessian bounds.

    It does not depend on the scores: per-(query, level) weight totals and their prefix sums
    over the levels when that ``G × K`` table is small (``O(n + GK)``), else the dominance
    sums of :func:`active_pair_sums` with every pair active."""
    n = lev.numel()
    uu = like.new_ones(n) if u is None else u
    vv = like.new_ones(n) if v is None else v
    if n and groups.num_groups * K <= 4 * n + 4096:
        return _pair_degree_table(lev, K, groups, uu, vv)
    return _pair_degree_sorted(lev, K, groups, uu, vv)


def _pair_degree_table(lev, K, groups, uu, vv):
    G = groups.num_groups
    key = groups.group_index.to(lev.device) * K + lev  # (query, level) cell of each document

    def cells(x):  # (G, K) totals of x and their inclusive prefix sums over the levels
        t = x.new_zeros(G * K).index_add_(0, key, x).view(G, K)
        return t, t.cumsum(1)

    tv, cv = cells(vv)
    _, cu = cells(uu)
    v_below = (cv - tv).reshape(-1).index_select(0, key)  # Σ v over lower levels, same query
    u_above = (cu[:, -1:] - cu).reshape(-1).index_select(0, key)  # Σ u over higher levels
    return uu * v_below + vv * u_above


def _pair_degree_sorted(lev, K, groups, uu, vv):
    n = lev.numel()
    one = uu.new_ones(n)
    zero = uu.new_zeros(n)
    # a = 0 < b = 1 makes every label-induced pair active
    lo, up = active_pair_sums(zero, one, lev, K, groups, [vv], [uu])
    return uu * lo[0] + vv * up[0]
