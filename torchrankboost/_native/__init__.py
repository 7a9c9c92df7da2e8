"""Compile a C source with the machine's C compiler, cache the library, load it with ctypes.

Any part of the package with a few hundred lines of C beside its Python (the tree kernels in
``boosting/kernels/trees.c``, the shared-memory sum in ``parallel/shm.c``) loads them with :func:`load_library`::

    lib = load_library(Path(__file__).with_name("trees.c"), declare=declare_fn)

The library is built once per machine, source and compiler into a cache folder
(``$TORCHRANKBOOST_CACHE``, else ``$XDG_CACHE_HOME/torchrankboost``, else
``~/.cache/torchrankboost``, else a folder in the temporary directory), named by a hash of
the source, the compiler (``$CC``, default ``cc``), the flags (``-O2 -fopenmp
-ffp-contract=off``, no ``-ffast-math``: kernels may promise results bit for bit equal to a
torch reference), the machine and the platform, and written atomically so that concurrent
processes (several ranks of one job) never load a half-written library.

The outcome is decided once per process and source, visibly: :func:`load_library` returns
the library or raises :class:`NativeUnavailable` with the reason (no compiler, a failed
build, ``TORCHRANKBOOST_NATIVE=0``, a failed ``declare``), every later call the same. This
module knows no source of its own: each room names its C file.
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
from typing import Callable, Dict, Optional, Tuple, Union

__all__ = ["load_library", "NativeUnavailable", "ptr"]

_log = logging.getLogger("torchrankboost")
_FLAGS = ["-O2", "-std=gnu99", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off"]
_lock = threading.RLock()
_built: Dict[Path, Union[Path, str]] = {}  # source -> built library path, or the error message
_loaded: Dict[Tuple[Path, Optional[Callable]], ctypes.CDLL] = {}

Declare = Callable[[ctypes.CDLL], None]


class NativeUnavailable(RuntimeError):
    """A compiled library cannot be used here; the message says why."""


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


def _library_path(source: Path, cc: str) -> Path:
    key = hashlib.sha256(source.read_bytes() + " ".join([cc] + _FLAGS).encode()
                         + platform.machine().encode() + sys.platform.encode()).hexdigest()[:16]
    return _cache_dir() / f"{source.stem}-{key}.so"


def _build(source: Path, cc: str, target: Path) -> None:
    if shutil.which(cc) is None:
        raise NativeUnavailable(f"no C compiler: {cc!r} is not on PATH (set CC to one)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp.so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [cc, *_FLAGS, str(source), "-o", tmp, "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise NativeUnavailable(f"building {source.name} failed ({' '.join(cmd)}): "
                                    f"{res.stderr.strip()[-2000:]}")
        os.replace(tmp, target)  # atomic: a concurrent process sees all of it or nothing
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _built_library(source: Path) -> Path:
    """The compiled library of ``source`` (built on first use), once per process."""
    got = _built.get(source)
    if isinstance(got, str):
        raise NativeUnavailable(got)
    if got is not None:
        return got
    try:
        if os.environ.get("TORCHRANKBOOST_NATIVE", "1").strip().lower() in ("0", "no", "false", "off"):
            raise NativeUnavailable("disabled by TORCHRANKBOOST_NATIVE=0")
        if not source.is_file():
            raise NativeUnavailable(f"no C source at {source}")
        cc = os.environ.get("CC", "cc")
        path = _library_path(source, cc)
        if not path.exists():
            _log.info("building the compiled kernels of %s: %s", source.name, path)
            _build(source, cc, path)
    except NativeUnavailable as exc:
        _built[source] = str(exc)
        raise
    except (OSError, RuntimeError) as exc:  # an unwritable cache folder, a full disk
        _built[source] = f"building {source.name} failed: {exc}"
        raise NativeUnavailable(_built[source]) from None
    _built[source] = path
    return path


def load_library(source: Union[str, Path], *, declare: Optional[Declare] = None) -> ctypes.CDLL:
    """The ctypes library compiled from the C file ``source``, built on first use.

    Args:
        source: path of a C99 + OpenMP source file (no Python headers needed).
        declare: ``declare(lib)`` sets the ``argtypes`` / ``restype`` of the functions the
            caller uses and may check an ABI version (raising :class:`NativeUnavailable`).

    Returns one ``ctypes.CDLL`` per ``(source, declare)`` (cached). Raises
    :class:`NativeUnavailable` with the reason when the library cannot be had; the build's
    outcome is decided once per process and source.
    """
    src = Path(source).resolve()
    with _lock:
        lib = _loaded.get((src, declare))
        if lib is not None:
            return lib
        path = _built_library(src)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            _built[src] = f"loading {path} failed: {exc}"
            raise NativeUnavailable(_built[src]) from None
        if declare is not None:
            try:
                declare(lib)
            except NativeUnavailable as exc:
                _built[src] = f"{path}: {exc}"
                raise NativeUnavailable(_built[src]) from None
            except (AttributeError, TypeError) as exc:  # a function missing from the library
                _built[src] = f"{path}: {exc}"
                raise NativeUnavailable(_built[src]) from None
        _loaded[(src, declare)] = lib
        _log.info("compiled kernels loaded from %s", path)
        return lib


def ptr(t) -> Optional[int]:
    """The data pointer of a contiguous tensor (or None for ``None``), for a ctypes call."""
    if t is None:
        return None
    return t.data_ptr()
