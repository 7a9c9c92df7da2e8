"""The booster round's elementwise bookkeeping with few ``(n,)`` temporaries.

At millions of documents every fresh ``(n,)`` float64 tensor is a fresh memory mapping
whose pages fault in on first touch; these helpers compute what the round's plain
expressions compute (the same kernels, so the same bits) in one reused buffer each, and
test finiteness through one sum before any elementwise pass. Shapes: ``g``, ``h``, ``hc``,
``f`` ``(n,)`` float64; ``offsets`` ``(G + 1,)`` the queries' CSR offsets.

The round's sums are order-free (:mod:`torchrankboost.exact`): each product is summed per
query in the query's row order, and the per-query sums are accumulated exactly
(:func:`~torchrankboost.exact.query_accumulate`), so a sum over documents is the same
float for any order of the queries and any split of them over ranks.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..exact import accumulate, query_sums
from ..losses.base import all_finite

__all__ = ["all_finite", "gradient_stats", "newton_target", "step_sums", "moved"]


def gradient_stats(g: Tensor, h: Tensor, offsets: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(acc (2, WIDTH), max |g|, buf)``: the accumulators of ``Σ|h|`` and ``Σ g²``
    (order-free, see the module docstring), ``max |g|`` (0-d; ``g`` non-empty) and the one
    ``(n,)`` temporary they used (dead, free to overwrite)."""
    buf = torch.abs(h)
    sums = [query_sums(buf, offsets)]
    sums.append(query_sums(torch.mul(g, g, out=buf), offsets))
    gmax = torch.abs(g, out=buf).max() if g.numel() else g.new_zeros(())
    return accumulate(torch.stack(sums)), gmax, buf


def newton_target(g: Tensor, h: Tensor, floor: float, work: Optional[Tensor] = None
                  ) -> Tuple[Tensor, Tensor]:
    """``(-g / hc, hc)`` with ``hc = h.clamp_min(floor)``, the quotient in ``-g``'s buffer:
    ``work`` (like ``g``, overwritten; ``None``: a new one)."""
    hc = h.clamp_min(floor)
    target = torch.neg(g) if work is None else torch.neg(g, out=work)
    return torch.div(target, hc, out=target), hc


def step_sums(g: Tensor, hc: Tensor, f: Tensor, offsets: Tensor) -> Tensor:
    """The accumulators ``(4, WIDTH)`` of ``[Σ g f, Σ hc f², Σ hc², Σ hc]`` (order-free,
    see the module docstring) in one temporary (the products ``g * f``, ``hc * f * f``,
    ``hc * hc`` of the plain expression)."""
    buf = torch.mul(g, f)
    sums = [query_sums(buf, offsets)]
    torch.mul(hc, f, out=buf)
    sums.append(query_sums(buf.mul_(f), offsets))
    sums.append(query_sums(torch.mul(hc, hc, out=buf), offsets))
    sums.append(query_sums(hc, offsets))
    return accumulate(torch.stack(sums))


def moved(s: Tensor, c: float, f: Tensor) -> Tensor:
    """``s + c * f`` in one new tensor."""
    out = torch.mul(f, c)
    return torch.add(s, out, out=out)
