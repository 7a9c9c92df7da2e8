r"""Low-bit quantized channels with stochastic rounding: the speed mode of the tree learner
(LightGBM's ``use_quantized_grad``; Shi et al., NeurIPS 2022), seeded and deterministic.

The exact mode (:mod:`.fixed_point`) turns a fit's channels ``w·t`` and ``w`` into 64-bit
integers; this mode turns them into ``b``-bit integers (``2 <= b <= 16``), so that a kernel
can pack a row's two channels and its count into one 64-bit histogram lane (``trees.c``:
about 0.6 against 1 ns per (row, feature) update). The sums stay exact integer sums, read
back by one multiplication by the channel's step, so the trees are the same on every
backend, any number of processes and any order of the rows, as in the exact mode.

For the channels ``x_c`` (n,) of a fit (``c = wt`` signed, ``c = w >= 0``):

* ``M_c = max |x_c|`` over the fit's rows, max-reduced over the ranks (exact);
* the levels ``L_wt = 2^(b-1) − 1`` and ``L_w = 2^b − 1``, the step ``s_c = M_c / L_c``
  (float64; 1 when ``M_c = 0``);
* ``q_c = clamp(floor(x_c / s_c + u_c), −L_c, L_c)`` with ``u_c`` in [0, 1) from the row's
  own values: 32 bits each of a 64-bit hash (:func:`row_uniforms`, SplitMix64's finaliser)
  of the fit's seed and the float64 bits of the row's ``(w·t, w)``. No position, so the
  same row gets the same ``u`` on any rank and in any order of the queries; identical rows
  get identical roundings (their errors add up instead of averaging out).

**Unbiased**: ``x / s + u`` is exact in float64 (``|x / s| <= 2^16``, ``u`` a multiple of
``2^-32``), so ``E_u[q_c] = x_c / s_c`` up to ``2^-32`` (and the rounding of the division);
a sum over ``m`` rows errs by ``O(√m · s_c)`` for distinct rows. Leaf values are read from
the quantized sums, as split gains are.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from .fixed_point import FixedPoint, agreed_rows, channel_columns, channel_maxima

__all__ = ["quantize_stochastic", "quantize_fit_stochastic", "row_uniforms", "mix_int",
           "check_bits", "MIN_BITS", "MAX_BITS"]

#: the bit widths of the quantized mode (the packed histogram lane of ``trees.c`` holds
#: three fields of ``b + lb``, ``b + lb`` and ``lb + 1`` bits, ``lb = (63 − 2b) // 3``)
MIN_BITS, MAX_BITS = 2, 16

_M64 = (1 << 64) - 1


def _signed(v: int) -> int:
    """``v`` mod 2^64 as a signed int64."""
    v &= _M64
    return v - (1 << 64) if v >> 63 else v


_C1 = _signed(0xBF58476D1CE4E5B9)  # SplitMix64's multipliers and increment
_C2 = _signed(0x94D049BB133111EB)
_GOLDEN = _signed(0x9E3779B97F4A7C15)


def _shr(z: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 ``z`` by ``k`` (torch's ``>>`` is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def _mix(z: Tensor) -> Tensor:
    """SplitMix64's finaliser on int64 (products wrap modulo 2^64)."""
    z = (z ^ _shr(z, 30)) * _C1
    z = (z ^ _shr(z, 27)) * _C2
    return z ^ _shr(z, 31)


def mix_int(v: int) -> int:
    """SplitMix64's finaliser on a Python int (mod 2^64, unsigned): the reference of the
    tensor version."""
    v &= _M64
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & _M64
    return v ^ (v >> 31)


def check_bits(bits, name: str = "quantized_bits") -> Optional[int]:
    """``bits`` checked: ``None`` (the exact mode) or an int in [2, 16]."""
    if bits is None:
        return None
    if isinstance(bits, bool) or not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"{name}: expected None or an int in [{MIN_BITS}, {MAX_BITS}], "
                         f"got {bits!r}")
    return bits


def row_uniforms(a: Tensor, b: Tensor, seed: int) -> Tuple[Tensor, Tensor]:
    """Two (n,) float64 uniforms in [0, 1), multiples of ``2^-32``, per row of the float64
    columns ``a`` and ``b``: the high and low 32 bits of
    ``mix(mix(bits(a) · φ + seed') ^ bits(b))`` (``mix`` SplitMix64's finaliser, ``φ`` its
    increment, ``seed' = mix(seed)``; ``bits`` the float64 bit patterns). A function of
    the row's values and ``seed`` only."""
    s = _signed(mix_int(int(seed) + 0x9E3779B97F4A7C15))  # a Python int: no upload
    z = _mix(a.contiguous().view(torch.int64) * _GOLDEN + s)
    z = _mix(z ^ b.contiguous().view(torch.int64))
    two32 = 2.0 ** -32
    return _shr(z, 32).to(torch.float64) * two32, (z & 0xFFFFFFFF).to(torch.float64) * two32


def quantize_stochastic(x, *, bits: int, seed: int, rows: Optional[Tensor] = None,
                        max_reduce: Optional[Callable[[Tensor], Tensor]] = None) -> FixedPoint:
    """The ``bits``-bit quantized channels (the module docstring) of the float columns ``x``
    ((n, 2) or two (n,) columns ``(w·t, w)``, ``w >= 0``): ``rows`` (m,) the fit's rows,
    whose maxima set the steps (``None``: all; the other rows get values too, never summed),
    ``max_reduce`` the in-place maximum over the ranks (``None``: one process), ``seed`` the
    fit's seed (an int). No host synchronisation."""
    bits = check_bits(bits, "bits")
    if bits is None:
        raise ValueError("bits: expected an int in [2, 16], got None")
    cols = channel_columns(x)
    if len(cols) != 2:
        raise ValueError(f"x: expected the two channels (w·t, w), got {len(cols)}")
    M = channel_maxima(cols, rows, max_reduce)
    levels = (float((1 << (bits - 1)) - 1), float((1 << bits) - 1))
    step = torch.stack([M[0] / levels[0], M[1] / levels[1]])
    step = torch.where(M > 0, step, torch.ones_like(step))
    u = row_uniforms(cols[0], cols[1], seed)
    q = torch.empty((cols[0].shape[0], 2), dtype=torch.int64, device=M.device)
    for c, lo in enumerate((-levels[0], 0.0)):
        y = torch.div(cols[c], step[c]).add_(u[c]).floor_()
        q[:, c].copy_(y.clamp_(lo, levels[c]))
    return FixedPoint(q=q, shift=None, scale=step, bits=bits)


def quantize_fit_stochastic(prepared, x, rows: Optional[Tensor] = None, *, bits: int,
                            seed: int) -> FixedPoint:
    """:func:`quantize_stochastic` of a fit on ``rows`` of ``prepared`` (binned features):
    the maxima max-reduced through its context (an identity in one process)."""
    agreed_rows(prepared)  # the same collectives in the same order as the exact mode
    return quantize_stochastic(x, bits=bits, seed=seed, rows=rows,
                               max_reduce=prepared.context.all_reduce_max)
