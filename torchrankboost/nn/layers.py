r"""The building blocks of the neural rankers: padded query batches, feature normalisation
stored in the model, and the self-attention block of the listwise Transformer.

**Batches.** The library's batches are flat: ``X`` ``(n, F)`` with
:class:`~torchrankboost.Groups`. A context-aware model sees each query as a sequence:
:func:`pad_queries` lays the flat batch out as ``(G, L, F)`` with a ``(G, L)`` boolean mask
(``L`` the longest query), :func:`unpad_scores` takes the ``(G, L)`` scores back to ``(n,)``.
Both read nothing on the host once the groups' sizes are known
(:meth:`~torchrankboost.Groups.fix_sizes`).

**Normalisation** (a layer of the model, so a saved model applies it itself):

* :class:`QueryNorm` — per query, over its real documents: ``"minmax"`` (LETOR's
  QueryLevelNorm: :math:`(x - \min_q x) / (\max_q x - \min_q x)`, 0 where a feature is
  constant in the query) or ``"zscore"`` (:math:`(x - \mu_q) / \sigma_q`, 0 where
  :math:`\sigma_q = 0`);
* :class:`GlobalNorm` — :math:`(x - \mu) / \sigma` with the mean and standard deviation of
  the training data (buffers, set once by :meth:`GlobalNorm.fit`; constant features keep
  :math:`\sigma = 1`). Missing values (NaN) become 0 after either normalisation.

**Attention** (:class:`AttentionBlock`): pre-norm multi-head self-attention and a
feed-forward sublayer, each with a residual connection (allRank's encoder layer). Attention
stays within a query: in the padded layout by an additive key mask of shape ``(G, 1, 1, L)``
(O(G·L) memory for the mask; torch's fused attention kernels then keep the attention itself
linear in memory per query where they support masks), or over the flat batch by a
block-diagonal mask (``(n, n)``: for very ragged batches, where ``G·L²`` would exceed
``n²``).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from ..groups import Groups

__all__ = ["pad_queries", "unpad_scores", "QueryNorm", "GlobalNorm", "AttentionBlock",
           "NORMS", "make_norm"]

NORMS = ("none", "global", "query", "query_zscore")


def pad_queries(X: Tensor, groups: Groups) -> Tuple[Tensor, Tensor]:
    """``(Xp (G, L, F), mask (G, L))``: the flat batch as padded queries (zeros in the
    padding, ``mask`` true on real documents). Differentiable in ``X``."""
    G, L = groups.num_groups, groups.max_size
    gi = groups.group_index.to(X.device)
    pos = groups.position.to(X.device)
    Xp = X.new_zeros((G, L) + tuple(X.shape[1:])).index_put((gi, pos), X)
    mask = torch.zeros(G, L, dtype=torch.bool, device=X.device).index_put(
        (gi, pos), torch.ones_like(gi, dtype=torch.bool))
    return Xp, mask


def unpad_scores(S: Tensor, groups: Groups) -> Tensor:
    """``(G, L)`` scores back to the flat ``(n,)`` order of ``groups``."""
    gi = groups.group_index.to(S.device)
    pos = groups.position.to(S.device)
    return S[gi, pos]


def _masked(x: Tensor, mask: Tensor, fill: float) -> Tensor:
    return x.masked_fill(~mask.unsqueeze(-1), fill)


class QueryNorm(nn.Module):
    """Per-query feature normalisation of padded queries (module docstring).

    ``forward(X (B, L, F), mask (B, L)) -> (B, L, F)``; padding rows come out 0."""

    def __init__(self, mode: str = "minmax"):
        super().__init__()
        if mode not in ("minmax", "zscore"):
            raise ValueError(f"mode must be 'minmax' or 'zscore', got {mode!r}")
        self.mode = mode

    def forward(self, X: Tensor, mask: Tensor) -> Tensor:
        real = mask.unsqueeze(-1) & ~torch.isnan(X)
        x0 = torch.where(real, X, torch.zeros_like(X))
        if self.mode == "minmax":
            big = torch.finfo(X.dtype).max
            lo = torch.where(real, X, torch.full_like(X, big)).amin(-2, keepdim=True)
            hi = torch.where(real, X, torch.full_like(X, -big)).amax(-2, keepdim=True)
            span = hi - lo
            ok = span > 0
            out = (x0 - lo) / torch.where(ok, span, torch.ones_like(span))
            out = torch.where(ok, out, torch.zeros_like(out))
        else:
            cnt = real.sum(-2, keepdim=True).clamp_min(1).to(X.dtype)
            mu = x0.sum(-2, keepdim=True) / cnt
            dev = torch.where(real, X - mu, torch.zeros_like(X))
            sd = (dev.square().sum(-2, keepdim=True) / cnt).sqrt()
            ok = sd > 0
            out = torch.where(ok, dev / torch.where(ok, sd, torch.ones_like(sd)),
                              torch.zeros_like(dev))
        return torch.where(real, out, torch.zeros_like(out))

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


class GlobalNorm(nn.Module):
    """``(x − mean) / std`` with the training data's statistics (buffers ``mean``,
    ``std``, ``(F,)`` float32), NaN → 0. :meth:`fit` sets them once (in float64)."""

    def __init__(self, n_features: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(int(n_features)))
        self.register_buffer("std", torch.ones(int(n_features)))

    @torch.no_grad()
    def fit(self, X: Tensor) -> "GlobalNorm":
        """The statistics of ``X`` ``(n, F)`` (NaN ignored; a constant or empty column gets
        mean 0 / std 1 where undefined)."""
        x = X.detach().to(torch.float64)
        ok = ~torch.isnan(x)
        cnt = ok.sum(0).clamp_min(1).to(torch.float64)
        x0 = torch.where(ok, x, torch.zeros_like(x))
        mu = x0.sum(0) / cnt
        var = torch.where(ok, x - mu, torch.zeros_like(x)).square().sum(0) / cnt
        sd = var.sqrt()
        sd = torch.where(sd > 0, sd, torch.ones_like(sd))
        self.mean.copy_(mu.to(self.mean.dtype))
        self.std.copy_(sd.to(self.std.dtype))
        return self

    def forward(self, X: Tensor) -> Tensor:
        out = (X - self.mean.to(X.dtype)) / self.std.to(X.dtype)
        return torch.where(torch.isnan(out), torch.zeros_like(out), out)


def make_norm(norm: str, n_features: int) -> Optional[nn.Module]:
    """The normalisation layer named ``norm`` (:data:`NORMS`; ``"none"``: ``None``)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    if norm == "global":
        return GlobalNorm(n_features)
    if norm == "query":
        return QueryNorm("minmax")
    if norm == "query_zscore":
        return QueryNorm("zscore")
    return None


class AttentionBlock(nn.Module):
    r"""One encoder layer: ``x + Dropout(MHA(LN(x)))``, then ``x + Dropout(FF(LN(x)))``
    with ``FF = Linear(d, d_ff) → ReLU → Dropout → Linear(d_ff, d)``.

    ``forward(x (B, T, d), bias (B or 1, 1, T or 1, T))``: ``bias`` is added to the
    attention logits (0 where attention is allowed, a large negative number elsewhere),
    so each row attends to its own query only."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.h = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.drop = nn.Dropout(dropout)
        self.p = float(dropout)

    def forward(self, x: Tensor, bias: Tensor) -> Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.h, d // self.h).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, h, T, d_h)
        a = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), dropout_p=self.p if self.training else 0.0)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(B, T, d)))
        return x + self.drop(self.ff(self.norm2(x)))


def key_bias(mask: Tensor, dtype) -> Tensor:
    """``(B, 1, 1, L)``: 0 on real keys, a large negative number on padding (a padded row's
    own output is never used; it sees a uniform softmax, never NaN)."""
    low = torch.finfo(dtype).min / 2
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, low)[:, None, None, :]


def block_bias(group_index: Tensor, dtype) -> Tensor:
    """``(1, 1, n, n)``: 0 between documents of one query, a large negative number across
    queries (the block-diagonal mask of the flat batch)."""
    low = torch.finfo(dtype).min / 2
    same = group_index[:, None] == group_index[None, :]
    return torch.zeros(same.shape, dtype=dtype, device=same.device).masked_fill(
        ~same, low)[None, None]


def init_linear(m: nn.Module) -> None:
    """Xavier-uniform weights and zero biases (the Transformer's initialisation)."""
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight, gain=1.0 / math.sqrt(2.0))
        if m.bias is not None:
            nn.init.zeros_(m.bias)
