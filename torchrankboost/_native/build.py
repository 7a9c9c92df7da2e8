"""How the package's C sources become shared libraries: the one list of sources, the flags and
the compile command, used by ``setup.py`` at install (``pip install``, ``pip wheel``, an
editable install) and by the loader's fallback in a source checkout (:mod:`torchrankboost._native`).

Standard library only: ``setup.py`` loads this file by its path, before the package (and
torch) can be imported.

Each source ``<room>/<stem>.c`` becomes ``<room>/lib<stem>.so`` beside it (``.dylib`` on
macOS, ``.dll`` on Windows): a plain C library, no Python C API, loaded with ctypes. The
command is ``$CC`` (default ``cc``) with ``-O2 -std=gnu99 -fPIC -fopenmp -ffp-contract=off``,
never ``-ffast-math`` (the tree kernels promise results equal bit for bit to the torch
reference), plus :data:`STAMP_SOURCE`, which gives the library a function
``const char *trb_build_stamp(void)`` returning :func:`stamp` of the source: the loader
compares it with the source beside the library and never runs kernels built from another
version of it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["SOURCES", "CFLAGS", "LDFLAGS", "BuildError", "library_name", "library_path",
           "stamp", "compile_library"]

PACKAGE = Path(__file__).resolve().parent.parent
#: the package's C sources, relative to the package folder: every ``<room>/*.c`` (each room
#: names its own; ``_native/`` holds only the stamp); the shared-memory sum of ``parallel/``
#: uses Linux futexes, so it is built on Linux only
SOURCES = tuple(sorted(
    p.relative_to(PACKAGE).as_posix() for p in PACKAGE.glob("*/*.c")
    if p.parent.name != "_native" and (p.parent.name != "parallel"
                                       or sys.platform.startswith("linux"))))
CFLAGS = ("-O2", "-std=gnu99", "-fPIC", "-fopenmp", "-ffp-contract=off")
LDFLAGS = ("-shared", "-fopenmp")
LIBS = ("-lm",)
#: compiled into every library: ``trb_build_stamp()``, the stamp of its source
STAMP_SOURCE = Path(__file__).with_name("stamp.c")


class BuildError(RuntimeError):
    """A library could not be built; the message says why (no compiler, no OpenMP, ...)."""


def _suffix() -> str:
    if sys.platform == "darwin":
        return ".dylib"
    return ".dll" if sys.platform == "win32" else ".so"


def library_name(stem: str) -> str:
    """The file name of the library built from ``<stem>.c`` on this platform."""
    return f"lib{stem}{_suffix()}"


def library_path(source: Path) -> Path:
    """Where the library of the C file ``source`` lives: beside it."""
    return source.with_name(library_name(source.stem))


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.MULTILINE)


def source_bytes(source: Path) -> bytes:
    """The bytes of ``source`` and of the files it includes by ``#include "name"`` from its
    own folder (one level), so that editing such a header changes the stamp."""
    data = source.read_bytes()
    for name in _LOCAL_INCLUDE.findall(data):
        inc = source.parent / name.decode("utf-8", "replace")
        if inc.is_file():
            data += b"\0" + inc.read_bytes()
    return data


def stamp(source: Path) -> str:
    """The 16 hex digits that name one build of ``source``: its bytes (with its local
    includes, :func:`source_bytes`) and the flags."""
    flags = " ".join(CFLAGS + LDFLAGS + LIBS).encode()
    return hashlib.sha256(source_bytes(source) + b"\0" + flags).hexdigest()[:16]


def compile_library(source: Path, output: Path, *, cc: Optional[str] = None) -> None:
    """Compile ``source`` (with :data:`STAMP_SOURCE`) into the shared library ``output``.

    The library is written under a temporary name in ``output``'s folder and renamed into
    place (atomic: a concurrent process loads all of it or nothing). ``cc``: the compiler
    command (default ``$CC``, else ``cc``). Raises :class:`BuildError` with the compiler's
    message when there is no compiler or the build fails (no OpenMP, a non-GCC-like
    compiler); nothing is left behind then.
    """
    command = shlex.split(cc or os.environ.get("CC") or "cc")
    if not command or shutil.which(command[0]) is None:
        raise BuildError(f"no C compiler: {command[0] if command else cc!r} is not on PATH "
                         "(set CC to one)")
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    os.close(fd)
    try:
        cmd = [*command, *CFLAGS, f'-DTRB_BUILD_STAMP="{stamp(source)}"', str(source),
               str(STAMP_SOURCE), *LDFLAGS, "-o", tmp, *LIBS]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(f"building {source.name} failed ({_quoted(cmd)}): "
                             f"{res.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _quoted(cmd: Sequence[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)
