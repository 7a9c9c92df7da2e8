r"""LambdaLoss (Wang, Li, Golbandi, Bendersky & Najork, CIKM 2018): the logistic pair loss
weighted by a ranking metric's swap terms at the current ranks, as allRank's ``lambdaLoss``.

Per query, with the documents at their current ranks ``r`` (by decreasing score; ties by
increasing label, then input order), gains ``G_i = (2^{y_i} − 1) / maxDCG@k`` and
``D(r) = log2(1 + r)``::

    L_q = Σ_{(i, j) ∈ P_q, r_i ≤ k, r_j ≤ k} c_ij · −log_b σ(σ_s (s_i − s_j)),
    c_ij = w_i w_j · ρ_ij

over the pairs ``P_q = {y_i > y_j}`` (all ordered pairs ``i, j`` — ``i = j`` included —
for NDCG-Loss1), with the weighting scheme ``ρ``:

==============  ==========================================================================
``None``        1 (RankNet's pairs)
``ndcgLoss1``   ``G_i / D(r_i)``
``ndcgLoss2``   ``|1/D(|r_i − r_j|) − 1/D(|r_i − r_j| + 1)| · |G_i − G_j|``
``lambdaRank``  ``|1/D(r_i) − 1/D(r_j)| · |G_i − G_j|``
``ndcgLoss2++`` ``μ · ndcgLoss2 + lambdaRank`` (the paper's recommendation; the default)
==============  ==========================================================================

The weights depend on the ranks only, which are piecewise constant in the scores: the
gradient and the Hessian hold them fixed (as allRank's autograd does and LambdaMART does).

**Cost.** The logistic pair function has no prefix factorisation and the weights depend on
both ranks, so a query costs O(min(n_q, k)²) per evaluation (truncation ``k`` keeps only the
documents ranked in the top ``k``: O(Σ_q min(n_q, k)²)). Pairs are generated
``block_pairs`` candidates at a time (as :class:`~torchrankboost.RankNetLoss`): memory
O(n + block_pairs), never the ``(B, L, L)`` tensors of the padded implementation.

**Conventions against allRank's** ``lambdaLoss(y_pred, y_true, eps=1e-10,
padded_value_indicator=-1, weighing_scheme, k, sigma, mu, reduction, reduction_log)``:
the values are equal (tested to 1e-10) once these are matched —

* padding: allRank marks padded slots by the label ``-1``; here padded ``(B, L)`` input
  takes ``mask=`` (or flat scores with ``groups``), and negative labels are refused;
* ``eps``: allRank clamps ``sigmoid(·)`` and ``sigmoid(·)^ρ`` at ``1e-10`` and the ideal DCG
  at ``1e-10``; here the pair loss is the exact ``ρ · softplus(−σ_s (s_i − s_j)) / ln b``
  (equal while ``σ_s |s_i − s_j| ≲ 23`` and ``ρ ≤ 1``), and a query of zero ideal DCG has
  zero gains;
* log base: ``log="binary"`` (allRank's default ``reduction_log``) or ``"natural"``;
* reduction: allRank's ``"sum"`` sums over all pairs of the batch (equal to ``"sum"``
  here); its ``"mean"`` averages over *pairs*, here ``"mean"`` averages the per-query
  losses over the queries that have a pair;
* ties in the scores: allRank's ``torch.sort`` orders them arbitrarily; here tied documents
  are ranked pessimistically (lower label first), so the loss does not depend on the
  input order;
* scheme names: allRank's ``"ndcgLoss1_scheme"`` etc. are ``"ndcgLoss1"`` etc. here, its
  ``weighing_scheme=None`` is ``scheme=None``.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.elementwise import exp2, sigmoid
from .._pair_engine.lambdarank import current_ranks, ideal_dcg
from .._pair_engine.levels import dense_levels
from ..groups import Groups
from ..pairs import Graded
from .base import BindState, Prepared, RankingLoss, check_gain_labels
from .listwise import (PairGrad, doc_blocks, logistic_pair_sums, pairs_in_block,
                       per_query_scale)

__all__ = ["LambdaLoss", "LAMBDA_SCHEMES"]

F64 = torch.float64
LAMBDA_SCHEMES = (None, "ndcgLoss1", "ndcgLoss2", "ndcgLoss2++", "lambdaRank")
_LOGS = {"binary": 1.0 / math.log(2.0), "natural": 1.0}


def _inv_log2p(r: Tensor) -> Tensor:
    """``1 / log2(1 + r)``."""
    return 1.0 / torch.log2(1.0 + r)


def scheme_weights(scheme: Optional[str], mu: float, ri: Tensor, rj: Tensor, Gi: Tensor,
                   Gj: Tensor) -> Tensor:
    """The weighting scheme ``ρ_ij`` of the pairs ``(i, j)`` from their ranks ``r``
    (1-based) and normalised gains ``G`` (all float64, one entry per pair)."""
    if scheme is None:
        return torch.ones_like(Gi)
    if scheme == "ndcgLoss1":
        return Gi * _inv_log2p(ri)
    dG = (Gi - Gj).abs()
    lam = (_inv_log2p(ri) - _inv_log2p(rj)).abs() * dG
    if scheme == "lambdaRank":
        return lam
    d = (ri - rj).abs()
    n2 = (_inv_log2p(d) - _inv_log2p(d + 1.0)).abs() * dG
    return n2 if scheme == "ndcgLoss2" else mu * n2 + lam


class _PairPlan:
    """The score-independent layout of LambdaLoss's pairs, built once at bind time (the
    host reads happen there, so an evaluation reads nothing on the host): the documents
    by level (:func:`~torchrankboost._pair_engine.lambdarank.rank_order`'s start), and
    with ``k`` the flat slots of the top ``k`` ranks of each query and the groups of the
    kept documents; the candidate blocks ``(a, b, pairs)`` over those groups; when every
    candidate fits in one block, the preferred pairs themselves."""

    def __init__(self, loss: "LambdaLoss", st: BindState):
        g = st.groups
        self.lev_order = torch.argsort(st.lev, stable=True)
        self.top_slots = None
        sub = g
        if loss.k is not None:
            pos = g.position.to(st.lev.device)
            self.top_slots = torch.nonzero(pos < loss.k).flatten()
            sub = Groups.from_sizes(torch.clamp(g.sizes, max=loss.k)).fix_sizes()
        self.sub = sub
        per_doc = sub.sizes[sub.group_index]
        cum = torch.cumsum(per_doc, 0).tolist()
        self.blocks = [(a, b, cum[b - 1] - (cum[a - 1] if a else 0))
                       for a, b in doc_blocks(per_doc, loss.block_pairs)]
        self.per_doc = per_doc
        self.pairs = None
        if len(self.blocks) == 1 and self.top_slots is None:  # the preferred pairs, once
            a, b, m = self.blocks[0]
            i, j = pairs_in_block(sub, a, b, per_doc, m)
            keep = (i != j) if loss.scheme == "ndcgLoss1" else st.labels[i] > st.labels[j]
            self.pairs = (i[keep], j[keep])


def _plan(loss: "LambdaLoss", st: BindState) -> _PairPlan:
    plan = getattr(st, "plan", None)
    if plan is None:
        plan = st.plan = _PairPlan(loss, st)
    return plan


class _LambdaPairs:
    """The pairs of one evaluation and their weights ``c`` at given scores, in blocks of at
    most ``block_pairs`` candidates; ``diag`` the ``(n,)`` weights of the ``(i, i)`` pairs
    of NDCG-Loss1 (a constant term of the value), else ``None``. No host read: the layout
    is the bound :class:`_PairPlan`'s (candidates that are no pair get weight 0 rather
    than being compacted away)."""

    def __init__(self, loss: "LambdaLoss", st: BindState, s: Tensor):
        self.loss, self.st = loss, st
        self.plan = plan = _plan(loss, st)
        g = st.groups
        self.rank = current_ranks(s.detach(), st.lev, g, plan.lev_order)
        self.docs = None
        if plan.top_slots is not None:  # the top-k documents of each query, in index order
            ranked = torch.empty_like(plan.lev_order)
            ranked[(self.rank - 1).to(torch.int64) + g.doc_start.to(ranked.device)] = \
                torch.arange(g.num_docs, device=ranked.device)
            self.docs = torch.sort(ranked.index_select(0, plan.top_slots))[0]
        self.diag = None
        if loss.scheme == "ndcgLoss1":
            c = st.gain * _inv_log2p(self.rank) * loss._log_factor
            if st.weights is not None:
                c = c * st.weights * st.weights
            if self.docs is not None:
                c = torch.zeros_like(c).index_copy_(0, self.docs, c[self.docs])
            self.diag = c

    def blocks(self):
        """``(i, j, c)`` triples in document indices, ``c`` float64."""
        loss, st, plan = self.loss, self.st, self.plan
        if plan.pairs is not None:
            yield self._weighted(*plan.pairs, None)
            return
        for a, b, m in plan.blocks:
            i, j = pairs_in_block(plan.sub, a, b, plan.per_doc, m)
            if self.docs is not None:
                i, j = self.docs[i], self.docs[j]
            keep = (i != j) if loss.scheme == "ndcgLoss1" else st.labels[i] > st.labels[j]
            yield self._weighted(i, j, keep)

    def _weighted(self, i: Tensor, j: Tensor, keep: Optional[Tensor]):
        loss, st = self.loss, self.st
        c = scheme_weights(loss.scheme, loss.mu, self.rank[i], self.rank[j],
                           st.gain[i], st.gain[j]) * loss._log_factor
        if st.weights is not None:
            c = c * st.weights[i] * st.weights[j]
        if keep is not None:
            c = torch.where(keep, c, torch.zeros_like(c))
        return i, j, c, keep


def _terms(s: Tensor, lp: _LambdaPairs, sigma: float, need_hess: bool):
    """Per-query losses ``(G,)``, gradient and Hessian diagonal (float64) of
    ``Σ c · softplus(σ (s_j − s_i))`` and whether each query has a pair."""
    g = lp.st.groups
    gi = g.group_index
    x = s.detach().to(F64)
    loss = torch.zeros(g.num_groups, dtype=F64, device=s.device)
    grad = torch.zeros_like(x)
    hdiag = torch.zeros_like(x) if need_hess else None
    npairs = torch.zeros(g.num_groups, dtype=torch.long, device=s.device)
    if lp.diag is not None:
        loss.index_add_(0, gi, lp.diag * math.log(2.0))
        npairs.index_add_(0, gi, (lp.rank <= (lp.loss.k or math.inf)).to(torch.long))
    logistic_pair_sums(x, gi, lp.blocks(), sigma, loss, grad, hdiag, npairs)
    return loss, grad, hdiag, npairs > 0


def _hvp(s: Tensor, lp: _LambdaPairs, sigma: float, u: Tensor) -> Tensor:
    """``H u`` (float64): each pair adds ``q (u_i − u_j)`` at ``i`` and its negative at
    ``j``, ``q = σ² c p (1 − p)``."""
    x = s.detach().to(F64)
    u = u.to(F64)
    out = torch.zeros_like(x)
    for i, j, c, _ in lp.blocks():
        z = sigma * (x[j] - x[i])
        d = (sigma * sigma) * c * sigmoid(z) * sigmoid(-z) * (u[i] - u[j])
        out.index_add_(0, i, d)
        out.index_add_(0, j, -d)
    return out


class _LambdaFunction(torch.autograd.Function):
    """Per-query losses; the gradient comes from the same blockwise pass."""

    @staticmethod
    def forward(ctx, scores, lp, sigma):
        loss, grad, _, has = _terms(scores, lp, sigma, need_hess=False)
        grad = grad.to(scores.dtype)
        ctx.save_for_backward(scores, grad)
        ctx.args = (lp, sigma)
        ctx.mark_non_differentiable(has)
        return loss.to(scores.dtype), has

    @staticmethod
    def backward(ctx, gout, _ghas):
        scores, grad = ctx.saved_tensors
        lp, sigma = ctx.args
        return PairGrad.apply(scores, gout, grad, lp.st.groups,
                              lambda s, u: _hvp(s, lp, sigma, u)), None, None


class LambdaLoss(RankingLoss):
    r"""LambdaLoss (Wang et al., CIKM 2018) as allRank's ``lambdaLoss``: the logistic pair
    loss weighted by a metric-driven scheme at the current ranks (see the module docstring
    for the formula, the schemes and the conventions that differ from allRank).

    Args:
        scheme: ``"ndcgLoss2++"`` (default), ``"ndcgLoss2"``, ``"ndcgLoss1"``,
            ``"lambdaRank"`` or ``None`` (weight 1).
        sigma: the logistic scale σ > 0.
        mu: NDCG-Loss2++'s weight of the NDCG-Loss2 term (allRank's default 10).
        k: truncation: only pairs of documents both ranked in the top ``k`` count, and the
            ideal DCG is taken at ``k`` (``None``: no truncation).
        log: ``"binary"`` (allRank's default) or ``"natural"`` logarithm of the sigmoid.
        block_pairs: candidate pairs per block (memory bound).
        reduction: ``"sum"``, ``"mean"`` over queries with a pair, ``"none"``.

    Shapes: ``scores``/``labels`` ``(n,)`` with ``groups``, or ``(B, L)`` with ``mask``;
    optional document ``weights`` ``(n,)`` multiply a pair's weight by ``w_i w_j``. Graded
    labels only (no ``Bipartite``/explicit pairs).

    ``grad_hess`` (weights at fixed ranks): exact gradient; Hessian diagonal
    ``Σ σ² c p (1 − p)``, ``p = sigmoid(σ (s_j − s_i))``; bound ``σ² c / 2`` per pair and
    endpoint. Autograd works to second order (Hessian-vector products by one more pass).
    The booster takes ``step="fixed"`` with it (``preferred_step``, under ``step="auto"``),
    as with :class:`~torchrankboost.LambdaRankExpLoss`: the weights move with the ranks.
    """

    preferred_step = "fixed"  # Booster(step="auto"): LambdaMART's Newton leaf values

    def __init__(self, *, scheme: Optional[str] = "ndcgLoss2++", sigma: float = 1.0,
                 mu: float = 10.0, k: Optional[int] = None, log: str = "binary",
                 block_pairs: int = 1 << 20, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        if scheme not in LAMBDA_SCHEMES:
            raise ValueError(f"scheme must be one of {LAMBDA_SCHEMES}, got {scheme!r}")
        sigma, mu = float(sigma), float(mu)
        if not (0 < sigma < math.inf):
            raise ValueError(f"sigma must be positive and finite, got {sigma}")
        if not (0 <= mu < math.inf):
            raise ValueError(f"mu must be finite and >= 0, got {mu}")
        if k is not None and (isinstance(k, bool) or int(k) != k or int(k) < 1):
            raise ValueError(f"k must be a positive integer or None, got {k!r}")
        if log not in _LOGS:
            raise ValueError(f"log must be 'binary' or 'natural', got {log!r}")
        if int(block_pairs) < 1:
            raise ValueError(f"block_pairs must be >= 1, got {block_pairs}")
        self.scheme, self.sigma, self.mu = scheme, sigma, mu
        self.k = None if k is None else int(k)
        self.log = log
        self.block_pairs = int(block_pairs)

    @property
    def _log_factor(self) -> float:
        return _LOGS[self.log]

    def _bind_state(self, inp: Prepared) -> BindState:
        name = type(self).__name__
        if not isinstance(inp.pairs, Graded):
            raise ValueError(f"{name} takes graded labels, not Bipartite or explicit pairs")
        if inp.labels is None:
            raise ValueError(f"{name} needs labels")
        check_gain_labels(inp.labels, name)
        g = inp.groups
        y = inp.labels.to(F64)
        lev, _ = dense_levels(inp.labels)
        gain = exp2(y) - 1.0
        z = ideal_dcg(gain, g, self.k)
        inv = torch.where(z > 0, 1.0 / torch.where(z > 0, z, torch.ones_like(z)),
                          torch.zeros_like(z))
        w = None if inp.weights is None else inp.weights.to(F64)
        return BindState(groups=g, labels=y, lev=lev, gain=gain * g.broadcast(inv),
                         weights=w)

    def _bound(self, inp: Prepared, **options):
        bound = super()._bound(inp, **options)
        _plan(self, bound.prepared_at(None).state)  # the pair layout, read once at bind
        return bound

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        st = self._state(inp)
        lp = _LambdaPairs(self, st, inp.scores)
        return _LambdaFunction.apply(inp.scores, lp, self.sigma)

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One blockwise pass for the per-query losses, the gradient and the curvature."""
        st = self._state(inp)
        s = inp.scores
        lp = _LambdaPairs(self, st, s)
        loss, grad, hdiag, has = _terms(s, lp, self.sigma, need_hess=hess == "diag")
        if hess == "bound":
            hdiag = torch.zeros_like(grad)
            for i, j, c, _ in lp.blocks():
                q = c * (self.sigma ** 2 / 2.0)
                hdiag.index_add_(0, i, q)
                hdiag.index_add_(0, j, q)
        scale = per_query_scale(self, has)
        dt = s.dtype
        return loss.to(dt), has, (grad * scale).to(dt), (hdiag * scale).to(dt)

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        _, _, grad, hdiag = self._per_group_grad_hess(inp, hess)
        return grad, hdiag

    def extra_repr(self) -> str:
        k = "" if self.k is None else f", k={self.k}"
        return (f"scheme={self.scheme!r}, sigma={self.sigma}, mu={self.mu}{k}, "
                f"log={self.log!r}, reduction={self.reduction!r}")
