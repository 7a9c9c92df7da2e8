"""How many CPU threads torch uses while an algorithm fits (``n_threads``).

Boosting runs many small tensor operations (a few thousand to a few hundred thousand
elements each). torch runs them on its OpenMP intra-op pool, whose workers busy-wait for the
next parallel region (libgomp's default wait policy spins before sleeping). On a machine
whose cores are shared — another process, another engineer's job, a CI neighbour — the
spinning workers compete with the thread that does the work, and the scheduler's time slices
(milliseconds) land on operations that take microseconds. Measured on a 2-core machine with
one core busy (10 boosting rounds on MQ2008 Fold1, median of 3): 0.72 s with one thread, 20.8 s
with two; ``torch.exp`` on 10k doubles: mean 13 µs a call with one thread, 190-1100 µs with
two (median 11-13 µs both: the cost is in the stalls). ``OMP_WAIT_POLICY=PASSIVE`` (set before
Python starts) removes most of the stalls (0.47 s vs 0.37 s), but a fit gains little from a
second thread on these sizes. Hence the default: **one thread** (``DEFAULT_THREADS``), set for
the duration of ``fit`` and restored afterwards; ``n_threads=None`` leaves torch's setting
alone; a larger number helps on an idle machine with large data (then also consider
``OMP_WAIT_POLICY=PASSIVE``).

:func:`resolve_device` checks the device a fit is asked to run on.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator, Optional

import torch

__all__ = ["DEFAULT_THREADS", "check_threads", "limit_threads", "resolve_n_jobs",
           "resolve_device"]

#: torch intra-op threads during a fit unless the caller says otherwise
DEFAULT_THREADS = 1

_state = threading.local()


def check_threads(n_threads: Optional[int], name: str = "n_threads") -> Optional[int]:
    """``n_threads`` validated: ``None`` (leave torch's setting) or an int ``>= 1``."""
    if n_threads is None:
        return None
    if isinstance(n_threads, bool) or int(n_threads) != n_threads or n_threads < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {n_threads!r}")
    return int(n_threads)


def resolve_n_jobs(n_jobs: Optional[int]) -> Optional[int]:
    """scikit-learn's ``n_jobs`` as a thread count: ``None`` → :data:`DEFAULT_THREADS`,
    ``-1`` → every core, ``-2`` → every core but one, ..., a positive int as is."""
    if n_jobs is None:
        return DEFAULT_THREADS
    if isinstance(n_jobs, bool) or int(n_jobs) != n_jobs or n_jobs == 0:
        raise ValueError(f"n_jobs must be a non-zero integer or None, got {n_jobs!r}")
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + int(n_jobs))
    return int(n_jobs)


@contextlib.contextmanager
def limit_threads(n_threads: Optional[int]) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n_threads)`` and restore the previous count.

    ``None`` changes nothing. Nested uses (an algorithm that fits through the driver, QBRank
    and GBT) keep the outermost setting (``None`` included).
    """
    if getattr(_state, "active", False):
        yield
        return
    before = torch.get_num_threads()
    _state.active = True
    try:
        if n_threads is not None and n_threads != before:
            torch.set_num_threads(int(n_threads))
        yield
    finally:
        _state.active = False
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def resolve_device(name) -> "torch.device":
    """``torch.device(name)`` that exists on this machine; ``ValueError`` with one line for an
    unknown name or an unavailable CUDA / MPS device (the CLI and the estimator say the
    same; here, below every room, so that any of them may ask)."""
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"unknown device {name!r}; e.g. cpu, cuda, cuda:0, mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps")
                                  and torch.backends.mps.is_available()):
        raise ValueError(f"device {name!r} requested but MPS is not available")
    return dev
