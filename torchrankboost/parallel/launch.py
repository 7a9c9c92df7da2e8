"""Starting a command on several processes, and what a run says about them.

``torchrankboost train --nproc N`` re-launches the command on ``N`` ranks (:func:`relaunch`,
the parent of :mod:`.parent`: it forwards signals, waits for every rank and reports
once); under it or ``torchrun`` (``WORLD_SIZE`` set, :func:`under_launcher`) each process
starts the process group (:func:`start_process_group`: gloo, or NCCL on ``LOCAL_RANK``'s
GPU, with the wait of :mod:`.timeouts`) and ends it (:func:`end_process_group`); only rank
0 reports a failure that every rank shares (:func:`reports_failures`). The other functions are the
few places where a training run's checks, messages and records depend on the number of
processes; in one process they give what a single-process run always gave.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from .._errors import first_line
from .context import DistContext, get_context
from .errors import DistributedError
from .parent import run_ranks, worker_setup
from .timeouts import set_wait_timeout, wait_timeout

__all__ = ["check_distributed_algorithm", "context", "empty_split_message", "end_process_group",
           "relaunch", "reports_failures", "run_facts", "start_process_group", "strip_nproc",
           "under_launcher", "where_text"]


def under_launcher() -> bool:
    """``True`` in a process started by ``torchrun`` (``WORLD_SIZE`` in the environment)."""
    return "WORLD_SIZE" in os.environ


def reports_failures(reporter: Optional[int] = 0) -> bool:
    """Whether this process prints a failure that several ranks raise: always in one
    process; on several, only rank ``reporter`` (0 for a failure every rank raises alike, an
    interrupt; ``None``: every rank)."""
    return reporter is None or not under_launcher() or os.environ.get("RANK", "0") == str(reporter)


def context() -> DistContext:
    """The process group's context (disabled without one, or with one process)."""
    return get_context(None)


def start_process_group(device: str, timeout_s: Optional[float] = None) -> Tuple[bool, str]:
    """Under ``torchrun``: initialise the process group (gloo, or NCCL on ``LOCAL_RANK``'s
    GPU when ``device`` is a CUDA device), waiting at most ``timeout_s`` seconds (default
    :func:`~.timeouts.wait_timeout`) for the other ranks, there and in every collective.
    Returns ``(owned, device)``: ``owned`` is ``True`` when this call initialised the group
    (the caller ends it with :func:`end_process_group`); ``device`` is ``cuda:LOCAL_RANK``
    with NCCL, else as given. ``ValueError`` when CUDA is asked for and not available;
    :class:`~torchrankboost.parallel.DistributedError` naming this rank when the others do
    not join in time."""
    if not under_launcher():
        return False, device
    set_wait_timeout(timeout_s)
    worker_setup()
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        return False, device
    backend = "gloo"
    if str(device).startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if not torch.cuda.is_available():
            raise ValueError("--device cuda under torchrun: CUDA is not available here")
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
        backend = "nccl"
    wait = wait_timeout()
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=wait))
    except (RuntimeError, TimeoutError) as exc:  # a store timeout, a peer gone
        rank = os.environ.get("RANK", "?")
        raise DistributedError(f"rank {rank}: the other ranks did not join within {wait:g} s "
                               f"(--timeout): {first_line(exc)}", reporter=None) from None
    return True, device


def end_process_group() -> None:
    """Destroy the process group (after collecting garbage: a failure's frames, holding
    tensors and graphs, go first)."""
    import gc

    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


def strip_nproc(argv: Sequence[str]) -> List[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def relaunch(argv: Sequence[str], nproc: int, *, module: str = "torchrankboost",
             timeout_s: Optional[float] = None) -> int:
    """``python -m module argv`` (without ``--nproc``) on ``nproc`` processes of this host
    (:func:`~.parent.run_ranks`: signals forwarded, every rank waited for, one report);
    returns the command's exit status (``OMP_NUM_THREADS`` defaults to 1). ``ValueError``
    unless ``nproc >= 1``."""
    if nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, got {nproc}")
    cmd = [sys.executable, "-m", module, *strip_nproc(argv)]
    return run_ranks(cmd, nproc, timeout_s=timeout_s or wait_timeout())


# ---------------------------------------------------------------------------- a run's words
def check_distributed_algorithm(ctx: DistContext, algorithm: str, supported: Sequence[str], *,
                        error: Type[Exception] = ValueError) -> None:
    """On several processes, ``error`` unless ``algorithm`` is one of ``supported`` (those
    with a data-parallel fit); nothing in one process."""
    if ctx.enabled and algorithm not in supported:
        raise error(f"algorithm {algorithm!r} has no data-parallel fit; under torchrun use "
                    f"one of {', '.join(supported)}")


def empty_split_message(ctx: DistContext, what: str) -> str:
    """``"<what> is empty"``; on several processes it is this rank's shard that is."""
    if ctx.enabled:
        return f"{what}: this rank's shard is empty (fewer queries than processes?)"
    return f"{what} is empty"


def where_text(ctx: DistContext, device: Any) -> str:
    """Where a run trains: ``"cpu"``, or ``"2 processes (gloo, cpu)"``."""
    if ctx.enabled:
        return f"{ctx.world_size} processes ({ctx.backend}, {device})"
    return str(device)


def run_facts(ctx: DistContext) -> Dict[str, Any]:
    """What a run records about its processes (TensorBoard hparams, the model's info):
    ``{"world_size": W}`` on several processes, nothing in one."""
    return {"world_size": ctx.world_size} if ctx.enabled else {}
