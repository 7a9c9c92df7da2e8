r"""The oblivious level search: the arithmetic every backend shares and its pure-torch reference.

An oblivious tree asks one question per level, the same for every node of the level:
``(feature f, threshold bin t, NaN side)``. With ``G = Σ w·t`` and ``H = Σ w`` over a node's
rows and ``T(G, H) = G² / (H + λ)`` (0 where ``H + λ <= 0``), a candidate question has the
level gain

    gain = Σ_nodes [T(G_L, H_L) + T(G_R, H_R) − T(G, H)]

(the nodes' terms added in node order) from the (B, 3, F, S) int64 histograms of the level's
``B`` nodes (channels Σ q_wt, Σ q_w, count in the fixed point of :mod:`.fixed_point`; slot
``S − 1`` = missing): the sums of a side are integer (cumulative) sums, right = node total −
left exactly, and ``G``, ``H`` are those sums converted to float64 (``float64(Q) · scale``).
A candidate is allowed when every non-empty child of every node has at least
``min_samples_leaf`` rows and ``min_child_weight`` weight (a node may send all its rows to one
side). Candidates run in (feature, threshold bin,
NaN left / NaN right) order, NaN right only for the features with NaNs among the fit's rows,
and the first maximum wins; the level is kept when its gain exceeds
``max(min_split_gain, 1e-10·|Σ_nodes T(G, H)|)`` (:func:`accepted`).

:func:`search` is the reference (every candidate's level gain as tensors, any device); the
compiled kernels (``trb_oblivious_level`` / ``trb_oblivious_nodes``) give the same question and
node gains bit for bit.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .base import Level, Reduce, TreeParams

__all__ = ["split_term", "node_sum", "level_setup", "accepted", "search", "sum_built",
           "to_float", "node_totals", "children_sums"]

_REL_EPS = 1e-10  # a level must improve on the parent terms by more than this relative amount


def split_term(g: Tensor, h: Tensor, lam: float) -> Tensor:
    """``g² / (h + λ)``, 0 where ``h + λ <= 0`` (an empty side)."""
    d = h + lam
    ok = d > 0
    return torch.where(ok, g * g / torch.where(ok, d, torch.ones_like(d)), torch.zeros_like(d))


def node_sum(x: Tensor) -> Tensor:
    """``Σ_j x[j]`` added in node order (the compiled kernel's order, bit for bit)."""
    acc = x[0]
    for j in range(1, x.shape[0]):
        acc = acc + x[j]
    return acc


def to_float(sums: Tensor, scale: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``(G, H, count)`` float64 of integer sums ``sums`` (B, 3, ...) (channels Σ q_wt, Σ q_w,
    count): ``float64(Q) · scale[c]`` (``scale`` (2,) float64, :mod:`.fixed_point`), the
    count exactly."""
    q = sums.to(torch.float64)
    return q[:, 0] * scale[0], q[:, 1] * scale[1], q[:, 2]


def node_totals(hists: Tensor) -> Tensor:
    """(B, 3) int64 totals of each node of ``hists`` (B, 3, F, S): feature 0's slots summed
    (every feature's slots hold the node's rows: the same totals, exactly)."""
    return hists[:, :, 0, :].sum(-1)


def children_sums(hists: Tensor, f: int, t: int, default_left: bool) -> Tensor:
    """(2B, 3) int64 sums of the children of each node of ``hists`` (B, 3, F, S) under the
    question ``code <= t`` of feature ``f`` (NaN left when ``default_left``): rows ``2j``
    (left) and ``2j + 1`` (right) of node ``j``, exactly."""
    h = hists[:, :, f, :]  # (B, 3, S)
    left = h[..., : t + 1].sum(-1)
    if default_left:
        left = left + h[..., -1]
    return torch.stack([left, h.sum(-1) - left], 1).reshape(-1, 3)


def level_setup(hists: Tensor, prepared, lam: float, scale: Tensor) -> Optional[Tuple[int, Tensor]]:
    """``(Vm, parent)``: the most value bins of a feature ``Vm`` (at most the missing code) and
    the nodes' terms ``T(G, H)`` (B,) of the node totals of ``hists`` (B, 3, F, S) (``scale``:
    the fixed point's); ``None`` when there is no feature."""
    F = hists.shape[2]
    if F == 0:
        return None
    num_bins = prepared.num_bins.to(hists.device)
    Vm = min(max(1, int(num_bins.max())), prepared.missing_code)
    G, H, _ = to_float(node_totals(hists), scale)
    return Vm, split_term(G, H, lam)


def accepted(best_gain: float, parent: Tensor, params: TreeParams) -> bool:
    """Whether a level of gain ``best_gain`` is kept over nodes of terms ``parent`` (B,)."""
    pa = float(node_sum(parent))
    return math.isfinite(best_gain) and best_gain > max(params.min_split_gain, _REL_EPS * abs(pa))


def sum_built(out: Tensor, build: List[int], reduce: Optional[Reduce]) -> None:
    """Sum the histograms ``out[build]`` (of any layout) over the ranks, in place, as one
    contiguous buffer (nothing in one process)."""
    if reduce is not None:
        built = out[build].contiguous()
        reduce(built)
        out[build] = built


def _side_sums(hists: Tensor, Vm: int, fs: Optional[Tensor], nan_left: bool):
    """Left and right ``(B, 3, F', Vm)`` int64 sums of every threshold bin of the features
    ``fs`` (all when ``None``), NaN going left or right."""
    S = hists.shape[-1]
    h = hists if fs is None else hists.index_select(2, fs)
    c = torch.cumsum(h[..., :Vm], -1)  # left sums, NaN excluded
    ms = h[..., S - 1:S]
    tot = c[..., Vm - 1:Vm] + ms  # node totals (the same for every feature, exactly)
    left = c + ms if nan_left else c
    return left, tot - left


def _grid_gains(hists: Tensor, fs: Optional[Tensor], Vm: int, nan_left: bool, parent: Tensor,
                params: TreeParams, scale: Tensor):
    """Level gains ``(F', Vm)`` summed over the nodes (``-inf`` where a child breaks the
    leaf constraints), the per-node gains (B, F', Vm) and left row counts (B, F', Vm)."""
    lam = params.l2
    left, right = _side_sums(hists, Vm, fs, nan_left)
    gl, hl, nl = to_float(left, scale)
    gr, hr, nr = to_float(right, scale)
    node_gain = split_term(gl, hl, lam) + split_term(gr, hr, lam) - parent.view(-1, 1, 1)
    msl, mcw = params.min_samples_leaf - 0.5, params.min_child_weight

    def side_ok(cnt, h):
        return (cnt < 0.5) | ((cnt >= msl) & (h >= mcw))

    ok = (side_ok(nl, hl) & side_ok(nr, hr)).all(0)
    return torch.where(ok, node_sum(node_gain), torch.full_like(node_gain[0], -math.inf)), node_gain, nl


def _best_candidate(hists: Tensor, num_bins: Tensor, feat_ok: Tensor, miss: Tensor, Vm: int,
                    parent: Tensor, params: TreeParams, scale: Tensor
                    ) -> Optional[Tuple[int, int, int]]:
    """``(feature, bin, side)`` (side 0: NaN left) of the first candidate of largest level
    gain, or ``None`` when it is not :func:`accepted`."""
    dev = hists.device
    F = hists.shape[2]
    valid = (torch.arange(Vm, device=dev).unsqueeze(0) < num_bins.unsqueeze(1)) & feat_ok.unsqueeze(1)
    gain = torch.full((F, Vm, 2), -math.inf, dtype=torch.float64, device=dev)
    g0, _, _ = _grid_gains(hists, None, Vm, True, parent, params, scale)
    gain[:, :, 0] = torch.where(valid, g0, gain[:, :, 0])
    fs = miss.nonzero().squeeze(1)
    if fs.numel():
        g1, _, _ = _grid_gains(hists, fs, Vm, False, parent, params, scale)
        gain[fs, :, 1] = torch.where(valid[fs], g1, gain[fs, :, 1])
    best, q = torch.max(gain.view(-1), 0)
    if not accepted(float(best), parent, params):
        return None
    q = int(q)
    return q // (2 * Vm), (q // 2) % Vm, q % 2


def search(hists: Tensor, prepared, feat_ok: Tensor, miss: Tensor, *,
           params: TreeParams, scale: Tensor) -> Optional[Level]:
    """The reference of :meth:`~.base.TreeBackend.best_level`: the best question of a level
    from its nodes' (B, 3, F, S) int64 ``hists`` (``scale`` (2,) float64: the fixed point's),
    its node gains and left row counts (B,)."""
    setup = level_setup(hists, prepared, params.l2, scale)
    if setup is None:
        return None
    Vm, parent = setup
    num_bins = prepared.num_bins.to(hists.device)
    found = _best_candidate(hists, num_bins, feat_ok, miss, Vm, parent, params, scale)
    if found is None:
        return None
    f, t, d = found
    fs = torch.tensor([f], device=hists.device)
    _, ng, nl = _grid_gains(hists, fs, Vm, d == 0, parent, params, scale)
    return Level(f, t, d == 0, ng[:, 0, t], nl[:, 0, t])
