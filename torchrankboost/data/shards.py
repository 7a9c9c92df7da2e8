"""File shards: each rank reads and parses only its part of SVMlight/LETOR data (a byte
range of one file, or its files of a list), through the one reader
(:func:`~torchrankboost.data.svmlight.read_svmlight`). How whole queries are dealt to ranks
in memory is :func:`shard_queries` (with :class:`~torchrankboost.data.RankingData`)."""

from __future__ import annotations

import os
from typing import Optional, Union

import torch

from ..parallel.context import DistContext, get_context
from .dataset import RankingData, check_rank, check_world_size, shard_queries
from .svmlight import read_svmlight
from ..contract import PathLike

_DISABLED = DistContext()

__all__ = ["load_svmlight_shard", "shard_queries"]


def load_svmlight_shard(path: PathLike, *, rank: Optional[int] = None,
                        world_size: Optional[int] = None, n_features: Optional[int] = None,
                        dtype: torch.dtype = torch.float32, normalize: bool = False,
                        zero_based: Union[bool, str] = "auto", max_features: Optional[int] = None,
                        query_file: Optional[PathLike] = None,
                        context: Union[None, bool, DistContext] = None) -> RankingData:
    """This rank's queries of an SVMlight/LETOR file, reading and parsing only its part.

    **One file.** The file's ``S`` bytes are cut into ``world_size`` nominal ranges
    ``[r·S/W, (r+1)·S/W)``; each rank's part starts at the first query boundary (a data
    line whose ``qid:`` differs from the previous data line's) at or after its nominal start
    — reading a little before it to learn the previous qid — and ends where the next rank's
    part starts. So every query is read by exactly one rank, and concatenating the parts in
    rank order gives the whole file's data (:meth:`RankingData.concat
    <torchrankboost.data.RankingData.concat>`). This assumes that the lines of a query are
    contiguous, as in LETOR files (a qid that comes back later in the file would be split
    between ranks); every line must carry ``qid:`` (a file of one query, or with a
    ``.query`` size file, cannot be cut this way: split it into files). A query longer than
    ``S/W`` bytes can leave a rank with no document. Compressed files cannot be cut by
    byte: decompress them or pass a list of files.

    **A list of files** with at least ``world_size`` entries: rank ``r`` reads
    ``files[r::world_size]`` whole (their group-size files too) and gets them concatenated
    in that order.

    **Feature numbering.** ``zero_based="auto"`` (0-based iff some index is 0) and
    ``n_features=None`` (the largest index) must be decided over the whole data, not per
    part. When a process group is initialised with this ``rank`` and ``world_size``, the
    ranks agree on them (one all-reduce of the widest index and of the index-0 evidence),
    so every shard gets the whole file's columns. Without a process group, pass
    ``n_features`` and ``zero_based`` (``True``/``False``) explicitly (``ValueError``
    otherwise).

    Args:
        path: a file, or a list of files.
        rank: this shard; default: the process group's (rank 0 of 1 without one). Pass
            both ``rank`` and ``world_size`` or neither.
        world_size: the number of shards (default: the process group's).
        n_features: as :func:`torchrankboost.data.load_svmlight`.
        dtype: as :func:`torchrankboost.data.load_svmlight`.
        normalize: as :func:`torchrankboost.data.load_svmlight`.
        zero_based: as :func:`torchrankboost.data.load_svmlight`.
        max_features: as :func:`torchrankboost.data.load_svmlight`.
        query_file: a group-size file; only with ``world_size=1`` (a byte range finds its
            queries by qid).
        context: the process group to agree through (:func:`get_context`'s argument).

    Returns:
        :class:`~torchrankboost.data.RankingData` of this rank's queries (``X`` with the
        agreed feature count, ``qid`` from the file; ``row`` counts the data rows of the
        part this rank read: from the start of its byte range, or of each of its files).

    Raises:
        ValueError: bad arguments, a malformed line (``"<path>:<line>: <problem>"``, the
            line numbered as in the whole file), a line without qid; with a process group
            every rank raises :class:`DistributedError` naming the rank(s) whose part failed.
    """
    ctx = get_context(context)
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither (then the process "
                         "group's are used)")
    if rank is None:
        rank, world_size = ctx.rank, ctx.world_size
    world_size = check_world_size(world_size)
    rank = check_rank(rank, world_size)
    files = _shard_file_list(path, world_size, query_file)
    opts = dict(n_features=n_features, zero_based=zero_based, dtype=dtype, normalize=normalize,
                max_features=max_features,
                context=_numbering_context(ctx, rank, world_size, n_features, zero_based))
    if len(files) == 1:
        parts = read_svmlight(files, query_files=[query_file], part=(rank, world_size), **opts)
    else:
        parts = read_svmlight(files[rank::world_size], **opts)
    return parts[0] if len(parts) == 1 else RankingData.concat(parts)


def _shard_file_list(path, world_size: int, query_file) -> list:
    """``path`` as a list of files, checked for sharding over ``world_size`` ranks (one file
    to cut by byte ranges, or at least ``world_size`` files)."""
    if isinstance(path, (str, os.PathLike)):
        files = [path]
    else:
        try:
            files = list(path)
        except TypeError:
            raise ValueError(f"path must be a file or a list of files, got {path!r}") from None
        if not files or not all(isinstance(f, (str, os.PathLike)) for f in files):
            raise ValueError("path must be a file or a non-empty list of files")
    if len(files) > 1 and len(files) < world_size:
        raise ValueError(f"a list of {len(files)} files cannot be shared by world_size="
                         f"{world_size} ranks (rank r reads files[r::world_size]): give at "
                         f"least {world_size} files, or one file to cut by byte ranges")
    if world_size > 1 and query_file is not None:
        raise ValueError("query_file: a shard finds its queries by qid (every line needs "
                         "'qid:'); split the data into files with their own .query files "
                         "instead")
    return files


def _numbering_context(ctx: DistContext, rank: int, world_size: int, n_features,
                       zero_based) -> DistContext:
    """The context the shards agree on the feature numbering through: the process group when
    it is this ``(rank, world_size)``; a disabled one when nothing needs agreeing (one shard,
    or explicit ``n_features`` and ``zero_based``), else ``ValueError``."""
    group = (ctx.rank, ctx.world_size) == (rank, world_size)
    if world_size > 1 and not group and (n_features is None or zero_based == "auto"):
        why = ("no torch.distributed process group is initialised" if ctx.world_size == 1 else
               f"the process group is rank {ctx.rank} of {ctx.world_size}, not rank {rank} "
               f"of {world_size}")
        raise ValueError(
            f"load_svmlight_shard: {why}, so the shards cannot agree on the feature "
            f"numbering: pass n_features= and zero_based= (True or False) explicitly, the "
            f"same on every rank, or launch with torchrun and call "
            f"torch.distributed.init_process_group() first")
    return ctx if group else _DISABLED
