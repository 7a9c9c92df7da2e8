"""How tensors travel between the ranks: the :class:`Transport` protocol and the
``torch.distributed`` transport (gloo, NCCL, ...).

A :class:`~torchrankboost.parallel.DistContext` asks its transports, in order, which one
:meth:`~Transport.accepts` an all-reduce: the shared-memory sum of the ranks of one host
(:mod:`.shm`) takes float64 CPU sums when it applies; :class:`TorchTransport` takes
everything else, and carries the object collectives.
"""

from __future__ import annotations

from typing import Any, List, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

__all__ = ["Transport", "TorchTransport", "dist"]

#: the reduction names of :meth:`Transport.all_reduce`
OPS = ("SUM", "MAX", "MIN")


def dist():
    """``torch.distributed`` (imported on first use)."""
    import torch.distributed as d

    return d


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

    def all_gather_object(self, obj: Any, world_size: int) -> List[Any]:
        out: List[Any] = [None] * world_size
        dist().all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int) -> Any:
        box = [obj]
        dist().broadcast_object_list(box, src=src)
        return box[0]

    def all_gather(self, work: Tensor, world_size: int) -> List[Tensor]:
        parts = [torch.empty_like(work) for _ in range(world_size)]
        dist().all_gather(parts, work)
        return parts

    def barrier(self) -> None:
        if self.backend == "nccl":
            dist().barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist().barrier()
