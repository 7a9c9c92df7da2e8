"""The process group as an algorithm sees it: :class:`DistContext` and :func:`get_context`.

The model is the usual one of PyTorch: ``torchrun`` starts one process per device
(``python -m torch.distributed.run --nproc-per-node N script.py``), each process calls
``torch.distributed.init_process_group`` (``"gloo"`` on CPU, ``"nccl"`` on GPUs) and holds
a *shard* of the queries. Everything here works unchanged in one process: a disabled
context makes every collective an identity, so algorithms call them unconditionally.

**The context.** :func:`get_context` returns a :class:`DistContext` (``enabled``, ``rank``,
``world_size``, ``is_main``, ``backend``) with the collectives an algorithm needs:
``all_reduce_sum/max/min`` (in place, any dtype, moved to the backend's device and back),
``all_gather_object``, ``broadcast_object``, ``all_gather_rows``, ``gather_values``,
``barrier``, ``check_same`` (a start-of-fit check that a value agrees on every rank, failing
on every rank with the differing ranks named) and ``guard`` (a failure on one rank raises
:class:`DistributedError` on every rank instead of leaving the others waiting in their next
collective). ``bytes_reduced`` counts the bytes all-reduced so far (the communication volume
of a fit).

**Transports.** Each all-reduce goes through a :class:`~.transport.Transport`: the
shared-memory sum of the ranks of one host (:mod:`.shm`) for the float64 CPU sums it
accepts, ``torch.distributed`` (:class:`~.transport.TorchTransport`) for everything else.

**Failures.** Collectives must be entered by every rank in the same order. A rank that
raises before a collective leaves the others waiting in it until the process group's
timeout; :meth:`DistContext.guard` is the remedy for local work that can fail (reading a
shard, checking its labels): run it inside ``with ctx.guard():`` on every rank and every
rank leaves the block together, raising :class:`DistributedError` ("rank 1 failed:
ValueError: ...") if any rank failed (the protocol of :mod:`.failure`, which a fit's
:class:`~torchrankboost.parallel.FitComm` shares). A rank that dies outright (killed,
segfault) is not caught this way: ``torchrun`` then stops the others.
"""


from __future__ import annotations

import contextlib
import numbers
from typing import Any, Callable, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from . import shm
from .failure import flagged_sum
from .transport import TorchTransport, Transport, dist as _dist


def _group_ready() -> bool:
    dist = _dist()
    return bool(dist.is_available() and dist.is_initialized())


class DistContext:
    """The process group as an algorithm sees it (see :func:`get_context`).

    Attributes:
        enabled: collectives communicate; when ``False`` they are identities / no-ops.
        rank: this process's rank (0 when disabled).
        world_size: the number of processes (1 when disabled).
        is_main: ``rank == 0`` (the process that prints, logs and saves).
        backend: ``"gloo"``, ``"nccl"``, ... or ``None`` when disabled.
        bytes_reduced: bytes of the tensors passed to ``all_reduce_*`` since creation or
            :meth:`reset_counters` (communication actually done: 0 while disabled).
    """

    def __init__(self, *, enabled: bool = False, rank: int = 0, world_size: int = 1,
                 backend: Optional[str] = None):
        self.enabled = bool(enabled)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.backend = backend
        self.bytes_reduced = 0
        self._torch = TorchTransport(backend)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def __repr__(self) -> str:
        return (f"DistContext(enabled={self.enabled}, rank={self.rank}, "
                f"world_size={self.world_size}, backend={self.backend!r})")

    def reset_counters(self) -> None:
        """Set :attr:`bytes_reduced` back to 0."""
        self.bytes_reduced = 0

    # ------------------------------------------------------------------ tensors
    @property
    def device(self) -> Optional[torch.device]:
        """Where the backend wants tensors: the CPU for gloo, the current CUDA device for
        NCCL, ``None`` (the tensor's own device) otherwise or when disabled."""
        return self._torch.device if self.enabled else None

    def transport_for(self, t: Tensor, op: str) -> Transport:
        """The transport of an all-reduce of ``t`` with ``op`` (``"SUM"``, ``"MAX"``,
        ``"MIN"``): the shared-memory sum of the ranks of one host (:mod:`.shm`, set up by a
        collective the first time it could apply) when it accepts ``t``, else
        ``torch.distributed``."""
        if shm.candidate(t, op, self.backend):
            fast = shm.host_transport(self)
            if fast is not None and fast.accepts(t, op):
                return fast
        return self._torch

    def _all_reduce(self, t: Tensor, op_name: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise ValueError(f"t must be a torch.Tensor, got {type(t).__name__}")
        if not self.enabled:
            return t
        self.bytes_reduced += t.numel() * t.element_size()
        return self.transport_for(t, op_name).all_reduce(t, op_name)

    def all_reduce_sum(self, t: Tensor) -> Tensor:
        """Element-wise sum over the ranks, **in place** in ``t`` (returned).

        Any shape and dtype (float64 stays float64; a bool tensor gives "any rank true");
        a tensor on another device than the backend's (CPU for gloo, CUDA for NCCL) is
        copied there and back. Every rank must call it with a tensor of the same shape and
        dtype. Disabled: returns ``t`` unchanged.
        """
        return self._all_reduce(t, "SUM")

    def sum_hook(self) -> Optional[Callable[[Tensor], Tensor]]:
        """:meth:`all_reduce_sum` where the collectives communicate, ``None`` in one process:
        for callers that would otherwise prepare a sum that is an identity (compact a buffer,
        call back from C)."""
        return self.all_reduce_sum if self.enabled else None

    def all_reduce_max(self, t: Tensor) -> Tensor:
        """Element-wise maximum over the ranks, in place (see :meth:`all_reduce_sum`)."""
        return self._all_reduce(t, "MAX")

    def all_reduce_min(self, t: Tensor) -> Tensor:
        """Element-wise minimum over the ranks, in place (see :meth:`all_reduce_sum`)."""
        return self._all_reduce(t, "MIN")

    # ------------------------------------------------------------------ objects
    def all_gather_object(self, obj: Any) -> List[Any]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank (picklable objects);
        ``[obj]`` when disabled."""
        if not self.enabled:
            return [obj]
        return self._torch.all_gather_object(obj, self.world_size)

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (the others' ``obj`` is ignored); ``obj``
        when disabled."""
        if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < self.world_size:
            raise ValueError(f"src must be a rank in [0, {self.world_size}), got {src!r}")
        if not self.enabled:
            return obj
        return self._torch.broadcast_object(obj, src)

    def all_gather_rows(self, t: Tensor) -> Tensor:
        """Every rank's ``t`` concatenated along dim 0 in rank order (on every rank).

        The ranks' tensors may differ in their first dimension only (same trailing shape and
        dtype, else ``ValueError`` on every rank); they travel padded to the longest one
        (one ``all_gather_object`` of the shapes, one tensor ``all_gather``), on the
        backend's device, and come back on ``t``'s device. Used to agree on data-derived
        settings once per fit (e.g. the rows that place the bin edges of a boosted model).
        Disabled: ``t`` itself.
        """
        if not isinstance(t, Tensor):
            raise ValueError(f"t must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError("t must have at least one dimension (the rows to concatenate)")
        if not self.enabled:
            return t
        metas = self.all_gather_object((tuple(t.shape), str(t.dtype)))
        if len({(m[0][1:], m[1]) for m in metas}) != 1:
            shown = ", ".join(f"rank {r} has {m[0]} {m[1]}" for r, m in enumerate(metas))
            raise ValueError(f"all_gather_rows: the tensors differ beyond their first "
                             f"dimension: {shown}")
        sizes = [m[0][0] for m in metas]
        dev = self.device or t.device
        work = torch.zeros((max(sizes),) + tuple(t.shape[1:]), dtype=t.dtype, device=dev)
        work[: t.shape[0]] = t.to(dev)
        parts = self._torch.all_gather(work, self.world_size)
        return torch.cat([p[:k] for p, k in zip(parts, sizes)]).to(t.device)

    def gather_values(self, values: Union[Tensor, Sequence[float], float]) -> Tensor:
        """``(world_size, k)`` float64: row ``r`` holds rank ``r``'s ``values`` (``k``
        numbers, the same ``k`` on every rank), on every rank.

        One ``all_reduce_sum`` of a ``world_size·k`` vector in which each rank fills its own
        row (adding zeros is exact, so the rows are the ranks' values bit for bit): the
        way to combine per-rank numbers that do not simply add up (a maximum together with
        sums, log-sum-exp of per-rank log values). Disabled: ``(1, k)``.
        """
        v = torch.as_tensor(values, dtype=torch.float64).detach().reshape(-1).cpu()
        out = torch.zeros((self.world_size, v.numel()), dtype=torch.float64)
        out[self.rank] = v
        return self.all_reduce_sum(out)

    def barrier(self) -> None:
        """Wait until every rank gets here (no-op when disabled)."""
        if not self.enabled:
            return
        self._torch.barrier()

    # ------------------------------------------------------------------ checks
    def check_same(self, name: str, value: Any) -> Any:
        """Check that ``value`` is the same on every rank; returns it.

        Every rank compares its value with rank 0's (values are gathered, so they must be
        picklable: numbers, strings, dtypes, tuples, small tensors). On a mismatch *every*
        rank raises ``ValueError("<name> differs across ranks: rank 0 has 46, rank 1 has
        45")``, naming each differing rank. The usual start-of-fit checks: the feature
        count, the label dtype, a loss's settings. A collective: every rank must call it.
        """
        if not self.enabled:
            return value
        values = self.all_gather_object(value)
        ref = values[0]
        bad = [r for r, v in enumerate(values) if not _same(v, ref)]
        if bad:
            shown = ", ".join(f"rank {r} has {_show(values[r])}" for r in [0] + bad)
            raise ValueError(f"{name} differs across ranks: {shown}")
        return value

    @contextlib.contextmanager
    def guard(self) -> Iterator["DistContext"]:
        """Run a block on every rank; if it fails on any rank, fail on every rank.

        At the end of the block every rank all-reduces a failure flag; if some rank
        failed, the failing ranks' error messages are gathered and every rank raises
        :class:`DistributedError` naming them (``"rank 1 failed: ValueError: labels contain
        NaN"``); on a failing rank the original exception is chained as the cause. This is
        how a bad shard on one rank stops every rank instead of leaving the others waiting
        in their next collective.

        Every rank must enter the guard (it ends with collectives, which all ranks must
        run in the same order), and the block itself should hold only local work: a rank
        that fails before a collective *inside* the block leaves the others waiting in it.
        ``Exception`` and ``SystemExit`` are caught; ``KeyboardInterrupt`` passes through.
        Disabled: the block runs as is and its exceptions pass through unchanged.
        """
        if not self.enabled:
            yield self
            return
        err: Optional[BaseException] = None
        try:  # the failure protocol of :mod:`.failure`, shared with FitComm
            yield self
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - re-raised on every rank
            err = exc
        flagged_sum(self, torch.zeros(0, dtype=torch.float64), err)


def _same(a: Any, b: Any) -> bool:
    """Equal values (numbers by value, other types by type and ``==``; tensors and arrays
    by shape, dtype and contents); values that cannot be compared differ."""
    try:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                    and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()))
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        if isinstance(a, bool) or isinstance(b, bool):
            return type(a) is type(b) and a == b
        if isinstance(a, numbers.Number) and isinstance(b, numbers.Number):
            return bool(a == b)
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


_DISABLED = DistContext()


def get_context(distributed: Union[None, bool, DistContext] = None) -> DistContext:
    """The :class:`DistContext` of this process.

    Args:
        distributed: ``None`` (default): enabled iff ``torch.distributed`` is available, a
            process group is initialised and it has more than one process. ``True``:
            requires an initialised process group (``ValueError`` otherwise, saying to
            launch with ``torchrun`` and call ``init_process_group``); a group of one
            process is allowed and behaves as a single process. ``False``: disabled (every
            collective an identity). A :class:`DistContext` is returned as is.

    Returns a new context each call (its :attr:`~DistContext.bytes_reduced` counter starts
    at 0), except for a context passed in.
    """
    if isinstance(distributed, DistContext):
        return distributed
    if distributed is not None and not isinstance(distributed, bool):
        raise ValueError(f"distributed must be None, True, False or a DistContext, got "
                         f"{distributed!r}")
    if distributed is False:
        return DistContext()
    ready = _group_ready()
    if distributed is True and not ready:
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group: launch "
            "the script with torchrun (python -m torch.distributed.run --nproc-per-node N "
            "script.py) and call torch.distributed.init_process_group() (backend 'gloo' on "
            "CPU, 'nccl' on GPUs) before fitting")
    if not ready:
        return DistContext()
    dist = _dist()
    world = dist.get_world_size()
    if distributed is None and world <= 1:
        return DistContext()
    return DistContext(enabled=True, rank=dist.get_rank(), world_size=world,
                       backend=str(dist.get_backend()))

