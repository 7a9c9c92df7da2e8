"""The Triton tree backend: the torch reference (:class:`~.torch_backend.TorchBackend`) with
its data-parallel primitives replaced by Triton kernels (:mod:`.triton_kernels`), the same
results bit for bit.

* :meth:`TritonBackend.batch_histograms`: ``(num_slots, 3, F, S)`` int64 sums
  ``(Σ q_wt, Σ q_w, count)`` of the rows of each node slot, from integer atomics (exact: the
  same for any order of the additions, so deterministic on the GPU);
* :meth:`TritonBackend.route_rows`: every row of a split leaf to its child, in one pass;
* :meth:`TritonBackend.apply_bins`, :meth:`TritonBackend.leaves_from_codes`,
  :meth:`TritonBackend.leaves_from_raw`, :meth:`TritonBackend.predict_trees`: the protocol's,
  with the reference's comparisons and float64 sums.

Tree growth is inherited from the torch backend (its batched grower calls the two
primitives on the backend, so that here they are these kernels). Where it runs: on a CUDA device when ``triton`` imports; on the CPU
only through Triton's interpreter (``TRITON_INTERPRET=1`` set before ``triton`` is
imported) and only when asked for by name (``kernel="triton"``; ``"auto"`` takes it on CUDA
devices alone), which is how the tests check the kernels without a GPU.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from .base import Unavailable
from .torch_backend import TorchBackend

__all__ = ["TritonBackend", "kernels", "pack_trees"]

_CODES = (torch.uint8, torch.int16)
_FLOATS = (torch.float32, torch.float64)
_HISTOGRAMS = ("atomic", "sorted")
_BLOCK_N, _BLOCK_F = 128, 16  # rows and features of a 2-D program tile
_ROUTE_BLOCK = 512  # rows of a 1-D program (routing, traversal, prediction)


def kernels():
    """The :mod:`.triton_kernels` module (imported on first use: compiled or interpreted as
    ``TRITON_INTERPRET`` said when ``triton`` was imported); ``ImportError`` without
    ``triton``."""
    return importlib.import_module(".triton_kernels", __package__)


def _grid(n: int, block: int) -> int:
    return max(1, -(-n // block))


class TritonBackend(TorchBackend):
    """Tree kernels in Triton (see the module docstring). ``histogram``: ``"atomic"`` (three
    global int64 atomics per (row, feature)) or ``"sorted"`` (per block and feature, the
    rows' keys sorted and each run of equal keys summed first: one atomic per channel and
    distinct bin of the block)."""

    name = "triton"
    #: the device types on which ``kernel="auto"`` may take this backend
    auto_devices = ("cuda",)

    def __init__(self, *, histogram: str = "atomic"):
        if histogram not in _HISTOGRAMS:
            raise ValueError(f"histogram: expected one of {_HISTOGRAMS}, got {histogram!r}")
        self.histogram = histogram

    def unavailable(self, *, device: torch.device, data_dtype: torch.dtype,
                    num_rows: int) -> Optional[Unavailable]:
        device = torch.device(device)
        if device.type not in ("cuda", "cpu"):
            return Unavailable(f"the data are on {device.type}; the Triton kernels run on CUDA")
        if data_dtype not in _CODES + _FLOATS:
            return Unavailable(f"the data are {data_dtype}, not uint8 / int16 codes or "
                               f"float32 / float64 features")
        if num_rows >= 2 ** 31 - 1:
            return Unavailable("more than 2^31 rows")
        try:
            k = kernels()
        except Exception as exc:  # ImportError, or a broken install
            return Unavailable(f"triton is not installed ({type(exc).__name__}: {exc})")
        if not k.CONSISTENT:
            return Unavailable("triton was imported with another TRITON_INTERPRET than its "
                               "kernels here")
        if device.type == "cpu" and not k.INTERPRETED:
            return Unavailable("CPU tensors need TRITON_INTERPRET=1 (Triton's interpreter) set "
                               "before triton is imported")
        if device.type == "cuda" and k.INTERPRETED:
            return Unavailable("triton was imported under TRITON_INTERPRET=1 (the "
                               "interpreter), not compiled for the GPU")
        return None

    def batch_histograms(self, prepared: Any, q: Tensor, slot: Tensor, num_slots: int, *,
                         max_rows: Optional[int] = None, bits: Optional[int] = None) -> Tensor:
        """``(num_slots, 3, F, S)`` int64 histograms, ``S = missing_code + 1``: for node slot
        ``s``, feature ``f`` and code ``c``, ``(Σ q[i, 0], Σ q[i, 1], #i)`` over the rows ``i``
        with ``slot[i] = s`` and ``codes[i, f] = c`` (``slot`` (n,) int32, ``-1``: no node;
        ``q`` (n, 2) int64 fixed-point channels). Exact integer sums (int64 wrap-around
        arithmetic: any order of the additions gives the same bits). ``max_rows`` (an upper
        bound of the rows with a slot) is not needed here: the grid covers every row;
        quantized channels (``bits``) take the same int64 atomics."""
        codes = prepared.codes
        n, F = codes.shape
        S = prepared.missing_code + 1
        _check_rows(codes, q=(q, (n, 2), torch.int64), slot=(slot, (n,), torch.int32))
        out = torch.zeros((num_slots, 3, F, S), dtype=torch.int64, device=codes.device)
        if n == 0 or F == 0 or num_slots == 0:
            return out
        k = kernels()
        grid = (_grid(n, _BLOCK_N), _grid(F, _BLOCK_F))
        args = (codes.contiguous(), q.contiguous(), slot.contiguous(), out, n, F, S, num_slots)
        if self.histogram == "atomic":
            k.hist_atomic_kernel[grid](*args, BLOCK_N=_BLOCK_N, BLOCK_F=_BLOCK_F)
        else:
            k.hist_sorted_kernel[grid](*args, BLOCK_N=_BLOCK_N, BLOCK_F=_BLOCK_F,
                                       LOG_N=_BLOCK_N.bit_length() - 1)
        return out

    def route_rows(self, prepared: Any, leaf: Tensor, feature: Tensor, bin: Tensor,
                   default_left: Tensor, right_id: Tensor) -> Tensor:
        """``(n,)`` int32 leaf ids after a batch of splits: a row of leaf ``l`` with
        ``right_id[l] >= 0`` (``l`` split on ``feature[l]`` at ``bin[l]``) keeps ``l`` when
        ``code <= bin[l]`` or its code is the missing code and ``default_left[l]``, and takes
        ``right_id[l]`` otherwise; every other row keeps its id (``leaf`` (n,) int32; the
        split tables (L,): int64, int64, bool, int32)."""
        codes = prepared.codes
        n, F = codes.shape
        L = right_id.numel()
        _check_rows(codes, leaf=(leaf, (n,), torch.int32), right_id=(right_id, (L,), torch.int32),
                    feature=(feature, (L,), torch.int64), bin=(bin, (L,), torch.int64),
                    default_left=(default_left, (L,), torch.bool))
        out = torch.empty_like(leaf)
        if n == 0:
            return out
        kernels().route_kernel[(_grid(n, _ROUTE_BLOCK),)](
            codes.contiguous(), leaf.contiguous(), feature.contiguous(), bin.contiguous(),
            default_left.contiguous().view(torch.uint8), right_id.contiguous(), out, n, F, L,
            prepared.missing_code, BLOCK_N=_ROUTE_BLOCK)
        return out

    def apply_bins(self, X: Tensor, edges: Tensor, *, missing_code: int,
                   dtype: torch.dtype) -> Tensor:
        """The protocol's codes (``torch.searchsorted``'s binary search, step for step, so
        even NaN edges give the reference's codes); the reference for other dtypes."""
        if X.dtype != edges.dtype or X.dtype not in _FLOATS or dtype not in _CODES:
            return super().apply_bins(X, edges, missing_code=missing_code, dtype=dtype)
        n, F = X.shape
        B = edges.shape[1]
        out = torch.empty((n, F), dtype=dtype, device=X.device)
        if n == 0 or F == 0:
            return out
        kernels().bins_kernel[(_grid(n, _BLOCK_N), _grid(F, _BLOCK_F))](
            X.contiguous(), edges.to(X.device).contiguous(), out, n, F, B, B.bit_length(),
            missing_code, BLOCK_N=_BLOCK_N, BLOCK_F=_BLOCK_F)
        return out

    def leaves_from_codes(self, tree: Any, codes: Tensor) -> Tensor:
        if codes.dtype not in _CODES:
            return super().leaves_from_codes(tree, codes)
        return self._walk_tree(tree, codes, tree.threshold_bin.to(torch.int64), raw=False)

    def leaves_from_raw(self, tree: Any, X: Tensor) -> Tensor:
        if X.dtype not in _FLOATS or X.dtype != tree.threshold.dtype:
            return super().leaves_from_raw(tree, X)
        return self._walk_tree(tree, X, tree.threshold, raw=True)

    def _walk_tree(self, tree, data: Tensor, thr: Tensor, *, raw: bool) -> Tensor:
        """``(n,)`` int64 leaf of every row of ``data`` in ``tree`` (:func:`walk_kernel`)."""
        n, F = data.shape
        out = torch.zeros(n, dtype=torch.int64, device=data.device)
        if tree.split_feature.numel() == 0 or n == 0:
            return out
        dev = data.device
        i64 = lambda t: t.to(dev, torch.int64).contiguous()  # noqa: E731
        kernels().walk_kernel[(_grid(n, _ROUTE_BLOCK),)](
            data.contiguous(), n, F, i64(tree.split_feature), thr.to(dev).contiguous(),
            tree.default_left.to(dev, torch.uint8).contiguous(), i64(tree.left_child),
            i64(tree.right_child), int(tree.depth), int(tree.missing_code), out,
            RAW=raw, BLOCK_N=_ROUTE_BLOCK)
        return out

    def predict_trees(self, trees: Sequence, weights: Sequence[float], X: Tensor, out: Tensor, *,
                      cache: dict) -> None:
        """One pass of :func:`predict_kernel` over the rows, every tree of a row in round
        order (the reference's float64 sums bit for bit); the trees packed once on X's device
        and kept in ``cache`` (keyed by their identities and tensor versions). The reference
        when ``out`` is not a contiguous float64 buffer or X or a tree's thresholds are
        neither float32 nor float64."""
        if not trees:
            return
        if (out.dtype != torch.float64 or not out.is_contiguous() or X.dtype not in _FLOATS
                or any(m.threshold.dtype not in _FLOATS for m in trees)):
            return super().predict_trees(trees, weights, X, out, cache=cache)
        key = tuple((id(m), m.leaf_value._version, m.threshold._version, m.split_feature._version)
                    for m in trees) + (str(X.device),)
        hit = cache.get("triton_trees")
        if hit is None or hit[0] != key:
            hit = cache["triton_trees"] = (key, pack_trees(trees, X.device), list(trees))
        p = hit[1]
        n, F = X.shape
        if n == 0:
            return
        w = torch.tensor([float(v) for v in weights], dtype=torch.float64).to(X.device)
        kernels().predict_kernel[(_grid(n, _ROUTE_BLOCK),)](
            X.contiguous(), n, F, len(trees),
            *(p[k] for k in ("node_off", "leaf_off", "depth", "thr_f32", "split_feature",
                             "threshold", "default_left", "left_child", "right_child", "value")),
            w, out, BLOCK_N=_ROUTE_BLOCK, enable_fp_fusion=False)


def pack_trees(models, device) -> dict:
    """The trees of ``models`` (``TreeModel``) concatenated on ``device``: node and leaf
    offsets (T + 1,), ``depth`` (T,) int32, ``thr_f32`` (T,) uint8 (float32 thresholds), the node
    tables (int64; thresholds float64, exact from float32; ``default_left`` uint8) and the
    leaf values (float64)."""
    i64, f64 = torch.int64, torch.float64
    K = [int(m.split_feature.numel()) for m in models]
    L = [int(m.leaf_value.numel()) for m in models]

    def cat(xs, dt):
        return torch.cat([x.detach().to(device, dt).reshape(-1) for x in xs]).contiguous()

    small = lambda xs, dt: torch.tensor(xs, dtype=dt).to(device)  # noqa: E731
    return {
        "node_off": small([0] + K, i64).cumsum(0), "leaf_off": small([0] + L, i64).cumsum(0),
        "depth": small([int(m.depth) for m in models], torch.int32),
        "thr_f32": small([m.threshold.dtype != f64 for m in models], torch.uint8),
        "split_feature": cat([m.split_feature for m in models], i64),
        "threshold": cat([m.threshold for m in models], f64),
        "default_left": cat([m.default_left for m in models], torch.uint8),
        "left_child": cat([m.left_child for m in models], i64),
        "right_child": cat([m.right_child for m in models], i64),
        "value": cat([m.leaf_value for m in models], f64),
    }


def _check_rows(codes: Tensor, **named) -> None:
    """A one-line ``ValueError`` unless each ``name=(tensor, shape, dtype)`` has that shape and
    dtype and lives on the codes' device."""
    for name, (t, shape, dtype) in named.items():
        if tuple(t.shape) != shape or t.dtype != dtype or t.device != codes.device:
            raise ValueError(f"{name}: expected {dtype} of shape {shape} on {codes.device}, got "
                             f"{t.dtype} of shape {tuple(t.shape)} on {t.device}")
