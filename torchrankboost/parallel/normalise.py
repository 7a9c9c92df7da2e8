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
combine the same way: :func:`global_metric` all-reduces the sum of the per-query values
and the query count (NDCG over all queries = ``Σ_r Σ_{q∈r} NDCG_q / Σ_r |G_r|``).
"""

from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups
from .context import DistContext, get_context

__all__ = ["global_mean_loss", "global_mean_scale", "global_metric", "metric_parts"]


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


def global_mean_scale(local_count, context: Union[None, bool, DistContext] = None) -> float:
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


def global_mean_loss(local_sum: Tensor, local_count,
                     context: Union[None, bool, DistContext] = None, *,
                     with_mean: bool = False):
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


def metric_parts(metric, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None
                 ) -> Tensor:
    """This rank's share of a metric over all ranks' queries: ``(2,)`` float64 ``[numerator,
    denominator]`` on the CPU, to be summed over the ranks (the metric is then
    ``numerator / denominator``).

    For a mean over queries: ``[Σ_q m_q, #counted queries]`` from the per-query values
    (``reduction="none"``; NaN marks a query the metric skips); for ``pair_error``: the
    misordered and the total crucial-pair weight. ``ValueError`` for a metric without
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
        return torch.stack([torch.as_tensor(num).double().cpu().reshape(()),
                            torch.as_tensor(den).double().cpu().reshape(())])
    try:
        per = m.fn(scores, labels, groups, reduction="none", **m.kwargs)
    except TypeError:
        raise ValueError(f"global_metric: {m.name} has no per-query values "
                         f"(reduction='none'); it cannot be combined over ranks") from None
    per = torch.as_tensor(per).double().cpu().reshape(-1)
    ok = ~torch.isnan(per)
    # the skipped queries summed as zeros: the same additions as the metric's own mean, so
    # one process gets the metric bit for bit
    return torch.stack([torch.where(ok, per, torch.zeros_like(per)).sum(), ok.sum().double()])


def global_metric(metric, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
                  context: Union[None, bool, DistContext] = None) -> float:
    """A ranking metric over the queries of every rank, each rank holding its own shard.

    For a mean over queries (NDCG, DCG, MAP, precision, MRR, AUC, ...): the per-query values
    (``reduction="none"``; NaN marks a query the metric skips) are summed and counted on
    each rank and both are all-reduced, ``Σ_r Σ_{q∈r} m_q / Σ_r |G_r|``; ``pair_error``
    (pooled over pairs) all-reduces its misordered and total pair weights (see
    :func:`metric_parts`). In one process this is the metric itself.

    Args:
        metric: a metric name (``"ndcg@10"``, ``"map"``, ...) or a registry
            :class:`~torchrankboost.registry.Metric`.
        scores, labels, groups: this rank's shard.
        context: :func:`get_context`'s argument.

    Returns:
        the global value as a float (NaN when no rank has a counted query).
    """
    ctx = get_context(context)
    tot = ctx.all_reduce_sum(metric_parts(metric, scores, labels, groups))
    return float(tot[0] / tot[1]) if float(tot[1]) > 0 else float("nan")
