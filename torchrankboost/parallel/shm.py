"""Sums of float64 CPU tensors over the ranks of one host through shared memory: an optional
:class:`~torchrankboost.parallel.transport.Transport` that a
:class:`~torchrankboost.parallel.DistContext` of a gloo group puts before
``torch.distributed`` for float64 CPU sums (:func:`host_transport`)."""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from .. import _native
from .errors import DistributedError
from .transport import dist as _dist

if TYPE_CHECKING:
    from .context import DistContext

__all__ = ["SharedMemorySum", "candidate", "host_transport"]

#: the C source of the sum, compiled on first use by :func:`torchrankboost._native.load_library`
SOURCE = Path(__file__).with_name("shm.c")


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    lib.trb_shm_allreduce.argtypes = [p, p, i64, i32, i32, p, i64, i64, d]
    lib.trb_shm_allreduce.restype = i32
    if lib.trb_shm_abi_version() != 1:
        raise _native.NativeUnavailable("unexpected shared-memory sum ABI version")


class SharedMemorySum:
    """Sums of float64 CPU tensors over the ranks of one host through shared memory.

    A loopback-socket all-reduce (gloo) costs about 1 ms a call whatever its size up to
    ~1 MB; a boosted tree makes one per split. When every rank of the process group runs on
    this host, rank 0 creates a shared mapping (a file in ``/dev/shm``, unlinked once every
    rank has mapped it) and each sum goes through ``trb_shm_allreduce`` (``shm.c``
    beside this module, compiled on first use): every rank copies its tensor into its slot, waits for the
    others (spinning, then yielding), and sums the W slots **in rank order** — the same
    result on every rank, deterministic. A peer that dies or a wait beyond ``timeout_s``
    raises :class:`DistributedError` instead of hanging. Set up once per process group, by a
    collective, the first time a float64 CPU sum is asked of a gloo group; absent when the
    ranks span several hosts, when the compiled kernels are unavailable or with
    ``TORCHRANKBOOST_SHM=0`` (then gloo does every sum).
    """

    CAP_BYTES = 1 << 23  # largest tensor summed here (8 MiB, above a 136-feature histogram)
    TOTAL_BYTES = 1 << 28  # the whole mapping: 2 sets x W slots (smaller slots for many ranks)

    def __init__(self, ctx: "DistContext", lib, path: str, size: int, cap: int):
        self.lib, self.rank, self.W, self.cap = lib, ctx.rank, ctx.world_size, cap
        self.map = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        self.ctrl = self.map[: 8 * (8 + self.W)].view(torch.int64)
        self.slots = self.map[8 * (8 + self.W):].view(torch.float64)
        self.epoch = 0
        self.timeout_s = float(os.environ.get("TORCHRANKBOOST_SHM_TIMEOUT", "600"))

    def accepts(self, t: Tensor, op: str) -> bool:
        return candidate(t, op, "gloo") and t.numel() <= self.cap

    def all_reduce(self, t: Tensor, op: str) -> Tensor:
        """The sum of ``t`` over the ranks in place (``op`` must be ``"SUM"``)."""
        rc = self.lib.trb_shm_allreduce(self.ctrl.data_ptr(), self.slots.data_ptr(), self.cap,
                                        self.rank, self.W, t.data_ptr(), t.numel(), self.epoch,
                                        self.timeout_s)
        self.epoch += 1
        if rc != 0:
            why = {1: f"no answer from the other ranks within {self.timeout_s:g} s",
                   2: "another rank's process has died", 3: "aborted"}.get(rc, f"error {rc}")
            raise DistributedError(f"rank {self.rank}: shared-memory all-reduce failed: {why}")
        return t


_LOCAL = {}  # process group -> SharedMemorySum or None (decided once per group)


def candidate(t: Tensor, op: str, backend: Optional[str]) -> bool:
    """Whether the shared-memory sum could take ``t`` (a contiguous float64 CPU sum on a
    gloo group): the test before :func:`host_transport` sets it up."""
    return (op == "SUM" and backend == "gloo" and t.dtype == torch.float64
            and t.device.type == "cpu" and t.is_contiguous())


def _host_id() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def host_transport(ctx: "DistContext") -> Optional[SharedMemorySum]:
    """The shared-memory sum of the default process group (set up by a collective on first
    use; ``None`` when it does not apply: ranks on several hosts, no compiled kernels,
    ``TORCHRANKBOOST_SHM=0``, a rank that cannot map the file)."""
    dist = _dist()
    key = id(dist.group.WORLD)
    if key in _LOCAL:
        return _LOCAL[key]
    _LOCAL[key] = None  # the collectives below must not recurse into here
    if os.environ.get("TORCHRANKBOOST_SHM", "1").strip().lower() in ("0", "no", "false", "off"):
        return None
    try:
        lib = _native.load_library(SOURCE, declare=_declare)
        ok = True
    except _native.NativeUnavailable:
        lib, ok = None, False
    hosts = ctx.all_gather_object((_host_id(), ok))
    if not all(h == hosts[0][0] and k for h, k in hosts):
        return None
    W = ctx.world_size
    cap = min(SharedMemorySum.CAP_BYTES, SharedMemorySum.TOTAL_BYTES // (2 * W)) // 8
    size = 8 * (8 + W) + 2 * W * cap * 8
    path = None
    if ctx.rank == 0:
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="torchrankboost-", suffix=".shm", dir=folder)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    path = ctx.broadcast_object(path)
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

