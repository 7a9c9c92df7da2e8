"""How tensors travel between the ranks: the :class:`Transport` protocol and the
``torch.distributed`` transport (gloo, NCCL, ...).

A :class:`~torchrankboost.parallel.DistContext` asks its transports, in order, which one
:meth:`~Transport.accepts` an all-reduce: the shared-memory sum of the ranks of one host
(:mod:`.shm`) takes float64 CPU sums when it applies; :class:`TorchTransport` takes
everything else, and carries the object collectives.
"""

from __future__ import annotations

import functools
import os
from typing import Any, List, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["Transport", "TorchTransport", "dist", "lost_contact", "record_peers"]

#: the reduction names of :meth:`Transport.all_reduce`
OPS = ("SUM", "MAX", "MIN")


def dist():
    """``torch.distributed`` (imported on first use)."""
    import torch.distributed as d

    return d


_PEERS = {}  # process group -> [(host, pid)] by rank, and this host (see record_peers)


def record_peers(group_key: int, peers: List[tuple], host: str) -> None:
    """Remember each rank's ``(host, pid)`` (gathered once per group by :mod:`.shm`), so
    that a lost connection can name the rank whose process died."""
    _PEERS[group_key] = (list(peers), host)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def lost_contact(exc: BaseException, what: str):
    """The :class:`~torchrankboost.parallel.DistributedError` for a collective that failed
    with the backend's ``RuntimeError`` (gloo: "Connection closed by peer"): it names the
    ranks of this host whose process died when they are known, else this rank."""
    from .._errors import first_line
    from .errors import DistributedError

    d = dist()
    me = d.get_rank() if d.is_initialized() else 0
    peers, host = _PEERS.get(id(d.group.WORLD), ([], None))
    dead = [r for r, (h, pid) in enumerate(peers) if h == host and r != me and not _alive(pid)]
    if dead:
        names = ", ".join(map(str, dead))
        live = [r for r in range(len(peers)) if r not in dead]
        return DistributedError(f"rank{'s' if len(dead) > 1 else ''} {names} died (its process "
                                f"is gone; rank {me} lost contact in {what})",
                                dict.fromkeys(dead, "died"), reporter=live[0] if live else None)
    return DistributedError(f"rank {me} lost contact with the other ranks in {what}: "
                            f"{first_line(exc)}", {me: "lost contact"}, reporter=None)


def _guarded(what: str):
    """Run a collective; the backend's ``RuntimeError`` becomes :func:`lost_contact`'s
    error (a ``ValueError`` of a bad argument passes)."""
    def wrap(fn):
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except RuntimeError as exc:
                raise lost_contact(exc, what) from exc
        return functools.wraps(fn)(call)
    return wrap


@runtime_checkable
class Transport(Protocol):
    """An element-wise all-reduce over the ranks of the default process group."""

    def accepts(self, t: Tensor, op: str) -> bool:
        """Whether :meth:`all_reduce` handles ``t`` with ``op`` (``"SUM"``, ``"MAX"``,
        ``"MIN"``); the same answer on every rank for tensors of one shape and dtype."""

    def all_reduce(self, t: Tensor, op: str) -> Tensor:
        """``t`` reduced over the ranks **in place** (returned). A collective."""


class TorchTransport:
    """The collectives of ``torch.distributed`` with the group's backend: tensors move to
    the backend's device (CPU for gloo, the current CUDA device for NCCL) and back; a bool
    tensor travels as int32 (``SUM``/``MAX`` give "any rank true")."""

    def __init__(self, backend: Optional[str]):
        self.backend = backend

    @property
    def device(self) -> Optional[torch.device]:
        """Where the backend wants tensors (``None``: the tensor's own device)."""
        if self.backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        if self.backend == "gloo":
            return torch.device("cpu")
        return None

    def accepts(self, t: Tensor, op: str) -> bool:
        return op in OPS

    @_guarded("an all-reduce")
    def all_reduce(self, t: Tensor, op: str) -> Tensor:
        d = dist()
        red = getattr(d.ReduceOp, op)
        dev = self.device or t.device
        is_bool = t.dtype == torch.bool
        if not is_bool and t.device == dev and t.is_contiguous():
            d.all_reduce(t, op=red)
            return t
        work = t.to(device=dev, dtype=torch.int32 if is_bool else t.dtype,
                    memory_format=torch.contiguous_format).contiguous()
        d.all_reduce(work, op=red)
        with torch.no_grad():
            t.copy_(work != 0 if is_bool else work)
        return t

    @_guarded("an all-gather")
    def all_gather_object(self, obj: Any, world_size: int) -> List[Any]:
        out: List[Any] = [None] * world_size
        dist().all_gather_object(out, obj)
        return out

    @_guarded("a broadcast")
    def broadcast_object(self, obj: Any, src: int) -> Any:
        box = [obj]
        dist().broadcast_object_list(box, src=src)
        return box[0]

    @_guarded("an all-gather")
    def all_gather(self, work: Tensor, world_size: int) -> List[Tensor]:
        parts = [torch.empty_like(work) for _ in range(world_size)]
        dist().all_gather(parts, work)
        return parts

    @_guarded("a barrier")
    def barrier(self) -> None:
        if self.backend == "nccl":
            dist().barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist().barrier()
