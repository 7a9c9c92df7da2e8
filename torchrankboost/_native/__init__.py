"""Load the package's compiled C libraries with ctypes.

Any part of the package with a few hundred lines of C beside its Python (the tree kernels in
``kernels/trees.c``, the shared-memory sum in ``parallel/shm.c``, the SVMlight reader in
``data/svmlight_reader.c``) loads its library with :func:`load_library`::

    lib = load_library(Path(__file__).with_name("trees.c"), declare=declare_fn)

**Where the libraries come from.** The package's build compiles them when it is installed
(``pip install .``, ``pip wheel .``, ``pip install -e .``: ``setup.py``'s ``build_ext``
through :mod:`.build`, with ``-O2 -fopenmp -ffp-contract=off``, never ``-ffast-math``):
``<room>/lib<stem>.so`` beside each source. :func:`load_library` opens that file, after
checking that it carries the build stamp of the source beside it (:func:`.build.stamp`: the
source's bytes and the flags), so kernels built from another version of a source never run.

* In a **source checkout** (the package folder sits beside ``pyproject.toml``: an editable
  install, or the folder on ``PYTHONPATH``) a library that is missing or stale (its source
  was edited) is rebuilt in place on first use, with the same command (``$CC``, default
  ``cc``), atomically (concurrent processes load all of it or nothing). The checkout is the
  user's own code, so its libraries need no other check.
* In an **installed** package nothing is compiled at run time. A library that the install
  could not build (no C compiler, or no OpenMP) means its torch fallback: said once, at
  import (:func:`warn_if_not_built`).

The outcome is decided once per process and source, visibly: :func:`load_library` returns
the library or raises :class:`NativeUnavailable` with the reason (not built at install, a
failed build, ``TORCHRANKBOOST_NATIVE=0``, a failed ``declare``), every later call the same.
A fallback that runs because of it is announced once per process, by
:func:`announce_fallback` (one ``RuntimeWarning``). This module knows no source of its own:
each room names its C file; :data:`.build.SOURCES` lists them for the build.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple, Union

from . import build

__all__ = ["load_library", "NativeUnavailable", "ptr", "announce_fallback", "warn_if_not_built",
           "SOURCE_CHECKOUT"]

_log = logging.getLogger("torchrankboost")
_lock = threading.RLock()
_failed: Dict[Path, str] = {}  # source -> why its library cannot be had (decided once)
_loaded: Dict[Tuple[Path, Optional[Callable]], ctypes.CDLL] = {}
_announced = False

Declare = Callable[[ctypes.CDLL], None]

_PACKAGE = Path(__file__).resolve().parent.parent
#: the package is a source checkout (beside its ``pyproject.toml``): missing or stale
#: libraries are built in place on first use
SOURCE_CHECKOUT = (_PACKAGE.parent / "pyproject.toml").is_file()
_REINSTALL = ("reinstall torchrankboost with a C compiler with OpenMP on PATH (gcc; e.g. "
              "pip install --force-reinstall --no-deps --no-binary torchrankboost torchrankboost)")


class NativeUnavailable(RuntimeError):
    """A compiled library cannot be used here; the message says why."""


def _disabled() -> bool:
    return os.environ.get("TORCHRANKBOOST_NATIVE", "1").strip().lower() in (
        "0", "no", "false", "off")


def _stale(path: Path, want: str) -> Optional[str]:
    """Why the library file ``path`` is not the build of stamp ``want`` (``None``: it is).
    The stamp is read from the file's bytes (the string ``trb_build_stamp()`` returns), never
    by loading it: a stale library's code does not run."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"{path.name} was not built"
    except OSError as exc:
        return f"{path} cannot be read ({exc})"
    if f"trb-build-stamp:{want}".encode() not in data:
        return f"{path} was built from another version of {path.stem[3:]}.c"
    return None


def _library_file(src: Path) -> Path:
    """The path of the up-to-date library of ``src``, built in place when this is a source
    checkout; raises :class:`NativeUnavailable`."""
    if _disabled():
        raise NativeUnavailable("disabled by TORCHRANKBOOST_NATIVE=0")
    if not src.is_file():
        raise NativeUnavailable(f"no C source at {src}")
    path, want = build.library_path(src), build.stamp(src)
    why = _stale(path, want)
    if why is None:
        return path
    if not SOURCE_CHECKOUT:
        if why.endswith("was not built"):
            why += " when torchrankboost was installed (no C compiler with OpenMP then)"
        raise NativeUnavailable(f"{why}; {_REINSTALL}")
    _log.info("building %s in place (source checkout): %s", path.name, why)
    try:
        build.compile_library(src, path)
    except build.BuildError as exc:
        raise NativeUnavailable(str(exc)) from None
    except OSError as exc:  # a read-only checkout, a full disk
        raise NativeUnavailable(f"building {path} failed: {exc}") from None
    why = _stale(path, want)
    if why is not None:  # the source changed while it was being built
        raise NativeUnavailable(why)
    return path


def load_library(source: Union[str, Path], *, declare: Optional[Declare] = None) -> ctypes.CDLL:
    """The ctypes library compiled from the C file ``source`` (see the module docstring).

    Args:
        source: path of a C99 + OpenMP source file of the package (no Python headers needed).
        declare: ``declare(lib)`` sets the ``argtypes`` / ``restype`` of the functions the
            caller uses and may check an ABI version (raising :class:`NativeUnavailable`).

    Returns one ``ctypes.CDLL`` per ``(source, declare)`` (cached). Raises
    :class:`NativeUnavailable` with the reason when the library cannot be had; the outcome
    is decided once per process and source.
    """
    src = Path(source).resolve()
    with _lock:
        lib = _loaded.get((src, declare))
        if lib is not None:
            return lib
        if src in _failed:
            raise NativeUnavailable(_failed[src])
        try:
            path = _library_file(src)
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:  # e.g. no libgomp on this machine
                raise NativeUnavailable(f"loading {path} failed: {exc}") from None
            if declare is not None:
                try:
                    declare(lib)
                except (AttributeError, TypeError) as exc:  # a function missing from it
                    raise NativeUnavailable(f"{path}: {exc}") from None
        except NativeUnavailable as exc:
            _failed[src] = str(exc)
            raise
        _loaded[(src, declare)] = lib
        _log.info("compiled kernels loaded from %s", path)
        return lib


def announce_fallback(message: str, *, stacklevel: int = 2) -> None:
    """Say ``message`` (compiled kernels are missing, a slower path runs) as one
    ``RuntimeWarning``, once per process: later calls are silent."""
    global _announced
    with _lock:
        if _announced:
            return
        _announced = True
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


def warn_if_not_built() -> None:
    """At the import of an installed package: one warning when the install built none or
    only some of the libraries of :data:`.build.SOURCES` (no C compiler with OpenMP then).
    A source checkout builds them on first use instead; ``TORCHRANKBOOST_NATIVE=0`` is the
    user's own choice, said when a fit falls back."""
    if SOURCE_CHECKOUT or _disabled():
        return
    missing = [Path(s).name for s in build.SOURCES
               if not build.library_path(_PACKAGE / s).is_file()]
    if missing:
        announce_fallback(
            f"torchrankboost: the compiled kernels ({', '.join(missing)}) were not built when "
            f"the package was installed (no C compiler with OpenMP then): their torch "
            f"fallbacks run, tree fits several times slower; {_REINSTALL}", stacklevel=3)


def ptr(t) -> Optional[int]:
    """The data pointer of a contiguous tensor (or None for ``None``), for a ctypes call."""
    if t is None:
        return None
    return t.data_ptr()
