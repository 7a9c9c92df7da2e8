"""The fit-level operations of an algorithm: sums, extrema, log-sum-exp and gathers over the
ranks, each carrying the failure flag; identities in one process.

An algorithm's ``fit`` makes one :class:`FitComm` and calls its operations unconditionally:
in one process (a disabled :class:`~torchrankboost.parallel.DistContext`) :meth:`FitComm.sum`
returns the local values (:meth:`FitComm.exact_sums` their order-free sums),
:meth:`FitComm.local` lets exceptions through unchanged and :meth:`FitComm.check` does
nothing, so the single-process fit is untouched; in a data-parallel fit every operation is
one all-reduce that also carries this rank's failure flag (:mod:`.failure`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import exact as X
from .context import DistContext, get_context
from .failure import flagged_sum, raise_failure
from .normalise import METRIC_PARTS, metric_parts, metric_value

__all__ = ["FitComm"]

F64 = torch.float64


def _vector(values) -> Tensor:
    v = values() if callable(values) else values
    return torch.as_tensor(v, dtype=F64).detach().reshape(-1).cpu()


class FitComm:
    """The collectives of one fit, each carrying a failure flag.

    A rank that fails in local work (a bad shard, a NaN gradient, a callback that raises)
    must not leave the others waiting in their next collective. Local work runs inside
    ``with comm.local():``, which keeps the first exception instead of raising it; the next
    collective of the fit (:meth:`sum` and the operations built on it, or :meth:`check`
    when there is no payload) appends this rank's failure flag to its vector, so one
    all-reduce tells every rank whether some rank failed; if so every rank raises the same
    :class:`~torchrankboost.parallel.DistributedError` naming the failing ranks. The flag
    costs one float per collective.

    In one process every operation is an identity: :meth:`local` runs its block as is
    (exceptions propagate unchanged), :meth:`sum` / :meth:`max` / :meth:`min` /
    :meth:`logsumexp` return the local values, :meth:`gather` a ``(1, k)`` tensor and
    :meth:`check` does nothing.

    Args:
        context: ``None`` / ``True`` / ``False`` / a
            :class:`~torchrankboost.parallel.DistContext` (see
            :func:`~torchrankboost.parallel.get_context`); ``None`` here means one process.
    """

    def __init__(self, context: Union[None, bool, DistContext] = None):
        self.ctx: DistContext = get_context(context if context is not None else False)
        self.error: Optional[BaseException] = None

    @property
    def is_main(self) -> bool:
        """This rank prints, logs, saves and runs the callbacks (rank 0)."""
        return self.ctx.is_main

    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        return self.ctx.world_size

    @contextlib.contextmanager
    def local(self) -> Iterator["FitComm"]:
        """Run a block of local work (no collectives inside); on a data-parallel fit its
        exception (``Exception``, ``SystemExit``) is kept for the next collective."""
        if not self.ctx.enabled:
            yield self
            return
        try:
            yield self
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - raised on every rank later
            if self.error is None:
                self.error = exc

    # ------------------------------------------------------------------ numbers
    def sum(self, values: Union[Tensor, Sequence[float], float, Callable[[], Any]],
            size: Optional[int] = None) -> Tensor:
        """``values`` summed over the ranks: a float64 CPU vector.

        ``values``: a tensor / sequence of numbers, or a callable returning one (run like a
        :meth:`local` block: give ``size``, the number of values, so that a rank whose
        values cannot be built still joins the all-reduce with zeros). Raises
        :class:`DistributedError` on every rank when some rank has failed. One process: the
        values themselves.
        """
        if not self.ctx.enabled:
            return _vector(values)
        data = None
        if self.error is None:
            try:
                data = _vector(values)
                if size is not None and data.numel() != size:
                    raise ValueError(f"FitComm.sum: {data.numel()} values, expected {size}")
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                self.error = exc
        if self.error is not None:
            if size is None:
                raise ValueError("FitComm.sum: size is needed when the values may fail")
            data = torch.zeros(size, dtype=F64)
        err, self.error = self.error, None  # a kept failure is raised here, on every rank
        return flagged_sum(self.ctx, data, err)

    def exact_sums(self, parts: Union[Sequence[Tensor], Callable[[], Any]], *, plain: int = 0, exact: int = 1
                   ) -> Tuple[Tensor, Tensor]:
        """Float sums and order-free sums over the ranks in one flagged all-reduce.

        ``parts``: ``(values, acc)`` or a callable returning it (run like a :meth:`local`
        block: a rank whose parts cannot be built joins with zeros): ``values`` ``plain``
        numbers summed as floats (counts, a rank's slot of a :meth:`gather`-style vector),
        ``acc`` ``(exact, WIDTH)`` int64 accumulators of :mod:`torchrankboost.exact` (e.g.
        :func:`~torchrankboost.exact.query_accumulate` of per-document values). The
        accumulators travel as float64 digits (exact, in any order), so each exact sum is
        the correctly rounded sum of every rank's terms: the same float for any split of the
        queries over the ranks and any order of them.

        Returns ``(plain sums (plain,), exact sums (exact,))``, float64 on the CPU. One
        process: the values and the rounded accumulators (no collective).
        """
        width = plain + exact * X.WIDTH

        def wire() -> Tensor:
            values, acc = parts() if callable(parts) else parts
            acc = acc.reshape(exact, X.WIDTH)
            return torch.cat([_vector(values), X.to_wire(acc).reshape(-1).cpu()])

        if not self.ctx.enabled:
            values, acc = parts() if callable(parts) else parts
            return _vector(values), X.round_sum(acc.reshape(exact, X.WIDTH)).cpu()
        tot = self.sum(wire, size=width)
        return tot[:plain], X.round_sum(X.from_wire(tot[plain:].reshape(exact, X.WIDTH)))

    def gather(self, values: Union[Tensor, Sequence[float], float], size: Optional[int] = None
              ) -> Tensor:
        """``(world_size, k)`` float64: row ``r`` holds rank ``r``'s ``k`` values (one
        flagged sum in which each rank fills its own row; adding zeros is exact, so the rows
        are the ranks' values bit for bit). ``values`` and ``size`` as in :meth:`sum`."""
        W, r = self.world_size, self.rank

        def rows():
            v = _vector(values)
            out = torch.zeros((W, v.numel()), dtype=F64)
            out[r] = v
            return out.reshape(-1)

        total = None if size is None else W * size
        return self.sum(rows, size=total).reshape(W, -1)

    def max(self, values: Union[Tensor, Sequence[float], float], size: Optional[int] = None
           ) -> Tensor:
        """The element-wise maximum over the ranks (see :meth:`gather`)."""
        return self.gather(values, size).max(dim=0).values

    def min(self, values: Union[Tensor, Sequence[float], float], size: Optional[int] = None
           ) -> Tensor:
        """The element-wise minimum over the ranks (see :meth:`gather`)."""
        return self.gather(values, size).min(dim=0).values

    def logsumexp(self, values: Union[Tensor, Sequence[float], float], size: Optional[int] = None
                 ) -> Tensor:
        """``log Σ_r exp(v_r)`` element-wise over the ranks (the log of a sum over the ranks'
        queries, from each rank's log value; see :meth:`gather`). One process: the values."""
        if not self.ctx.enabled:
            return _vector(values)
        return torch.logsumexp(self.gather(values, size), dim=0)

    def check(self) -> None:
        """A collective with no payload: raise on every rank if some rank has failed."""
        if self.ctx.enabled:
            self.sum(lambda: torch.zeros(0, dtype=F64), size=0)

    def fail(self) -> None:
        """Every rank raises the same :class:`DistributedError` naming the failing ranks
        (a collective: called by every rank once a flag said so)."""
        err, self.error = self.error, None
        raise_failure(self.ctx, err)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (``obj`` in one process)."""
        return self.ctx.broadcast_object(obj, src=src)

    # ------------------------------------------------------------------ fit facts
    def require(self, ok: bool, message: str) -> None:
        """What a data-parallel fit needs: ``ValueError(message)`` when ``ok`` is false on a
        fit over several ranks (local work: run it inside :meth:`local`); nothing in one
        process."""
        if self.ctx.enabled and not ok:
            raise ValueError(message)

    def describe(self) -> Dict[str, int]:
        """What a record or the fit's parameters say about the processes:
        ``{"world_size": W}`` on a data-parallel fit, ``{}`` in one process."""
        return {"world_size": self.world_size} if self.ctx.enabled else {}

    def per_rank(self, fn: Callable[[], dict]) -> dict:
        """Diagnostics that are not sums over queries (e.g. a loss's ``round_diagnostics``):
        ``fn()`` in one process; ``{}`` on several ranks, where each rank's value would
        describe its shard only."""
        return fn() if not self.ctx.enabled else {}

    def metrics(self, jobs: Sequence[Tuple[Any, Tensor, Tensor, Any]], *,
                loss_combine: str = "sum") -> List[float]:
        """Metric values over every rank's queries, one per ``(metric, scores, labels,
        groups)`` job (each rank holding its shard); one flagged all-reduce for all of them.

        Per-query metrics: the exact sum of the per-query values over the summed query
        count (:func:`~torchrankboost.parallel.metric_parts`: the same for any split and
        order of the queries); the ``"loss"`` metric (the objective on the shard): the
        ranks' values summed exactly, or their log-sum-exp with ``loss_combine="logsumexp"``
        (a log-loss such as RankBoost's ``ln F̃``). One process: ``[metric(scores, labels,
        groups), ...]``.
        """
        if loss_combine not in ("sum", "logsumexp"):
            raise ValueError(f"loss_combine must be 'sum' or 'logsumexp', got {loss_combine!r}")
        if not self.ctx.enabled:
            return [m(s, y, g) for m, s, y, g in jobs]
        W, r = self.world_size, self.rank
        widths = [W if m.name == "loss" else METRIC_PARTS for m, *_ in jobs]

        def parts():
            out = []
            for m, s, y, g in jobs:
                if m.name == "loss":  # the objective on the shard, in this rank's slot
                    slot = torch.zeros(W, dtype=F64)
                    slot[r] = float(m(s, y, g))
                    out.append(slot)
                else:
                    out.append(metric_parts(m, s, y, g))
            return torch.cat(out) if out else torch.zeros(0, dtype=F64)

        tot = self.sum(parts, size=sum(widths))
        values, k = [], 0
        for (m, *_), w in zip(jobs, widths):
            v = tot[k:k + w]
            k += w
            if m.name == "loss":
                values.append(float(torch.logsumexp(v, 0)) if loss_combine == "logsumexp"
                              else float(X.exact_sum(v)))
            else:
                values.append(metric_value(v))
        return values
