"""Files the library writes, written so that a crash or a full disk never loses the old one.

:func:`atomic_write` writes through a temporary file in the target's folder, flushes and
``fsync``\\ s it, then renames it over the target with :func:`os.replace` (atomic on POSIX and
Windows within one file system) and finally ``fsync``\\ s the folder. A failure at any point
removes the temporary file and leaves the previous target untouched. The new file gets the
permissions a plain ``open(path, "w")`` would give (``0o666`` less the umask), not the
``0o600`` of a temporary file.

:func:`deferred_interrupts` holds SIGINT/SIGTERM while a file that must not be lost is
written (the partial model saved after a first Ctrl-C): a second Ctrl-C would otherwise
abort the write and the temporary file would be removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

__all__ = ["atomic_write", "atomic_path", "check_writable", "deferred_interrupts"]

PathLike = Union[str, os.PathLike]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows: folders cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _refuse_special(target: Path) -> None:
    if target.is_dir():
        raise IsADirectoryError(f"{target} is a directory, not a file")
    if target.exists() and not target.is_file():
        raise ValueError(f"{target} exists and is not a regular file (a pipe or a device?)")


@contextlib.contextmanager
def atomic_path(path: PathLike, *, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``path``; on a clean exit it replaces ``path`` atomically.

    For writers that want a file name (e.g. ``safetensors.torch.save_file``)::

        with atomic_path("model.safetensors") as tmp:
            save_file(tensors, str(tmp))
    """
    target = Path(path)
    _refuse_special(target)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix + ".tmp",
                                    dir=folder)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(folder)


def atomic_write(path: PathLike, write: Callable, *, mode: str = "w") -> None:
    """Write ``path`` atomically: ``write(fh)`` fills an open temporary file (text ``"w"``
    or binary ``"wb"``), which then replaces ``path``."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp:
        with open(tmp, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())


def check_writable(path: PathLike) -> Path:
    """Check *before* long work that ``path`` can be written: its folder exists (a missing
    folder is never created: a mistyped path must not become a new folder) and accepts a
    new file, and ``path`` is not a directory or a special file. Raises ``ValueError`` with
    the reason; returns the path."""
    target = Path(path)
    try:
        _refuse_special(target)
    except (IsADirectoryError, ValueError) as exc:
        raise ValueError(f"cannot write {target}: {exc}") from None
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ValueError(f"cannot write {target}: the folder {folder} does not exist "
                         f"(create it first)")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"cannot write {target}: {exc.strerror or exc}") from None
    if target.exists() and not os.access(target, os.W_OK):
        raise ValueError(f"cannot write {target}: the file is read-only")
    return target


@contextlib.contextmanager
def deferred_interrupts(note: Optional[str] = "saving; the file is written before the program "
                                              "stops", *, redeliver: bool = False
                        ) -> Iterator[list]:
    """Hold SIGINT and SIGTERM for the ``with`` block: a signal that arrives is recorded
    (the yielded list gets its number) and, with a ``note``, announced once on stderr, and
    the block runs to its end; the previous handlers are restored on exit and, with
    ``redeliver``, the first held signal is raised again then (so a Ctrl-C during C code
    that calls back into Python becomes a ``KeyboardInterrupt`` after that code returns).
    Outside the main thread (where handlers cannot be set) the block runs unprotected."""
    received: list = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def hold(signum, frame):  # noqa: ARG001 - the signal module's signature
        if not received and note:
            print(f"torchrankboost: {signal.Signals(signum).name} received while {note}",
                  file=sys.stderr, flush=True)
        received.append(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, hold)
        except (OSError, ValueError):  # a signal this platform cannot catch
            continue
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if redeliver and received:
            signal.raise_signal(received[0])
