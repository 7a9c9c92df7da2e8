"""The one segment log-sum-exp of the library, its scans and ``-inf``-safe helpers.

Everything works in log space on flat ragged tensors (documents of a query, or label-level
buckets of a query, contiguous or addressed by an index):

* :func:`seg_lse` — ``out[k] = log Σ_{index == k} exp(x)``; empty or all ``-inf`` segments
  give ``-inf``. :meth:`Groups.segment_logsumexp` is this function with the query index.
* :func:`seg_scan_lse` — exclusive segmented log-cum-sum-exp (Hillis–Steele, ``⌈log2 L⌉``
  steps), ``reverse=True`` for suffixes.
* :func:`excl_logcumsumexp` / :func:`excl_cumsum` — the same scans along the level axis of a
  dense ``(G, K)`` table of (query, level) cells.

**-inf safety.** Empty sets give ``log 0 = -inf`` (the top level has nothing above it, a
query with one grade has no pairs, zero weights). ``torch.logaddexp(-inf, -inf)`` and a
max-shifted ``logsumexp`` of an all ``-inf`` segment have NaN gradients (``0 · inf``). The
reductions here use the "double-where" trick: invalid inputs are replaced by 0 *before* the
exponential and the results masked *after*, so values are exact ``-inf`` where they should
be and every gradient is finite — through double backward too.
"""

from __future__ import annotations

from typing import Optional, Protocol

import torch
from torch import Tensor

__all__ = ["NEG_INF", "acc_dtype", "seg_lse", "safe_logaddexp", "lse_n", "mask_inf",
           "seg_scan_lse", "seg_lse_into", "signed_exp_diff", "signed_exp_diff_into",
           "excl_logcumsumexp", "excl_cumsum"]

NEG_INF = float("-inf")


class Segments(Protocol):
    """What a segmented scan reads of its segments (:class:`~torchrankboost.groups.Groups`
    has it): each element's ``position`` in its segment ``(n,)``, the longest segment's
    ``max_size``, and the same segments with every one reversed."""

    @property
    def position(self) -> Tensor: ...

    @property
    def max_size(self) -> int: ...

    def reversed(self) -> "Segments": ...


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float64 stays float64, everything else computes in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def seg_lse(x: Tensor, index: Tensor, num: int) -> Tensor:
    """``out[k] = log Σ_{index == k} exp(x)`` along dim 0: ``x`` ``(n, *rest)``, ``index``
    ``(n,)`` int64 in ``[0, num)`` (need not be sorted), ``out`` ``(num, *rest)``.

    Empty and all ``-inf`` segments give ``-inf`` with finite (zero) gradients (the
    double-where trick); a NaN input makes its segment NaN. Differentiable twice, and free
    of data-dependent control flow (``torch.func`` transforms such as ``vmap`` apply).
    """
    xd = x.detach()
    shape = (num,) + tuple(x.shape[1:])
    idx = index if x.dim() == 1 else index.view((-1,) + (1,) * (x.dim() - 1)).expand_as(x)
    m = torch.full(shape, NEG_INF, dtype=x.dtype, device=x.device)
    m = m.scatter_reduce(0, idx, xd, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    if not x.requires_grad:  # values only: the masks below change no value (see _lean)
        return _seg_lse_values(x, index, m)
    valid = xd != NEG_INF
    z = torch.where(valid, x, torch.zeros_like(x)) - m[index]
    e = torch.where(valid, torch.exp(torch.where(valid, z, torch.zeros_like(z))),
                    torch.zeros_like(z))
    s = torch.zeros(shape, dtype=x.dtype, device=x.device).index_add(0, index, e)
    empty = s == 0
    return torch.where(empty, torch.full_like(s, NEG_INF),
                       torch.log(torch.where(empty, torch.ones_like(s), s)) + m)


# _lean: without autograd the masks of the double-where trick change no value, so
# seg_lse and safe_logaddexp skip them, bit for bit: a -inf input gives exp(-inf - m) = 0
# where the mask gave 0, an empty (or all -inf) segment log(0) + 0 = -inf where the mask
# gave -inf, and NaN / +inf inputs give NaN / +inf either way (the shift m is then NaN or
# +inf, or 0 with an infinite exponential).


def _seg_lse_values(x: Tensor, index: Tensor, m: Tensor, work: Optional[Tensor] = None
                    ) -> Tensor:
    """The values-only tail of :func:`seg_lse` (``m``: the finite segment maxima
    ``(num, *rest)``): ``log Σ exp(x - m[index]) + m`` with ``x - m[index]`` and its
    exponential in one buffer, ``work`` (shaped like ``x``, overwritten; ``None``: a new
    one). The same kernels as ``torch.exp(x - m[index])``, in place: the same bits."""
    buf = m[index] if work is None else torch.index_select(m, 0, index, out=work)
    torch.sub(x, buf, out=buf)
    buf.exp_()
    s = torch.zeros(m.shape, dtype=x.dtype, device=x.device).index_add(0, index, buf)
    return torch.log(s) + m


def seg_lse_into(x: Tensor, index: Tensor, num: int, work: Tensor) -> Tensor:
    """:func:`seg_lse` of a 1-D ``x`` that needs no gradient, with ``work`` ``(n,)`` (not ``x``;
    overwritten) as its one ``(n,)`` temporary: bit for bit ``seg_lse(x, index, num)``."""
    m = torch.full((num,), NEG_INF, dtype=x.dtype, device=x.device)
    m = m.scatter_reduce(0, index, x, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return _seg_lse_values(x, index, m, work)


def safe_logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """``log(e^a + e^b)`` with finite gradients when both are ``-inf`` (result ``-inf``)."""
    m = torch.maximum(a, b).detach()
    both = m == NEG_INF
    zero = torch.zeros_like(m)
    m = torch.where(both, zero, m)
    if not (a.requires_grad or b.requires_grad):  # values only (see _lean)
        return torch.log(torch.exp(a - m) + torch.exp(b - m)) + m
    a0 = torch.where(a > NEG_INF, a, zero) - m
    b0 = torch.where(b > NEG_INF, b, zero) - m
    ea = torch.where(a > NEG_INF, torch.exp(torch.where(a > NEG_INF, a0, zero)), zero)
    eb = torch.where(b > NEG_INF, torch.exp(torch.where(b > NEG_INF, b0, zero)), zero)
    s = ea + eb
    return torch.where(both, torch.full_like(m, NEG_INF),
                       torch.log(torch.where(both, torch.ones_like(s), s)) + m)


def lse_n(*xs: Tensor) -> Tensor:
    """Elementwise log-sum-exp of several same-shape tensors (``-inf``-safe)."""
    out = xs[0]
    for x in xs[1:]:
        out = safe_logaddexp(out, x)
    return out


def mask_inf(x: Tensor, valid: Tensor) -> Tensor:
    """``x`` where ``valid``, else ``-inf`` (used to kill ``0 · (-inf)`` products)."""
    return torch.where(valid, x, torch.full_like(x, NEG_INF))


def seg_scan_lse(v: Tensor, groups: Segments, *, reverse: bool = False,
                 exclusive: bool = True) -> Tensor:
    """Segmented log-cum-sum-exp: ``out[i] = log Σ_{j < i in i's segment} e^{v_j}``
    (``j ≤ i`` with ``exclusive=False``).

    ``reverse=True`` sums over ``j > i`` (``j ≥ i``) instead. Hillis–Steele scan
    (``ceil(log2 L)`` steps of :func:`safe_logaddexp`), exact in log space, ``-inf``-safe,
    differentiable to any order without NaN (autograd Hessians, ``gradgradcheck``).
    """
    if reverse:
        return seg_scan_lse(v.flip(0), groups.reversed(), exclusive=exclusive).flip(0)
    pos = groups.position.to(v.device)
    out = v
    step = 1
    L = groups.max_size
    while step < L:
        shifted = torch.cat([out.new_full((step,), NEG_INF), out[:-step]])
        shifted = torch.where(pos >= step, shifted, torch.full_like(shifted, NEG_INF))
        out = safe_logaddexp(out, shifted)
        step *= 2
    if not exclusive:
        return out
    prev = torch.cat([out.new_full((1,), NEG_INF), out[:-1]])
    return torch.where(pos > 0, prev, torch.full_like(prev, NEG_INF))


def signed_exp_diff(lo: Tensor, hi: Tensor) -> Tensor:
    """``exp(lo) - exp(hi)`` without ``inf - inf``: ``±exp(max + log1p(-exp(-|lo - hi|)))``.

    Finite or ``±inf`` (when the difference itself overflows), never NaN. Under grad mode
    (double backward) the plain differentiable difference is used instead.
    """
    if torch.is_grad_enabled() and (lo.requires_grad or hi.requires_grad):
        return torch.exp(lo) - torch.exp(hi)
    return signed_exp_diff_into(lo, hi, None)


def signed_exp_diff_into(lo: Tensor, hi: Tensor, work: Optional[Tensor]) -> Tensor:
    """:func:`signed_exp_diff` without autograd in two buffers: the result (new) and
    ``work`` (shaped like the result, not ``lo`` or ``hi``; overwritten; ``None``: a new one),
    each op in place or through ``out=``: the same kernels as ``m0 = where(fin, m, 0)``,
    ``mn0 = where(fin, mn, 0)``, ``mag = where(fin, exp(m0 + log1p(-exp(mn0 - m0))), 0)``,
    ``where(lo >= hi, mag, -mag)``, so the same bits."""
    m = torch.maximum(lo, hi)
    mn = torch.minimum(lo, hi) if work is None else torch.minimum(lo, hi, out=work)
    fin = m > NEG_INF
    zero = m.new_zeros(())
    torch.where(fin, m, zero, out=m)
    torch.where(fin, mn, zero, out=mn)
    torch.sub(mn, m, out=mn)
    mn.exp_().neg_().log1p_()
    torch.add(m, mn, out=m)
    m.exp_()
    torch.where(fin, m, zero, out=m)
    torch.neg(m, out=mn)
    return torch.where(lo >= hi, m, mn, out=m)


def excl_logcumsumexp(x: Tensor, reverse: bool = False) -> Tensor:
    """Exclusive log-cum-sum-exp along dim 1 of a ``(G, K)`` table: ``out[:, k] = log Σ_{k' <
    k} e^{x[:, k']}`` (``k' > k`` with ``reverse=True``), ``-inf`` in the first (last) column."""
    if reverse:
        return excl_logcumsumexp(x.flip(1)).flip(1)
    c = torch.logcumsumexp(x, 1)
    return torch.cat([torch.full_like(c[:, :1], NEG_INF), c[:, :-1]], 1)


def excl_cumsum(x: Tensor) -> Tensor:
    """Exclusive cumulative sum along dim 1 of a ``(G, K)`` table (no subtraction, so no
    cancellation)."""
    return torch.cat([torch.zeros_like(x[:, :1]), torch.cumsum(x[:, :-1], 1)], 1)
