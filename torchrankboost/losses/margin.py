r"""The smooth ranking margin (Rudin & Schapire 2009).

For a combination of weak rankers ``s = Σ_j λ_j h_j`` with ``h_j ∈ [0, 1]`` and ``λ ≥ 0``::

    G̃ = −ln F̃ / ‖λ‖₁,    F̃ = Σ_{crucial (i, j)} w_ij exp(−(s_i − s_j))   (RankBoost's loss)

a soft-min of the normalised pair margins at inverse temperature ``β = ‖λ‖₁``, with
``μ − ln|C|/β ≤ G̃ ≤ μ`` (``μ`` the hard margin, ``|C|`` the number of crucial pairs;
:func:`torchrankboost.metrics.ranking_margin` computes ``μ``). The scale is not recoverable
from scores: the caller passes ``scale`` (``‖λ‖₁`` of a boosted model, or any norm).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import PairSpec
from .._pair_engine import exponential as K
from .._pair_engine.segment import acc_dtype, seg_lse
from .base import (BindState, BoundLoss, Prepared, check_hess, prepare_inputs,
                   prepare_targets)
from .exponential import ExpFamilyLoss

__all__ = ["SmoothMarginLoss", "smooth_margin"]


def _check_scale(scale):
    if scale is None:
        raise ValueError(
            "scale is required: pass scale=... (e.g. the model's ‖λ‖₁) to the constructor "
            "or the call"
        )
    if isinstance(scale, Tensor):
        if scale.numel() != 1:
            raise ValueError(f"scale must be a scalar, got shape {tuple(scale.shape)}")
        v = float(scale.detach())
    else:
        try:
            v = float(scale)
        except (TypeError, ValueError):
            raise ValueError(f"scale must be a positive number, got {scale!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"scale must be positive and finite, got {v}")
    return scale if isinstance(scale, Tensor) else v


class SmoothMarginLoss(ExpFamilyLoss):
    r"""Negated smooth ranking margin ``−G̃ = ln F̃ / scale`` per query (minimise it to
    *maximise* the smooth margin ``G̃ = −ln F̃ / scale``; :func:`smooth_margin` returns
    ``G̃`` itself).

    Call: ``loss(scores, labels, groups=None, *, pairs=None, weights=None, mask=None,
    scale=None)``; ``scale`` (a positive float or scalar tensor — gradients flow into a
    tensor scale) overrides the constructor's. Pairs and weights as
    :class:`~torchrankboost.losses.ExponentialPairwiseLoss`. Queries without pairs give 0;
    ``"sum"`` is ``Σ_q ln F̃_q / scale``.

    ``grad_hess``: the gradient ``∇ ln F̃ / scale`` (softmax-weighted, bounded), the exact
    diagonal ``(diag(∇²F̃)/F̃ − (∇F̃/F̃)²)/scale`` and the bound ``2 diag(∇²F̃)/(F̃·scale)``
    (see :class:`ExponentialPairwiseLoss`). ``scale`` is held constant.

    ``bind(labels, groups=None, *, pairs=None, weights=None, scale=None)``: the bound form
    (:class:`~torchrankboost.losses.BoundLoss`), ``scale`` fixed at bind time (it overrides
    the constructor's, as in the call).
    """

    def __init__(self, scale: Union[float, Tensor, None] = None, *, reduction: str = "sum"):
        super().__init__(log=True, normalize=False, reduction=reduction)
        self.scale = None if scale is None else _check_scale(scale)

    def _bind_state(self, inp: Prepared, scale=None) -> BindState:
        st = super()._bind_state(inp)
        st.scale = scale  # checked by bind / the call (None for a bare per_group)
        return st

    def bind(self, labels: Optional[Tensor], groups: Optional[Groups] = None, *,
             pairs: PairSpec = None, weights: Optional[Tensor] = None,
             scale: Union[float, Tensor, None] = None) -> BoundLoss:
        """:meth:`RankingLoss.bind`, with ``scale`` (a positive float or scalar tensor)
        overriding the constructor's, as in the call."""
        sc = _check_scale(self.scale if scale is None else scale)
        inp = prepare_targets(labels, groups, pairs=self._pairs(pairs), weights=weights)
        self._check_label_sign(inp)
        return self._bound(inp, scale=sc)

    def _value(self, inp: Prepared) -> Tensor:
        sc = _check_scale(self._state(inp).scale)
        return (super()._value(inp) / sc).to(inp.scores.dtype)

    def _value_scale(self, inp: Prepared) -> float:
        return self._float_scale(inp)

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        sc = self._float_scale(inp)
        g, h = super()._grad_hess(inp, hess)
        return g / sc, h / sc

    def _value_grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor, Tensor]:
        sc = self._float_scale(inp)
        v, g, h = super()._value_grad_hess(inp, hess)
        return (v / sc).to(inp.scores.dtype), g / sc, h / sc

    def _float_scale(self, inp: Prepared) -> float:
        sc = _check_scale(self._state(inp).scale)
        return float(sc.detach()) if isinstance(sc, Tensor) else sc

    def forward(self, scores: Tensor, labels: Optional[Tensor] = None,
                groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                weights: Optional[Tensor] = None, mask: Optional[Tensor] = None,
                scale: Union[float, Tensor, None] = None) -> Tensor:
        sc = _check_scale(self.scale if scale is None else scale)
        inp = self._inputs(scores, labels, groups, pairs=pairs, weights=weights, mask=mask)
        return self._bound(inp, scale=sc)._value(inp.scores)

    def grad_hess(self, scores: Tensor, labels: Optional[Tensor] = None,
                  groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                  weights: Optional[Tensor] = None, hess: str = "diag",
                  scale: Union[float, Tensor, None] = None) -> Tuple[Tensor, Tensor]:
        sc = _check_scale(self.scale if scale is None else scale)
        check_hess(hess)
        inp = self._inputs(scores.detach(), labels, groups, pairs=pairs, weights=weights)
        return self._bound(inp, scale=sc)._grad_hess(inp.scores, hess)

    def extra_repr(self) -> str:
        return f"scale={self.scale}, reduction={self.reduction!r}"


def smooth_margin(scores: Tensor, labels: Optional[Tensor] = None,
                  groups: Optional[Groups] = None, *, scale: Union[float, Tensor],
                  pairs: PairSpec = None,
                  weights: Optional[Tensor] = None, per_query: bool = False) -> Tensor:
    r"""The smooth ranking margin ``G̃ = −ln F̃ / scale`` (Rudin & Schapire 2009).

    Default: over the crucial pairs of *all* queries pooled (the paper's single pair set:
    ``F̃ = Σ_q F̃_q``), a 0-dim tensor; ``per_query=True`` gives ``(G,)``. Empty pair sets
    give ``+inf`` (the minimum over no pairs). Differentiable; computed in log space.
    """
    sc = _check_scale(scale)
    inp = prepare_inputs(scores, labels, groups, pairs=pairs, weights=weights)
    dt = acc_dtype(inp.scores.dtype)
    cfg = K.make_config(inp, p=1.0, log=True, normalize=False, dtype=dt)
    s = inp.scores.to(dt)
    logF = K.pair_terms(s, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, 1.0,
                        levels=cfg.levels)["logF"]
    if not per_query:
        logF = seg_lse(logF, torch.zeros(logF.shape[0], dtype=torch.long,
                                           device=logF.device), 1)[0]
    return (-logF / sc).to(scores.dtype)
