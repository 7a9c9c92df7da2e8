r"""The one histogram arithmetic of every backend: per-row channels in 64-bit fixed point.

The histogram learners (the leaf-wise tree, the oblivious tree, stumps) sum per-row float64
channels (``w·t`` and ``w`` for the trees) over the rows of every node and bin. Float sums
depend on the order of the additions, so the same tree would depend on the backend, on the
device's atomics, on the number of processes and on the order of the rows. Here the channels
are turned into int64 **once per fit** (:func:`quantize`), every histogram, node total and
leaf total is an integer sum (exact and associative: the same on every backend, any number
of ranks, any row order), and every decision reads those sums converted back to float64
(:meth:`FixedPoint.to_float`).

The conversion of a channel ``x`` (n,) of a fit with ``N`` rows over all ranks:

* ``M = max_i |x_i|`` over this rank's rows, **max-reduced over the ranks** (a maximum is
  exact); ``E`` its binary exponent (``torch.frexp``: ``M < 2^E``; ``E = 0`` for ``M = 0``),
  raised to at least ``K − 1022`` so that both powers of two below are normal floats;
* ``K = 62 − ceil(log2 N)`` fraction bits (:func:`fraction_bits`): any sum of at most ``N``
  values of magnitude ``<= 2^K`` stays below ``2^62`` (no overflow, histogram differences
  included);
* the shift ``e = K − E`` and ``q_i = round_half_even(x_i · 2^e)`` (int64; the product is a
  power-of-two scaling, exact);
* back: ``float64(Q) · 2^-e`` for any integer sum ``Q``: one correctly rounded conversion
  (``(double)Q * s`` in C with ``s = 2^-e``, ``Q.double() * s`` in torch; the same bits).

**Precision.** ``|q_i · 2^-e − x_i| <= 2^(E−K−1) <= 2^-K · M``: every value carries an
absolute error of at most ``2^-(62 − ceil(log2 N))`` of its channel's maximum (about
``2.3e-13`` at ``N = 10^6``), and a sum of ``m`` rows at most ``m`` times that; the float64
sums it replaces err by ``m · 2^-53`` of the same maximum in the worst case. Values below
``2^-(K+1)`` of the maximum round to 0.

Shapes and dtypes: ``q`` (n, k) int64 contiguous (``k = 2``: ``(q_wt, q_w)`` for the trees),
``shift`` (k,) int64 and ``scale`` (k,) float64 (``2^-shift``) on ``q``'s device (no host
synchronisation on the torch path; the compiled kernels read ``scale`` as Python floats).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Union

import torch
from torch import Tensor

__all__ = ["FixedPoint", "quantize", "quantize_fit", "fraction_bits", "agreed_rows",
           "channel_maxima", "channel_columns",
           "SUM_BITS", "MAX_ROWS"]

#: magnitude bits of any integer sum: every sum of a fit stays below ``2^SUM_BITS``
SUM_BITS = 62
#: the most rows (over all ranks) a fit may have: at least 2 fraction bits are left
MAX_ROWS = 1 << 60
_MIN_NORMAL_EXP = -1022  # 2^-1022: the smallest normal float64


def fraction_bits(num_rows: int) -> int:
    """``K = 62 − ceil(log2 N)`` for a fit of at most ``N = num_rows`` rows over all ranks
    (``N < 2`` counts as 1: ``K = 62``)."""
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or not 0 <= num_rows <= MAX_ROWS:
        raise ValueError(f"num_rows: expected an int in [0, 2^60], got {num_rows!r}")
    return SUM_BITS - (max(num_rows, 1) - 1).bit_length()


def _pow2(e: Tensor) -> Tensor:
    """``2^e`` as float64, exactly, for int64 ``e`` in [-1022, 1023] (built from its bits:
    no ``pow``)."""
    return ((e + 1023) << 52).view(torch.float64)


@dataclass(frozen=True)
class FixedPoint:
    """Per-row channels in fixed point (see the module docstring).

    Attributes:
        q: (n, k) int64, contiguous: ``round_half_even(x · 2^shift)`` per channel.
        shift: (k,) int64: the value of an integer sum ``Q`` of channel ``c`` is
            ``Q · 2^-shift[c]``; ``None`` for quantized channels.
        scale: (k,) float64: ``2^-shift`` exactly (quantized channels: their step).
        bits: ``None`` here; the low-bit quantized channels of :mod:`.quantized` (summed
            and converted by ``scale`` the same way) carry their bit width, which lets a
            kernel pack them into narrower histogram bins.
    """

    q: Tensor
    shift: Optional[Tensor]
    scale: Tensor
    bits: Optional[int] = None

    def to_float(self, sums: Tensor, channel: Optional[int] = None) -> Tensor:
        """float64 values of integer ``sums``: ``float64(Q) · 2^-shift`` (one rounding).
        ``channel`` ``None``: ``sums`` (..., k), channel last; else every entry of ``sums``
        is a sum of channel ``channel``."""
        s = self.scale if channel is None else self.scale[channel]
        return sums.to(torch.float64) * s

    def host_scales(self) -> List[float]:
        """``scale`` as Python floats (one device-to-host copy: for the CPU kernels)."""
        return [float(v) for v in self.scale.tolist()]


def quantize(x: Union[Tensor, Sequence[Tensor]], *, num_rows: int,
             rows: Optional[Tensor] = None,
             max_reduce: Optional[Callable[[Tensor], Tensor]] = None) -> FixedPoint:
    """The fixed point of the float channels ``x`` ((n, k), or a sequence of ``k`` (n,)
    columns) of a fit of at most ``num_rows`` rows over all ranks (``rows`` (m,) int64: the
    fit's rows, whose maxima set the scales; ``None``: all). ``max_reduce`` (in place, e.g.
    ``DistContext.all_reduce_max``) agrees on each channel's maximum over the ranks
    (``None``: one process). Rows outside ``rows`` get values too (clamped to ``±2^62``:
    never summed). Finite inputs only (the learners check them). No host synchronisation;
    per column one pass for the extremes and one for the values."""
    cols = channel_columns(x)
    K = fraction_bits(num_rows)
    n, dev = cols[0].shape[0], cols[0].device
    M = channel_maxima(cols, rows, max_reduce)
    E = torch.frexp(M).exponent.to(torch.int64).clamp_(min=K + _MIN_NORMAL_EXP)
    shift = K - E  # in [K - 1024, 1022]
    mult = _pow2(shift)
    q = torch.empty((n, len(cols)), dtype=torch.int64, device=dev)
    tmp = torch.empty(n, dtype=torch.float64, device=dev)
    for c, col in enumerate(cols):
        torch.mul(col, mult[c], out=tmp)  # exact: a power of two
        if rows is not None:
            tmp.clamp_(-float(1 << SUM_BITS), float(1 << SUM_BITS))
        q[:, c].copy_(tmp.round_())  # round half to even, then exactly to int64
    return FixedPoint(q=q, shift=shift, scale=_pow2(-shift))


def channel_maxima(cols: Sequence[Tensor], rows: Optional[Tensor] = None,
                   max_reduce: Optional[Callable[[Tensor], Tensor]] = None) -> Tensor:
    """(k,) float64 ``max |x_c|`` of each (n,) float64 column over ``rows`` (``None``: all;
    0 without rows), max-reduced over the ranks by ``max_reduce`` (``None``: one process).
    No host synchronisation."""
    M = torch.zeros(len(cols), dtype=torch.float64, device=cols[0].device)
    for c, col in enumerate(cols):
        fit = col if rows is None else col.index_select(0, rows)
        if fit.numel():
            lo, hi = torch.aminmax(fit)  # no |x| temporary
            M[c] = torch.maximum(hi, -lo)
    if max_reduce is not None:
        out = max_reduce(M)
        M = M if out is None else out
    return M


def channel_columns(x) -> List[Tensor]:
    """The (n,) float64 columns of ``x`` ((n, k) or a sequence of (n,)); one-line errors."""
    if isinstance(x, Tensor):
        if x.dim() != 2 or not x.dtype.is_floating_point or x.shape[1] == 0:
            raise ValueError(f"x: expected a 2-D float tensor (n, k >= 1), got "
                             f"{tuple(x.shape)} {x.dtype}")
        x = x.unbind(1)
    cols = [c.to(torch.float64) for c in x]
    if not cols or any(c.dim() != 1 or c.shape != cols[0].shape for c in cols):
        raise ValueError("x: expected k >= 1 float columns of one length (n,)")
    return cols


def agreed_rows(prepared) -> int:
    """The number of rows of ``prepared`` (binned features) over all ranks of its context:
    an upper bound of every fit's rows, the same on every rank and for any split of the
    rows over the ranks. One all-reduce the first time (cached on ``prepared``), none in
    one process."""
    cache = prepared.cache
    total = cache.get("agreed_rows")
    if total is None:  # the collective is an identity in one process
        n = torch.tensor([prepared.codes.shape[0]], dtype=torch.int64)
        total = cache["agreed_rows"] = int(prepared.context.all_reduce_sum(n)[0])
    return total


def quantize_fit(prepared, x, rows: Optional[Tensor] = None) -> FixedPoint:
    """:func:`quantize` of the channels ``x`` ((n, k) or ``k`` (n,) columns) of a fit on
    ``rows`` (``None``: all; at most :func:`agreed_rows` of them over the ranks, e.g. no row
    twice) of ``prepared`` (binned features): ``N`` = :func:`agreed_rows`, the maxima
    max-reduced through its context (an identity in one process)."""
    return quantize(x, num_rows=agreed_rows(prepared), rows=rows,
                    max_reduce=prepared.context.all_reduce_max)

