"""Query sharding: whole queries per rank, in memory and from SVMlight/LETOR files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups
from ..parallel.context import DistContext, get_context

_DISABLED = DistContext()

__all__ = ["load_svmlight_shard", "shard_queries"]


def _check_world(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) \
            or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    return int(world_size)


def _check_rank(rank, world_size: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
            or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    return int(rank)


# ====================================================================== sharding
def shard_queries(doc_counts, world_size: int) -> Tensor:
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
    W = _check_world(world_size)
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


# ---------------------------------------------------------------- file shards
_BLANK = object()
_SCAN_BLOCK = 1 << 16


def _qid_token(line: bytes, path: Path, pos: int):
    """The qid of a data line (an int, or the raw token when it does not parse: the reader
    reports that line), ``_BLANK`` for a blank or comment line."""
    hash_pos = line.find(b"#")
    if hash_pos >= 0:
        line = line[:hash_pos]
    parts = line.split()
    if not parts:
        return _BLANK
    if len(parts) < 2 or not parts[1].startswith(b"qid:"):
        raise ValueError(
            f"{path}: the data line at byte {pos} has no 'qid:'; load_svmlight_shard cuts a "
            f"file at query boundaries, which it finds by qid (give every line a qid, or "
            f"split the data into one file per shard and pass the list of files)")
    try:
        return int(parts[1][4:])
    except ValueError:
        return parts[1]


def _last_data_line(fh, p: int, path: Path):
    """``(qid, end)`` of the last data line ending at or before the line start ``p``
    (``(None, 0)`` when there is none), reading backwards in growing blocks."""
    block = _SCAN_BLOCK
    while True:
        a = max(0, p - block)
        fh.seek(a)
        buf = fh.read(p - a)
        pieces = buf.split(b"\n")[:-1]  # buf ends with the newline before p
        first = 0 if a == 0 else 1  # the first piece may be a partial line
        end = p
        for line in reversed(pieces[first:]):
            start = end - len(line) - 1
            q = _qid_token(line, path, start)
            if q is not _BLANK:
                return q, end
            end = start
        if a == 0:
            return None, 0
        block *= 8


def _query_cut(path: Path, pos: int, size: int) -> int:
    """Where the shard whose nominal start is byte ``pos`` begins: right after the last
    data line before the first query that starts at or after ``pos`` (a query starts at a
    data line whose qid differs from the previous data line's). 0 or ``size`` at the ends.

    Cutting right after a data line (comment lines after it go to the next shard) is what
    scikit-learn's ``offset``/``length`` reader needs to read exactly the lines between two
    cuts."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    with open(path, "rb") as fh:
        fh.seek(pos - 1)
        if fh.read(1) == b"\n":
            p = pos
        else:
            fh.readline()
            p = fh.tell()
        prev, prev_end = _last_data_line(fh, p, path)
        fh.seek(p)
        at = p
        for line in fh:
            q = _qid_token(line, path, at)
            at += len(line)
            if q is _BLANK:
                continue
            if prev is None:
                return 0
            if q != prev:
                return prev_end
            prev_end = at
    return size


def load_svmlight_shard(path, *, rank: Optional[int] = None, world_size: Optional[int] = None,
                        n_features: Optional[int] = None, dtype: torch.dtype = torch.float32,
                        normalize: bool = False, zero_based="auto",
                        max_features: Optional[int] = None, query_file=None,
                        context: Union[None, bool, DistContext] = None):
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
        rank, world_size: this shard and the number of shards; default: the process
            group's (rank 0 of 1 without one). Pass both or neither.
        n_features, dtype, normalize, zero_based, max_features: as
            :func:`torchrankboost.data.load_svmlight`.
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
    from . import core as D

    ctx = get_context(context)
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither (then the process "
                         "group's are used)")
    if rank is None:
        rank, world_size = ctx.rank, ctx.world_size
    world_size = _check_world(world_size)
    rank = _check_rank(rank, world_size)
    files = _shard_file_list(path, world_size, query_file)
    c = _numbering_context(ctx, rank, world_size, n_features, zero_based)
    with c.guard():
        paths, parsed, nf, npdt, ranges, qfiles = _read_shard_part(
            D, files, rank, world_size, n_features, zero_based, dtype, query_file)
        width, has_zero = D._numbering_evidence(parsed, len(paths))
    evidence = c.all_reduce_max(torch.tensor([width, int(has_zero)], dtype=torch.int64))
    width, has_zero = int(evidence[0]), bool(evidence[1])
    with c.guard():
        zb = has_zero if zero_based == "auto" else zero_based
        if nf is None and c.enabled:
            D._widen(parsed, len(paths), width)
            nf = max(width - (0 if zb else 1), 0)
        parts = D._build_files(paths, parsed, n_features=nf, zero_based=zb, npdt=npdt,
                               dtype=dtype, query_files=qfiles, normalize=normalize,
                               max_features=max_features, ranges=ranges)
    return parts[0] if len(parts) == 1 else D.RankingData.concat(parts)


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
    group = ctx.enabled and (ctx.rank, ctx.world_size) == (rank, world_size)
    if world_size > 1 and not group and (n_features is None or zero_based == "auto"):
        why = ("no torch.distributed process group is initialised" if not ctx.enabled else
               f"the process group is rank {ctx.rank} of {ctx.world_size}, not rank {rank} "
               f"of {world_size}")
        raise ValueError(
            f"load_svmlight_shard: {why}, so the shards cannot agree on the feature "
            f"numbering: pass n_features= and zero_based= (True or False) explicitly, the "
            f"same on every rank, or launch with torchrun and call "
            f"torch.distributed.init_process_group() first")
    return ctx if group else _DISABLED


def _read_shard_part(D, files: list, rank: int, world_size: int, n_features, zero_based,
                     dtype, query_file):
    """Parse this rank's part: its byte range of one file, or ``files[rank::world_size]``.
    Returns ``(paths, parsed, n_features, numpy dtype, ranges or None, query files)``."""
    if len(files) == 1:
        p = Path(files[0])
        D._check_paths([p])
        if world_size > 1 and p.suffix.lower() in (".gz", ".bz2"):
            raise ValueError(f"{p}: a compressed file cannot be cut into byte ranges; "
                             f"decompress it, or pass a list of files")
        size = p.stat().st_size
        start = _query_cut(p, rank * size // world_size, size)
        end = _query_cut(p, (rank + 1) * size // world_size, size)
        ranges = [(start, end)] if world_size > 1 else None
        read = [p]
        qfiles = [False] if world_size > 1 else [query_file]
    else:
        read, ranges = files[rank::world_size], None
        qfiles = [None] * len(read)
    paths, parsed, nf, npdt = D._read_files(read, n_features=n_features,
                                            zero_based=zero_based, dtype=dtype, ranges=ranges)
    if ranges is not None and parsed[2].shape[0] != parsed[0].shape[0]:
        raise ValueError(f"{paths[0]}: lines without 'qid:' in bytes {ranges[0][0]}.."
                         f"{ranges[0][1]}; load_svmlight_shard needs a qid on every line")
    return paths, parsed, nf, npdt, ranges, qfiles

