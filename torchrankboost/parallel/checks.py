"""The one check of what a fit over several processes can take.

A data-parallel fit (each rank holding whole queries) only works with weak learners whose
sums the ranks can combine, and with pairs that live inside this rank's queries. Learners
declare it (``supports_data_parallel``, a bool attribute); this module asks them, and asks
the context whether the fit spans several processes (``context.world_size > 1``): in one
process everything is allowed, so one-process fits never see these errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..pairs import ExplicitPairs

if TYPE_CHECKING:
    from .context import DistContext

__all__ = ["check_data_parallel", "supports_data_parallel"]


def supports_data_parallel(learner: Any) -> bool:
    """Whether ``learner`` combines its per-candidate sums over the ranks: its declared
    ``supports_data_parallel`` (``False`` when it declares nothing)."""
    return bool(getattr(learner, "supports_data_parallel", False))


def check_data_parallel(context: "DistContext", *, fit: str = "fit", learner: Any = None,
                        learner_ok: Optional[bool] = None, pairs: Any = None,
                        needs: str = "a learner that combines its sums over the " "ranks") -> None:
    """``ValueError`` when a fit over several processes (``context.world_size > 1``) gets what
    it cannot combine; nothing in one process.

    Args:
        context: the fit's :class:`~torchrankboost.parallel.DistContext`.
        fit: the fit's name in the message (``"RankBoost fit"``).
        learner: the weak learner (``None``: not checked).
        learner_ok: whether this fit can run ``learner`` data-parallel (default: the
            learner's own :func:`supports_data_parallel`); an algorithm that needs more of
            its learner (e.g. closed-form steps) passes its own answer.
        pairs: the resolved pairs (explicit pair lists index one process's documents).
        needs: what the fit needs of the learner, for the message.
    """
    if context.world_size <= 1:
        return
    if isinstance(pairs, ExplicitPairs):
        raise ValueError("pairs: a data-parallel fit takes label-induced pairs (explicit pair "
                         "lists index one process's documents)")
    if learner is None:
        return
    ok = supports_data_parallel(learner) if learner_ok is None else learner_ok
    if not ok:
        raise ValueError(f"learner: a data-parallel {fit} needs {needs}, got {learner!r}")
