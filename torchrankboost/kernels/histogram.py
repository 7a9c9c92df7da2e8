"""The node histogram of the histogram learners (trees, stumps): one function, every device.

For a set of rows (a tree node, or all rows) and per-row int64 channels ``values`` (n, k) (the
fixed point of :mod:`.fixed_point`), the histogram holds, per feature ``f`` and bin code
``b``, the integer sums of the channels over the rows whose code of ``f`` is ``b``:

    hist[j, f, b] = Σ_{r in rows, codes[r, f] = b} values[r, j]        (j < k)
    hist[k, f, b] = #{r in rows : codes[r, f] = b}                      (the count channel)

all int64: exact, so the same on every device, for any order of the rows and any split of
them over the ranks (the compiled kernels of ``trees.c`` hold the same sums in an (F, S, 3)
layout). How: the rows' bin codes (m, F) are gathered, transposed to an int64 (F, m) index and
scattered with ``scatter_add_`` along the bin axis into (F, slots) accumulators (one launch
per channel, features in parallel; integer additions, so the atomics of a GPU give the same
sums). Rows are processed in chunks of 2048 rows on CPU (the (F, 2048) int64 index stays in
cache, measured ~3x faster than 65536-row chunks), 2^20 rows on other devices.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

__all__ = ["histogram", "all_rows_count", "compact_reducer"]

_CPU_CHUNK = 1 << 11  # small chunks keep the (F, chunk) int64 index in cache: ~3x faster than 1 << 16
_DEV_CHUNK = 1 << 20


def histogram(codes: Tensor, rows: Optional[Tensor], values: Tensor, *, slots: int,
              count: Union[None, str, Tensor] = "scatter") -> Tensor:
    """Per-feature integer histograms of ``values`` (and row counts) over the bin codes of
    ``rows``.

    Args:
        codes: (n, F) integer bin codes (uint8 or int16), each ``< slots``.
        rows: (m,) int64 row indices, or ``None`` for all n rows (no gather).
        values: (n, k) int64 per-row channels (e.g. :attr:`.fixed_point.FixedPoint.q`).
        slots: number of code slots (max code + 1).
        count: the count channel: ``"scatter"`` (counted), ``None`` (no count channel), or
            an (F, slots) int64 tensor (the counts when already known, e.g.
            :func:`all_rows_count`).

    Returns:
        ``(k + 1, F, slots)`` int64 (``(k, F, slots)`` with ``count=None``).
    """
    n, F = codes.shape
    if values.dtype != torch.int64:
        raise ValueError(f"values: expected int64 channels (fixed point), got {values.dtype}")
    k = values.shape[1]
    m = n if rows is None else rows.numel()
    out = torch.zeros((k + (count is not None), F, slots), dtype=torch.int64, device=codes.device)
    scatter_count = isinstance(count, str) and count == "scatter"
    if m > 0:
        _accumulate(codes, rows, values, out, scatter_count)
    if isinstance(count, Tensor):
        out[k] = count
    return out


def _accumulate(codes: Tensor, rows: Optional[Tensor], values: Tensor, out: Tensor,
                scatter_count: bool) -> None:
    """The chunked scatter of :func:`histogram` into ``out`` (channels first)."""
    n, F = codes.shape
    dev = codes.device
    k = values.shape[1]
    m = n if rows is None else rows.numel()
    chunk = _CPU_CHUNK if dev.type == "cpu" else _DEV_CHUNK
    idx_buf = torch.empty((F, min(chunk, m)), dtype=torch.int64, device=dev)
    ones = torch.ones(min(chunk, m), dtype=torch.int64, device=dev) if scatter_count else None
    for s in range(0, m, chunk):
        r = None if rows is None else rows[s : s + chunk]
        c = codes[s : s + chunk] if r is None else codes.index_select(0, r)
        mc = c.shape[0]
        idx = idx_buf[:, :mc]
        idx.copy_(c.t())
        vals = values[s : s + mc] if r is None else values.index_select(0, r)
        for j in range(k):
            out[j].scatter_add_(1, idx, vals[:, j].unsqueeze(0).expand(F, mc))
        if scatter_count:
            out[k].scatter_add_(1, idx, ones[:mc].unsqueeze(0).expand(F, mc))


def all_rows_count(prepared, slots: int) -> Tensor:
    """(F, slots) int64 row counts per bin over all rows of ``prepared`` (a
    ``BinnedFeatures``): the same for every fit on it (cached there)."""
    codes = prepared.codes
    count = prepared.cache.get(("count", slots))
    if count is None or count.device != codes.device:
        no_values = torch.empty((codes.shape[0], 0), dtype=torch.int64, device=codes.device)
        count = histogram(codes, None, no_values, slots=slots)[0]
        prepared.cache[("count", slots)] = count
    return count


def compact_reducer(prepared, layout: str, sum_):
    """The sum over ranks of a data-parallel fit's node histograms and leaf sums, compacted:
    ``reduce(buf)`` in place on an int64 (or any) buffer, or ``None`` when ``sum_`` is ``None`` (one
    process: nothing to sum).

    Args:
        prepared: the ``BinnedFeatures`` of the fit.
        layout: ``"FS3"`` (the compiled kernels' (F, S, 3) histograms) or ``"3FS"`` (the
            torch path's (3, F, S)).
        sum_: the context's in-place all-reduce sum (``DistContext.sum_hook()``).

    A node histogram (``F·S·3`` values) travels compacted: only the slots that can hold rows —
    the value bins ``0 .. num_bins[f] − 1`` of each feature and the missing slot of the
    features with NaNs on some rank (``has_missing``, agreed by the binning) — the others
    being 0 on every rank (``Σ num_bins / (F·S)`` of the volume, about 0.7 for LETOR-like
    features). Other buffers (the leaf sums) are summed whole.
    """
    if sum_ is None:
        return None
    key = ("reduce_slots", layout)
    idx = prepared.cache.get(key)
    F, S = prepared.codes.shape[1], prepared.missing_code + 1
    if idx is None:
        nb = prepared.num_bins.to("cpu")
        used = torch.arange(S).unsqueeze(0) < nb.unsqueeze(1)  # (F, S)
        used[:, S - 1] = prepared.has_missing.to("cpu")
        mask = used.unsqueeze(2).expand(F, S, 3) if layout == "FS3" else used.expand(3, F, S)
        idx = prepared.cache[key] = mask.reshape(-1).nonzero().squeeze(1).to(prepared.device)
    size = F * S * 3

    def reduce(buf: Tensor) -> Tensor:
        if buf.numel() != size or not buf.is_contiguous():
            return sum_(buf)
        flat = buf.view(-1)
        at = idx if idx.device == flat.device else idx.to(flat.device)
        flat.index_copy_(0, at, sum_(flat.index_select(0, at)))
        return buf

    return reduce
