"""The one "rank failed" protocol of a data-parallel run.

A rank that fails in local work (reading a shard, a NaN gradient, a callback that raises)
must not leave the other ranks waiting in their next collective. Every rank appends a
*failure flag* (0 or 1) to the vector of its next sum; when the summed flag is positive, the
ranks gather the failing ranks' messages (:func:`raise_failure`) and every rank raises the
same :class:`~torchrankboost.parallel.DistributedError` ("rank 1 failed: ValueError: labels
contain NaN"), chained to the original exception on a failing rank.
:meth:`DistContext.guard <torchrankboost.parallel.DistContext.guard>` (a block of local
work) and :class:`~torchrankboost.parallel.FitComm` (the collectives of a fit, each carrying
the flag) both use :func:`flagged_sum`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .collectives import Collectives
from .errors import DistributedError

__all__ = ["describe", "flagged_sum", "raise_failure"]

_MAX_MESSAGE = 2000


def describe(exc: BaseException) -> str:
    """``"ValueError: labels contain NaN"`` (cut to 2000 characters)."""
    msg = str(exc.code) if isinstance(exc, SystemExit) else str(exc)
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


def raise_failure(ctx: Collectives, error: Optional[BaseException]) -> None:
    """Every rank raises the same :class:`DistributedError` naming the failing ranks (a
    collective: every rank calls it once a summed flag said that some rank failed;
    ``error`` is this rank's own failure, ``None`` on a rank that did not fail)."""
    mine = None if error is None else describe(error)
    msgs = ctx.all_gather_object(mine)
    failures = {r: m for r, m in enumerate(msgs) if m is not None}
    text = "; ".join(f"rank {r} failed: {m}" for r, m in failures.items())
    if error is not None:
        raise DistributedError(text, failures) from error
    raise DistributedError(text, failures)


def flagged_sum(ctx: Collectives, data: Tensor, error: Optional[BaseException]) -> Tensor:
    """``data`` (a float64 CPU vector, ``k`` values) summed over the ranks together with this
    rank's failure flag (``error is not None``): one all-reduce of ``k + 1`` values. Returns
    the ``k`` sums, or raises :class:`DistributedError` on every rank when some rank failed
    (see :func:`raise_failure`). Every rank must call it with the same ``k``."""
    flag = torch.tensor([0.0 if error is None else 1.0], dtype=torch.float64)
    buf = torch.cat([data, flag])
    ctx.all_reduce_sum(buf)
    if float(buf[-1]) > 0:
        raise_failure(ctx, error)
    return buf[:-1]
