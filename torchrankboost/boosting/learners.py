"""Weak learners for the boosting driver: histogram regression trees, stumps, single features.

All three follow one contract: an unfitted *learner* holds only hyper-parameters
(keyword-only); ``learner.prepare(X)`` bins / scales the features once per fit;
``learner.fit(prepared, target, weight, rows=..., generator=...)`` returns a fitted *weak
model* with ``predict(X)``, ``predict_prepared(prepared)``, ``feature_gain``,
``feature_count``, ``to``, ``state`` / ``from_state``.

Names: the learner ``RegressionTree`` (registry name ``"tree"``) fits a ``TreeModel``;
``Stumps`` (``"stump"``) a ``StumpModel``; ``FeatureRankers`` (``"feature"``) a
``FeatureModel``. A saved weak model's ``type`` is its model class name (files written with
the older names ``"RegressionTree"``, ``"Stump"``, ``"FeatureRanker"`` still load).

Weighted least squares in Newton form
-------------------------------------
The driver passes ``target = -g/h`` and ``weight = h``. With ``G = Σ w·target`` (= -Σg) and
``H = Σ w`` (= Σh) over a set of rows, the best constant is ``G / (H + λ)`` and fitting it
reduces the weighted squared error by ``G² / (H + λ)``. A tree split of a node into L and R
has gain

    gain = G_L² / (H_L + λ) + G_R² / (H_R + λ) − G² / (H + λ)          (λ = ``l2``)

(no factor ½, as in LightGBM's reported gains); leaf values are ``G_leaf / (H_leaf + λ)``.

Histograms (trees, stumps)
--------------------------
Per node, for all features at once: the node's bin codes (m, F) are gathered, transposed to an
int64 (F, m) index and scattered with ``scatter_add_`` along the bin axis into (F, 256)
accumulators (one launch per channel, features in parallel). On CPU the two channels Σw·t and
Σw are packed into one ``complex128`` scatter (measured faster than two real scatters, see
``scripts/bench_trees.py``); counts go to a second float64 scatter. Accumulation is float64
on every device (float32 histograms lose ~1e-4 relative accuracy over 10⁶ rows and
histogram subtraction amplifies it; on CPU float64 costs no more than float32). Rows are
processed in chunks of 2048 rows on CPU (a loop over chunks, not over rows): the (F, 2048) int64
index stays in cache, measured ~3x faster than 65536-row chunks; 2^20 rows on other devices. The larger child's histogram is the parent's minus the smaller child's.

Data-parallel fits
------------------
``prepare(X, context=ctx)`` with an enabled :class:`~torchrankboost.distributed.DistContext`
(``X`` this rank's shard of whole queries) agrees on the feature transform with the other
ranks (the bin edges of all ranks' rows; ``FeatureRankers``: the all-reduced min/max) and
keeps ``ctx`` on the prepared data. Every ``fit`` on it then sums what it decides from over
the ranks, so every rank fits the same weak model on its own rows: a tree all-reduces each
node histogram it builds (the root's, then the smaller child's of each split: the larger
child's is still the parent's minus it) and the leaf sums, and reads row counts (the
``min_samples_leaf`` tests, the smaller child) off the reduced histograms; ``Stumps`` and
``FeatureRankers`` all-reduce their per-candidate sums and totals.
"""

from __future__ import annotations

import ctypes
import logging
import math
import warnings
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .. import _native
from ..params import Params
from .binning import BinnedFeatures, _check_X, bin_features

_log = logging.getLogger("torchrankboost")

__all__ = [
    "KERNELS",
    "choose_kernel",
    "RegressionTree",
    "Stumps",
    "FeatureRankers",
    "TreeModel",
    "StumpModel",
    "FeatureModel",
    "StumpFeatures",
    "ScaledFeatures",
    "weak_model_from_state",
    "node_histogram",
]

_CPU_CHUNK = 1 << 11  # small chunks keep the (F, chunk) int64 index in cache: ~3x faster than 1 << 16
_DEV_CHUNK = 1 << 20
_MM_CHUNK = 1 << 18
_REL_EPS = 1e-10  # a split must improve on the parent term by more than this relative amount
KERNELS = ("auto", "native", "torch")
_warned_fallback = False


# ----------------------------------------------------------------------------- validation


def _check_int(value, name, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: expected an int {rng}, got {value!r}")
    return value


def _check_float(value, name, lo=0.0, hi=None, lo_open=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (hi is not None and v > hi)
    if bad:
        raise ValueError(f"{name}: out of range, got {value!r}")
    return v


def _check_fit_inputs(n: int, device, target, weight, rows):
    if not isinstance(target, Tensor) or target.dim() != 1 or target.shape[0] != n:
        shape = tuple(target.shape) if isinstance(target, Tensor) else type(target).__name__
        raise ValueError(f"target: expected a 1-D tensor of length {n}, got {shape}")
    if not target.dtype.is_floating_point:
        raise ValueError(f"target: expected a floating-point tensor, got {target.dtype}")
    if not torch.isfinite(target).all():
        raise ValueError("target: contains NaN or inf")
    target = target.to(device)
    if weight is None:
        weight = torch.ones(n, dtype=target.dtype, device=device)
    else:
        if not isinstance(weight, Tensor) or weight.shape != target.shape:
            shape = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
            raise ValueError(f"weight: expected shape {tuple(target.shape)}, got {shape}")
        weight = weight.to(device)
        if not torch.isfinite(weight).all():
            raise ValueError("weight: contains NaN or inf")
        if (weight < 0).any():
            raise ValueError("weight: negative weights are not allowed")
    if rows is not None:
        if not isinstance(rows, Tensor) or rows.dim() != 1 or rows.dtype not in (torch.int64, torch.int32):
            raise ValueError("rows: expected a 1-D int64 tensor of row indices")
        rows = rows.to(device=device, dtype=torch.int64)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
            raise ValueError(f"rows: indices must lie in [0, {n})")
    return target, weight, rows


def choose_kernel(kernel: str, codes: Tensor) -> str:
    """Which kernels run on these bin codes: ``"native"`` (compiled, CPU, uint8 codes) or
    ``"torch"``; see :class:`RegressionTree` ``kernel``."""
    global _warned_fallback
    if kernel == "torch":
        return "torch"
    why = None
    if codes.device.type != "cpu":
        why = f"the data are on {codes.device.type}"
    elif codes.dtype != torch.uint8:
        why = "the bin codes are not uint8 (more than 255 bins)"
    elif codes.shape[0] >= 2 ** 31 - 1:
        why = "more than 2^31 rows"
    else:
        try:
            _native.load()
            return "native"
        except _native.NativeUnavailable as exc:
            why = str(exc)
            if kernel == "auto" and not _warned_fallback:
                _warned_fallback = True
                msg = (f"compiled tree kernels unavailable ({why}); the trees run on the "
                       f"pure-torch path, several times slower on CPU")
                _log.warning(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=4)
    if kernel == "native":
        raise RuntimeError(f"kernel='native': the compiled tree kernels cannot run here: {why}")
    return "torch"


def _out_dtype(target: Tensor):
    return target.dtype if target.dtype in (torch.float64, torch.float32) else torch.float32


# ----------------------------------------------------------------------------- histograms


def node_histogram(codes: Tensor, rows: Optional[Tensor], values: Tensor, *, slots: int,
                   counts: bool = True, packed: Optional[Tensor] = None):
    """Per-feature histograms of ``values`` over the bin codes of ``rows``.

    Args:
        codes: (n, F) integer bin codes.
        rows: (m,) int64 row indices (None = all rows).
        values: (n, k) float64 per-row channels to accumulate.
        slots: number of code slots (max code + 1).
        counts: also return the row counts per bin.
        packed: optional (n,) complex128 = values[:, 0] + i·values[:, 1] (CPU fast path, k == 2).

    Returns:
        ``(hist (F, slots, k) float64, count (F, slots) float64 or None)``.
    """
    n, F = codes.shape
    dev = codes.device
    k = values.shape[1]
    m = n if rows is None else rows.numel()
    hist = torch.zeros((k, F, slots), dtype=torch.float64, device=dev)
    cnt = torch.zeros((F, slots), dtype=torch.float64, device=dev) if counts else None
    use_complex = packed is not None and dev.type == "cpu" and k == 2
    if use_complex:
        hc = torch.zeros((F, slots), dtype=torch.complex128, device=dev)
    chunk = _CPU_CHUNK if dev.type == "cpu" else _DEV_CHUNK
    if m == 0:
        return hist.permute(1, 2, 0), cnt
    idx_buf = torch.empty((F, min(chunk, m)), dtype=torch.int64, device=dev)
    ones = torch.ones(min(chunk, m), dtype=torch.float64, device=dev) if counts else None
    for s in range(0, m, chunk):
        if rows is None:
            c = codes[s : s + chunk]
            r = None
        else:
            r = rows[s : s + chunk]
            c = codes.index_select(0, r)
        mc = c.shape[0]
        idx = idx_buf[:, :mc]
        idx.copy_(c.t())
        if use_complex:
            src = packed[s : s + mc] if r is None else packed.index_select(0, r)
            hc.scatter_add_(1, idx, src.unsqueeze(0).expand(F, mc))
        else:
            vals = values[s : s + mc] if r is None else values.index_select(0, r)
            for j in range(k):
                hist[j].scatter_add_(1, idx, vals[:, j].unsqueeze(0).expand(F, mc))
        if counts:
            cnt.scatter_add_(1, idx, ones[:mc].unsqueeze(0).expand(F, mc))
    if use_complex:
        hist[0] = hc.real
        hist[1] = hc.imag
    return hist.permute(1, 2, 0), cnt


def _tree_histogram(codes: Tensor, rows: Optional[Tensor], values: Tensor, packed: Optional[Tensor], slots: int,
                    count: Optional[Tensor] = None, unit_weight: bool = False) -> Tensor:
    """(3, F, slots) float64 node histogram: channels Σ w·t, Σ w, row count.

    Same accumulation order as :func:`node_histogram` (row order within every bin), so the
    same values bit for bit. ``rows`` None = all rows (no gather). ``count`` (F, slots):
    the count channel when already known (all-rows counts cached per prepared data); the
    count scatter is then skipped. ``unit_weight``: all weights are 1, the count channel is
    copied from Σ w (exact: sums of ones below 2^53).
    """
    n, F = codes.shape
    dev = codes.device
    m = n if rows is None else rows.numel()
    out = torch.zeros((3, F, slots), dtype=torch.float64, device=dev)
    if m == 0:
        return out
    use_complex = packed is not None and dev.type == "cpu"
    hc = torch.zeros((F, slots), dtype=torch.complex128, device=dev) if use_complex else None
    chunk = _CPU_CHUNK if dev.type == "cpu" else _DEV_CHUNK
    idx_buf = torch.empty((F, min(chunk, m)), dtype=torch.int64, device=dev)
    count_scatter = count is None and not unit_weight
    ones = torch.ones(min(chunk, m), dtype=torch.float64, device=dev) if count_scatter else None
    for s in range(0, m, chunk):
        if rows is None:
            c = codes[s : s + chunk]
            mc = c.shape[0]
            pk = packed[s : s + mc] if use_complex else None
            vals = None if use_complex else values[s : s + mc]
        else:
            r = rows[s : s + chunk]
            c = codes.index_select(0, r)
            mc = c.shape[0]
            pk = packed.index_select(0, r) if use_complex else None
            vals = None if use_complex else values.index_select(0, r)
        idx = idx_buf[:, :mc]
        idx.copy_(c.t())
        if use_complex:
            hc.scatter_add_(1, idx, pk.unsqueeze(0).expand(F, mc))
        else:
            for j in range(2):
                out[j].scatter_add_(1, idx, vals[:, j].unsqueeze(0).expand(F, mc))
        if count_scatter:
            out[2].scatter_add_(1, idx, ones[:mc].unsqueeze(0).expand(F, mc))
    if use_complex:
        out[0] = hc.real
        out[1] = hc.imag
    if count is not None:
        out[2] = count
    elif unit_weight:
        out[2] = out[1]
    return out


# ----------------------------------------------------------------------------- trees


@dataclass(eq=False)
class _Leaf:
    leaf_id: int
    rows: Tensor
    hist: Optional[Tensor]  # (3, F, 256) float64: Σ w·t, Σ w, count
    depth: int
    parent: int  # internal node index, -1 for the root
    is_left: bool
    best: Optional[tuple] = None  # (gain, feature, bin, default_left)


class TreeModel:
    """A fitted regression tree (tensors only).

    Internal nodes ``k = 0..K-1`` (root = 0 when K > 0): ``split_feature[k]`` (int64),
    ``threshold_bin[k]`` (int64; ``code <= bin`` goes left), ``threshold[k]`` (raw value,
    ``x <= threshold`` goes left), ``default_left[k]`` (bool, side of NaN / missing code),
    ``left_child[k]``, ``right_child[k]`` (int64: ``>= 0`` internal node, ``< 0`` leaf
    ``~child``), ``split_gain[k]`` (float64). ``leaf_value`` (L,) in the target dtype.
    Prediction walks all rows down together, one vectorised step per tree level.
    """

    type_name = "TreeModel"

    def __init__(self, *, split_feature, threshold_bin, threshold, default_left, left_child,
                 right_child, split_gain, leaf_value, depth: int, missing_code: int = 255):
        self.split_feature = split_feature
        self.threshold_bin = threshold_bin
        self.threshold = threshold
        self.default_left = default_left
        self.left_child = left_child
        self.right_child = right_child
        self.split_gain = split_gain
        self.leaf_value = leaf_value
        self.depth = int(depth)
        self.missing_code = int(missing_code)

    @property
    def num_leaves(self) -> int:
        return self.leaf_value.numel()

    def _walk(self, n: int, go_left_fn, device) -> Tensor:
        if self.split_feature.numel() == 0:
            return self.leaf_value.to(device)[0].expand(n).clone()
        node = torch.zeros(n, dtype=torch.int64, device=device)
        for _ in range(self.depth):
            active = node >= 0
            nid = node.clamp(min=0)
            f = self.split_feature[nid]
            gl = go_left_fn(nid, f)
            nxt = torch.where(gl, self.left_child[nid], self.right_child[nid])
            node = torch.where(active, nxt, node)
        return self.leaf_value[~node]

    def predict_prepared(self, prepared: BinnedFeatures, *, kernel: str = "auto") -> Tensor:
        """(n,) predictions from the training bin codes (the compiled traversal on CPU uint8
        codes unless ``kernel="torch"``; the same values)."""
        codes = prepared.codes
        miss = self.missing_code
        if kernel != "torch" and codes.dtype == torch.uint8 and codes.device.type == "cpu":
            try:
                lib = _native.load()
            except _native.NativeUnavailable:
                lib = None  # announced by RegressionTree when it chose the torch path
            if lib is not None:
                return self.leaf_value[self._native_leaves(lib, codes)]

        def go_left(nid, f):
            c = codes.gather(1, f.unsqueeze(1)).squeeze(1).to(torch.int64)
            return torch.where(c == miss, self.default_left[nid], c <= self.threshold_bin[nid])

        return self._walk(codes.shape[0], go_left, codes.device)

    def _native_leaves_raw(self, lib, X: Tensor) -> Tensor:
        n, F = X.shape
        cpu = [t.to("cpu", torch.int64).contiguous() for t in
               (self.split_feature, self.left_child, self.right_child)]
        thr = self.threshold.to("cpu", torch.float64).contiguous()  # exact from float32
        dl = self.default_left.to("cpu", torch.uint8).contiguous()
        leaf = torch.empty(n, dtype=torch.int64)
        lib.trb_tree_leaves_raw(X.data_ptr(), int(X.dtype == torch.float32), n, F,
                                cpu[0].data_ptr(), thr.data_ptr(), dl.data_ptr(),
                                cpu[1].data_ptr(), cpu[2].data_ptr(), self.split_feature.numel(),
                                leaf.data_ptr(), torch.get_num_threads())
        return leaf

    def _native_leaves(self, lib, codes: Tensor) -> Tensor:
        codes = codes.contiguous()
        n, F = codes.shape
        cpu = [t.to("cpu", torch.int64).contiguous() for t in
               (self.split_feature, self.threshold_bin, self.left_child, self.right_child)]
        dl = self.default_left.to("cpu", torch.uint8).contiguous()
        leaf = torch.empty(n, dtype=torch.int64)
        lib.trb_tree_leaves(codes.data_ptr(), n, F, cpu[0].data_ptr(), cpu[1].data_ptr(),
                            dl.data_ptr(), cpu[2].data_ptr(), cpu[3].data_ptr(),
                            self.split_feature.numel(), self.missing_code, leaf.data_ptr(),
                            torch.get_num_threads())
        return leaf

    def predict(self, X: Tensor, *, kernel: str = "auto") -> Tensor:
        """(n,) predictions from raw features (``x <= threshold`` left, NaN → default side;
        compared in the thresholds' dtype). On CPU the compiled traversal runs unless
        ``kernel="torch"``; the same values."""
        _check_X(X)
        X = X.to(device=self.leaf_value.device, dtype=self.threshold.dtype)
        if (kernel != "torch" and X.device.type == "cpu"
                and X.dtype in (torch.float32, torch.float64)):
            try:
                lib = _native.load()
            except _native.NativeUnavailable:
                lib = None  # announced by RegressionTree when it chose the torch path
            if lib is not None:
                return self.leaf_value[self._native_leaves_raw(lib, X.contiguous())]

        def go_left(nid, f):
            x = X.gather(1, f.unsqueeze(1)).squeeze(1)
            return torch.where(torch.isnan(x), self.default_left[nid], x <= self.threshold[nid])

        return self._walk(X.shape[0], go_left, X.device)

    def feature_gain(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.float64, device=self.leaf_value.device)
        return out.index_add_(0, self.split_feature, self.split_gain.double())

    def feature_count(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.int64, device=self.leaf_value.device)
        return out.index_add_(0, self.split_feature, torch.ones_like(self.split_feature))

    _tensor_names = ("split_feature", "threshold_bin", "threshold", "default_left", "left_child",
                     "right_child", "split_gain", "leaf_value")

    def to(self, device) -> "TreeModel":
        return TreeModel(**{k: getattr(self, k).to(device) for k in self._tensor_names},
                         depth=self.depth, missing_code=self.missing_code)

    def state(self):
        tensors = {k: getattr(self, k) for k in self._tensor_names}
        return tensors, {"type": self.type_name, "depth": self.depth, "missing_code": self.missing_code}

    @classmethod
    def from_state(cls, tensors, meta):
        return cls(**{k: tensors[k] for k in cls._tensor_names}, depth=int(meta["depth"]),
                   missing_code=int(meta.get("missing_code", 255)))

    def __repr__(self):
        return f"TreeModel(leaves={self.num_leaves}, depth={self.depth})"


class RegressionTree(Params):
    """Histogram-based regression tree grown leaf-wise (best-first), LightGBM style.

    Args:
        max_leaves: maximum number of leaves (>= 2).
        max_depth: maximum depth (root = depth 0); None or -1 = unlimited.
        min_child_weight: minimum Σ weight (hessian) in each child.
        min_samples_leaf: minimum number of rows in each child (>= 1).
        l2: λ, L2 penalty on leaf values (``value = G / (H + λ)``).
        min_split_gain: a split is made only if its gain exceeds this.
        n_bins: value bins per feature, in [2, 255] (uint8 codes, NaN → code 255).
        feature_fraction: fraction of features (at least one) considered per tree, drawn with
            the ``generator`` passed to ``fit`` (or a generator seeded from ``seed`` and the
            number of previous fits).
        bin_sample_count: rows used to place the bin edges (seeded sample above).
        seed: seed for the binning sample and, absent a generator, feature sub-sampling.
        kernel: ``"auto"`` (default: the compiled CPU kernels of :mod:`torchrankboost._native`
            on CPU when they build here, the pure-torch path otherwise, announced once with
            a warning on CPU; always torch on other devices), ``"native"`` (the compiled
            kernels or an error saying why not) or ``"torch"`` (the pure-torch reference).
            Both give the same trees bit for bit; ``kernel_`` says which one the last fit
            used.

    Missing values: every candidate split is tried with NaNs going left and going right; the
    better side is stored as ``default_left``. Ties prefer the smaller feature index, then the
    smaller threshold, then NaN-left (so a node without NaNs sends unseen NaNs left).
    """

    def __init__(self, *, max_leaves: int = 31, max_depth: Optional[int] = None,
                 min_child_weight: float = 1e-3, min_samples_leaf: int = 20, l2: float = 0.0,
                 min_split_gain: float = 0.0, n_bins: int = 255, feature_fraction: float = 1.0,
                 bin_sample_count: int = 200_000, seed: int = 0, kernel: str = "auto"):
        if kernel not in KERNELS:
            raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
        self.kernel = kernel
        self.kernel_: Optional[str] = None
        self.max_leaves = _check_int(max_leaves, "max_leaves", 2)
        if max_depth is None or max_depth == -1:
            self.max_depth = None
        else:
            self.max_depth = _check_int(max_depth, "max_depth", 1)
        self.min_child_weight = _check_float(min_child_weight, "min_child_weight", 0.0)
        self.min_samples_leaf = _check_int(min_samples_leaf, "min_samples_leaf", 1)
        self.l2 = _check_float(l2, "l2", 0.0)
        self.min_split_gain = _check_float(min_split_gain, "min_split_gain", 0.0)
        self.n_bins = _check_int(n_bins, "n_bins", 2, 255)
        self.feature_fraction = _check_float(feature_fraction, "feature_fraction", 0.0, 1.0, lo_open=True)
        self.bin_sample_count = _check_int(bin_sample_count, "bin_sample_count", 2)
        self.seed = _check_int(seed, "seed", 0)
        self._num_fits = 0

    def __repr__(self):
        return (f"RegressionTree(max_leaves={self.max_leaves}, max_depth={self.max_depth}, "
                f"min_child_weight={self.min_child_weight}, min_samples_leaf={self.min_samples_leaf}, "
                f"l2={self.l2}, min_split_gain={self.min_split_gain}, n_bins={self.n_bins}, "
                f"feature_fraction={self.feature_fraction}"
                + (f", kernel={self.kernel!r})" if self.kernel != "auto" else ")"))

    def prepare(self, X: Tensor, *, context=None) -> BinnedFeatures:
        """Bin X (n, F) once: uint8 codes, NaN → 255. ``context``: an enabled
        :class:`~torchrankboost.distributed.DistContext` for a data-parallel fit (``X`` is this
        rank's shard; the edges are those of all ranks' rows and the fits sum their
        histograms over the ranks, see the module docstring)."""
        return bin_features(X, n_bins=self.n_bins, sample_count=self.bin_sample_count,
                            seed=self.seed, context=context)

    # -- split search -----------------------------------------------------------------------
    def _candidates(self, prepared: BinnedFeatures, feat_ok: Tensor, miss: Tensor):
        """Compact list of the split candidates of one fit, in (feature, bin, direction) order.

        A candidate is a threshold bin ``t < num_bins[f]`` of a sampled feature ``f``, with NaN
        going left (direction 0) and, for features with NaNs among the fit's rows (``miss``
        (F,) bool, from the root's missing slot), also with NaN going right (direction 1).
        Features without NaNs send NaN left (both directions give the same gain there and the
        tie rule prefers NaN-left). Returns a dict of (Q,)
        tensors: ``pos`` (flat index ``f·Vm + t`` into cumulative sums of width ``Vm``),
        ``feat``, ``nan_left`` (bool), ``info`` (Q, 3) float64 = (f, t, default_left), and
        ``Vm`` = max number of value bins.
        """
        dev = prepared.codes.device
        num_bins = prepared.num_bins.to(dev)
        F = num_bins.numel()
        Vm = max(1, int(num_bins.max().item())) if F else 1
        Vm = min(Vm, prepared.missing_code)
        t_ar = torch.arange(Vm, device=dev)
        ok = (t_ar.unsqueeze(0) < num_bins.unsqueeze(1)) & feat_ok.unsqueeze(1)  # (F, Vm)
        ndir = torch.where(miss, 2, 1).unsqueeze(1).expand(F, Vm)
        reps = torch.where(ok, ndir, torch.zeros_like(ndir)).reshape(-1)
        pos = torch.repeat_interleave(torch.arange(F * Vm, device=dev), reps)
        # direction of each repeated entry: 0 for the first copy, 1 for the second
        first = torch.ones_like(pos, dtype=torch.bool)
        if pos.numel() > 1:
            first[1:] = pos[1:] != pos[:-1]
        feat = torch.div(pos, Vm, rounding_mode="floor")
        thr = pos - feat * Vm
        info = torch.stack([feat, thr, first.to(torch.int64)], 1).double()
        return {"pos": pos, "feat": feat, "nan_left": first, "info": info, "Vm": Vm,
                "any_missing": bool(miss.any()) if F else False}

    def _best_splits(self, hists: Tensor, cand: dict):
        """Best split of each node in a batch.

        Args:
            hists: (B, 3, F, 256) float64 histograms (channels Σ w·t, Σ w, count; slot 255 =
                missing).
            cand: from :meth:`_candidates`.

        Returns:
            list of ``(gain, feature, bin, default_left)`` or None per node.

        Cumulative sums over the value bins give the left sums with NaN right; adding the
        missing slot gives NaN left; right = node total − left. Only the compact candidate
        list is evaluated (no (B, F, 255, dirs, sides, 3) intermediates).
        """
        lam = self.l2
        Bn, _, F, S = hists.shape
        V = S - 1
        Vm = cand["Vm"]
        pos = cand["pos"]
        if pos.numel() == 0:
            return [None] * Bn
        c = torch.cumsum(hists[..., :Vm], -1)  # (B, 3, F, Vm) left sums, missing excluded
        miss = hists[..., V]  # (B, 3, F)
        tot = c[..., Vm - 1] + miss  # (B, 3, F) node totals (per feature, equal up to rounding)
        # torch.gather along the last dim (much faster than index_select there on CPU)
        Q = pos.numel()
        cs = torch.gather(c.reshape(Bn * 3, F * Vm), 1, pos.expand(Bn * 3, Q))  # (B·3, Q)
        fq = cand["feat"].expand(Bn * 3, Q)
        ts = torch.gather(tot.reshape(Bn * 3, F), 1, fq)
        if cand["any_missing"]:
            ms = torch.gather(miss.reshape(Bn * 3, F), 1, fq)
            left = torch.where(cand["nan_left"], cs + ms, cs).view(Bn, 3, Q)
        else:  # no NaN in the training data: the missing slot is exactly 0, left = cs
            left = cs.view(Bn, 3, Q)
        right = ts.view(Bn, 3, Q) - left
        gl, hl, nl = left.unbind(1)
        gr, hr, nr = right.unbind(1)
        dl = hl + lam
        dr = hr + lam
        gain = gl * gl / dl + gr * gr / dr  # (B, Q)
        mn = self.min_samples_leaf - 0.5
        mcw = self.min_child_weight
        ok = (torch.minimum(nl, nr) >= mn) & (torch.minimum(hl, hr) >= mcw)
        if not mcw > 0:  # otherwise h >= mcw > 0 and λ >= 0 imply d > 0
            ok &= torch.minimum(dl, dr) > 0
        gain = torch.where(ok, gain, torch.full_like(gain, -math.inf))
        best, flat = torch.max(gain, 1)
        T0 = tot[:, :, 0]  # (B, 3)
        d0 = T0[:, 1] + lam
        parent = torch.where(d0 > 0, T0[:, 0] * T0[:, 0] / torch.where(d0 > 0, d0, torch.ones_like(d0)),
                             torch.zeros_like(d0))
        res = torch.cat([best.unsqueeze(1), parent.unsqueeze(1), cand["info"].index_select(0, flat)], 1)
        out = []
        for bg, pa, f, t, dleft in res.tolist():
            gain_b = bg - pa
            if not (math.isfinite(bg) and gain_b > max(self.min_split_gain, _REL_EPS * abs(pa))):
                out.append(None)
                continue
            out.append((gain_b, int(f), int(t), dleft == 1.0))
        return out

    # -- fit --------------------------------------------------------------------------------
    def _feature_mask(self, F: int, dev, generator: Optional[torch.Generator]) -> Tensor:
        """(F,) bool: the features this fit may split on (``feature_fraction`` of them, drawn
        with ``generator`` or a generator seeded from ``seed`` and the number of previous fits)."""
        feat_ok = torch.ones(F, dtype=torch.bool, device=dev)
        if self.feature_fraction < 1.0 and F > 1:
            k = max(1, int(round(self.feature_fraction * F)))
            gen = generator
            if gen is None:
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self._num_fits)
            perm = torch.randperm(F, generator=gen, device=gen.device).to(dev)
            feat_ok = torch.zeros(F, dtype=torch.bool, device=dev)
            feat_ok[perm[:k]] = True
        self._num_fits += 1
        return feat_ok

    def fit(self, prepared: BinnedFeatures, target: Tensor, weight: Optional[Tensor] = None, *,
            rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None) -> TreeModel:
        """Fit a tree to ``target`` (n,) with weights ``weight`` (n,) on ``rows`` (or all rows)."""
        return self._grow(prepared, target, weight, rows, generator)[0]

    def fit_predict(self, prepared: BinnedFeatures, target: Tensor, weight: Optional[Tensor] = None,
                    *, rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None):
        """:meth:`fit`, and the fitted tree's output on every row of ``prepared``: ``(model,
        f)``, ``f`` ``(n,)`` equal to ``model.predict_prepared(prepared)`` (read off the row
        partition of the growth when it covered every row: no traversal)."""
        model, grower = self._grow(prepared, target, weight, rows, generator)
        f = grower.output(model.leaf_value) if rows is None else None
        return model, (f if f is not None else model.predict_prepared(prepared))

    def _grow(self, prepared, target, weight, rows, generator):
        if not isinstance(prepared, BinnedFeatures):
            raise ValueError("prepared: expected the output of RegressionTree.prepare(X)")
        n, F = prepared.codes.shape
        dev = prepared.codes.device
        target, weight, rows = _check_fit_inputs(n, dev, target, weight, rows)
        w = weight.double()
        wt = w * target.double()
        feat_ok = self._feature_mask(F, dev, generator)
        if self.resolve_kernel(prepared) == "native":
            grower = _NativeTreeGrower(self, prepared, wt, w, rows, feat_ok,
                                       reduce=_reducer(prepared, "FS3"))
        else:
            grower = _TreeGrower(self, prepared, wt, w, rows, feat_ok,
                                 reduce=_reducer(prepared, "3FS"))
        grower.grow()
        leaf_value = grower.leaf_values().to(_out_dtype(target))
        return grower.model(leaf_value), grower

    def resolve_kernel(self, prepared: BinnedFeatures) -> str:
        """``"native"`` or ``"torch"``: the kernels a fit on ``prepared`` runs (also set as
        ``kernel_``). ``kernel="native"`` raises ``RuntimeError`` with the reason when the
        compiled kernels cannot run; ``"auto"`` falls back to torch on CPU with a one-time
        warning naming the reason (never silently)."""
        self.kernel_ = choose_kernel(self.kernel, prepared.codes)
        return self.kernel_


def _reducer(prepared: BinnedFeatures, layout: str):
    """The sum over ranks of a data-parallel fit on ``prepared`` (``None`` in one process):
    ``reduce(buf)`` in place on a float64 buffer.

    A node histogram (``F·S·3`` values in ``layout`` ``"FS3"``, the compiled kernels', or
    ``"3FS"``, the torch path's) travels compacted: only the slots that can hold rows — the
    value bins ``0 .. num_bins[f] − 1`` of each feature and the missing slot of the features
    with NaNs on some rank (``has_missing``, agreed by the binning) — the others being 0 on
    every rank (``Σ num_bins / (F·S)`` of the volume, about 0.7 for LETOR-like features).
    Other buffers (the leaf sums) are all-reduced whole.
    """
    ctx = getattr(prepared, "context", None)
    if ctx is None or not ctx.enabled:
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
            return ctx.all_reduce_sum(buf)
        flat = buf.view(-1)
        at = idx if idx.device == flat.device else idx.to(flat.device)
        flat.index_copy_(0, at, ctx.all_reduce_sum(flat.index_select(0, at)))
        return buf

    return reduce


def _all_rows_count(prepared: BinnedFeatures, slots: int) -> Tensor:
    """(F, slots) row counts per bin over all rows: the same for every fit on ``prepared``
    (cached there)."""
    codes = prepared.codes
    count = prepared.cache.get(("count", slots))
    if count is None or count.device != codes.device:
        ones = torch.ones(codes.shape[0], dtype=torch.float64, device=codes.device)
        count = _tree_histogram(codes, None, torch.stack([ones, ones], 1), None, slots)[2]
        prepared.cache[("count", slots)] = count
    return count


class _TreeGrower:
    """One tree being grown best-first: the leaves (with their histograms and best splits) and
    the internal nodes made so far.

    The root's histogram comes from all of the fit's rows; each split scatters only the smaller
    child's rows and takes the larger child's histogram as the parent's minus the smaller's.

    ``reduce``: the data-parallel hook (as :class:`_NativeTreeGrower`'s): ``reduce(t)``
    replaces a float64 tensor by its sum over the ranks, in place. It is applied to every
    histogram this grower builds (the root's and each smaller child's) and to the leaf sums;
    the ``min_samples_leaf`` test and the choice of the smaller child then read the row
    counts off the reduced histograms (the count channel), so every rank grows the same
    tree. Without it (one process) the counts are those of the rows, the same numbers.
    """

    def __init__(self, tree: RegressionTree, prepared: BinnedFeatures, wt: Tensor, w: Tensor,
                 rows: Optional[Tensor], feat_ok: Tensor, reduce=None):
        self.tree = tree
        self.reduce = reduce
        self.prepared = prepared
        self.codes = prepared.codes
        n = self.codes.shape[0]
        dev = self.codes.device
        self.values = torch.stack([wt, w], 1)
        self.packed = torch.complex(wt, w) if dev.type == "cpu" else None
        self.slots = prepared.missing_code + 1
        self.max_depth = tree.max_depth if tree.max_depth is not None else 1 << 30
        # Unit weights: the count channel equals Σ w exactly (sums of 1.0 below 2^53).
        self.unit = bool((w == 1.0).all()) if n else False
        rows_all = rows is None
        if rows_all:
            rows = torch.arange(n, device=dev)
        self.root_count = _all_rows_count(prepared, self.slots) if rows_all else None
        root = _Leaf(0, rows, self.histogram(rows, all_rows=rows_all), 0, -1, True)
        # features with NaNs among the fit's rows (exact counts in the missing slot): only they
        # need the NaN-right direction; every node's rows are a subset of the root's
        self.cand = tree._candidates(prepared, feat_ok, root.hist[2, :, self.slots - 1] > 0)
        self.leaves = [root]
        # internal nodes: split feature, threshold bin, default-left, left/right child, gain
        self.sf, self.tb, self.dl, self.lc, self.rc, self.sg = [], [], [], [], [], []
        self.depth = 0
        self.evaluate(root)

    def histogram(self, rows: Tensor, all_rows: bool = False) -> Tensor:
        """(3, F, slots) histogram of ``rows`` (``all_rows``: every row, cached counts),
        summed over the ranks when data-parallel."""
        h = _tree_histogram(self.codes, None if all_rows else rows, self.values, self.packed, self.slots,
                            count=self.root_count if all_rows else None, unit_weight=self.unit)
        if self.reduce is not None:
            self.reduce(h)
        return h

    def node_count(self, leaf: _Leaf) -> float:
        """The leaf's number of rows (over all ranks when data-parallel: feature 0's counts
        in its reduced histogram, exact integers)."""
        if self.reduce is None:
            return leaf.rows.numel()
        return float(leaf.hist[2, 0].sum())

    def evaluate(self, *lvs: _Leaf) -> None:
        """Set each leaf's best split (None when it may not or cannot split), one batch."""
        msl = self.tree.min_samples_leaf
        todo = [lf for lf in lvs if lf.depth < self.max_depth and self.node_count(lf) >= 2 * msl]
        for lf in lvs:
            lf.best = None
        if todo:
            res = self.tree._best_splits(torch.stack([lf.hist for lf in todo]), self.cand)
            for lf, r in zip(todo, res):
                lf.best = r

    def grow(self) -> None:
        """Split the leaf of largest gain (the first one on ties) until ``max_leaves`` or no
        leaf has a split."""
        while len(self.leaves) < self.tree.max_leaves:
            cands = [lf for lf in self.leaves if lf.best is not None]
            if not cands:
                break
            self.split(max(cands, key=lambda lf: lf.best[0]))  # first max: lowest position in list

    def split(self, leaf: _Leaf) -> None:
        """Replace ``leaf`` by its two children (the left one keeps its leaf id)."""
        leaves = self.leaves
        gain, f, t, d_left = leaf.best
        code = self.codes[:, f].index_select(0, leaf.rows)
        go_left = code <= t
        if d_left:
            go_left |= code == self.prepared.missing_code
        lrows = leaf.rows[go_left]
        rrows = leaf.rows[~go_left]
        k = len(self.sf)
        self.sf.append(f); self.tb.append(t); self.dl.append(bool(d_left)); self.sg.append(gain)
        self.lc.append(~leaf.leaf_id); self.rc.append(~len(leaves))
        if leaf.parent >= 0:
            (self.lc if leaf.is_left else self.rc)[leaf.parent] = k
        if self.reduce is None:
            small_left = lrows.numel() <= rrows.numel()
        else:  # the global row counts of the children, from the reduced histogram
            cnt = leaf.hist[2, f]
            n_left = float(cnt[: t + 1].sum()) + (float(cnt[-1]) if d_left else 0.0)
            small_left = n_left <= float(cnt.sum()) - n_left
        hs = self.histogram(lrows if small_left else rrows)
        hl = leaf.hist - hs
        if not small_left:
            hs, hl = hl, hs
        left = _Leaf(leaf.leaf_id, lrows, hs, leaf.depth + 1, k, True)
        right = _Leaf(len(leaves), rrows, hl, leaf.depth + 1, k, False)
        leaf.hist = None
        self.depth = max(self.depth, leaf.depth + 1)
        leaves[leaves.index(leaf)] = left
        leaves.append(right)
        self.evaluate(left, right)

    def output(self, leaf_value: Tensor) -> Optional[Tensor]:
        """The tree's output on every row (``None``: the caller traverses the tree)."""
        return None

    def leaf_values(self) -> Tensor:
        """float64 Newton leaf values in leaf id order (see :func:`_leaf_values`; the leaf
        sums are summed over the ranks first when data-parallel)."""
        sums = _leaf_sums(self.leaves, self.values[:, 0], self.values[:, 1])
        if self.reduce is not None:
            self.reduce(sums)
        return _newton_values(sums, self.tree.l2)

    def model(self, leaf_value: Tensor) -> TreeModel:
        """The fitted :class:`TreeModel` with the given leaf values (in leaf id order)."""
        dev = self.codes.device
        sf_t = torch.tensor(self.sf, dtype=torch.int64, device=dev)
        tb_t = torch.tensor(self.tb, dtype=torch.int64, device=dev)
        edges = self.prepared.edges.to(dev)
        thr = edges[sf_t, tb_t] if self.sf else edges.new_empty(0)
        return TreeModel(split_feature=sf_t, threshold_bin=tb_t, threshold=thr,
                         default_left=torch.tensor(self.dl, dtype=torch.bool, device=dev),
                         left_child=torch.tensor(self.lc, dtype=torch.int64, device=dev),
                         right_child=torch.tensor(self.rc, dtype=torch.int64, device=dev),
                         split_gain=torch.tensor(self.sg, dtype=torch.float64, device=dev),
                         leaf_value=leaf_value, depth=self.depth, missing_code=self.prepared.missing_code)


def _newton_values(sums: Tensor, l2: float) -> Tensor:
    """``G / (H + λ)`` per leaf from ``(L, 2)`` float64 sums (0 where the denominator is not
    positive)."""
    denom = sums[:, 1] + l2
    return torch.where(denom > 0, sums[:, 0] / torch.where(denom > 0, denom, torch.ones_like(denom)),
                       torch.zeros_like(denom))


def _leaf_values(leaves, wt: Tensor, w: Tensor, l2: float) -> Tensor:
    """float64 Newton leaf values ``G / (H + λ)`` in leaf id order, sorting ``leaves`` by id.

    Exact sums from the rows (not from subtracted histograms), accumulated sequentially in
    each leaf's row order (``index_add_`` over the concatenated rows), which the compiled
    kernels reproduce bit for bit.
    """
    return _newton_values(_leaf_sums(leaves, wt, w), l2)


def _leaf_sums(leaves, wt: Tensor, w: Tensor) -> Tensor:
    """``(L, 2)`` float64 ``(Σ w·t, Σ w)`` per leaf in leaf id order (sorting ``leaves`` by
    id), sequentially in each leaf's row order (see :func:`_leaf_values`)."""
    leaves.sort(key=lambda lf: lf.leaf_id)
    sizes = torch.tensor([lf.rows.numel() for lf in leaves], device=wt.device)
    all_rows = torch.cat([lf.rows for lf in leaves])
    leaf_of = torch.repeat_interleave(torch.arange(len(leaves), device=wt.device), sizes)
    sums = torch.zeros((len(leaves), 2), dtype=torch.float64, device=wt.device)
    sums[:, 0].index_add_(0, leaf_of, wt.index_select(0, all_rows))
    sums[:, 1].index_add_(0, leaf_of, w.index_select(0, all_rows))
    return sums


class _NativeTreeGrower:
    """The same best-first growth as :class:`_TreeGrower` in one call of the compiled kernel
    ``trb_grow`` (``torchrankboost/_native/trees.c``; CPU, uint8 codes): root histogram,
    split search, in-place stable row partition (every leaf owns a contiguous range of one
    int32 row buffer, as in LightGBM's data partition), the smaller child's histogram and the
    larger child's by subtraction, leaf sums. Same splits, thresholds and leaf values bit for
    bit. Histogram buffers are kept on the prepared data between fits.

    ``reduce``: the data-parallel hook, ``reduce(buf)`` replacing a float64 tensor by its sum
    over all ranks, called on every histogram and on the leaf sums (every decision of the
    growth is read off histograms, so every rank grows the same tree).
    """

    def __init__(self, tree: RegressionTree, prepared: BinnedFeatures, wt: Tensor, w: Tensor,
                 rows: Optional[Tensor], feat_ok: Tensor, reduce=None):
        lib = _native.load()
        codes = prepared.codes.contiguous()
        n, F = codes.shape
        S = prepared.missing_code + 1
        L = tree.max_leaves
        cache = prepared.cache
        key = ("native_buffers", F, S, L)
        bufs = cache.get(key)
        if bufs is None:  # reused by every fit on this prepared data
            bufs = {"pool": torch.empty((L + 1, F, S, 3), dtype=torch.float64),
                    "free": torch.empty(L + 1, dtype=torch.int64),
                    "leaves": torch.empty(lib.trb_leaf_struct_size() * (L + 1), dtype=torch.uint8),
                    "order": torch.empty(L + 1, dtype=torch.int64)}
            cache[key] = bufs
        gh = torch.stack([wt, w], 1).contiguous()
        all_rows = rows is None
        rows32 = torch.arange(n, dtype=torch.int32) if all_rows else rows.to(torch.int32).contiguous()
        scratch = torch.empty_like(rows32)
        num_bins = prepared.num_bins.to("cpu", torch.int64).contiguous()
        Vm = min(max(1, int(num_bins.max())) if F else 1, prepared.missing_code)
        feat_ok = feat_ok.to("cpu", torch.uint8).contiguous()
        miss_feat = torch.empty(F, dtype=torch.uint8)
        i64 = dict(dtype=torch.int64)
        sf, tb, lc, rc = (torch.empty(L, **i64) for _ in range(4))
        dl = torch.empty(L, dtype=torch.uint8)
        sg = torch.empty(L, dtype=torch.float64)
        depth = torch.zeros(1, **i64)
        sums = torch.empty((L, 2), dtype=torch.float64)
        begin, count = torch.empty(L, **i64), torch.empty(L, **i64)
        hook = None if reduce is None else _reduce_callback(reduce)
        cb = _native.REDUCE_FN(0) if hook is None else _native.REDUCE_FN(hook)
        max_depth = tree.max_depth if tree.max_depth is not None else 1 << 62
        nleaves = lib.trb_grow(
            codes.data_ptr(), n, F, rows32.data_ptr(), rows32.numel(), int(all_rows), gh.data_ptr(),
            S, num_bins.data_ptr(), feat_ok.data_ptr(), Vm, tree.l2, tree.min_samples_leaf,
            tree.min_child_weight, tree.min_split_gain, L, max_depth, prepared.missing_code,
            bufs["pool"].data_ptr(), L + 1, bufs["free"].data_ptr(), scratch.data_ptr(),
            miss_feat.data_ptr(), torch.get_num_threads(), cb, sf.data_ptr(), tb.data_ptr(),
            dl.data_ptr(), lc.data_ptr(), rc.data_ptr(), sg.data_ptr(), depth.data_ptr(),
            sums.data_ptr(), begin.data_ptr(), count.data_ptr(), bufs["leaves"].data_ptr(),
            bufs["order"].data_ptr())
        if hook is not None and hook.error is not None:  # raised in the callback: not lost
            raise hook.error
        if nleaves < 1:
            raise RuntimeError(f"trb_grow failed (max_leaves={L})")
        K = nleaves - 1
        self.prepared, self.tree = prepared, tree
        self.codes = prepared.codes
        self.sf, self.tb = sf[:K].tolist(), tb[:K].tolist()
        self.dl = [bool(x) for x in dl[:K].tolist()]
        self.lc, self.rc, self.sg = lc[:K].tolist(), rc[:K].tolist(), sg[:K].tolist()
        self.depth = int(depth)
        self.sums = sums[:nleaves]
        self.n, self.lib, self.rows32 = n, lib, rows32
        self.begin, self.count, self.nleaves = begin, count, nleaves

    def output(self, leaf_value: Tensor) -> Tensor:
        """``(n,)`` float64: each row's leaf value, written through the row partition (the
        growth covered every row)."""
        out = torch.empty(self.n, dtype=torch.float64)
        vals = leaf_value.to(torch.float64).contiguous()
        self.lib.trb_scatter_leaves(self.rows32.data_ptr(), self.begin.data_ptr(),
                                    self.count.data_ptr(), self.nleaves, vals.data_ptr(),
                                    out.data_ptr(), torch.get_num_threads())
        return out

    def grow(self) -> None:
        """(grown in the constructor)"""

    def leaf_values(self) -> Tensor:
        return _newton_values(self.sums, self.tree.l2)

    model = _TreeGrower.model


def _reduce_callback(reduce):
    """A ctypes-callable ``(double *buf, int64_t len)`` that sums ``buf`` over all ranks in
    place through ``reduce`` (a function of a float64 tensor).

    An exception cannot cross the C code: the first one is kept in the callable's ``error``
    (the caller raises it when ``trb_grow`` returns) and the later calls do nothing (a
    failed collective means the process group is gone)."""

    def call(ptr, length):
        if call.error is not None:
            return
        try:
            buf = torch.frombuffer((ctypes.c_double * length).from_address(ctypes.addressof(ptr.contents)),
                                   dtype=torch.float64)
            out = reduce(buf)
            if out is not None and out.data_ptr() != buf.data_ptr():
                buf.copy_(out)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            call.error = exc

    call.error = None
    return call


# ----------------------------------------------------------------------------- stumps


@dataclass
class StumpFeatures:
    """Prepared features for :class:`Stumps`: bins plus candidate thresholds.

    ``thresholds`` (F, T): candidate θ_ft (the bin upper edges; ``h = 1[x > θ]``),
    ``valid`` (F, T) bool: real candidates (padding is False).
    """

    binned: BinnedFeatures
    thresholds: Tensor
    valid: Tensor

    @property
    def codes(self):
        return self.binned.codes

    @property
    def num_rows(self):
        return self.binned.codes.shape[0]

    @property
    def device(self):
        return self.binned.codes.device


class _OneFeatureModel:
    """What :class:`StumpModel` and :class:`FeatureModel` share: the output ``a + b·h`` of one
    feature's weak ranker ``h`` (``coef = (a, b)``), and the gain / count of that feature."""

    feature: int
    coef: Tensor
    gain: float

    def _out(self, h: Tensor) -> Tensor:
        return self.coef[0] + self.coef[1] * h.to(self.coef.dtype)

    def feature_gain(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.float64, device=self.coef.device)
        out[self.feature] = self.gain
        return out

    def feature_count(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.int64, device=self.coef.device)
        out[self.feature] = 1
        return out


class StumpModel(_OneFeatureModel):
    """``a + b·1[x_f > θ]`` (NaN → 0). ``threshold_index`` is the bin index of θ (``code > t``)."""

    type_name = "StumpModel"

    def __init__(self, *, feature: int, threshold: Tensor, threshold_index: int, coef: Tensor,
                 gain: float = 0.0, missing_code: int = 255):
        self.feature = int(feature)
        self.threshold = threshold  # 0-d tensor, dtype of X
        self.threshold_index = int(threshold_index)
        self.coef = coef  # (2,) = (a, b), output dtype
        self.gain = float(gain)
        self.missing_code = int(missing_code)

    def predict_prepared(self, prepared) -> Tensor:
        c = prepared.codes[:, self.feature].to(torch.int64)
        return self._out((c > self.threshold_index) & (c != self.missing_code))

    def predict(self, X: Tensor) -> Tensor:
        _check_X(X)
        x = X[:, self.feature].to(device=self.coef.device, dtype=self.threshold.dtype)
        return self._out(x > self.threshold)

    def to(self, device) -> "StumpModel":
        return StumpModel(feature=self.feature, threshold=self.threshold.to(device),
                          threshold_index=self.threshold_index, coef=self.coef.to(device),
                          gain=self.gain, missing_code=self.missing_code)

    def state(self):
        return ({"threshold": self.threshold.reshape(1), "coef": self.coef},
                {"type": self.type_name, "feature": self.feature, "threshold_index": self.threshold_index,
                 "gain": self.gain, "missing_code": self.missing_code})

    @classmethod
    def from_state(cls, tensors, meta):
        return cls(feature=meta["feature"], threshold=tensors["threshold"].reshape(()),
                   threshold_index=meta["threshold_index"], coef=tensors["coef"], gain=meta.get("gain", 0.0),
                   missing_code=meta.get("missing_code", 255))

    def __repr__(self):
        a, b = self.coef.tolist()
        return f"StumpModel({a:.4g} + {b:.4g}·1[x{self.feature} > {float(self.threshold):.6g}])"


def _rows_vector(n, dev, rows, v: Tensor) -> Tensor:
    """v restricted to rows (duplicates add up), zero elsewhere."""
    if rows is None:
        return v
    out = torch.zeros_like(v)
    return out.index_add_(0, rows, v.index_select(0, rows))


def _weighted_channels(n, dev, target, weight, rows):
    """Validated fit inputs as ``(out_dtype, w, w·target)``: float64 ``(n,)`` channels restricted
    to ``rows`` (zero elsewhere, duplicates add up)."""
    target, weight, rows = _check_fit_inputs(n, dev, target, weight, rows)
    w = weight.double()
    return (_out_dtype(target), _rows_vector(n, dev, rows, w),
            _rows_vector(n, dev, rows, w * target.double()))


def _context(prepared):
    """The enabled :class:`~torchrankboost.distributed.DistContext` of a data-parallel fit on
    ``prepared`` (stumps: on its bins), or ``None``."""
    ctx = getattr(prepared, "context", None)
    if ctx is None and isinstance(getattr(prepared, "binned", None), BinnedFeatures):
        ctx = prepared.binned.context
    return ctx if ctx is not None and ctx.enabled else None


def _totals(prepared, *vs: Tensor) -> Tensor:
    """``[Σ v for v in vs]`` as a float64 tensor, summed over the ranks when ``prepared``
    belongs to a data-parallel fit."""
    out = torch.stack([v.sum().double() for v in vs])
    ctx = _context(prepared)
    return ctx.all_reduce_sum(out) if ctx is not None else out


def _masked_score(ok: Tensor, score: Tensor) -> Tensor:
    """``score`` where ``ok``, ``-1`` (below every real score) elsewhere."""
    return torch.where(ok, score, torch.full_like(score, -1.0))


class _BestCandidateLearner(Params):
    """The fit shared by :class:`Stumps` and :class:`FeatureRankers`: score every candidate
    weak ranker ``h`` (a (feature, threshold) pair, or a feature) at once, keep the best.

    ``"correlation"`` scores ``|Σ w·t·h|`` and outputs ``h``; ``"least_squares"`` scores the
    weighted SSE reduction of ``a + b·h`` and outputs that fit. Without a valid candidate the
    model is the constant 0 (least squares: the weighted mean of the target).

    A subclass gives ``_prepared_type`` (with ``num_rows``, ``device``, ``valid``),
    ``_sums(prepared, v)`` (the candidates' ``Σ v·h``, invalid ones 0),
    ``_least_squares(prepared, w, wt)`` (the scores and the statistics that
    ``_ls_coef(stats, *index)`` turns into ``(a, b)``), ``_model(prepared, index, coef,
    gain)`` and ``_constant(prepared, a, dtype)``.
    """

    criterion: str

    def fit(self, prepared, target: Tensor, weight: Optional[Tensor] = None, *,
            rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None):
        """Fit the best candidate to ``target`` (n,) with weights ``weight`` on ``rows``
        (or all rows; ``generator`` is unused)."""
        if not isinstance(prepared, self._prepared_type):
            raise ValueError(f"prepared: expected the output of {type(self).__name__}.prepare(X)")
        dev = prepared.device
        out_dtype, w, wt = _weighted_channels(prepared.num_rows, dev, target, weight, rows)
        if self.criterion == "correlation":
            score = _masked_score(prepared.valid, self._sums(prepared, wt).abs())
        else:
            score, stats = self._least_squares(prepared, w, wt)
        flat = int(torch.argmax(score.reshape(-1)).item())
        index = divmod(flat, score.shape[1]) if score.dim() == 2 else (flat,)
        best = float(score[index].item())
        if best < 0:  # no valid candidate: h ≡ 0 (and the weighted mean for least squares)
            a = 0.0
            if self.criterion == "least_squares":
                Y, W = (float(v) for v in _totals(prepared, wt, w))
                a = Y / W if W > 0 else 0.0
            return self._constant(prepared, a, out_dtype)
        if self.criterion == "correlation":
            coef = torch.tensor([0.0, 1.0], dtype=out_dtype, device=dev)
        else:
            coef = self._ls_coef(stats, *index).to(out_dtype)
        return self._model(prepared, index, coef, best)


class Stumps(_BestCandidateLearner):
    """Binary weak rankers ``h(x) = 1[x_f > θ]``, the best one over all features and thresholds.

    Candidate thresholds per feature are the midpoints between consecutive distinct values when
    there are at most ``max_thresholds + 1`` of them; above that, the quantile bin edges of
    :mod:`.binning` (``max_thresholds + 1`` quantile bins from a seeded row sample of at most
    ``bin_sample_count`` rows). NaN is below every threshold (``h = 0``).

    Args:
        max_thresholds: cap on candidate thresholds per feature (>= 1).
        criterion: ``"correlation"`` — choose max ``|Σ_i w_i t_i h(x_i)|`` and output ``h`` itself
            (0/1; the driver scales it); ``"least_squares"`` — choose the largest weighted SSE
            reduction of ``a + b·h`` and output the weighted LS fit.
        seed: seed of the binning row sample.
    """

    def __init__(self, *, max_thresholds: int = 255, criterion: str = "correlation", seed: int = 0,
                 bin_sample_count: int = 200_000):
        self.max_thresholds = _check_int(max_thresholds, "max_thresholds", 1, 32765)
        if criterion not in ("correlation", "least_squares"):
            raise ValueError(f"criterion: expected 'correlation' or 'least_squares', got {criterion!r}")
        self.criterion = criterion
        self.seed = _check_int(seed, "seed", 0)
        self.bin_sample_count = _check_int(bin_sample_count, "bin_sample_count", 2)
        self._last_prepared = None

    def __repr__(self):
        return f"Stumps(max_thresholds={self.max_thresholds}, criterion={self.criterion!r})"

    def prepare(self, X: Tensor, *, context=None) -> StumpFeatures:
        """Bin ``X`` (n, F) and list the candidate thresholds. ``context``: an enabled
        :class:`~torchrankboost.distributed.DistContext` for a data-parallel fit (the edges of
        all ranks' rows; :meth:`threshold_sums` then sums over the ranks)."""
        b = bin_features(X, n_bins=self.max_thresholds + 1, sample_count=self.bin_sample_count,
                         seed=self.seed, max_bins=32766, context=context)
        nb = b.num_bins
        T = max(1, int(nb.max().item()) - 1) if nb.numel() else 1
        edges = b.edges
        if edges.shape[1] < T:
            edges = torch.nn.functional.pad(edges, (0, T - edges.shape[1]), value=float("inf"))
        thresholds = edges[:, :T]
        valid = torch.arange(T, device=nb.device).unsqueeze(0) < (nb - 1).unsqueeze(1)
        p = StumpFeatures(binned=b, thresholds=thresholds, valid=valid)
        self._last_prepared = p
        return p

    def threshold_sums(self, prepared: StumpFeatures, v: Tensor) -> Tensor:
        """``S[f, t(, j)] = Σ_i v[i(, j)] · 1[x_if > θ_ft]`` for every candidate, by prefix sums.

        Args:
            prepared: from :meth:`prepare`.
            v: (n,) or (n, k) float.

        Returns:
            (F, T) or (F, T, k) in v's dtype (accumulated in float64); padded candidates are 0.
            On the prepared data of a data-parallel fit: summed over every rank's rows (one
            all-reduce of the ``(F, bins, k)`` histogram).
        """
        codes = prepared.codes
        n, F = codes.shape
        if not isinstance(v, Tensor) or v.dim() not in (1, 2) or v.shape[0] != n:
            raise ValueError(f"v: expected shape ({n},) or ({n}, k), got "
                             f"{tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__}")
        squeeze = v.dim() == 1
        vv = v.to(codes.device).double().reshape(n, -1)
        k = vv.shape[1]
        T = prepared.thresholds.shape[1]
        miss = prepared.binned.missing_code
        packed = torch.complex(vv[:, 0], vv[:, 1]) if (k == 2 and codes.device.type == "cpu") else None
        hist, _ = node_histogram(codes, None, vv, slots=miss + 1, counts=False, packed=packed)
        ctx = _context(prepared)
        if ctx is not None:
            hist = ctx.all_reduce_sum(hist.contiguous())
        vals = hist[:, :miss, :]  # (F, V, k) value bins (missing excluded: h = 0)
        csum = torch.cumsum(vals, 1)
        total = csum[:, -1:, :]
        S = total - csum[:, :T, :]  # Σ over bins > t
        S = torch.where(prepared.valid.unsqueeze(-1), S, torch.zeros_like(S))
        out_dtype = v.dtype if v.dtype.is_floating_point else torch.float64
        S = S.to(out_dtype)
        return S[..., 0] if squeeze else S

    def make_model(self, feature: int, threshold_index: Optional[int] = None, *,
                   threshold: Optional[float] = None, prepared: Optional[StumpFeatures] = None,
                   coef=(0.0, 1.0), dtype=None) -> StumpModel:
        """Stump ``coef[0] + coef[1]·1[x_feature > θ]`` for a chosen candidate.

        Give either ``threshold_index`` (into ``prepared.thresholds``; ``prepared`` defaults to
        the last one this learner prepared) or a raw ``threshold`` value.
        """
        p = prepared if prepared is not None else self._last_prepared
        if threshold_index is not None:
            if p is None:
                raise ValueError("prepared: needed to resolve threshold_index (call prepare first)")
            thr = p.thresholds[int(feature), int(threshold_index)]
            t_idx = int(threshold_index)
            if not bool(p.valid[int(feature), t_idx]):
                raise ValueError(f"threshold_index: {t_idx} is not a valid candidate of feature {feature}")
        elif threshold is not None:
            ref = p.thresholds if p is not None else torch.empty(0)
            thr = torch.tensor(float(threshold), dtype=ref.dtype, device=ref.device)
            if p is not None:
                t_idx = int(torch.searchsorted(p.binned.edges[int(feature)].contiguous(), thr.reshape(1)).item())
            else:
                t_idx = -1
        else:
            raise ValueError("threshold_index / threshold: give one of them")
        dev = thr.device
        dt = dtype or (thr.dtype if thr.dtype in (torch.float32, torch.float64) else torch.float32)
        miss = p.binned.missing_code if p is not None else 255
        return StumpModel(feature=int(feature), threshold=thr, threshold_index=t_idx,
                          coef=torch.tensor([float(coef[0]), float(coef[1])], dtype=dt, device=dev),
                          missing_code=miss)

    # -- the candidates' sums for the shared fit -------------------------------------------
    _prepared_type = StumpFeatures
    _sums = threshold_sums

    def _least_squares(self, prepared: StumpFeatures, w: Tensor, wt: Tensor):
        """SSE reduction of the two-level fit (mean of each side of θ) per (feature, threshold)."""
        S = self.threshold_sums(prepared, torch.stack([wt, w], 1))
        Y1, W1 = S[..., 0], S[..., 1]
        if _context(prepared) is None:
            Y, W = wt.sum(), w.sum()
        else:
            Y, W = _totals(prepared, wt, w).unbind()
        Y0, W0 = Y - Y1, W - W1
        ok = prepared.valid & (W1 > 0) & (W0 > 0)
        one = torch.ones_like(W1)
        red = Y1 * Y1 / torch.where(ok, W1, one) + Y0 * Y0 / torch.where(ok, W0, one) - Y * Y / W.clamp_min(1e-300)
        return _masked_score(ok, red), (Y0, W0, Y1, W1)

    @staticmethod
    def _ls_coef(stats, f: int, t: int) -> Tensor:
        Y0, W0, Y1, W1 = stats
        a = Y0[f, t] / W0[f, t]
        return torch.stack([a, Y1[f, t] / W1[f, t] - a])

    @staticmethod
    def _model(prepared: StumpFeatures, index, coef: Tensor, gain: float) -> StumpModel:
        f, t = index
        return StumpModel(feature=f, threshold=prepared.thresholds[f, t].clone(), threshold_index=t,
                          coef=coef, gain=gain, missing_code=prepared.binned.missing_code)

    @staticmethod
    def _constant(prepared: StumpFeatures, a: float, dtype) -> StumpModel:
        miss = prepared.binned.missing_code
        dev = prepared.codes.device
        thr = torch.tensor(float("inf"), dtype=prepared.thresholds.dtype, device=dev)
        return StumpModel(feature=0, threshold=thr, threshold_index=miss, missing_code=miss,
                          coef=torch.tensor([a, 0.0], dtype=dtype, device=dev), gain=0.0)


# ----------------------------------------------------------------------------- single features


@dataclass
class ScaledFeatures:
    """Prepared features for :class:`FeatureRankers`: ``values`` (n, F) = h_f(x_i) (NaN → 0),
    ``lo``/``hi`` (F,) training min/max, ``valid`` (F,) bool (non-constant features)."""

    values: Tensor
    lo: Tensor
    hi: Tensor
    valid: Tensor
    normalize: bool
    context: object = None  # the DistContext of a data-parallel fit (see the module docstring)

    @property
    def num_rows(self):
        return self.values.shape[0]

    @property
    def device(self):
        return self.values.device


def _scale(x: Tensor, lo, hi, normalize: bool) -> Tensor:
    if normalize:
        span = hi - lo
        safe = torch.where(span > 0, span, torch.ones_like(span))
        h = torch.where(span > 0, 2.0 * (x - lo) / safe - 1.0, torch.zeros_like(x))
    else:
        h = x
    return torch.nan_to_num(h, nan=0.0) if h.dtype.is_floating_point else h


class FeatureModel(_OneFeatureModel):
    """``a + b·h_f(x)`` with ``h_f(x) = 2(x − lo)/(hi − lo) − 1`` (training min/max; no clipping
    outside the training range), or ``h_f(x) = x`` without normalisation; NaN → h = 0."""

    type_name = "FeatureModel"

    def __init__(self, *, feature: int, lo: Tensor, hi: Tensor, coef: Tensor, normalize: bool = True,
                 gain: float = 0.0):
        self.feature = int(feature)
        self.lo, self.hi = lo, hi  # 0-d tensors, dtype of X
        self.coef = coef
        self.normalize = bool(normalize)
        self.gain = float(gain)

    def predict(self, X: Tensor) -> Tensor:
        _check_X(X)
        x = X[:, self.feature].to(device=self.coef.device, dtype=self.lo.dtype)
        return self._out(_scale(x, self.lo, self.hi, self.normalize))

    def predict_prepared(self, prepared: ScaledFeatures) -> Tensor:
        return self._out(prepared.values[:, self.feature])

    def to(self, device) -> "FeatureModel":
        return FeatureModel(feature=self.feature, lo=self.lo.to(device), hi=self.hi.to(device),
                            coef=self.coef.to(device), normalize=self.normalize, gain=self.gain)

    def state(self):
        return ({"lo": self.lo.reshape(1), "hi": self.hi.reshape(1), "coef": self.coef},
                {"type": self.type_name, "feature": self.feature, "normalize": self.normalize, "gain": self.gain})

    @classmethod
    def from_state(cls, tensors, meta):
        return cls(feature=meta["feature"], lo=tensors["lo"].reshape(()), hi=tensors["hi"].reshape(()),
                   coef=tensors["coef"], normalize=meta.get("normalize", True), gain=meta.get("gain", 0.0))

    def __repr__(self):
        a, b = self.coef.tolist()
        return f"FeatureModel({a:.4g} + {b:.4g}·h(x{self.feature}))"


class FeatureRankers(_BestCandidateLearner):
    """Each feature is a weak ranker ``h_f``, min–max scaled to [−1, 1] on the training data
    (``normalize=True``; as in the p-norm push experiments) or raw; NaN → 0; constant (or
    all-NaN) features are never chosen.

    Args:
        normalize: scale to [−1, 1] with the training min/max (stored in the model).
        criterion: ``"correlation"`` (max ``|Σ w t h_f|``, output ``h_f``) or ``"least_squares"``
            (largest weighted SSE reduction of ``a + b·h_f``, output the LS fit).
    """

    def __init__(self, *, normalize: bool = True, criterion: str = "correlation"):
        self.normalize = bool(normalize)
        if criterion not in ("correlation", "least_squares"):
            raise ValueError(f"criterion: expected 'correlation' or 'least_squares', got {criterion!r}")
        self.criterion = criterion

    def __repr__(self):
        return f"FeatureRankers(normalize={self.normalize}, criterion={self.criterion!r})"

    def prepare(self, X: Tensor, *, context=None) -> ScaledFeatures:
        """Scale ``X`` (n, F) once. ``context``: an enabled
        :class:`~torchrankboost.distributed.DistContext` for a data-parallel fit (the min/max
        of all ranks' rows; :meth:`feature_sums` then sums over the ranks)."""
        _check_X(X)
        ctx = context if context is not None and context.enabled else None
        nan = torch.isnan(X)
        if ctx is not None:  # the min/max over every rank's rows (+-inf: none here)
            lo = ctx.all_reduce_min(torch.where(nan, torch.full_like(X, math.inf), X).amin(0)
                                    if X.shape[0] else X.new_full((X.shape[1],), math.inf))
            hi = ctx.all_reduce_max(torch.where(nan, torch.full_like(X, -math.inf), X).amax(0)
                                    if X.shape[0] else X.new_full((X.shape[1],), -math.inf))
        else:
            lo = torch.where(nan, torch.full_like(X, math.inf), X).amin(0) if X.shape[0] else X.new_zeros(X.shape[1])
            hi = torch.where(nan, torch.full_like(X, -math.inf), X).amax(0) if X.shape[0] else X.new_zeros(X.shape[1])
        valid = torch.isfinite(lo) & torch.isfinite(hi) & (hi > lo)
        lo = torch.where(valid, lo, torch.zeros_like(lo))
        hi = torch.where(valid, hi, torch.zeros_like(hi))
        values = _scale(X, lo, hi, self.normalize)
        values = torch.where(valid.unsqueeze(0), values, torch.zeros_like(values))
        return ScaledFeatures(values=values, lo=lo, hi=hi, valid=valid, normalize=self.normalize,
                              context=ctx)

    def feature_sums(self, prepared: ScaledFeatures, v: Tensor) -> Tensor:
        """``Σ_i v[i(, j)] · h_f(x_i)`` for every feature: (F,) or (F, k), accumulated in float64
        (over every rank's rows on the prepared data of a data-parallel fit)."""
        Hm = prepared.values
        n = Hm.shape[0]
        if not isinstance(v, Tensor) or v.dim() not in (1, 2) or v.shape[0] != n:
            raise ValueError(f"v: expected shape ({n},) or ({n}, k), got "
                             f"{tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__}")
        vv = v.to(Hm.device).double().reshape(n, -1)
        out = torch.zeros((Hm.shape[1], vv.shape[1]), dtype=torch.float64, device=Hm.device)
        for s in range(0, n, _MM_CHUNK):  # chunks bound the float64 copy of the features
            out += Hm[s : s + _MM_CHUNK].double().t() @ vv[s : s + _MM_CHUNK]
        ctx = _context(prepared)
        if ctx is not None:
            ctx.all_reduce_sum(out)
        out_dtype = v.dtype if v.dtype.is_floating_point else torch.float64
        out = out.to(out_dtype)
        return out[:, 0] if v.dim() == 1 else out

    def make_model(self, prepared: ScaledFeatures, feature: int, coef=(0.0, 1.0), dtype=None) -> FeatureModel:
        """Model ``coef[0] + coef[1]·h_feature`` with the training scale of ``prepared``."""
        dt = dtype or (prepared.values.dtype if prepared.values.dtype in (torch.float32, torch.float64) else torch.float32)
        f = int(feature)
        return FeatureModel(feature=f, lo=prepared.lo[f].clone(), hi=prepared.hi[f].clone(),
                            coef=torch.tensor([float(coef[0]), float(coef[1])], dtype=dt, device=prepared.values.device),
                            normalize=prepared.normalize)

    # -- the candidates' sums for the shared fit -------------------------------------------
    _prepared_type = ScaledFeatures
    _sums = feature_sums

    def _least_squares(self, prepared: ScaledFeatures, w: Tensor, wt: Tensor):
        """SSE reduction of the weighted linear fit ``a + b·h_f`` per feature."""
        Hm = prepared.values
        n, F = Hm.shape
        S = self.feature_sums(prepared, torch.stack([wt, w], 1))
        Sht, Sh = S[:, 0], S[:, 1]
        Shh = torch.zeros(F, dtype=torch.float64, device=Hm.device)
        for s in range(0, n, _MM_CHUNK):
            hc = Hm[s : s + _MM_CHUNK].double()
            Shh += (hc * hc).t() @ w[s : s + _MM_CHUNK]
        if _context(prepared) is None:
            Y, W = wt.sum(), w.sum()
        else:
            _context(prepared).all_reduce_sum(Shh)
            Y, W = _totals(prepared, wt, w).unbind()
        Wc = W.clamp_min(1e-300)
        Sxx = Shh - Sh * Sh / Wc
        Sxy = Sht - Sh * Y / Wc
        ok = prepared.valid & (Sxx > 1e-12 * Shh.clamp_min(1e-300))
        red = Sxy * Sxy / torch.where(ok, Sxx, torch.ones_like(Sxx))
        return _masked_score(ok, red), (Sxy, Sxx, Sh, Y, W)

    @staticmethod
    def _ls_coef(stats, f: int) -> Tensor:
        Sxy, Sxx, Sh, Y, W = stats
        b = Sxy[f] / Sxx[f]
        return torch.stack([(Y - b * Sh[f]) / W, b])

    @staticmethod
    def _model(prepared: ScaledFeatures, index, coef: Tensor, gain: float) -> FeatureModel:
        (f,) = index
        return FeatureModel(feature=f, lo=prepared.lo[f].clone(), hi=prepared.hi[f].clone(), coef=coef,
                            normalize=prepared.normalize, gain=gain)

    def _constant(self, prepared: ScaledFeatures, a: float, dtype) -> FeatureModel:
        return self.make_model(prepared, 0, coef=(a, 0.0), dtype=dtype)


# ----------------------------------------------------------------------------- registry

_REGISTRY = {cls.type_name: cls for cls in (TreeModel, StumpModel, FeatureModel)}
#: the ``type`` names of files written before the model class names were used
_LEGACY_TYPES = {"RegressionTree": TreeModel, "Stump": StumpModel, "FeatureRanker": FeatureModel}


def weak_model_from_state(tensors: dict, meta: dict):
    """Rebuild a fitted weak model from ``state()`` output, dispatching on ``meta["type"]``."""
    t = meta.get("type") if isinstance(meta, dict) else None
    cls = _REGISTRY.get(t) or _LEGACY_TYPES.get(t)
    if cls is None:
        raise ValueError(f"meta: unknown weak model type {t!r} (known: {sorted(_REGISTRY)})")
    return cls.from_state(tensors, meta)
