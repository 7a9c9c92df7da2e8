"""The compiled SVMlight/LETOR reader: ``svmlight_reader.c`` beside this file (C99 + OpenMP
through ctypes, built on first use and cached by :func:`torchrankboost._native.load_library`,
the same private, SHA-256-checked cache as the tree kernels).

A file (or a byte range ``[start, end)`` of one) is read in blocks of :data:`BLOCK` bytes
(``.gz``/``.bz2`` decompressed by Python's ``gzip``/``bz2`` on the way); the whole lines of a
block are cut at line ends into ``T = torch.get_num_threads()`` chunks parsed in parallel, and
their rows are appended to one dense row-major matrix ``X`` of shape ``(n, w)`` (float32 or
float64; an entry ``i:v`` lands in column ``i - shift``, ``shift`` 1 unless some index is 0),
labels ``y`` (float64, ``(n,)``) and qids (int64). Peak memory is ``X`` plus one block and
its parsed entries; ``X`` grows in place (``realloc``), no sparse copy of the data is made.

The grammar is a strict subset of scikit-learn's reader and the values are the ones it
computes (correctly rounded decimal → float64, then cast to the dtype): for anything else
(a malformed line, a bare ``\\r``, an index out of bounds, lines with and without ``qid:``
mixed, an unreadable or corrupt file, no C compiler) :func:`read_part` returns ``None`` and
the caller reads the file with the Python path, which names the file and line of a problem.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import torch

from .. import _native
from .lines import open_text

__all__ = ["BLOCK", "NativeMatrix", "available", "read_part", "SOURCE"]

SOURCE = Path(__file__).with_name("svmlight_reader.c")
_ABI = 1
#: bytes of text handed to the parser at a time (cut into one chunk per thread)
BLOCK = 32 << 20
_INT32_MAX = (1 << 31) - 1


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    sig = {
        "trl_abi_version": ([], i32),
        "trl_new": ([i32, i64, i32, i64, i64], p),
        "trl_free": ([p], None),
        "trl_free_buffer": ([p], None),
        "trl_feed": ([p, p, i64, i32, i32], i64),
        "trl_info": ([p, p], None),
        "trl_take": ([p, p, p], p),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    if lib.trl_abi_version() != _ABI:
        raise _native.NativeUnavailable("unexpected reader ABI version")


def library() -> Optional[ctypes.CDLL]:
    """The compiled reader, or ``None`` when it cannot be had (no compiler, a failed build,
    ``TORCHRANKBOOST_NATIVE=0``): then the Python path reads every file."""
    try:
        return _native.load_library(SOURCE, declare=_declare)
    except _native.NativeUnavailable:
        return None


def available() -> bool:
    """Whether the compiled reader can be used here."""
    return library() is not None


class Owned:
    """A buffer malloc'ed by the reader, seen by NumPy through ``__array_interface__`` and
    freed when the last array on it is garbage."""

    def __init__(self, lib, ptr: int, shape: Tuple[int, int], dtype) -> None:
        self._lib, self._ptr = lib, ptr
        self.__array_interface__ = {"data": (ptr, False), "shape": shape,
                                    "typestr": np.dtype(dtype).str, "version": 3}

    def __del__(self) -> None:
        self._lib.trl_free_buffer(self._ptr)


class NativeMatrix:
    """What the compiled reader parsed of one file (or byte range).

    Attributes:
        X: ``(n, w)`` ndarray; column ``c`` holds feature index ``c + shift``.
        shift: 1 (no index 0 seen, unless 0-based reading was asked) or 0.
        min_index, max_index: smallest / largest feature index of an entry (-1: none);
            explicit ``i:0`` entries count, as in scikit-learn's sparse matrix.
        any_inf: some value is infinite in the dtype.
        shape: ``(n, width)`` of scikit-learn's matrix of the same read (``width``: its
            column count, set by the caller).
    """

    def __init__(self, X: np.ndarray, shift: int, min_index: int, max_index: int,
                 any_inf: bool) -> None:
        self.X, self.shift = X, shift
        self.min_index, self.max_index, self.any_inf = min_index, max_index, any_inf
        self.shape = (X.shape[0], max(max_index, 0) + 1)

    @property
    def has_zero(self) -> bool:
        """Some entry has feature index 0 (what ``zero_based="auto"`` decides on)."""
        return self.min_index == 0


def _feed_file(lib, state, path: Path, rng: Optional[Tuple[int, int]], nthreads: int) -> bool:
    """Stream the file (or its byte range) through ``trl_feed``; ``False`` on a parse
    failure (the caller falls back)."""
    buf = np.empty(BLOCK, dtype=np.uint8)
    filled = 0
    with open_text(path) as fh:
        left = None
        if rng is not None:
            fh.seek(rng[0])
            left = rng[1] - rng[0]
        while True:
            want = len(buf) - filled if left is None else min(len(buf) - filled, left)
            got = fh.readinto(memoryview(buf)[filled:filled + want]) if want else 0
            filled += got
            if left is not None:
                left -= got
            at_end = got == 0 or left == 0
            used = lib.trl_feed(state, buf.ctypes.data, filled, nthreads, int(at_end))
            if used < 0:
                return False
            if at_end:
                return True
            if used == 0 and filled == len(buf):  # a line longer than the buffer
                buf = np.concatenate([buf, np.empty_like(buf)])
                continue
            rest = filled - used
            if rest:
                buf[:rest] = buf[used:filled].copy()
            filled = rest


def read_part(path: Path, rng: Optional[Tuple[int, int]], *, npdt, zero_based,
              max_index: int, max_bytes: int, nthreads: Optional[int] = None
              ) -> Optional[Tuple[NativeMatrix, np.ndarray, np.ndarray]]:
    """``(matrix, y, qid)`` of a file or of its byte range ``rng``, or ``None`` when the
    compiled reader is unavailable or declines (then read it with the Python path).

    ``qid`` is ``(n,)`` when every data line has ``qid:``, ``(0,)`` when none has; lines of
    both kinds, an index above ``max_index`` (or 0 with ``zero_based=False``), a matrix over
    ``max_bytes``, and any unreadable input return ``None``."""
    lib = library()
    if lib is None:
        return None
    T = torch.get_num_threads() if nthreads is None else int(nthreads)
    dbl = npdt == np.float64
    fixed = not isinstance(zero_based, str)  # True/False: the numbering is given
    state = lib.trl_new(int(dbl), 0 if fixed and zero_based else 1, int(fixed),
                        min(int(max_index), _INT32_MAX), int(max_bytes))
    if not state:
        return None
    try:
        try:
            if not _feed_file(lib, state, path, rng, T):
                return None
        except (EOFError, OSError, ValueError):  # a corrupt .gz/.bz2: the Python path says so
            return None
        info = np.zeros(7, dtype=np.int64)
        lib.trl_info(state, info.ctypes.data)
        n, w, shift, n_qid, mn, mx, inf = (int(v) for v in info)
        if 0 < n_qid < n:
            return None
        y = np.empty(n, dtype=np.float64)
        q = np.empty(n, dtype=np.int64)
        ptr = lib.trl_take(state, y.ctypes.data, q.ctypes.data)
        if ptr and n * w:
            X = np.asarray(Owned(lib, ptr, (n, w), npdt))
        else:
            if ptr:
                lib.trl_free_buffer(ptr)
            X = np.zeros((n, w), dtype=npdt)
        return NativeMatrix(X, shift, mn, mx, bool(inf)), y, (q if n_qid else q[:0])
    finally:
        lib.trl_free(state)
