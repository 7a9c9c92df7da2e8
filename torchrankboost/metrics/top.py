"""Top-of-list measures of the p-norm push: positives above (below) the top negative."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..contract import ArrayLike
from ..groups import Groups
from ._common import F64, accepts_padding, prepare, reduce_per_query

def _top_negative_counts(scores, labels, groups, threshold):
    s, y, g = prepare(scores, labels, groups)
    s64 = s.to(F64)
    pos = y > threshold
    top_neg = g.segment_max(torch.where(pos, torch.full_like(s64, float("-inf")), s64))
    above = pos & (s64 > top_neg[g.group_index])
    n_above = g.segment_sum(above.to(F64))
    n_pos = g.segment_sum(pos.to(F64))
    return n_above, n_pos


@accepts_padding
def positives_above_first_negative(scores: ArrayLike, labels: ArrayLike,
                                   groups: Optional[Groups] = None, *, threshold: float = 0.0,
                                   normalize: bool = False, reduction: str = "mean") -> Tensor:
    r"""Number of positives scored strictly above the highest-scored negative — the
    p-norm push paper's experimental "R_max" (Rudin 2005, §5, to be *maximised*: "the
    number of positives before the first negative", i.e. the true positives of the ROC
    curve in counts just before its first false positive).

    .. math:: \#\{i \in + : s_i > \max_{k \in -} s_k\}

    A positive tied with the top negative does **not** count (ties count against the
    positive, the tie-consistent reading (A18) of the spec). This is the complement of the
    paper's §2 definition (A4), :func:`positives_below_top_negative`:
    ``above + below = #positives``. A query without negatives counts all its positives.

    Args:
        threshold: positives are ``label > threshold``.
        normalize: divide by the query's number of positives (0 for a query without one).
        reduction: ``"mean"`` over queries (``groups=None``: the single global count) or
            ``"none"``.
    """
    n_above, n_pos = _top_negative_counts(scores, labels, groups, threshold)
    if normalize:
        n_above = n_above / n_pos.clamp_min(1.0)
    return reduce_per_query(n_above, reduction)


@accepts_padding
def positives_below_top_negative(scores: ArrayLike, labels: ArrayLike,
                                 groups: Optional[Groups] = None, *, threshold: float = 0.0,
                                 normalize: bool = False, reduction: str = "mean") -> Tensor:
    r"""Number of positives scored at or below the highest-scored negative — R_max of the
    p-norm push paper's §2, eq. (A4) (to be *minimised*):
    :math:`\max_k \sum_i \mathbf 1[s_i \le t_k] = \#\{i\in+ : s_i \le \max_k t_k\}`.
    The complement of :func:`positives_above_first_negative`; same arguments.
    """
    n_above, n_pos = _top_negative_counts(scores, labels, groups, threshold)
    below = n_pos - n_above
    if normalize:
        below = below / n_pos.clamp_min(1.0)
    return reduce_per_query(below, reduction)
