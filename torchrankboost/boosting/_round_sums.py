"""The booster round's elementwise bookkeeping with few ``(n,)`` temporaries.

At millions of documents every fresh ``(n,)`` float64 tensor is a fresh memory mapping
whose pages fault in on first touch; these helpers compute what the round's plain
expressions compute (the same kernels, so the same bits) in one reused buffer each, and
test finiteness through one sum before any elementwise pass. Shapes: ``g``, ``h``, ``hc``,
``f`` ``(n,)`` float64.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

# ``bool(torch.isfinite(x).all())`` through one sum first (no ``(n,)`` temporary unless the
# sum is not finite): the losses' own input check, the round's finiteness test too
from ..losses.base import all_finite

__all__ = ["all_finite", "gradient_stats", "newton_target", "step_sums", "moved"]


def gradient_stats(g: Tensor, h: Tensor, out: Tensor, slot: int) -> Tensor:
    """``out[0] = Σ|h|``, ``out[2] = Σ g²``, ``out[slot] = max |g|`` (``g`` non-empty) in one
    temporary: ``h.abs().sum()``, ``(g * g).sum()``, ``g.abs().max()``; returns that
    temporary (dead, free to overwrite)."""
    buf = torch.abs(h)
    out[0] = buf.sum()
    out[2] = torch.mul(g, g, out=buf).sum()
    out[slot] = torch.abs(g, out=buf).max()
    return buf


def newton_target(g: Tensor, h: Tensor, floor: float, work: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor]:
    """``(-g / hc, hc)`` with ``hc = h.clamp_min(floor)``, the quotient in ``-g``'s buffer:
    ``work`` (like ``g``, overwritten; ``None``: a new one)."""
    hc = h.clamp_min(floor)
    target = torch.neg(g) if work is None else torch.neg(g, out=work)
    return torch.div(target, hc, out=target), hc


def step_sums(g: Tensor, hc: Tensor, f: Tensor, n_rows: int) -> Tensor:
    """``[Σ g f, Σ hc f², Σ hc², Σ hc, n_rows]`` ``(5,)`` float64 in one temporary (the
    products ``g * f``, ``hc * f * f``, ``hc * hc`` of the plain expression)."""
    buf = torch.mul(g, f)
    gf = buf.sum()
    torch.mul(hc, f, out=buf)
    hff = buf.mul_(f).sum()
    hh = torch.mul(hc, hc, out=buf).sum()
    return torch.stack([gf, hff, hh, hc.sum(), torch.tensor(float(n_rows), dtype=torch.float64)])


def moved(s: Tensor, c: float, f: Tensor) -> Tensor:
    """``s + c * f`` in one new tensor."""
    out = torch.mul(f, c)
    return torch.add(s, out, out=out)
