r"""Metric-driven listwise losses: ApproxNDCG and NeuralNDCG (neural rankers; no ``grad_hess``).

* :class:`ApproxNDCGLoss` — Qin, Liu & Li (2010), "A general approximation framework for
  direct optimization of information retrieval measures": NDCG with each rank replaced by
  the smooth rank ``π̂_i = 1 + Σ_{j ≠ i} sigmoid(α (s_j − s_i))``. O(n²) time per query,
  computed in blocks of rows with a closed-form backward: O(n + block_pairs) memory.
* :class:`NeuralNDCGLoss` — Pobrotyn & Białobrzeski (2021), "NeuralNDCG: direct optimisation
  of a ranking metric via differentiable relaxation of sorting": NDCG of the labels sorted
  by NeuralSort's relaxed permutation matrix (Grover et al. 2019), made doubly stochastic by
  Sinkhorn scaling. O(n² · n_iter) time and O(n² · n_iter) memory per query (the scaling is
  differentiated through), in blocks of queries recomputed in the backward pass
  (checkpointing); a query needing more than ``max_bytes`` is refused with a ValueError.

Both take flat scores with :class:`~torchrankboost.Groups` or padded ``(B, L)`` with
``mask=``, and ``bind``; the per-query loss is ``−NDCG_q`` (0 for a query without a relevant
document, which ``reduction="mean"`` does not count).
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.elementwise import exp2, sigmoid
from ..groups import Groups
from ..pairs import Graded
from ._padded import PadLayout, pad_layout
from .base import BindState, Prepared, RankingLoss, check_gain_labels

__all__ = ["ApproxNDCGLoss", "NeuralNDCGLoss"]

#: the query length from which ApproxNDCG warns of its O(n²) time
APPROX_WARN_DOCS = 10_000


def _layout(g: Groups) -> PadLayout:
    """The ``(G, L)`` table of ``g`` (always: these losses cost O(L²) per query anyway)."""
    return pad_layout(g, 1 << 62, 1 << 62)


def _labels(loss: RankingLoss, inp: Prepared) -> Tensor:
    name = type(loss).__name__
    if inp.weights is not None:
        raise ValueError(f"{name} does not take document weights")
    if inp.labels is None or not isinstance(inp.pairs, Graded):
        raise ValueError(f"{name} is listwise: it takes labels, not pairs")
    return inp.labels


def _gains_idcg(lay: PadLayout, y: Tensor, powered: bool, k: Optional[int]):
    """``(gains (G, L) with 0 in the padding, idcg (G,))``: ``2^l − 1`` (or ``l``) and the
    ideal DCG (at ``k``) with discounts ``1 / log2(1 + rank)``."""
    gain = exp2(y) - 1.0 if powered else y
    g2d = lay.pad(gain, 0.0)
    ideal = torch.sort(g2d, dim=1, descending=True)[0]
    disc = _discounts(lay.L, y.dtype, y.device, k)
    return g2d, (ideal * disc).sum(1)


def _discounts(L: int, dtype, device, k: Optional[int] = None) -> Tensor:
    d = 1.0 / torch.log2(torch.arange(L, dtype=dtype, device=device) + 2.0)
    if k is not None:
        d[k:] = 0.0
    return d


# ============================================================================ ApproxNDCG
def _row_blocks(G: int, L: int, block_pairs: int):
    """``(q0, q1, r0, r1)``: queries × row chunks whose ``(b, c, L)`` blocks hold at most
    ``block_pairs`` entries (one row of one query at least)."""
    c = max(1, min(L, block_pairs // max(L, 1)))
    for r0 in range(0, L, c):
        r1 = min(r0 + c, L)
        b = max(1, block_pairs // max((r1 - r0) * L, 1))
        for q0 in range(0, G, b):
            yield q0, min(q0 + b, G), r0, r1


class _ApproxRanks(torch.autograd.Function):
    r"""``π̂ = 1/2 + Σ_j sigmoid(α (s_j − s_i))`` over the real ``j`` of the row (the ``j = i``
    term is ``1/2``), ``(G, L)``; blockwise forward and backward
    ``∂π̂_i/∂s_j = α σ'_ij`` (``j ≠ i``), ``∂π̂_i/∂s_i = −α Σ_{j≠i} σ'_ij``."""

    @staticmethod
    def forward(ctx, S, valid, alpha, block_pairs):
        G, L = S.shape
        pos = torch.empty_like(S)
        for q0, q1, r0, r1 in _row_blocks(G, L, block_pairs):
            sg = sigmoid(alpha * (S[q0:q1, None, :] - S[q0:q1, r0:r1, None]))
            if valid is not None:
                sg = sg * valid[q0:q1, None, :]
            pos[q0:q1, r0:r1] = 0.5 + sg.sum(2)
        ctx.save_for_backward(S, valid)
        ctx.args = (alpha, block_pairs)
        return pos

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gpos):
        S, valid = ctx.saved_tensors
        alpha, block_pairs = ctx.args
        G, L = S.shape
        grad = torch.zeros_like(S)
        for q0, q1, r0, r1 in _row_blocks(G, L, block_pairs):
            sg = sigmoid(alpha * (S[q0:q1, None, :] - S[q0:q1, r0:r1, None]))
            D = alpha * sg * (1.0 - sg)
            if valid is not None:
                D = D * valid[q0:q1, None, :]
            gr = gpos[q0:q1, r0:r1]
            grad[q0:q1] += (gr.unsqueeze(2) * D).sum(1)
            grad[q0:q1, r0:r1] -= gr * D.sum(2)
        return grad, None, None, None


class ApproxNDCGLoss(RankingLoss):
    r"""ApproxNDCG (Qin, Liu & Li, 2010): minus NDCG at smooth ranks, summed over queries.

    .. math::

        L_q = -\frac{1}{\mathrm{IDCG}_q} \sum_{i \in q}
              \frac{2^{l_i} - 1}{\log_2(1 + \hat\pi_i)}, \qquad
        \hat\pi_i = 1 + \sum_{j \in q, j \ne i} \sigma\big(\alpha (s_j - s_i)\big)

    with ``IDCG_q`` the ideal DCG over the whole list (no truncation). This is allRank's
    ``approxNDCGLoss(alpha=α)`` (which also clamps each sigmoid below at 1e-10, and returns
    minus the mean over all the lists of the batch: our ``"sum"`` divided by ``B``) and
    TF-Ranking's ``ApproxNDCGLoss`` with ``temperature = 1/α`` (TF-Ranking's default is
    ``temperature=0.1``, α = 10; ours is allRank's α = 1).

    **Cost.** O(n_q²) time per query (every pair enters every smooth rank); the ``(b, c, L)``
    blocks of sigmoids hold at most ``block_pairs`` entries, forward and backward (closed
    form, no autograd graph of the pairs), so memory is O(n + block_pairs). Binding a query
    of at least :data:`APPROX_WARN_DOCS` documents warns.

    Args:
        alpha: the sigmoid's scale α > 0 (larger: closer to the true ranks).
        block_pairs: entries per block (memory bound).
        reduction: ``"sum"``, ``"mean"`` over queries with a relevant document, ``"none"``.

    Shapes: ``scores``/``labels`` ``(n,)`` (or ``(B, L)`` with ``mask``); non-negative
    labels; a scalar or ``(G,)``. First-order autograd only; no ``grad_hess``.
    """

    def __init__(self, *, alpha: float = 1.0, block_pairs: int = 1 << 20,
                 reduction: str = "sum"):
        super().__init__(reduction=reduction)
        alpha = float(alpha)
        if not (0 < alpha < float("inf")):
            raise ValueError(f"alpha must be positive and finite, got {alpha}")
        if int(block_pairs) < 1:
            raise ValueError(f"block_pairs must be >= 1, got {block_pairs}")
        self.alpha = alpha
        self.block_pairs = int(block_pairs)

    def _bind_state(self, inp: Prepared) -> BindState:
        y = _labels(self, inp)
        check_gain_labels(y, type(self).__name__)
        g = inp.groups
        if g.num_docs and g.max_size >= APPROX_WARN_DOCS:
            warnings.warn(f"ApproxNDCGLoss: a query has {g.max_size:,} documents; ApproxNDCG "
                          f"costs O(n²) per query ({g.max_size ** 2:,} sigmoids every "
                          f"evaluation)", UserWarning, stacklevel=3)
        return BindState(labels=y, layout=_layout(g) if g.num_docs else None)

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        st = self._state(inp)
        dt = inp.scores.dtype
        if st.layout is None:
            z = inp.scores.new_zeros(inp.groups.num_groups)
            return z, z > 0
        lay = st.layout
        gains, idcg = st.cached(dt, lambda: _gains_idcg(lay, st.labels.to(dt), True, None))
        has = idcg > 0
        S = lay.pad(inp.scores, 0.0)
        pos = _ApproxRanks.apply(S, None if lay.mask is None else lay.mask.to(dt),
                                 self.alpha, self.block_pairs)
        dcg = (gains / torch.log2(1.0 + pos)).sum(1)
        ndcg = dcg / torch.where(has, idcg, torch.ones_like(idcg))
        return torch.where(has, -ndcg, torch.zeros_like(ndcg)), has

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, reduction={self.reduction!r}"


# ============================================================================ NeuralNDCG
def _sinkhorn(P: Tensor, pad: Optional[Tensor], tol: float, n_iter: int) -> Tensor:
    """Alternate column and row normalisation of ``(b, L, L)`` (sums clamped at 1e-10, as
    allRank), each query until its row and column sums are within ``tol`` of 1 or
    ``n_iter`` rounds (``n_iter`` rounds run, a converged query unchanged: no host read);
    padding rows/columns as allRank (1 on pad × pad, 0 across)."""
    if pad is not None:
        one = pad[:, :, None] | pad[:, None, :]
        both = pad[:, :, None] & pad[:, None, :]
        P = P.masked_fill(one, 0.0).masked_fill(both, 1.0)
    done = torch.zeros(P.shape[0], dtype=torch.bool, device=P.device)
    for _ in range(n_iter):
        Q = P / P.sum(1, keepdim=True).clamp_min(1e-10)
        Q = Q / Q.sum(2, keepdim=True).clamp_min(1e-10)
        P = torch.where(done[:, None, None], P, Q)
        with torch.no_grad():
            err = torch.maximum((P.sum(2) - 1).abs().amax(1), (P.sum(1) - 1).abs().amax(1))
            done = done | (err < tol)
    # no early exit once every query has converged: that test would read a value on the
    # host each round (a device synchronisation); the converged queries stay frozen, so
    # the result is the same
    if pad is not None:
        P = P.masked_fill(one, 0.0)
    return P


def _neural_dcg(S, pad, sizes, gains, disc, tau, tol, n_iter):
    """DCG of the labels sorted by the Sinkhorn-scaled NeuralSort matrix, ``(b,)``."""
    b, L = S.shape
    Sm = S if pad is None else S.masked_fill(pad, 0.0)
    A = (Sm[:, :, None] - Sm[:, None, :]).abs()
    if pad is not None:
        A = A.masked_fill(pad[:, :, None] | pad[:, None, :], 0.0)
    Bj = A.sum(2)                                               # Σ_k |s_j − s_k|, (b, L)
    i = torch.arange(L, device=S.device, dtype=S.dtype)
    scale = sizes.to(S.dtype)[:, None] - 1.0 - 2.0 * i          # n + 1 − 2 (i + 1)
    Pmax = scale[:, :, None] * Sm[:, None, :] - Bj[:, None, :]  # (b, position i, item j)
    if pad is not None:
        scale = torch.where(pad, torch.zeros_like(scale), scale)
        Pmax = scale[:, :, None] * Sm[:, None, :] - Bj[:, None, :]
        Pmax = Pmax.masked_fill(pad[:, :, None] | pad[:, None, :], float("-inf"))
        Pmax = Pmax.masked_fill(pad[:, :, None] & pad[:, None, :], 1.0)
    P = _sinkhorn(torch.softmax(Pmax / tau, -1), pad, tol, n_iter)
    return ((P @ gains.unsqueeze(2)).squeeze(2) * disc).sum(1)


class _Recomputed(torch.autograd.Function):
    """:func:`_neural_dcg` of one block that keeps nothing but its scores: the forward runs
    without a graph, the backward recomputes the block and differentiates it (a graph of the
    gradient is built when the caller asks for one, so it differentiates twice). Unlike
    ``torch.utils.checkpoint`` (whose non-reentrant mode measured 5x the block budget here
    with the Sinkhorn loop), peak memory is one block: about ``max_bytes``."""

    @staticmethod
    def forward(ctx, S, pad, sizes, gains, disc, tau, tol, n_iter):
        ctx.save_for_backward(S)
        ctx.rest = (pad, sizes, gains, disc, tau, tol, n_iter)
        with torch.no_grad():
            return _neural_dcg(S, pad, sizes, gains, disc, tau, tol, n_iter)

    @staticmethod
    def backward(ctx, grad_out):
        (S,) = ctx.saved_tensors
        with torch.enable_grad():
            twice = torch.is_grad_enabled()  # the caller differentiates the gradient again
            leaf = S if twice and S.requires_grad else S.detach().requires_grad_()
            out = _neural_dcg(leaf, *ctx.rest)
            (g,) = torch.autograd.grad(out, leaf, grad_out, create_graph=twice)
        return (g,) + (None,) * 7


class NeuralNDCGLoss(RankingLoss):
    r"""NeuralNDCG (Pobrotyn & Białobrzeski, 2021): minus NDCG@k of the labels sorted by a
    relaxed permutation matrix, summed over queries.

    .. math::

        \hat P_{i\cdot} = \mathrm{softmax}\Big(\frac{(n + 1 - 2i)\, s - A_s \mathbf 1}{\tau}\Big),
        \quad (A_s)_{jk} = |s_j - s_k|, \qquad
        L_q = -\frac{1}{\mathrm{IDCG@k}_q} \sum_{i \le k}
              \frac{[\mathrm{Sinkhorn}(\hat P)\, g]_i}{\log_2(1 + i)}

    (NeuralSort's row ``i`` is a softmax over the documents for rank ``i``; Sinkhorn scaling
    makes it doubly stochastic), gains ``g = 2^l − 1`` (``powered_relevancies``) or ``l``.
    Defaults are allRank's ``neuralNDCG``: ``temperature=1``, ``powered_relevancies=True``,
    ``k=None`` (the whole list), the deterministic variant (allRank's ``stochastic=False``;
    the Gumbel-sampled one is not offered), Sinkhorn ``tol=1e-6`` and ``n_iter=50``. allRank
    stops the Sinkhorn rounds when the whole batch has converged and divides by
    ``IDCG + 1e-10``; here each query stops on its own (so a query's loss does not depend
    on its batch) and a query without a relevant document counts 0. allRank returns minus
    the mean over queries with a relevant document: ``reduction="mean"`` here.

    **Cost.** O(n_q² · n_iter) time per query, and the autograd graph through the Sinkhorn
    rounds holds about ``(4 n_iter + 8) n_q²`` numbers per query. Queries are evaluated in
    blocks that fit ``max_bytes`` and recomputed in the backward pass (checkpointing), so
    peak memory stays near ``max_bytes``; a single query that needs more raises
    ``ValueError`` (lower ``n_iter``, or raise ``max_bytes``).

    Args:
        temperature: NeuralSort's τ > 0.
        powered_relevancies: gains ``2^l − 1`` (True) or ``l``.
        k: truncation rank (``None``: the whole list).
        n_iter: Sinkhorn rounds at most; ``tol``: their stopping tolerance.
        max_bytes: memory budget of one block (bytes).
        reduction: ``"sum"``, ``"mean"`` over queries with a relevant document, ``"none"``.
    """

    def __init__(self, *, temperature: float = 1.0, powered_relevancies: bool = True,
                 k: Optional[int] = None, n_iter: int = 50, tol: float = 1e-6,
                 max_bytes: int = 2 << 30, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        if not (float(temperature) > 0):
            raise ValueError(f"temperature must be positive, got {temperature}")
        if k is not None and int(k) < 1:
            raise ValueError(f"k must be >= 1 or None, got {k}")
        if int(n_iter) < 1:
            raise ValueError(f"n_iter must be >= 1, got {n_iter}")
        self.temperature = float(temperature)
        self.powered_relevancies = bool(powered_relevancies)
        self.k = None if k is None else int(k)
        self.n_iter = int(n_iter)
        self.tol = float(tol)
        self.max_bytes = int(max_bytes)

    def _query_bytes(self, L: int, itemsize: int) -> int:
        # measured: the differentiated Sinkhorn rounds hold ~14 (L, L) tensors per round
        return (14 * self.n_iter + 16) * L * L * itemsize

    def _bind_state(self, inp: Prepared) -> BindState:
        y = _labels(self, inp)
        if self.powered_relevancies:
            check_gain_labels(y, type(self).__name__)
        g = inp.groups
        return BindState(labels=y, layout=_layout(g) if g.num_docs else None)

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        st = self._state(inp)
        dt = inp.scores.dtype
        if st.layout is None:
            z = inp.scores.new_zeros(inp.groups.num_groups)
            return z, z > 0
        lay = st.layout
        need = self._query_bytes(lay.L, inp.scores.element_size())
        if need > self.max_bytes:
            raise ValueError(
                f"NeuralNDCGLoss: a query of {lay.L:,} documents needs ~{need / 2 ** 30:.2f} GiB "
                f"for its {lay.L}x{lay.L} Sinkhorn rounds (max_bytes={self.max_bytes:,}); lower "
                f"n_iter or raise max_bytes")
        gains, idcg = st.cached(dt, lambda: _gains_idcg(
            lay, st.labels.to(dt), self.powered_relevancies, self.k))
        disc = _discounts(lay.L, dt, inp.scores.device, self.k)
        has = idcg > 0
        S = lay.pad(inp.scores, 0.0)
        pad = None if lay.mask is None else ~lay.mask
        b = max(1, self.max_bytes // need)
        args = (self.temperature, self.tol, self.n_iter)
        parts = []
        for q0 in range(0, lay.G, b):
            q1 = min(q0 + b, lay.G)
            blk = (S[q0:q1], None if pad is None else pad[q0:q1], lay.sizes[q0:q1],
                   gains[q0:q1], disc)
            if torch.is_grad_enabled() and S.requires_grad:
                parts.append(_Recomputed.apply(*blk, *args))
            else:
                parts.append(_neural_dcg(*blk, *args))
        ndcg = torch.cat(parts) / torch.where(has, idcg, torch.ones_like(idcg))
        return torch.where(has, -ndcg, torch.zeros_like(ndcg)), has

    def extra_repr(self) -> str:
        return (f"temperature={self.temperature}, powered_relevancies="
                f"{self.powered_relevancies}, k={self.k}, n_iter={self.n_iter}, "
                f"reduction={self.reduction!r}")
