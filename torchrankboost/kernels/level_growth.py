r"""The oblivious tree's growth on the device: one batch and one host synchronisation per level.

The level arithmetic is :mod:`.levels`'s (the reference of every backend): with ``T(G, H) =
G²/(H + λ)`` (0 where ``H + λ <= 0``) and the node terms ``P_j = T(G_j, H_j)`` of the level's
``B`` nodes, a question ``(f, t, side)`` has the level gain ``Σ_j [T(G_L, H_L) + T(G_R, H_R) −
P_j]`` (added in node order), allowed when every non-empty child of every node has at least
``min_samples_leaf`` rows and ``min_child_weight`` weight; the first maximum in (feature,
threshold bin, NaN left / NaN right) order wins, and the level is kept when its gain exceeds
``max(min_split_gain, 1e-10·|Σ_j P_j|)``. Sums are the int64 fixed point of :mod:`.fixed_point`
(left sums integer cumulative sums, right = node total − left exactly), converted once to
float64.

Per level, on the device: the smaller child of each node of the previous level gets a node
slot per row and one :meth:`batch_histograms` pass builds their histograms (summed over the
ranks by one ``reduce``), the larger ones are their parents' minus them, :func:`level_search`
finds the level's question, and **one** transfer brings back the best level gain, the node
terms' sum, the question, and per node its gain, its left rows and its rows. The host decides
(keep or stop), moves the rows (``node = 2·node + right``, on the device) and chooses the next
level's smaller children from those counts. The leaf sums are the last level's children's
integer sums, the leaf rows (the covers) come with the last transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .base import Reduce, TreeParams
from .frontier import SplitSetup, split_setup
from .levels import node_sum, split_term

__all__ = ["LevelGrowth", "grow_levels", "level_search"]

_REL_EPS = 1e-10  # a level must improve on the parent terms by more than this relative amount


@dataclass
class LevelGrowth:
    """The levels grown: ``levels`` ``(feature, bin, default_left, node_gains (2^d,) float64 on
    the host)``, ``leaf_sums`` (2^D, 3) int64 ``(Σ q_wt, Σ q_w, rows)`` over the ranks,
    ``leaf_rows`` the rows of each leaf over the ranks (host floats), ``node`` (n,) int64 every
    row's leaf (the rows outside the fit too)."""

    levels: List[tuple] = field(default_factory=list)
    leaf_sums: Optional[Tensor] = None
    leaf_rows: List[float] = field(default_factory=list)
    node: Optional[Tensor] = None


def _to_float(sums: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(G, H, count)`` float64 of integer sums (B, 3, ...): ``float64(Q) · scale[c]``."""
    q = sums.to(torch.float64)
    return q[:, 0] * scale[0], q[:, 1] * scale[1], q[:, 2]


def _side(left: Tensor, tot: Tensor, parent: Tensor, valid: Tensor, params: TreeParams,
          scale: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """For integer left sums ``left`` (B, 3, F', Vm) and node totals ``tot`` (B, 3, F', 1):
    the level gains (F', Vm) (``-inf`` where not allowed or not ``valid``), the per-node gains
    (B, F', Vm) and left rows (B, F', Vm)."""
    lam = params.l2
    gl, hl, nl = _to_float(left, scale)
    gr, hr, nr = _to_float(tot - left, scale)
    node_gain = split_term(gl, hl, lam) + split_term(gr, hr, lam) - parent.view(-1, 1, 1)
    msl, mcw = params.min_samples_leaf - 0.5, params.min_child_weight
    ok = (((nl < 0.5) | ((nl >= msl) & (hl >= mcw))) & ((nr < 0.5) | ((nr >= msl) & (hr >= mcw)))).all(0)
    level = torch.where(ok & valid, node_sum(node_gain), torch.full_like(node_gain[0], -math.inf))
    return level, node_gain, nl


def level_search(hists: Tensor, setup: SplitSetup, params: TreeParams) -> Tensor:
    """The best question of a level of nodes ``hists`` (B, 3, F, S) int64, on the device:
    ``(3 + 3B,)`` float64 ``(best level gain, Σ_j P_j, flat index (f·Vm + t)·2 + side, node
    gains (B,), left rows (B,), rows (B,))`` at that question (see the module docstring; the
    caller applies the acceptance rule). No host synchronisation."""
    B, _, F, S = hists.shape
    Vm = setup.Vm
    totals = hists[:, :, 0, :].sum(-1)  # (B, 3): every feature's slots hold the node's rows
    G, H, n = _to_float(totals, setup.scale)
    parent = split_term(G, H, params.l2)
    c = torch.cumsum(hists[..., :Vm], -1)  # (B, 3, F, Vm): left sums, NaN excluded
    ms = hists[..., S - 1:S]
    tot = c[..., Vm - 1:Vm] + ms
    grid = torch.full((F, Vm, 2), -math.inf, dtype=torch.float64, device=hists.device)
    g0, ng0, nl0 = _side(c + ms, tot, parent, setup.valid, params, setup.scale)
    grid[:, :, 0] = g0
    fs = setup.nan_feats
    ng1 = nl1 = None
    if fs.numel():
        g1, ng1, nl1 = _side(c.index_select(2, fs), tot.index_select(2, fs), parent,
                             setup.valid_nan, params, setup.scale)
        grid[:, :, 1].index_copy_(0, fs, g1)
    best, flat = torch.max(grid.view(-1), 0)  # the first maximum (NaN propagates)
    ft = torch.div(flat, 2, rounding_mode="floor")
    at = ft.view(1, 1).expand(B, 1)
    node_gain = ng0.reshape(B, -1).gather(1, at).squeeze(1)
    left = nl0.reshape(B, -1).gather(1, at).squeeze(1)
    if ng1 is not None:  # NaN right: the feature's position among the NaN features
        pos = torch.zeros(F, dtype=torch.int64, device=hists.device)
        pos.index_copy_(0, fs, torch.arange(fs.numel(), device=hists.device))
        f = torch.div(ft, Vm, rounding_mode="floor")
        at1 = (pos[f] * Vm + ft - f * Vm).view(1, 1).expand(B, 1)
        right_side = flat % 2 == 1
        node_gain = torch.where(right_side, ng1.reshape(B, -1).gather(1, at1).squeeze(1), node_gain)
        left = torch.where(right_side, nl1.reshape(B, -1).gather(1, at1).squeeze(1), left)
    head = torch.stack([best, node_sum(parent), flat.to(torch.float64)])
    return torch.cat([head, node_gain, left, n])


def grow_levels(backend, prepared, q: Tensor, scale: Tensor, rows: Optional[Tensor],
                feat_ok: Tensor, *, params: TreeParams, depth: int,
                reduce: Optional[Reduce]) -> LevelGrowth:
    """Grow at most ``depth`` levels of an oblivious tree (see the module docstring) on
    ``prepared`` from the fixed-point channels ``q`` (n, 2) int64 and their ``scale`` (2,)
    float64, on ``rows`` (``None``: all) and the features ``feat_ok`` (F,) bool, with
    ``backend``'s :meth:`batch_histograms`; ``reduce``: the in-place int64 sum over the ranks
    (``None`` in one process). One host synchronisation per level."""
    codes = prepared.codes
    n, F = codes.shape
    dev = codes.device
    infit = None
    if rows is not None:
        infit = torch.zeros(n, dtype=torch.bool, device=dev)
        infit[rows] = True
    local = n if rows is None else int(rows.numel())
    out = LevelGrowth(node=torch.zeros(n, dtype=torch.int64, device=dev))

    def histograms(slot: Tensor, num: int, bound: int) -> Tensor:
        if infit is not None:
            slot = torch.where(infit, slot, -1)
        h = backend.batch_histograms(prepared, q, slot, num, max_rows=min(bound, local))
        if reduce is not None:
            h = h.contiguous()
            reduce(h)
        return h

    hists = histograms(torch.zeros(n, dtype=torch.int32, device=dev), 1, local)
    setup, counts, left = None, [], []
    for d in range(depth if F else 0):
        if d:
            hists = _next_level(hists, left, counts, out.node, histograms)
        if setup is None:
            miss = hists[0, 2, :, -1] > 0
            found = torch.cat([level_search(hists, split_setup(prepared, feat_ok, scale, miss=miss),
                                            params), miss.double()]).tolist()  # the host sync
            nan_feats = [f for f, m in enumerate(found[6:]) if m]  # after the root's 3 + 3
            setup = split_setup(prepared, feat_ok, scale, nan_feats=torch.tensor(
                nan_feats, dtype=torch.int64, device=dev))
        else:
            found = level_search(hists, setup, params).tolist()  # the host sync
        B = 1 << d
        best, pa, flat = found[:3]
        gains, left, counts = found[3:3 + B], found[3 + B:3 + 2 * B], found[3 + 2 * B:3 + 3 * B]
        out.leaf_rows = counts
        if not (math.isfinite(best) and best > max(params.min_split_gain, _REL_EPS * abs(pa))):
            break
        ft = int(flat) // 2
        f, t, dleft = ft // setup.Vm, ft % setup.Vm, int(flat) % 2 == 0
        out.levels.append((f, t, dleft, torch.tensor(gains, dtype=torch.float64)))
        out.leaf_rows = [v for l, c in zip(left, counts) for v in (l, c - l)]
        code = codes[:, f].to(torch.int64)
        right = torch.where(code == prepared.missing_code, torch.full_like(code, int(not dleft)),
                            (code > t).to(torch.int64))
        out.node = out.node * 2 + right
    out.leaf_sums = _leaf_sums(q, out.node, infit, 1 << len(out.levels), reduce)
    if not F:
        out.leaf_rows = out.leaf_sums[:, 2].to(torch.float64).tolist()
    return out


def _next_level(prev: Tensor, left: List[float], counts: List[float], node: Tensor,
                histograms) -> Tensor:
    """The (2B, 3, F, S) histograms of the children of the ``B`` nodes ``prev`` (left rows
    ``left``, rows ``counts`` over the ranks; every row's ``node`` id of the new level): the
    smaller child of each (the left one on equal counts) built in one ``histograms(slot, B,
    bound)`` pass, the other its parent's minus it. One upload."""
    B = prev.shape[0]
    build = [2 * j + int(2 * l > c) for j, (l, c) in enumerate(zip(left, counts))]
    slot_of = [-1] * (2 * B)
    for j, b in enumerate(build):
        slot_of[b] = j
    tab = torch.tensor(slot_of + build, dtype=torch.int64, device=prev.device)
    slot = tab[:2 * B].index_select(0, node).to(torch.int32)
    small = histograms(slot, B, int(sum(min(l, c - l) for l, c in zip(left, counts))))
    out = torch.empty((2 * B,) + tuple(prev.shape[1:]), dtype=prev.dtype, device=prev.device)
    idx = tab[2 * B:]
    out.index_copy_(0, idx, small)
    out.index_copy_(0, idx ^ 1, prev - small)
    return out


def _leaf_sums(q: Tensor, node: Tensor, infit: Optional[Tensor], L: int,
               reduce: Optional[Reduce]) -> Tensor:
    """(L, 3) int64 ``(Σ q_wt, Σ q_w, rows)`` of the fit's rows per leaf ``node``, summed over
    the ranks (exact: the last level's children's sums)."""
    idx = node if infit is None else torch.where(infit, node, L)  # other rows: a spare
    sums = torch.zeros((L + 1, 3), dtype=torch.int64, device=q.device)
    sums[:, :2].index_add_(0, idx, q)
    sums[:, 2].index_add_(0, idx, torch.ones_like(idx))
    totals = sums[:L].contiguous()
    if reduce is not None:
        reduce(totals)
    return totals
