"""``DistributedDataParallel`` for the neural trainer (:mod:`torchrankboost.nn`): the one
place a network is wrapped, so ``torch.distributed`` stays in this room.

:func:`data_parallel` returns the module itself in one process (the context disabled) and
its ``DistributedDataParallel`` wrapper on several (gloo on CPU, NCCL on CUDA: the process
group's backend), so the trainer calls it unconditionally. The wrapper averages the ranks'
gradients in the backward pass; a loss scaled by ``W / |Q|`` (``W`` ranks, ``|Q|`` the
step's queries over all ranks) then gives every rank the gradient of the mean over the
step's queries (see :mod:`torchrankboost.parallel.normalise`).
"""

from __future__ import annotations

import torch

from .context import DistContext

__all__ = ["data_parallel"]


def data_parallel(module: torch.nn.Module, ctx: DistContext, device: torch.device
                  ) -> torch.nn.Module:
    """``module`` wrapped for ``ctx``'s ranks (itself in one process). Every rank must
    hold the same initial weights (the wrapper broadcasts rank 0's)."""
    if ctx.world_size <= 1:
        return module
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, broadcast_buffers=False)
