"""QBRank's quadratic objective (Zheng, Zha, Zhang, Chapelle, Chen, Sun, NIPS 2007).

The objective, ``τ``, ``w`` and the curvature choices follow the paper; the pair sums
are the pair engine's sort + prefix-sum kernels.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from .._pair_engine.hinge import ACC_DTYPE, PairSetup, check_real, reduction_scale
from .base import BindState, Prepared, RankingLoss

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

    tau: Union[float, str]

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
    def _bind_state(self, inp: Prepared) -> BindState:
        if inp.labels is None and self.w < 1.0:
            raise ValueError("labels are required by QBRankLoss unless w == 1 (the label "
                             "part (1 - w)/2 Σ (l - s)² needs them)")
        if self.tau == "grade_difference":
            tau0, kappa = 0.0, self.c
        else:
            tau0, kappa = float(self.tau), 0.0
        setup = PairSetup(inp, squared=True, tau0=tau0, kappa=kappa, scale=self.w / 2)
        active = setup.has_pairs
        if self.w < 1.0:
            active = active | (inp.groups.sizes.to(active.device) > 0)
        st = BindState(setup=setup, active=active, k=reduction_scale(active, self.reduction),
                       labels=None, omega=None)
        if self.w < 1.0:  # the label part: targets and weights ω in float64
            st.labels = inp.labels.to(ACC_DTYPE)
            st.omega = None if inp.weights is None else inp.weights.to(ACC_DTYPE)
        return st

    def _label_part(self, st: BindState, s64: Tensor, groups) -> Tensor:
        """``(1 − w)/2 Σ_q ω (l − s)²`` per query ``(G,)``."""
        r = st.labels - s64
        sq = r * r
        if st.omega is not None:
            sq = sq * st.omega
        return groups.segment_sum(sq) * ((1.0 - self.w) / 2)

    def _finish(self, st: BindState, s64: Tensor, g: Tensor, h: Optional[Tensor], hess: str,
                dt):
        if hess == "bound":
            # (w/2) · 4 deg: the squared hinge's global bound, times the w/2 factor
            h = 2.0 * self.w * st.setup.degree()
        if self.w < 1.0:
            om = torch.ones_like(s64) if st.omega is None else st.omega
            g = g - (1.0 - self.w) * om * (st.labels - s64)
            h = h + (1.0 - self.w) * om
        k = st.k
        return (g * k).to(dt), (h * k).to(dt)

    # ------------------------------------------------------------------ contract
    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        st = self._state(inp)
        total = st.setup.loss(inp.scores)
        if self.w < 1.0:
            total = total + self._label_part(st, inp.scores.to(ACC_DTYPE), inp.groups)
        return total.to(inp.scores.dtype), st.active

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One pass of the sorted pair sums for the pair part's loss, gradient and exact
        diagonal, plus the label part."""
        st = self._state(inp)
        s64 = inp.scores.to(ACC_DTYPE)
        total, g, h = st.setup.compute(s64, need_loss=True, need_hess=(hess == "diag"))
        if self.w < 1.0:
            total = total + self._label_part(st, s64, inp.groups)
        g, h = self._finish(st, s64, g, h, hess, inp.scores.dtype)
        return total.to(inp.scores.dtype), st.active, g, h

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        st = self._state(inp)
        s64 = inp.scores.to(ACC_DTYPE)
        _, g, h = st.setup.compute(s64, need_loss=False, need_hess=(hess == "diag"))
        return self._finish(st, s64, g, h, hess, inp.scores.dtype)

    def extra_repr(self) -> str:
        return (f"w={self.w}, tau={self.tau!r}, c={self.c}, "
                f"reduction={self.reduction!r}")
