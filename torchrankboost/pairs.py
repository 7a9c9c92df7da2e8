"""Which pairs of documents count: graded labels, a bipartite threshold, or an explicit list.

Every pairwise loss and metric takes a ``pairs`` argument describing the set of *crucial
pairs* ``(hi, lo)`` — document ``hi`` should be ranked above document ``lo`` — inside each
query. Three kinds:

* :class:`Graded` (the default, also the string ``"graded"``): every pair in a query whose
  labels differ; the higher label is preferred. Never materialised: losses use sorts and
  prefix sums over label levels.
* :class:`Bipartite` (``"bipartite"``): labels are split into positives (``label >
  threshold``) and negatives; every positive is preferred to every negative of its query.
* :class:`ExplicitPairs`: a list of ``(hi, lo[, weight])`` flat document indices, for
  preferences no label can express (non-transitive ones included). Cost O(#pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

import math

import torch
from torch import Tensor

from .contract import DeviceLike
from .params import Params

if TYPE_CHECKING:
    from .groups import Groups

__all__ = ["Graded", "Bipartite", "ExplicitPairs", "PairSpec", "resolve_pairs"]


@dataclass(frozen=True)
class Graded(Params):
    """All pairs within a query whose labels differ (higher label preferred)."""


@dataclass(frozen=True)
class Bipartite(Params):
    """Positives (``label > threshold``) preferred to negatives (``label <= threshold``)."""

    threshold: float = 0.0

    def __post_init__(self):
        try:
            t = float(self.threshold)
        except (TypeError, ValueError):
            t = None
        if t is None or isinstance(self.threshold, bool) or not math.isfinite(t):
            raise ValueError(f"threshold must be a finite number, got "
                             f"{self.threshold!r}")


class ExplicitPairs:
    """An explicit list of preferred pairs over the flat document axis.

    Args:
        hi: ``(P,)`` integer indices of the preferred documents.
        lo: ``(P,)`` integer indices of the documents they are preferred to.
        weight: optional ``(P,)`` finite non-negative pair weights (default 1).

    Both documents of a pair must belong to the same query; :meth:`validate` checks this
    against the groups (``ValueError`` otherwise).
    """

    def __init__(self, hi: "torch.Tensor | Sequence[int]", lo: "torch.Tensor | Sequence[int]",
                 weight: "torch.Tensor | Sequence[float] | None" = None):
        hi = torch.as_tensor(hi)
        lo = torch.as_tensor(lo)
        if hi.dim() != 1 or lo.dim() != 1 or hi.shape != lo.shape:
            raise ValueError(
                f"pairs: hi and lo must be 1-D of equal length, got {tuple(hi.shape)} "
                f"and {tuple(lo.shape)}"
            )
        if hi.dtype.is_floating_point or lo.dtype.is_floating_point:
            raise ValueError("pairs: hi and lo must be integer indices")
        self.hi = hi.long()
        self.lo = lo.long()
        if weight is not None:
            weight = torch.as_tensor(weight)
            if weight.shape != self.hi.shape:
                raise ValueError("pairs: weight must have one entry per pair")
            if not weight.dtype.is_floating_point:
                weight = weight.to(torch.get_default_dtype())
            bad = ~torch.isfinite(weight) | (weight < 0)
            if bool(bad.any()):
                k = int(torch.nonzero(bad)[0])
                raise ValueError(f"pairs: weight must be finite and non-negative, got "
                                 f"{float(weight[k])} for pair {k}")
        self.weight = weight

    @property
    def num_pairs(self) -> int:
        return self.hi.numel()

    def to(self, device: DeviceLike) -> "ExplicitPairs":
        w = None if self.weight is None else self.weight.to(device)
        return ExplicitPairs(self.hi.to(device), self.lo.to(device), w)

    def validate(self, groups: "Groups") -> "ExplicitPairs":
        """Check the indices against ``groups`` (range and same query); return self on
        ``groups``' device."""
        n = groups.num_docs
        p = self.to(groups.device)
        if p.num_pairs:
            lo_min = int(torch.minimum(p.hi.min(), p.lo.min()))
            hi_max = int(torch.maximum(p.hi.max(), p.lo.max()))
            if lo_min < 0 or hi_max >= n:
                raise ValueError(
                    f"pairs: indices must lie in [0, {n}), got range [{lo_min}, {hi_max}]"
                )
            gi = groups.group_index
            bad = gi[p.hi] != gi[p.lo]
            if bool(bad.any()):
                k = int(torch.nonzero(bad)[0])
                raise ValueError(
                    f"pairs: pair {k} (hi={int(p.hi[k])}, lo={int(p.lo[k])}) spans two "
                    "queries; pairs must index documents inside one query"
                )
        return p

    def __repr__(self) -> str:
        return f"ExplicitPairs(num_pairs={self.num_pairs}, weighted={self.weight is not None})"


PairSpec = Union[Graded, Bipartite, ExplicitPairs, str, None]


def resolve_pairs(pairs: PairSpec) -> Union[Graded, Bipartite, ExplicitPairs]:
    """Normalise the ``pairs`` argument: ``None``/``"graded"`` → :class:`Graded`,
    ``"bipartite"`` → ``Bipartite(0.0)``; instances pass through."""
    if pairs is None or pairs == "graded":
        return Graded()
    if pairs == "bipartite":
        return Bipartite()
    if isinstance(pairs, (Graded, Bipartite, ExplicitPairs)):
        return pairs
    raise ValueError(
        f"pairs must be 'graded', 'bipartite', Graded(), Bipartite(threshold) or "
        f"ExplicitPairs(hi, lo[, weight]); got {pairs!r}"
    )
