"""The ranking margin: the smallest score gap over the crucial pairs."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from .._pair_engine.levels import label_levels
from .._pair_engine.margin import explicit_margin, label_margin
from ..contract import ArrayLike
from ..groups import Groups
from ..pairs import ExplicitPairs, Graded, PairSpec, resolve_pairs
from ._common import (F64, accepts_padding, check_choice, check_grades, many_levels, prepare,
                      reduce_per_query)


@accepts_padding
def ranking_margin(scores: ArrayLike, labels: ArrayLike, groups: Optional[Groups] = None, *,
                   pairs: PairSpec = None, scale: float = 1.0, reduction: str = "min") -> Tensor:
    r"""Ranking margin: the smallest score gap over crucial pairs,
    :math:`\mu = \min_{(h,l)} (s_h - s_l) / \mathrm{scale}` (Rudin & Schapire 2009, §1.2;
    pass ``scale = ‖λ‖₁`` to get the normalised margin of a combination of weak rankers
    with values in [0, 1]). Positive means every crucial pair is ranked correctly.

    Label-induced pairs (``"graded"`` default, ``"bipartite"``): per query and label level,
    the lowest score of that level minus the highest score of all lower levels (a
    (query, level) table, or a sort and a running maximum for many label levels).
    ``ExplicitPairs`` directly (pairs with weight 0 are ignored).

    Args:
        scale: positive divisor.
        reduction: ``"min"`` (default; the margin of the whole sample, the minimum over
            all pairs of all queries; ``+inf`` when there is no pair), ``"mean"`` (mean of
            the per-query margins over queries with a pair) or ``"none"`` (``(G,)``,
            ``+inf`` for queries without a pair).
    """
    s, y, g = prepare(scores, labels, groups)
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    check_choice(reduction, "reduction", ("min", "mean", "none"))
    s64 = s.to(F64)
    inf = float("inf")
    spec = resolve_pairs(pairs)
    if isinstance(spec, Graded):
        check_grades(y, "ranking_margin with graded pairs")
    if isinstance(spec, ExplicitPairs):
        p = spec.validate(g)
        per_q = explicit_margin(s64, p.hi, p.lo, g, p.weight)
    else:
        lev, K, _ = label_levels(y, g, spec)
        per_q = label_margin(s64, lev, K, g, many=many_levels(K))
    per_q = per_q / scale
    if reduction == "none":
        return per_q
    if reduction == "min":
        return per_q.min() if per_q.numel() else s64.new_tensor(inf)
    return reduce_per_query(per_q, "mean", valid=torch.isfinite(per_q))
