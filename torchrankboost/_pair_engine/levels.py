"""Per-query label levels: the one place where labels become levels, buckets and counts.

Label-induced pairs (graded labels, or a bipartite threshold) only depend on which *label
level* a document has inside its query (Freund, Iyer, Schapire & Singer 2003; Rudin 2009):
document ``i`` is preferred to ``j`` of the same query iff ``lev_i > lev_j``. Two layouts:

* **dense levels** (:func:`label_levels`): ``lev`` ``(n,)`` int64 in ``[0, K)``, the dense
  ranks of the distinct labels of the whole batch (``K`` of them; ``lev = 1[label > t]``,
  ``K = 2`` for ``Bipartite(t)``). The cell ``gi · K + lev`` indexes a dense ``(G, K)``
  table (:func:`level_cells`, :func:`cell_totals`, :func:`pairs_per_group`).
* **buckets** (:class:`Levels`): the non-empty ``(query, level)`` cells numbered
  ``0..B-1`` in (query, ascending level) order, ``B ≤ n``; the buckets of a query are
  contiguous, so they form a ragged structure of their own (``Levels.bgroups``) on which
  "all levels strictly above / below mine" is an exclusive segmented scan. Built by one
  segmented sort (:func:`build_levels`, any key) or from dense cells without a sort
  (:func:`levels_from_cells`).

:func:`label_pair_chunks` enumerates the pairs ``(hi, lo)`` themselves in bounded chunks,
and :func:`label_pairs` materialises them (O(#pairs) memory), for the algorithms and metrics
whose statistics are pair-specific (RankBoost+'s tie factors, pair-gap precision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import Bipartite, ExplicitPairs, Graded, resolve_pairs

__all__ = ["Levels", "build_levels", "levels_for", "small_integer_levels", "dense_levels",
           "label_levels", "level_cells", "cell_totals", "pairs_per_group",
           "levels_from_cells", "label_pair_chunks", "label_pairs"]


@dataclass
class Levels:
    """Documents bucketed per ``(group, label level)``.

    Attributes:
        bucket: ``(n,)`` int64, the bucket of each document (original order).
        bgroups: :class:`Groups` over the ``B`` buckets (buckets of query ``g`` contiguous,
            in ascending level order).
        num_buckets: ``B``.
    """

    bucket: Tensor
    bgroups: Groups
    num_buckets: int


def build_levels(key: Tensor, groups: Groups) -> Levels:
    """Bucket documents by ``(group, key)`` with one segmented sort (O(n log n))."""
    n = key.shape[0]
    dev = key.device
    if n == 0:
        return Levels(torch.zeros(0, dtype=torch.long, device=dev),
                      Groups.from_sizes(torch.zeros(groups.num_groups, dtype=torch.long,
                                                    device=dev)), 0)
    perm = groups.argsort(key)
    ks = key[perm]
    gs = groups.group_index.to(dev)[perm]
    new = torch.ones(n, dtype=torch.bool, device=dev)
    new[1:] = (ks[1:] != ks[:-1]) | (gs[1:] != gs[:-1])
    bsorted = torch.cumsum(new.to(torch.long), 0) - 1
    bucket = torch.empty(n, dtype=torch.long, device=dev)
    bucket[perm] = bsorted
    B = int(bsorted[-1]) + 1
    bgroup = gs[new]
    sizes = torch.bincount(bgroup, minlength=groups.num_groups)
    return Levels(bucket, Groups.from_sizes(sizes).fix_sizes(), B)


def levels_for(pairs, labels: Tensor, groups: Groups) -> Levels:
    """The :class:`Levels` of a label-induced pair spec (``Graded`` or ``Bipartite``): the
    dense levels of :func:`label_levels` bucketed through the ``(G, K)`` cells when that
    table is small (no sort), else by one segmented sort (:func:`build_levels`)."""
    lev, K, _ = label_levels(labels, groups, pairs)
    G = groups.num_groups
    if G * K <= 4 * lev.numel() + 4096:
        return levels_from_cells(level_cells(lev, K, groups), G, K)
    return build_levels(lev, groups)


def small_integer_levels(labels: Tensor) -> Optional[Tensor]:
    """Dense ranks of integer-valued labels with a small range by counting (O(n + range),
    no sort), or ``None`` when the labels are not such."""
    if labels.dtype.is_floating_point and not bool((labels == labels.round()).all()):
        return None
    lo, hi = int(labels.min()), int(labels.max())
    span = hi - lo + 1
    if span > max(1024, labels.numel()):
        return None
    off = (labels - lo).to(torch.int64)
    present = torch.bincount(off, minlength=span) > 0
    rank = torch.cumsum(present, 0) - 1
    return rank.index_select(0, off)


def dense_levels(labels: Tensor) -> Tuple[Tensor, int]:
    """Dense ranks of the distinct label values of the whole batch: ``(lev (n,) int64, K)``
    with ``lev`` in ``[0, K)`` ordered like the labels (``K = 0`` for no documents). Small
    integer ranges are counted (:func:`small_integer_levels`), other labels sorted."""
    if labels.dtype == torch.bool:
        labels = labels.to(torch.int64)
    if not labels.numel():
        return torch.zeros(0, dtype=torch.int64, device=labels.device), 0
    lev = small_integer_levels(labels)
    if lev is None:
        _, lev = torch.unique(labels, return_inverse=True)
        lev = lev.to(torch.int64).reshape(-1)
    return lev, int(lev.max()) + 1


def label_levels(labels: Tensor, groups: Groups, pairs) -> Tuple[Tensor, int, Tensor]:
    """Integer levels of the documents for label-induced pairs.

    Returns ``(lev (n,) int64, K, has_pairs (G,) bool)``: ``Graded`` ranks the distinct
    label values of the whole batch (``K`` of them); ``Bipartite(t)`` uses
    ``lev = 1[label > t]`` (``K = 2``). ``has_pairs[g]`` says whether query ``g`` has two
    documents of different levels.
    """
    if isinstance(pairs, Bipartite):
        lev = (labels > pairs.threshold).to(torch.int64)
        K = 2
    elif isinstance(pairs, Graded):
        if labels.dtype == torch.bool:
            labels = labels.to(torch.int64)
        lev, K = dense_levels(labels)
    else:  # pragma: no cover - callers dispatch explicit pairs elsewhere
        raise ValueError(f"label levels need Graded or Bipartite pairs, got {pairs!r}")
    if groups.num_groups:
        # a query has pairs iff some document's level differs from its query's first one
        differs = lev != lev.index_select(0, groups.doc_start.to(lev.device))
        has = torch.zeros(groups.num_groups, dtype=torch.float32, device=lev.device).index_add_(
            0, groups.group_index.to(lev.device), differs.to(torch.float32)) > 0
    else:
        has = torch.zeros(0, dtype=torch.bool, device=labels.device)
    return lev, K, has


def level_cells(lev: Tensor, K: int, groups: Groups) -> Tensor:
    """The ``(query, level)`` cell of each document, ``gi · K + lev`` (``(n,)`` int64): the
    row-major index into a dense ``(G, K)`` table."""
    return groups.group_index.to(lev.device) * K + lev


def cell_totals(x: Tensor, cell: Tensor, G: int, K: int) -> Tensor:
    """``(G, K)`` totals of ``x`` (``(n,)``) per (query, level) cell."""
    return x.new_zeros(G * K).index_add_(0, cell, x).view(G, K)


def pairs_per_group(cell: Tensor, G: int, K: int) -> Tensor:
    """Number of label-induced pairs of each query, ``Σ_k c_k Σ_{k' < k} c_{k'}`` with
    ``c_k`` the documents of level ``k`` (``(G,)`` int64, O(n + GK))."""
    cnt = torch.bincount(cell, minlength=G * K).view(G, K)
    return (cnt * (torch.cumsum(cnt, 1) - cnt)).sum(1)


def levels_from_cells(cell: Tensor, G: int, K: int) -> Levels:
    """The :class:`Levels` of documents already numbered by dense ``(G, K)`` cells
    (:func:`level_cells`): the non-empty cells in row-major order are the buckets
    (O(n + GK), no sort)."""
    present = torch.bincount(cell, minlength=G * K) > 0
    rank = torch.cumsum(present, 0) - 1
    sizes = present.view(G, K).sum(1)
    return Levels(rank.index_select(0, cell), Groups.from_sizes(sizes).fix_sizes(),
                  int(present.sum()))


def label_pair_chunks(labels: Tensor, groups: Groups, chunk: int = 1 << 22
                      ) -> Iterator[Tuple[Tensor, Tensor]]:
    """The label-induced pairs ``(hi, lo)`` (``labels[hi] > labels[lo]``, same query), in
    chunks: the ``Σ_q n_q²`` ordered candidates ``(i, j)`` of each query are enumerated in
    (query, ``i``, ``j``) order in ranges of ``chunk`` candidates (whatever the query
    sizes), keeping the crucial ones, so the transient memory is O(chunk)."""
    dev = labels.device
    sizes = groups.sizes.to(dev)
    csq = torch.cumsum(sizes * sizes, 0)  # inclusive prefix sums of candidates per query
    total = int(csq[-1]) if csq.numel() else 0
    offsets = groups.offsets.to(dev)
    for t0 in range(0, total, chunk):  # a loop over candidate ranges, each vectorised
        t = torch.arange(t0, min(t0 + chunk, total), device=dev)
        q = torch.searchsorted(csq, t, right=True)
        n_q = sizes[q]
        local = t - (csq[q] - n_q * n_q)
        off = offsets[q]
        i = off + torch.div(local, n_q, rounding_mode="floor")
        j = off + local % n_q
        keep = labels[i] > labels[j]
        yield i[keep], j[keep]


def label_pairs(labels: Tensor, groups: Groups, pairs=None):
    """Materialise the crucial pairs ``(hi, lo, weight)`` of a pair spec: an explicit list
    as validated, label-induced pairs from :func:`label_pair_chunks` (O(#pairs) memory)."""
    p = resolve_pairs(pairs)
    if isinstance(p, ExplicitPairs):
        q = p.validate(groups)
        return q.hi, q.lo, q.weight
    lab = torch.as_tensor(labels, device=groups.device)
    if isinstance(p, Bipartite):
        lab = (lab > p.threshold).to(torch.float64)
    his, los = [], []
    for hi, lo in label_pair_chunks(lab, groups):
        his.append(hi)
        los.append(lo)
    if not his:
        empty = torch.zeros(0, dtype=torch.long, device=groups.device)
        return empty, empty.clone(), None
    return torch.cat(his), torch.cat(los), None
