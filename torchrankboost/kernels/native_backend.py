"""The compiled CPU tree backend: ``trees.c`` beside this file (C99 + OpenMP through ctypes,
built at install, loaded by :func:`torchrankboost._native.load_library`), on uint8 bin codes
(int16 above 255 bins: the same kernels instantiated for 2-byte codes). The only module that
loads or calls that library: tree growth, oblivious levels, traversal, prediction and bin
coding; where a kernel does not apply (see each method) the torch reference runs instead.

``trb_grow`` grows a whole tree in one call, the same best-first growth as
:mod:`.torch_backend` and the same tree bit for bit: root histogram, split search, in-place
stable row partition (every leaf owns a contiguous range of one int32 row buffer, as in
LightGBM's data partition), the smaller child's histogram and the larger child's by
subtraction, the leaves' integer sums. Histograms are int64 ``(F, S, 3)`` ``(Σ q_wt, Σ q_w,
count)`` of the fixed point of :mod:`.fixed_point` (the torch path holds the same sums as
``(3, F, S)``). Histogram buffers are kept on the prepared data between fits. The
data-parallel ``reduce`` hook is passed to C as a callback on int64 buffers
(:func:`_reduce_callback`).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence

import torch
from torch import Tensor

from .. import _native
from .._io import deferred_interrupts
from . import levels
from .base import GrownTree, Level, Reduce, TreeParams, Unavailable
from .fixed_point import FixedPoint
from .histogram import compact_reducer
from .torch_backend import TorchBackend

__all__ = ["NativeBackend", "library", "status", "column_codes", "SOURCE", "COLUMN_COPY_SHARE"]

SOURCE = Path(__file__).with_name("trees.c")
_ABI = 9
#: the C type of the data-parallel reduction callback ``reduce(int64_t *buf, int64_t len)``
REDUCE_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64)

_p, _i64 = ctypes.c_void_p, ctypes.c_int64


class GrowArgs(ctypes.Structure):
    """``trb_grow_args`` of ``trees.c``, field for field (see there)."""

    _fields_ = [
        ("codes", _p), ("n", _i64), ("F", _i64), ("rows", _p), ("m", _i64), ("all_rows", _i64),
        ("q", _p), ("S", _i64), ("num_bins", _p), ("feat_ok", _p), ("Vm", _i64),
        ("l2", ctypes.c_double), ("min_samples_leaf", _i64), ("min_child_weight", ctypes.c_double),
        ("min_split_gain", ctypes.c_double), ("scale_g", ctypes.c_double),
        ("scale_h", ctypes.c_double), ("max_leaves", _i64), ("max_depth", _i64),
        ("missing_code", _i64), ("nthreads", _i64), ("reduce", REDUCE_FN),
        ("pool", _p), ("pool_size", _i64), ("free_list", _p), ("scratch", _p), ("miss_feat", _p),
        ("leaves", _p), ("order", _p),
        ("split_feature", _p), ("threshold_bin", _p), ("default_left", _p), ("left_child", _p),
        ("right_child", _p), ("split_gain", _p), ("depth_out", _p), ("leaf_sums", _p),
        ("leaf_begin", _p), ("leaf_count", _p), ("code_bytes", _i64), ("cum", _p),
        ("bits", _i64), ("work", _p), ("codes_cm", _p),
    ]


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i32, d = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    sig = {
        "trb_abi_version": ([], i32),
        "trb_histogram": ([p, i64, i64, p, i64, p, p, i64, i32], None),
        "trb_subtract": ([p, p, p, i64], None),
        "trb_partition": ([p, i64, p, i64, i64, i64, i32, i32, p], i64),
        "trb_tree_leaves": ([p, i64, i64, p, p, p, p, p, i64, i32, p, i32], None),
        "trb_tree_leaves16": ([p, i64, i64, p, p, p, p, p, i64, i32, p, i32], None),
        "trb_histogram16": ([p, i64, i64, p, i64, p, p, i64, i32], None),
        "trb_histogram_quantized": ([p, i64, i64, i64, p, i64, p, p, i64, i32, i64], None),
        "trb_set_fast_passes": ([i32], None),
        "trb_tree_leaves_raw": ([p, i32, i64, i64, p, p, p, p, p, i64, p, i32], None),
        "trb_leaf_struct_size": ([], i64),
        "trb_grow_args_size": ([], i64),
        "trb_scatter_leaves": ([p, p, p, i64, p, p, i32], None),
        "trb_grow": ([ctypes.POINTER(GrowArgs)], i64),
        "trb_apply_bins": ([p, p, i32, i64, i64, i64, i64, p, i32, i32], None),
        "trb_predict_trees": ([p, i32, i64, i64, i64, p, p, p, p, p, p, p, p, p, p, p, i32], None),
        "trb_oblivious_level": ([p, i64, i64, i64, p, p, p, i64, d, d, d, d, d, p, p, p], None),
        "trb_oblivious_nodes": ([p, i64, i64, i64, p, i64, d, d, d, i64, i64, i32, p, p, p], None),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    if lib.trb_abi_version() != _ABI:
        raise _native.NativeUnavailable("unexpected kernel ABI version")
    if lib.trb_grow_args_size() != ctypes.sizeof(GrowArgs):
        raise _native.NativeUnavailable("trb_grow_args differs from GrowArgs")


_LOADED: list = []  # the library once loaded (load_library resolves paths on every call)


def library() -> ctypes.CDLL:
    """The compiled tree kernels, or :class:`~torchrankboost._native.NativeUnavailable` with
    the reason (decided once per process)."""
    if _LOADED:
        return _LOADED[0]
    lib = _native.load_library(SOURCE, declare=_declare)
    _LOADED.append(lib)
    return lib


def status() -> str:
    """``"native"`` when the compiled tree kernels load here, else ``"torch (<reason>)"``."""
    try:
        library()
        return "native"
    except _native.NativeUnavailable as exc:
        return f"torch ({exc})"


def _buffers(lib, prepared, F: int, S: int, L: int) -> dict:
    """The growth's histogram pool and leaf records, kept on ``prepared`` between fits."""
    key = ("native_buffers", F, S, L)
    bufs = prepared.cache.get(key)
    if bufs is None:
        bufs = {"pool": torch.empty((L + 1, F, S, 3), dtype=torch.int64),
                "free": torch.empty(L + 1, dtype=torch.int64),
                "leaves": torch.empty(lib.trb_leaf_struct_size() * (L + 1), dtype=torch.uint8),
                "order": torch.empty(L + 1, dtype=torch.int64),
                "cum": torch.empty(3 * max(S - 1, 1), dtype=torch.int64),
                "work": _aligned_int64(4 * F * S),
                "num_bins": prepared.num_bins.to("cpu", torch.int64).contiguous()}
        nb = bufs["num_bins"]
        bufs["Vm"] = min(max(1, int(nb.max())) if F else 1, prepared.missing_code)
        prepared.cache[key] = bufs
    return bufs


def _aligned_int64(size: int, align: int = 64) -> Tensor:
    """An int64 buffer of ``size`` entries starting on an ``align``-byte boundary (the wide
    histogram pass loads 32-byte bins)."""
    raw = torch.empty(size + align // 8, dtype=torch.int64)
    skip = (-raw.data_ptr() % align) // 8
    return raw[skip:skip + size]


#: the largest share of the physical memory a column-major copy of the codes may take
COLUMN_COPY_SHARE = 1 / 16


def column_codes(prepared) -> Optional[Tensor]:
    """A column-major copy ``(F, n)`` of the bin codes of ``prepared``, which makes the row
    partition of a split read one column sequentially instead of one cache line per row
    (measured 11 -> 3 ns per row at 800k x 136); made once and kept on ``prepared``, or
    ``None`` when it would take more than :data:`COLUMN_COPY_SHARE` of the physical memory
    (the partition then reads the row-major codes: the same rows)."""
    cache = prepared.cache
    if "codes_cm" not in cache:
        codes = prepared.codes
        size = codes.numel() * codes.element_size()
        try:
            phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            phys = 0
        fits = codes.device.type == "cpu" and 0 < size <= phys * COLUMN_COPY_SHARE
        cache["codes_cm"] = codes.t().contiguous() if fits else None
    return cache["codes_cm"]


def _outputs(F: int, L: int) -> dict:
    """Fresh output buffers of one ``trb_grow`` call (one allocation, cut into views)."""
    u8 = torch.empty(F + L, dtype=torch.uint8)
    i64 = torch.empty(9 * L + 1, dtype=torch.int64)
    f64 = torch.empty(L, dtype=torch.float64)
    i = [i64[k * L:(k + 1) * L] for k in range(6)]
    return dict(miss_feat=u8[:F], default_left=u8[F:], split_feature=i[0], threshold_bin=i[1],
                left_child=i[2], right_child=i[3], leaf_begin=i[4], leaf_count=i[5],
                depth_out=i64[6 * L:6 * L + 1].zero_(), split_gain=f64,
                leaf_sums=i64[6 * L + 1:].view(L, 3))


#: the data the compiled kernels take: bin codes (1 or 2 bytes) and raw features
_DTYPES = (torch.uint8, torch.int16, torch.float32, torch.float64)


class NativeBackend:
    """Tree growth and traversal in the compiled kernels (CPU; uint8 or int16 bin codes)."""

    name = "native"

    def unavailable(self, *, device: torch.device, data_dtype: torch.dtype,
                    num_rows: int) -> Optional[Unavailable]:
        if device.type != "cpu":
            return Unavailable(f"the data are on {device.type}")
        if data_dtype not in _DTYPES:
            return Unavailable(f"the bin codes are {data_dtype}, not uint8 / int16"
                               if not data_dtype.is_floating_point
                               else f"the features are {data_dtype}, not float32 / float64")
        if num_rows >= 2 ** 31 - 1:
            return Unavailable("more than 2^31 rows")
        try:
            library()
        except _native.NativeUnavailable as exc:
            return Unavailable(str(exc), missing=True)
        return None

    def grow(self, prepared: Any, fixed: FixedPoint, rows: Optional[Tensor], feat_ok: Tensor, *,
             params: TreeParams, reduce: Optional[Reduce]) -> GrownTree:
        lib = library()
        codes = prepared.codes.contiguous()
        n, F = codes.shape
        S, L = prepared.missing_code + 1, params.max_leaves
        bufs = _buffers(lib, prepared, F, S, L)
        rows32 = (torch.arange(n, dtype=torch.int32) if rows is None
                  else rows.to(torch.int32).contiguous())
        m = rows32.numel()
        if m == 0:  # no rows (a rank whose rows all weigh 0): a real buffer, not NULL = all
            rows32 = torch.zeros(1, dtype=torch.int32)
        num_bins = bufs["num_bins"]
        sg, sh = fixed.host_scales()
        t = dict(q=fixed.q.contiguous(), rows=rows32,
                 scratch=torch.empty_like(rows32), num_bins=num_bins,
                 feat_ok=feat_ok.to("cpu", torch.uint8).contiguous(),
                 **_outputs(F, L))
        hook = _reduce_callback(compact_reducer(prepared, "FS3", reduce))
        cm = column_codes(prepared)
        args = GrowArgs(
            codes=codes.data_ptr(), n=n, F=F, m=m, all_rows=int(rows is None), S=S,
            Vm=bufs["Vm"],
            l2=params.l2, min_samples_leaf=params.min_samples_leaf,
            min_child_weight=params.min_child_weight, min_split_gain=params.min_split_gain,
            scale_g=sg, scale_h=sh, max_leaves=L, max_depth=params.max_depth if params.max_depth is not None else 1 << 62,
            missing_code=prepared.missing_code, nthreads=torch.get_num_threads(),
            reduce=REDUCE_FN(0) if hook is None else REDUCE_FN(hook),
            pool=bufs["pool"].data_ptr(), pool_size=L + 1, free_list=bufs["free"].data_ptr(),
            leaves=bufs["leaves"].data_ptr(), order=bufs["order"].data_ptr(),
            code_bytes=codes.element_size(), cum=bufs["cum"].data_ptr(),
            bits=fixed.bits or 0, work=bufs["work"].data_ptr(),
            codes_cm=0 if cm is None else cm.data_ptr(),
            **{k: v.data_ptr() for k, v in t.items()})
        if hook is None:
            nleaves = lib.trb_grow(ctypes.byref(args))
        else:  # a signal must not land inside the Python callback, where C swallows it
            with deferred_interrupts(None, redeliver=True):
                nleaves = lib.trb_grow(ctypes.byref(args))
        if hook is not None and hook.error is not None:  # raised in the callback: not lost
            raise hook.error
        if nleaves < 1:
            raise RuntimeError(f"trb_grow failed (max_leaves={L})")
        return _grown(lib, t, n, nleaves)

    def leaves_from_codes(self, tree: Any, codes: Tensor) -> Tensor:
        codes = codes.contiguous()
        n, F = codes.shape
        cpu = [x.to("cpu", torch.int64).contiguous() for x in
               (tree.split_feature, tree.threshold_bin, tree.left_child, tree.right_child)]
        dl = tree.default_left.to("cpu", torch.uint8).contiguous()
        leaf = torch.empty(n, dtype=torch.int64)
        lib = library()
        fn = lib.trb_tree_leaves16 if codes.dtype == torch.int16 else lib.trb_tree_leaves
        fn(codes.data_ptr(), n, F, cpu[0].data_ptr(), cpu[1].data_ptr(), dl.data_ptr(),
           cpu[2].data_ptr(), cpu[3].data_ptr(), tree.split_feature.numel(), tree.missing_code,
           leaf.data_ptr(), torch.get_num_threads())
        return leaf

    def leaves_from_raw(self, tree: Any, X: Tensor) -> Tensor:
        X = X.contiguous()
        n, F = X.shape
        cpu = [x.to("cpu", torch.int64).contiguous() for x in
               (tree.split_feature, tree.left_child, tree.right_child)]
        thr = tree.threshold.to("cpu", torch.float64).contiguous()  # exact from float32
        dl = tree.default_left.to("cpu", torch.uint8).contiguous()
        leaf = torch.empty(n, dtype=torch.int64)
        library().trb_tree_leaves_raw(X.data_ptr(), int(X.dtype == torch.float32), n, F,
                                      cpu[0].data_ptr(), thr.data_ptr(), dl.data_ptr(),
                                      cpu[1].data_ptr(), cpu[2].data_ptr(),
                                      tree.split_feature.numel(), leaf.data_ptr(),
                                      torch.get_num_threads())
        return leaf


    def predict_trees(self, trees: Sequence, weights: Sequence[float], X: Tensor, out: Tensor, *,
                      cache: dict) -> None:
        """One pass of ``trb_predict_trees`` over the rows, every tree of a row before the
        next row (the reference's sums bit for bit); the trees are packed once and kept in
        ``cache`` (keyed by their identities and tensor versions). The reference when a tree
        is not on the CPU, ``out`` is not a contiguous float64 buffer there or ``X`` neither
        float32 nor float64."""
        if not trees:
            return
        if (out.device.type != "cpu" or out.dtype != torch.float64 or not out.is_contiguous()
                or X.dtype not in (torch.float32, torch.float64)
                or any(m.leaf_value.device.type != "cpu" for m in trees)):
            return _REFERENCE.predict_trees(trees, weights, X, out, cache=cache)
        # the trees are held by the cache (their ids stay theirs); an in-place change of a
        # tree's tensors bumps their versions and repacks
        key = tuple((id(m), m.leaf_value._version, m.threshold._version, m.split_feature._version)
                    for m in trees)
        hit = cache.get("native_trees")
        if hit is None or hit[0] != key:
            hit = cache["native_trees"] = (key, _packed_trees(trees), list(trees))
        packed = hit[1]
        X = X.contiguous()
        w = torch.tensor([float(v) for v in weights], dtype=torch.float64)
        n, F = X.shape
        library().trb_predict_trees(
            X.data_ptr(), int(X.dtype == torch.float32), n, F, len(trees),
            *(packed[k].data_ptr() for k in ("node_off", "leaf_off", "thr_f32", "split_feature",
                                              "threshold", "default_left", "left_child",
                                              "right_child", "value")),
            w.data_ptr(), out.data_ptr(), torch.get_num_threads())

    def apply_bins(self, X: Tensor, edges: Tensor, *, missing_code: int,
                   dtype: torch.dtype) -> Tensor:
        """``trb_apply_bins``: a binary search per value, rows across the threads (the codes
        of ``torch.searchsorted``). The reference where it does not apply: not float32 /
        float64 on the CPU in the edges' dtype, NaN in the edges, codes neither uint8 nor
        int16."""
        if (X.device.type != "cpu" or edges.device.type != "cpu" or X.dtype != edges.dtype
                or X.dtype not in (torch.float32, torch.float64)
                or dtype not in (torch.uint8, torch.int16) or bool(torch.isnan(edges).any())):
            return _REFERENCE.apply_bins(X, edges, missing_code=missing_code, dtype=dtype)
        X, E = X.contiguous(), edges.contiguous()
        n, F = X.shape
        out = torch.empty((n, F), dtype=dtype)
        library().trb_apply_bins(X.data_ptr(), E.data_ptr(), int(X.dtype == torch.float32), n, F,
                                 E.shape[1], int(missing_code), out.data_ptr(),
                                 int(dtype == torch.int16), torch.get_num_threads())
        return out

    def level_histograms(self, prepared: Any, values: Tensor, rows: Tensor, counts: List[int],
                         build: List[int], *, reduce: Optional[Reduce]) -> Tensor:
        """``trb_histogram`` (``trb_histogram16`` on int16 codes) of each built node into one
        (B, F, S, 3) buffer (the kernel zeroes its output first: an empty node is all
        zeros), int64, returned as its (B, 3, F, S) view."""
        codes = prepared.codes.contiguous()
        n, F = codes.shape
        S = prepared.missing_code + 1
        lib = library()
        fn = lib.trb_histogram16 if codes.dtype == torch.int16 else lib.trb_histogram
        if values.dtype != torch.int64:
            raise ValueError(f"values: expected int64 channels (fixed point), got {values.dtype}")
        out = torch.empty((len(counts), F, S, 3), dtype=torch.int64)
        r32 = rows.to(torch.int32).contiguous()
        values = values.contiguous()
        step, nt = F * S * 3 * 8, torch.get_num_threads()
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        for j in build:
            fn(codes.data_ptr(), n, F, r32.data_ptr() + 4 * starts[j], counts[j],
               values.data_ptr(), out.data_ptr() + step * j, S, nt)
        levels.sum_built(out, build, reduce)
        return out.permute(0, 3, 1, 2)

    def best_level(self, hists: Tensor, prepared: Any, feat_ok: Tensor, miss: Tensor, *,
                   params: TreeParams, scale: Tensor) -> Optional[Level]:
        """``trb_oblivious_level`` (the best candidate) and ``trb_oblivious_nodes`` (its node
        gains and left counts) on the (B, F, S, 3) layout; the reference for histograms off
        the CPU or of more than 256 slots."""
        if hists.device.type != "cpu" or hists.shape[-1] > 256:
            return _REFERENCE.best_level(hists, prepared, feat_ok, miss, params=params,
                                         scale=scale)
        setup = levels.level_setup(hists, prepared, params.l2, scale)
        if setup is None:
            return None
        Vm, parent = setup
        raw = hists.permute(0, 2, 3, 1).contiguous()  # (B, F, S, 3): no copy of our own view
        B, F, S, _ = raw.shape
        nb = prepared.cache.get("num_bins_i64")
        if nb is None:
            nb = prepared.cache["num_bins_i64"] = prepared.num_bins.to("cpu", torch.int64).contiguous()
        fo = feat_ok.to("cpu", torch.uint8).contiguous()
        mf = miss.to("cpu", torch.uint8).contiguous()
        cum = torch.empty(B * 256 * 3, dtype=torch.int64)
        sg, sh = (float(v) for v in scale.tolist())
        par = torch.empty(B, dtype=torch.float64)
        out = torch.empty(5, dtype=torch.float64)
        lib = library()
        lib.trb_oblivious_level(raw.data_ptr(), B, F, S, nb.data_ptr(), fo.data_ptr(),
                                mf.data_ptr(), Vm, params.l2, params.min_samples_leaf - 0.5,
                                params.min_child_weight, sg, sh, cum.data_ptr(), par.data_ptr(),
                                out.data_ptr())
        bg, _, f, t, dl = out.tolist()
        if not levels.accepted(bg, parent, params):
            return None
        ng, nl = torch.empty(B, dtype=torch.float64), torch.empty(B, dtype=torch.float64)
        lib.trb_oblivious_nodes(raw.data_ptr(), B, F, S, nb.data_ptr(), Vm, params.l2, sg, sh,
                                int(f), int(t), int(dl == 1.0), par.data_ptr(), ng.data_ptr(),
                                nl.data_ptr())
        return Level(int(f), int(t), dl == 1.0, ng, nl)


_REFERENCE = TorchBackend()  # where a compiled kernel does not apply


def _grown(lib, t: dict, n: int, nleaves: int) -> GrownTree:
    """The :class:`GrownTree` of ``trb_grow``'s outputs ``t``; its ``output`` writes each
    row's leaf value through the row partition (when the growth covered every row)."""
    K = nleaves - 1
    rows32, begin, count = t["rows"], t["leaf_begin"], t["leaf_count"]

    def output(leaf_value: Tensor) -> Tensor:
        out = torch.empty(n, dtype=torch.float64)
        vals = leaf_value.to(torch.float64).contiguous()
        lib.trb_scatter_leaves(rows32.data_ptr(), begin.data_ptr(), count.data_ptr(), nleaves,
                               vals.data_ptr(), out.data_ptr(), torch.get_num_threads())
        return out

    return GrownTree(split_feature=t["split_feature"][:K].tolist(),
                     threshold_bin=t["threshold_bin"][:K].tolist(),
                     default_left=[bool(x) for x in t["default_left"][:K].tolist()],
                     left_child=t["left_child"][:K].tolist(),
                     right_child=t["right_child"][:K].tolist(),
                     split_gain=t["split_gain"][:K].tolist(), depth=int(t["depth_out"]),
                     leaf_sums=t["leaf_sums"][:nleaves],
                     leaf_count=count[:nleaves].to(torch.float64), output=output)


def _reduce_callback(reduce: Optional[Reduce]):
    """A ctypes-callable ``(int64_t *buf, int64_t len)`` that sums ``buf`` over all ranks in
    place through ``reduce`` (a function of an int64 tensor), or ``None`` for ``None``.

    An exception cannot cross the C code: the first one is kept in the callable's ``error``
    (the caller raises it when ``trb_grow`` returns) and the later calls do nothing (a
    failed collective means the process group is gone)."""
    if reduce is None:
        return None

    def call(ptr, length):
        if call.error is not None:
            return
        try:
            buf = torch.frombuffer((ctypes.c_int64 * length).from_address(ctypes.addressof(ptr.contents)),
                                   dtype=torch.int64)
            out = reduce(buf)
            if out is not None and out.data_ptr() != buf.data_ptr():
                buf.copy_(out)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            call.error = exc

    call.error = None
    return call


def _packed_trees(models) -> dict:
    """The trees of ``models`` packed for ``trb_predict_trees`` (CPU, node and leaf offsets)."""
    i64, f64 = torch.int64, torch.float64
    K = [int(m.split_feature.numel()) for m in models]
    L = [int(m.leaf_value.numel()) for m in models]
    cat = lambda xs, dt: (torch.cat([x.detach().to("cpu", dt).reshape(-1) for x in xs])  # noqa: E731
                          if xs else torch.empty(0, dtype=dt)).contiguous()
    return {
        "node_off": torch.tensor([0] + K, dtype=i64).cumsum(0).contiguous(),
        "leaf_off": torch.tensor([0] + L, dtype=i64).cumsum(0).contiguous(),
        "thr_f32": torch.tensor([m.threshold.dtype != f64 for m in models], dtype=torch.uint8),
        "split_feature": cat([m.split_feature for m in models], i64),
        "threshold": cat([m.threshold for m in models], f64),  # exact from float32
        "default_left": cat([m.default_left for m in models], torch.uint8),
        "left_child": cat([m.left_child for m in models], i64),
        "right_child": cat([m.right_child for m in models], i64),
        "value": cat([m.leaf_value for m in models], f64),
    }
