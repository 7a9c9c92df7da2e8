"""Batches of whole queries for neural rankers (one item = one whole query, never padded).

:class:`QueryDataset`, :class:`QueryBatchSampler` (packs whole queries up to a document
budget) and :func:`collate_queries` (flat ``(X, labels, Groups)``) for
``torch.utils.data.DataLoader``; :func:`iterate_query_batches`, a loader-free fast path;
:func:`take_queries` (the flat batch of any list of queries); and, for the ranks of a
``DistributedDataParallel`` run, :class:`DistributedQueryBatchSampler`.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups
from ..parallel.context import get_context
from .dataset import RankingData, check_rank, check_world_size, shard_queries

__all__ = ["DistributedQueryBatchSampler", "QueryBatchPlan", "QueryBatchSampler", "QueryDataset",
           "collate_queries", "epoch_query_order", "gather_queries", "iterate_query_batches",
           "query_index", "take_queries"]


def _batch_bounds(sizes: np.ndarray, max_docs: int) -> np.ndarray:
    """Greedy packing of consecutive queries (in the given order) into batches.

    Returns ``bounds`` (``B + 1`` query positions): batch ``b`` is queries
    ``bounds[b]:bounds[b+1]``, holding at most ``max_docs`` documents unless it is a single
    query larger than the budget. One ``searchsorted`` per batch, no loop over queries.
    """
    G = sizes.shape[0]
    cum = np.empty(G + 1, dtype=np.int64)
    cum[0] = 0
    np.cumsum(sizes, out=cum[1:])
    bounds = [0]
    start = 0
    while start < G:
        # largest end with cum[end] - cum[start] <= max_docs
        end = int(np.searchsorted(cum, cum[start] + max_docs, side="right")) - 1
        end = max(end, start + 1)
        bounds.append(end)
        start = end
    return np.asarray(bounds, dtype=np.int64)


def _check_max_docs(max_docs) -> int:
    if isinstance(max_docs, bool) or int(max_docs) != max_docs or max_docs < 1:
        raise ValueError(f"max_docs must be a positive integer, got {max_docs!r}")
    return int(max_docs)


def _group_sizes_np(groups: Groups) -> np.ndarray:
    if not isinstance(groups, Groups):
        raise TypeError(f"groups must be a torchrankboost.Groups, got {type(groups).__name__}")
    return groups.sizes.cpu().numpy()


class QueryDataset(torch.utils.data.Dataset):
    """A map-style dataset whose item ``i`` is query ``i``: ``(X[s:e], labels[s:e])``.

    Build it from ``(X, labels, groups)`` or from a :class:`RankingData`
    (``QueryDataset(data)``). Items are views (no copy). Use with
    :class:`QueryBatchSampler` and :func:`collate_queries`::

        ds = QueryDataset(X, y, groups)
        dl = DataLoader(ds, batch_sampler=QueryBatchSampler(groups, max_docs=4096),
                        collate_fn=collate_queries)
        for Xb, yb, gb in dl: ...          # flat (m, F), (m,), Groups
    """

    def __init__(self, X: Union[RankingData, Tensor], labels: Optional[Tensor] = None,
                 groups: Optional[Groups] = None):
        if isinstance(X, RankingData):
            if labels is not None or groups is not None:
                raise ValueError("pass either a RankingData or (X, labels, groups), not both")
            X, labels, groups = X
        if not isinstance(groups, Groups):
            raise TypeError("groups must be a torchrankboost.Groups")
        groups.check(X, "X")
        if labels is None or labels.shape[0] != X.shape[0]:
            raise ValueError("labels must have one entry per document (row of X)")
        self.X, self.labels, self.groups = X, labels, groups
        self._off = groups.offsets.cpu().tolist()

    def __len__(self) -> int:
        return self.groups.num_groups

    def __getitem__(self, i: int) -> Tuple[Tensor, Tensor]:
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"query index {i} out of range for {len(self)} queries")
        s, e = self._off[i], self._off[i + 1]
        return self.X[s:e], self.labels[s:e]


def collate_queries(batch: Sequence[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor, Groups]:
    """Concatenate whole queries into one flat batch, no padding.

    ``batch``: a list of ``(X_q (n_q, F), labels_q (n_q,))``. Returns
    ``(X (m, F), labels (m,), Groups.from_sizes([n_q, ...]))`` with ``m = Σ n_q`` and the
    groups' offsets on ``X``'s device.
    """
    if len(batch) == 0:
        raise ValueError("collate_queries: empty batch")
    Xs, ys = zip(*[(b[0], b[1]) for b in batch])
    X = torch.cat(Xs, 0)
    y = torch.cat(ys, 0)
    sizes = torch.tensor([x.shape[0] for x in Xs], dtype=torch.long, device=X.device)
    return X, y, Groups.from_sizes(sizes)


def epoch_query_order(n_queries: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The query order of an epoch: ``torch.randperm`` with a generator seeded by
    ``seed + epoch`` (the same on every process), or ``0..n-1`` without ``shuffle``."""
    if not shuffle:
        return np.arange(n_queries)
    gen = torch.Generator().manual_seed(int(seed) + int(epoch))
    return torch.randperm(n_queries, generator=gen).numpy()


class QueryBatchSampler(torch.utils.data.Sampler):
    """Batches of whole queries holding at most ``max_docs`` documents each.

    Each epoch the queries are (optionally) shuffled and packed greedily in that order:
    a batch takes consecutive queries while the document count stays within ``max_docs``,
    so the number of queries per batch varies. A single query larger than the budget forms
    a batch of its own. Every query appears in exactly one batch per epoch.

    Args:
        groups: the :class:`Groups` of the dataset.
        max_docs: document budget per batch.
        shuffle: shuffle the query order each epoch.
        seed: the shuffles are ``torch.randperm`` with a generator seeded by
            ``seed + epoch``; the epoch counter starts at 0, advances after each full
            pass, and can be set with :meth:`set_epoch` (as for ``DistributedSampler``).
    """

    def __init__(self, groups: Groups, *, max_docs: int, shuffle: bool = True, seed: int = 0):
        self.sizes = _group_sizes_np(groups)
        self.max_docs = _check_max_docs(max_docs)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self._cache = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _plan(self, epoch: int):
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1], self._cache[2]
        order = epoch_query_order(self.sizes.shape[0], shuffle=self.shuffle, seed=self.seed,
                                  epoch=epoch)
        bounds = _batch_bounds(self.sizes[order], self.max_docs)
        self._cache = (epoch, order, bounds)
        return order, bounds

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.epoch
        order, bounds = self._plan(epoch)
        self.epoch = epoch + 1
        for b in range(bounds.shape[0] - 1):
            yield order[bounds[b]:bounds[b + 1]].tolist()

    def __len__(self) -> int:
        """Batches in the coming epoch (packing depends on the shuffle)."""
        return int(self._plan(self.epoch)[1].shape[0] - 1)


def _gather_index(starts: Tensor, sizes: Tensor) -> Tensor:
    """Document indices of whole queries: query ``j`` of the batch contributes
    ``starts[j] .. starts[j] + sizes[j] - 1``, in batch order (one ``repeat_interleave``)."""
    m = int(sizes.sum())
    local_off = torch.cumsum(sizes, 0) - sizes
    return (torch.repeat_interleave(starts - local_off, sizes, output_size=m)
            + torch.arange(m, device=sizes.device))


def take_queries(X: Tensor, labels: Tensor, groups: Groups,
                 queries: Union[int, Sequence[int], Tensor, np.ndarray]
                 ) -> Tuple[Tensor, Tensor, Groups]:
    """The documents of the given queries as one flat batch ``(X_b, labels_b, groups_b)``.

    ``queries``: query indices (a list, array or int64 tensor), in the batch order wanted
    (e.g. one batch of :class:`QueryBatchSampler` or
    :class:`~torchrankboost.data.DistributedQueryBatchSampler`). Returns
    ``X_b (m, F)``, ``labels_b (m,)`` (copies gathered with one vectorised index, documents
    of a query in their order) and ``Groups`` of the ``m = Σ n_q`` documents; everything on
    ``X``'s device. No Python loop over the queries.
    """
    if not isinstance(groups, Groups):
        raise TypeError("groups must be a torchrankboost.Groups")
    groups.check(X, "X")
    if labels.shape[0] != X.shape[0]:
        raise ValueError("labels must have one entry per document (row of X)")
    off = groups.offsets
    q = torch.as_tensor(queries, dtype=torch.long, device=off.device)
    if q.dim() != 1:
        raise ValueError(f"queries must be a 1-D sequence of query indices, got shape "
                         f"{tuple(q.shape)}")
    G = groups.num_groups
    if q.numel() and (int(q.min()) < 0 or int(q.max()) >= G):
        raise ValueError(f"queries must be query indices in [0, {G}), got values from "
                         f"{int(q.min())} to {int(q.max())}")
    starts = off[q]
    sizes = off[q + 1] - starts
    idx = _gather_index(starts, sizes).to(X.device)
    return (X.index_select(0, idx), labels.index_select(0, idx),
            Groups.from_sizes(sizes.to(X.device)))


def iterate_query_batches(X: Tensor, labels: Tensor, groups: Groups, *, max_docs: int,
                          shuffle: Union[bool, str] = True, seed: int = 0
                          ) -> Iterator[Tuple[Tensor, Tensor, Groups]]:
    """Yield flat ``(X_b, labels_b, groups_b)`` batches of whole queries, no DataLoader.

    Batches are packed as in :class:`QueryBatchSampler` (≤ ``max_docs`` documents, except a
    single larger query). ``shuffle``:

    * ``False``: queries in order; each batch is a contiguous slice — views of ``X`` and
      ``labels``, no copy.
    * ``"batches"``: the same contiguous batches, visited in a seeded random order (views).
    * ``True`` / ``"queries"``: queries in a seeded random order; each batch's documents
      are gathered with one vectorised index (a copy), per-query document order kept.

    Batch offsets are computed with a cumulative sum and ``searchsorted``; there is no
    Python loop over queries. Everything stays on ``X``'s device.
    """
    if not isinstance(groups, Groups):
        raise TypeError("groups must be a torchrankboost.Groups")
    groups.check(X, "X")
    if labels.shape[0] != X.shape[0]:
        raise ValueError("labels must have one entry per document (row of X)")
    max_docs = _check_max_docs(max_docs)
    if shuffle is True:
        shuffle = "queries"
    if shuffle not in (False, "batches", "queries"):
        raise ValueError(f"shuffle must be True, False, 'queries' or 'batches', got {shuffle!r}")
    sizes = _group_sizes_np(groups)
    G = sizes.shape[0]
    dev = X.device
    gen = torch.Generator().manual_seed(int(seed))
    if shuffle in (False, "batches"):
        bounds = _batch_bounds(sizes, max_docs)
        off = groups.offsets.cpu().numpy()
        nb = bounds.shape[0] - 1
        visit = torch.randperm(nb, generator=gen).tolist() if shuffle == "batches" else range(nb)
        for b in visit:
            qa, qb = int(bounds[b]), int(bounds[b + 1])
            s, e = int(off[qa]), int(off[qb])
            sub = torch.from_numpy(off[qa:qb + 1] - off[qa]).to(dev)
            yield X[s:e], labels[s:e], Groups(sub)
        return
    order = torch.randperm(G, generator=gen).numpy()
    psizes = sizes[order]
    bounds = _batch_bounds(psizes, max_docs)
    starts = groups.offsets.cpu().numpy()[:-1][order]
    for b in range(bounds.shape[0] - 1):
        qa, qb = int(bounds[b]), int(bounds[b + 1])
        bs = torch.from_numpy(psizes[qa:qb])
        # doc j of the batch -> starts[q] + (j - batch offset of q)
        idx = _gather_index(torch.from_numpy(starts[qa:qb]), bs).to(dev)
        yield X.index_select(0, idx), labels.index_select(0, idx), Groups.from_sizes(bs.to(dev))


class DistributedQueryBatchSampler(torch.utils.data.Sampler):
    """Batches of whole queries for one rank of a ``DistributedDataParallel`` run.

    Every rank builds the sampler from the same :class:`~torchrankboost.Groups` (those of
    the whole training data) and gets its own batches of query indices:

    1. each epoch the queries are shuffled with a generator seeded by ``seed + epoch`` —
       the same permutation on every rank (no communication);
    2. the shuffled queries are dealt to the ranks as contiguous blocks of that order,
       balanced by document count (:func:`shard_queries`);
    3. each rank packs its block greedily into batches of at most ``max_docs`` documents
       (as :class:`~torchrankboost.data.QueryBatchSampler`; a larger query is a batch of its
       own);
    4. every rank gets the **same number of batches** (``DistributedDataParallel`` waits
       for every rank's gradients at each step, so a rank with one batch more would hang
       the others): with ``drop_last=False`` (default) ranks with fewer batches repeat
       their first batches (those queries count twice that epoch, as with
       ``DistributedSampler``'s padding); with ``drop_last=True`` every rank stops at the
       smallest count (the extra batches of the other ranks are skipped that epoch).

    The epoch counter starts at 0 and advances after each full pass; :meth:`set_epoch`
    sets it (call it on every rank with the same value). Use with
    :func:`torchrankboost.data.take_queries` (loader-free) or as the ``batch_sampler`` of a
    ``DataLoader`` over a :class:`~torchrankboost.data.QueryDataset` with
    :func:`~torchrankboost.data.collate_queries`.

    Args:
        groups: the :class:`Groups` of the whole data set (the same on every rank).
        max_docs: document budget of a batch on one rank.
        num_replicas: the number of ranks; default: the process group's
            (:func:`get_context`), 1 without one.
        rank: this rank; default: the process group's, 0 without one.
        shuffle: reshuffle the queries each epoch (else query order, same dealing each
            epoch).
        seed: the shuffle's base seed (the same on every rank).
        drop_last: drop batches instead of repeating them to even the ranks out.
    """

    def __init__(self, groups: Groups, *, max_docs: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        self.sizes = _group_sizes_np(groups)
        self.max_docs = _check_max_docs(max_docs)
        if num_replicas is None or rank is None:
            ctx = get_context(None)
            num_replicas = ctx.world_size if num_replicas is None else num_replicas
            rank = ctx.rank if rank is None else rank
        self.num_replicas = check_world_size(num_replicas)
        self.rank = check_rank(rank, self.num_replicas)
        if self.sizes.shape[0] < self.num_replicas:
            raise ValueError(f"groups has {self.sizes.shape[0]} queries, fewer than the "
                             f"{self.num_replicas} ranks: every rank needs at least one")
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._cache = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def plan(self, epoch: Optional[int] = None) -> List[List[np.ndarray]]:
        """Every rank's batches of ``epoch`` (default: the coming one), before evening the
        counts out: ``plan[r][b]`` is an array of query indices."""
        return self._plan(self.epoch if epoch is None else int(epoch))[0]

    def _plan(self, epoch: int):
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1], self._cache[2]
        order = epoch_query_order(self.sizes.shape[0], shuffle=self.shuffle, seed=self.seed,
                                  epoch=epoch)
        owner = shard_queries(torch.from_numpy(self.sizes[order]), self.num_replicas).numpy()
        cuts = np.searchsorted(owner, np.arange(self.num_replicas + 1))
        per_rank = []
        for r in range(self.num_replicas):
            block = order[cuts[r]:cuts[r + 1]]
            bounds = _batch_bounds(self.sizes[block], self.max_docs)
            per_rank.append([block[bounds[b]:bounds[b + 1]] for b in range(len(bounds) - 1)])
        counts = [len(b) for b in per_rank]
        n = min(counts) if self.drop_last else max(counts)
        self._cache = (epoch, per_rank, n)
        return per_rank, n

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.epoch
        per_rank, n = self._plan(epoch)
        self.epoch = epoch + 1
        mine = per_rank[self.rank]
        for b in range(n):
            yield mine[b % len(mine)].tolist()

    def __len__(self) -> int:
        """Batches in the coming epoch (the same on every rank)."""
        return int(self._plan(self.epoch)[1])



def gather_queries(X: Tensor, labels: Tensor, offsets: np.ndarray, queries: np.ndarray
                   ) -> Tuple[Tensor, Tensor, Groups]:
    """The flat batch of ``queries`` (query indices, in batch order) of data already on its
    device, with **no host read of device data**: the document indices are computed on the
    host from ``offsets`` (the data's ``(G + 1,)`` query offsets as a NumPy array, read
    once), uploaded, and gathered with one ``index_select``; the batch's :class:`Groups`
    come from the host sizes with their sizes fixed
    (:meth:`~torchrankboost.Groups.fix_sizes`). Returns ``(X_b, labels_b, groups_b)``."""
    idx, g = query_index(offsets, queries, X.device)
    return X.index_select(0, idx), labels.index_select(0, idx), g


def query_index(offsets: np.ndarray, queries: np.ndarray, device) -> Tuple[Tensor, Groups]:
    """``(index (m,), groups)``: the documents of ``queries`` (computed on the host from
    the NumPy ``offsets``, then uploaded to ``device``) and their :class:`Groups` (sizes
    fixed): :func:`gather_queries` without the gather."""
    q = np.asarray(queries, dtype=np.int64)
    starts, sizes = offsets[q], offsets[q + 1] - offsets[q]
    m = int(sizes.sum())
    first = np.cumsum(sizes) - sizes
    idx = np.repeat(starts - first, sizes) + np.arange(m, dtype=np.int64)
    g = Groups.from_sizes(torch.from_numpy(sizes)).fix_sizes().to(device)
    return torch.from_numpy(idx).to(device), g


class QueryBatchPlan:
    """The steps of a training run over whole queries, for ``ranks`` data-parallel ranks
    (one process, or the processes of a ``DistributedDataParallel`` run, each holding the
    whole training data): step ``b`` of an epoch gives every rank its batch of query
    indices (:class:`DistributedQueryBatchSampler`'s dealing: a seeded shuffle, blocks
    balanced by documents, at most ``max_docs`` documents per rank's batch, the ranks
    evened out by repeating batches) and the step's query count over all ranks — what a
    global mean over the step's queries divides by, known on every rank without any
    communication.

    ``shuffle``: ``"queries"`` — a new shuffle and packing each epoch
    (:meth:`DistributedQueryBatchSampler.plan` of that epoch); ``"batches"`` (default) —
    the batches of epoch 0, visited each epoch in a new seeded order (the same on every
    rank), so each batch keeps its identity (``key``) and what is bound to it (a loss's
    labels) is built once per run; with ``by_length`` (default) each rank's queries are
    packed in order of length, so that padded batches waste little. Steps are ``(key,
    per_rank, count)`` with ``per_rank[r]`` an int64 array.
    """

    SHUFFLES = ("batches", "queries")

    def __init__(self, groups: Groups, *, max_docs: int, ranks: int = 1, seed: int = 0,
                 shuffle: str = "batches", by_length: bool = True):
        if shuffle not in self.SHUFFLES:
            raise ValueError(f"shuffle must be one of {self.SHUFFLES}, got {shuffle!r}")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.by_length = bool(by_length)
        self.sampler = DistributedQueryBatchSampler(groups, max_docs=max_docs,
                                                    num_replicas=ranks, rank=0,
                                                    shuffle=True, seed=seed)
        self.ranks = self.sampler.num_replicas

    def _rank_batches(self, epoch: int) -> List[List[np.ndarray]]:
        """Every rank's batches of ``epoch``: the sampler's; with ``by_length`` (fixed
        batches) each rank's queries sorted by length (stably) before packing, so a batch
        holds queries of similar lengths (little padding for a model over padded
        queries)."""
        per_rank = self.sampler.plan(epoch)
        if not (self.by_length and self.shuffle == "batches"):
            return per_rank
        sizes, budget = self.sampler.sizes, self.sampler.max_docs
        out = []
        for mine in per_rank:
            q = np.concatenate(mine) if mine else np.zeros(0, dtype=np.int64)
            q = q[np.argsort(sizes[q], kind="stable")]
            bounds = _batch_bounds(sizes[q], budget)
            out.append([q[bounds[b]:bounds[b + 1]] for b in range(len(bounds) - 1)])
        return out

    def steps(self, epoch: int) -> List[Tuple[tuple, List[np.ndarray], int]]:
        """The steps of ``epoch`` (0-based), in order."""
        per_rank = self._rank_batches(0 if self.shuffle == "batches" else int(epoch))
        n = max(len(mine) for mine in per_rank)
        if self.shuffle == "batches":
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(epoch) + 1)
            order = torch.randperm(n, generator=gen).tolist()
        else:
            order = list(range(n))
        out = []
        for b in order:
            batch = [mine[b % len(mine)] for mine in per_rank]
            key = (b,) if self.shuffle == "batches" else (int(epoch), b)
            out.append((key, batch, int(sum(x.shape[0] for x in batch))))
        return out
