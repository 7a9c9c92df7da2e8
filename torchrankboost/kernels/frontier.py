r"""Best-first tree growth in speculative batches: the GPU program of the leaf-wise tree.

**The tree** (see :mod:`.base`): the leaf of largest gain (the lowest leaf id on ties) is split
until ``max_leaves`` leaves or no leaf has a split; a split leaves the left child the parent's
leaf id and gives the right child the next id. The arithmetic is the fixed point of
:mod:`.fixed_point`: per-row channels ``q`` (n, 2) int64 ``(q_wt, q_w)``, histograms
``(B, 3, F, S)`` int64 ``(Σ q_wt, Σ q_w, count)`` per (feature, bin) (slot ``S − 1`` = NaN),
exact, so a child's histogram is its parent's minus its sibling's exactly, and every decision
reads integer sums converted once to float64 (``float64(Q) · scale[c]``).

**The split search** (:func:`node_splits`, on the device, a batch of nodes at once): integer
cumulative sums over the value bins give each candidate's left sums with NaN right; adding the
NaN slot gives NaN left; right = node total − left (exact). For every candidate
``(f, t, side)`` — flattened in (feature, threshold bin, NaN left / NaN right) order, NaN right
only for the features with NaNs among the fit's rows, ``t < num_bins[f]``, ``feat_ok[f]`` —
``gain = G_L²/(H_L + λ) + G_R²/(H_R + λ)`` where both children have ``>= min_samples_leaf``
rows and ``>= min_child_weight`` weight (and a positive denominator when
``min_child_weight <= 0``), else ``−inf``; the first maximum wins (``torch.max``: the first
index; a NaN gain wins and is refused). The split is kept when ``gain − P > max(min_split_gain,
1e-10·|P|)``, ``P = G²/(H + λ)`` the parent term (0 when ``H + λ <= 0``) — the compiled
kernel's expressions, operation for operation.

**Speculative batches.** Best-first with a leaf budget is decided by gains alone, so the host
can replay it exactly once it knows the gains of the nodes it meets. With the priority
``p(v) = min(gain(v), p(parent))``, nodes are split in non-increasing ``p`` order, so a node
with ``a`` evaluated, unsplit nodes of larger ``p`` is split (if ever) after at least ``a``
more splits. A *batch* evaluates, on the device, the two children of every *speculated* node:
the evaluated nodes (the leaves and the evaluated descendants of earlier batches) that have a
split, whose children are not evaluated yet and could split within the leaf budget
(``leaves + a + 1 < max_leaves``, ``max_depth``, ``2·min_samples_leaf`` rows, from the counts
the host has). Per batch, on the device: one :meth:`route_rows` moves the rows of the
speculated nodes into their children (rows carry *node ids*: a left child keeps its parent's
id, a right child takes the next free id, so the rows of speculated descendants are where the
next batch needs them, whatever the host split meanwhile); a table lookup gives each row a
node slot (the smaller child of its node, or −1); one :meth:`batch_histograms` pass builds the
smaller children's histograms (summed over the ranks by one ``reduce``), the larger ones are
their parents' minus them, and :func:`node_splits` finds every child's best split; then
**one** transfer brings back, per child, ``(gain, feature, bin, default_left, left rows, right
rows, rows)``. The host replays best-first until it picks a leaf whose children are not
evaluated, and launches the next batch. A leaf whose children cannot split is split without a
batch (its rows move at the end). The tree is the sequential one exactly: speculation only
decides how much is evaluated ahead, never what is chosen.

**Cost.** A node is evaluated in the batch after its parent's (or never: a node out of the
budget stays out), so batch ``k`` evaluates depth ``k`` and a tree of depth ``D`` takes at most
``D + 1`` batches (the root's included): one host synchronisation and one host-to-device copy
of the batch's tables each (the copy right after the synchronisation, the queue empty),
whatever the rows and the leaves. Rows are never gathered per node. The final leaf ids are a
table lookup of the node ids (one upload); leaf sums are one integer ``index_add`` of ``q``
by leaf (summed over the ranks by one ``reduce``), and the tree's output on every row
(those outside ``rows`` included) is ``leaf_value[leaf]``.

The primitives (:class:`~.torch_backend.TorchBackend`'s reference in torch ops, overridden by
device kernels) are :meth:`batch_histograms` and :meth:`route_rows`; their contracts are on
:class:`~.torch_backend.TorchBackend`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .base import GrownTree, Reduce, TreeParams

__all__ = ["grow_tree", "node_splits", "SplitSetup", "split_setup", "REL_EPS", "RESULT_WIDTH"]

REL_EPS = 1e-10  # a split must improve on the parent term by more than this relative amount
#: columns of a node's result row: gain (NaN: no split), feature, bin, default_left (1/0),
#: left rows, right rows (of the best split), rows (all float64, exact)
RESULT_WIDTH = 7
_CPU_BUDGET = 1 << 18  # (node, feature, bin) cells per split-search chunk on CPU: temporaries in cache
_DEV_BUDGET = 1 << 24


@dataclass
class SplitSetup:
    """What the split search of one fit needs, on the device: ``Vm`` (the most value bins of a
    feature, at most the missing code), ``valid`` (F, Vm) bool (threshold ``t`` of feature
    ``f`` allowed: ``t < num_bins[f]`` and ``feat_ok[f]``), ``nan_feats`` (k,) int64 the
    features whose NaN-right candidates are tried and ``valid_nan`` (k, Vm) their allowed
    thresholds (the features with NaNs among the fit's rows), ``scale`` (2,) float64 (the fixed
    point's ``2^-shift``)."""

    Vm: int
    valid: Tensor
    nan_feats: Tensor
    valid_nan: Tensor
    scale: Tensor


def max_value_bins(prepared) -> int:
    """``Vm``: the most value bins of a feature of ``prepared``, at most its missing code
    (one read of ``num_bins`` per prepared data, cached there)."""
    Vm = prepared.cache.get("frontier_Vm")
    if Vm is None:
        F = prepared.codes.shape[1]
        Vm = min(max(1, int(prepared.num_bins.max())) if F else 1, prepared.missing_code)
        prepared.cache["frontier_Vm"] = Vm
    return Vm


def split_setup(prepared, feat_ok: Tensor, scale: Tensor, *, miss: Optional[Tensor] = None,
                nan_feats: Optional[Tensor] = None) -> SplitSetup:
    """The :class:`SplitSetup` of a fit: features ``feat_ok`` (F,) bool, ``scale`` (2,)
    float64, and the features with NaNs among the fit's rows as a mask ``miss`` (F,) bool on the
    device (every feature's NaN-right candidates computed, those of the others refused) or as
    their indices ``nan_feats`` (k,) int64 (only theirs computed)."""
    dev = prepared.codes.device
    Vm = max_value_bins(prepared)
    num_bins = prepared.num_bins.to(dev)
    t_ok = torch.arange(Vm, device=dev).unsqueeze(0) < num_bins.unsqueeze(1)  # (F, Vm)
    valid = t_ok & feat_ok.to(dev).unsqueeze(1)
    if nan_feats is None:
        nan_feats = torch.arange(valid.shape[0], device=dev)
        valid_nan = valid & miss.unsqueeze(1)
    else:
        valid_nan = valid.index_select(0, nan_feats)
    return SplitSetup(Vm=Vm, valid=valid, nan_feats=nan_feats, valid_nan=valid_nan, scale=scale)


def _chunk_nodes(F: int, Vm: int, dev: torch.device) -> int:
    """Nodes per split-search chunk (bounds its (B, 3, F, Vm) temporaries)."""
    budget = _CPU_BUDGET if dev.type == "cpu" else _DEV_BUDGET
    return max(1, budget // max(1, 6 * F * Vm))


def node_splits(hists: Tensor, setup: SplitSetup, params: TreeParams) -> Tensor:
    """The best split of each node of ``hists`` (B, 3, F, S) int64 (see the module docstring):
    ``(B, RESULT_WIDTH)`` float64 rows ``(gain, feature, bin, default_left, left rows, right
    rows, rows)``, ``gain`` NaN where the node has no split allowed by the gain rules (the
    ``max_depth`` and ``2·min_samples_leaf`` rules are the caller's). On the device, no host
    synchronisation; the nodes in chunks (bounded temporaries), about 40 kernels a chunk."""
    B, _, F, S = hists.shape
    if B == 0 or F == 0:
        return torch.full((B, RESULT_WIDTH), math.nan, dtype=torch.float64, device=hists.device)
    step = _chunk_nodes(F, setup.Vm, hists.device)
    parts = [_splits(hists[s:s + step], setup, params) for s in range(0, B, step)]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _side_gains(left: Tensor, tot: Tensor, valid: Tensor, params: TreeParams,
                scale: Tensor) -> Tensor:
    """The gains ``G_L²/(H_L + λ) + G_R²/(H_R + λ)`` (B, F', Vm) of the candidates of integer
    left sums ``left`` (B, 3, F', Vm) and node totals ``tot`` (B, 3, F', 1) (right = total −
    left, exactly), ``−inf`` where a child breaks the leaf rules or ``valid`` (F', Vm) is
    false. ``int64 · 0-d float64`` is ``float64(Q) · s`` in one kernel (one rounding, then an
    exact power-of-two scaling: the compiled kernel's ``(double)Q * s``)."""
    lam, mcw = params.l2, params.min_child_weight
    right = tot - left
    gl, hl = left[:, 0] * scale[0], left[:, 1] * scale[1]
    gr, hr = right[:, 0] * scale[0], right[:, 1] * scale[1]
    # integer row counts: n >= min_samples_leaf exactly as the float test n >= msl - 0.5
    ok = torch.minimum(left[:, 2], right[:, 2]) >= params.min_samples_leaf
    ok &= torch.minimum(hl, hr) >= mcw
    ok &= valid
    dl, dr = hl.add_(lam), hr.add_(lam)
    if not mcw > 0:  # otherwise h >= mcw > 0 and λ >= 0 imply d > 0
        ok &= torch.minimum(dl, dr) > 0
    gain = gl.mul_(gl).div_(dl).add_(gr.mul_(gr).div_(dr))
    return gain.masked_fill_(~ok, -math.inf)


def _splits(h: Tensor, setup: SplitSetup, params: TreeParams) -> Tensor:
    """:func:`node_splits` of one chunk of nodes."""
    B, _, F, S = h.shape
    Vm, fs = setup.Vm, setup.nan_feats
    c = torch.cumsum(h[..., :Vm], -1)  # (B, 3, F, Vm): left sums, NaN excluded
    ms = h[..., S - 1:S]  # (B, 3, F, 1): the NaN slot
    tot = c[..., Vm - 1:Vm] + ms  # (B, 3, F, 1): every feature's totals are the node's
    gain = _side_gains(c + ms, tot, setup.valid, params, setup.scale)  # NaN left
    if fs.numel():  # NaN right, for the features with NaNs: candidates (f, t, side) in order
        grid = torch.full((B, F, Vm, 2), -math.inf, dtype=torch.float64, device=h.device)
        grid[..., 0] = gain
        grid[..., 1].index_copy_(1, fs, _side_gains(
            c.index_select(2, fs), tot.index_select(2, fs), setup.valid_nan, params, setup.scale))
        best, flat = torch.max(grid.view(B, -1), 1)  # the first maximum (NaN propagates)
        ft, side = torch.div(flat, 2, rounding_mode="floor"), flat % 2
    else:
        best, ft = torch.max(gain.view(B, -1), 1)
        side = torch.zeros_like(ft)
    T = tot[:, :, 0, 0]  # (B, 3)
    G0, d0 = T[:, 0] * setup.scale[0], T[:, 1] * setup.scale[1] + params.l2
    parent = torch.where(d0 > 0, G0 * G0 / d0, 0.0)
    gain_b = best - parent
    keep = torch.isfinite(best) & (gain_b > torch.clamp(REL_EPS * parent.abs(), min=params.min_split_gain))
    f = torch.div(ft, Vm, rounding_mode="floor")
    n_left = c[:, 2].reshape(B, -1).gather(1, ft.unsqueeze(1)).squeeze(1)
    n_left += ms[:, 2, :, 0].gather(1, f.unsqueeze(1)).squeeze(1) * (1 - side)
    return torch.stack([torch.where(keep, gain_b, math.nan), f.double(), (ft - f * Vm).double(),
                        (1 - side).double(), n_left.double(), (T[:, 2] - n_left).double(),
                        T[:, 2].double()], 1)


@dataclass(eq=False)
class _Node:
    """The host's record of an evaluated node: its split (``None``: it may not split), its
    priority ``p = min(gain, p(parent))`` (``-inf`` without a split), its histogram (3, F, S)
    int64 on the device while it may split and its children are not evaluated, its two
    children (left, right) once evaluated, and ``rid``: the id its rows carry on the device
    (``None`` while they do not: a child made without a batch)."""

    depth: int
    split: Optional[Tuple[float, int, int, bool, float, float]]  # gain, f, t, dl, nl, nr
    p: float = -math.inf
    hist: Optional[Tensor] = None
    rid: Optional[int] = None
    leaf_id: int = 0
    parent: int = -1  # internal node index, -1 for the root
    is_left: bool = True
    children: Optional[Tuple["_Node", "_Node"]] = None


class _Frontier:
    """One tree grown in speculative batches (see the module docstring): the device state
    (every row's node id, the node histograms) and the host's replay of best-first growth.

    Rows carry *node ids* on the device (``ids`` (n,) int32): the id of the deepest node
    whose children's rows were routed (a batch routes the rows of the nodes whose children it
    builds; a left child keeps its parent's id, a right child takes the next free id), so a
    batch moves rows by one :meth:`route_rows` whatever the leaves did in between; the final
    leaf ids are a table lookup of the node ids."""

    def __init__(self, backend, prepared, q: Tensor, scale: Tensor, rows: Optional[Tensor],
                 feat_ok: Tensor, params: TreeParams, reduce: Optional[Reduce],
                 bits: Optional[int] = None):
        self.backend, self.prepared, self.params, self.reduce = backend, prepared, params, reduce
        self.q, self.scale, self.feat_ok, self.bits = q, scale, feat_ok, bits
        codes = prepared.codes
        n = codes.shape[0]
        self.dev = codes.device
        self.max_depth = params.max_depth if params.max_depth is not None else 1 << 62
        self.ids = torch.zeros(n, dtype=torch.int32, device=self.dev)  # every row's node id
        self.next_id = 1
        self.infit: Optional[Tensor] = None  # (n,) bool: the fit's rows (None: all)
        self.local_rows = n if rows is None else int(rows.numel())
        if rows is not None:
            self.infit = torch.zeros(n, dtype=torch.bool, device=self.dev)
            self.infit[rows] = True
        self.setup: Optional[SplitSetup] = None
        self.leaves: List[_Node] = []
        self.unrouted: List[_Node] = []  # split without a batch: rows not moved yet
        # internal nodes: split feature, threshold bin, default-left, left/right child, gain
        self.sf, self.tb, self.dl, self.lc, self.rc, self.sg = [], [], [], [], [], []
        self.depth = 0
        self.batches = 0

    # ------------------------------------------------------------------ host replay
    def grow(self) -> None:
        """Split the leaf of largest gain (the lowest leaf id on ties) until ``max_leaves``
        or no leaf has a split, launching a batch whenever the chosen leaf's children are
        not evaluated and could split."""
        self.leaves = [self._root()]
        L = self.params.max_leaves
        while len(self.leaves) < L:
            pick = None
            for lf in self.leaves:  # the first maximum: the lowest leaf id on ties
                if lf.split is not None and (pick is None or lf.split[0] > pick.split[0]):
                    pick = lf
            if pick is None:
                break
            if pick.children is None:
                if self._may_expand(pick, 0):
                    self._batch(self._speculated())
                    continue
                self._unrouted_children(pick)
            self._commit(pick)

    def _may_expand(self, x: _Node, above: int) -> bool:
        """Whether a child of ``x`` could be split, ``x`` being split after at least
        ``above`` more splits: a leaf left in the budget after ``x``'s split, depth, rows
        (``x``'s child counts)."""
        msl2 = 2.0 * self.params.min_samples_leaf
        _, _, _, _, nl, nr = x.split
        return (len(self.leaves) + above + 1 < self.params.max_leaves
                and x.depth + 1 < self.max_depth and (nl >= msl2 or nr >= msl2))

    def _speculated(self) -> List[_Node]:
        """The nodes whose children the next batch evaluates: the evaluated nodes with a split
        (the leaves and their evaluated descendants) whose children are not evaluated yet and
        could split within the leaf budget. Nodes split in decreasing ``p`` order, so a node
        with ``above`` nodes of larger ``p`` is split after at least ``above`` splits."""
        known, stack = [], list(self.leaves)
        while stack:
            x = stack.pop()
            if x.split is not None:
                known.append(x)
                stack.extend(x.children or ())
        order = sorted(-x.p for x in known)
        spec = []
        for x in known:
            if x.children is None:
                if self._may_expand(x, bisect.bisect_left(order, -x.p)):
                    spec.append(x)
                else:  # out of the budget for good (leaves + above only grows): never built
                    x.hist = None
        return spec

    def _unrouted_children(self, x: _Node) -> None:
        """Children for ``x`` that cannot split (not evaluated): the rows of ``x`` move to
        them at the end (:meth:`finish`)."""
        x.children = (_Node(x.depth + 1, None, rid=x.rid), _Node(x.depth + 1, None))
        self.unrouted.append(x)

    def _commit(self, lf: _Node) -> None:
        """Replace leaf ``lf`` by its children (the left one keeps its leaf id, the right one
        takes the next id)."""
        gain, f, t, d_left, _, _ = lf.split
        k, right_id = len(self.sf), len(self.leaves)
        self.sf.append(f); self.tb.append(t); self.dl.append(d_left); self.sg.append(gain)
        self.lc.append(~lf.leaf_id); self.rc.append(~right_id)
        if lf.parent >= 0:
            (self.lc if lf.is_left else self.rc)[lf.parent] = k
        left, right = lf.children
        left.leaf_id, left.parent, left.is_left = lf.leaf_id, k, True
        right.leaf_id, right.parent, right.is_left = right_id, k, False
        self.leaves[lf.leaf_id] = left
        self.leaves.append(right)
        self.depth = max(self.depth, lf.depth + 1)
        lf.hist = None

    # ------------------------------------------------------------------ device batches
    def _node(self, row: List[float], depth: int, hist: Tensor, parent_p: float,
              rid: int) -> _Node:
        """The record of an evaluated node from its result ``row`` (see :func:`node_splits`),
        its histogram (kept while it may split), its parent's priority and its rows' id."""
        gain, f, t, d_left, nl, nr, count = row
        if not count >= 2.0 * self.params.min_samples_leaf or depth >= self.max_depth \
                or math.isnan(gain):  # (a NaN count: a child not searched)
            return _Node(depth, None, rid=rid)
        return _Node(depth, (gain, int(f), int(t), d_left == 1.0, nl, nr), min(gain, parent_p),
                     hist, rid)

    def _root(self) -> _Node:
        """Batch 0: the root's histogram over the fit's rows, its NaN features (the split
        candidates of the fit) and its best split."""
        slot = self.ids if self.infit is None else torch.where(self.infit, self.ids, -1)
        hist = self._histograms(slot, 1, self.local_rows)
        miss = hist[0, 2, :, -1] > 0  # (F,): the features with NaNs among the fit's rows
        setup = split_setup(self.prepared, self.feat_ok, self.scale, miss=miss)
        row = torch.cat([node_splits(hist, setup, self.params)[0],
                         miss.double()]).tolist()  # the host sync
        self.batches += 1
        nan_feats = [f for f, m in enumerate(row[RESULT_WIDTH:]) if m]
        self.setup = split_setup(self.prepared, self.feat_ok, self.scale, nan_feats=torch.tensor(
            nan_feats, dtype=torch.int64, device=self.dev))
        return self._node(row[:RESULT_WIDTH], 0, hist[0], math.inf, 0)

    def _histograms(self, slot: Tensor, num_slots: int, bound: int) -> Tensor:
        """The batch's (num_slots, 3, F, S) int64 histograms, summed over the ranks."""
        h = self.backend.batch_histograms(self.prepared, self.q, slot, num_slots,
                                          max_rows=min(bound, self.local_rows), bits=self.bits)
        if self.reduce is not None:
            h = h.contiguous()
            self.reduce(h)
        return h

    def _route(self, splits: List[_Node], extra: List[int]) -> Tensor:
        """Route the rows of the nodes ``splits`` into their children (the right child of
        ``splits[j]`` takes the id ``next_id + j``) with one upload of the tables (4 rows of
        ``N = next_id + len(splits)`` ids) followed by the ints ``extra``; returns the
        uploaded ``extra`` (on the device)."""
        N = self.next_id + len(splits)
        table = {x.rid: (x.split[1], x.split[2], int(x.split[3]), self.next_id + j)
                 for j, x in enumerate(splits)}
        tab = torch.tensor(_route_table(table, N) + extra, dtype=torch.int64, device=self.dev)
        f, b, d, r = (tab[i * N:(i + 1) * N] for i in range(4))
        self.ids = self.backend.route_rows(self.prepared, self.ids, f, b, d.bool(),
                                           r.to(torch.int32))
        self.next_id = N
        return tab[4 * N:]

    def _batch(self, spec: List[_Node]) -> None:
        """Evaluate the children of the ``spec`` nodes (see the module docstring): one
        upload, one routing of the rows, one histogram pass, one host synchronisation. The
        children that cannot split (``max_depth``, fewer than ``2·min_samples_leaf`` rows: the
        host has their counts) are built but not searched."""
        B, first = len(spec), self.next_id
        slot_of = [-1] * (first + B + 1)  # by node id + 1: the smaller child's slot
        for j, x in enumerate(spec):
            slot_of[1 + (x.rid if x.split[4] <= x.split[5] else first + j)] = j
        rows_of = [min(x.split[4:6]) for x in spec] + [max(x.split[4:6]) for x in spec]
        msl2 = 2.0 * self.params.min_samples_leaf
        search = [i for i in range(2 * B)
                  if rows_of[i] >= msl2 and spec[i % B].depth + 1 < self.max_depth]
        tab = self._route(spec, slot_of + search)
        slot = tab[:first + B + 1].index_select(0, self.ids.long() + 1).to(torch.int32)
        if self.infit is not None:
            slot = torch.where(self.infit, slot, -1)
        small = self._histograms(slot, B, int(sum(rows_of[:B])))
        both = torch.empty((2 * B,) + tuple(small.shape[1:]), dtype=small.dtype, device=self.dev)
        both[:B] = small  # the batch's 2B children
        torch.sub(torch.stack([x.hist for x in spec]), small, out=both[B:])
        some = both if len(search) == 2 * B else both.index_select(0, tab[first + B + 1:])
        found = dict(zip(search, node_splits(some, self.setup, self.params).tolist()))  # the sync
        self.batches += 1
        nothing = [math.nan] * RESULT_WIDTH
        for j, x in enumerate(spec):
            d, small_left = x.depth + 1, x.split[4] <= x.split[5]
            a = self._node(found.get(j, nothing), d, both[j], x.p,
                           x.rid if small_left else first + j)
            b = self._node(found.get(B + j, nothing), d, both[B + j], x.p,
                           first + j if small_left else x.rid)
            x.children = (a, b) if small_left else (b, a)
            x.hist = None  # its children's histograms are built

    def finish(self) -> GrownTree:
        """The grown tree: the rows of the splits made without a batch routed, every row's
        leaf id (a lookup of its node id: one upload), the leaf sums and the output (see
        :meth:`_sums`)."""
        if self.unrouted:
            first = self.next_id
            self._route(self.unrouted, [])
            for j, x in enumerate(self.unrouted):
                x.children[1].rid = first + j
        leaf_of = [0] * self.next_id  # node id -> the id of the leaf holding its rows
        for lf in self.leaves:
            stack = [lf]
            while stack:
                x = stack.pop()
                if x.rid is not None:
                    leaf_of[x.rid] = lf.leaf_id
                    stack.extend(x.children or ())
        leaf = torch.tensor(leaf_of, dtype=torch.int64, device=self.dev).index_select(
            0, self.ids.long())
        return self._sums(leaf)

    def _sums(self, leaf: Tensor) -> GrownTree:
        """The :class:`~.base.GrownTree` of the final leaf ids ``leaf`` (n,) int64: the leaf
        sums (L, 3) int64 ``(Σ q_wt, Σ q_w, rows)`` of the fit's rows summed over the ranks
        (one ``reduce``), this rank's rows per leaf, and the output ``leaf_value[leaf]``."""
        L = len(self.leaves)
        idx = leaf if self.infit is None else torch.where(self.infit, leaf, L)  # a spare
        sums = torch.zeros((L + 1, 2), dtype=torch.int64, device=self.dev).index_add_(0, idx, self.q)
        count = torch.zeros(L + 1, dtype=torch.int64, device=self.dev).index_add_(
            0, idx, torch.ones_like(idx))
        totals = torch.cat([sums[:L], count[:L].unsqueeze(1)], 1)
        if self.reduce is not None:
            self.reduce(totals)
        return GrownTree(split_feature=self.sf, threshold_bin=self.tb, default_left=self.dl,
                         left_child=self.lc, right_child=self.rc, split_gain=self.sg,
                         depth=self.depth, leaf_sums=totals,
                         leaf_count=count[:L].to(torch.float64),
                         output=lambda leaf_value: leaf_value.index_select(0, leaf))


def _route_table(table: dict, size: int) -> List[int]:
    """4 rows of ``size`` (feature, bin, default_left, right id; right id −1 and feature 0
    where ``table`` has no entry) of ``{id: (f, t, default_left, right id)}``, flattened."""
    rows = [[0] * size, [0] * size, [0] * size, [-1] * size]
    for i, entry in table.items():
        for r, v in zip(rows, entry):
            r[i] = v
    return [v for r in rows for v in r]


def grow_tree(backend, prepared, q: Tensor, scale: Tensor, rows: Optional[Tensor],
              feat_ok: Tensor, *, params: TreeParams, reduce: Optional[Reduce],
              bits: Optional[int] = None) -> GrownTree:
    """Grow one best-first tree in speculative batches (see the module docstring) on
    ``prepared`` (``BinnedFeatures``) from the fixed-point channels ``q`` (n, 2) int64 and their
    ``scale`` (2,) float64, on ``rows`` (int64, ``None``: all rows) and the features
    ``feat_ok`` (F,) bool, with ``backend``'s :meth:`batch_histograms` and :meth:`route_rows`.
    ``reduce``: the in-place int64 sum over the ranks (``None`` in one process); ``bits``:
    the width of quantized channels (``None``: the exact fixed point), handed to
    :meth:`batch_histograms`.

    Returns the :class:`~.base.GrownTree` with ``leaf_sums`` (L, 3) int64 ``(Σ q_wt, Σ q_w,
    rows)`` over the ranks, ``leaf_count`` (L,) float64 this rank's rows per leaf and
    ``output(leaf_value) = leaf_value[leaf of every row]`` (every row of ``prepared``, those
    outside ``rows`` included)."""
    grower = _Frontier(backend, prepared, q, scale, rows, feat_ok, params, reduce, bits)
    grower.grow()
    return grower.finish()
