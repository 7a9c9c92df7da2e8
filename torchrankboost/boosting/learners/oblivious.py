r"""Oblivious (symmetric) regression trees: the learner :class:`ObliviousTree` (registry name
``"oblivious"``), CatBoost's weak learner.

An oblivious tree of depth ``D`` asks one question per level, the same for every node of the
level: ``(feature f_d, threshold bin t_d, NaN side)``. A row's leaf is the number whose bits
are its ``D`` answers (the first level the most significant bit), so prediction is ``D``
comparisons and a table lookup, and a depth-``D`` tree has ``2^D`` leaves.

Growth, level by level, in Newton form (the gains of :mod:`.tree`): with ``G = Σ w·t`` and
``H = Σ w`` over a node's rows and ``T(G, H) = G² / (H + λ)`` (0 where ``H + λ <= 0``), a
candidate question has the level gain

    gain = Σ_nodes [T(G_L, H_L) + T(G_R, H_R) − T(G, H)]

computed from the histograms of all nodes of the level (one histogram pass over the fit's rows
per level). A candidate is allowed when every non-empty child of every node has at least
``min_samples_leaf`` rows and ``min_child_weight`` weight (a node may send all its rows to one
side: the other leaf is empty and its value 0). The first candidate of largest gain in
(feature, threshold bin, NaN left / NaN right) order wins; growth stops early when no
candidate gains more than ``max(min_split_gain, 1e-10·|Σ T(G, H)|)``. Leaf values are
``G_leaf / (H_leaf + λ)``.

The fitted model is an ordinary :class:`~.tree.TreeModel` (a complete binary tree whose nodes
of one level share their split), so saving, prediction, export and explanations are those of
every tree. The level histograms and the level search run in the tree backend chosen by
:func:`~torchrankboost.kernels.choose_backend` (``level_histograms`` and ``best_level`` of
:class:`~torchrankboost.kernels.TreeBackend`; the level arithmetic is
:mod:`torchrankboost.kernels.levels`): the compiled kernels (``kernel="native"``, CPU) or the
pure-torch reference (``"torch"``, any device), the same trees bit for bit: the histograms are
int64 sums of the fit's fixed-point channels (:mod:`torchrankboost.kernels.fixed_point`),
exact, and the leaf sums are the last level's integer sums. Data-parallel: each level's
histograms are summed over the ranks (the reduce hook of the data-parallel context), and every
decision is taken from the summed values, so every rank grows the same tree.
"""

from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from ...kernels import GrownTree, TreeParams
from ...kernels.binning import BinnedFeatures
from ...kernels.fixed_point import FixedPoint
from ...kernels.level_growth import grow_levels
from ...kernels.levels import children_sums, node_totals
from .base import check_int, out_dtype
from .tree import RegressionTree, TreeModel, leaf_values, node_covers

__all__ = ["ObliviousTree"]

class ObliviousTree(RegressionTree):
    """Histogram-based oblivious (symmetric) regression tree, CatBoost style.

    Args:
        depth: number of levels (1..10): ``2^depth`` leaves.
        min_child_weight: minimum Σ weight (hessian) of every non-empty leaf.
        min_samples_leaf: minimum number of rows of every non-empty leaf (>= 1).
        l2: λ, L2 penalty on leaf values (``value = G / (H + λ)``); CatBoost's ``l2_leaf_reg``.
        min_split_gain: a level is added only if its gain exceeds this.
        n_bins: bins per feature, as for :class:`~.tree.RegressionTree` (the binning is
            the same), in [2, 255] (uint8 codes only).
        feature_fraction: as for :class:`~.tree.RegressionTree`.
        bin_sample_count: as for :class:`~.tree.RegressionTree`.
        seed: as for :class:`~.tree.RegressionTree`.
        kernel: ``"auto"``, ``"native"`` or ``"torch"``: the backend of the level histograms
            and the level search (the same trees bit for bit); ``kernel_`` says which one the
            last fit used.

    Shapes: ``prepare(X)`` bins ``X`` (n, F); ``fit(prepared, target (n,), weight (n,))``
    returns a :class:`~.tree.TreeModel` of depth ``<= depth``.
    """

    supports_data_parallel = True

    def __init__(self, *, depth: int = 6, min_child_weight: float = 1e-3, min_samples_leaf: int = 1,
                 l2: float = 1.0, min_split_gain: float = 0.0, n_bins: int = 255,
                 feature_fraction: float = 1.0, bin_sample_count: int = 200_000, seed: int = 0,
                 kernel: str = "auto"):
        self.depth = check_int(depth, "depth", 1, 10)
        check_int(n_bins, "n_bins", 2, 255)  # uint8 codes only (its level kernels)
        super().__init__(max_leaves=2 ** self.depth, max_depth=self.depth,
                         min_child_weight=min_child_weight, min_samples_leaf=min_samples_leaf,
                         l2=l2, min_split_gain=min_split_gain, n_bins=n_bins,
                         feature_fraction=feature_fraction, bin_sample_count=bin_sample_count,
                         seed=seed, kernel=kernel)

    def __repr__(self):
        return (f"ObliviousTree(depth={self.depth}, min_child_weight={self.min_child_weight}, "
                f"min_samples_leaf={self.min_samples_leaf}, l2={self.l2}, "
                f"min_split_gain={self.min_split_gain}, n_bins={self.n_bins}, "
                f"feature_fraction={self.feature_fraction}"
                + (f", kernel={self.kernel!r})" if self.kernel != "auto" else ")"))

    # ------------------------------------------------------------------ growth
    def _grow(self, prepared, target, weight, rows, generator):
        target, fixed, rows, feat_ok = self._channels(prepared, target, weight, rows, generator)
        backend = self._backend(prepared)
        reduce = prepared.context.sum_hook()
        if hasattr(backend, "batch_histograms"):  # the device path: one batch per level
            g = grow_levels(backend, prepared, fixed.q, fixed.scale, rows, feat_ok,
                            params=self.params, depth=self.depth, reduce=reduce)
            levels, node, leaf_sums = g.levels, g.node, g.leaf_sums
            leaf_value, _ = leaf_values(leaf_sums, fixed, self.l2)
            leaf_count = torch.tensor(g.leaf_rows, dtype=torch.float64)  # host: no sync
        else:
            grower = _LevelGrower(prepared, fixed, rows, backend=backend, reduce=reduce)
            levels = grower.grow(feat_ok, self.params, self.depth)
            leaf_sums, node = grower.leaf_sums, grower.node_all
            leaf_value, leaf_count = leaf_values(leaf_sums, fixed, self.l2)
        model = _tree_model(levels, prepared, leaf_value.to(out_dtype(target)), leaf_count)

        def output(values: Tensor) -> Optional[Tensor]:
            return values[node]

        grown = GrownTree(split_feature=[], threshold_bin=[], default_left=[], left_child=[],
                          right_child=[], split_gain=[], depth=len(levels), leaf_sums=leaf_sums,
                          output=output)
        return model, grown


class _LevelGrower:
    """The rows of one oblivious fit and their node ids, level by level, over a tree backend
    (its level histograms and level search). A level's node histograms: the smaller child of
    each split is built from its rows (its size read off the parent's summed histogram), the
    larger one is the parent's minus it (exact: int64). After :meth:`grow`, ``leaf_sums``
    (2^D, 3) int64: each leaf's ``(Σ q_wt, Σ q_w, rows)`` over the ranks, from the last
    level's histograms."""

    def __init__(self, prepared, fixed: FixedPoint, rows: Optional[Tensor], *, backend,
                 reduce):
        self.prepared = prepared
        self.backend = backend
        n = prepared.codes.shape[0]
        dev = prepared.codes.device
        self.rows = torch.arange(n, device=dev) if rows is None else rows
        self.values = fixed.q
        self.scale = fixed.scale
        self.slots = prepared.missing_code + 1
        self.sum_ = reduce
        self.node_all = torch.zeros(n, dtype=torch.int64, device=dev)  # every row's node id
        self.leaf_sums: Optional[Tensor] = None

    def level_hists(self, prev: Optional[Tensor], left_count: Optional[Tensor]) -> Tensor:
        """The (B, 3, F, S) histograms of the ``B`` nodes of the current level, summed over
        the ranks. ``prev``: the parents'; ``left_count`` (B/2,): their left children's row
        counts (summed over the ranks)."""
        B = 1 if prev is None else 2 * prev.shape[0]
        node = self.node_all[self.rows]
        order = torch.argsort(node, stable=True)  # each node's rows in increasing row order
        rows = self.rows[order]
        counts = torch.bincount(node, minlength=B).tolist()
        if prev is None:
            build = [0]
        else:  # the smaller child of each parent (the left one on equal counts)
            tot = prev[:, 2, 0, :].sum(-1)
            small_right = (2 * left_count > tot).tolist()
            build = [2 * j + int(r) for j, r in enumerate(small_right)]
        out = self.backend.level_histograms(self.prepared, self.values, rows, counts, build,
                                            reduce=self.sum_)
        if prev is not None:
            for j, b in enumerate(build):
                torch.sub(prev[j], out[b], out=out[b ^ 1])
        return out

    def grow(self, feat_ok: Tensor, params: TreeParams, depth: int) -> List[tuple]:
        """The levels ``(feature, bin, default_left, node_gains (2^d,))`` grown, at most
        ``depth``; moves :attr:`node_all` to the leaf ids and sets :attr:`leaf_sums`."""
        levels: List[tuple] = []
        codes = self.prepared.codes
        hists, left_count, miss = None, None, None
        for _ in range(depth):
            hists = self.level_hists(hists, left_count)
            if miss is None:  # NaN directions for the features with NaNs among the fit's rows
                miss = hists[0, 2, :, self.slots - 1] > 0
            best = self.backend.best_level(hists, self.prepared, feat_ok, miss, params=params,
                                           scale=self.scale)
            if best is None:  # the level's nodes are the leaves
                self.leaf_sums = node_totals(hists)
                break
            f, t, dleft, node_gain, left_count = best
            self.leaf_sums = children_sums(hists, f, t, dleft)
            code = codes[:, f].to(torch.int64)
            missing = code == self.prepared.missing_code
            right = torch.where(missing, torch.full_like(missing, not dleft), code > t)
            self.node_all = self.node_all * 2 + right.to(torch.int64)
            levels.append((f, t, dleft, node_gain))
        return levels


def _tree_model(levels: List[tuple], prepared: BinnedFeatures, leaf_value: Tensor,
                leaf_count: Tensor) -> TreeModel:
    """The complete binary :class:`TreeModel` of ``levels``: node ``2^d − 1 + j`` is node ``j``
    of level ``d``; its children are nodes ``2j`` and ``2j + 1`` of level ``d + 1`` (leaves
    ``~(2j)``, ``~(2j + 1)`` below the last level), so a row's leaf id is the binary number of
    its answers. ``leaf_count`` (2^D,): the rows per leaf (the covers; a node whose rows all
    went one way leaves an empty subtree of cover 0)."""
    dev = prepared.codes.device
    D = len(levels)
    K = (1 << D) - 1
    sf, tb, dl, lc, rc, gains = [], [], [], [], [], []
    for d, (f, t, dleft, node_gain) in enumerate(levels):
        B = 1 << d
        j = torch.arange(B, dtype=torch.int64)
        last = d == D - 1
        base = (1 << (d + 1)) - 1
        lc.append(~(2 * j) if last else base + 2 * j)
        rc.append(~(2 * j + 1) if last else base + 2 * j + 1)
        sf.append(torch.full((B,), f, dtype=torch.int64))
        tb.append(torch.full((B,), t, dtype=torch.int64))
        dl.append(torch.full((B,), dleft, dtype=torch.bool))
        gains.append(node_gain.to("cpu", torch.float64))
    cat = (lambda xs, dt: torch.cat(xs) if xs else torch.empty(0, dtype=dt))  # on the host
    lc_h, rc_h = cat(lc, torch.int64), cat(rc, torch.int64)
    cover = node_covers(lc_h.tolist(), rc_h.tolist(), leaf_count).to(dev)
    cat = (lambda xs, dt: torch.cat(xs).to(dev) if xs else torch.empty(0, dtype=dt, device=dev))
    sf_t, tb_t = cat(sf, torch.int64), cat(tb, torch.int64)
    lc_t, rc_t = lc_h.to(dev), rc_h.to(dev)
    edges = prepared.edges.to(dev)
    thr = edges[sf_t, tb_t] if K else edges.new_empty(0)
    return TreeModel(split_feature=sf_t, threshold_bin=tb_t, threshold=thr,
                     default_left=cat(dl, torch.bool), left_child=lc_t, right_child=rc_t,
                     split_gain=cat(gains, torch.float64), leaf_value=leaf_value, depth=D,
                     missing_code=prepared.missing_code, cover=cover)
