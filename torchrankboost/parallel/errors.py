"""The error every rank raises when one rank of a data-parallel run fails."""

from __future__ import annotations

from typing import Optional

__all__ = ["DistributedError"]


class DistributedError(RuntimeError):
    """A failure on one or more ranks, raised on every rank by :meth:`DistContext.guard`.

    ``failures`` maps each failing rank to its error (``"ValueError: labels contain NaN"``);
    on a failing rank the original exception is the ``__cause__``. ``reporter``: the rank
    that reports it on the command line (0 for a failure every rank raises alike; the
    lowest live rank when a peer died; ``None``: every rank that raises it, e.g. a rank that
    waited in vain for the others to join).
    """

    def __init__(self, message: str, failures: Optional[dict] = None, *,
                 reporter: Optional[int] = 0):
        super().__init__(message)
        self.failures = dict(failures or {})
        self.reporter = reporter

