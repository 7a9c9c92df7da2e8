r"""Exact path-dependent TreeSHAP of tree and stump ensembles, vectorised over rows and trees.

For one tree, a leaf ``ℓ`` with value ``v`` (the round weight folded in) and root path ``P``
contributes, for the ``m`` distinct features ``j`` split on along ``P``,

.. math::

    z_j = \prod_{\text{edges of } j} \frac{c(\text{child})}{c(\text{node})}, \qquad
    o_j(x) = \prod_{\text{edges of } j} 1[x \text{ takes the edge}],

(``c`` the node covers, :attr:`TreeModel.cover`) and, as the Shapley value of the game
``S ↦ v · Π_{j∈S} o_j · Π_{j∉S} z_j`` (Lundberg et al. 2020, path-dependent TreeSHAP),

.. math::

    φ_i \mathrel{+}= v\,(o_i - z_i) \sum_{k=0}^{m-1} \frac{k!\,(m-1-k)!}{m!}\, r_{i,k}, \qquad
    \sum_k r_{i,k} t^k = \prod_{j \ne i} (z_j + o_j t).

The polynomial ``Q(t) = Π_j (z_j + o_j t)`` is built once per (row, leaf) and divided by
``z_i + o_i t`` for every ``i`` at once (``o_i = 1``: synthetic division from the top
coefficient, TreeSHAP's *unwind*; ``o_i = 0``: ``Q / z_i``). Every leaf of every tree is one
path; paths of the same ``m`` are computed together (tensors ``(rows, paths, m)``), rows in
batches. The expected value is ``Σ_ℓ v_ℓ c_ℓ / c_root`` per tree; with the base score it
closes the sum: ``Σ_i φ_i + E = F(x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch
from torch import Tensor

from ..contract import DeviceLike

__all__ = ["TreeShap", "round_trees", "PlainRound"]

_BATCH_ELEMENTS = 1 << 17  # rows · paths · (m + 1) per batch: ~32 MB per float64 tensor


@dataclass
class PlainRound:
    """One round as a tree on CPU: internal nodes ``k`` (``feature``, ``threshold`` (a 1-D
    tensor in the model's dtype; ``x <= θ`` goes left), ``default_left``, ``left`` /
    ``right`` links (``< 0``: leaf ``~child``)), leaf ``value`` (float64, the round weight
    folded in) and ``cover`` (``K + L`` floats: internal nodes, then leaves)."""

    feature: List[int]
    threshold: Tensor
    default_left: List[bool]
    left: List[int]
    right: List[int]
    value: List[float]
    cover: List[float]


def _missing_cover(t: int, m) -> ValueError:
    return ValueError(f"predict(contrib=True): round {t + 1} ({type(m).__name__}) has no node "
                      f"covers (its model file predates them); refit the model to explain it")


def _tree_round(t: int, m, weight: float) -> PlainRound:
    if m.cover is None:
        raise _missing_cover(t, m)
    leaves = m.leaf_value.detach().to("cpu", torch.float64).tolist()
    return PlainRound([int(f) for f in m.split_feature.tolist()], m.threshold.detach().cpu(),
                      [bool(d) for d in m.default_left.tolist()],
                      [int(c) for c in m.left_child.tolist()],
                      [int(c) for c in m.right_child.tolist()], [weight * v for v in leaves],
                      m.cover.detach().to("cpu", torch.float64).tolist())


def _stump_round(t: int, m, weight: float) -> PlainRound:
    """``a + b·1[x > θ]``: the split ``x <= θ`` (NaN left) → ``a``, else ``a + b``; a constant
    (``b`` adds nothing, or ``θ = +inf``) is a single leaf."""
    a, ab = m._out(torch.tensor([0.0, 1.0], device=m.coef.device)).detach().to(
        "cpu", torch.float64).tolist()
    thr = m.threshold.detach().cpu().reshape(1)
    if ab == a or float(thr) == math.inf:
        return PlainRound([], thr[:0], [], [], [], [weight * a], [1.0])
    cover = getattr(m, "cover", None)
    if cover is None:
        raise _missing_cover(t, m)
    nl, nr = (float(c) for c in cover.tolist())
    return PlainRound([int(m.feature)], thr, [True], [~0], [~1], [weight * a, weight * ab],
                      [nl + nr, nl, nr])


def round_trees(ensemble: Any, n_rounds: int) -> List[PlainRound]:
    """The first ``n_rounds`` rounds of ``ensemble`` as :class:`PlainRound` s; a round that is
    neither a tree nor a stump, or has no covers, raises a one-line ``ValueError``."""
    out = []
    for t in range(n_rounds):
        m, w = ensemble.models[t], float(ensemble.weights[t])
        kind = getattr(m, "type_name", None)  # no import of boosting here: it imports us
        if kind == "TreeModel":
            out.append(_tree_round(t, m, w))
        elif kind == "StumpModel":
            out.append(_stump_round(t, m, w))
        else:
            raise ValueError(f"predict(contrib=True): round {t + 1} is a {type(m).__name__}, "
                             f"not a tree or a stump: no TreeSHAP for it")
    return out


def _leaf_paths(r: PlainRound):
    """``(leaf, [(node, went_left, child), ...])`` for every leaf, root first."""
    if not r.feature:
        yield 0, []
        return
    stack = [(0, [])]
    while stack:
        node, path = stack.pop()
        for child, left in ((r.left[node], True), (r.right[node], False)):
            p = path + [(node, left, child)]
            if child >= 0:
                stack.append((child, p))
            else:
                yield ~child, p


def _elements(r: PlainRound, path) -> Tuple[List[int], List[float], List[int]]:
    """The distinct features of a path (first-seen order), their ``z`` and, per edge, the
    index of its feature among them."""
    K = len(r.feature)
    feats: List[int] = []
    z: List[float] = []
    elem = []
    for node, _, child in path:
        f = r.feature[node]
        if f not in feats:
            feats.append(f)
            z.append(1.0)
        e = feats.index(f)
        parent = r.cover[node]
        # a node no training row reached (an oblivious tree's empty subtree): its leaves weigh 0
        z[e] *= r.cover[child if child >= 0 else K + ~child] / parent if parent > 0 else 0.0
        elem.append(e)
    return feats, z, elem


class _Group:
    """The paths with ``m`` distinct features, as tensors: ``cond_node``, ``cond_left``,
    ``cond_elem`` (P, D) (edge → decision column, side, element; padding: the always-true
    column, element ``m``), ``z``, ``feat`` (P, m), ``value`` (P,)."""

    def __init__(self, m: int, rows: list, true_col: int, device):
        D = max(1, max(len(r[0]) for r in rows))
        pad = lambda seq, v: list(seq) + [v] * (D - len(seq))  # noqa: E731
        i64 = dict(dtype=torch.int64, device=device)
        self.m = m
        self.cond_node = torch.tensor([pad(r[0], true_col) for r in rows], **i64)
        self.cond_left = torch.tensor([pad(r[1], True) for r in rows], dtype=torch.bool,
                                      device=device)
        self.cond_elem = torch.tensor([pad(r[2], m) for r in rows], **i64)
        self.z = torch.tensor([r[3] for r in rows], dtype=torch.float64, device=device)
        self.feat = torch.tensor([r[4] for r in rows], **i64)
        self.value = torch.tensor([r[5] for r in rows], dtype=torch.float64, device=device)
        k = torch.arange(m, dtype=torch.float64)
        self.w = torch.exp(torch.lgamma(k + 1) + torch.lgamma(m - k) - math.lgamma(m + 1)).to(device)
        self.w_list = [float(v) for v in self.w.tolist()]
        self.z_safe = torch.where(self.z > 0, self.z, torch.ones_like(self.z))


class TreeShap:
    """Path-dependent TreeSHAP of a list of :class:`PlainRound` (see the module docstring).

    Args:
        rounds: the rounds (:func:`round_trees`).
        num_features: ``F``.
        base_score: the ensemble's constant ``b``.
        device: where the path tensors live (that of the rows explained).
    """

    def __init__(self, rounds: List[PlainRound], num_features: int, base_score: float,
                 device: DeviceLike):
        self.F = int(num_features)
        self.device = torch.device(device)
        self._nodes(rounds)
        by_m: Dict[int, list] = {}
        expected = float(base_score)
        for t, r in enumerate(rounds):
            K = len(r.feature)
            root = r.cover[0] if K else 1.0
            for leaf, path in _leaf_paths(r):
                feats, z, elem = _elements(r, path)
                v = r.value[leaf]
                expected += v * (r.cover[K + leaf] / root if K else 1.0)
                if feats:
                    cols = [self.offset[t] + node for node, _, _ in path]
                    by_m.setdefault(len(feats), []).append(
                        (cols, [lft for _, lft, _ in path], elem, z, feats, v))
        self.expected_value = expected
        self.groups = [_Group(m, rows, self.true_col, self.device) for m, rows in sorted(by_m.items())]

    def _nodes(self, rounds: List[PlainRound]) -> None:
        """Every internal node of every round as one decision column, grouped by the dtype
        the round compares in (features rounded to it, as ``predict`` does)."""
        self.offset, per_dtype = [], {}
        n = 0
        for r in rounds:
            self.offset.append(n)
            K = len(r.feature)
            if K:
                per_dtype.setdefault(r.threshold.dtype, []).append((n, r))
            n += K
        self.true_col = n
        self.node_sets = []
        for dtype, items in per_dtype.items():
            cols = torch.cat([torch.arange(o, o + len(r.feature)) for o, r in items])
            dev = dict(device=self.device)
            self.node_sets.append((
                dtype, cols.to(**dev),
                torch.tensor([f for _, r in items for f in r.feature], dtype=torch.int64, **dev),
                torch.cat([r.threshold for _, r in items]).to(**dev),
                torch.tensor([d for _, r in items for d in r.default_left], dtype=torch.bool, **dev)))

    def decisions(self, X: Tensor) -> Tensor:
        """``(n, N + 1)`` bool: row ``i`` goes left at node column ``c`` (the last column is
        always true: the padding)."""
        out = torch.ones((X.shape[0], self.true_col + 1), dtype=torch.bool, device=X.device)
        for dtype, cols, feat, thr, dl in self.node_sets:
            x = X.to(dtype).index_select(1, feat)
            out[:, cols] = torch.where(torch.isnan(x), dl, x <= thr)
        return out

    def contributions(self, X: Tensor) -> Tensor:
        """``(n, F + 1)`` float64: the SHAP values of the rows of ``X`` (n, F) and the
        expected value in the last column."""
        n = X.shape[0]
        out = torch.zeros((n, self.F + 1), dtype=torch.float64, device=X.device)
        out[:, self.F] = self.expected_value
        widest = max((g.z.numel() + g.z.shape[0] for g in self.groups), default=1)
        step = max(1, _BATCH_ELEMENTS // max(widest, 1))
        for start in range(0, n, step):
            xb = X[start:start + step]
            gl = self.decisions(xb)
            acc = out[start:start + step]
            for g in self.groups:
                phi = _group_shap(g, gl)
                acc[:, :self.F].index_add_(1, g.feat.reshape(-1), phi.reshape(xb.shape[0], -1))
        return out


def _group_shap(g: _Group, gl: Tensor) -> Tensor:
    """``(b, P, m)`` contributions of the group's paths for decisions ``gl`` (b, N + 1)."""
    b = gl.shape[0]
    P, m = g.z.shape
    ok = gl[:, g.cond_node] == g.cond_left  # (b, P, D)
    fails = torch.zeros((b, P, m + 1), dtype=torch.int32, device=gl.device)
    fails.scatter_add_(2, g.cond_elem.expand(b, -1, -1), (~ok).to(torch.int32))
    o = (fails[..., :m] == 0).to(torch.float64)  # (b, P, m)
    z = g.z
    q = torch.zeros((b, P, m + 1), dtype=torch.float64, device=gl.device)
    q[..., 0] = 1.0
    for e in range(m):  # Q(t) ← Q(t) · (z_e + o_e t): degrees 0..e+1 (the rest still 0)
        low = q[..., :e + 1] * o[..., e:e + 1]
        q[..., :e + 1].mul_(z[:, e:e + 1])
        q[..., 1:e + 2].add_(low)
    w = g.w_list
    r = q[..., m:m + 1].expand(b, P, m)  # r_{m-1} = q_m (o_i = 1: divide by z_i + t)
    s1 = r * w[m - 1]
    for k in range(m - 1, 0, -1):
        r = torch.addcmul(q[..., k:k + 1], z, r, value=-1.0)  # r_{k-1} = q_k − z_i r_k
        s1.add_(r, alpha=w[k - 1])
    s0 = (q[..., :m] @ g.w).unsqueeze(-1) / g.z_safe
    s = torch.where(o > 0, s1, s0)
    return (o - z) * s * g.value[:, None]
