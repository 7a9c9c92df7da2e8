"""Batches of whole queries for the ranks of a DistributedDataParallel run."""

from __future__ import annotations

from typing import Iterator, List, Optional

import numpy as np
import torch

from ..groups import Groups
from ..parallel import get_context
from .shards import _check_rank, _check_world, shard_queries

__all__ = ["DistributedQueryBatchSampler"]


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
        num_replicas, rank: the number of ranks and this one; default: the process
            group's (:func:`get_context`), 1 and 0 without one.
        shuffle: reshuffle the queries each epoch (else query order, same dealing each
            epoch).
        seed: the shuffle's base seed (the same on every rank).
        drop_last: drop batches instead of repeating them to even the ranks out.
    """

    def __init__(self, groups: Groups, *, max_docs: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        from .core import _check_max_docs, _group_sizes_np

        self.sizes = _group_sizes_np(groups)
        self.max_docs = _check_max_docs(max_docs)
        if num_replicas is None or rank is None:
            ctx = get_context(None)
            num_replicas = ctx.world_size if num_replicas is None else num_replicas
            rank = ctx.rank if rank is None else rank
        self.num_replicas = _check_world(num_replicas)
        self.rank = _check_rank(rank, self.num_replicas)
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
        from .core import _batch_bounds, epoch_query_order

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

