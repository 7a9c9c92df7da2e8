r"""The ranking networks: an MLP scorer and a context-aware listwise Transformer.

Both are ``torch.nn.Module``\ s with the same two entry points:

* ``forward(X (B, L, F), mask (B, L)) -> (B, L)`` — padded queries (``mask`` true on real
  documents; scores of padding are meaningless): the form that is exported (ONNX,
  ``torch.export``);
* ``score(X (n, F), groups) -> (n,)`` — the library's flat batch with its
  :class:`~torchrankboost.Groups` (what the trainer and ``predict`` call).

:class:`MLPScorer` scores each document alone (``n_features → hidden … → 1``, ReLU,
dropout); with a per-query normalisation it needs the query, otherwise it runs on the flat
rows directly. :class:`ListwiseTransformer` is allRank's context-aware ranker (Pobrotyn et
al., *Context-Aware Learning to Rank with Self-Attention*, 2020): a feed-forward input layer
to ``d_model``, ``n_layers`` pre-norm self-attention blocks over the documents of each query
(:class:`~torchrankboost.nn.layers.AttentionBlock`), a final layer norm and a linear score;
no positional encoding (the input order of a query's documents does not matter). Attention
never crosses queries: padded queries with a key mask, or (``attention="block"``, or
``"auto"`` when the batch is so ragged that ``G·L² > n²``) the flat batch with a
block-diagonal mask.

Every network keeps its normalisation layer (:mod:`torchrankboost.nn.layers`) and its
constructor arguments (:meth:`config`), so a saved model rebuilds itself
(:func:`build_network`).
"""

from __future__ import annotations

from typing import Any, Dict, Sequence

import torch
from torch import Tensor, nn

from ..groups import Groups
from .layers import (AttentionBlock, GlobalNorm, QueryNorm, block_bias, init_linear, key_bias,
                     make_norm, pad_queries, unpad_scores)

__all__ = ["MLPScorer", "ListwiseTransformer", "ARCHITECTURES", "build_network"]

ATTENTION = ("auto", "padded", "block")


def _check_int(name: str, v, low: int) -> int:
    if isinstance(v, bool) or int(v) != v or int(v) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    return int(v)


def _widths(name: str, v) -> list:
    """Layer widths: a sequence of integers >= 1, or one integer (one layer)."""
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ValueError(f"{name} must be an integer or a list of integers, got {v!r}")
    return [_check_int(name, h, 1) for h in v]


def _check_dropout(p) -> float:
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    return p


class _Network(nn.Module):
    """Shared: the normalisation layer, the flat entry point, the stored configuration."""

    architecture = ""

    def _setup_norm(self, norm: str, n_features: int) -> None:
        self.norm_name = norm
        self.norm = make_norm(norm, n_features)

    def _normalise(self, X: Tensor, mask: Tensor) -> Tensor:
        if isinstance(self.norm, QueryNorm):
            return self.norm(X, mask)
        if isinstance(self.norm, GlobalNorm):
            return self.norm(X)
        return torch.where(torch.isnan(X), torch.zeros_like(X), X)

    @property
    def needs_queries(self) -> bool:
        """Whether a document's score depends on the other documents of its query."""
        return True

    def fit_normalisation(self, X: Tensor) -> None:
        """Set a :class:`GlobalNorm`'s statistics from the training features (no-op
        otherwise)."""
        if isinstance(self.norm, GlobalNorm):
            self.norm.fit(X)

    def config(self) -> Dict[str, Any]:
        """The constructor's arguments (JSON): ``build_network(architecture, **config)``
        rebuilds the network."""
        return dict(self._config)


class MLPScorer(_Network):
    """A feed-forward scorer: ``n_features → hidden[0] → … → 1``, ReLU and dropout between
    layers, after the normalisation ``norm`` (``"global"``, ``"query"``,
    ``"query_zscore"`` or ``"none"``)."""

    architecture = "mlp"

    def __init__(self, n_features: int, *, hidden: Sequence[int] = (64, 64),
                 dropout: float = 0.1, norm: str = "global"):
        super().__init__()
        F = _check_int("n_features", n_features, 1)
        hidden = _widths("hidden", hidden)
        dropout = _check_dropout(dropout)
        self._config = dict(n_features=F, hidden=hidden, dropout=dropout, norm=norm)
        self._setup_norm(norm, F)
        mods, d = [], F
        for h in hidden:
            mods += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        mods.append(nn.Linear(d, 1))
        self.body = nn.Sequential(*mods)

    @property
    def needs_queries(self) -> bool:
        return isinstance(self.norm, QueryNorm)

    def forward(self, X: Tensor, mask: Tensor) -> Tensor:
        # padding scores 0: the mask stays an input of an exported graph
        return self.body(self._normalise(X, mask)).squeeze(-1).masked_fill(~mask, 0.0)

    def score(self, X: Tensor, groups: Groups) -> Tensor:
        if not self.needs_queries:  # each row alone: no padding at all
            x = self.norm(X) if self.norm is not None else torch.nan_to_num(X, nan=0.0)
            return self.body(x).squeeze(-1)
        Xp, mask = pad_queries(X, groups)
        return unpad_scores(self.forward(Xp, mask), groups)


class ListwiseTransformer(_Network):
    """allRank's context-aware listwise ranker (module docstring).

    Args:
        n_features: input width ``F``.
        d_model: the width of the attention layers.
        n_heads: attention heads (``d_model`` must be a multiple).
        n_layers: self-attention blocks.
        d_ff: the feed-forward sublayer's width.
        dropout: dropout of the input layer, the attention and the sublayers.
        input_layers: widths of the feed-forward input layers before the projection to
            ``d_model`` (allRank's ``fc_model``), ReLU and dropout after each.
        norm: the feature normalisation (``"global"``, ``"query"``, ``"query_zscore"``,
            ``"none"``).
        attention: ``"padded"``, ``"block"`` or ``"auto"`` (the flat entry point).
    """

    architecture = "transformer"

    def __init__(self, n_features: int, *, d_model: int = 64, n_heads: int = 2,
                 n_layers: int = 2, d_ff: int = 128, dropout: float = 0.1,
                 input_layers: Sequence[int] = (), norm: str = "global",
                 attention: str = "auto"):
        super().__init__()
        F = _check_int("n_features", n_features, 1)
        d_model, n_heads = _check_int("d_model", d_model, 1), _check_int("n_heads", n_heads, 1)
        n_layers, d_ff = _check_int("n_layers", n_layers, 0), _check_int("d_ff", d_ff, 1)
        dropout = _check_dropout(dropout)
        input_layers = _widths("input_layers", input_layers)
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
        self._config = dict(n_features=F, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                            d_ff=d_ff, dropout=dropout, input_layers=input_layers, norm=norm,
                            attention=attention)
        self.attention = attention
        self._setup_norm(norm, F)
        mods, d = [], F
        for h in input_layers + [d_model]:
            mods += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(dropout)]
            d = h
        self.input = nn.Sequential(*mods)
        self.blocks = nn.ModuleList(AttentionBlock(d_model, n_heads, d_ff, dropout)
                                    for _ in range(n_layers))
        self.final = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)
        self.apply(init_linear)

    def _encode(self, x: Tensor, bias: Tensor) -> Tensor:
        h = self.input(x)
        for blk in self.blocks:
            h = blk(h, bias)
        return self.head(self.final(h)).squeeze(-1)

    def forward(self, X: Tensor, mask: Tensor) -> Tensor:
        x = self._normalise(X, mask)
        return self._encode(x, key_bias(mask, x.dtype))

    def score(self, X: Tensor, groups: Groups) -> Tensor:
        G, L, n = groups.num_groups, groups.max_size, groups.num_docs
        block = self.attention == "block" or (self.attention == "auto" and G * L * L > n * n)
        if not block or isinstance(self.norm, QueryNorm):
            Xp, mask = pad_queries(X, groups)
            return unpad_scores(self.forward(Xp, mask), groups)
        x = self.norm(X) if self.norm is not None else torch.nan_to_num(X, nan=0.0)
        gi = groups.group_index.to(X.device)
        return self._encode(x.unsqueeze(0), block_bias(gi, x.dtype)).squeeze(0)


ARCHITECTURES = {"mlp": MLPScorer, "transformer": ListwiseTransformer}


def build_network(architecture: str, **config: Any) -> _Network:
    """The network ``architecture`` (``"mlp"``, ``"transformer"``) built with ``config``
    (its constructor's keywords, ``n_features`` included); ``ValueError`` for an unknown
    name or option."""
    cls = ARCHITECTURES.get(architecture)
    if cls is None:
        raise ValueError(f"unknown model {architecture!r}; choose one of "
                         f"{', '.join(ARCHITECTURES)}")
    try:
        return cls(**config)
    except TypeError as exc:
        raise ValueError(f"model {architecture!r}: {exc}") from None
