"""Sums of float64 and int64 CPU tensors over the ranks of one host through shared memory: an
optional :class:`~torchrankboost.parallel.transport.Transport` that a
:class:`~torchrankboost.parallel.DistContext` of a gloo group puts before
``torch.distributed`` for float64 and int64 CPU sums (:func:`host_transport`)."""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile
import warnings
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from .. import _native
from .collectives import Collectives
from .errors import DistributedError
from .timeouts import wait_timeout
from .transport import dist as _dist, record_peers

__all__ = ["SharedMemorySum", "candidate", "host_transport"]

#: the C source of the sum, compiled at install, loaded by :func:`torchrankboost._native.load_library`
SOURCE = Path(__file__).with_name("shm.c")


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    lib.trb_shm_allreduce.argtypes = [p, p, i64, i32, i32, p, i64, i64, d, i32]
    lib.trb_shm_allreduce.restype = i32
    if lib.trb_shm_abi_version() != 3:
        raise _native.NativeUnavailable("unexpected shared-memory sum ABI version")


class SharedMemorySum:
    """Sums of float64 and int64 CPU tensors over the ranks of one host through shared memory.

    A loopback-socket all-reduce (gloo) costs about 1 ms a call whatever its size up to
    ~1 MB; a boosted tree makes one per split. When every rank of the process group runs on
    this host, rank 0 creates a shared mapping (a file in ``/dev/shm``, unlinked once every
    rank has mapped it) and each sum goes through ``trb_shm_allreduce`` (``shm.c``
    beside this module, compiled at install): every rank copies its tensor into its slot, waits for the
    others (a short spin, then asleep on a futex: a stopped peer costs the others no CPU),
    and sums the W slots **in rank order** — the same result on every rank, deterministic
    (int64, the fixed-point histograms of the tree learners: exact, wrapping as torch's).
    A peer that dies (named) or a wait beyond ``timeout_s`` (:func:`~.timeouts.wait_timeout`,
    60 s unless ``--timeout``/``TORCHRANKBOOST_TIMEOUT`` say otherwise) raises
    :class:`DistributedError` instead of hanging. Set up once per process group, by a
    collective, the first time a float64 / int64 CPU sum is asked of a gloo group; absent when the
    ranks span several hosts, when the compiled kernels are unavailable or with
    ``TORCHRANKBOOST_SHM=0`` (then gloo does every sum). The file's space is reserved when
    it is created (``posix_fallocate``): a ``/dev/shm`` too small for it (Docker's 64 MB with
    4 ranks) means gloo does every sum, with a one-line warning from rank 0, never a SIGBUS.
    """

    CAP_BYTES = 1 << 23  # largest tensor summed here (8 MiB, above a 136-feature histogram)
    DTYPES = (torch.float64, torch.int64)  # 8-byte values, summed as such
    TOTAL_BYTES = 1 << 28  # the whole mapping: 2 sets x W slots (smaller slots for many ranks)

    def __init__(self, ctx: Collectives, lib, path: str, size: int, cap: int):
        self.lib, self.rank, self.W, self.cap = lib, ctx.rank, ctx.world_size, cap
        self.map = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        self.ctrl = self.map[: 8 * (8 + 2 * self.W)].view(torch.int64)
        self.slots = self.map[8 * (8 + 2 * self.W):].view(torch.int64)
        self.epoch = 0
        self.timeout_s = wait_timeout()

    def accepts(self, t: Tensor, op: str) -> bool:
        return candidate(t, op, "gloo") and t.numel() <= self.cap

    def all_reduce(self, t: Tensor, op: str) -> Tensor:
        """The sum of ``t`` (float64 or int64) over the ranks in place (``op`` must be
        ``"SUM"``)."""
        rc = self.lib.trb_shm_allreduce(self.ctrl.data_ptr(), self.slots.data_ptr(), self.cap,
                                        self.rank, self.W, t.data_ptr(), t.numel(), self.epoch,
                                        self.timeout_s, int(t.dtype == torch.int64))
        self.epoch += 1
        if rc >= 4:  # rank rc - 4 died: the lowest live rank reports it
            dead = rc - 4
            raise DistributedError(f"rank {dead} died (its process is gone; rank {self.rank} "
                                   f"was waiting for it in a sum)", {dead: "died"},
                                   reporter=0 if dead else 1)
        if rc == 1:  # the ranks that have not arrived are named by the lowest that has
            seen = self.ctrl[8 + self.W: 8 + 2 * self.W].tolist()
            late = [r for r, e in enumerate(seen) if e < self.epoch]
            waiting = [r for r in range(self.W) if r not in late]
            names = ", ".join(map(str, late)) or "?"
            raise DistributedError(
                f"rank{'s' if len(late) > 1 else ''} {names} did not answer within "
                f"{self.timeout_s:g} s (a stopped or overloaded process? see --timeout)",
                {r: "no answer" for r in late}, reporter=waiting[0] if waiting else None)
        if rc != 0:
            raise DistributedError(f"rank {self.rank}: shared-memory all-reduce failed: "
                                   f"{'aborted' if rc == 3 else f'error {rc}'}", reporter=None)
        return t


_LOCAL = {}  # process group -> SharedMemorySum or None (decided once per group)


def candidate(t: Tensor, op: str, backend: Optional[str]) -> bool:
    """Whether the shared-memory sum could take ``t`` (a contiguous float64 or int64 CPU sum
    on a gloo group): the test before :func:`host_transport` sets it up."""
    return (op == "SUM" and backend == "gloo" and t.dtype in SharedMemorySum.DTYPES
            and t.device.type == "cpu" and t.is_contiguous())


def _host_id() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def shm_folder() -> Optional[str]:
    """Where the mapping's file goes: ``/dev/shm`` (``None``: the temporary folder where
    there is none)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


def _reserve(fd: int, size: int) -> None:
    """Give the file ``size`` bytes that exist (``posix_fallocate``: a full tmpfs fails
    here with ``ENOSPC``, not later with SIGBUS on first touch)."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)
    else:  # pragma: no cover - macOS: no tmpfs /dev/shm, a disk file sized the usual way
        os.ftruncate(fd, size)


def _create_file(size: int) -> Optional[str]:
    """Rank 0: the mapping's file, its space reserved; ``None`` (and one warning) when
    there is no room."""
    folder = shm_folder()
    fd, path = tempfile.mkstemp(prefix="torchrankboost-", suffix=".shm", dir=folder)
    try:
        _reserve(fd, size)
    except OSError as exc:
        os.close(fd)
        os.unlink(path)
        warnings.warn(f"torchrankboost: no room for the shared-memory sum ({size / 2**20:.0f} "
                      f"MB) in {folder or tempfile.gettempdir()}: {exc.strerror or exc}; the "
                      f"ranks sum through the process group's backend instead (slower; give "
                      f"/dev/shm more space, e.g. docker --shm-size)", RuntimeWarning,
                      stacklevel=2)
        return None
    os.close(fd)
    return path


def host_transport(ctx: Collectives) -> Optional[SharedMemorySum]:
    """The shared-memory sum of the default process group (set up by a collective on first
    use; ``None`` when it does not apply: ranks on several hosts, no compiled kernels,
    ``TORCHRANKBOOST_SHM=0``, a rank that cannot map the file)."""
    dist = _dist()
    key = id(dist.group.WORLD)
    if key in _LOCAL:
        return _LOCAL[key]
    _LOCAL[key] = None  # the collectives below must not recurse into here
    wanted = os.environ.get("TORCHRANKBOOST_SHM", "1").strip().lower() not in (
        "0", "no", "false", "off")
    lib, ok = None, False
    if wanted:
        try:
            lib, ok = _native.load_library(SOURCE, declare=_declare), True
        except _native.NativeUnavailable:
            pass
    hosts = ctx.all_gather_object((_host_id(), ok, os.getpid()))
    record_peers(key, [(h, pid) for h, _, pid in hosts], _host_id())
    if not all(h == hosts[0][0] and k for h, k, _ in hosts):
        return None
    W = ctx.world_size
    cap = min(SharedMemorySum.CAP_BYTES, SharedMemorySum.TOTAL_BYTES // (2 * W)) // 8
    size = 8 * (8 + 2 * W) + 2 * W * cap * 8
    path = _create_file(size) if ctx.rank == 0 else None
    path = ctx.broadcast_object(path)
    if path is None:  # no room in /dev/shm: said once, by rank 0
        return None
    try:  # e.g. a rank in another mount namespace does not see the file
        red = SharedMemorySum(ctx, lib, path, size, cap)
        red.ctrl[8 + ctx.rank] = os.getpid()
        mapped = True
    except (OSError, RuntimeError):
        red, mapped = None, False
    everyone = all(ctx.all_gather_object(mapped))  # also: every rank has written its pid
    if ctx.rank == 0:
        os.unlink(path)  # the mappings stay; nothing is left behind
    if not everyone:
        return None
    _LOCAL[key] = red
    return red

