"""The pure-torch tree backend: the reference every other backend equals bit for bit, and the
path that runs on CUDA (and on CPU where the compiled kernels cannot be built): tree growth,
oblivious levels (:mod:`.levels`), traversal, prediction and bin coding in torch ops.

The growth (see :mod:`.base`) is the batched best-first growth of :mod:`.frontier`, in int64
fixed point (:mod:`.fixed_point`), a bounded number of host synchronisations per tree; its two
primitives, :meth:`TorchBackend.batch_histograms` (the histograms of a batch of nodes in one
pass over the rows, by a per-row node slot) and :meth:`TorchBackend.route_rows` (every row's
leaf id moved by one step of splits), are torch ops here: a device kernel overrides them.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import torch
from torch import Tensor

from . import frontier, levels
from .base import GrownTree, Level, Reduce, TreeParams, Unavailable
from .fixed_point import FixedPoint
from .histogram import compact_reducer, histogram

__all__ = ["TorchBackend", "scatter_int64", "scatter_packed"]

_CODE_CHUNK = 1 << 16  # rows coded at once by apply_bins (bounds its (F, chunk) temporaries)
_CPU_CHUNK = 1 << 11  # rows per histogram scatter on CPU (the (F, chunk) index in cache)
_DEV_CHUNK = 1 << 20
_GROUP = 1 << 22  # rows gathered at once (bounds the (rows, F) codes gathered)


class TorchBackend:
    """Tree growth and traversal in torch ops, on any device (see the module docstring)."""

    name = "torch"

    def unavailable(self, *, device: torch.device, data_dtype: torch.dtype,
                    num_rows: int) -> Optional[Unavailable]:
        return None  # any device, any codes

    def grow(self, prepared: Any, fixed: FixedPoint, rows: Optional[Tensor], feat_ok: Tensor, *,
             params: TreeParams, reduce: Optional[Reduce]) -> GrownTree:
        """The batched best-first growth of :mod:`.frontier` on the fit's fixed point
        ``fixed`` (:mod:`.fixed_point`), through :meth:`batch_histograms` and
        :meth:`route_rows`; ``leaf_sums`` (L, 3) int64 ``(Σ q_wt, Σ q_w, rows)`` over the
        ranks."""
        return frontier.grow_tree(self, prepared, fixed.q, fixed.scale, rows, feat_ok,
                                  params=params, reduce=compact_reducer(prepared, "3FS", reduce),
                                  bits=fixed.bits)

    def batch_histograms(self, prepared: Any, q: Tensor, slot: Tensor, num_slots: int, *,
                         max_rows: Optional[int] = None, bits: Optional[int] = None) -> Tensor:
        """:meth:`.base.BatchPrimitives.batch_histograms` in torch ops: the rows with a slot
        compacted (``torch.nonzero_static`` to ``max_rows``; on the CPU sorted by slot, one
        node's bins at a time), their codes offset by ``slot·S`` and scattered per feature
        (:func:`scatter_int64`; quantized channels of ``bits`` bits packed two to a lane), in
        groups of ``2^22`` rows (``2^(31 - bits)`` when packed)."""
        codes = prepared.codes
        n, F = codes.shape
        S = prepared.missing_code + 1
        cpu = codes.device.type == "cpu"
        acc = torch.zeros((3, F, (num_slots + 1) * S), dtype=torch.int64, device=codes.device)
        rows = None
        if max_rows is not None and max_rows < n:
            rows = torch.nonzero_static(slot >= 0, size=max(int(max_rows), 0),
                                        fill_value=-1).squeeze(1)
            if cpu and num_slots > 1:  # sorted by slot: one node's bins at a time, in cache
                key = torch.where(rows >= 0, slot.index_select(0, rows.clamp(min=0)), -1)
                rows = rows.index_select(0, torch.argsort(key, stable=True))
        m = n if rows is None else rows.numel()
        group = _GROUP if bits is None else min(_GROUP, 1 << (31 - bits))
        for g in range(0, m, group):
            if rows is None:
                c, v, sl = codes[g:g + group], q[g:g + group], slot[g:g + group]
            else:
                r = rows[g:g + group]
                rc = r.clamp(min=0)
                c, v = codes.index_select(0, rc), q.index_select(0, rc)
                sl = torch.where(r >= 0, slot.index_select(0, rc), -1)
            offset = torch.where(sl >= 0, sl, num_slots).long() * S  # slot −1: a spare slot
            if bits is None:
                scatter_int64(acc, c, v, offset)
            else:
                scatter_packed(acc, c, v, offset, bits)
        out = acc.view(3, F, num_slots + 1, S)[:, :, :num_slots]
        return out.permute(2, 0, 1, 3).contiguous()

    def route_rows(self, prepared: Any, leaf: Tensor, feature: Tensor, bin: Tensor,
                   default_left: Tensor, right_id: Tensor) -> Tensor:
        """:meth:`.base.BatchPrimitives.route_rows` in torch ops: each row's leaf's split
        (one gather of the stacked tables), its code, one comparison."""
        table = torch.stack([feature, bin, default_left.long(), right_id.long()], 1)
        t = table.index_select(0, leaf.clamp(min=0))  # (n, 4): each row's leaf's split
        code = prepared.codes.gather(1, t[:, :1]).squeeze(1)
        right = torch.where(code == prepared.missing_code, t[:, 2] == 0, code > t[:, 1])
        return torch.where(right & (t[:, 3] >= 0) & (leaf >= 0), t[:, 3].to(leaf.dtype), leaf)

    @staticmethod
    def _walk(tree, n: int, go_left_fn, device) -> Tensor:
        """All rows walk down together, one vectorised step per tree level."""
        if tree.split_feature.numel() == 0:
            return torch.zeros(n, dtype=torch.int64, device=device)
        node = torch.zeros(n, dtype=torch.int64, device=device)
        for _ in range(tree.depth):
            active = node >= 0
            nid = node.clamp(min=0)
            f = tree.split_feature[nid]
            gl = go_left_fn(nid, f)
            nxt = torch.where(gl, tree.left_child[nid], tree.right_child[nid])
            node = torch.where(active, nxt, node)
        return ~node

    def leaves_from_codes(self, tree: Any, codes: Tensor) -> Tensor:
        miss = tree.missing_code

        def go_left(nid, f):
            c = codes.gather(1, f.unsqueeze(1)).squeeze(1).to(torch.int64)
            return torch.where(c == miss, tree.default_left[nid], c <= tree.threshold_bin[nid])

        return self._walk(tree, codes.shape[0], go_left, codes.device)

    def leaves_from_raw(self, tree: Any, X: Tensor) -> Tensor:
        def go_left(nid, f):
            x = X.gather(1, f.unsqueeze(1)).squeeze(1)
            return torch.where(torch.isnan(x), tree.default_left[nid], x <= tree.threshold[nid])

        return self._walk(tree, X.shape[0], go_left, X.device)

    def predict_trees(self, trees: Sequence, weights: Sequence[float], X: Tensor, out: Tensor, *,
                      cache: dict) -> None:
        for tree, w in zip(trees, weights):
            leaf = self.leaves_from_raw(tree, X.to(dtype=tree.threshold.dtype))
            out += w * tree.leaf_value.to(leaf.device)[leaf].to(torch.float64)

    def apply_bins(self, X: Tensor, edges: Tensor, *, missing_code: int,
                   dtype: torch.dtype) -> Tensor:
        n, F = X.shape
        out = torch.empty((n, F), dtype=dtype, device=X.device)
        for s in range(0, n, _CODE_CHUNK):  # chunks bound the (F, chunk) int64 temporaries
            xc = X[s : s + _CODE_CHUNK].t().contiguous()  # (F, m)
            c = torch.searchsorted(edges, xc, side="left")
            c.masked_fill_(torch.isnan(xc), missing_code)
            out[s : s + _CODE_CHUNK] = c.t()
        return out

    def level_histograms(self, prepared: Any, values: Tensor, rows: Tensor, counts: List[int],
                         build: List[int], *, reduce: Optional[Reduce]) -> Tensor:
        codes = prepared.codes
        F, S = codes.shape[1], prepared.missing_code + 1
        out = torch.empty((len(counts), 3, F, S), dtype=torch.int64, device=codes.device)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        for j in build:
            out[j] = histogram(codes, rows[starts[j]:starts[j + 1]], values, slots=S)
        levels.sum_built(out, build, reduce)
        return out

    def best_level(self, hists: Tensor, prepared: Any, feat_ok: Tensor, miss: Tensor, *,
                   params: TreeParams, scale: Tensor) -> Optional[Level]:
        return levels.search(hists, prepared, feat_ok, miss, params=params, scale=scale)


def _indices(codes: Tensor, offset: Tensor):
    """``(s, e, idx)`` per chunk of the rows of ``codes`` (m, F): ``idx`` (F, e − s) int64
    ``offset[r] + code[r, f]`` (one reused buffer)."""
    m, F = codes.shape
    chunk = _CPU_CHUNK if codes.device.type == "cpu" else _DEV_CHUNK
    buf = torch.empty((F, min(chunk, m)), dtype=torch.int64, device=codes.device)
    for s in range(0, m, chunk):
        e = min(m, s + chunk)
        idx = buf[:, :e - s]
        torch.add(codes[s:e].t(), offset[s:e].unsqueeze(0), out=idx)
        yield s, e, idx


def scatter_int64(acc: Tensor, codes: Tensor, v: Tensor, offset: Tensor) -> None:
    """``acc[:, f, offset[r] + codes[r, f]] += (v[r, 0], v[r, 1], 1)`` for every row ``r`` of
    ``codes`` (m, F): ``acc`` (3, F, W) int64, ``v`` (m, 2) int64, ``offset`` (m,) int64. One
    int64 ``scatter_add_`` per channel (exact; the device path)."""
    F = acc.shape[1]
    ones = torch.ones(v.shape[0], dtype=torch.int64, device=acc.device)
    for s, e, idx in _indices(codes, offset):
        for j in range(2):
            acc[j].scatter_add_(1, idx, v[s:e, j].unsqueeze(0).expand(F, e - s))
        acc[2].scatter_add_(1, idx, ones[s:e].unsqueeze(0).expand(F, e - s))


def scatter_packed(acc: Tensor, codes: Tensor, v: Tensor, offset: Tensor, bits: int) -> None:
    """:func:`scatter_int64` of quantized channels (``|v[:, 0]| < 2^(bits-1)``, ``0 <=
    v[:, 1] < 2^bits``, at most ``2^(31 - bits)`` rows): both in one int64 lane,
    ``v[:, 0] + bias`` in the low and ``v[:, 1]`` in the high 32 bits (``bias = 2^(bits-1)
    − 1``; no field can overflow), one ``scatter_add_`` for the pair and one for the counts,
    then the fields added to ``acc`` (the same sums)."""
    if v.shape[0] << bits >= 1 << 31:
        raise ValueError(f"scatter_packed: at most 2^{31 - bits} rows, got {v.shape[0]}")
    F = acc.shape[1]
    bias = (1 << (bits - 1)) - 1
    lane = torch.add(v[:, 0], bias).bitwise_or_(v[:, 1] << 32)
    packed = torch.zeros_like(acc[0])
    count = torch.zeros_like(acc[2])
    ones = torch.ones(v.shape[0], dtype=torch.int64, device=acc.device)
    for s, e, idx in _indices(codes, offset):
        packed.scatter_add_(1, idx, lane[s:e].unsqueeze(0).expand(F, e - s))
        count.scatter_add_(1, idx, ones[s:e].unsqueeze(0).expand(F, e - s))
    acc[0] += (packed & 0xFFFFFFFF) - bias * count
    acc[1] += packed >> 32
    acc[2] += count
