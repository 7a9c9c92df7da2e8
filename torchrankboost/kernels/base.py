"""What a tree backend is: every compiled-kernel (or device-kernel) step of the histogram
learners and of prediction, behind one protocol.

A backend (:mod:`.torch_backend`, the reference on any device; :mod:`.native_backend`, the
compiled CPU kernels; a GPU kernel one day) does five things, each the same bit for bit on
every backend:

* **binning**: the bin codes of raw features from the bin edges (:meth:`TreeBackend.apply_bins`);
* **growth** of one best-first tree, the tree that
  :class:`~torchrankboost.boosting.learners.RegressionTree` describes (:meth:`TreeBackend.grow`);
* **oblivious levels**: the histograms of one level's nodes and the best question of the level,
  for :class:`~torchrankboost.boosting.learners.ObliviousTree`
  (:meth:`TreeBackend.level_histograms`, :meth:`TreeBackend.best_level`; the level arithmetic
  in :mod:`.levels`);
* **traversal**: the leaf of every row of a fitted tree, from bin codes or raw features;
* **prediction**: an ensemble's weighted trees summed over raw features
  (:meth:`TreeBackend.predict_trees`).

The arithmetic, the same on every backend (:mod:`.fixed_point`): the float64 channels
``w·t`` and ``w`` of a fit become int64 fixed point once (:func:`.fixed_point.quantize_fit`),
every histogram is int64 ``(Σ q_wt, Σ q_w, count)`` per (feature, bin) (exact and
associative: the same on every backend, any number of ranks and any row order), and ``G``,
``H`` below are integer sums converted to float64 (``float64(Q) · 2^-shift``).

Growth, in Newton form: with ``G = Σ w·t`` and ``H = Σ w`` over a node's rows, a split into L
and R has gain ``G_L²/(H_L + λ) + G_R²/(H_R + λ) − G²/(H + λ)``; the leaf of largest gain
(the first one in leaf order on ties) is split until ``max_leaves`` or no leaf has a split
(gain above ``max(min_split_gain, 1e-10·|parent term|)``, both children with at least
``min_samples_leaf`` rows and ``min_child_weight`` weight, depth below ``max_depth``).
Candidates are tried in (feature, threshold bin, NaN left / NaN right) order, the first
maximum wins. Leaf ids: a split leaves the left child the parent's id and gives the right
child the next id.

Data-parallel: ``reduce`` (``None`` in one process) replaces an int64 tensor by its sum over
the ranks, in place (exact); a backend applies it to every histogram it builds and takes every
decision (row counts and leaf sums included) from the reduced histograms, so every rank grows
the same tree on its own rows, the tree of one process.

The torch backend grows both trees through two primitives, :class:`BatchPrimitives`
(:mod:`.frontier`, :mod:`.level_growth`: a bounded number of host synchronisations per tree),
which a device kernel overrides. A new backend is one module in this folder (a class with these
methods; subclassing :class:`~.torch_backend.TorchBackend` inherits the reference of whatever
it does not speed up) and one entry in the chooser's ``_AUTO_ORDER``
(:mod:`torchrankboost.kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, Protocol, Sequence

import torch
from torch import Tensor

if TYPE_CHECKING:
    from .fixed_point import FixedPoint

__all__ = ["TreeParams", "GrownTree", "Level", "TreeBackend", "BatchPrimitives", "Unavailable",
           "Reduce", "newton_values"]

#: ``reduce(buf)``: ``buf`` (int64) summed over the ranks in place (the result returned)
Reduce = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class TreeParams:
    """The growth settings of one tree (see :class:`RegressionTree` for their meaning);
    ``max_depth`` ``None`` = unlimited."""

    max_leaves: int
    max_depth: Optional[int]
    min_child_weight: float
    min_samples_leaf: int
    l2: float
    min_split_gain: float


@dataclass
class GrownTree:
    """A grown tree's structure: internal nodes ``k = 0..K-1`` (``split_feature``,
    ``threshold_bin`` (``code <= bin`` goes left), ``default_left`` (NaN side),
    ``left_child`` / ``right_child`` (``>= 0`` internal node, ``< 0`` leaf ``~child``),
    ``split_gain``), the ``depth``, and ``leaf_sums`` (L, 3) int64 ``(Σ q_wt, Σ q_w, rows)``
    per leaf id: the leaf's integer sums in the fit's fixed point (summed over the ranks when
    data-parallel; exact, so independent of the row order and the ranks; ``G, H =
    fixed.to_float(leaf_sums[:, :2])``; the rows over the ranks are the covers),
    ``leaf_count`` (L,) float64: this rank's rows of the fit in each leaf (not summed over
    the ranks; ``None``: unknown; informative, the learners do not need it).
    ``output(leaf_value)``:
    the tree's output on every row of the prepared data from the growth's row partition, or
    ``None`` (the caller traverses the tree)."""

    split_feature: List[int]
    threshold_bin: List[int]
    default_left: List[bool]
    left_child: List[int]
    right_child: List[int]
    split_gain: List[float]
    depth: int
    leaf_sums: Tensor
    leaf_count: Optional[Tensor] = None
    output: Callable[[Tensor], Optional[Tensor]] = lambda leaf_value: None


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot run on some data here. ``missing``: the data suit it but it
    cannot be had on this machine (no C compiler, a failed build): a fallback is slower and
    is announced."""

    reason: str
    missing: bool = False


class Level(NamedTuple):
    """The question of one oblivious level: ``code <= bin`` of ``feature`` goes left, NaN goes
    left when ``default_left``; ``node_gain`` (B,) float64 the gain of each node of the level,
    ``left_count`` (B,) float64 the rows of each node that go left (summed over the ranks)."""

    feature: int
    bin: int
    default_left: bool
    node_gain: Tensor
    left_count: Tensor


class TreeBackend(Protocol):
    """A tree backend. ``name``: ``"native"``, ``"torch"``, ..."""

    name: str

    def unavailable(self, *, device: torch.device, data_dtype: torch.dtype,
                    num_rows: int) -> Optional[Unavailable]:
        """``None`` when this backend runs on data of ``data_dtype`` (uint8 / int16 bin
        codes, or float raw features) with ``num_rows`` rows on ``device``; else why not."""
        ...

    def grow(self, prepared: Any, fixed: "FixedPoint", rows: Optional[Tensor],
             feat_ok: Tensor, *, params: TreeParams, reduce: Optional[Reduce]) -> GrownTree:
        """Grow one tree on ``prepared`` (``BinnedFeatures``) from the fixed-point channels
        ``fixed`` (:class:`.fixed_point.FixedPoint`: ``q`` (n, 2) int64 ``(q_wt, q_w)`` and
        their ``scale``), on ``rows`` (int64, or ``None`` = all rows) and the features
        ``feat_ok`` (F,) bool."""
        ...

    def leaves_from_codes(self, tree: Any, codes: Tensor) -> Tensor:
        """(n,) int64 leaf index of every row of bin codes (n, F) in ``tree`` (a
        ``TreeModel``)."""
        ...

    def leaves_from_raw(self, tree: Any, X: Tensor) -> Tensor:
        """(n,) int64 leaf index of every row of raw features X (n, F), already in the
        dtype of ``tree.threshold``."""
        ...

    def predict_trees(self, trees: Sequence, weights: Sequence[float], X: Tensor, out: Tensor, *,
                      cache: dict) -> None:
        """``out += Σ_t weights[t] · trees[t](X)``: ``out`` (n,) float64 on X's device, each
        row's terms added in round order (the sums of a per-tree loop bit for bit); ``trees``
        ``TreeModel``s on X's device, ``X`` (n, F) raw features, compared in each tree's
        thresholds' dtype. ``cache``: a dict the caller keeps between calls (e.g. the trees
        packed once)."""
        ...

    def apply_bins(self, X: Tensor, edges: Tensor, *, missing_code: int,
                   dtype: torch.dtype) -> Tensor:
        """(n, F) codes of ``dtype`` of raw features X (n, F), already in ``edges.dtype``:
        ``code[i, f] = #{b : edges[f, b] < X[i, f]}`` (``edges`` (F, B) ascending upper
        edges, ``+inf``-padded), NaN → ``missing_code``."""
        ...

    def level_histograms(self, prepared: Any, values: Tensor, rows: Tensor,
                         counts: List[int], build: List[int], *, reduce: Optional[Reduce]
                        ) -> Tensor:
        """The (B, 3, F, S) int64 histograms (channels Σ q_wt, Σ q_w, count; S = missing code
        + 1) of the ``B = len(counts)`` nodes of an oblivious level on ``prepared``
        (``BinnedFeatures``): node ``j``'s rows are ``rows[s_j : s_j + counts[j]]``
        (``s_j = Σ_{i<j} counts[i]``; each node's rows ascending), ``values`` (n, 2) int64
        the fixed-point channels ``(q_wt, q_w)``. Only the nodes in ``build`` are filled, each summed over the
        ranks through ``reduce``; the others are left for the caller (parent − sibling). The
        result may be a view of the backend's own layout (a (B, F, S, 3) buffer, say)."""
        ...

    def best_level(self, hists: Tensor, prepared: Any, feat_ok: Tensor, miss: Tensor,
                   *, params: TreeParams, scale: Tensor) -> Optional[Level]:
        """The best question of an oblivious level from its nodes' ``hists`` (a
        :meth:`level_histograms` result, summed over the ranks), over the features ``feat_ok``
        (F,) bool, NaN right tried only for the features ``miss`` (F,) bool; ``scale`` (2,)
        float64 the fixed point's (:attr:`.fixed_point.FixedPoint.scale`); ``None`` when no
        allowed candidate gains enough (:mod:`.levels` states the gain and the rules)."""
        ...


class BatchPrimitives(Protocol):
    """The two primitives of the batched growth on a device (:mod:`.frontier`, the leaf-wise
    tree; :mod:`.level_growth`, the oblivious levels): the torch backend's reference in torch
    ops, overridden by device kernels (a subclass of
    :class:`~.torch_backend.TorchBackend`). A backend that has them grows both trees through
    them, with a bounded number of host synchronisations per tree."""

    def batch_histograms(self, prepared: Any, q: Tensor, slot: Tensor, num_slots: int, *,
                         max_rows: Optional[int] = None, bits: Optional[int] = None) -> Tensor:
        """``(num_slots, 3, F, S)`` int64, contiguous: ``out[b, :, f, c] = Σ_{r : slot[r] = b,
        codes[r, f] = c} (q[r, 0], q[r, 1], 1)`` over the rows of ``prepared`` (``codes``
        (n, F) uint8 / int16, ``S = missing_code + 1``); ``q`` (n, 2) int64 (the fixed point,
        ``|q| < 2^62``), ``slot`` (n,) int32 in ``[0, num_slots)`` or −1 (no node). Exact
        integer sums (any order, any device); zeros for a node without rows; not summed over
        the ranks. ``max_rows``: ``None`` or an upper bound of the rows with ``slot >= 0`` (a
        kernel may use it to size a compaction, or ignore it). ``bits``: ``None``, or the
        width of quantized channels (``|q[:, 0]| < 2^(bits-1)``, ``0 <= q[:, 1] < 2^bits``,
        :mod:`.quantized`) that a kernel may pack into narrower bins (the same sums). No
        host synchronisation."""
        ...

    def route_rows(self, prepared: Any, leaf: Tensor, feature: Tensor, bin: Tensor,
                   default_left: Tensor, right_id: Tensor) -> Tensor:
        """``(n,)`` int32: for every row of ``prepared`` with ``l = leaf[r] >= 0`` and
        ``right_id[l] >= 0``, ``right_id[l]`` when the row goes right under the question of
        ``l`` (``code <= bin[l]`` of feature ``feature[l]`` goes left, the missing code goes
        left when ``default_left[l]``), else ``leaf[r]`` (a row that goes left, a row of a
        leaf not split, ``leaf[r] = −1``: unchanged). ``leaf`` (n,) int32; ``feature``,
        ``bin`` (L,) int64 (any valid feature where not split), ``default_left`` (L,) bool,
        ``right_id`` (L,) int32, ``L`` the table size (``leaf < L``). No host
        synchronisation."""
        ...


def newton_values(sums: Tensor, l2: float) -> Tensor:
    """``G / (H + λ)`` per leaf from ``(L, 2)`` float64 sums (0 where the denominator is not
    positive)."""
    denom = sums[:, 1] + l2
    return torch.where(denom > 0, sums[:, 0] / torch.where(denom > 0, denom, torch.ones_like(denom)),
                       torch.zeros_like(denom))
