r"""Order-free sums: the same float64 for any order of the values and any split over ranks.

A float sum depends on the order of its additions; a model that reads one (the step of a
boosting round, a loss value compared with another, a metric that stops the fit) then
depends on how its queries are ordered and split over processes. Here every such sum is
made in two stages:

1. **per query, in the query's row order** (:func:`query_sums`): ``torch.segment_reduce``
   of an ``(n, 1)`` column adds each query's values sequentially from 0,
   ``((0 + x_0) + x_1) + …``: on the CPU (the additions of ``index_add_``) and on CUDA
   alike (one thread per query for data with a lane dimension; a 1-D input would take
   CUB's segmented tree reduction there, deterministic but in another order), never
   atomics; so a query's partial sum depends on its own rows only, and not on the device;
2. **exactly over the queries** (a *superaccumulator*): every float64 ``x`` is an integer
   multiple of :math:`2^{-1074}`, ``x = ±M·2^p`` with ``M < 2^{53}``, ``0 ≤ p ≤ 2045``. Its
   bits are cut on 32-bit windows into three int64 chunks, each ``< 2^{32}``, added into
   ``LIMBS`` int64 limbs, limb ``i`` weighing :math:`2^{32 i - 1074}`
   (:func:`accumulate`). Integer sums are exact and associative, so the limbs are the
   exact sum whatever the order (up to :math:`2^{31}` values per call). Limbs are carried
   into digits in ``[0, 2^{32})`` (:func:`normalise`, a carry-lookahead scan: no loop over
   limbs), which travel between ranks as float64 (the sum of ``W`` ranks' digits stays
   below :math:`2^{53}`, exact in any order) and are rounded **once**, to nearest with
   ties to even, into a float64 (:func:`round_sum`): the correctly rounded exact sum,
   what ``math.fsum`` returns.

NaN and ±inf are counted beside the limbs (the last three columns): the sum is NaN when
some value is NaN or both infinities occur, else ``±inf`` when one does (float rules); an
exact sum beyond the float64 range rounds to ``±inf``; an exact zero is ``+0.0``.

Everything is vectorised torch on the values' device (no Python loop over values, no host
synchronisation): an accumulator is an ``(…, WIDTH)`` int64 tensor. Cost: a handful of
integer passes over the summed values plus about a hundred small operations on the
``(…, WIDTH)`` accumulator (tens of microseconds each on the CPU).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["LIMBS", "WIDTH", "accumulate", "normalise", "round_sum", "round_host", "exact_sum",
           "exact_mean", "query_sums", "query_accumulate", "to_wire", "from_wire",
           "ExactSum"]

#: int64 limbs of 32 bits, limb ``i`` weighing ``2^(32 i - 1074)``: bits up to 2^1055 (the
#: largest float64 times 2^31 values) and a signed top limb
LIMBS = 68
#: an accumulator's columns: the limbs, then the counts of NaN, +inf and -inf
WIDTH = LIMBS + 3
_NAN, _PINF, _NINF = LIMBS, LIMBS + 1, LIMBS + 2
_MASK = (1 << 32) - 1
_I64, _F64 = torch.int64, torch.float64


def _chunks(x: Tensor):
    """The limb index ``k`` of each value's lowest chunk and its three signed chunks
    (``(N,)`` int64 each) of the flat float64 ``x``; non-finite values: chunks 0 and the
    third chunk moved to their count column with value 1."""
    bits = x.contiguous().view(_I64)
    ex = (bits >> 52) & 0x7FF
    frac = bits & ((1 << 52) - 1)
    special = ex == 0x7FF
    mant = torch.where(special, 0, torch.where(ex > 0, frac | (1 << 52), frac))
    p = ex.clamp(1, 2046) - 1  # the position of the mantissa's lowest bit above 2^-1074
    k, r = p >> 5, p & 31
    lo = (mant & ((torch.ones_like(r) << (32 - r)) - 1)) << r
    mid = mant >> (32 - r)
    hi = mid >> 32
    mid = mid & _MASK
    neg = bits < 0
    lo, mid, hi = (torch.where(neg, -c, c) for c in (lo, mid, hi))
    code = torch.where(frac != 0, _NAN, torch.where(neg, _NINF, _PINF))
    hi_at = torch.where(special, code - k, 2)  # the third chunk's column, relative to k
    hi = torch.where(special, 1, hi)
    return k, lo, mid, hi, hi_at


def accumulate(values: Tensor, index: Optional[Tensor] = None,
               size: Optional[int] = None) -> Tensor:
    """The exact sums of float values as int64 accumulators.

    Args:
        values: ``(n,)`` (one sum, or one per ``index``) or ``(m, n)`` (one sum per row),
            any float dtype (converted to float64 exactly).
        index: ``(n,)`` int64 in ``[0, size)``: sum ``values`` by it (1-D ``values``).
        size: the number of sums with ``index``.

    Returns:
        ``(WIDTH,)``, ``(size, WIDTH)`` or ``(m, WIDTH)`` int64 (at most ``2^31`` values per
        sum; ``ValueError`` above).
    """
    x = values.detach().to(_F64)
    if x.dim() == 2:
        m, n = x.shape
        rows = torch.arange(m, device=x.device).repeat_interleave(n)
        return accumulate(x.reshape(-1), rows, m)
    if x.dim() != 1:
        raise ValueError(f"accumulate: values must be 1-D or 2-D, got shape {tuple(x.shape)}")
    if x.numel() >= 2 ** 31:
        raise ValueError(f"accumulate: at most 2^31 values per call, got {x.numel()}")
    flat = index is None
    m = 1 if flat else int(size)
    acc = torch.zeros(m * WIDTH, dtype=_I64, device=x.device)
    if x.numel():
        k, lo, mid, hi, hi_at = _chunks(x)
        base = k if flat else index.to(device=x.device, dtype=_I64) * WIDTH + k
        acc.index_add_(0, base, lo)
        acc.index_add_(0, base + 1, mid)
        acc.index_add_(0, base + hi_at, hi)
    return acc if flat else acc.view(m, WIDTH)


def _carry(a: Tensor) -> Tensor:
    """One carry pass over limbs ``(m, LIMBS)``: each limb but the top keeps its low 32
    bits and passes the rest (an arithmetic shift: floor) to the next limb."""
    low = a[:, :-1]
    out = torch.cat([low & _MASK, a[:, -1:]], 1)
    out[:, 1:] += low >> 32
    return out


def _resolve(d: Tensor) -> Tensor:
    """Digits ``(m, LIMBS)`` in ``[-1, 2^32]`` (below the top) to digits in ``[0, 2^32)``:
    the carry out of limb ``i`` is a function of its carry in (-1, 0 or 1); a
    Hillis-Steele scan composes those functions (``ceil(log2 LIMBS)`` gathers) to give
    every limb its carry in at once."""
    low = d[:, :-1]
    table = (low.unsqueeze(-1) + torch.arange(-1, 2, device=d.device)) >> 32  # (m, L-1, 3)
    step = 1
    while step < table.shape[1]:
        head = table[:, :step]
        tail = torch.gather(table[:, step:], 2, table[:, :-step] + 1)
        table = torch.cat([head, tail], 1)
        step *= 2
    out_carry = table[:, :, 1]  # carry out of limb i with no carry into limb 0
    in_carry = torch.cat([torch.zeros_like(out_carry[:, :1]), out_carry[:, :-1]], 1)
    digits = low + in_carry - (out_carry << 32)
    return torch.cat([digits, d[:, -1:] + out_carry[:, -1:]], 1)


def normalise(acc: Tensor) -> Tensor:
    """The same exact sums with limbs carried into digits in ``[0, 2^32)`` and a signed top
    limb (``-1`` or ``0`` for sums within range): the canonical form, exact as float64
    (:func:`to_wire`). Counts pass unchanged. ``(…, WIDTH)`` int64."""
    shape = acc.shape
    a = acc.reshape(-1, WIDTH)
    limbs = _resolve(_carry(_carry(a[:, :LIMBS])))
    return torch.cat([limbs, a[:, LIMBS:]], 1).reshape(shape)


def _pow2(e: Tensor) -> Tensor:
    """``2.0 ** e`` exactly for int64 ``e`` in ``[-1074, 1023]`` (from the bits)."""
    normal = ((e.clamp(-1022, 1023) + 1023) << 52)
    sub = torch.ones_like(e) << (e + 1074).clamp(0, 51)
    return torch.where(e >= -1022, normal, sub).view(_F64)


def _shr(v: Tensor, s: Tensor) -> Tensor:
    """``v >> s`` for ``s >= 0``, ``v << -s`` otherwise (``|s| < 63``)."""
    return torch.where(s >= 0, v >> s.clamp_min(0), v << (-s).clamp_min(0))


def _round_magnitude(D: Tensor) -> Tensor:
    """Non-negative digits ``(m, LIMBS)`` to their correctly rounded float64 value: the top
    three digits hold the 53 bits kept, the rounding bit and part of the sticky bit."""
    m = D.shape[0]
    pos = torch.arange(LIMBS, device=D.device)
    nz = D != 0
    t = torch.where(nz, pos, 0).amax(1, keepdim=True)  # the top non-zero digit (0 if none)
    idx = torch.cat([t, t - 1, t - 2], 1)
    top3 = torch.where(idx >= 0, torch.gather(D, 1, idx.clamp_min(0)), 0)
    d0, d1, d2 = top3.unbind(1)
    sticky = (nz & (pos < t - 2)).any(1)
    e_t = torch.frexp(d0.to(_F64))[1].to(_I64)  # bit length of the top digit
    u = e_t + 2  # W = d0·2^64 + d1·2^32 + d2 shifted right by u keeps 62 bits
    X = (d0 << (62 - e_t).clamp(0, 62)) + _shr(d1, u - 32) + (d2 >> u)
    low1 = d1 & ((torch.ones_like(u) << (u - 32).clamp(0, 32)) - 1)
    low2 = d2 & ((torch.ones_like(u) << u.clamp(max=32)) - 1)
    sticky = sticky | (low1 != 0) | (low2 != 0)
    scale = 32 * (t.reshape(m) - 2) - 1074 + u  # X · 2^scale (plus the sticky part)
    drop = (-1074 - scale).clamp(min=9, max=62)  # bits below the last kept one
    kept = X >> drop
    rnd = (X >> (drop - 1)) & 1
    rest = ((X & ((torch.ones_like(drop) << (drop - 1)) - 1)) != 0) | sticky
    kept = kept + (rnd & (rest.to(_I64) | (kept & 1)))
    exp = (scale + drop).clamp(-1074, 1023)
    value = kept.to(_F64) * _pow2(exp)
    return torch.where(d0 != 0, value, torch.zeros_like(value))


#: up to this many accumulators on the CPU are rounded by :func:`round_host` (Python's exact
#: integers: a few microseconds each, where the vectorised path costs ~0.5 ms of small ops)
HOST_ROWS = 64


def round_host(acc: Tensor) -> Tensor:
    """:func:`round_sum` of CPU accumulators through Python integers, the same float64 bits:
    the limbs make the exact sum ``S·2^-1074`` with ``S = Σ_i limb_i·2^(32 i)`` an integer,
    and ``S / 2^1074`` is one correctly rounded (ties to even) integer division; beyond the
    float64 range it is ``±inf``, an exact zero ``+0.0``; NaN/±inf by the counts."""
    rows = acc.reshape(-1, WIDTH).tolist()
    out = []
    for row in rows:
        nan, pinf, ninf = row[_NAN] > 0, row[_PINF] > 0, row[_NINF] > 0
        if nan or (pinf and ninf):
            out.append(float("nan"))
            continue
        if pinf or ninf:
            out.append(float("inf") if pinf else float("-inf"))
            continue
        total = 0
        for i in range(LIMBS - 1, -1, -1):
            total = (total << 32) + row[i]
        try:
            out.append(total / _DENOMINATOR if total else 0.0)
        except OverflowError:
            out.append(float("inf") if total > 0 else float("-inf"))
    return torch.tensor(out, dtype=_F64).reshape(acc.shape[:-1])


_DENOMINATOR = 1 << 1074


def round_sum(acc: Tensor) -> Tensor:
    """The correctly rounded float64 value of accumulators ``(…, WIDTH)`` (any form: raw,
    normalised, or summed over ranks): ``(…)`` float64, NaN/±inf by the counts. A few
    accumulators on the CPU take :func:`round_host` (the same bits)."""
    shape = acc.shape[:-1]
    a = acc.reshape(-1, WIDTH)
    if a.device.type == "cpu" and a.shape[0] <= HOST_ROWS:
        return round_host(a).reshape(shape)
    m = a.shape[0]
    both = normalise(torch.cat([a, -a], 0))  # the sum and its negation, carried
    neg = both[:m, LIMBS - 1] < 0
    mag = torch.where(neg.unsqueeze(1), both[m:, :LIMBS], both[:m, :LIMBS])
    value = _round_magnitude(mag)
    value = torch.where(neg, -value, value)
    nan, pinf, ninf = a[:, _NAN] > 0, a[:, _PINF] > 0, a[:, _NINF] > 0
    inf = torch.where(pinf, float("inf"), float("-inf")).to(_F64)
    value = torch.where(pinf | ninf, inf, value)
    value = torch.where(nan | (pinf & ninf), float("nan"), value)
    return value.reshape(shape)


def to_wire(acc: Tensor) -> Tensor:
    """Accumulators as float64 for a float64 all-reduce: normalised digits (``< 2^32``) and
    counts, exact as floats; the sum over ``W`` ranks stays below ``2^53``, exact in any
    order. :func:`from_wire` undoes it."""
    return normalise(acc).to(_F64)


def from_wire(wire: Tensor) -> Tensor:
    """Summed :func:`to_wire` vectors back to int64 accumulators (``(…, WIDTH)``)."""
    return wire.to(_I64).reshape(*wire.shape[:-1], WIDTH)


def query_sums(values: Tensor, offsets: Tensor) -> Tensor:
    """Per-query sums, each in its query's row order from 0 (``((0 + x_0) + x_1) + …``):
    ``values`` ``(n,)`` or ``(m, n)`` float, ``offsets`` ``(G + 1,)`` the queries' CSR
    offsets; returns ``(G,)`` or ``(m, G)`` in the values' dtype (empty queries: 0)."""
    off = offsets.to(device=values.device, dtype=_I64)

    def one(v: Tensor) -> Tensor:  # (n, 1): the sequential kernel on every device
        return torch.segment_reduce(v.unsqueeze(1), "sum", offsets=off, axis=0,
                                    unsafe=True)[:, 0]

    return one(values) if values.dim() == 1 else torch.stack([one(v) for v in values])


def query_accumulate(values: Tensor, offsets: Optional[Tensor] = None) -> Tensor:
    """The accumulators of order-free sums of per-document values: per-query sums in row
    order (:func:`query_sums`; ``offsets`` ``None``: each value its own term), accumulated
    exactly over the queries. ``(n,)`` → ``(WIDTH,)``, ``(m, n)`` → ``(m, WIDTH)``."""
    x = values.detach().to(_F64)
    parts = x if offsets is None else query_sums(x, offsets)
    return accumulate(parts)


class ExactSum(torch.autograd.Function):
    """``Σ x`` correctly rounded (:func:`accumulate` + :func:`round_sum`) over the last
    dimension, differentiable: the gradient of a sum is the output's gradient broadcast,
    itself differentiable (double backward works)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        ctx.shape = x.shape
        acc = accumulate(x.reshape(-1, x.shape[-1]) if x.dim() != 1 else x)
        return round_sum(acc).reshape(x.shape[:-1]).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad.unsqueeze(-1).expand(ctx.shape)


def exact_sum(values: Tensor) -> Tensor:
    """``Σ values`` over the last dimension, correctly rounded and order-free, in the values'
    dtype (float64 arithmetic), differentiable (:class:`ExactSum`). ``(…, n)`` → ``(…)``."""
    if values.dim() == 0:
        return values
    if values.shape[-1] == 0:
        return values.sum(-1)
    return ExactSum.apply(values)


def exact_mean(values: Tensor) -> Tensor:
    """:func:`exact_sum` divided by the count (NaN for no values), differentiable."""
    n = values.shape[-1] if values.dim() else 1
    return exact_sum(values) / n if n else values.sum(-1) / 0.0
