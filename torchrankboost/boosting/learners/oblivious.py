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
every tree. Histograms come from the compiled kernel (``kernel="native"``, CPU, uint8 codes)
or the pure-torch scatter (``"torch"``, any device); every bin sums its rows in row order in
both, so both give the same trees bit for bit. Data-parallel: each level's histograms and the
leaf sums are summed over the ranks (the reduce hook of the data-parallel context), and every
decision is taken from the summed values, so every rank grows the same tree.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor

from ...kernels.binning import BinnedFeatures
from ...kernels import GrownTree, histogram, newton_values
from .base import check_int, out_dtype
from .tree import RegressionTree, TreeModel, node_covers

__all__ = ["ObliviousTree"]

_REL_EPS = 1e-10


def _term(g: Tensor, h: Tensor, lam: float) -> Tensor:
    """``g² / (h + λ)``, 0 where ``h + λ <= 0`` (an empty side)."""
    d = h + lam
    ok = d > 0
    return torch.where(ok, g * g / torch.where(ok, d, torch.ones_like(d)), torch.zeros_like(d))


class ObliviousTree(RegressionTree):
    """Histogram-based oblivious (symmetric) regression tree, CatBoost style.

    Args:
        depth: number of levels (1..10): ``2^depth`` leaves.
        min_child_weight: minimum Σ weight (hessian) of every non-empty leaf.
        min_samples_leaf: minimum number of rows of every non-empty leaf (>= 1).
        l2: λ, L2 penalty on leaf values (``value = G / (H + λ)``); CatBoost's ``l2_leaf_reg``.
        min_split_gain: a level is added only if its gain exceeds this.
        n_bins, feature_fraction, bin_sample_count, seed: as for
            :class:`~.tree.RegressionTree` (the binning is the same), ``n_bins`` in [2, 255]
            (uint8 codes only).
        kernel: ``"auto"``, ``"native"`` or ``"torch"``: where the level histograms are built
            (the same trees bit for bit); ``kernel_`` says which one the last fit used.

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
        target, wt, w, rows, feat_ok = self._channels(prepared, target, weight, rows, generator)
        native = self._backend(prepared).name == "native"
        grower = _LevelGrower(prepared, wt, w, rows, native=native, reduce=prepared.context.sum_hook())
        levels = grower.grow(feat_ok, self)
        leaf_sums, leaf_count = grower.leaf_sums(len(levels))
        leaf_value = newton_values(leaf_sums, self.l2).to(out_dtype(target))
        model = _tree_model(levels, prepared, leaf_value, leaf_count)
        node = grower.node_all

        def output(values: Tensor) -> Optional[Tensor]:
            return values[node]

        grown = GrownTree(split_feature=[], threshold_bin=[], default_left=[], left_child=[],
                          right_child=[], split_gain=[], depth=len(levels), leaf_sums=leaf_sums,
                          output=output)
        return model, grown


class _LevelGrower:
    """The rows of one oblivious fit and their node ids, level by level. A level's node
    histograms: the smaller child of each split is built from its rows (its size read off the
    parent's summed histogram), the larger one is the parent's minus it."""

    def __init__(self, prepared, wt: Tensor, w: Tensor, rows: Optional[Tensor], *, native: bool,
                 reduce):
        self.prepared = prepared
        self.codes = prepared.codes.contiguous()
        n, F = self.codes.shape
        dev = self.codes.device
        self.rows = torch.arange(n, device=dev) if rows is None else rows
        self.values = torch.stack([wt, w], 1).contiguous()
        self.packed = torch.complex(wt, w) if dev.type == "cpu" else None
        self.slots = prepared.missing_code + 1
        self.native = native
        self.sum_ = reduce
        self.node_all = torch.zeros(n, dtype=torch.int64, device=dev)  # every row's node id

    def _hists(self, rows: Tensor, counts: List[int], build: List[int], B: int) -> Tensor:
        """The level's histogram buffer ((B, F, S, 3) on the compiled path, else (B, 3, F, S))
        with the histograms of the nodes in ``build`` filled (their rows are the slices of
        ``rows`` given by ``counts``, in node order); the other nodes' are left unset."""
        F = self.codes.shape[1]
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        if not self.native:
            out = torch.empty((B, 3, F, self.slots), dtype=torch.float64, device=self.codes.device)
            for j in build:
                out[j] = histogram(self.codes, rows[starts[j]:starts[j + 1]], self.values,
                                   slots=self.slots, packed=self.packed)
            return out
        from ...kernels.native_backend import library

        lib = library()
        out = torch.empty((B, F, self.slots, 3), dtype=torch.float64)
        r32 = rows.to(torch.int32).contiguous()
        step, nt = F * self.slots * 3 * 8, torch.get_num_threads()
        for j in build:  # the kernel zeroes its output first (an empty node: all zeros)
            lib.trb_histogram(self.codes.data_ptr(), self.codes.shape[0], F,
                              r32.data_ptr() + 4 * starts[j], counts[j], self.values.data_ptr(),
                              out.data_ptr() + step * j, self.slots, nt)
        return out

    def view3(self, hists: Tensor) -> Tensor:
        """``hists`` as (B, 3, F, S) (the compiled kernel's are (B, F, S, 3))."""
        return hists.permute(0, 3, 1, 2) if self.native else hists

    def level_hists(self, prev: Optional[Tensor], left_count: Optional[Tensor]) -> Tensor:
        """The histograms of the ``B`` nodes of the current level, summed over the ranks
        ((B, F, S, 3) on the compiled path, else (B, 3, F, S)). ``prev``: the parents';
        ``left_count`` (B/2,): their left children's row counts (summed over the ranks)."""
        B = 1 if prev is None else 2 * prev.shape[0]
        node = self.node_all[self.rows]
        order = torch.argsort(node, stable=True)  # each node's rows in increasing row order
        rows = self.rows[order]
        counts = torch.bincount(node, minlength=B).tolist()
        if prev is None:
            build = [0]
        else:  # the smaller child of each parent (the left one on equal counts)
            tot = self.view3(prev)[:, 2, 0, :].sum(-1)
            small_right = (2 * left_count > tot).tolist()
            build = [2 * j + int(r) for j, r in enumerate(small_right)]
        out = self._hists(rows, counts, build, B)
        if self.sum_ is not None:
            built = out[build].contiguous()
            self.sum_(built)
            out[build] = built
        if prev is not None:
            for j, b in enumerate(build):
                torch.sub(prev[j], out[b], out=out[b ^ 1])
        return out

    def grow(self, feat_ok: Tensor, learner: ObliviousTree) -> List[tuple]:
        """The levels ``(feature, bin, default_left, node_gains (2^d,))`` grown, at most
        ``learner.depth``; moves :attr:`node_all` to the leaf ids."""
        levels: List[tuple] = []
        hists, left_count, miss = None, None, None
        for _ in range(learner.depth):
            hists = self.level_hists(hists, left_count)
            if miss is None:  # NaN directions for the features with NaNs among the fit's rows
                miss = self.view3(hists)[0, 2, :, self.slots - 1] > 0
            best = _best_level(hists, self.view3(hists), self.prepared, feat_ok, miss, learner,
                               native=self.native)
            if best is None:
                break
            f, t, dleft, node_gain, left_count = best
            code = self.codes[:, f].to(torch.int64)
            missing = code == self.prepared.missing_code
            right = torch.where(missing, torch.full_like(missing, not dleft), code > t)
            self.node_all = self.node_all * 2 + right.to(torch.int64)
            levels.append((f, t, dleft, node_gain))
        return levels

    def leaf_sums(self, D: int):
        """(2^D, 2) float64 ``(Σ w·t, Σ w)`` per leaf over the fit's rows (row order), and
        (2^D,) float64 row counts per leaf (both summed over the ranks)."""
        L = 1 << D
        leaf = self.node_all[self.rows]
        out = torch.zeros((L, 3), dtype=torch.float64, device=self.codes.device)
        out[:, :2].index_add_(0, leaf, self.values[self.rows])
        out[:, 2] = torch.bincount(leaf, minlength=L).to(torch.float64)
        if self.sum_ is not None:
            self.sum_(out)
        return out[:, :2].contiguous(), out[:, 2].contiguous()


def _side_sums(hists: Tensor, Vm: int, fs: Optional[Tensor], nan_left: bool):
    """Left and right ``(B, 3, F', Vm)`` sums of every threshold bin of the features ``fs``
    (all when ``None``), NaN going left or right, and the node totals (B, 3)."""
    S = hists.shape[-1]
    h = hists if fs is None else hists.index_select(2, fs)
    c = torch.cumsum(h[..., :Vm], -1)  # left sums, NaN excluded
    ms = h[..., S - 1:S]
    tot = c[..., Vm - 1:Vm] + ms  # per-feature node totals (equal up to rounding)
    left = c + ms if nan_left else c
    return left, tot - left


def _grid_gains(hists: Tensor, fs: Optional[Tensor], Vm: int, nan_left: bool, parent: Tensor,
                learner: ObliviousTree):
    """Level gains ``(F', Vm)`` summed over the nodes (``-inf`` where a child breaks the
    leaf constraints) and the per-node gains (B, F', Vm)."""
    lam = learner.l2
    left, right = _side_sums(hists, Vm, fs, nan_left)
    gl, hl, nl = left.unbind(1)
    gr, hr, nr = right.unbind(1)
    node_gain = _term(gl, hl, lam) + _term(gr, hr, lam) - parent.view(-1, 1, 1)
    msl, mcw = learner.min_samples_leaf - 0.5, learner.min_child_weight

    def side_ok(cnt, h):
        return (cnt < 0.5) | ((cnt >= msl) & (h >= mcw))

    ok = (side_ok(nl, hl) & side_ok(nr, hr)).all(0)
    return torch.where(ok, _node_sum(node_gain), torch.full_like(node_gain[0], -math.inf)), node_gain, nl


def _node_sum(x: Tensor) -> Tensor:
    """``Σ_j x[j]`` added in node order (the compiled kernel's order, bit for bit)."""
    acc = x[0]
    for j in range(1, x.shape[0]):
        acc = acc + x[j]
    return acc


def _best_level(raw: Tensor, hists: Tensor, prepared, feat_ok: Tensor, miss: Tensor,
                learner: ObliviousTree, *, native: bool):
    """The best question of a level from its nodes' (B, 3, F, S) histograms:
    ``(feature, bin, default_left, node_gains (B,), left_counts (B,))`` or ``None`` (no
    allowed candidate gains enough). Candidates in (feature, bin, NaN left / NaN right) order,
    NaN right only for the features with NaNs (``miss``); the first maximum wins."""
    dev = hists.device
    F = hists.shape[2]
    num_bins = prepared.num_bins.to(dev)
    if F == 0:
        return None
    Vm = min(max(1, int(num_bins.max())), prepared.missing_code)
    S = hists.shape[-1]
    T0 = torch.cumsum(hists[:, :2, 0, :Vm], -1)[..., Vm - 1] + hists[:, :2, 0, S - 1]  # (B, 2)
    parent = _term(T0[:, 0], T0[:, 1], learner.l2)
    if native:  # the node gains of the best candidate come with it
        found = _native_level(raw, prepared, feat_ok, miss, Vm, parent, learner)
        if found is None:
            return None
        f, t, d, ng, nl = found
        return f, t, d == 0, ng, nl
    found = _torch_level(hists, num_bins, feat_ok, miss, Vm, parent, learner)
    if found is None:
        return None
    f, t, d = found
    if d == 0:
        _, ng, nl = _grid_gains(hists, torch.tensor([f], device=dev), Vm, True, parent, learner)
    else:
        _, ng, nl = _grid_gains(hists, torch.tensor([f], device=dev), Vm, False, parent, learner)
    return f, t, d == 0, ng[:, 0, t], nl[:, 0, t]


def _accept(bg: float, parent: Tensor, learner: ObliviousTree) -> bool:
    pa = float(_node_sum(parent))
    return math.isfinite(bg) and bg > max(learner.min_split_gain, _REL_EPS * abs(pa))


def _native_level(raw: Tensor, prepared, feat_ok, miss, Vm: int, parent: Tensor, learner):
    """``(feature, bin, side, node gains (B,), left counts (B,))`` of the best allowed
    candidate from the compiled kernels, or ``None``."""
    from ...kernels.native_backend import library

    B, F, S, _ = raw.shape
    raw = raw.contiguous()
    nb = prepared.cache.get("num_bins_i64")
    if nb is None:
        nb = prepared.cache["num_bins_i64"] = prepared.num_bins.to("cpu", torch.int64).contiguous()
    fo = feat_ok.to("cpu", torch.uint8).contiguous()
    mf = miss.to("cpu", torch.uint8).contiguous()
    cum = torch.empty(B * 256 * 3, dtype=torch.float64)
    par = torch.empty(B, dtype=torch.float64)
    out = torch.empty(5, dtype=torch.float64)
    library().trb_oblivious_level(raw.data_ptr(), B, F, S, nb.data_ptr(), fo.data_ptr(),
                                  mf.data_ptr(), Vm, learner.l2, learner.min_samples_leaf - 0.5,
                                  learner.min_child_weight, cum.data_ptr(), par.data_ptr(),
                                  out.data_ptr())
    bg, _, f, t, dl = out.tolist()
    if not _accept(bg, parent, learner):
        return None
    ng, nl = torch.empty(B, dtype=torch.float64), torch.empty(B, dtype=torch.float64)
    library().trb_oblivious_nodes(raw.data_ptr(), B, F, S, nb.data_ptr(), Vm, learner.l2, int(f),
                                  int(t), int(dl == 1.0), par.data_ptr(), ng.data_ptr(),
                                  nl.data_ptr())
    return int(f), int(t), 0 if dl == 1.0 else 1, ng, nl


def _torch_level(hists: Tensor, num_bins: Tensor, feat_ok, miss, Vm: int, parent: Tensor, learner):
    """The reference of :func:`_native_level`: every candidate's level gain as tensors."""
    dev = hists.device
    F = hists.shape[2]
    valid = (torch.arange(Vm, device=dev).unsqueeze(0) < num_bins.unsqueeze(1)) & feat_ok.unsqueeze(1)
    gain = torch.full((F, Vm, 2), -math.inf, dtype=torch.float64, device=dev)
    g0, _, _ = _grid_gains(hists, None, Vm, True, parent, learner)
    gain[:, :, 0] = torch.where(valid, g0, gain[:, :, 0])
    fs = miss.nonzero().squeeze(1)
    if fs.numel():
        g1, _, _ = _grid_gains(hists, fs, Vm, False, parent, learner)
        gain[fs, :, 1] = torch.where(valid[fs], g1, gain[fs, :, 1])
    best, q = torch.max(gain.view(-1), 0)
    if not _accept(float(best), parent, learner):
        return None
    q = int(q)
    return q // (2 * Vm), (q // 2) % Vm, q % 2


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
    cat = (lambda xs, dt: torch.cat(xs).to(dev) if xs else torch.empty(0, dtype=dt, device=dev))
    sf_t, tb_t = cat(sf, torch.int64), cat(tb, torch.int64)
    lc_t, rc_t = cat(lc, torch.int64), cat(rc, torch.int64)
    edges = prepared.edges.to(dev)
    thr = edges[sf_t, tb_t] if K else edges.new_empty(0)
    return TreeModel(split_feature=sf_t, threshold_bin=tb_t, threshold=thr,
                     default_left=cat(dl, torch.bool), left_child=lc_t, right_child=rc_t,
                     split_gain=cat(gains, torch.float64), leaf_value=leaf_value, depth=D,
                     missing_code=prepared.missing_code,
                     cover=node_covers(lc_t.tolist(), rc_t.tolist(), leaf_count).to(dev))
