"""Pairwise hinge loss (RankSVM) and its square, over label-induced or explicit pairs.

References: Herbrich, Graepel & Obermayer (2000) and Joachims (2002) (RankSVM's pairwise
hinge); the sort + prefix-sum kernels (ties at the kink inactive) are the pair engine's.
"""

from __future__ import annotations

from typing import Optional, Tuple

from torch import Tensor

from .._pair_engine.hinge import ACC_DTYPE, PairSetup, check_real, reduction_scale
from .base import BindState, Prepared, RankingLoss

__all__ = ["PairwiseHingeLoss"]


class PairwiseHingeLoss(RankingLoss):
    r"""RankSVM's pairwise hinge loss, or its square, summed over the preferred pairs.

    .. math::

        L = \sum_q \sum_{(i, j) \in P_q} c_{ij}\, \phi\big(m - (s_i - s_j)\big),\qquad
        \phi(x) = \max(0, x)\ \ \text{or}\ \ \max(0, x)^2\ (\texttt{squared=True})

    where ``P_q`` are the pairs of query ``q`` (``i`` preferred to ``j``; graded labels by
    default, see :mod:`torchrankboost.pairs`), ``m`` the ``margin`` and ``c_ij`` the pair
    weight: ``weights[i] * weights[j]`` for label-induced pairs (1 without ``weights``), the
    explicit pair weight times the document weights for :class:`~torchrankboost.ExplicitPairs`.

    Args:
        margin: any finite real. ``1`` is RankSVM; ``0`` penalises only mis-ordered pairs
            (the "perceptron" ranking loss); a negative margin leaves pairs already ordered
            by more than ``|margin|`` free, as written.
        squared: square the hinge (the L2-SVM / squared-hinge variant).
        reduction: ``"sum"`` over queries (default), ``"mean"`` over queries with at least
            one pair, ``"none"`` for the ``(G,)`` per-query losses.

    Shapes: ``scores`` ``(n,)`` (or ``(B, L)`` with ``mask``), ``labels`` ``(n,)``,
    ``weights`` ``(n,)``; returns a scalar, or ``(G,)`` with ``reduction="none"``, in the
    dtype of ``scores``.

    Computation: label-induced pairs are never materialised. One sort of the ``2n`` values
    ``a = s`` (upper role) and ``b = s + m`` (lower role) and prefix sums of ``(w, w b,
    w b²)`` give every document's active-partner sums ``N, S1, S2`` (and ``M, T1`` for the
    lower role). Graded labels with ``K ≤ 64`` distinct
    levels take ``K − 1`` threshold rows of prefix sums over that one order,
    ``O(n log n + nK)`` time; more levels (real-valued labels) take ``⌈log2 K⌉`` bipartite
    passes (one integer sort each), ``O(n log n · ⌈log2 K⌉)``. Memory is ``O(n)`` either way.
    Explicit pairs cost ``O(#pairs)`` by gather/scatter. No Python loop over queries.

    Numerics: sums are accumulated in float64 on query-centred values (``b − a`` is
    unchanged), whatever the input dtype (fp16/bf16/fp32/fp64); the result is cast back.
    Queries with fewer than two label levels have no pairs: 0 loss, 0 gradient.

    Kink convention: a pair exactly at the kink (``s_i − s_j == margin``) is inactive, so
    its loss *and gradient* are 0 — the same as ``torch.relu`` (``relu'(0) = 0``). The
    autograd gradient of this module equals its closed form (:meth:`grad_hess`).
    ``weights`` and ``labels`` are treated as constants (no gradient flows to them).

    Curvature (:meth:`grad_hess`):

    * plain hinge: piecewise linear, so the Hessian is 0 almost everywhere. ``"diag"`` and
      ``"bound"`` both return zeros (0 is the exact diagonal and a valid bound, ``0 − H =
      0``). There is no useful quadratic bound of a hinge; boost it in gradient mode.
    * squared hinge: ``H = 2 Σ_active c_ij (e_i − e_j)(e_i − e_j)ᵀ``. ``"diag"`` is its
      exact diagonal ``2 Σ_{active pairs ∋ d} c``; ``"bound"`` is the global (score
      independent) bound ``4 · deg_d`` with ``deg_d = Σ_{all pairs ∋ d} c``: ``H ⪯
      2 Σ_all c (e_i − e_j)(e_i − e_j)ᵀ ⪯ 4 diag(deg)`` because a weighted graph
      Laplacian is at most twice its degree matrix (Zheng et al.'s ``diag(2, 2)`` per pair).
    """

    def __init__(self, *, margin: float = 1.0, squared: bool = False, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        self.margin = check_real(margin, "margin")
        if not isinstance(squared, bool):
            raise ValueError(f"squared must be a bool, got {squared!r}")
        self.squared = squared

    def _bind_state(self, inp: Prepared) -> BindState:
        setup = PairSetup(inp, squared=self.squared, tau0=self.margin, kappa=0.0, scale=1.0)
        return BindState(setup=setup, k=reduction_scale(setup.has_pairs, self.reduction))

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        setup = self._state(inp).setup
        return setup.loss(inp.scores).to(inp.scores.dtype), setup.has_pairs

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One pass of the sorted pair sums gives the per-query loss, the gradient and the
        exact diagonal together."""
        st = self._state(inp)
        s64 = inp.scores.to(ACC_DTYPE)
        per, g, h = st.setup.compute(s64, need_loss=True, need_hess=(hess == "diag"))
        g, h = self._finish(st, g, h, hess, inp.scores.dtype)
        return per.to(inp.scores.dtype), st.setup.has_pairs, g, h

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        st = self._state(inp)
        s64 = inp.scores.to(ACC_DTYPE)
        _, g, h = st.setup.compute(s64, need_loss=False, need_hess=(hess == "diag"))
        return self._finish(st, g, h, hess, inp.scores.dtype)

    def _finish(self, st: BindState, g: Tensor, h: Optional[Tensor], hess: str, dt):
        if hess == "bound":
            h = 4.0 * st.setup.degree() if self.squared else g.new_zeros(g.shape)
        k = st.k
        return (g * k).to(dt), (h * k).to(dt)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, squared={self.squared}, reduction={self.reduction!r}"
