"""The pure-torch tree backend: the reference every other backend equals bit for bit, and the
path that runs on CUDA (and on CPU where the compiled kernels cannot be built): tree growth,
oblivious levels (:mod:`.levels`), traversal, prediction and bin coding in torch ops.

The growth (see :mod:`.base`): the root's int64 histogram (the fixed point of
:mod:`.fixed_point`) comes from all of the fit's rows; each split gathers the rows of the
smaller child (by the row counts of the histogram, summed over the ranks when data-parallel)
and takes the larger child's histogram as the parent's minus the smaller's (exact). The split
search evaluates a compact list of candidates for a batch of nodes at once (integer cumulative
sums of the histograms converted to float64, no (B, F, 255, sides, 3) intermediates). A
leaf's sums are its histogram's totals: exact integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from . import levels
from .base import GrownTree, Level, Reduce, TreeParams
from .fixed_point import FixedPoint
from .histogram import all_rows_count, compact_reducer, histogram

__all__ = ["TorchBackend"]

_REL_EPS = 1e-10  # a split must improve on the parent term by more than this relative amount
_CODE_CHUNK = 1 << 16  # rows coded at once by apply_bins (bounds its (F, chunk) temporaries)


@dataclass(eq=False)
class _Leaf:
    leaf_id: int
    rows: Tensor
    hist: Optional[Tensor]  # (3, F, S) int64: Σ q_wt, Σ q_w, count
    depth: int
    parent: int  # internal node index, -1 for the root
    is_left: bool
    best: Optional[tuple] = None  # (gain, feature, bin, default_left)


def split_candidates(prepared, feat_ok: Tensor, miss: Tensor) -> dict:
    """Compact list of the split candidates of one fit, in (feature, bin, direction) order.

    A candidate is a threshold bin ``t < num_bins[f]`` of a sampled feature ``f``, with NaN
    going left (direction 0) and, for features with NaNs among the fit's rows (``miss`` (F,)
    bool, from the root's missing slot), also with NaN going right (direction 1). Features
    without NaNs send NaN left (both directions give the same gain there and the tie rule
    prefers NaN-left). Returns a dict of (Q,) tensors: ``pos`` (flat index ``f·Vm + t`` into
    cumulative sums of width ``Vm``), ``feat``, ``nan_left`` (bool), ``info`` (Q, 3) float64 =
    (f, t, default_left), and ``Vm`` = max number of value bins.
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


def _candidate_sums(hists: Tensor, cand: dict):
    """Left and right ``(B, 3, Q)`` int64 sums of every candidate, and the node totals
    (B, 3, F) (the same for every feature, exactly)."""
    Bn, _, F, S = hists.shape
    Vm, pos = cand["Vm"], cand["pos"]
    c = torch.cumsum(hists[..., :Vm], -1)  # (B, 3, F, Vm) left sums, missing excluded
    miss = hists[..., S - 1]  # (B, 3, F)
    tot = c[..., Vm - 1] + miss  # (B, 3, F) node totals (per feature, all equal)
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
    return left, ts.view(Bn, 3, Q) - left, tot


def best_splits(hists: Tensor, cand: dict, params: TreeParams,
                scale: Tensor) -> List[Optional[tuple]]:
    """Best split of each node in a batch.

    Args:
        hists: (B, 3, F, S) int64 histograms (channels Σ q_wt, Σ q_w, count; slot S−1 =
            missing).
        cand: from :func:`split_candidates`.
        params: the growth settings.
        scale: (2,) float64, the fixed point's ``2^-shift`` of the two channels.

    Returns:
        list of ``(gain, feature, bin, default_left)`` or None per node.

    Integer cumulative sums over the value bins give the left sums with NaN right; adding the
    missing slot gives NaN left; right = node total − left (exact). Each sum is converted to
    float64 once (``float64(Q) · scale``) and the gains computed from those.
    """
    lam = params.l2
    Bn = hists.shape[0]
    if cand["pos"].numel() == 0:
        return [None] * Bn
    left, right, tot = _candidate_sums(hists, cand)
    gl, hl, nl = levels.to_float(left, scale)
    gr, hr, nr = levels.to_float(right, scale)
    dl = hl + lam
    dr = hr + lam
    gain = gl * gl / dl + gr * gr / dr  # (B, Q)
    mcw = params.min_child_weight
    ok = (torch.minimum(nl, nr) >= params.min_samples_leaf - 0.5) & (torch.minimum(hl, hr) >= mcw)
    if not mcw > 0:  # otherwise h >= mcw > 0 and λ >= 0 imply d > 0
        ok &= torch.minimum(dl, dr) > 0
    gain = torch.where(ok, gain, torch.full_like(gain, -math.inf))
    best, flat = torch.max(gain, 1)
    G0, H0, _ = levels.to_float(tot[:, :, 0], scale)  # (B,) node totals
    d0 = H0 + lam
    parent = torch.where(d0 > 0, G0 * G0 / torch.where(d0 > 0, d0, torch.ones_like(d0)),
                         torch.zeros_like(d0))
    res = torch.cat([best.unsqueeze(1), parent.unsqueeze(1), cand["info"].index_select(0, flat)], 1)
    out = []
    for bg, pa, f, t, dleft in res.tolist():
        gain_b = bg - pa
        if not (math.isfinite(bg) and gain_b > max(params.min_split_gain, _REL_EPS * abs(pa))):
            out.append(None)
            continue
        out.append((gain_b, int(f), int(t), dleft == 1.0))
    return out


class _Grower:
    """One tree being grown best-first: the leaves (with their histograms and best splits) and
    the internal nodes made so far. Row counts (the ``min_samples_leaf`` test, the smaller
    child) are read off the count channel of the (reduced) histograms: exact integers."""

    def __init__(self, prepared, fixed: FixedPoint, rows: Optional[Tensor], feat_ok: Tensor,
                 params: TreeParams, reduce: Optional[Reduce]):
        self.params = params
        self.reduce = reduce
        self.codes = prepared.codes
        self.missing_code = prepared.missing_code
        n = self.codes.shape[0]
        dev = self.codes.device
        self.values = fixed.q
        self.scale = fixed.scale
        self.slots = prepared.missing_code + 1
        self.max_depth = params.max_depth if params.max_depth is not None else 1 << 30
        if rows is None:
            root = _Leaf(0, torch.arange(n, device=dev), self.histogram(
                None, count=all_rows_count(prepared, self.slots)), 0, -1, True)
        else:
            root = _Leaf(0, rows, self.histogram(rows), 0, -1, True)
        # features with NaNs among the fit's rows (exact counts in the missing slot): only they
        # need the NaN-right direction; every node's rows are a subset of the root's
        self.cand = split_candidates(prepared, feat_ok, root.hist[2, :, self.slots - 1] > 0)
        self.leaves = [root]
        # internal nodes: split feature, threshold bin, default-left, left/right child, gain
        self.sf, self.tb, self.dl, self.lc, self.rc, self.sg = [], [], [], [], [], []
        self.depth = 0
        self.evaluate(root)

    def histogram(self, rows: Optional[Tensor], count="scatter") -> Tensor:
        """(3, F, slots) int64 histogram of ``rows`` (``None``: every row, with the cached
        ``count``), summed over the ranks when data-parallel."""
        h = histogram(self.codes, rows, self.values, slots=self.slots, count=count)
        if self.reduce is not None:
            self.reduce(h)
        return h

    def evaluate(self, *lvs: _Leaf) -> None:
        """Set each leaf's best split (None when it may not or cannot split), one batch."""
        msl = self.params.min_samples_leaf
        todo = [lf for lf in lvs
                if lf.depth < self.max_depth and int(lf.hist[2, 0].sum()) >= 2 * msl]
        for lf in lvs:
            lf.best = None
        if todo:
            res = best_splits(torch.stack([lf.hist for lf in todo]), self.cand, self.params,
                              self.scale)
            for lf, r in zip(todo, res):
                lf.best = r

    def grow(self) -> None:
        """Split the leaf of largest gain (the first one on ties) until ``max_leaves`` or no
        leaf has a split."""
        while len(self.leaves) < self.params.max_leaves:
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
            go_left |= code == self.missing_code
        lrows = leaf.rows[go_left]
        rrows = leaf.rows[~go_left]
        k = len(self.sf)
        self.sf.append(f); self.tb.append(t); self.dl.append(bool(d_left)); self.sg.append(gain)
        self.lc.append(~leaf.leaf_id); self.rc.append(~len(leaves))
        if leaf.parent >= 0:
            (self.lc if leaf.is_left else self.rc)[leaf.parent] = k
        cnt = leaf.hist[2, f]  # the children's row counts (over all ranks), exact
        n_left = int(cnt[: t + 1].sum()) + (int(cnt[-1]) if d_left else 0)
        small_left = n_left <= int(cnt.sum()) - n_left
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

    def leaf_count(self) -> Tensor:
        """``(L,)`` float64 number of this rank's rows in each leaf, in leaf id order."""
        leaves = sorted(self.leaves, key=lambda lf: lf.leaf_id)
        return torch.tensor([float(lf.rows.numel()) for lf in leaves], dtype=torch.float64)

    def leaf_sums(self) -> Tensor:
        """``(L, 3)`` int64 ``(Σ q_wt, Σ q_w, rows)`` per leaf in leaf id order, over the
        ranks: each leaf histogram's totals (exact)."""
        leaves = sorted(self.leaves, key=lambda lf: lf.leaf_id)
        return torch.stack([lf.hist[:, 0, :].sum(-1) for lf in leaves])


class TorchBackend:
    """Tree growth and traversal in torch ops, on any device (see the module docstring)."""

    name = "torch"

    def unavailable(self, *, device, data_dtype, num_rows) -> None:
        return None  # any device, any codes

    def grow(self, prepared, fixed: FixedPoint, rows: Optional[Tensor], feat_ok: Tensor, *,
             params: TreeParams, reduce: Optional[Reduce]) -> GrownTree:
        g = _Grower(prepared, fixed, rows, feat_ok, params, compact_reducer(prepared, "3FS", reduce))
        g.grow()
        return GrownTree(split_feature=g.sf, threshold_bin=g.tb, default_left=g.dl,
                         left_child=g.lc, right_child=g.rc, split_gain=g.sg, depth=g.depth,
                         leaf_sums=g.leaf_sums(), leaf_count=g.leaf_count())

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

    def leaves_from_codes(self, tree, codes: Tensor) -> Tensor:
        miss = tree.missing_code

        def go_left(nid, f):
            c = codes.gather(1, f.unsqueeze(1)).squeeze(1).to(torch.int64)
            return torch.where(c == miss, tree.default_left[nid], c <= tree.threshold_bin[nid])

        return self._walk(tree, codes.shape[0], go_left, codes.device)

    def leaves_from_raw(self, tree, X: Tensor) -> Tensor:
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

    def level_histograms(self, prepared, values: Tensor, rows: Tensor, counts: List[int],
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

    def best_level(self, hists: Tensor, prepared, feat_ok: Tensor, miss: Tensor, *,
                   params: TreeParams, scale: Tensor) -> Optional[Level]:
        return levels.search(hists, prepared, feat_ok, miss, params=params, scale=scale)
