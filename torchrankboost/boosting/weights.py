r"""Document and query weights, and per-document initial scores, of a fit.

Every algorithm's ``fit`` takes ``sample_weight=`` ``(n,)`` (one weight per document),
``group_weight=`` ``(Q,)`` (one per query) and ``init_score=`` (a float, or ``(n,)`` one
starting score per document). In a loss a label-induced pair ``(i, j)`` of query ``q``
weighs :math:`c_q\, w_i w_j` (:math:`w` the document weights, :math:`c` the query weights;
a pointwise term weighs :math:`c_q w_i`), so

* the gradient and the closed-form curvature carry the weights (a bound loss with weights,
  :meth:`~torchrankboost.losses.BoundLoss.with_group_weights`);
* a row of weight 0 (or of a query of weight 0) contributes nothing anywhere: its gradient
  and curvature are 0, the weak learner never sees it (not in its least-squares fit, its
  leaf values, its minimum-child counts, nor the bin edges or scaling of ``prepare``), so
  **weights of 0 on some queries give the model trained without those queries**.

Weights that are all 1 are the unweighted fit (the same code path, the same numbers).
Limits of the equality with the model trained without the zero-weighted queries: the
driver's query ``subsample`` draws over every query (weight 0 or not), and a loss with
``reduction="mean"`` still counts a zero-weighted query that has pairs.
A per-document ``init_score`` is an offset, as in LightGBM: the training scores start from
it and it is not part of the model (``predict`` adds none of it); evaluation sets take their
own offsets with ``eval_init_score=[...]`` (one entry, ``None``, a float or ``(n_v,)``, per
set). A float ``init_score`` stays the model's constant starting score.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.levels import label_pairs
from ..groups import Groups, as_vector
from ..pairs import ExplicitPairs

__all__ = ["FitWeights", "fit_weights", "split_init_score", "prepare_learner",
           "weighted_pairs"]

F64 = torch.float64


def _weights(x, size: int, name: str, what: str, device) -> Optional[Tensor]:
    """``x`` as a ``(size,)`` float64 tensor of finite non-negative weights (``None`` for
    ``None`` or all ones)."""
    if x is None:
        return None
    w = as_vector(x, name, device=device).to(F64)
    if w.shape[0] != size:
        raise ValueError(f"{name} has {w.shape[0]} entries but there are {size} {what}")
    if bool((w < 0).any()):
        raise ValueError(f"{name} must be non-negative, got {float(w.min()):g}")
    if bool((w == 1).all()):
        return None  # unit weights: the unweighted fit, bit for bit
    return w


@dataclass
class FitWeights:
    """The weights of one fit: ``sample`` ``(n,)`` and ``group`` ``(G,)`` (float64, ``None``
    when unweighted), ``rows`` the ``int64`` rows of positive weight (``None``: every row)."""

    sample: Optional[Tensor] = None
    group: Optional[Tensor] = None
    rows: Optional[Tensor] = None
    _mask: Optional[Tensor] = None  # (n,) bool: positive weight

    @property
    def weighted(self) -> bool:
        return self.sample is not None or self.group is not None

    def subset(self, rows: Optional[Tensor]) -> Optional[Tensor]:
        """The rows of ``rows`` (a subsample; ``None``: all) that have a positive weight."""
        if self.rows is None:
            return rows
        if rows is None:
            return self.rows
        keep = torch.zeros(int(self.active_mask.shape[0]), dtype=torch.bool,
                           device=rows.device)
        keep[rows] = True
        return torch.nonzero(keep & self.active_mask, as_tuple=False).reshape(-1)

    @property
    def active_mask(self) -> Tensor:
        return self._mask

    def count(self, n: int) -> int:
        """The number of rows of positive weight (``n`` when all are)."""
        return n if self.rows is None else int(self.rows.numel())

    def log_doc_weights(self, groups: Groups) -> Optional[Tensor]:
        """``ln(w_d c_q)`` per document (``-inf`` at weight 0), or ``None`` unweighted."""
        if not self.weighted:
            return None
        w = self.sample if self.sample is not None else torch.ones(
            groups.num_docs, dtype=F64, device=self.group.device)
        if self.group is not None:
            w = w * self.group[groups.group_index]
        return torch.log(w)

    def mask(self, target: Tensor, weight: Optional[Tensor], hc: Tensor
             ) -> Tuple[Tensor, Optional[Tensor], Tensor]:
        """The learner's target and weight and the curvature used, 0 on rows of weight 0 (so
        the step's sums leave them out too)."""
        if self.rows is None:
            return target, weight, hc
        off = ~self._mask
        target = target.masked_fill(off, 0.0)
        hc = hc.masked_fill(off, 0.0)
        weight = None if weight is None else weight.masked_fill(off, 0.0)
        return target, weight, hc


def fit_weights(sample_weight, group_weight, groups: Groups, *, device=None,
                context=None) -> FitWeights:
    """Check ``sample_weight`` ``(n,)`` and ``group_weight`` ``(Q,)`` (finite, ``>= 0``;
    ``ValueError`` naming the argument) against ``groups``: a :class:`FitWeights`.
    ``context`` with several ranks (a data-parallel fit): this rank's rows may all weigh 0
    (the other ranks' rows are fitted; no check across the ranks here)."""
    n, G = groups.num_docs, groups.num_groups
    dev = device if device is not None else groups.device
    w = _weights(sample_weight, n, "sample_weight", "documents", dev)
    c = _weights(group_weight, G, "group_weight", "queries", dev)
    out = FitWeights(w, c)
    if out.weighted:
        active = torch.ones(n, dtype=torch.bool, device=dev)
        if w is not None:
            active &= w > 0
        if c is not None:
            active &= (c > 0)[groups.group_index]
        if not bool(active.any()) and getattr(context, "world_size", 1) == 1:
            raise ValueError("every weight is zero (sample_weight and group_weight): "
                             "nothing to fit")
        out._mask = active
        if not bool(active.all()):
            out.rows = torch.nonzero(active, as_tuple=False).reshape(-1)
    return out


def split_init_score(init_score, n: int, *, device=None, name: str = "init_score"
                     ) -> Tuple[Optional[float], Optional[Tensor]]:
    """``(constant, per-document)``: a float (or a one-element value) as the constant, an
    ``(n,)`` array as float64 per-document scores (the other ``None``)."""
    if init_score is None:
        return None, None
    s = init_score
    if not isinstance(s, (int, float)):
        try:
            s = torch.as_tensor(s)
        except Exception as exc:
            raise ValueError(f"{name}: cannot convert to a tensor ({exc})") from None
        if s.dim() == 0 or (s.dim() == 1 and s.numel() == 1 and n != 1):
            s = float(s.reshape(()))
    if isinstance(s, (int, float)):
        base = float(s)
        if not math.isfinite(base):
            raise ValueError(f"{name} must be finite, got {init_score}")
        return base, None
    s = as_vector(s, name, device=device, hint=" (a float, or one score per document)").to(F64)
    if s.shape[0] != n:
        raise ValueError(f"{name} has {s.shape[0]} entries but there are {n} documents")
    return None, s


def prepare_learner(learner, X: Tensor, context, rows: Optional[Tensor]):
    """``learner.prepare(X, context=...)``, its binning or scaling from the rows of positive
    weight only (``rows``; when the learner's ``prepare`` takes ``rows=``)."""
    if rows is None:
        return learner.prepare(X, context=context)
    try:
        takes_rows = "rows" in inspect.signature(learner.prepare).parameters
    except (TypeError, ValueError):
        takes_rows = False
    if takes_rows:
        return learner.prepare(X, context=context, rows=rows)
    return learner.prepare(X, context=context)


def weighted_pairs(pairs, labels, groups: Groups, fw: FitWeights):
    """The crucial pairs of ``pairs`` listed with their weights ``c_q w_i w_j`` (times an
    explicit pair's own weight): an :class:`~torchrankboost.pairs.ExplicitPairs`
    (O(#pairs) memory)."""
    hi, lo, pw = label_pairs(labels, groups, pairs)
    w = torch.ones(hi.shape[0], dtype=F64, device=hi.device) if pw is None else pw.to(F64)
    if fw.sample is not None:
        w = w * fw.sample[hi] * fw.sample[lo]
    if fw.group is not None:
        w = w * fw.group[groups.group_index[hi]]
    return ExplicitPairs(hi, lo, w)
