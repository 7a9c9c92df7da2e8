"""An SVMlight/LETOR file read straight into bin codes: no float copy of the whole ``X``.

:func:`load_svmlight_binned` gives what ``bin_features(load_svmlight(path).X, ...)`` gives —
the same edges, the same ``uint8`` codes (``int16`` above 255 bins), labels, queries — with a
peak memory of the codes (``n · F`` bytes, twice that for int16) plus one block, instead of the float32 matrix (``4 · n · F`` bytes) beside
the codes. Three steps over a plain (uncompressed) file, with the compiled reader
(:mod:`.fastread`):

1. **scan** the bytes for line starts (NumPy over blocks of :data:`SCAN_BLOCK` bytes): the
   data lines (not blank, not ``#``) and their count ``n``;
2. **sample**: the seeded row sample of :func:`~torchrankboost.kernels.binning.bin_features`
   (``min(n, sample_count)`` positions, drawn from ``n`` alone) is parsed — those lines only
   — and the edges are computed from it, exactly as ``bin_features`` does;
3. **code**: the file is parsed again in blocks of :data:`~.fastread.BLOCK` bytes, each
   block's rows coded at once (``apply_bins``, the compiled bin coder) into the preallocated
   ``(n, F)`` codes; the block's floats are dropped.

A file this path cannot read exactly like :func:`~.svmlight.load_svmlight` (compressed,
no compiler, at most ``sample_count`` rows — the sample is then the whole file —, index 0
under ``"auto"``, non-finite values, a row count other than the scan's, lines with and
without ``qid:``, ...) is read the ordinary way and binned (the float matrix then exists
for a moment, and every error names the file and line as usual).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from ..kernels.binning import (MAX_INT16_BINS, BinnedFeatures, apply_bins, attach_bins,
                               bin_features, check_n_bins, code_dtype, edges_and_sample_codes,
                               sample_rows)
from . import fastread
from .dataset import RankingData
from .readers import ReadOptions

__all__ = ["load_svmlight_binned", "load_binned", "stream_binned", "bin_row_chunks", "BinnedLoad",
           "SCAN_BLOCK"]

#: bytes per step of the line scan
SCAN_BLOCK = 64 << 20
_SAMPLE_BATCH = 8192  # sampled lines parsed at a time
_SKIP = np.zeros(256, dtype=bool)
_SKIP[[ord(c) for c in "#\n\r"]] = True  # line starts that are never a data row


class _Decline(Exception):
    """This file is read the ordinary way (see the module docstring)."""


@dataclass
class BinnedLoad:
    """A file read into bins: ``data`` (its features a zero-memory stand-in carrying the
    bins, as ``load_cache(values=False)``; labels, groups, qid), ``binned`` and whether the
    streaming path read it (``streamed``; ``False``: read whole, then binned)."""

    data: RankingData
    binned: BinnedFeatures
    streamed: bool


def _stand_in(binned: BinnedFeatures, key) -> Tensor:
    X = torch.zeros((), dtype=binned.edges.dtype).expand(binned.codes.shape)
    return attach_bins(X, binned, key=key)


def load_svmlight_binned(path, *, n_bins: int = 255, sample_count: int = 200_000, seed: int = 0,
                         zero_based="auto", max_features: Optional[int] = None,
                         query_file=None) -> BinnedLoad:
    """Read ``path`` into bin codes (``n_bins``, ``sample_count``, ``seed`` as
    :func:`~torchrankboost.kernels.binning.bin_features`; ``zero_based``, ``max_features``,
    ``query_file`` as :func:`~.svmlight.load_svmlight`).

    Returns:
        :class:`BinnedLoad`: ``binned.codes`` ``(n, F)`` uint8 (int16 above 255 bins) equal
        to ``bin_features(load_svmlight(path).X, ...)``'s, the edges too; ``data.labels``
        ``(n,)`` float32, ``data.groups``, ``data.qid``.
    """
    got = stream_binned(path, n_bins=n_bins, sample_count=sample_count, seed=seed,
                        zero_based=zero_based, max_features=max_features, query_file=query_file)
    if got is not None:
        return got
    p, key = Path(path), (n_bins, sample_count, seed)
    from .svmlight import load_svmlight

    d = load_svmlight(p, zero_based=zero_based, max_features=max_features, query_file=query_file)
    b = bin_features(d.X, n_bins=n_bins, sample_count=sample_count, seed=seed,
                     max_bins=MAX_INT16_BINS)
    data = RankingData(_stand_in(b, key), d.labels, d.groups, d.qid, d.row, d.zero_based)
    return BinnedLoad(data, b, False)


def load_binned(path, *, n_bins: int = 255, sample_count: int = 200_000, seed: int = 0,
                options: Optional[ReadOptions] = None, stream_only: bool = False
                ) -> Optional[BinnedLoad]:
    """A file of any supported format read into bin codes, through the reader seam
    (:mod:`.readers`): the reader's own streaming path (SVMlight: :func:`stream_binned`),
    else the generic one over its row chunks (tables:
    :func:`~.tables.stream_binned_source`), else — or when streaming saves nothing — the
    file read whole and binned. The same codes and edges as
    ``bin_features(<the file's float matrix>, n_bins=, sample_count=, seed=)`` in every
    case. ``options``: the reading options (:class:`~.readers.ReadOptions`: SVMlight's
    numbering, the column roles of tables). ``stream_only``: ``None`` instead of a whole
    read."""
    from .readers import reader_for
    from .tables import stream_binned_source

    opts = ReadOptions() if options is None else options
    reader = reader_for(path)
    fast = getattr(reader, "read_binned", None)
    if fast is not None:
        got = fast(path, n_bins=n_bins, sample_count=sample_count, seed=seed, options=opts)
    else:
        with reader.open(path, opts.columns) as src:
            got = stream_binned_source(src, n_bins=n_bins, sample_count=sample_count,
                                       seed=seed)
    if got is not None:
        return BinnedLoad(got[0], got[1], True)
    if stream_only:
        return None
    from .sources import read_run_files
    from ..parallel.context import DistContext

    d = read_run_files([path], context=DistContext(), zero_based=opts.zero_based,
                       max_features=opts.max_features, columns=opts.columns)[0]
    b = bin_features(d.X, n_bins=n_bins, sample_count=sample_count, seed=seed,
                     max_bins=MAX_INT16_BINS)
    data = RankingData(_stand_in(b, (n_bins, sample_count, seed)), d.labels, d.groups, d.qid,
                       d.row, d.zero_based, d.feature_names, d.weight, d.position,
                       d.group_weight)
    return BinnedLoad(data, b, False)


def stream_binned(path, *, n_bins: int = 255, sample_count: int = 200_000, seed: int = 0,
                  zero_based="auto", max_features: Optional[int] = None,
                  query_file=None) -> Optional[BinnedLoad]:
    """:func:`load_svmlight_binned` by the streaming path alone, or ``None`` when that path
    declines the file (see the module docstring). ``n_bins`` in [2, 32766]."""
    check_n_bins(n_bins, MAX_INT16_BINS)
    p, key = Path(path), (n_bins, sample_count, seed)
    try:
        got = _streamed(p, n_bins, sample_count, seed, zero_based, max_features, query_file)
    except _Decline:
        return None
    if got is None:
        return None
    return BinnedLoad(RankingData(_stand_in(got[0], key), *got[1:]), got[0], True)


# ============================================================================ 1. scan
def _scan(p: Path) -> Tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` int64 byte offsets of the candidate data lines (``end``: one past
    the line's newline, or the file's end)."""
    starts: List[np.ndarray] = []
    ends: List[np.ndarray] = []
    size = p.stat().st_size
    with open(p, "rb") as fh:
        pos, first = 0, 0  # ``first``: where the line in progress started
        buf = np.empty(SCAN_BLOCK, dtype=np.uint8)
        while pos < size:
            got = fh.readinto(memoryview(buf))
            if not got:
                break
            nl = np.flatnonzero(buf[:got] == 10) + pos
            line_starts = np.concatenate([[first], nl[:-1] + 1]) if nl.size else np.zeros(0, np.int64)
            if nl.size:
                heads = _heads(fh, buf, got, pos, line_starts)
                keep = ~_SKIP[heads]
                starts.append(line_starts[keep])
                ends.append(nl[keep] + 1)
                first = int(nl[-1]) + 1
            pos += got
    if first < size:  # a last line without a newline
        with open(p, "rb") as fh:
            fh.seek(first)
            if not _SKIP[fh.read(1)[0]]:
                starts.append(np.array([first], np.int64))
                ends.append(np.array([size], np.int64))
    cat = (lambda a: np.concatenate(a).astype(np.int64) if a else np.zeros(0, np.int64))
    return cat(starts), cat(ends)


def _heads(fh, buf: np.ndarray, got: int, pos: int, line_starts: np.ndarray) -> np.ndarray:
    """First byte of each line (a line that began in an earlier block: read from the file)."""
    rel = line_starts - pos
    heads = np.empty(rel.size, dtype=np.uint8)
    inside = rel >= 0
    heads[inside] = buf[rel[inside]]
    if not inside.all():  # only the first line can start before this block
        at = fh.tell()
        fh.seek(int(line_starts[0]))
        heads[0] = fh.read(1)[0]
        fh.seek(at)
    return heads


# ============================================================================ parsing
def _parse(lib, chunk: bytes, shift: int, max_index: int, nthreads: int):
    """``(X (m, w) float32, y, qid or empty, max_index)`` of whole lines, or ``_Decline``."""
    from .svmlight import MAX_DENSE_BYTES

    state = lib.trl_new(0, shift, 1, max_index, MAX_DENSE_BYTES)
    if not state:
        raise _Decline
    try:
        arr = chunk if isinstance(chunk, np.ndarray) else np.frombuffer(chunk, dtype=np.uint8)
        if lib.trl_feed(state, arr.ctypes.data, arr.size, nthreads, 1) < 0:
            raise _Decline
        info = np.zeros(7, dtype=np.int64)
        lib.trl_info(state, info.ctypes.data)
        m, w, _, n_qid, _, mx, inf = (int(v) for v in info)
        if inf or 0 < n_qid < m:
            raise _Decline
        y, q = np.empty(m, np.float64), np.empty(m, np.int64)
        ptr = lib.trl_take(state, y.ctypes.data, q.ctypes.data)
        if ptr and m * w:
            X = np.asarray(fastread.Owned(lib, ptr, (m, w), np.float32))
        else:
            if ptr:
                lib.trl_free_buffer(ptr)
            X = np.zeros((m, w), np.float32)
        with np.errstate(over="ignore"):
            if not (np.isfinite(y).all() and np.isfinite(y.astype(np.float32)).all()):
                raise _Decline
        return X, y, (q if n_qid else q[:0]), mx
    finally:
        lib.trl_free(state)


def _widen(X: np.ndarray, w: int) -> np.ndarray:
    if X.shape[1] == w:
        return X
    out = np.zeros((X.shape[0], w), np.float32)
    out[:, :X.shape[1]] = X
    return out


# ============================================================================ 2. sample
def _sample(lib, p: Path, starts, ends, idx, shift, max_index, T) -> Tuple[np.ndarray, bool]:
    """The sampled lines' values ``(ns, w)`` and whether they carry qids."""
    parts, has_q = [], None
    with open(p, "rb") as fh:  # pread, not mmap: a mapping's fault-around maps the whole file
        fd = fh.fileno()
        for b0 in range(0, idx.size, _SAMPLE_BATCH):
            rows = idx[b0:b0 + _SAMPLE_BATCH]
            chunk = b"".join(_line(fd, s, e) for s, e in zip(starts[rows].tolist(),
                                                            ends[rows].tolist()))
            X, _, q, _ = _parse(lib, chunk, shift, max_index, T)
            if X.shape[0] != rows.size or (has_q is not None and has_q != bool(q.size)):
                raise _Decline
            has_q = bool(q.size)
            parts.append(X)
    w = max(x.shape[1] for x in parts)
    return np.concatenate([_widen(x, w) for x in parts]), bool(has_q)


def _line(fd: int, start: int, end: int) -> bytes:
    b = os.pread(fd, end - start, start)
    return b if b.endswith(b"\n") else b + b"\n"


# ============================================================================ 3. code
def _streamed(p: Path, n_bins, sample_count, seed, zero_based, max_features, query_file):
    """``(binned, labels, groups, qid, row, zero_based)`` or ``None``/``_Decline``."""
    from .svmlight import DEFAULT_MAX_FEATURES

    lib = fastread.library()
    if lib is None or p.suffix in (".gz", ".bz2") or not p.is_file() or zero_based not in (
            True, False, "auto"):
        return None
    starts, ends = _scan(p)
    n = starts.size
    if n <= sample_count or isinstance(sample_count, bool):
        return None  # the sample is the whole file: nothing to save
    limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    shift = 0 if zero_based is True else 1  # "auto" with an index 0 declines (-> 0-based)
    T = torch.get_num_threads()
    idx = sample_rows(n, sample_count, seed, "cpu").numpy()
    S, has_q = _sample(lib, p, starts, ends, idx, shift, limit, T)
    del starts, ends
    dtype, missing = code_dtype(n_bins)
    edges, num_bins, _, _ = edges_and_sample_codes(torch.from_numpy(S), n_bins, S.shape[0],
                                                    seed, None, None)
    del S
    codes, y, q, has_missing = _code_file(lib, p, n, edges, missing, dtype, shift, limit, T, has_q)
    F = codes.shape[1]
    if F > edges.shape[0]:  # features never seen in the sample: all zero there, one bin
        pad = torch.full((F - edges.shape[0], edges.shape[1]), float("inf"), dtype=edges.dtype)
        edges = torch.cat([edges, pad])
        num_bins = torch.cat([num_bins, torch.ones(F - num_bins.numel(), dtype=torch.int64)])
    binned = BinnedFeatures(codes=codes, edges=edges, num_bins=num_bins, has_missing=has_missing,
                            missing_code=missing, n_bins=n_bins)
    from .svmlight import check_query_runs, file_queries

    groups, qid = file_queries(p, q, n, query_file,
                               lambda: check_query_runs(p, q, 0, None, None, None))
    labels = torch.from_numpy(y).to(torch.float32)
    return binned, labels, groups, qid, torch.arange(n), bool(shift == 0)


def _code_file(lib, p: Path, n: int, edges: Tensor, missing: int, dtype, shift: int,
               limit: int, T: int, has_q: bool):
    """Parse the file block by block, coding each block: ``(codes, y, qid, has_missing)``."""
    from .svmlight import MAX_DENSE_BYTES

    W = edges.shape[0]
    codes = torch.empty((n, W), dtype=dtype)
    y, q = np.empty(n, np.float64), np.empty(n if has_q else 0, np.int64)
    has_missing = torch.zeros(W, dtype=torch.bool)
    r = 0
    for chunk in _blocks(p):
        X, yb, qb, _ = _parse(lib, chunk, shift, limit, T)
        m, w = X.shape
        if r + m > n or bool(qb.size) != has_q or (m and not has_q and qb.size):
            raise _Decline
        if w > codes.shape[1]:  # a wider block: features the sample never saw
            if n * w > MAX_DENSE_BYTES:
                raise _Decline
            codes = _grow(codes, w, r)
            pad = torch.full((w - edges.shape[0], edges.shape[1]), float("inf"), dtype=edges.dtype)
            edges = torch.cat([edges, pad])
            has_missing = torch.cat([has_missing, torch.zeros(w - has_missing.numel(), dtype=torch.bool)])
        Xt = torch.from_numpy(_widen(X, codes.shape[1]))
        codes[r:r + m] = apply_bins(Xt, edges, missing_code=missing, dtype=dtype)
        has_missing |= torch.isnan(Xt).any(0)
        y[r:r + m] = yb
        if has_q:
            q[r:r + m] = qb
        r += m
    if r != n:
        raise _Decline
    return codes, y, q, has_missing


def _grow(codes: Tensor, w: int, rows: int) -> Tensor:
    out = torch.empty((codes.shape[0], w), dtype=codes.dtype)
    out[:rows, :codes.shape[1]] = codes[:rows]
    out[:rows, codes.shape[1]:] = 0  # those rows had 0 there: filled by the caller's recode
    return out


def _blocks(p: Path):
    """Whole-line blocks of about :data:`~.fastread.BLOCK` bytes, as uint8 views of one
    reused buffer (valid until the next block)."""
    buf = np.empty(fastread.BLOCK, dtype=np.uint8)
    filled = 0
    with open(p, "rb") as fh:
        while True:
            got = fh.readinto(memoryview(buf)[filled:])
            filled += got
            if got == 0:
                if filled:
                    yield buf[:filled]
                return
            if filled < buf.size:
                continue
            cut = _after_last_newline(buf)
            if cut < 0:  # a line longer than the buffer
                buf = np.concatenate([buf, np.empty_like(buf)])
                continue
            yield buf[:cut]
            rest = filled - cut
            buf[:rest] = buf[cut:filled].copy()
            filled = rest


def _after_last_newline(buf: np.ndarray, window: int = 1 << 20) -> int:
    """One past the last ``\\n`` of ``buf`` (searched backwards by windows), or -1."""
    end = buf.size
    while end > 0:
        lo = max(0, end - window)
        hit = np.flatnonzero(buf[lo:end] == 10)
        if hit.size:
            return lo + int(hit[-1]) + 1
        end = lo
    return -1


# ============================================================================ row chunks
def bin_row_chunks(chunk, sizes, *, n_bins: int = 255, sample_count: int = 200_000,
                   seed: int = 0) -> BinnedFeatures:
    """Bin a float matrix given as row chunks, never holding it whole.

    Args:
        chunk: ``chunk(i)`` returns chunk ``i``'s rows, a ``(sizes[i], F)`` float32 array or
            tensor (called twice per chunk, in order: once for the sample, once to code it;
            it must return the same values both times).
        sizes: rows of each chunk.
        n_bins: as :func:`~torchrankboost.kernels.binning.bin_features` (in [2, 32766]:
            int16 codes above 255).
        sample_count: as :func:`~torchrankboost.kernels.binning.bin_features`.
        seed: as :func:`~torchrankboost.kernels.binning.bin_features`.

    Returns:
        :class:`BinnedFeatures` equal to ``bin_features(cat(chunks), ...)``'s (the same
        seeded sample of ``min(n, sample_count)`` rows places the edges; every row is coded
        by them), at a peak of the ``(n, F)`` codes plus one chunk plus the sample.
    """
    check_n_bins(n_bins, MAX_INT16_BINS)
    sizes = [int(s) for s in sizes]
    n = sum(sizes)
    bounds = np.cumsum([0] + sizes)
    idx = sample_rows(n, sample_count, seed, "cpu")
    idx = np.arange(n) if idx is None else idx.numpy()
    parts = []
    for i in range(len(sizes)):  # pass 1: the sampled rows
        lo, hi = np.searchsorted(idx, bounds[i:i + 2])
        if hi > lo:
            parts.append(torch.as_tensor(chunk(i))[torch.from_numpy(idx[lo:hi] - bounds[i])])
    S = torch.cat(parts)
    del parts
    dtype, missing = code_dtype(n_bins)
    edges, num_bins, _, _ = edges_and_sample_codes(S, n_bins, max(S.shape[0], 2), seed,
                                                    None, None)
    F = S.shape[1]
    del S
    codes = torch.empty((n, F), dtype=dtype)
    has_missing = torch.zeros(F, dtype=torch.bool)
    for i in range(len(sizes)):  # pass 2: every row coded
        X = torch.as_tensor(chunk(i))
        codes[bounds[i]:bounds[i + 1]] = apply_bins(X, edges, missing_code=missing, dtype=dtype)
        has_missing |= torch.isnan(X).any(0)
    return BinnedFeatures(codes=codes, edges=edges, num_bins=num_bins, has_missing=has_missing,
                          missing_code=missing, n_bins=n_bins)
