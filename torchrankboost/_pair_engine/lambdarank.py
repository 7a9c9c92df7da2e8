r"""The exact NDCG-weighted exponential pair sum by dominance sums, without pairs.

Per query, with gains ``G = 2^y − 1``, discounts ``D(r) = 1 / log2(1 + r)`` at the current
ranks ``r`` (by decreasing score; ties by increasing label, then input order), optional
per-document weights ``w`` and an optional per-query normaliser ``Z`` (the ideal DCG)::

    F_q = 1/Z_q · Σ_{y_i > y_j} w_i w_j |G_i − G_j| |D(r_i) − D(r_j)| e^{−σ (s_i − s_j)}

The ranks (so the weights) are held fixed: they are piecewise constant in the scores, and
the gradient and Hessian are those of LambdaMART (Burges 2010) with the exponential pair
function.

**Factorisation.** Write ``a_i = w_i e^{−σ s_i}`` (a document as the preferred member),
``b_j = w_j e^{σ s_j}`` (as the other member). For a pair ``y_i > y_j`` where ``i`` ranks
above ``j`` (``D_i > D_j``) both factors are positive and
``(G_i − G_j)(D_i − D_j) = G_i D_i − G_i D_j − D_i G_j + G_j D_j``: a sum of products of
per-document terms, so ``Σ_j`` over those pairs is four *dominance sums* (label order × rank
order) of the channels ``(b, D b, G b, G D b)``; the pairs where ``i`` ranks below ``j``
have the opposite sign, and their sum is the level total (all ``y_j < y_i``, a cumulative
sum over the ``(query, level)`` buckets) minus the dominated part. Per document ``k``::

    U_k = a_k Σ_{j: y_j < y_k} W_kj b_j = a_k (2 C(dominated) − C(all lower))   (k preferred)
    L_k = b_k Σ_{i: y_i > y_k} W_ik a_i = b_k (2 C(dominating) − C(all higher)) (k the other)

with ``C(S) = G_k D_k S[c] − G_k S[D c] − D_k S[G c] + S[G D c]`` over the sums ``S`` of the
partner channels. The dominance sums come from
:func:`~torchrankboost._pair_engine.sorted_pairs.active_pair_sums` (the hinge kernels' 2-D
level × value sweep) with the rank as the value: O(n log n · ⌈log2 K⌉) time, O(n) memory,
no truncation, no Python loop over queries.

Then ``F_q = Σ_{k ∈ q} U_k``, ``∂F/∂s_k = σ (L_k − U_k)``, ``∂²F/∂s_k² = σ² (U_k + L_k)``,
and a Hessian-vector product is one more sweep with the partner channels multiplied by the
vector.

**Numerics.** Everything runs in float64 whatever the scores' dtype: the four-term
expansion cancels where neighbouring discounts nearly agree (deep ranks), which float64
absorbs (≈1e-10 relative at 10⁶ documents) and float32 would not. Scores are centred per
query at their mid-range and the centred exponents clipped at ±300, so the channels never
overflow; a query whose scores span more than 600/σ then gets a huge finite value (the true
one exceeds e^600) instead of ``inf − inf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import Graded
from .elementwise import exp2
from .levels import Levels, label_levels, levels_for
from .sorted_pairs import active_pair_sums, level_cuts

__all__ = ["LambdaRankSetup", "lambdarank_setup", "lambdarank_terms", "lambdarank_hvp",
           "ideal_dcg", "current_ranks"]

F64 = torch.float64
#: clip of the centred exponents σ (s − c) (float64 channels stay far below overflow)
EXP_CLIP = 300.0


@dataclass
class LambdaRankSetup:
    """The score-independent part: ``lev`` ``(n,)`` int64 label levels (``K`` of them),
    ``levels`` (the ``(query, level)`` buckets), ``gain`` ``(n,)`` float64 ``2^y − 1``,
    ``scale`` ``(n,)`` float64 the query factor of each document (``1/Z_q``, 0 where
    ``Z_q = 0``), ``weights`` ``(n,)`` float64 or ``None``, ``has`` ``(G,)`` bool (queries
    with a pair)."""

    groups: Groups
    lev: Tensor
    K: int
    levels: Levels
    gain: Tensor
    scale: Tensor
    weights: Optional[Tensor]
    has: Tensor
    level_gain: Tensor  # (K,) float64, the gain of each level
    disc: Tensor  # (n,) float64, D at each rank slot: 1 / log2(2 + position)
    start: Tensor  # (n,) int64, the first slot of each slot's query
    end: Tensor  # (n,) int64, one past its last slot
    # read on the host once, at bind time, so that an evaluation reads nothing there:
    lev_order: Optional[Tensor] = None  # (n,) the documents by increasing level (stable)
    cuts: Optional[List[int]] = None  # cumulative level counts (level_cuts)
    gain_list: Optional[List[float]] = None  # level_gain as floats


def ideal_dcg(gain: Tensor, groups: Groups, k: Optional[int] = None) -> Tensor:
    """``(G,)`` float64: the DCG of each query's documents sorted by decreasing gain, over the
    top ``k`` positions (all when ``k`` is ``None``); ``D(r) = 1 / log2(1 + r)``."""
    g64 = gain.to(F64)
    perm = groups.argsort(g64, descending=True)
    pos = groups.position.to(gain.device).to(F64) + 1.0
    term = g64[perm] / torch.log2(1.0 + pos)
    if k is not None:
        term = torch.where(pos <= k, term, torch.zeros_like(term))
    return groups.segment_sum(term)


def lambdarank_setup(labels: Tensor, groups: Groups, weights: Optional[Tensor], *,
                     normalize: bool) -> LambdaRankSetup:
    """Levels, gains, the per-query normaliser and the doc weights (float64)."""
    lev, K, has = label_levels(labels, groups, Graded())
    gain = exp2(labels.to(F64)) - 1.0
    if normalize:
        z = ideal_dcg(gain, groups)
        inv = torch.where(z > 0, 1.0 / torch.where(z > 0, z, torch.ones_like(z)),
                          torch.zeros_like(z))
        scale = groups.broadcast(inv)
    else:
        scale = torch.ones_like(gain)
    w = None if weights is None else weights.to(F64)
    level_gain = torch.zeros(max(K, 1), dtype=F64, device=gain.device).index_put_(
        (lev,), gain)
    gi = groups.group_index.to(gain.device)
    off = groups.offsets.to(gain.device)
    disc = 1.0 / torch.log2(2.0 + groups.position.to(gain.device).to(F64))
    return LambdaRankSetup(groups, lev, K, levels_for(Graded(), labels, groups), gain, scale,
                           w, has, level_gain, disc, off[gi], off[gi + 1],
                           lev_order=torch.argsort(lev, stable=True),
                           cuts=level_cuts(lev, K) if K >= 2 else None,
                           gain_list=level_gain.tolist())


def _sortable(x: Tensor) -> Tensor:
    """Order-preserving int64 bit patterns of float64 values (``-0.0`` as ``+0.0``)."""
    bits = x.to(F64).add(0.0).view(torch.int64)
    return bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)


def rank_order(s: Tensor, lev: Tensor, groups: Groups,
               lev_order: Optional[Tensor] = None) -> Tensor:
    """The documents in (query, current rank) order, ``(n,)`` int64: by decreasing score,
    ties by increasing level (the pessimistic order: a tied pair counts as not yet
    ordered), then input order. One stable integer sort of the score bits (plus one by query
    for several queries); the level pre-sort is added only when some scores tie. With
    ``lev_order`` (``argsort(lev, stable=True)``, bound once) the sorts start from it: the
    same order, the same number of sorts, and no test of the ties read on the host."""
    key = -_sortable(s.detach())
    one = groups.num_groups <= 1
    if lev_order is not None:
        p = lev_order[torch.sort(key.index_select(0, lev_order), stable=True)[1]]
        if not one:
            gi = groups.group_index.to(s.device)
            p = p[torch.sort(gi.index_select(0, p), stable=True)[1]]
        return p
    ks, p = torch.sort(key, stable=True)
    if not one:
        gi = groups.group_index.to(s.device)
        q = torch.argsort(gi.index_select(0, p), stable=True)
        p, ks = p.index_select(0, q), ks.index_select(0, q)
    tied = ks[1:] == ks[:-1]
    if not one:
        gp = gi.index_select(0, p)
        tied &= gp[1:] == gp[:-1]
    if p.numel() > 1 and bool(tied.any()):
        p = torch.argsort(lev, stable=True)
        p = p[torch.argsort(key[p], stable=True)]
        if not one:
            p = p[torch.argsort(gi[p], stable=True)]
    return p


def current_ranks(s: Tensor, lev: Tensor, groups: Groups,
                  lev_order: Optional[Tensor] = None) -> Tensor:
    """1-based rank of each document in its query (the order of :func:`rank_order`),
    ``(n,)`` float64."""
    pos = torch.empty(s.shape[0], dtype=F64, device=s.device)
    pos[rank_order(s, lev, groups, lev_order)] = groups.position.to(s.device).to(F64) + 1.0
    return pos


def _factors(x: Tensor, st: LambdaRankSetup, sigma: float, perm: Optional[Tensor]
             ) -> Tuple[Tensor, Tensor]:
    """``a = w e^{−σ (s − c)}``, ``b = w e^{σ (s − c)}`` (float64) of the scores ``x`` laid
    out like the documents (``perm`` ``None``) or in the order ``perm`` (queries in place),
    with ``c`` the query mid-range and the exponent clipped at ±EXP_CLIP."""
    g = st.groups
    x = x.detach().to(F64)
    mid = 0.5 * (g.segment_max(x, empty=0.0) + g.segment_min(x, empty=0.0))
    z = (sigma * (x - g.broadcast(mid))).clamp_(-EXP_CLIP, EXP_CLIP)
    a, b = torch.exp(-z), torch.exp(z)
    if st.weights is not None:
        w = st.weights if perm is None else st.weights.index_select(0, perm)
        a, b = a * w, b * w
    return a, b


def _channels(c: Tensor, D: Tensor, G: Tensor) -> List[Tensor]:
    return [c, D * c, G * c, (G * D) * c]


def _combine(D: Tensor, G: Tensor, S: List[Tensor]) -> Tensor:
    """``Σ_p (G − G_p)(D − D_p) c_p`` from the sums ``S`` of ``_channels(c)``."""
    return (G * D) * S[0] - G * S[1] - D * S[2] + S[3]


# -------------------------------------------------------------- level rows (K <= 64)
#: the rows kernel serves up to this many label levels, the bit sweep above
ROWS_MAX_K = 64


class _RankLayout:
    """Documents in (query, rank) order: ``lev`` per rank slot and, per level ``k``, the
    slots holding it (``at[k]``), their query (``gi[k]``) and discount (``D[k]``)."""

    def __init__(self, lev_r: Tensor, K: int, st: "LambdaRankSetup"):
        self.lev = lev_r
        if st.cuts is None:
            self.at = [torch.nonzero(lev_r == k).flatten() for k in range(K)]
        else:  # the slots of each level: one stable sort cut at the bound level counts
            by = torch.argsort(lev_r.to(torch.uint8), stable=True)
            self.at = [by[st.cuts[k]:st.cuts[k + 1]] for k in range(K)]
        gi = st.groups.group_index.to(lev_r.device)
        self.one = st.groups.num_groups == 1
        self.gi = [None if self.one else gi.index_select(0, at) for at in self.at]
        self.D = [st.disc.index_select(0, at) for at in self.at]


def _query_ends(tab: Tensor, st: "LambdaRankSetup") -> Tensor:
    """``P[end_q] + P[start_q]`` per query ``(G,)`` of a per-query prefix table ``P``
    (:meth:`~torchrankboost.groups.Groups.prefix_table`: query ``q``'s prefix at flat
    position ``p`` is entry ``p + q``)."""
    off = st.groups.offsets.to(tab.device)
    q = torch.arange(off.numel() - 1, device=tab.device)
    return tab.index_select(0, off[1:] + q) + tab.index_select(0, off[:-1] + q)


def _sweep_rows(lay: _RankLayout, st: "LambdaRankSetup", D: Tensor, lower_src: Tensor,
                upper_src: Tensor) -> Tuple[Tensor, Tensor]:
    """In rank order, per document ``k``: ``Σ_{y_j < y_k} |G_k − G_j| (D_k − D_j) b_j ·
    sign(j later)`` over ``b = lower_src`` and the same over the higher-level partners of
    ``upper_src`` (sign: earlier). ``G`` is constant on a level, so per partner level ``m``
    two cumulative sums (``c`` and ``D c``) serve every reader level:
    ``|G_k − G_m| (D_k R[c] − R[D c])`` with ``R`` = later minus earlier in the query.
    O(n K) time, O(n) memory."""
    K = len(lay.at)
    n = D.shape[0]
    gain = st.gain_list if st.gain_list is not None else st.level_gain.tolist()
    acc = {side: [D.new_zeros(at.numel()) for at in lay.at] for side in ("lo", "up")}
    for m in range(K):
        if lay.at[m].numel() == 0:
            continue
        mask = (lay.lev == m).to(F64)
        for side, src in (("lo", lower_src), ("up", upper_src)):
            readers = [k for k in (range(m + 1, K) if side == "lo" else range(m))
                       if lay.at[k].numel()]
            if not readers:
                continue
            c = src * mask
            R = []
            for x in (c, c * D):  # per-query prefix tables: segment-local sums
                tab = st.groups.prefix_table(x)
                R.append((tab, _query_ends(tab, st)))
            for k in readers:
                a1 = lay.at[k] + 1 + (0 if lay.one else lay.gi[k])
                R0, R1 = [(q[0] if lay.one else q.index_select(0, lay.gi[k]))
                          - 2.0 * tab.index_select(0, a1) for tab, q in R]
                acc[side][k].add_(abs(gain[k] - gain[m]) * (lay.D[k] * R0 - R1))
    out = []
    for side in ("lo", "up"):
        o = torch.zeros_like(D)
        for at, v in zip(lay.at, acc[side]):
            o.index_copy_(0, at, v)
        out.append(o)
    return out[0], out[1]


# -------------------------------------------------------------- generic sweep (any K)
def _level_sums(ch: List[Tensor], lv: Levels, *, below: bool) -> List[Tensor]:
    """Per document: the sums of each channel over its query's documents of a lower
    (``below``) or higher level, through the ``(query, level)`` bucket totals."""
    out = []
    for x in ch:
        tot = x.new_zeros(lv.num_buckets).index_add_(0, lv.bucket, x)
        cum = lv.bgroups.segment_cumsum(tot, exclusive=True, reverse=not below)
        out.append(cum.index_select(0, lv.bucket))
    return out


def _sweep_bits(st: LambdaRankSetup, pos: Tensor, D: Tensor, G: Tensor, lo: List[Tensor],
                up: List[Tensor]) -> Tuple[Tensor, Tensor]:
    """The same sums in document order for any number of levels: the dominance sums of
    :func:`active_pair_sums` (rank as the value) and the level totals."""
    dom_lo, dom_up = active_pair_sums(pos, pos, st.lev, st.K, st.groups, lo, up)
    all_lo = _level_sums(lo, st.levels, below=True)
    all_up = _level_sums(up, st.levels, below=False)
    return (2.0 * _combine(D, G, dom_lo) - _combine(D, G, all_lo),
            2.0 * _combine(D, G, dom_up) - _combine(D, G, all_up))


class _Frame:
    """What a sweep needs at given scores: the rank order, discounts, factors."""

    def __init__(self, s: Tensor, st: LambdaRankSetup, sigma: float):
        self.st = st
        self.rows = st.K <= ROWS_MAX_K
        perm = rank_order(s, st.lev, st.groups, st.lev_order)
        if self.rows:  # work in rank order (per-query values stay in place)
            self.perm = perm
            self.lay = _RankLayout(st.lev.index_select(0, perm), st.K, st)
            self.D = st.disc
            self.a, self.b = _factors(s.detach().index_select(0, perm), st, sigma, perm)
        else:  # document order
            self.pos = torch.empty_like(st.disc)
            self.pos[perm] = st.groups.position.to(s.device).to(F64) + 1.0
            self.D = torch.empty_like(st.disc)
            self.D[perm] = st.disc
            self.a, self.b = _factors(s, st, sigma, None)

    def take(self, v: Tensor) -> Tensor:
        """A document-order vector in this frame's order."""
        return v.index_select(0, self.perm) if self.rows else v

    def back(self, x: Tensor) -> Tensor:
        """A frame-order vector in document order."""
        if not self.rows:
            return x
        out = torch.empty_like(x)
        out[self.perm] = x
        return out

    def sweep(self, a_fac: Tensor, lower_src: Tensor, upper_src: Tensor, b_fac: Tensor
              ) -> Tuple[Tensor, Tensor]:
        """``U_k = a_fac_k Σ_{y_j < y_k} W_kj lower_src_j`` and
        ``L_k = b_fac_k Σ_{y_i > y_k} W_ik upper_src_i`` in frame order."""
        if self.rows:
            c_lo, c_up = _sweep_rows(self.lay, self.st, self.D, lower_src, upper_src)
        else:
            G = self.st.gain
            c_lo, c_up = _sweep_bits(self.st, self.pos, self.D, G,
                                     _channels(lower_src, self.D, G),
                                     _channels(upper_src, self.D, G))
        return a_fac * c_lo * self.st.scale, b_fac * c_up * self.st.scale


def lambdarank_terms(s: Tensor, st: LambdaRankSetup, sigma: float
                     ) -> Tuple[Tensor, Tensor, Tensor]:
    """``(per_query (G,), U (n,), L (n,))`` in float64 at the (detached) scores ``s``:
    ``F_q = Σ_{k∈q} U_k``, gradient ``σ (L − U)``, Hessian diagonal ``σ² (U + L)``."""
    n = s.shape[0]
    if n == 0 or st.K < 2:
        z = torch.zeros(n, dtype=F64, device=s.device)
        return torch.zeros(st.groups.num_groups, dtype=F64, device=s.device), z, z.clone()
    fr = _Frame(s, st, sigma)
    U, L = fr.sweep(fr.a, fr.b, fr.a, fr.b)
    U, L = fr.back(U), fr.back(L)
    return st.groups.segment_sum(U), U, L


def lambdarank_hvp(s: Tensor, st: LambdaRankSetup, sigma: float, v: Tensor) -> Tensor:
    """``H v`` (float64 ``(n,)``) for the Hessian of ``Σ_q F_q`` at fixed ranks:
    ``σ² ((U + L) v − Σ_partners W e^{…} v_partner)``, two sweeps."""
    n = s.shape[0]
    if n == 0 or st.K < 2:
        return torch.zeros(n, dtype=F64, device=s.device)
    fr = _Frame(s, st, sigma)
    vr = fr.take(v.to(F64))
    U, L = fr.sweep(fr.a, fr.b, fr.a, fr.b)
    Uv, Lv = fr.sweep(fr.a, fr.b * vr, fr.a * vr, fr.b)
    return fr.back((sigma * sigma) * ((U + L) * vr - Uv - Lv))
