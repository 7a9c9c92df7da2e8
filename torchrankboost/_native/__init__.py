"""Compile a C source with the machine's C compiler, cache the library, load it with ctypes.

Any part of the package with a few hundred lines of C beside its Python (the tree kernels in
``kernels/trees.c``, the shared-memory sum in ``parallel/shm.c``, the SVMlight reader in
``data/svmlight_reader.c``) loads them with :func:`load_library`::

    lib = load_library(Path(__file__).with_name("trees.c"), declare=declare_fn)

The library is built once per machine, source and compiler into a cache folder
(``$TORCHRANKBOOST_CACHE``, else ``$XDG_CACHE_HOME/torchrankboost``, else
``~/.cache/torchrankboost``, else a folder in the temporary directory), named by a hash of
the source (with the files it includes from its folder), the compiler (``$CC``, default
``cc``), the flags (``-O2 -fopenmp -ffp-contract=off``, no ``-ffast-math``: kernels may
promise results bit for bit equal to a torch reference), the machine and the platform, and
written atomically so that concurrent processes (several ranks of one job) never load a
half-written library.

**The cache is trusted only when it is private.** A library in the cache is code that runs
in this process, so the loader never opens one that another local user could have placed or
changed:

* the cache folder is created with mode 0700; an existing one is used only when it is a real
  folder (not a symbolic link) owned by the current user and not writable by group or
  others. Otherwise (a shared ``TORCHRANKBOOST_CACHE``, a world-writable
  ``XDG_CACHE_HOME``) a fresh private folder from :func:`tempfile.mkdtemp` is used for
  this process, with a warning; without a home folder it is such a folder too (never a
  predictable path in the temporary directory);
* a build writes the library under a name that carries its own SHA-256
  (``<source>-<key>-<digest>.so``) and then, atomically, a record ``<source>-<key>.sha256``
  with the full digest; a load reads the record, checks that the library and the record are
  regular files owned by the current user and not writable by group or others, and that the
  library's SHA-256 is the recorded one. A truncated, swapped or foreign file is rebuilt,
  never loaded.

The outcome is decided once per process and source, visibly: :func:`load_library` returns
the library or raises :class:`NativeUnavailable` with the reason (no compiler, a failed
build, ``TORCHRANKBOOST_NATIVE=0``, a failed ``declare``), every later call the same. This
module knows no source of its own: each room names its C file.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import platform
import re
import stat
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
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


_private_fallback: Optional[Path] = None  # this process's own folder, made when needed


def _requested_cache_dir() -> Optional[Path]:
    """The cache folder the environment asks for (``None``: no home folder)."""
    env = os.environ.get("TORCHRANKBOOST_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "torchrankboost"
    try:
        return Path.home() / ".cache" / "torchrankboost"
    except RuntimeError:  # no home folder (a bare service account)
        return None


def _untrusted(st: os.stat_result, what: str) -> Optional[str]:
    """Why a file or folder with this ``lstat`` cannot be trusted (``None``: it can)."""
    if stat.S_ISLNK(st.st_mode):
        return f"{what} is a symbolic link"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{what} is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _private_dir() -> Path:
    """A fresh folder of this process (mode 0700, unpredictable name), made once."""
    global _private_fallback
    if _private_fallback is None:
        _private_fallback = Path(tempfile.mkdtemp(prefix="torchrankboost-cache-"))
        atexit.register(shutil.rmtree, _private_fallback, True)
    return _private_fallback


def _cache_dir() -> Path:
    """The folder of the compiled libraries: the requested one when it is private to this
    user (created with mode 0700), else this process's own fresh folder."""
    want = _requested_cache_dir()
    if want is None:
        return _private_dir()
    try:
        want.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _untrusted(os.lstat(want), f"the cache folder {want}")
    except OSError as exc:
        why = f"the cache folder {want} cannot be used ({exc})"
    if why is None:
        return want
    _log.warning("%s: compiled kernels are built in a private folder instead", why)
    warnings.warn(f"torchrankboost: {why}; compiled kernels are built in a private temporary "
                  f"folder instead", RuntimeWarning, stacklevel=4)
    return _private_dir()


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)


def _source_bytes(source: Path) -> bytes:
    """The bytes of ``source`` and of the files it includes by ``#include "name"`` from its
    own folder (one level: a change to such a file rebuilds the library)."""
    data = source.read_bytes()
    for name in _LOCAL_INCLUDE.findall(data):
        inc = source.parent / name.decode("utf-8", "replace")
        if inc.is_file():
            data += b"\0" + inc.read_bytes()
    return data


def _library_key(source: Path, cc: str) -> str:
    return hashlib.sha256(_source_bytes(source) + " ".join([cc] + _FLAGS).encode()
                          + platform.machine().encode() + sys.platform.encode()).hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verified_library(record: Path) -> Optional[Path]:
    """The library that ``record`` names when both are private to this user and the
    library's SHA-256 is the recorded one; ``None`` otherwise (then it is rebuilt)."""
    try:
        if _untrusted(os.lstat(record), str(record)) is not None:
            return None
        digest = record.read_text().strip()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return None
        lib = record.with_name(f"{record.stem}-{digest[:16]}.so")
        st = os.lstat(lib)
        if _untrusted(st, str(lib)) is not None or not stat.S_ISREG(st.st_mode):
            return None
        return lib if _sha256(lib) == digest else None
    except OSError:
        return None


def _build(source: Path, cc: str, record: Path) -> Path:
    """Compile ``source``, store the library under a name carrying its SHA-256, then the
    record of that digest (each step atomic); returns the library's path."""
    if shutil.which(cc) is None:
        raise NativeUnavailable(f"no C compiler: {cc!r} is not on PATH (set CC to one)")
    folder = record.parent
    fd, tmp = tempfile.mkstemp(prefix=record.stem + ".", suffix=".tmp.so", dir=folder)
    os.close(fd)
    fd, tmp_record = tempfile.mkstemp(prefix=record.stem + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        cmd = [cc, *_FLAGS, str(source), "-o", tmp, "-lm"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise NativeUnavailable(f"building {source.name} failed ({' '.join(cmd)}): "
                                    f"{res.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o700)
        digest = _sha256(Path(tmp))
        lib = folder / f"{record.stem}-{digest[:16]}.so"
        os.replace(tmp, lib)  # atomic: a concurrent process sees all of it or nothing
        Path(tmp_record).write_text(digest + "\n")
        os.replace(tmp_record, record)
        return lib
    finally:
        for leftover in (tmp, tmp_record):
            if os.path.exists(leftover):
                os.unlink(leftover)


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
        record = _cache_dir() / f"{source.stem}-{_library_key(source, cc)}.sha256"
        path = _verified_library(record)
        if path is None:
            _log.info("building the compiled kernels of %s in %s", source.name, record.parent)
            path = _build(source, cc, record)
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
