r"""The ranking margin over crucial pairs, per query.

``μ_q = min_{(i, j) crucial in q} (s_i − s_j)`` (Rudin & Schapire 2009: the margin of a
combination of weak rankers is ``μ / ‖λ‖₁``; positive iff every crucial pair is ordered
correctly). ``+inf`` for a query without a pair. Shapes: scores ``(n,)`` float, levels
``(n,)`` int64 in ``[0, K)`` (:func:`~.levels.label_levels`), result ``(G,)``.

For label-induced pairs the minimum is, per query and level ``k``, the lowest score of level
``k`` minus the highest score of the levels below ``k``:

* a dense ``(G, K)`` table of per-cell minima / maxima and a running maximum over the
  levels, O(n + GK) (:func:`_margin_table`);
* many levels (real-valued labels): one sort by (query, level), a segmented running maximum
  of the scores, each document against the maximum over strictly lower levels,
  O(n log n) (:func:`_margin_sorted`).

Explicit pairs (:func:`explicit_margin`) are a segment minimum of ``s_hi − s_lo``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..groups import Groups
from .levels import level_cells

__all__ = ["label_margin", "explicit_margin", "segment_cummax"]

INF = float("inf")


def segment_cummax(x: Tensor, groups: Groups) -> Tensor:
    """Inclusive running maximum restarting at each query (Hillis–Steele, ``⌈log2 L⌉``
    steps; ``x`` in the query layout)."""
    pos = groups.position
    out = x
    step = 1
    while step < groups.max_size:
        shifted = torch.cat([out.new_full((step,), -INF), out[:-step]])
        out = torch.where(pos >= step, torch.maximum(out, shifted), out)
        step *= 2
    return out


def _margin_table(s: Tensor, lev: Tensor, K: int, groups: Groups) -> Tensor:
    G = groups.num_groups
    cell = level_cells(lev, K, groups)
    mn = s.new_full((G * K,), INF).scatter_reduce(0, cell, s, "amin", include_self=True)
    mx = s.new_full((G * K,), -INF).scatter_reduce(0, cell, s, "amax", include_self=True)
    mn, mx = mn.view(G, K), mx.view(G, K)
    mx_lt = torch.cat([torch.full_like(mx[:, :1], -INF), torch.cummax(mx, 1).values[:, :-1]], 1)
    diff = mn - mx_lt
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, INF))
    return diff.min(1).values if K else s.new_full((G,), INF)


def _margin_sorted(s: Tensor, lev: Tensor, K: int, groups: Groups) -> Tensor:
    key = level_cells(lev, max(K, 1), groups)
    perm = torch.argsort(key)
    ks, ss = key[perm], s[perm]
    run_start = torch.ones_like(ks, dtype=torch.bool)
    run_start[1:] = ks[1:] != ks[:-1]
    run_id = torch.cumsum(run_start.long(), 0) - 1
    cm = segment_cummax(ss, groups)
    first = torch.nonzero(run_start).flatten()
    prev = torch.where(groups.position[first] > 0, cm[(first - 1).clamp_min(0)],
                       cm.new_full(first.shape, -INF))
    best_below = prev[run_id]
    d = torch.where(torch.isfinite(best_below), ss - best_below, torch.full_like(ss, INF))
    return groups.segment_min(d)


def label_margin(s: Tensor, lev: Tensor, K: int, groups: Groups, *,
                 many: Optional[bool] = None) -> Tensor:
    """Per-query margin ``(G,)`` over the label-induced pairs of ``lev``. ``many`` picks the
    sorted kernel (default: when the ``(G, K)`` table would be larger than ``4n + 4096``)."""
    if many is None:
        many = groups.num_groups * K > 4 * s.numel() + 4096
    if many:
        return _margin_sorted(s, lev, K, groups)
    return _margin_table(s, lev, K, groups)


def explicit_margin(s: Tensor, hi: Tensor, lo: Tensor, groups: Groups,
                    weight: Optional[Tensor] = None) -> Tensor:
    """Per-query margin ``(G,)`` over an explicit pair list (pairs of weight 0 ignored)."""
    d = s[hi] - s[lo]
    if weight is not None:
        d = torch.where(weight.to(d.device) > 0, d, torch.full_like(d, INF))
    return s.new_full((groups.num_groups,), INF).scatter_reduce(
        0, groups.group_index[hi], d, "amin", include_self=True)
