"""Histogram regression trees: the learner :class:`RegressionTree` (registry name ``"tree"``)
and its fitted model :class:`TreeModel`.

A tree split of a node into L and R has gain

    gain = G_L² / (H_L + λ) + G_R² / (H_R + λ) − G² / (H + λ)          (λ = ``l2``)

(no factor ½, as in LightGBM's reported gains); leaf values are ``G_leaf / (H_leaf + λ)``.
Trees grow best-first on bin codes (:mod:`torchrankboost.kernels.binning`); the growth itself runs in a tree
backend chosen by :func:`~torchrankboost.kernels.choose_backend` (the compiled CPU
kernels or the pure-torch reference; the same trees bit for bit), and so does the traversal.

The arithmetic (:mod:`torchrankboost.kernels.fixed_point`): the fit's ``w·t`` and ``w`` become
int64 fixed point once (a power-of-two scale per channel from their maxima over the ranks),
histograms are exact integer sums, and the gains and leaf values read those sums converted
back to float64, so the same tree comes out of every backend, any number of processes and
any order of the rows.

Data-parallel: the binning agrees on the edges of all ranks' rows; a tree all-reduces (int64,
exact) each node histogram it builds (the root's, then the smaller child's of each split: the
larger child's is still the parent's minus it), and reads row counts (the
``min_samples_leaf`` tests, the smaller child) and leaf sums off the reduced histograms.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from ...kernels.binning import (MAX_INT16_BINS, BinnedFeatures, bin_features, check_features,
                               code_slots)
from ...kernels import GrownTree, TreeParams, check_kernel, choose_backend, newton_values
from ...kernels.fixed_point import FixedPoint, quantize_fit
from ...kernels.quantized import check_bits, quantize_fit_stochastic
from ...params import Params
from .base import check_fit_inputs, check_float, check_int, fit_context, out_dtype
from .memory import check_histogram_memory
from ...parallel import DistContext
from ...contract import DeviceLike

__all__ = ["RegressionTree", "TreeModel", "leaf_values", "node_covers"]


class TreeModel:
    """A fitted regression tree (tensors only).

    Internal nodes ``k = 0..K-1`` (root = 0 when K > 0): ``split_feature[k]`` (int64),
    ``threshold_bin[k]`` (int64; ``code <= bin`` goes left), ``threshold[k]`` (raw value,
    ``x <= threshold`` goes left), ``default_left[k]`` (bool, side of NaN / missing code),
    ``left_child[k]``, ``right_child[k]`` (int64: ``>= 0`` internal node, ``< 0`` leaf
    ``~child``), ``split_gain[k]`` (float64). ``leaf_value`` (L,) in the target dtype.
    ``cover`` (K + L,) float64 or ``None``: the number of the fit's rows that reached each
    internal node ``k`` (entry ``k``) and each leaf ``l`` (entry ``K + l``), summed over the
    ranks when data-parallel (LightGBM's ``internal_count`` / ``leaf_count``); what
    path-dependent TreeSHAP (:mod:`torchrankboost.explain`) weighs the branches by. Models
    read from files written before covers were recorded have ``None``.
    """

    type_name = "TreeModel"
    _tensor_names = ("split_feature", "threshold_bin", "threshold", "default_left", "left_child",
                     "right_child", "split_gain", "leaf_value")

    def __init__(self, *, split_feature: Tensor, threshold_bin: Tensor, threshold: Tensor,
                 default_left: Tensor, left_child: Tensor, right_child: Tensor,
                 split_gain: Tensor, leaf_value: Tensor, depth: int, missing_code: int = 255,
                 cover: Optional[Tensor] = None):
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
        self.cover = cover

    @classmethod
    def from_grown(cls, grown: GrownTree, prepared: BinnedFeatures, leaf_value: Tensor,
                   leaf_cover: Optional[Tensor] = None) -> "TreeModel":
        """The model of a backend's grown tree on ``prepared`` with ``leaf_value`` (L,) and
        the rows per leaf ``leaf_cover`` (L,) (over all ranks; the internal nodes' covers are
        their leaves' sums)."""
        dev = prepared.codes.device
        sf_t = torch.tensor(grown.split_feature, dtype=torch.int64, device=dev)
        tb_t = torch.tensor(grown.threshold_bin, dtype=torch.int64, device=dev)
        edges = prepared.edges.to(dev)
        thr = edges[sf_t, tb_t] if grown.split_feature else edges.new_empty(0)
        return cls(split_feature=sf_t, threshold_bin=tb_t, threshold=thr,
                   default_left=torch.tensor(grown.default_left, dtype=torch.bool, device=dev),
                   left_child=torch.tensor(grown.left_child, dtype=torch.int64, device=dev),
                   right_child=torch.tensor(grown.right_child, dtype=torch.int64, device=dev),
                   split_gain=torch.tensor(grown.split_gain, dtype=torch.float64, device=dev),
                   leaf_value=leaf_value, depth=grown.depth, missing_code=prepared.missing_code,
                   cover=None if leaf_cover is None else node_covers(
                       grown.left_child, grown.right_child, leaf_cover).to(dev))

    @property
    def num_leaves(self) -> int:
        return self.leaf_value.numel()

    def _values(self, leaf: Tensor) -> Tensor:
        return self.leaf_value.to(leaf.device)[leaf]

    def predict_prepared(self, prepared: BinnedFeatures, *, kernel: str = "auto") -> Tensor:
        """(n,) predictions from the training bin codes (the compiled traversal on CPU uint8 /
        int16 codes unless ``kernel="torch"``; the same values)."""
        codes = prepared.codes
        backend = choose_backend(kernel, device=codes.device, data_dtype=codes.dtype,
                                 num_rows=codes.shape[0], announce=False)
        return self._values(backend.leaves_from_codes(self, codes))

    def predict(self, X: Tensor, *, kernel: str = "auto") -> Tensor:
        """(n,) predictions from raw features (``x <= threshold`` left, NaN → default side;
        compared in the thresholds' dtype). On CPU the compiled traversal runs unless
        ``kernel="torch"``; the same values."""
        return self._values(self.leaves(X, kernel=kernel))

    def leaves(self, X: Tensor, *, kernel: str = "auto") -> Tensor:
        """(n,) int64 leaf id of every row of raw features X (the traversal of
        :meth:`predict`)."""
        check_features(X)
        X = X.to(device=self.leaf_value.device, dtype=self.threshold.dtype)
        backend = choose_backend(kernel, device=X.device, data_dtype=X.dtype,
                                 num_rows=X.shape[0], announce=False)
        return backend.leaves_from_raw(self, X)

    def feature_gain(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.float64, device=self.leaf_value.device)
        return out.index_add_(0, self.split_feature, self.split_gain.double())

    def feature_count(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.int64, device=self.leaf_value.device)
        return out.index_add_(0, self.split_feature, torch.ones_like(self.split_feature))

    def to(self, device: DeviceLike) -> "TreeModel":
        return TreeModel(**{k: getattr(self, k).to(device) for k in self._tensor_names},
                         depth=self.depth, missing_code=self.missing_code,
                         cover=None if self.cover is None else self.cover.to(device))

    def state(self) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
        tensors = {k: getattr(self, k) for k in self._tensor_names}
        if self.cover is not None:
            tensors["cover"] = self.cover
        return tensors, {"type": self.type_name, "depth": self.depth, "missing_code": self.missing_code}

    @classmethod
    def from_state(cls, tensors: Dict[str, Tensor], meta: Dict[str, Any]) -> "TreeModel":
        return cls(**{k: tensors[k] for k in cls._tensor_names}, depth=int(meta["depth"]),
                   missing_code=int(meta.get("missing_code", 255)), cover=tensors.get("cover"))

    def __repr__(self):
        return f"TreeModel(leaves={self.num_leaves}, depth={self.depth})"


def leaf_values(leaf_sums: Tensor, fixed: FixedPoint, l2: float):
    """``(values, cover)``: the leaf values ``G / (H + λ)`` (L,) float64 of the integer leaf
    sums ``leaf_sums`` (L, 3) ``(Σ q_wt, Σ q_w, rows)`` (over the ranks) converted from the
    fit's fixed point ``fixed``, and the rows per leaf (L,) float64 (exact)."""
    return newton_values(fixed.to_float(leaf_sums[:, :2]), l2), leaf_sums[:, 2].to(torch.float64)


def node_covers(left_child, right_child, leaf_cover: Tensor) -> Tensor:
    """``(K + L,)`` float64 covers of a tree from its leaves' ``leaf_cover`` (L,): each
    internal node's is the sum of its children's (``left_child`` / ``right_child``: K links,
    ``>= 0`` internal node, ``< 0`` leaf ``~child``)."""
    left, right = [int(c) for c in left_child], [int(c) for c in right_child]
    leaves = leaf_cover.detach().to("cpu", torch.float64).tolist()
    K = len(left)
    order, frontier = [], [0] if K else []
    while frontier:  # breadth-first from the root; children are summed before parents
        order.extend(frontier)
        frontier = [c for k in frontier for c in (left[k], right[k]) if c >= 0]
    inner = [0.0] * K

    def value(c: int) -> float:
        return inner[c] if c >= 0 else leaves[~c]

    for k in reversed(order):
        inner[k] = value(left[k]) + value(right[k])
    return torch.tensor(inner + leaves, dtype=torch.float64)


class RegressionTree(Params):
    """Histogram-based regression tree grown leaf-wise (best-first), LightGBM style.

    Args:
        max_leaves: maximum number of leaves (>= 2).
        max_depth: maximum depth (root = depth 0); None or -1 = unlimited.
        min_child_weight: minimum Σ weight (hessian) in each child.
        min_samples_leaf: minimum number of rows in each child (>= 1).
        l2: λ, L2 penalty on leaf values (``value = G / (H + λ)``).
        min_split_gain: a split is made only if its gain exceeds this.
        n_bins: value bins per feature, in [2, 32766]: uint8 codes up to 255 (NaN → code
            255), 2-byte int16 codes above (NaN → code ``n_bins``; histograms of
            ``n_bins + 1`` slots per feature, so memory and split search grow with it).
        feature_fraction: fraction of features (at least one) considered per tree, drawn with
            the ``generator`` passed to ``fit`` (or a generator seeded from ``seed`` and the
            number of previous fits).
        bin_sample_count: rows used to place the bin edges (seeded sample above).
        seed: seed for the binning sample and, absent a generator, feature sub-sampling.
        kernel: ``"auto"`` (default: the compiled CPU kernels of
            :mod:`~torchrankboost.kernels` on CPU when they build here, the
            pure-torch path otherwise, announced once with a warning on CPU; always torch on
            other devices), ``"native"`` (the compiled kernels or an error saying why not) or
            ``"torch"`` (the pure-torch reference). Both give the same trees bit for bit;
            ``kernel_`` says which one the last fit used.
        quantized_bits: ``None`` (default): the exact mode, ``w·t`` and ``w`` in 64-bit fixed
            point (:mod:`~torchrankboost.kernels.fixed_point`); an int in [2, 16]: the
            speed mode, both quantized to that many bits with seeded stochastic rounding
            (:mod:`~torchrankboost.kernels.quantized`, LightGBM's ``use_quantized_grad``;
            the rounding of a row depends on the fit's seed and the row's own values), so
            that the compiled kernel packs a row into one 64-bit histogram lane. The same
            trees on every backend, rank count and row order in both modes.

    Missing values: every candidate split is tried with NaNs going left and going right; the
    better side is stored as ``default_left``. Ties prefer the smaller feature index, then the
    smaller threshold, then NaN-left (so a node without NaNs sends unseen NaNs left).
    """

    supports_data_parallel = True

    def __init__(self, *, max_leaves: int = 31, max_depth: Optional[int] = None,
                 min_child_weight: float = 1e-3, min_samples_leaf: int = 20, l2: float = 0.0,
                 min_split_gain: float = 0.0, n_bins: int = 255, feature_fraction: float = 1.0,
                 bin_sample_count: int = 200_000, seed: int = 0, kernel: str = "auto",
                 quantized_bits: Optional[int] = None):
        self.kernel = check_kernel(kernel)
        self.quantized_bits = check_bits(quantized_bits)
        self.kernel_: Optional[str] = None
        self.max_leaves = check_int(max_leaves, "max_leaves", 2)
        if max_depth is None or max_depth == -1:
            self.max_depth = None
        else:
            self.max_depth = check_int(max_depth, "max_depth", 1)
        self.min_child_weight = check_float(min_child_weight, "min_child_weight", 0.0)
        self.min_samples_leaf = check_int(min_samples_leaf, "min_samples_leaf", 1)
        self.l2 = check_float(l2, "l2", 0.0)
        self.min_split_gain = check_float(min_split_gain, "min_split_gain", 0.0)
        self.n_bins = check_int(n_bins, "n_bins", 2, MAX_INT16_BINS)
        self.feature_fraction = check_float(feature_fraction, "feature_fraction", 0.0, 1.0, lo_open=True)
        self.bin_sample_count = check_int(bin_sample_count, "bin_sample_count", 2)
        self.seed = check_int(seed, "seed", 0)
        self._num_fits = 0

    def __repr__(self):
        return (f"RegressionTree(max_leaves={self.max_leaves}, max_depth={self.max_depth}, "
                f"min_child_weight={self.min_child_weight}, min_samples_leaf={self.min_samples_leaf}, "
                f"l2={self.l2}, min_split_gain={self.min_split_gain}, n_bins={self.n_bins}, "
                f"feature_fraction={self.feature_fraction}"
                + (f", kernel={self.kernel!r}" if self.kernel != "auto" else "")
                + (f", quantized_bits={self.quantized_bits})" if self.quantized_bits else ")"))

    def prepare(self, X: Tensor, *, context: Optional[DistContext] = None,
                rows: Optional[Tensor] = None) -> BinnedFeatures:
        """Bin X (n, F) once: uint8 codes, NaN → 255 (int16 codes, NaN → ``n_bins``, above
        255 bins). ``context``: the
        :class:`~torchrankboost.parallel.DistContext` of the fit (``None``: one process);
        data-parallel, ``X`` is this rank's shard, the edges are those of all ranks' rows and
        the fits sum their histograms over the ranks. ``rows``: the rows that place the
        edges (those of positive weight; ``None``: all). A fit whose histograms cannot fit in
        the memory available is refused here, before anything is allocated
        (:func:`~torchrankboost.boosting.learners.memory.check_histogram_memory`)."""
        if isinstance(X, Tensor) and X.dim() == 2:
            check_histogram_memory(X.shape[1], self.max_leaves, X.device, code_slots(self.n_bins))
        return bin_features(X, n_bins=self.n_bins, sample_count=self.bin_sample_count,
                            seed=self.seed, max_bins=MAX_INT16_BINS,
                            context=fit_context(context), rows=rows)

    @property
    def params(self) -> TreeParams:
        """The growth settings handed to the tree backend."""
        return TreeParams(max_leaves=self.max_leaves, max_depth=self.max_depth,
                          min_child_weight=self.min_child_weight,
                          min_samples_leaf=self.min_samples_leaf, l2=self.l2,
                          min_split_gain=self.min_split_gain)

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
            rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None
           ) -> TreeModel:
        """Fit a tree to ``target`` (n,) with weights ``weight`` (n,) on ``rows`` (or all rows)."""
        return self._grow(prepared, target, weight, rows, generator)[0]

    def fit_predict(self, prepared: BinnedFeatures, target: Tensor, weight: Optional[Tensor] = None,
                    *, rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None
                    ) -> Tuple[TreeModel, Tensor]:
        """:meth:`fit`, and the fitted tree's output on every row of ``prepared``: ``(model,
        f)``, ``f`` ``(n,)`` equal to ``model.predict_prepared(prepared)`` (read off the row
        partition of the growth when it covered every row: no traversal)."""
        model, grown = self._grow(prepared, target, weight, rows, generator)
        f = grown.output(model.leaf_value) if rows is None else None
        return model, (f if f is not None else model.predict_prepared(prepared))

    def _channels(self, prepared, target, weight, rows, generator):
        """The checked fit inputs as the growth's fixed-point channels: ``(target, fixed,
        rows, feat_ok)``, ``fixed`` the :class:`~torchrankboost.kernels.fixed_point.FixedPoint`
        of ``(w·t, w)`` (n, 2)."""
        if not isinstance(prepared, BinnedFeatures):
            raise ValueError(f"prepared: expected the output of {type(self).__name__}.prepare(X)")
        n, F = prepared.codes.shape
        dev = prepared.codes.device
        target, weight, rows = check_fit_inputs(n, dev, target, weight, rows)
        w = weight.double()
        x = (w * target.double(), w)
        if self.quantized_bits is None:
            fixed = quantize_fit(prepared, x, rows)
        else:  # the seed: the round's generator's (the booster seeds one per round)
            seed = (generator.initial_seed() if generator is not None
                    else self.seed * 1_000_003 + self._num_fits)
            fixed = quantize_fit_stochastic(prepared, x, rows, bits=self.quantized_bits,
                                            seed=seed)
        return target, fixed, rows, self._feature_mask(F, dev, generator)

    def _grow(self, prepared, target, weight, rows, generator):
        target, fixed, rows, feat_ok = self._channels(prepared, target, weight, rows, generator)
        dev = prepared.codes.device
        backend = self._backend(prepared)
        grown = backend.grow(prepared, fixed, rows, feat_ok, params=self.params,
                             reduce=prepared.context.sum_hook())
        leaf_value, cover = leaf_values(grown.leaf_sums, fixed, self.l2)
        return TreeModel.from_grown(grown, prepared, leaf_value.to(out_dtype(target)),
                                    cover.to(dev)), grown

    def _backend(self, prepared: BinnedFeatures):
        codes = prepared.codes
        backend = choose_backend(self.kernel, device=codes.device, data_dtype=codes.dtype,
                                 num_rows=codes.shape[0])
        self.kernel_ = backend.name
        return backend

    def resolve_kernel(self, prepared: BinnedFeatures) -> str:
        """``"native"`` or ``"torch"``: the kernels a fit on ``prepared`` runs (also set as
        ``kernel_``). ``kernel="native"`` raises ``RuntimeError`` with the reason when the
        compiled kernels cannot run; ``"auto"`` falls back to torch on CPU with a one-time
        warning naming the reason (never silently)."""
        return self._backend(prepared).name
