"""Hinge-type pair losses (pairwise hinge, squared hinge, QBRank's regression-on-pairs).

``L_pairs = scale · Σ_{(i, j)} c_ij φ(b_j − a_i)`` with ``a = s − κ·l``, ``b = a + τ₀``,
``φ(x) = max(0, x)`` or ``max(0, x)²`` (RankSVM's hinge, Joachims 2002; QBRank's
grade-difference margin ``κ (l_i − l_j)``, Zheng et al. 2007), ``c_ij`` the product weights
``w_i w_j`` (label-induced pairs, :func:`~.sorted_pairs.hinge_terms`) or the explicit pair
weights times the document weights (:func:`explicit_hinge_terms`, O(#pairs)).
:class:`PairSetup` holds everything that does not depend on the scores; the loss classes
(``PairwiseHingeLoss``, ``QBRankLoss``) call it for values ``(G,)``, gradients and Hessian
diagonals ``(n,)`` in float64.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..pairs import ExplicitPairs
from .levels import label_levels
from .sorted_pairs import hinge_terms, level_cuts, pair_degree

__all__ = ["ACC_DTYPE", "check_real", "explicit_hinge_terms", "PairSetup", "reduction_scale"]


def explicit_hinge_terms(a: Tensor, b: Tensor, hi: Tensor, lo: Tensor, pw: Tensor, *,
                   squared: bool, need_hess: bool = False):
    """Closed-form gradient and Hessian diagonal for an explicit pair list,
    ``L = Σ_p pw_p φ(b_lo − a_hi)``, with the same kink convention (``φ'(0) = 0``).
    Returns ``(g (n,), hdiag (n,) or None, None)``."""
    n = a.numel()
    x = b.index_select(0, lo) - a.index_select(0, hi)
    act = x > 0
    if squared:
        d1 = pw * 2 * torch.where(act, x, torch.zeros_like(x))
    else:
        d1 = pw * act.to(pw.dtype)
    g = a.new_zeros(n).index_add(0, hi, -d1).index_add(0, lo, d1)
    h = None
    if need_hess:
        # a self pair (hi == lo) has a constant loss: no curvature
        d2 = pw * 2 * (act & (hi != lo)).to(pw.dtype) if squared else torch.zeros_like(pw)
        h = a.new_zeros(n).index_add(0, hi, d2).index_add(0, lo, d2)
    return g, h, None


ACC_DTYPE = torch.float64


def check_real(value, name: str) -> float:
    """``float(value)`` for a finite real number (not a bool), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if isinstance(value, Tensor) and value.numel() == 1 and not value.dtype == torch.bool:
            value = value.item()
        else:
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return value


class PairSetup:
    """Everything about the pair part of a hinge-type loss that does not depend on scores
    (built from validated inputs whose scores may be ``None``: a bound loss's state).

    ``L_pairs = scale · Σ_{(i, j)} c_ij φ(b_j − a_i)`` with ``a = s − kappa·l``,
    ``b = a + tau0``, ``φ`` the (squared) hinge, ``c_ij`` the product weights (label-induced
    pairs) or the explicit pair weights times the document weights.
    """

    def __init__(self, inp, *, squared: bool, tau0: float, kappa: float, scale: float):
        self.groups = inp.groups
        self.squared = squared
        self.tau0 = tau0
        self.kappa = kappa
        self.scale = scale
        dev = self.groups.device
        n = self.groups.num_docs
        self.n = n
        self._degree: Optional[Tensor] = None
        self.offset = None  # per-document constant subtracted from s to form a
        if kappa != 0.0:
            if inp.labels is None:
                raise ValueError("labels are required for a grade-difference margin")
            self.offset = kappa * inp.labels.to(device=dev, dtype=ACC_DTYPE)
        self.w = None if inp.weights is None else inp.weights.to(device=dev, dtype=ACC_DTYPE)
        p = inp.pairs
        self.explicit = isinstance(p, ExplicitPairs)
        G = self.groups.num_groups
        if self.explicit:
            self.hi, self.lo = p.hi, p.lo
            pw = (torch.ones(p.num_pairs, dtype=ACC_DTYPE, device=dev) if p.weight is None
                  else p.weight.to(device=dev, dtype=ACC_DTYPE))
            if self.w is not None:
                pw = pw * self.w.index_select(0, self.hi) * self.w.index_select(0, self.lo)
            self.pw = pw
            self.pair_group = self.groups.group_index.index_select(0, self.hi)
            self.has_pairs = torch.bincount(self.pair_group, minlength=G) > 0
        else:
            self.lev, self.K, self.has_pairs = label_levels(inp.labels, self.groups, p)
            # the level counts, read once here: the kernels then read nothing on the host
            self.cuts = level_cuts(self.lev, self.K) if self.K >= 2 else None

    # -- values -------------------------------------------------------------------
    def ab(self, s64: Tensor) -> Tuple[Tensor, Tensor]:
        x = s64 if self.offset is None else s64 - self.offset
        b = x + self.tau0
        if self.explicit or not self.n:
            return x, b
        # centre each query against cancellation in the prefix sums. Subtracting the same
        # constant from x_i and from (x_j + tau0) keeps exact kink ties exact (and order
        # otherwise, up to merging values one ulp apart).
        ctr = self.groups.segment_mean(x.detach()).index_select(0, self.groups.group_index)
        if self.tau0 == 0.0:  # b == a: one tensor (the kernels then sort n values, not 2n)
            a = x - ctr
            return a, a
        return x - ctr, b - ctr

    def compute(self, s64: Tensor, *, need_loss: bool = True, need_hess: bool = False):
        """``(per_group (G,) or None, grad (n,), hdiag (n,) or None)`` of the pair part,
        in float64, scaled by ``scale``. Differentiable if ``s64`` is."""
        a, b = self.ab(s64)
        if self.explicit:
            g, h, _ = explicit_hinge_terms(a, b, self.hi, self.lo, self.pw, squared=self.squared,
                                     need_hess=need_hess)
            per_group = None
            if need_loss:
                x = torch.relu(b.index_select(0, self.lo) - a.index_select(0, self.hi))
                phi = x * x if self.squared else x
                per_group = a.new_zeros(self.groups.num_groups).index_add(
                    0, self.pair_group, self.pw * phi)
        else:
            per_group, g, h = hinge_terms(a, b, self.lev, self.K, self.groups, self.w,
                                          squared=self.squared, need_loss=need_loss,
                                          need_hess=need_hess, cuts=self.cuts)
        sc = self.scale
        if per_group is not None:
            per_group = per_group * sc
        return per_group, g * sc, (None if h is None else h * sc)

    def degree(self) -> Tensor:
        """Weighted degree of each document over all its pairs (active or not), float64
        (score independent: computed once per setup)."""
        if self._degree is None:
            dev = self.groups.device
            if self.explicit:
                pw = self.pw * (self.hi != self.lo).to(self.pw.dtype)  # self pairs: no curvature
                self._degree = torch.zeros(self.n, dtype=ACC_DTYPE, device=dev).index_add(
                    0, self.hi, pw).index_add(0, self.lo, pw)
            else:
                self._degree = pair_degree(self.lev, self.K, self.groups, self.w, self.w,
                                           torch.zeros(self.n, dtype=ACC_DTYPE, device=dev))
        return self._degree

    def loss(self, scores: Tensor) -> Tensor:
        """Per-query pair loss ``(G,)`` in float64, differentiable in ``scores`` through
        the closed-form gradient (twice differentiable: see :class:`_PairLossFunction`)."""
        if self.explicit:
            per_group, _, _ = self.compute(scores.to(ACC_DTYPE))
            return per_group
        return _PairLossFunction.apply(scores, self)


class _PairLossFunction(torch.autograd.Function):
    """Forward: per-query pair losses; backward: the closed-form gradient saved by the
    forward pass (no autograd graph through the sorts). Under ``create_graph=True`` the
    gradient is recomputed with differentiable ops, so Hessians/HVPs work too."""

    @staticmethod
    def forward(ctx, scores, setup):
        with torch.no_grad():
            per_group, g, _ = setup.compute(scores.detach().to(ACC_DTYPE))
        ctx.save_for_backward(scores)
        ctx.setup = setup
        ctx.g = g
        return per_group

    @staticmethod
    def backward(ctx, gout):
        (scores,) = ctx.saved_tensors
        setup = ctx.setup
        if torch.is_grad_enabled():
            _, g, _ = setup.compute(scores.to(ACC_DTYPE), need_loss=False)
        else:
            g = ctx.g
        gi = setup.groups.group_index.to(g.device)
        grad = gout.to(g.dtype).index_select(0, gi) * g
        return grad.to(scores.dtype), None


def reduction_scale(setup_has_pairs: Tensor, reduction: str) -> float:
    """Factor turning the summed-loss gradient into that of ``reduction``."""
    if reduction == "mean":
        return 1.0 / max(int(setup_has_pairs.sum()), 1)
    return 1.0
