"""Compiled CPU kernels, built on first use with the machine's C compiler and loaded with ctypes.

The histogram tree learner's inner loops (node histograms, split search, row partition,
leaf sums, tree traversal) are a few hundred lines of C in ``trees.c`` beside this file. They
are compiled once per machine and source version into a cache folder
(``$TORCHRANKBOOST_CACHE``, else ``$XDG_CACHE_HOME/torchrankboost``, else
``~/.cache/torchrankboost``, else a folder in the temporary directory) with ``$CC`` (default ``cc``), ``-O2 -fopenmp
-ffp-contract=off`` (no ``-ffast-math``: the kernels reproduce the pure-torch reference bit for
bit), written atomically so that concurrent processes (several ranks of one job) never load a
half-written library.

The choice between these kernels and the pure-torch path is made once per process, visibly:
:func:`load` either returns the library or raises :class:`NativeUnavailable` with the reason
(no compiler, a failed build, ``TORCHRANKBOOST_NATIVE=0``); :func:`status` says which, and
the learner logs it (``torchrankboost`` logger) and warns once when it has to run the slower
torch path on CPU. The torch path is what runs on CUDA and what the tests compare the compiled
kernels with.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional

__all__ = ["load", "status", "NativeUnavailable", "ptr", "REDUCE_FN"]

_log = logging.getLogger("torchrankboost")
_SOURCE = Path(__file__).with_name("trees.c")
_FLAGS = ["-O2", "-std=gnu99", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off"]
_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_error: Optional[str] = None


#: the C type of the data-parallel reduction callback ``reduce(double *buf, int64_t len)``
REDUCE_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_double), ctypes.c_int64)


class NativeUnavailable(RuntimeError):
    """The compiled kernels cannot be used here; the message says why."""


def _cache_dir() -> Path:
    env = os.environ.get("TORCHRANKBOOST_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "torchrankboost"
    try:
        return Path.home() / ".cache" / "torchrankboost"
    except RuntimeError:  # no home folder (a bare service account): the temporary folder
        return Path(tempfile.gettempdir()) / f"torchrankboost-cache-{os.getuid()}"


def _library_path(cc: str) -> Path:
    src = _SOURCE.read_bytes()
    key = hashlib.sha256(src + " ".join([cc] + _FLAGS).encode() + platform.machine().encode()
                         + sys.platform.encode()).hexdigest()[:16]
    return _cache_dir() / f"trees-{key}.so"


def _build(cc: str, target: Path) -> None:
    if shutil.which(cc) is None:
        raise NativeUnavailable(f"no C compiler: {cc!r} is not on PATH (set CC to one)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [cc, *_FLAGS, str(_SOURCE), "-o", tmp, "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise NativeUnavailable(f"building the kernels failed ({' '.join(cmd)}): "
                                    f"{res.stderr.strip()[-2000:]}")
        os.replace(tmp, target)  # atomic: a concurrent process sees all of it or nothing
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    sig = {
        "trb_abi_version": ([], i32),
        "trb_histogram": ([p, i64, i64, p, i64, p, p, i64, i32], None),
        "trb_subtract": ([p, p, p, i64], None),
        "trb_best_split": ([p, i64, i64, p, p, p, i64, d, d, d, p], None),
        "trb_partition": ([p, i64, p, i64, i64, i64, i32, i32, p], i64),
        "trb_leaf_sums": ([p, p, p, i64, p, p], None),
        "trb_tree_leaves": ([p, i64, i64, p, p, p, p, p, i64, i32, p, i32], None),
        "trb_tree_leaves_raw": ([p, i32, i64, i64, p, p, p, p, p, i64, p, i32], None),
        "trb_leaf_struct_size": ([], i64),
        "trb_scatter_leaves": ([p, p, p, i64, p, p, i32], None),
        "trb_shm_allreduce": ([p, p, i64, i32, i32, p, i64, i64, d], i32),
        "trb_grow": ([p, i64, i64, p, i64, i32, p, i64, p, p, i64, d, i64, d, d, i64, i64, i32,
                      p, i64, p, p, p, i32, REDUCE_FN, p, p, p, p, p, p, p, p, p, p, p, p], i64),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res


def load() -> ctypes.CDLL:
    """The compiled kernel library (built on first use); :class:`NativeUnavailable` if it
    cannot be had. The outcome is decided once per process."""
    global _lib, _error
    with _lock:
        if _lib is not None:
            return _lib
        if _error is not None:
            raise NativeUnavailable(_error)
        try:
            if os.environ.get("TORCHRANKBOOST_NATIVE", "1").strip().lower() in ("0", "no", "false", "off"):
                raise NativeUnavailable("disabled by TORCHRANKBOOST_NATIVE=0")
            cc = os.environ.get("CC", "cc")
            path = _library_path(cc)
            if not path.exists():
                _log.info("building the compiled tree kernels: %s", path)
                _build(cc, path)
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:
                raise NativeUnavailable(f"loading {path} failed: {exc}") from None
            _declare(lib)
            if lib.trb_abi_version() != 1:
                raise NativeUnavailable(f"{path}: unexpected kernel ABI version")
        except NativeUnavailable as exc:
            _error = str(exc)
            raise
        except (OSError, RuntimeError) as exc:  # an unwritable cache folder, a full disk
            _error = f"building the kernels failed: {exc}"
            raise NativeUnavailable(_error) from None
        _lib = lib
        _log.info("compiled tree kernels loaded from %s", path)
        return lib


def status() -> str:
    """``"native"`` when the compiled kernels load here, else ``"torch (<reason>)"``."""
    try:
        load()
        return "native"
    except NativeUnavailable as exc:
        return f"torch ({exc})"


def ptr(t) -> int:
    """The data pointer of a contiguous tensor (or None for ``None``), for a ctypes call."""
    if t is None:
        return None
    return t.data_ptr()
