"""What the process group's helpers ask of it: the :class:`Collectives` protocol.

The failure protocol (:mod:`.failure`) and the shared-memory sum's setup (:mod:`.shm`) run
collectives of the :class:`~torchrankboost.parallel.DistContext` that uses them. They name
their argument's type by this protocol, not by the context (which imports them), so that
the modules of ``parallel/`` import each other in one direction only, type-only imports
included: ``context -> failure, shm -> collectives``. :class:`DistContext` satisfies it
structurally (no registration, no base class).
"""

from __future__ import annotations

from typing import Any, List, Protocol

from torch import Tensor

__all__ = ["Collectives"]


class Collectives(Protocol):
    """A process group's rank, size and the collectives its helpers use (identities in one
    process). Every rank calls each collective, in the same order."""

    @property
    def rank(self) -> int:
        """This process's rank, ``0 ≤ rank < world_size``."""

    @property
    def world_size(self) -> int:
        """The number of processes."""

    def all_reduce_sum(self, t: Tensor) -> Tensor:
        """Element-wise sum over the ranks, in place in ``t`` (returned)."""

    def all_gather_object(self, obj: Any) -> List[Any]:
        """Every rank's picklable ``obj``, in rank order, on every rank."""

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank."""
