"""How long a rank waits for the others before it gives up.

One number, in seconds: ``torchrankboost train --timeout S`` (default 60) sets it for the
process group's rendezvous and collectives (``init_process_group(timeout=...)``) and for
the shared-memory sum of :mod:`.shm`. A library user's own ``init_process_group(timeout=...)``
governs the ``torch.distributed`` collectives; the shared-memory sum reads
:func:`wait_timeout` (the ``TORCHRANKBOOST_TIMEOUT`` environment variable, else 60 s).
"""

from __future__ import annotations

import math
import os
from typing import Optional

__all__ = ["DEFAULT_TIMEOUT_S", "check_timeout", "set_wait_timeout", "wait_timeout"]

#: the default wait for the other ranks (a minute: long enough for a slow save on rank 0,
#: short enough that a stopped or dead peer is reported while someone is still watching)
DEFAULT_TIMEOUT_S = 60.0

_timeout: Optional[float] = None


def check_timeout(value, what: str = "--timeout") -> float:
    """``value`` as a positive finite number of seconds; ``ValueError`` otherwise."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}") from None
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return t


def set_wait_timeout(seconds: Optional[float]) -> None:
    """Set this process's wait (``None``: back to the environment / default)."""
    global _timeout
    _timeout = None if seconds is None else check_timeout(seconds)


def wait_timeout() -> float:
    """This process's wait in seconds: :func:`set_wait_timeout`, else
    ``TORCHRANKBOOST_TIMEOUT``, else :data:`DEFAULT_TIMEOUT_S`."""
    if _timeout is not None:
        return _timeout
    env = os.environ.get("TORCHRANKBOOST_TIMEOUT", "").strip()
    return check_timeout(env, "TORCHRANKBOOST_TIMEOUT") if env else DEFAULT_TIMEOUT_S
