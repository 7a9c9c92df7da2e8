r"""Rudin's p-norm push (Rudin 2009, "The P-Norm Push"; graded extension per label level).

Per query, with ``L_j = Σ_{i preferred to j} w_ij exp(-(s_i - s_j))`` the exponential
"height" of document ``j`` (how strongly the documents that should beat it are pushed
down by it)::

    F_p = Σ_j L_j^p,        p ≥ 1   (p = 1 is RankBoost's loss)

Convex for ``p ≥ 1`` (``r ↦ r^p`` convex non-decreasing on ``R₊`` ∘ convex); ``p < 1`` is
rejected. Larger ``p`` concentrates the loss on the highest-scored lower documents.
"""

from __future__ import annotations

import math

from .exponential import ExpFamilyLoss

__all__ = ["PNormPushLoss"]


def _check_p(p) -> float:
    try:
        pf = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"p must be a real number >= 1, got {p!r}") from None
    if not math.isfinite(pf) or pf < 1:
        raise ValueError(
            f"p must be a finite number >= 1 (the p-norm push is convex only for p >= 1; "
            f"p = inf, the pure top push, is not smooth), got {p!r}"
        )
    return pf


class PNormPushLoss(ExpFamilyLoss):
    r"""p-norm push ``Σ_lo (Σ_{hi preferred to lo} w · exp(−(s_hi − s_lo)))^p``, per query.

    Call and pair options as :class:`~torchrankboost.losses.ExponentialPairwiseLoss`
    (``pairs`` graded / ``Bipartite(t)`` / ``ExplicitPairs``; ``weights`` per document, a
    pair weighing ``w_hi w_lo``). Graded labels: every document is a
    "negative" for all strictly higher grades of its query.

    Args:
        p: the push exponent, finite, ``p ≥ 1`` (``ValueError`` otherwise).
        log: return ``ln F_p`` per query (finite for any finite scores and ``p``; the raw
            value overflows easily: ``e^{p·s}``). Queries without pairs give 0.
        normalize: divide each query's ``F_p`` by its value at all-tied scores,
            ``Σ_lo (Σ_{hi} w_hi w_lo)^p`` (``= I^p K`` bipartite unweighted; the number of
            crucial pairs for ``p = 1``). With ``log=True``, ``(ln F_p − ln(I^p K)) / p`` is
            Rudin's (2009) normalised ``ln F̄_p``.
        reduction: ``"sum"`` | ``"mean"`` (over queries with pairs) | ``"none"``.

    Computation (label-induced pairs): ``L_j = w_j e^{s_j} E_{>l_j}`` with ``E`` the exclusive
    reverse log-cum-sum-exp over the query's label levels, so
    ``ln F_p = LSE_levels(ln G_k + p ln E_{>k})`` with ``G_k = Σ_{l_j = k} (w_j e^{s_j})^p``;
    O(n log n) time, O(n) memory, all in log space (p up to 64 and |s| up to 1e4 in float32
    keep ``ln F_p`` finite). Explicit pairs: O(#pairs + n).

    Gradient (``u_j`` = the vector of pair terms ``t_ij`` of lower document ``j`` over its
    upper partners ``i``, ``‖u_j‖₁ = L_j``)::

        ∂F_p/∂s_d = p L_d^p − p w_d e^{−s_d} Σ_{j below d} L_j^{p−1} w_j e^{s_j}

    Curvature: ``hess="diag"`` is the exact Hessian diagonal
    ``p² L_d^p + p w_d e^{−s_d} Q_d + p(p−1) w_d² e^{−2s_d} Σ_{j below d} L_j^{p−2} w_j² e^{2s_j}``.
    ``hess="bound"`` is ``D = 2p · (p L_d^p + p w_d e^{−s_d} Q_d)`` (2p times the sum of the
    two gradient shares' magnitudes), a valid bound ``D ⪰ H``:
    ``H = Σ_j [p(p−1) L_j^{p−2} ∇L_j ∇L_j^T + p L_j^{p−1} ∇²L_j]`` with
    ``∇L_j = L_j e_j − u_j`` and ``∇²L_j = Σ_i t_ij (e_j − e_i)(e_j − e_i)^T``. Using
    ``(a − b)(a − b)^T ⪯ 2aa^T + 2bb^T`` and Cauchy–Schwarz
    ``u u^T ⪯ ‖u‖₁ diag(u)`` (``(x·u)² ≤ (Σu)(Σ u x²)`` for ``u ≥ 0``):
    ``∇L_j∇L_j^T ⪯ 2L_j² e_je_j^T + 2L_j diag(u_j)`` and
    ``∇²L_j ⪯ 2L_j e_je_j^T + 2 diag(u_j)``, hence
    ``H ⪯ 2p² Σ_j L_j^{p−1}(L_j e_je_j^T + diag(u_j)) = D``. For ``p = 1`` this is
    ``2·diag(H)``, RankBoost's bound; on the lower side it is exactly twice the diagonal
    for every ``p``. With ``log=True``: ``∇² ln F ⪯ ∇²F/F ⪯ D/F`` is returned.
    """

    def __init__(self, p: float = 2.0, *, log: bool = False, normalize: bool = False,
                 reduction: str = "sum"):
        super().__init__(log=log, normalize=normalize, reduction=reduction)
        self.p = _check_p(p)

    @property
    def _p(self) -> float:
        return self.p

    def extra_repr(self) -> str:
        return f"p={self.p}, " + super().extra_repr()
