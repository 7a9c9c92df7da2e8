"""The global loss normalisation and metrics of a data-parallel run.

**Normalising the loss.** ``DistributedDataParallel`` averages the gradients of the ranks:
with ``W`` ranks, rank ``r`` holding the queries ``Q_r`` of a step (``Q = ∪ Q_r``) and
per-rank losses ``L_r``, the parameters get ``(1/W) Σ_r ∇L_r``. A per-rank mean
(``reduction="mean"``) is therefore not the mean over the step's queries when ranks hold
different numbers of queries. The gradient of the global mean
``(1/|Q|) Σ_{q ∈ Q} ℓ_q`` is obtained with per-rank *sums* scaled by ``W / |Q|``:

.. math::
    L_r = \\frac{W}{|Q|} \\sum_{q \\in Q_r} \\ell_q
    \\quad\\Longrightarrow\\quad
    \\frac{1}{W} \\sum_r \\nabla L_r = \\nabla \\frac{1}{|Q|} \\sum_{q \\in Q} \\ell_q,

with ``|Q| = Σ_r |Q_r|`` all-reduced once per step. :func:`global_mean_scale` returns the
factor and :func:`global_mean_loss` applies it::

    loss_fn = ExponentialPairwiseLoss(reduction="sum")
    for batch in sampler:                                   # this rank's queries
        Xb, yb, gb = take_queries(X, y, groups, batch)
        loss = global_mean_loss(loss_fn(ddp_model(Xb).squeeze(-1), yb, gb), gb.num_groups)
        opt.zero_grad(); loss.backward(); opt.step()

(In one process the same code is the plain mean over the batch's queries.) To average over
the queries that have at least one pair only, as ``reduction="mean"`` of the pairwise
losses does, pass their count (or a ``(G,)`` bool mask) as ``local_count``. Metrics
combine the same way: :func:`global_metric` all-reduces the exact sum of the per-query
values (:mod:`torchrankboost.exact`) and the query count (NDCG over all queries =
``Σ_r Σ_{q∈r} NDCG_q / Σ_r |G_r|``, the same for any split and order of the queries).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups
from .context import DistContext, get_context
from ..exact import WIDTH, accumulate, from_wire, round_sum, to_wire

__all__ = ["global_mean_loss", "global_mean_scale", "global_metric", "metric_parts",
           "metric_value", "METRIC_PARTS"]


def _local_count(local_count) -> float:
    if isinstance(local_count, Tensor):
        if local_count.dtype == torch.bool:
            return float(local_count.sum())
        if local_count.numel() != 1:
            raise ValueError(f"local_count must be a number, a one-element tensor or a bool "
                             f"mask of the counted queries, got shape "
                             f"{tuple(local_count.shape)}")
        value = float(local_count.reshape(()))
    elif isinstance(local_count, (int, float, np.integer, np.floating)) \
            and not isinstance(local_count, bool):
        value = float(local_count)
    else:
        raise ValueError(f"local_count must be a number, a one-element tensor or a bool "
                         f"mask of the counted queries, got {local_count!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"local_count must be finite and non-negative, got {value}")
    return value


def global_mean_scale(local_count: Union[int, float, Tensor],
                      context: Union[None, bool, DistContext] = None) -> float:
    """``W / |Q|``: the factor that turns this rank's *summed* loss into one whose
    ``DistributedDataParallel``-averaged gradient is the gradient of the mean over all
    queries of the step on all ranks (see the module docstring).

    Args:
        local_count: this rank's number of queries in the step (an int, a one-element
            tensor, or a ``(G,)`` bool mask of the counted queries, e.g. those with at least
            one pair).
        context: :func:`get_context`'s argument (default: the process group if any).

    Returns:
        a Python float, ``world_size / Σ_r local_count_r`` (one all-reduce of one float64;
        ``0.0`` when no rank has a counted query). Disabled: ``1 / local_count``.
    """
    ctx = get_context(context)
    total = ctx.all_reduce_sum(torch.tensor([_local_count(local_count)],
                                            dtype=torch.float64))
    tot = float(total[0])
    return ctx.world_size / tot if tot > 0 else 0.0


def global_mean_loss(local_sum: Tensor, local_count: Union[int, float, Tensor],
                     context: Union[None, bool, DistContext] = None, *,
                     with_mean: bool = False) -> Union[Tensor, Tuple[Tensor, float]]:
    """``local_sum · W / |Q|`` (:func:`global_mean_scale`): backpropagating it through
    ``DistributedDataParallel`` gives the gradient of the mean loss over all queries of the
    step. ``local_sum`` is this rank's loss summed over its queries (``reduction="sum"``).

    Its value is not the global mean; with ``with_mean=True`` the result is ``(loss,
    mean)``, ``mean`` being the global mean ``Σ_r local_sum_r / |Q|`` as a float (for
    logging; the same single all-reduce). In one process the loss is the plain mean over
    the batch's queries.
    """
    if not isinstance(local_sum, Tensor):
        raise ValueError(f"local_sum must be a tensor (the summed loss), got "
                         f"{type(local_sum).__name__}")
    ctx = get_context(context)
    tot = ctx.all_reduce_sum(torch.tensor([_local_count(local_count),
                                           float(local_sum.detach()) if with_mean else 0.0],
                                          dtype=torch.float64))
    count = float(tot[0])
    scale = ctx.world_size / count if count > 0 else 0.0
    loss = local_sum * scale
    if not with_mean:
        return loss
    return loss, (float(tot[1]) / count if count > 0 else 0.0)


#: the width of :func:`metric_parts`: the numerator's accumulator
#: (:mod:`torchrankboost.exact`, as float64 digits) and the denominator
METRIC_PARTS = WIDTH + 1


def metric_parts(metric: Any, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None
                 ) -> Tensor:
    """This rank's share of a metric over all ranks' queries: ``(METRIC_PARTS,)`` float64 on
    the CPU, to be summed over the ranks (exactly, in any order), then read with
    :func:`metric_value` (``numerator / denominator``).

    For a mean over queries: the exact sum of the per-query values ``Σ_q m_q``
    (``reduction="none"``; NaN marks a query the metric skips, summed as 0) as the
    digits of its accumulator (:func:`~torchrankboost.exact.to_wire`), and the
    number of counted queries; for ``pair_error``: the misordered and the total
    crucial-pair weight of this rank (the misordered weight's accumulator; the total's
    float, summed over the ranks). So a metric is the same for any split of the queries
    over the ranks and any order of them: the correctly rounded mean of the per-query
    values (``pair_error``: of this rank's sums). ``ValueError`` for a metric without
    per-query values (it cannot be combined over ranks). :func:`global_metric` is one
    all-reduce of these; an algorithm evaluating several metrics stacks them into one.
    """
    from .. import metrics as M
    from ..registry import metric as get_metric

    m = get_metric(metric)
    if m.fn is M.pair_error:
        kw = dict(m.kwargs)
        num = m.fn(scores, labels, groups, **{**kw, "reduction": "sum"})
        den = m.fn(torch.zeros_like(scores), labels, groups,
                   **{**kw, "ties": "error", "reduction": "sum"})
        num = torch.as_tensor(num).double().reshape(1)
        return _parts(accumulate(num), torch.as_tensor(den).double())
    try:
        per = m.fn(scores, labels, groups, reduction="none", **m.kwargs)
    except TypeError:
        raise ValueError(f"global_metric: {m.name} has no per-query values "
                         f"(reduction='none'); it cannot be combined over ranks") from None
    per = torch.as_tensor(per).double().reshape(-1)
    ok = ~torch.isnan(per)
    # the skipped queries summed as zeros: the terms of the metric's own exact mean, so one
    # process gets the metric bit for bit
    acc = accumulate(torch.where(ok, per, torch.zeros_like(per)))
    return _parts(acc, ok.sum().double())


def _parts(acc: Tensor, den: Tensor) -> Tensor:
    """The digits and the denominator, on the CPU in one transfer."""
    return torch.cat([to_wire(acc), den.to(acc.device).reshape(1)]).cpu()


def metric_value(parts: Tensor) -> float:
    """The metric from :func:`metric_parts` summed over the ranks: the exact numerator,
    correctly rounded, over the denominator (NaN when it is 0 or a part is NaN)."""
    if parts.shape != (METRIC_PARTS,):
        raise ValueError(f"metric_value: expected {METRIC_PARTS} parts, got "
                         f"{tuple(parts.shape)}")
    den = float(parts[-1])
    if not den > 0 or bool(torch.isnan(parts).any()):
        return float("nan")
    return float(round_sum(from_wire(parts[:-1]))) / den


def global_metric(metric: Any, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
                  context: Union[None, bool, DistContext] = None) -> float:
    """A ranking metric over the queries of every rank, each rank holding its own shard.

    For a mean over queries (NDCG, DCG, MAP, precision, MRR, AUC, ...): the per-query values
    (``reduction="none"``; NaN marks a query the metric skips) are summed exactly and
    counted on each rank and both are all-reduced, ``Σ_r Σ_{q∈r} m_q / Σ_r |G_r|`` (the same
    for any split and order of the queries); ``pair_error`` (pooled over pairs) all-reduces
    its misordered and total pair weights (see :func:`metric_parts`). In one process this
    is the metric itself.

    Args:
        metric: a metric name (``"ndcg@10"``, ``"map"``, ...) or a registry
            :class:`~torchrankboost.registry.Metric`.
        scores: this rank's shard's scores.
        labels: this rank's shard's labels.
        groups: this rank's shard's queries.
        context: :func:`get_context`'s argument.

    Returns:
        the global value as a float (NaN when no rank has a counted query).
    """
    ctx = get_context(context)
    return metric_value(ctx.all_reduce_sum(metric_parts(metric, scores, labels, groups)))
