"""The dataset container: :class:`RankingData` (features, labels, query groups), query-level
normalisation, and :func:`shard_queries` (whole queries dealt to ranks, what
:meth:`RankingData.shard` cuts by)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups
from ..contract import DeviceLike

__all__ = ["RankingData", "normalize_per_query", "shard_queries"]


@dataclass(eq=False)
class RankingData:
    """Dense ranking data: features, labels, query groups.

    Attributes:
        X: ``(n, F)`` float features.
        labels: ``(n,)`` float relevance grades (same dtype as ``X``).
        groups: :class:`Groups` over the ``n`` documents (queries contiguous).
        qid: ``(n,)`` int64 query id of each document (from the file's ``qid:``; the query's
            index when groups come from a size file; 0 for a single group).
        row: ``(n,)`` int64 index of each document's data row in the source (``arange(n)``
            for a file read whole: the lines of a query are contiguous), or ``None``.
        zero_based: the feature numbering the file was read with (``True``: index ``i`` is
            column ``i``; ``False``: column ``i - 1``), ``None`` for data not read from a file.
        feature_names: the ``F`` feature column names of data read from a table (Parquet,
            Arrow, CSV, a data frame), ``None`` otherwise (SVMlight numbers its features).
        weight: ``(n,)`` float64 document weights from a table's weight column, or ``None``.
        position: ``(n,)`` int64 displayed positions from a table's position column, or
            ``None``.
        group_weight: ``(G,)`` float64 query weights from a table's group-weight column (one
            value per query), or ``None``.

    Unpacks as a 3-tuple, ``X, labels, groups = data``, so it drops into code written for
    ``(X, y, groups)`` triples; the other fields are attributes.
    """

    X: Tensor
    labels: Tensor
    groups: Groups
    qid: Tensor
    row: Optional[Tensor] = None
    zero_based: Optional[bool] = None
    feature_names: Optional[Tuple[str, ...]] = None
    weight: Optional[Tensor] = None
    position: Optional[Tensor] = None
    group_weight: Optional[Tensor] = None

    def __iter__(self):
        return iter((self.X, self.labels, self.groups))

    def __len__(self) -> int:
        """Number of documents."""
        return int(self.X.shape[0])

    @property
    def num_queries(self) -> int:
        return self.groups.num_groups

    @property
    def num_features(self) -> int:
        return int(self.X.shape[1])

    def to(self, device: DeviceLike) -> "RankingData":
        """All tensors (and the groups' offsets) on ``device``."""
        return RankingData(
            self.X.to(device), self.labels.to(device), self.groups.to(device),
            self.qid.to(device), _to(self.row, device), self.zero_based, self.feature_names,
            _to(self.weight, device), _to(self.position, device),
            _to(self.group_weight, device))

    def queries(self, start: int, stop: int) -> "RankingData":
        """Queries ``start .. stop-1`` as a new :class:`RankingData` (views, no copy)."""
        G = self.num_queries
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop <= G):
            raise ValueError(f"start, stop must satisfy 0 <= start <= stop <= {G} (the number "
                             f"of queries), got {start!r}, {stop!r}")
        off = self.groups.offsets
        a, b = int(off[start]), int(off[stop])
        sizes = self.groups.sizes[start:stop]
        return RankingData(self.X[a:b], self.labels[a:b],
                           Groups.from_sizes(sizes, device=sizes.device), self.qid[a:b],
                           _cut(self.row, a, b), self.zero_based, self.feature_names,
                           _cut(self.weight, a, b), _cut(self.position, a, b),
                           _cut(self.group_weight, start, stop))

    def shard(self, rank: int, world_size: int) -> "RankingData":
        """The queries of ``rank`` out of ``world_size`` processes.

        Whole queries, a contiguous block per rank in query order, balanced by document count
        (:func:`torchrankboost.data.shard_queries`): concatenating the shards of ranks
        ``0 .. world_size-1`` (:meth:`concat`) gives back this data. ``ValueError`` when
        ``rank`` is not in ``[0, world_size)`` or there are fewer queries than ranks.
        """
        owner = shard_queries(self.groups.sizes, world_size)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
        lo = int(torch.searchsorted(owner, rank))
        hi = int(torch.searchsorted(owner, rank, right=True))
        return self.queries(lo, hi)

    @staticmethod
    def concat(parts: Sequence["RankingData"]) -> "RankingData":
        """The parts one after the other (e.g. the shards of every rank, in rank order).

        They must have the same feature count and dtype; ``row`` (each part's own row
        indices), ``weight``, ``position`` and ``group_weight`` are concatenated as they
        are, ``None`` if a part has none; ``zero_based`` and ``feature_names`` are kept
        when all parts agree (else ``None``)."""
        parts = list(parts)
        if not parts or not all(isinstance(d, RankingData) for d in parts):
            raise ValueError("parts must be a non-empty sequence of RankingData")
        F = {d.num_features for d in parts}
        if len(F) > 1:
            raise ValueError(f"parts must have the same number of features, got {sorted(F)}")
        zb = {d.zero_based for d in parts}
        names = {d.feature_names for d in parts}
        sizes = torch.cat([d.groups.sizes for d in parts])
        return RankingData(
            torch.cat([d.X for d in parts]), torch.cat([d.labels for d in parts]),
            Groups.from_sizes(sizes, device=sizes.device), torch.cat([d.qid for d in parts]),
            _cat([d.row for d in parts]), zb.pop() if len(zb) == 1 else None,
            names.pop() if len(names) == 1 else None, _cat([d.weight for d in parts]),
            _cat([d.position for d in parts]), _cat([d.group_weight for d in parts]))

    def __repr__(self) -> str:
        return (
            f"RankingData(num_docs={len(self)}, num_features={self.num_features}, "
            f"num_queries={self.num_queries}, dtype={self.X.dtype}, device={self.X.device})"
        )


def _to(t: Optional[Tensor], device) -> Optional[Tensor]:
    return None if t is None else t.to(device)


def _cut(t: Optional[Tensor], a: int, b: int) -> Optional[Tensor]:
    return None if t is None else t[a:b]


def _cat(ts) -> Optional[Tensor]:
    return None if any(t is None for t in ts) else torch.cat(ts)


# ====================================================================== normalisation
def normalize_per_query(X: Tensor, groups: Groups) -> Tensor:
    """Query-level min–max normalisation (LETOR's "QueryLevelNorm").

    For each query ``q`` and feature ``f``::

        X'[i, f] = (X[i, f] - min_{j in q} X[j, f]) / (max_{j in q} X[j, f] - min_{j in q} X[j, f])

    and ``X'[i, f] = 0`` where the feature is constant over the query. NaN entries are
    ignored by the min/max and stay NaN. Shapes: ``(n, F)`` (or ``(n,)``) in, same out;
    computed in ``X``'s dtype (float32 for half types, cast back), on ``X``'s device,
    with two segment reductions — no loop over queries.
    """
    if not isinstance(X, Tensor) or X.dim() not in (1, 2):
        raise ValueError("X must be a (n, F) or (n,) tensor")
    if not X.dtype.is_floating_point:
        raise ValueError(f"X must be floating point, got {X.dtype}")
    groups = groups.to(X.device)
    groups.check(X, "X")
    orig = X.dtype
    Xc = X if orig in (torch.float32, torch.float64) else X.float()
    # a NaN anywhere makes the sum NaN (one cheap reduction instead of a mask on every call)
    has_nan = bool(torch.isnan(Xc.sum()))
    nan = torch.isnan(Xc) if has_nan else None
    lo = groups.segment_min(Xc.masked_fill(nan, float("inf")) if has_nan else Xc)
    hi = groups.segment_max(Xc.masked_fill(nan, float("-inf")) if has_nan else Xc)
    rng = hi - lo
    scale = torch.where(rng > 0, 1.0 / rng, torch.zeros_like(rng))  # constant -> 0
    lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))  # all-NaN columns
    gi = groups.group_index
    out = Xc - lo[gi]
    out.mul_(scale[gi])
    if has_nan:
        out.masked_fill_(nan, float("nan"))
    return out.to(orig)



def check_world_size(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) \
            or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    return int(world_size)


def check_rank(rank, world_size: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
            or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    return int(rank)


# ====================================================================== sharding
def shard_queries(doc_counts: Union[Tensor, Sequence[int]], world_size: int) -> Tensor:
    """The rank of each query: whole queries, one contiguous block per rank, balanced by
    document count.

    With ``N`` documents in all and ``c_g`` the documents of queries ``0 .. g-1``, rank
    ``r``'s block starts at the query boundary ``g`` nearest to ``r·N/W`` (``W`` =
    ``world_size``), moved where needed so that every rank gets at least one query. Ranks
    get the queries in order, so concatenating the shards in rank order gives back the data.
    A rank's document count differs from ``N/W`` by at most about one query's size.

    Args:
        doc_counts: ``(G,)`` documents per query (a tensor, array or list; or a
            :class:`~torchrankboost.Groups`).
        world_size: the number of ranks ``W``.

    Returns:
        ``(G,)`` int64 tensor of ranks, non-decreasing (CPU). ``ValueError`` when
        ``world_size < 1``, ``doc_counts`` is not a 1-D sequence of non-negative integers, or
        there are fewer queries than ranks. Vectorised: one cumulative sum and one
        ``searchsorted``.
    """
    W = check_world_size(world_size)
    if isinstance(doc_counts, Groups):
        doc_counts = doc_counts.sizes
    sizes = torch.as_tensor(doc_counts).detach().cpu()
    if sizes.dim() != 1:
        raise ValueError(f"doc_counts must be 1-D (one count per query), got shape "
                         f"{tuple(sizes.shape)}")
    if sizes.dtype.is_floating_point or sizes.dtype == torch.bool:
        if sizes.dtype == torch.bool or not bool((sizes == sizes.round()).all()):
            raise ValueError("doc_counts must be integers (documents per query)")
    sizes = sizes.long()
    if sizes.numel() and int(sizes.min()) < 0:
        raise ValueError("doc_counts must be non-negative")
    G = sizes.numel()
    if G < W:
        raise ValueError(f"cannot shard {G} queries over world_size={W} ranks: every rank "
                         f"needs at least one query")
    cum = torch.zeros(G + 1, dtype=torch.float64)
    torch.cumsum(sizes.double(), 0, out=cum[1:])
    r = torch.arange(1, W, dtype=torch.long)
    target = r.double() * (cum[-1] / W)
    # the boundary g (in 1..G-1) with cum[g] nearest the target
    hi = torch.searchsorted(cum, target).clamp(1, G - 1) if G > 1 else r * 0
    lo = (hi - 1).clamp_min(1)
    near = torch.where((target - cum[lo]).abs() <= (cum[hi] - target).abs(), lo, hi)
    # strictly increasing, every rank at least one query
    near = near.clamp_min(1)
    near = torch.cummax(near - r, 0).values + r
    near = torch.minimum(near, G - W + r)
    return torch.searchsorted(near, torch.arange(G, dtype=torch.long), right=True)
