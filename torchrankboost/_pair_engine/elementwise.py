"""Elementwise functions whose value does not depend on where it sits in its tensor.

On the CPU, PyTorch computes an elementwise function over the vector-width body of a tensor
with one implementation and over the remaining tail with another (scalar) one. For
``exp``, ``log``, ``log1p``, ``expm1``, ``tanh``, ``logsigmoid``, ``sqrt`` and the
arithmetic they agree bit for bit; for ``torch.sigmoid``, ``softplus``, ``torch.exp2``,
``torch.pow`` and ``torch.logaddexp`` they differ in the last bit for some inputs, so a
document's value would change when its query moves to another place of the batch (another
order of the queries, another split over processes). The functions here are built from the
agreeing operations only, differentiable to any order, accurate to a few units in the last
place.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["sigmoid", "softplus", "exp2", "pow2"]

_LN2 = math.log(2.0)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + e^{-x})`` from ``e = e^{-|x|}`` (never overflowing): ``1 / (1 + e)`` for
    ``x >= 0``, ``e / (1 + e)`` below (relative error of a few ulps, also far out)."""
    e = torch.exp(-x.abs())
    r = 1.0 / (1.0 + e)
    return torch.where(x >= 0, r, e * r)


def softplus(x: Tensor) -> Tensor:
    """``log(1 + e^x)`` as ``-logsigmoid(-x)`` (no threshold: exact for large ``x`` too)."""
    return -F.logsigmoid(-x)


def pow2(k: Tensor) -> Tensor:
    """``2^k`` exactly for integer ``k`` (any integer dtype; float64 from the bits;
    ``[-1074, 1023]``, clamped)."""
    k = k.to(torch.int64).clamp(-1074, 1023)
    normal = (k.clamp_min(-1022) + 1023) << 52
    sub = torch.ones_like(k) << (k + 1074).clamp(0, 51)
    return torch.where(k >= -1022, normal, sub).view(torch.float64)


def exp2(x: Tensor) -> Tensor:
    """``2^x``: exact at integers, ``2^⌊x⌋ · e^{(x − ⌊x⌋) ln 2}`` otherwise, computed in
    float64 and returned in ``x``'s floating dtype (float64 for integers)."""
    dt = x.dtype if x.dtype.is_floating_point else torch.float64
    x = x.to(torch.float64)
    k = torch.floor(x).clamp(-1074, 1023)
    return (torch.exp((x - k) * _LN2) * pow2(k.detach())).to(dt)
