r"""The exact NDCG-weighted exponential pairwise loss (LambdaRank's weights, RankBoost's pair
function), in O(n log n) without pairs and without truncation.

Per query, with gains ``G = 2^y − 1`` and discounts ``D(r) = 1 / log2(1 + r)`` at the current
ranks (by decreasing score; ties by increasing label, then input order)::

    L_q = 1/Z_q · Σ_{y_i > y_j} w_i w_j |G_i − G_j| |D(r_i) − D(r_j)| e^{−σ (s_i − s_j)}

``|G_i − G_j| |D(r_i) − D(r_j)|`` is the |ΔDCG| of swapping ``i`` and ``j`` (Burges 2010,
LambdaRank/LambdaMART); ``Z_q`` the query's ideal DCG with ``normalize=True`` (the default:
then the weight is LambdaMART's |ΔNDCG|, every query weighs as in mean NDCG, and the loss is
invariant to the size of a query's gains — LightGBM's lambdarank normalises by the inverse
ideal DCG likewise), ``Z_q = 1`` otherwise.

The ranks are piecewise constant in the scores, so the weights are held fixed within an
evaluation (LambdaMART's convention): the gradient and Hessian are those of the exponential
pair loss with these weights. Computed by dominance sums over (label level × rank)
(:mod:`torchrankboost._pair_engine.lambdarank`): O(n log n + n K) time for ``K ≤ 64`` label
levels, O(n log n ⌈log2 K⌉) beyond, O(n) memory, every pair counted — where LightGBM
truncates lambdarank to the top 30 by default for speed.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.lambdarank import lambdarank_hvp, lambdarank_setup, lambdarank_terms
from ..pairs import Graded
from .base import BindState, Prepared, RankingLoss, check_gain_labels
from .listwise import PairGrad, per_query_scale

__all__ = ["LambdaRankExpLoss"]


class _Fn(torch.autograd.Function):
    """Per-query losses from one sweep; the gradient is kept from it."""

    @staticmethod
    def forward(ctx, scores, st, sigma):
        per, U, L = lambdarank_terms(scores.detach(), st, sigma)
        grad = (sigma * (L - U)).to(scores.dtype)
        ctx.save_for_backward(scores, grad)
        ctx.args = (st, sigma)
        return per.to(scores.dtype)

    @staticmethod
    def backward(ctx, gout):
        scores, grad = ctx.saved_tensors
        st, sigma = ctx.args
        return PairGrad.apply(scores, gout, grad, st.groups,
                              lambda s, u: lambdarank_hvp(s, st, sigma, u)), None, None


class LambdaRankExpLoss(RankingLoss):
    r"""LambdaRank's |ΔDCG| pair weights at the current ranks times the exponential pair
    loss ``e^{−σ (s_i − s_j)}``, summed over the preferred pairs of each query, exactly (no
    truncation) in O(n log n) (see the module docstring).

    Args:
        sigma: the scale σ > 0 of the score difference.
        normalize: divide each query by its ideal DCG (default ``True``: |ΔNDCG| weights).
        reduction: ``"sum"``, ``"mean"`` over queries with a pair, ``"none"``.

    Shapes: ``scores``/``labels`` ``(n,)`` with ``groups``, or ``(B, L)`` with ``mask``;
    optional document ``weights`` ``(n,)`` multiply a pair's weight by ``w_i w_j``. Graded
    labels only.

    ``grad_hess`` (weights at fixed ranks): with ``U_k`` the loss terms where ``k`` is the
    preferred document and ``L_k`` those where it is the other one, gradient
    ``σ (L_k − U_k)``, exact Hessian diagonal ``σ² (U_k + L_k)``, bound twice the diagonal
    (each pair's Hessian ``q [[1, −1], [−1, 1]]`` is below ``2q I``). Autograd gives the same
    gradient and works to second order.

    **Boosting.** The booster takes ``step="fixed"`` with it (``preferred_step``, under the
    default ``step="auto"``): LambdaMART's Newton leaf values times the learning rate. The
    value moves with the ranks (a better order puts the relevant documents where the discount
    differences are larger), so the surrogate step's test that the loss decreases would
    reject the first step.
    """

    preferred_step = "fixed"  # Booster(step="auto")

    def __init__(self, *, sigma: float = 1.0, normalize: bool = True, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        sigma = float(sigma)
        if not (0 < sigma < math.inf):
            raise ValueError(f"sigma must be positive and finite, got {sigma}")
        self.sigma = sigma
        self.normalize = bool(normalize)

    def _bind_state(self, inp: Prepared) -> BindState:
        name = type(self).__name__
        if not isinstance(inp.pairs, Graded):
            raise ValueError(f"{name} takes graded labels, not Bipartite or explicit pairs")
        if inp.labels is None:
            raise ValueError(f"{name} needs labels")
        check_gain_labels(inp.labels, name)
        st = lambdarank_setup(inp.labels, inp.groups, inp.weights, normalize=self.normalize)
        return BindState(setup=st, has=st.has, scale=per_query_scale(self, st.has))

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        st = self._state(inp)
        return _Fn.apply(inp.scores, st.setup, self.sigma), st.has

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One sweep for the per-query losses, the gradient and the curvature."""
        st = self._state(inp)
        s = inp.scores
        per, U, L = lambdarank_terms(s.detach(), st.setup, self.sigma)
        c = st.scale
        grad = (self.sigma * c) * (L - U)
        curv = (self.sigma ** 2 * c * (1.0 if hess == "diag" else 2.0)) * (U + L)
        dt = s.dtype
        return per.to(dt), st.has, grad.to(dt), curv.to(dt)

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        _, _, grad, curv = self._per_group_grad_hess(inp, hess)
        return grad, curv

    def extra_repr(self) -> str:
        return (f"sigma={self.sigma}, normalize={self.normalize}, "
                f"reduction={self.reduction!r}")
