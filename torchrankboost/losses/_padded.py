r"""The padded fast path of the listwise losses (ListNet, ListMLE, RankNet).

While the padding stays within a small factor of ``n`` (``G · L ≤ max(factor · n, minimum)``,
``L`` the longest query), the queries are laid out in a ``(G, L)`` table and the losses run
as row operations (``logsumexp``, one row sort, ``logcumsumexp``, blocks of ``(b, c, m)``
pair differences) instead of segment reductions and index bookkeeping. When every query has
the same length the table is a view of the flat tensor (no copy at all). The layout depends
only on the groups: it is cached on the :class:`~torchrankboost.Groups` object, so repeated
calls with the same groups pay for it once.

Everything here is exact (the same sums as the segmented path, up to rounding order) and
differentiable to any order where autograd is used.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.elementwise import exp2, sigmoid, softplus
from ..groups import Groups, sortable_bits32


class PadLayout:
    """The ``(G, L)`` table of a :class:`Groups`.

    ``equal``: every query has ``L`` documents (the table is ``x.view(G, L)``). Otherwise
    ``flat`` ``(n,)`` is each document's index in the flattened table (row = query, column =
    position) and ``mask`` ``(G, L)`` marks the real entries.
    """

    def __init__(self, g: Groups):
        self.G, self.L, self.n = g.num_groups, g.max_size, g.num_docs
        self.sizes = g.sizes
        self.equal = self.G * self.L == self.n
        self.flat: Optional[Tensor] = None
        self.mask: Optional[Tensor] = None
        if not self.equal:
            self.flat = g.group_index * self.L + g.position
            m = torch.zeros(self.G * self.L, dtype=torch.bool, device=g.device)
            self.mask = m.index_fill(0, self.flat, True).view(self.G, self.L)

    def pad(self, x: Tensor, fill: float = 0.0) -> Tensor:
        """Flat ``(n,)`` to ``(G, L)`` (``fill`` in the padding). Differentiable."""
        if self.equal:
            return x.view(self.G, self.L)
        out = x.new_full((self.G * self.L,), fill)
        return out.index_copy(0, self.flat, x).view(self.G, self.L)

    def unpad(self, t: Tensor) -> Tensor:
        """``(G, L)`` back to flat ``(n,)``. Differentiable."""
        if self.equal:
            return t.reshape(-1)
        return t.reshape(-1).index_select(0, self.flat)


def pad_layout(g: Groups, factor: int, minimum: int) -> Optional[PadLayout]:
    """The cached :class:`PadLayout` of ``g`` when ``G · L ≤ max(factor · n, minimum)``,
    else ``None`` (the segmented path)."""
    def build():
        G, L, n = g.num_groups, g.max_size, g.num_docs
        if n == 0 or G * L > max(factor * n, minimum):
            return False
        return PadLayout(g)
    lay = g._cached(("pad_layout", factor, minimum), build)
    return lay or None


# ============================================================================ ListNet
def listnet_targets(lay: PadLayout, y: Tensor, targets: str) -> Tuple[Tensor, Tensor, Tensor]:
    """``(P (G, L), Psum (G,), has (G,))``: the target probabilities in the table (0 in the
    padding), their row sums and the queries with a target."""
    y2d = lay.pad(y, 0.0)
    z = y2d if lay.mask is None else y2d.masked_fill(~lay.mask, float("-inf"))
    if targets == "softmax":
        P = torch.softmax(z, 1)
        if lay.mask is not None:
            P = torch.where(lay.mask, P, torch.zeros_like(P))  # empty rows: NaN -> 0
        has = lay.sizes > 0
    else:
        top = z.amax(1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        gain = exp2(y2d - top) - exp2(-top)
        if lay.mask is not None:
            gain = torch.where(lay.mask, gain, torch.zeros_like(gain))
        tot = gain.sum(1, keepdim=True)
        has = tot.squeeze(1) > 0
        P = gain / torch.where(tot > 0, tot, torch.ones_like(tot))
    return P, P.sum(1), has


def listnet_per_group(lay: PadLayout, s: Tensor, P: Tensor, Psum: Tensor, has: Tensor
                      ) -> Tensor:
    r"""``L_q = −Σ_i P_i log softmax_q(s)_i`` per query ``(G,)`` (0 without a target): one
    fused row ``log_softmax``. The padding holds the dtype's lowest finite value:
    ``e^{s − max}`` is 0 there and ``P · log softmax = 0`` (no ``0 · ∞``)."""
    s2d = lay.pad(s, torch.finfo(s.dtype).min)
    per = -(P * torch.log_softmax(s2d, 1)).sum(1)
    return per if lay.mask is None else torch.where(has, per, torch.zeros_like(per))


def listnet_softmax(lay: PadLayout, s: Tensor) -> Tensor:
    """Per-query softmax of ``s``, flat ``(n,)``."""
    return lay.unpad(torch.softmax(lay.pad(s, float("-inf")), 1))


# ============================================================================ ListMLE
def label_ranks(y: Tensor) -> Tuple[Tensor, float]:
    """``(level (n,) int64, top)``: each label's index among the distinct labels and the
    largest level (bind time: the distinct labels are read on the host once)."""
    uniq, lev = torch.unique(y, return_inverse=True)
    return lev, float(max(uniq.numel() - 1, 0))


def listmle_levels(lay: PadLayout, lev: Tensor, top: float, dtype):
    """``(level (G, L), real_sorted (G, L) or None, top)``: the levels of
    :func:`label_ranks` in the table (``+inf`` in the padding, which sorts last), with
    padding which columns of a sorted row are real (the first ``size`` ones), and the
    largest level. No host read."""
    lev2d = lay.pad(lev.to(dtype), float("inf"))
    if lay.mask is None:
        return lev2d, None, top
    col = torch.arange(lay.L, device=lev.device)
    return lev2d, col.unsqueeze(0) < lay.sizes.unsqueeze(1), top


def _order(s2d: Tensor, lev2d: Tensor, top: float) -> Tensor:
    """Row permutation by increasing level, ties by increasing score: the label order of
    ListMLE reversed (exactly equal (level, score) pairs may come in any order: they give
    the same loss). No value is read on the host (no device synchronisation): for scores
    of at most 32 bits one integer sort of ``level · 2³² + bits(score)`` (exact: the
    order-preserving bits of the score below the level, the padding's ``+inf`` level
    last); for float64 scores a stable sort by score, then a stable sort by level."""
    sd = s2d.detach()
    if sd.dtype != torch.float64:
        lev = torch.where(torch.isfinite(lev2d), lev2d, torch.full_like(lev2d, top + 1.0))
        key = (lev.to(torch.int64) << 32) + sortable_bits32(sd, check_nan=False)
        return torch.sort(key, dim=1)[1]
    by_score = torch.sort(sd, dim=1, stable=True)[1]
    by_level = torch.sort(lev2d.gather(1, by_score), dim=1, stable=True)[1]
    return by_score.gather(1, by_level)


class _ListMLERows(torch.autograd.Function):
    r"""Rows in reversed label order (``sp``), real columns first: ``Σ_k (LSE_{j ≤ k} sp_j −
    sp_k)`` per row, one ``logcumsumexp``. Backward: ``∂/∂sp_m = e^{sp_m} Σ_{k ≥ m}
    e^{−LSE_k} − 1``, one reverse ``logcumsumexp``; written in torch ops of ``sp`` (the
    prefix recomputed when a graph is asked for), so it differentiates again."""

    @staticmethod
    def forward(ctx, sp, real):
        lse = torch.logcumsumexp(sp, 1)
        terms = lse - sp
        if real is not None:
            terms = torch.where(real, terms, torch.zeros_like(terms))
        ctx.save_for_backward(sp, lse, real)
        return terms.sum(1)

    @staticmethod
    def backward(ctx, gout):
        sp, lse, real = ctx.saved_tensors
        if torch.is_grad_enabled():
            lse = torch.logcumsumexp(sp, 1)
        a = -lse
        if real is not None:
            a = torch.where(real, a, torch.full_like(a, float("-inf")))
        suf = torch.logcumsumexp(a.flip(1), 1).flip(1)
        g = torch.exp(sp + suf) - 1.0
        if real is not None:
            g = torch.where(real, g, torch.zeros_like(g))
        return g * gout.unsqueeze(1), None


def listmle_per_group(lay: PadLayout, s: Tensor, lev2d: Tensor, real: Optional[Tensor],
                      top: float) -> Tensor:
    r"""``Σ_k (LSE_{j ≥ k} s_{π(j)} − s_{π(k)})`` per query ``(G,)``: one row sort (label
    order reversed, so the suffixes are prefixes) and one ``logcumsumexp`` each way."""
    s2d = lay.pad(s, 0.0)
    sp = s2d.gather(1, _order(s2d, lev2d, top))
    return _ListMLERows.apply(sp, real)


# ============================================================================ RankNet
class RankNetPlan:
    """Score-independent tables of RankNet's padded path: the documents of each query sorted
    by decreasing (binarised, for bipartite pairs) label, so that every preferred pair
    ``(i, j)`` has ``i`` before ``j`` and only the upper triangle of each query's ``L × L``
    block is visited (rows in chunks, columns from the chunk's first row)."""

    def __init__(self, lay: PadLayout, y: Tensor, w: Optional[Tensor], block_pairs: int):
        self.lay = lay
        yk = lay.pad(y, float("-inf"))
        self.perm = torch.sort(yk, dim=1, descending=True, stable=True)[1]
        ysort = yk.gather(1, self.perm)
        self.y_row = ysort                                         # padding: -inf, no row
        self.y_col = torch.where(torch.isfinite(ysort), ysort,
                                 torch.full_like(ysort, float("inf")))  # padding: +inf, no col
        self.w = None if w is None else lay.pad(w, 0.0).gather(1, self.perm)
        self.has = (ysort[:, :1] > self.y_col).any(1)
        G, L = lay.G, lay.L
        chunks = 1 if L < 16 else 8
        c = -(-L // chunks)
        self.blocks = []
        for r0 in range(0, L, c):
            r1, m = min(r0 + c, L), L - r0
            b = max(1, block_pairs // max((r1 - r0) * m, 1))
            for q0 in range(0, G, b):
                self.blocks.append((q0, min(q0 + b, G), r0, r1))

    def sorted_table(self, s: Tensor) -> Tensor:
        return self.lay.pad(s, 0.0).gather(1, self.perm)

    def to_flat(self, t: Tensor) -> Tensor:
        """A sorted ``(G, L)`` table back to flat document order."""
        return self.lay.unpad(torch.zeros_like(t).scatter(1, self.perm, t))

    def block(self, q0, q1, r0, r1, dtype):
        """``(M (b, c, m), rows, cols)``: the pair weights ``[y_i > y_j] w_i w_j`` of the
        block and its row/column slices."""
        M = (self.y_row[q0:q1, r0:r1, None] > self.y_col[q0:q1, None, r0:]).to(dtype)
        if self.w is not None:
            wr = self.w[q0:q1, r0:r1].to(dtype)
            wc = self.w[q0:q1, r0:].to(dtype)
            M = M * wr[:, :, None] * wc[:, None, :]
        return M


def ranknet_terms(plan: RankNetPlan, s: Tensor, sigma: float, need_hess: bool):
    """``(loss (G,), grad (n,), hess (n,) or None)`` of ``Σ M softplus(σ (s_j − s_i))``,
    blockwise with closed-form derivatives (no autograd graph)."""
    S = plan.sorted_table(s.detach())
    G = plan.lay.G
    loss = S.new_zeros(G)
    grad = torch.zeros_like(S)
    hdiag = torch.zeros_like(S) if need_hess else None
    for q0, q1, r0, r1 in plan.blocks:
        M = plan.block(q0, q1, r0, r1, S.dtype)
        z = sigma * (S[q0:q1, None, r0:] - S[q0:q1, r0:r1, None])
        loss[q0:q1] += (softplus(z) * M).sum((1, 2))
        p = sigmoid(z)
        P = p * M
        grad[q0:q1, r0:r1] -= sigma * P.sum(2)
        grad[q0:q1, r0:] += sigma * P.sum(1)
        if need_hess:
            Q = (sigma * sigma) * P * (1.0 - p)
            hdiag[q0:q1, r0:r1] += Q.sum(2)
            hdiag[q0:q1, r0:] += Q.sum(1)
    return loss, plan.to_flat(grad), None if hdiag is None else plan.to_flat(hdiag)


def ranknet_hvp(plan: RankNetPlan, s: Tensor, sigma: float, u: Tensor) -> Tensor:
    """``H u``: each pair adds ``q (u_i − u_j)`` at ``i`` and its negative at ``j``."""
    S = plan.sorted_table(s.detach())
    U = plan.sorted_table(u)
    out = torch.zeros_like(S)
    for q0, q1, r0, r1 in plan.blocks:
        M = plan.block(q0, q1, r0, r1, S.dtype)
        z = sigma * (S[q0:q1, None, r0:] - S[q0:q1, r0:r1, None])
        p = sigmoid(z)
        d = (sigma * sigma) * M * p * (1.0 - p) * (U[q0:q1, r0:r1, None] - U[q0:q1, None, r0:])
        out[q0:q1, r0:r1] += d.sum(2)
        out[q0:q1, r0:] -= d.sum(1)
    return plan.to_flat(out)


def ranknet_bound(plan: RankNetPlan, sigma: float, dtype) -> Tensor:
    """``σ² c / 2`` summed over each document's pairs, flat ``(n,)``."""
    out = torch.zeros(plan.lay.G, plan.lay.L, dtype=dtype, device=plan.perm.device)
    for q0, q1, r0, r1 in plan.blocks:
        M = plan.block(q0, q1, r0, r1, dtype) * (sigma * sigma / 2.0)
        out[q0:q1, r0:r1] += M.sum(2)
        out[q0:q1, r0:] += M.sum(1)
    return plan.to_flat(out)
