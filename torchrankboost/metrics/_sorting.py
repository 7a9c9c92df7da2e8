"""The one segmented sort of the metrics: each query's documents by score, descending.

:func:`order_by_score` sorts (optionally only the top ``k`` of each query) with a padded row-wise
kernel while the padding stays small, else one global segmented sort; :class:`Sorted`
adds the tie blocks (runs of equal scores inside a query) and per-block sums.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups, sortable_bits32

_PAD_FACTOR = 4  # internal padded sorts only while G * max_size <= 4 n (or _PAD_MIN)
_PAD_MIN = 1 << 20
_SORT32 = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16,
           torch.int8, torch.uint8)


def order_by_score(s: Tensor, g: Groups, k: Optional[int] = None) -> Tuple[Tensor, Groups]:
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
    gk = g if kk >= L else g._cached(("top", kk),  # the groups of the top kk, made once
                                      lambda: Groups.from_sizes(g.sizes.clamp(max=kk)))
    if G * L <= max(_PAD_FACTOR * n, _PAD_MIN):
        gi, pos = g.group_index, g.position
        if kk < L and s.dtype in _SORT32 and L < (1 << 30):
            shift = max(1, (L - 1).bit_length())
            key = (sortable_bits32(s) << shift) + (L - 1 - pos)
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


class Sorted:
    """One segmented sort by score (descending, stable) and its tie blocks."""

    def __init__(self, s: Tensor, groups: Groups):
        self.groups = groups
        self.perm, _ = order_by_score(s, groups)
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
