r"""A fitted tree or stump ensemble as a plain ``torch.nn.Module`` of tensor ops.

:func:`to_torch` turns an :class:`~torchrankboost.boosting.ensemble.Ensemble` of
``TreeModel`` / ``StumpModel`` weak models into a :class:`TreeEnsembleModule`: the ``T``
trees padded to ``K`` internal nodes and ``L`` leaves each, held as buffers, so that
``.to(device)`` moves them and the module runs wherever its input lives (CPU, CUDA), inside
a larger torch graph, under ``torch.jit.script`` or ``torch.export.export`` (dynamic batch).

.. math::

    F(x) = b + \sum_{t=1}^{T} v_{t,\ell_t(x)}, \qquad v_{t,\ell} = \nu_t\,h_{t,\ell}

with the round weights ``ν_t`` folded into the leaf values ``h`` (the same float64 product
as :meth:`Ensemble.predict`) and the sum taken in round order, so CPU scores equal
``model.predict(X)`` bit for bit. A stump ``a + b·1[x_f > θ]`` is the one-split tree
``x_f <= θ`` → ``a``, else ``a + b`` (NaN → ``a``).
"""

from __future__ import annotations

from typing import Any, List, Tuple

import torch
from torch import Tensor

__all__ = ["TreeEnsembleModule", "to_torch"]


class TreeEnsembleModule(torch.nn.Module):
    """``T`` padded trees as buffers; ``forward(X (n, F)) -> (n,)`` float64 scores.

    Buffers (``K`` internal nodes, ``L`` leaves per tree after padding): ``feature`` (T, K)
    int64, ``threshold`` (T, K) float64 (``x <= threshold`` goes left), ``default_left``
    (T, K) bool (the side of NaN), ``left_child`` / ``right_child`` (T, K) int64 (``>= 0``
    internal node, ``< 0`` leaf ``~child``), ``root`` (T,) int64 (``0``, or ``-1`` for a
    single-leaf tree), ``leaf_value`` (T, L) float64 (round weight folded in),
    ``base_score`` () float64. ``compare_float32``: the trees were fitted on float32
    features, so inputs are rounded to float32 before the comparisons (as ``predict`` does).
    """

    def __init__(self, *, feature: Tensor, threshold: Tensor, default_left: Tensor,
                 left_child: Tensor, right_child: Tensor, root: Tensor, leaf_value: Tensor,
                 base_score: float, depth: int, num_features: int, compare_float32: bool):
        super().__init__()
        self.register_buffer("feature", feature)
        self.register_buffer("threshold", threshold)
        self.register_buffer("default_left", default_left)
        self.register_buffer("left_child", left_child)
        self.register_buffer("right_child", right_child)
        self.register_buffer("root", root)
        self.register_buffer("leaf_value", leaf_value)
        self.register_buffer("base_score", torch.tensor(float(base_score), dtype=torch.float64))
        self.depth: int = int(depth)
        self.num_features: int = int(num_features)
        self.compare_float32: bool = bool(compare_float32)

    def leaf_indices(self, X: Tensor) -> Tensor:
        """``(n, T)`` int64: the leaf of every row in every tree (the tree's own leaf
        numbering, as ``leaf_value``'s columns), NaN following ``default_left``."""
        if self.compare_float32:
            X = X.to(torch.float32)
        X = X.to(torch.float64)
        n_trees, n_nodes = self.feature.shape[0], self.feature.shape[1]
        offset = torch.arange(n_trees, device=X.device, dtype=torch.int64) * n_nodes
        node = self.root.unsqueeze(0).expand(X.shape[0], n_trees)
        feat = self.feature.reshape(-1)
        thr = self.threshold.reshape(-1)
        dleft = self.default_left.reshape(-1)
        left = self.left_child.reshape(-1)
        right = self.right_child.reshape(-1)
        for _ in range(self.depth):
            idx = node.clamp(min=0) + offset
            x = X.gather(1, feat[idx])
            go_left = torch.where(torch.isnan(x), dleft[idx], x <= thr[idx])
            nxt = torch.where(go_left, left[idx], right[idx])
            node = torch.where(node >= 0, nxt, node)
        return -1 - node

    def forward(self, X: Tensor) -> Tensor:
        """``(n,)`` float64 scores of ``X`` ``(n, F)`` (NaN = missing)."""
        leaf = self.leaf_indices(X)
        n_trees, n_leaves = self.leaf_value.shape[0], self.leaf_value.shape[1]
        offset = torch.arange(n_trees, device=X.device, dtype=torch.int64) * n_leaves
        vals = self.leaf_value.reshape(-1)[leaf + offset]
        base = self.base_score.reshape(1, 1).expand(X.shape[0], 1)
        # round order, as Ensemble.predict: ((b + v_1) + v_2) + ...
        return torch.cat([base, vals], 1).cumsum(1)[:, -1]


def _tree_parts(m) -> Tuple[Any, ...]:
    """``(feature, threshold, default_left, left, right, leaf_value, depth)`` on CPU."""
    cpu = [getattr(m, k).detach().to("cpu") for k in
           ("split_feature", "threshold", "default_left", "left_child", "right_child",
            "leaf_value")]
    return (*cpu, int(m.depth))


def _stump_parts(m) -> Tuple[Any, ...]:
    """A stump as the one-split tree: left leaf ``a`` (``x <= θ`` or NaN), right ``a + b``."""
    h = torch.tensor([False, True], device=m.coef.device)
    values = m._out(h).detach().to("cpu")  # the model's own arithmetic, bit for bit
    i64 = torch.int64
    return (torch.tensor([m.feature], dtype=i64), m.threshold.detach().to("cpu").reshape(1),
            torch.tensor([True]), torch.tensor([-1], dtype=i64), torch.tensor([-2], dtype=i64),
            values, 1)


def _parts(model) -> List[Tuple[Any, ...]]:
    from ..boosting.learners import StumpModel, TreeModel

    out = []
    for m in model.models:
        if isinstance(m, TreeModel):
            out.append(_tree_parts(m))
        elif isinstance(m, StumpModel):
            out.append(_stump_parts(m))
        else:
            raise ValueError(f"to_torch: cannot convert weak model type {type(m).__name__} "
                             f"(only TreeModel and StumpModel)")
    return out


def _threshold_dtype(parts) -> bool:
    dtypes = {p[1].dtype for p in parts if p[1].numel()}
    if len(dtypes) > 1:
        raise ValueError(f"to_torch: the weak models mix threshold dtypes {sorted(map(str, dtypes))}")
    return dtypes == {torch.float32}


def to_torch(model: Any) -> TreeEnsembleModule:
    """The :class:`TreeEnsembleModule` of a fitted ``Ensemble`` of trees and/or stumps.

    ``module(X)`` equals ``model.predict(X)`` (bit for bit on CPU; in CUDA the round sum is
    a parallel scan, equal to rounding). A weak model of another type raises ``ValueError``.
    """
    if not hasattr(model, "models") or not hasattr(model, "weights"):
        raise ValueError(f"to_torch: expected a fitted Ensemble, got {type(model).__name__}")
    parts = _parts(model)
    T = len(parts)
    K = max([p[0].numel() for p in parts] + [1])
    L = max([p[5].numel() for p in parts] + [1])
    i64 = torch.int64
    feature = torch.zeros(T, K, dtype=i64)
    threshold = torch.zeros(T, K, dtype=torch.float64)
    default_left = torch.ones(T, K, dtype=torch.bool)
    left = torch.full((T, K), -1, dtype=i64)
    right = torch.full((T, K), -1, dtype=i64)
    root = torch.zeros(T, dtype=i64)
    leaf_value = torch.zeros(T, L, dtype=torch.float64)
    for t, (f, thr, dl, lc, rc, lv, _depth) in enumerate(parts):
        k = f.numel()
        feature[t, :k], threshold[t, :k], default_left[t, :k] = f, thr.double(), dl
        left[t, :k], right[t, :k] = lc, rc
        root[t] = 0 if k else -1
        leaf_value[t, :lv.numel()] = model.weights[t] * lv.to(torch.float64)
    return TreeEnsembleModule(
        feature=feature, threshold=threshold, default_left=default_left, left_child=left,
        right_child=right, root=root, leaf_value=leaf_value, base_score=model.base_score,
        depth=max([p[6] for p in parts] + [0]), num_features=model.num_features,
        compare_float32=_threshold_dtype(parts))
