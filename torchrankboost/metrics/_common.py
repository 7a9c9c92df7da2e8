"""Shared plumbing of the metrics: input checks, padded input, option checks, reductions.

Every metric validates its input with :func:`prepare` (flat ``(n,)`` scores and labels,
``Groups`` covering them; labels as float64), takes padded ``(B, L)`` input through
:func:`accepts_padding` and reduces its ``(G,)`` per-query values with :func:`reduce_per_query`.
"""

from __future__ import annotations

import functools
from numbers import Integral
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..exact import exact_sum
from ..groups import Groups, as_groups, as_vector

F64 = torch.float64

_MANY_LEVELS = 32  # above this many distinct labels, counting switches to merge passes


def many_levels(K: int) -> bool:
    """Whether ``K`` label levels take the O(n log n) paths (merge counting of pairs, a
    sort and running maximum for margins) instead of one O(n) pass per level."""
    return K > _MANY_LEVELS


def _as_1d(x, name: str, device=None) -> Tensor:
    return as_vector(x, name, device=device,
                     hint=" (flat, with groups); padded (B, L) input needs mask=...")


def _unpad(scores, labels, groups, mask) -> Tuple[Tensor, Tensor, Groups]:
    """Padded ``(B, L)`` scores and labels with a boolean ``mask`` → flat tensors and the
    ``Groups`` of the rows (one query per row, empty rows included)."""
    if groups is not None:
        raise ValueError("pass either groups (flat input) or mask (padded input), not both")
    mask = torch.as_tensor(mask)
    scores = torch.as_tensor(scores)
    labels = torch.as_tensor(labels, device=scores.device)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a boolean tensor, got {mask.dtype}")
    if scores.dim() != 2 or mask.shape != scores.shape or labels.shape != scores.shape:
        raise ValueError(f"padded input: scores, labels and mask must share one (B, L) shape; "
                         f"got {tuple(scores.shape)}, {tuple(labels.shape)} and "
                         f"{tuple(mask.shape)}")
    mask = mask.to(scores.device)
    return scores[mask], labels[mask], Groups.from_padded(mask).to(scores.device)


def accepts_padding(fn):
    """Let a metric take padded ``(B, L)`` scores/labels with ``mask=`` (same result as the
    flat tensors with the row ``Groups``)."""
    @functools.wraps(fn)
    def metric(scores, labels, groups=None, *, mask=None, **kwargs):
        if mask is not None:
            scores, labels, groups = _unpad(scores, labels, groups, mask)
        return fn(scores, labels, groups, **kwargs)

    return metric


def check_grades(y: Tensor, what: str) -> None:
    """Graded relevance (gains, label-induced pairs) needs labels >= 0; a negative label is
    most often padding (allRank pads with -1)."""
    if y.numel() and float(y.min()) < 0:
        raise ValueError(
            f"{what} needs non-negative relevance labels, got {float(y.min()):g}; a label of "
            f"-1 usually marks padding: pass the padded (B, L) tensors with mask=... (or drop "
            f"the padded slots) instead; real-valued grades can be shifted to >= 0 (only their "
            f"order counts for pairs)")


def prepare(scores, labels, groups) -> Tuple[Tensor, Tensor, Groups]:
    """Validate and return ``(scores, labels as float64, groups)`` on the scores' device."""
    s = _as_1d(scores, "scores")
    y = _as_1d(labels, "labels", device=s.device)
    if s.shape[0] != y.shape[0]:
        raise ValueError(
            f"scores and labels disagree in length: scores has {s.shape[0]} documents, "
            f"labels has {y.shape[0]}"
        )
    g = as_groups(groups, s.shape[0], device=s.device)
    return s, y.to(F64), g


def check_k(k, *, allow_none: bool = True) -> Optional[int]:
    if k is None:
        if allow_none:
            return None
        raise ValueError("k must be a positive integer, got None")
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise ValueError(f"k must be a positive integer or None, got {k!r}")
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return int(k)


def check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def tie_weight(ties: str, choices=("error", "half")) -> float:
    check_choice(ties, "ties", choices)
    return {"error": 0.0, "half": 0.5, "correct": 1.0}[ties]


def reduce_per_query(per_query: Tensor, reduction: str, *,
                     valid: Optional[Tensor] = None) -> Tensor:
    """``"none"`` → the (G,) tensor; ``"mean"`` → mean over ``valid`` queries (all when
    ``valid`` is None; NaN when no query is valid): the exact sum of the per-query values
    (:func:`~torchrankboost.exact.exact_sum`, correctly rounded: the same for any order of
    the queries) over their count."""
    check_choice(reduction, "reduction", ("mean", "none"))
    if reduction == "none":
        return per_query
    if valid is None:
        if per_query.numel() == 0:
            return per_query.new_tensor(float("nan"))
        return exact_sum(per_query) / per_query.numel()
    cnt = valid.sum()
    tot = exact_sum(torch.where(valid, per_query, torch.zeros_like(per_query)))
    return torch.where(cnt > 0, tot / cnt.clamp_min(1), tot.new_tensor(float("nan")))
