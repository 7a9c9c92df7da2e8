r"""The listwise losses neural rankers expect, and RankNet, beside the boosting losses.

* :class:`ListNetLoss` — Cao et al. (2007): cross-entropy between the top-one probabilities
  of the labels and of the scores, per query. O(n).
* :class:`ListMLELoss` — Xia et al. (2008): the negative Plackett–Luce log-likelihood of the
  order given by the labels. One segmented sort and a reverse log-cum-sum-exp: O(n log n).
* :class:`RankNetLoss` — Burges et al. (2005): pairwise logistic loss over the preferred
  pairs. The logistic function does not factorise over a sort as the exponential loss does,
  so it costs O(Σ_q n_q²) time; pairs are generated in blocks of at most ``block_pairs``,
  so the memory is O(n + block_pairs), never the (B, L, L) tensor of padded
  implementations.

All three follow the library's loss contract (:mod:`torchrankboost.losses.base`): flat scores
plus :class:`~torchrankboost.Groups` (or padded ``(B, L)`` scores with a ``mask``),
``reduction`` ``"sum"`` / ``"mean"`` / ``"none"``, and a closed-form ``grad_hess`` with the
exact Hessian diagonal (``hess="diag"``) or a diagonal upper bound (``hess="bound"``).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from .._pair_engine.elementwise import exp2, sigmoid, softplus
from ..pairs import Bipartite, ExplicitPairs, Graded
from ..params import public_parameters
from . import _padded
from .base import BindState, Prepared, RankingLoss

__all__ = ["ListNetLoss", "ListMLELoss", "RankNetLoss"]

TARGETS = ("softmax", "gain")

# padded (G, L) tables (:mod:`._padded`) only while the padding stays within this factor of
# n (as the metrics' sort): memory O(n) either way
_PAD_FACTOR, _PAD_MIN = 4, 1 << 20


def _layout(g: Groups):
    """The padded layout of ``g`` while padding is cheap, else ``None``."""
    return _padded.pad_layout(g, _PAD_FACTOR, _PAD_MIN)


def _no_pairs_no_weights(loss: RankingLoss, inp: Prepared) -> Tensor:
    """The labels of a listwise loss (which takes no pairs and no weights), as given."""
    name = type(loss).__name__
    if not isinstance(inp.pairs, Graded):
        raise ValueError(f"{name} is listwise: it takes labels, not pairs")
    if inp.weights is not None:
        raise ValueError(f"{name} does not take document weights")
    if inp.labels is None:
        raise ValueError(f"{name} needs labels")
    return inp.labels


def per_query_scale(loss: RankingLoss, has: Tensor) -> float:
    """The factor the summed gradient gets under ``reduction="mean"``."""
    if loss.reduction == "mean":
        return 1.0 / max(int(has.sum()), 1)
    return 1.0


class _RepeatBind:
    """Mixin: an unbound call repeated with the same ``labels`` tensor (unchanged since: same
    version counter), the same :class:`Groups` object, default pairs, no weights or mask and
    the same options reuses the previous call's bound state (labels validated and targets
    built once), as a training loop over fixed batches does. Only the scores are checked
    again; anything else takes the ordinary path."""

    def forward(self, scores: Tensor, labels: Optional[Tensor] = None,
                groups: Optional[Groups] = None, *, pairs=None, weights: Optional[Tensor] = None,
                mask: Optional[Tensor] = None) -> Tensor:
        if pairs is None and weights is None and mask is None and isinstance(labels, Tensor):
            key = (labels, groups, labels._version, self._option_key())
            last = _LAST_BIND.get(self)
            if (last is not None and last[0][0] is labels and last[0][1] is groups
                    and last[0][2:] == key[2:]):
                return last[1].value(scores)
            inp = self._inputs(scores, labels, groups)
            bound = self._bound(inp)
            _LAST_BIND[self] = (key, bound)
            return bound._value(inp.scores)
        return super().forward(scores, labels, groups, pairs=pairs, weights=weights, mask=mask)

    def _option_key(self):
        names = _OPTION_NAMES.get(type(self))
        if names is None:
            names = _OPTION_NAMES[type(self)] = tuple(public_parameters(type(self)))
        return tuple(getattr(self, n) for n in names)


_LAST_BIND: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_OPTION_NAMES: dict = {}


# ============================================================================ ListNet
class ListNetLoss(_RepeatBind, RankingLoss):
    r"""ListNet's top-one cross-entropy (Cao et al., 2007), summed over queries.

    .. math::

        L_q = -\sum_{i \in q} P_i \log \sigma_i(s), \qquad
        \sigma_i(s) = \frac{e^{s_i}}{\sum_{j \in q} e^{s_j}}

    with target probabilities ``P`` from the labels: ``targets="softmax"`` (default,
    ``P = softmax(l)``, the paper's top-one probability with φ = exp) or ``"gain"``
    (``P ∝ 2^l − 1``; queries without a relevant document have no target and count 0).

    Args:
        targets: ``"softmax"`` or ``"gain"``.
        reduction: ``"sum"`` over queries, ``"mean"`` over queries with a target, ``"none"``.

    ``grad_hess``: gradient ``σ − P``; exact Hessian diagonal ``σ(1 − σ)``, bound ``σ``
    (the Hessian ``diag(σ) − σσᵀ`` is below ``diag(σ)``).

    Shapes: ``scores`` ``(n,)``, ``labels`` ``(n,)``; a scalar, or ``(G,)`` with
    ``reduction="none"``. No pairs, no document weights.
    """

    def __init__(self, *, targets: str = "softmax", reduction: str = "sum"):
        super().__init__(reduction=reduction)
        if targets not in TARGETS:
            raise ValueError(f"targets must be one of {TARGETS}, got {targets!r}")
        self.targets = targets

    def _bind_state(self, inp: Prepared) -> BindState:
        y = _no_pairs_no_weights(self, inp)
        if self.targets == "gain" and bool((y < 0).any()):
            raise ValueError("ListNetLoss(targets='gain') needs non-negative labels")
        return BindState(labels=y, groups=inp.groups)

    def _target(self, inp: Prepared) -> Tuple[Tensor, Tensor, Tensor]:
        """``(P, has, active)`` in the scores' dtype: the target probabilities, the queries
        with a target and their documents (1/0)."""
        st = self._state(inp)
        dt = inp.scores.dtype
        return st.cached(dt, lambda: self._build_target(st.labels.to(dt), st.groups))

    def _build_target(self, y: Tensor, g: Groups):
        if self.targets == "softmax":
            P, has = g.segment_softmax(y), g.sizes > 0
        else:
            # 2^l - 1 scaled by 2^-max(l) per query (the normalised target is unchanged,
            # and labels of 1024 and more do not overflow)
            top = g.broadcast(g.segment_max(y, empty=0.0))
            gain = exp2(y - top) - exp2(-top)
            tot = g.segment_sum(gain)
            has = tot > 0
            P = gain / g.broadcast(torch.where(has, tot, torch.ones_like(tot)))
        return P, has, g.broadcast(has).to(y.dtype)

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        g = inp.groups
        lay = _layout(g)
        if lay is not None:  # one (G, L) logsumexp, targets cached in the table
            st = self._state(inp)
            dt = inp.scores.dtype
            P, Psum, has = st.cached(("padded", dt), lambda: _padded.listnet_targets(
                lay, st.labels.to(dt), self.targets))
            return _padded.listnet_per_group(lay, inp.scores, P, Psum, has), has
        P, has, _ = self._target(inp)
        lse = g.segment_logsumexp(inp.scores)
        loss = g.segment_sum(P * (g.broadcast(lse) - inp.scores))
        return torch.where(has, loss, torch.zeros_like(loss)), has

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        P, has, active = self._target(inp)
        scale = per_query_scale(self, has)
        g = inp.groups
        sig = g.segment_softmax(inp.scores)
        grad = (sig - P) * active * scale
        curv = (sig * (1.0 - sig) if hess == "diag" else sig) * active * scale
        return grad, curv

    def extra_repr(self) -> str:
        return f"targets={self.targets!r}, reduction={self.reduction!r}"


# ============================================================================ ListMLE


def _suffix_logsumexp(x: Tensor, g: Groups) -> Tensor:
    """``log Σ_{j ≥ i in i's query} e^{x_j}`` per document. While padding is cheap the
    queries are laid out right-aligned in a ``(G, L)`` table, so a row's reverse
    ``torch.logcumsumexp`` from any real position only sees real documents (the pads on the
    left never enter a real sum: exact, and differentiable to any order); otherwise the
    segmented scan of :meth:`Groups.segment_logcumsumexp`."""
    G, L, n = g.num_groups, g.max_size, x.shape[0]
    if n == 0 or G * L > max(_PAD_FACTOR * n, _PAD_MIN):
        return g.segment_logcumsumexp(x, reverse=True)
    col = (L - g.sizes)[g.group_index] + g.position
    table = x.new_zeros((G, L)).index_put((g.group_index, col), x)
    return torch.logcumsumexp(table.flip(1), 1).flip(1)[g.group_index, col]


class ListMLELoss(_RepeatBind, RankingLoss):
    r"""ListMLE (Xia et al., 2008): the negative Plackett–Luce log-likelihood of the label
    order, summed over queries.

    .. math::

        L_q = \sum_{k=1}^{n_q} \Big(\log \sum_{j \ge k} e^{s_{\pi(j)}} - s_{\pi(k)}\Big)

    where ``π`` sorts the query's documents by decreasing label. ListMLE is not defined for
    tied labels (allRank breaks ties at random); here tied documents are ordered by
    decreasing score, the most likely of their orders under the model, which makes the loss
    deterministic and independent of the input order. Computed with one segmented sort and a reverse
    log-cum-sum-exp: O(n log n) time, O(n) memory.

    ``grad_hess``: with ``p_{mk} = exp(s_{π(m)} − LSE_k)`` for ``k ≤ m``, the gradient is
    ``Σ_k p_{mk} − 1``, the exact Hessian diagonal ``Σ_k p_{mk}(1 − p_{mk})``, the bound
    ``Σ_k p_{mk}``, all by forward log-cum-sum-exps. ``reduction="mean"`` averages over
    queries with at least two documents.
    """

    def __init__(self, *, reduction: str = "sum"):
        super().__init__(reduction=reduction)

    def _bind_state(self, inp: Prepared) -> BindState:
        y = _no_pairs_no_weights(self, inp)
        has = inp.groups.sizes > 1
        lev, top = _padded.label_ranks(y) if _layout(inp.groups) is not None else (None, 0.0)
        return BindState(labels=y, has=has, scale=per_query_scale(self, has), lev=lev, top=top)

    def _sorted(self, inp: Prepared) -> Tuple[Tensor, Tensor, Tensor]:
        """The label order (ties by decreasing score), the sorted scores and their suffix
        log-sum-exps."""
        st = self._state(inp)
        dt = inp.scores.dtype
        y = st.cached(dt, lambda: st.labels.to(dt))
        g = inp.groups
        by_score = g.argsort(inp.scores.detach(), descending=True, check_nan=False)
        perm = by_score[g.argsort(y[by_score], descending=True, check_nan=False)]
        sp = inp.scores[perm]
        return perm, sp, _suffix_logsumexp(sp, g)

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        lay = _layout(inp.groups)
        if lay is not None:  # one row sort and a row logcumsumexp (levels cached)
            st = self._state(inp)
            dt = inp.scores.dtype
            lev = st.cached(("levels", dt), lambda: _padded.listmle_levels(
                lay, st.lev, st.top, dt))
            return _padded.listmle_per_group(lay, inp.scores, *lev), st.has
        _, sp, lse = self._sorted(inp)
        return inp.groups.segment_sum(lse - sp), self._state(inp).has

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        return self._terms(inp, hess, *self._sorted(inp))

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One sort and scan for the value, the gradient and the curvature."""
        perm, sp, lse = self._sorted(inp)
        per = inp.groups.segment_sum(lse - sp)
        grad, curv = self._terms(inp, hess, perm, sp, lse)
        return per, self._state(inp).has, grad, curv

    def _terms(self, inp: Prepared, hess: str, perm: Tensor, sp: Tensor, lse: Tensor):
        g = inp.groups
        p1 = torch.exp(sp + g.segment_logcumsumexp(-lse))
        if hess == "diag":
            c = p1 - torch.exp(2.0 * sp + g.segment_logcumsumexp(-2.0 * lse))
        else:
            c = p1
        scale = self._state(inp).scale
        grad = torch.empty_like(sp)
        curv = torch.empty_like(sp)
        grad[perm] = (p1 - 1.0) * scale
        curv[perm] = c.clamp_min(0.0) * scale
        return grad, curv


# ============================================================================ RankNet
def doc_blocks(sizes_per_doc: Tensor, block_pairs: int):
    """Split the documents into ranges ``[a, b)`` whose pair rows hold at most
    ``block_pairs`` entries (a single longer row is a block of its own)."""
    cum = torch.cumsum(sizes_per_doc, 0)
    n = cum.shape[0]
    a = 0
    while a < n:
        base = int(cum[a - 1]) if a else 0
        b = int(torch.searchsorted(cum, base + block_pairs, right=True))
        b = max(b, a + 1)
        yield a, min(b, n)
        a = b


def pairs_in_block(groups: Groups, a: int, b: int, sizes_per_doc: Tensor,
                   total: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """All ``(i, j)`` with ``i`` in ``[a, b)`` and ``j`` in ``i``'s query (``j ≠ i`` is left
    to the label mask). ``total``: the number of pairs, when known (no host read)."""
    cnt = sizes_per_doc[a:b]
    dev = cnt.device
    if total is None:
        total = int(cnt.sum())
    i = torch.repeat_interleave(torch.arange(a, b, device=dev), cnt, output_size=total)
    first = torch.cumsum(cnt, 0) - cnt
    local = torch.arange(total, device=dev) - torch.repeat_interleave(first, cnt,
                                                                      output_size=total)
    return i, groups.doc_start[i] + local


#: the query length from which RankNet warns of its O(n_q²) cost (10⁸ candidate pairs a pass)
RANKNET_WARN_DOCS = 10_000


def _warn_quadratic(groups: Groups, labels: Tensor, pairs) -> None:
    """One ``UserWarning`` when the longest query has ``n ≥ RANKNET_WARN_DOCS`` documents:
    every evaluation of RankNet visits its ``n²`` candidate pairs, naming ``n`` and its
    preferred pairs (graded: ``(n² − Σ_l c_l²) / 2`` over the label counts ``c_l``)."""
    sizes = groups.sizes
    if sizes.numel() == 0 or int(sizes.max()) < RANKNET_WARN_DOCS:
        return
    q = int(sizes.argmax())
    a, b = int(groups.offsets[q]), int(groups.offsets[q + 1])
    y = labels[a:b]
    n = b - a
    if isinstance(pairs, Bipartite):
        pos = int((y > pairs.threshold).sum())
        count = pos * (n - pos)
    else:
        c = torch.unique(y, return_counts=True)[1].to(torch.float64)
        count = int((n * n - float((c * c).sum())) // 2)
    warnings.warn(
        f"RankNetLoss: query {q} has {n:,} documents and {count:,} preferred pairs; RankNet "
        f"costs O(n²) per query ({n * n:,} candidate pairs every evaluation, minutes on a "
        f"CPU); ExponentialPairwiseLoss or PairwiseHingeLoss are O(n log n)",
        UserWarning, stacklevel=2)


class _RankNetPairs:
    """The preferred pairs of a batch with their weights ``c`` (``(i, j, c)`` triples),
    produced block by block. Score independent, so a bound loss keeps them: when all the
    candidate pairs fit in one block (``Σ_q n_q² ≤ block_pairs``, or an explicit list) the
    triples are built once per dtype and reused; otherwise each call regenerates the
    blocks (memory O(n + block_pairs) either way)."""

    def __init__(self, inp: Prepared, block_pairs: int):
        self.groups = inp.groups
        self.labels = inp.labels
        self.weights = inp.weights
        self.block_pairs = block_pairs
        self.pairs = inp.pairs
        self.explicit = isinstance(self.pairs, ExplicitPairs)
        if not self.explicit and inp.labels is None:
            raise ValueError("RankNetLoss needs labels (or ExplicitPairs)")
        sizes = self.groups.sizes
        self.keep = self.explicit or int((sizes * sizes).sum()) <= block_pairs
        self._kept = {}
        self.plan = None
        if not self.explicit:
            _warn_quadratic(self.groups, self.labels, self.pairs)
            lay = _layout(self.groups)
            if lay is not None:  # (G, L) tables, upper triangles of label-sorted queries
                y = self.labels
                if isinstance(self.pairs, Bipartite):
                    y = (y > self.pairs.threshold).to(torch.float64)
                self.plan = _padded.RankNetPlan(lay, y, self.weights, block_pairs)

    def _weight(self, i: Tensor, j: Tensor, base: Optional[Tensor], dtype) -> Tensor:
        w = torch.ones(i.shape[0], dtype=dtype, device=i.device) if base is None else base.to(dtype)
        if self.weights is not None:
            dw = self.weights.to(dtype)
            w = w * dw[i] * dw[j]
        return w

    def _generate(self, dtype):
        if self.explicit:
            p = self.pairs
            yield p.hi, p.lo, self._weight(p.hi, p.lo, p.weight, dtype)
            return
        g = self.groups
        y = self.labels
        per_doc = g.sizes[g.group_index]
        for a, b in doc_blocks(per_doc, self.block_pairs):
            i, j = pairs_in_block(g, a, b, per_doc)
            if isinstance(self.pairs, Bipartite):
                t = self.pairs.threshold
                keep = (y[i] > t) & (y[j] <= t)
            else:
                keep = y[i] > y[j]
            i, j = i[keep], j[keep]
            yield i, j, self._weight(i, j, None, dtype)

    def blocks(self, dtype):
        """The ``(i, j, c)`` blocks, ``c`` in ``dtype``."""
        if not self.keep:
            return self._generate(dtype)
        kept = self._kept.get(dtype)
        if kept is None:
            kept = self._kept[dtype] = list(self._generate(dtype))
        return kept


def _ranknet_terms(s: Tensor, rp: _RankNetPairs, sigma: float, need_hess: bool):
    """Per-query losses ``(G,)``, per-document gradient and Hessian diagonal of the summed
    loss ``Σ c · softplus(σ (s_j − s_i))`` (``i`` preferred), and whether a query has pairs."""
    if rp.plan is not None:
        loss, grad, hdiag = _padded.ranknet_terms(rp.plan, s, sigma, need_hess)
        return loss, grad, hdiag, rp.plan.has
    s = s.detach()
    g = rp.groups
    gi = g.group_index
    loss = torch.zeros(g.num_groups, dtype=s.dtype, device=s.device)
    grad = torch.zeros_like(s)
    hdiag = torch.zeros_like(s) if need_hess else None
    npairs = torch.zeros(g.num_groups, dtype=torch.long, device=s.device)
    logistic_pair_sums(s, gi, rp.blocks(s.dtype), sigma, loss, grad, hdiag, npairs)
    return loss, grad, hdiag, npairs > 0


def logistic_pair_sums(s: Tensor, gi: Tensor, blocks, sigma: float, loss: Tensor, grad: Tensor,
                       hdiag: Optional[Tensor], npairs: Tensor) -> None:
    """Add, for every block ``(i, j, c)`` of pairs (``i`` preferred, weight ``c``), the pair
    losses ``c · softplus(σ (s_j − s_i))`` to ``loss`` (per query ``gi``), their gradient to
    ``grad``, their Hessian diagonal to ``hdiag`` (when not ``None``) and their count to
    ``npairs``, in place (RankNet's and LambdaLoss's pair sums)."""
    for blk in blocks:  # (i, j, c), or (i, j, c, keep): candidates, only `keep` are pairs
        i, j, c = blk[:3]
        keep = blk[3] if len(blk) > 3 else None
        z = sigma * (s[j] - s[i])
        loss.index_add_(0, gi[i], c * softplus(z))
        npairs.index_add_(0, gi[i], torch.ones_like(i) if keep is None else keep.to(i.dtype))
        p = sigmoid(z) * c * sigma
        grad.index_add_(0, i, -p)
        grad.index_add_(0, j, p)
        if hdiag is not None:
            q = sigma * p * sigmoid(-z)
            hdiag.index_add_(0, i, q)
            hdiag.index_add_(0, j, q)


def _ranknet_hvp(s: Tensor, rp: _RankNetPairs, sigma: float, u: Tensor) -> Tensor:
    """``H u`` for the Hessian of the summed loss: each pair adds ``q (u_i − u_j)`` at ``i``
    and its negative at ``j``, ``q = σ² c p (1 − p)``."""
    if rp.plan is not None:
        return _padded.ranknet_hvp(rp.plan, s, sigma, u)
    s = s.detach()
    out = torch.zeros_like(s)
    for i, j, c in rp.blocks(s.dtype):
        z = sigma * (s[j] - s[i])
        d = (sigma * sigma) * c * sigmoid(z) * sigmoid(-z) * (u[i] - u[j])
        out.index_add_(0, i, d)
        out.index_add_(0, j, -d)
    return out


class _RankNetFunction(torch.autograd.Function):
    """Per-query losses; the gradient is computed in the same blockwise pass."""

    @staticmethod
    def forward(ctx, scores, rp, sigma):
        loss, grad, _, has = _ranknet_terms(scores, rp, sigma, need_hess=False)
        ctx.save_for_backward(scores, grad)
        ctx.args = (rp, sigma)
        ctx.mark_non_differentiable(has)
        return loss, has

    @staticmethod
    def backward(ctx, gout, _ghas):
        scores, grad = ctx.saved_tensors
        rp, sigma = ctx.args
        return PairGrad.apply(scores, gout, grad, rp.groups,
                              lambda s, u: _ranknet_hvp(s, rp, sigma, u)), None, None


class PairGrad(torch.autograd.Function):
    """``grad_i · gout[q(i)]`` of a pair loss whose gradient ``grad`` came from its own pass,
    differentiable once more through ``hvp(scores, u) -> H u`` (the summed loss's Hessian), so
    autograd Hessians and ``gradgradcheck`` work (RankNet, LambdaLoss, LambdaRankExp)."""

    @staticmethod
    def forward(ctx, scores, gout, grad, groups, hvp):
        gi = groups.group_index
        ctx.save_for_backward(scores, gout, grad, gi)
        ctx.args = (groups, hvp)
        return grad * gout[gi]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, v):
        scores, gout, grad, gi = ctx.saved_tensors
        groups, hvp = ctx.args
        d_scores = hvp(scores.detach(), v * gout[gi]).to(scores.dtype)
        return d_scores, groups.segment_sum(v * grad), None, None, None


class RankNetLoss(_RepeatBind, RankingLoss):
    r"""RankNet's pairwise logistic loss (Burges et al., 2005), summed over preferred pairs.

    .. math::

        L = \sum_q \sum_{(i, j) \in P_q} c_{ij}\, \log\big(1 + e^{-\sigma (s_i - s_j)}\big)

    over the pairs of :mod:`torchrankboost.pairs` (graded labels by default, ``Bipartite``
    or ``ExplicitPairs``), ``c_ij = weights[i] · weights[j]`` (times the explicit pair weight).

    **Cost.** The logistic loss has no sort/prefix factorisation, so label-induced pairs cost
    O(Σ_q n_q²) time (binding labels whose longest query has at least
    :data:`RANKNET_WARN_DOCS` documents warns, naming its size and pair count). They are generated ``block_pairs`` candidate pairs at a time, so the
    memory is O(n + block_pairs) whatever the query lengths; explicit pairs cost O(#pairs).
    Use :class:`~torchrankboost.ExponentialPairwiseLoss` for an O(n log n) pairwise loss.

    Args:
        sigma: the logistic scale σ > 0.
        block_pairs: candidate pairs per block (memory bound).
        reduction: ``"sum"``, ``"mean"`` over queries with a pair, ``"none"``.

    ``grad_hess``: exact gradient; Hessian diagonal ``Σ σ² c p (1 − p)`` with
    ``p = sigmoid(σ (s_j − s_i))``; bound ``σ² c / 2`` per pair and endpoint (a pair's
    Hessian ``q [[1, −1], [−1, 1]]`` with ``q ≤ σ² c / 4`` has eigenvalue ``2q``). Autograd works to second
    order (the gradient comes from the forward pass, Hessian-vector products from one more
    blockwise pass), so ``torch.autograd.functional.hessian`` and ``gradgradcheck`` work.
    """

    def __init__(self, *, sigma: float = 1.0, block_pairs: int = 1 << 20,
                 reduction: str = "sum"):
        super().__init__(reduction=reduction)
        sigma = float(sigma)
        if not (sigma > 0 and sigma < float("inf")):
            raise ValueError(f"sigma must be positive and finite, got {sigma}")
        if int(block_pairs) < 1:
            raise ValueError(f"block_pairs must be >= 1, got {block_pairs}")
        self.sigma = sigma
        self.block_pairs = int(block_pairs)

    def _bind_state(self, inp: Prepared) -> BindState:
        return BindState(pairs=_RankNetPairs(inp, self.block_pairs))

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        return _RankNetFunction.apply(inp.scores, self._state(inp).pairs, self.sigma)

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        """One blockwise pass for the per-query losses, the gradient and the diagonal (the
        bound does not depend on the scores: computed once per bound state)."""
        st = self._state(inp)
        loss, grad, hdiag, has = _ranknet_terms(inp.scores, st.pairs, self.sigma,
                                                need_hess=hess == "diag")
        if hess == "bound":
            hdiag = self._degree_bound(st, inp.scores.dtype)
        scale = per_query_scale(self, has)
        return loss, has, grad * scale, hdiag * scale

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        _, _, grad, hdiag = self._per_group_grad_hess(inp, hess)
        return grad, hdiag

    def _degree_bound(self, st: BindState, dtype) -> Tensor:
        """``σ² c / 2`` summed over each document's pairs, ``(n,)`` (score independent)."""
        def build():
            rp = st.pairs
            if rp.plan is not None:
                return _padded.ranknet_bound(rp.plan, self.sigma, dtype)
            out = torch.zeros(rp.groups.num_docs, dtype=dtype, device=rp.groups.device)
            for i, j, c in rp.blocks(dtype):
                q = c * (self.sigma ** 2 / 2.0)
                out.index_add_(0, i, q)
                out.index_add_(0, j, q)
            return out
        return st.cached(("bound", dtype), build)

    def extra_repr(self) -> str:
        return f"sigma={self.sigma}, reduction={self.reduction!r}"
