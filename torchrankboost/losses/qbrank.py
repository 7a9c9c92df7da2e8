"""QBRank's quadratic objective (Zheng, Zha, Zhang, Chapelle, Chen, Sun, NIPS 2007).

The objective, ``τ``, ``w`` and the curvature choices follow the paper; the pair sums
are the pair engine's sort + prefix-sum kernels.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .._pair_engine.hinge import ACC_DTYPE, PairSetup, check_real, reduction_scale
from .base import Prepared, RankingLoss

__all__ = ["QBRankLoss"]


class QBRankLoss(RankingLoss):
    r"""QBRank: squared hinge on preferred pairs plus squared error on the labels.

    .. math::

        R = \frac w2 \sum_{(i, j) \in P} c_{ij} \max\big(0,\ s_j - s_i + \tau_{ij}\big)^2
          + \frac{1 - w}2 \sum_d \omega_d (l_d - s_d)^2

    summed over queries, with ``P`` the preferred pairs (``i`` above ``j``; graded labels by
    default, also bipartite or explicit), ``c_ij = weights[i] weights[j]`` (times the
    explicit pair weight), ``ω_d = weights[d]`` (1 without ``weights``) and

    * ``tau`` a number: the constant margin ``τ_ij = tau`` (Zheng: 1.0 without grade
      information);
    * ``tau="grade_difference"``: ``τ_ij = c (l_i − l_j)`` (Zheng's experiments, ``c = 1``).
      For label-induced pairs this is ``≥ 0``; for explicit pairs it is taken as written.

    Args:
        w: weight of the preference part, in ``[0, 1]`` (Zheng: 0.5). ``w = 1`` is a pure
            squared-hinge ranking loss, ``w = 0`` is least-squares regression (GBT).
        tau: a finite real margin or ``"grade_difference"``.
        c: scale of the grade-difference margin (finite real; used only then).
        reduction: ``"sum"`` (Zheng's plain sum, default), ``"mean"`` over the queries that
            contribute a term (those with a pair; with ``w < 1`` every non-empty query,
            since the label part applies to single-grade queries too), or ``"none"``.

    Shapes: ``scores``, ``labels``, ``weights`` ``(n,)`` (or ``(B, L)`` with ``mask``);
    returns a scalar (``(G,)`` for ``"none"``) in the dtype of ``scores``. ``labels`` are
    the raw grades (the label part and the grade-difference margin are not invariant to
    relabelling). With ``pairs=ExplicitPairs(...)`` labels may be ``None`` only if ``w = 1``
    and ``tau`` is a number.

    Queries with fewer than two grades have no pairs: their pair part is 0 with 0
    gradient, while the label part ``(1 − w)/2 Σ ω (l − s)²`` still applies (Zheng's
    footnote 2: single-label queries only inform the regression part).

    Computation: the pair part uses the sort + prefix-sum kernel of
    :class:`~torchrankboost.losses.PairwiseHingeLoss` with ``a = s − c·l`` and
    ``b = a + τ₀`` (an additive margin), ``O(n log n + nK)`` for ``K ≤ 64`` distinct grades
    (``O(n log n · ⌈log2 K⌉)`` beyond),
    float64 accumulation, query centring; ties exactly at the kink are inactive (gradient
    0, like ``relu'(0)``), and autograd's gradient equals the closed form.

    Curvature (:meth:`grad_hess`):

    * ``"diag"``: the exact Hessian diagonal ``w · Σ_{active pairs ∋ d} c + (1 − w) ω_d``
      (Zheng's Algorithm 1, "Newton-type"). It is not an upper bound.
    * ``"bound"``: ``2 w · Σ_{all pairs ∋ d} c + (1 − w) ω_d``, the global diagonal bound
      of Zheng's Theorem 1 (each pair block ``w [[1, −1], [−1, 1]] ⪯ w diag(2, 2)``); it does
      not depend on the scores. The paper-literal QBRank proxy ``w · n_d + (1 − w)`` is
      *not* a bound and is not offered here.
    """

    def __init__(self, *, w: float = 0.5, tau: Union[float, str] = 1.0, c: float = 1.0,
                 reduction: str = "sum"):
        super().__init__(reduction=reduction)
        w = check_real(w, "w")
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"w must lie in [0, 1], got {w}")
        self.w = w
        if isinstance(tau, str):
            if tau != "grade_difference":
                raise ValueError(
                    f"tau must be a finite real number or 'grade_difference', got {tau!r}"
                )
            self.tau = tau
        else:
            self.tau = check_real(tau, "tau")
        self.c = check_real(c, "c")

    # ------------------------------------------------------------------ helpers
    def _setup(self, inp: Prepared) -> PairSetup:
        if self.tau == "grade_difference":
            tau0, kappa = 0.0, self.c
        else:
            tau0, kappa = float(self.tau), 0.0
        return PairSetup(inp, squared=True, tau0=tau0, kappa=kappa, scale=self.w / 2)

    def _check_labels(self, inp: Prepared) -> None:
        if inp.labels is None and self.w < 1.0:
            raise ValueError("labels are required by QBRankLoss unless w == 1 (the label "
                             "part (1 - w)/2 Σ (l - s)² needs them)")

    def _omega(self, inp: Prepared) -> Optional[Tensor]:
        return None if inp.weights is None else inp.weights.to(ACC_DTYPE)

    def _active(self, inp: Prepared, has_pairs: Tensor) -> Tensor:
        if self.w < 1.0:
            return has_pairs | (inp.groups.sizes.to(has_pairs.device) > 0)
        return has_pairs

    # ------------------------------------------------------------------ contract
    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        self._check_labels(inp)
        setup = self._setup(inp)
        total = setup.loss(inp.scores)
        if self.w < 1.0:
            r = inp.labels.to(ACC_DTYPE) - inp.scores.to(ACC_DTYPE)
            sq = r * r
            om = self._omega(inp)
            if om is not None:
                sq = sq * om
            total = total + inp.groups.segment_sum(sq) * ((1.0 - self.w) / 2)
        return total.to(inp.scores.dtype), self._active(inp, setup.has_pairs)

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        self._check_labels(inp)
        setup = self._setup(inp)
        s64 = inp.scores.to(ACC_DTYPE)
        _, g, h = setup.compute(s64, need_loss=False, need_hess=(hess == "diag"))
        if hess == "bound":
            # (w/2) · 4 deg: the squared hinge's global bound, times the w/2 factor
            h = 2.0 * self.w * setup.degree()
        if self.w < 1.0:
            om = self._omega(inp)
            om = torch.ones_like(s64) if om is None else om
            g = g - (1.0 - self.w) * om * (inp.labels.to(ACC_DTYPE) - s64)
            h = h + (1.0 - self.w) * om
        k = reduction_scale(self._active(inp, setup.has_pairs), self.reduction)
        dt = inp.scores.dtype
        return (g * k).to(dt), (h * k).to(dt)

    def extra_repr(self) -> str:
        return (f"w={self.w}, tau={self.tau!r}, c={self.c}, "
                f"reduction={self.reduction!r}")
