r"""LightGBM's text model format (``lightgbm.Booster(model_file=path)`` loads it).

LightGBM sends ``x`` left when ``x <= threshold`` (in float64) and NaN to the default side
(``decision_type`` = NaN missing type, plus the default-left bit), the same rule as ours. A
model with float32 thresholds compares inputs rounded to float32, so each threshold ``θ`` is
written as the largest float64 ``d`` with ``float32(d) <= θ``: float32 and float64 inputs
then take our branches exactly. Rounds are written in order, a first tree holding the base
score (one split whose two leaves are equal), so LightGBM's float64 sum repeats
:meth:`Ensemble.predict`'s. A ``+inf`` threshold (everything finite left) is written as the
largest float64.
"""

from __future__ import annotations

import math
import os
from typing import Any, List

import numpy as np

from .._io import atomic_write
from ..contract import PathLike
from ._trees import PlainTree, plain_trees

__all__ = ["to_lightgbm"]

_NAN_MISSING = 2 << 2  # LightGBM's missing type NaN, in bits 2-3 of decision_type
_DEFAULT_LEFT = 2


def lgb_threshold(theta: float, float32: bool) -> float:
    """The float64 threshold LightGBM needs to reproduce ``x <= θ`` (see the module)."""
    if theta == math.inf:
        return float(np.finfo(np.float64).max)
    if not float32:
        return float(theta)
    t = np.float32(theta)
    up = np.nextafter(t, np.float32(np.inf))
    hi = 2.0 ** 128 if np.isinf(up) else float(up)
    mid = (float(t) + hi) / 2.0  # exact in float64
    with np.errstate(over="ignore"):
        below = np.float32(mid) <= t
    return mid if below else float(np.nextafter(mid, -np.inf))


def _join(values) -> str:
    return " ".join(values)


def _covers(tree: PlainTree):
    """``(internal counts, leaf counts)`` as text: the tree's covers (what LightGBM's and
    SHAP's TreeSHAP weigh the branches by), zeros when it has none."""
    K = tree.num_splits
    if tree.cover is None:
        return ["0"] * K, ["0"] * (K + 1)
    text = [str(int(round(c))) for c in tree.cover]
    return text[:K], text[K:]


def _tree_text(i: int, tree: PlainTree) -> str:
    K = tree.num_splits
    dtype = [_NAN_MISSING | (_DEFAULT_LEFT if d else 0) for d in tree.default_left]
    zeros_k = ["0"] * K
    count_k, count_l = _covers(tree)
    lines = [f"Tree={i}", f"num_leaves={K + 1}", "num_cat=0",
             "split_feature=" + _join(str(f) for f in tree.split_feature),
             "split_gain=" + _join(repr(float(g)) for g in tree.split_gain),
             "threshold=" + _join(repr(lgb_threshold(t, tree.float32)) for t in tree.threshold),
             "decision_type=" + _join(str(d) for d in dtype),
             "left_child=" + _join(str(c) for c in tree.left_child),
             "right_child=" + _join(str(c) for c in tree.right_child),
             "leaf_value=" + _join(repr(float(v)) for v in tree.leaf_value),
             "leaf_weight=" + _join(count_l), "leaf_count=" + _join(count_l),
             "internal_value=" + _join(zeros_k), "internal_weight=" + _join(count_k),
             "internal_count=" + _join(count_k), "is_linear=0", "shrinkage=1"]
    return "\n".join(lines) + "\n\n\n"


def _split_trees(base: float, trees: List[PlainTree]) -> List[PlainTree]:
    """Every round as a tree with at least one split (LightGBM's trees have one); the base
    score first when it is not 0 (or when there is nothing else). A constant is the split
    ``x_0 <= +inf`` (NaN left: every row in leaf 0, as ``Ensemble.apply``) with two equal
    leaves and covers 1, 1 (no SHAP contribution, expected value the constant)."""

    def constant(v: float) -> PlainTree:
        return PlainTree([0], [math.inf], [True], [~0], [~1], [0.0], [v, v], False, [2.0, 1.0, 1.0])

    out = []
    if base != 0.0 or not trees:
        out.append(constant(base))
    out.extend(constant(t.leaf_value[0]) if t.num_splits == 0 else t for t in trees)
    return out


def to_lightgbm(model: Any, path: PathLike) -> None:
    r"""Write a fitted tree or stump ensemble as a LightGBM text model.

    Args:
        model: an :class:`~torchrankboost.boosting.ensemble.Ensemble` of ``TreeModel`` /
            ``StumpModel`` rounds (or a fitted ranker whose ``model_`` is one).
        path: the file to write (atomically).

    ``lightgbm.Booster(model_file=path).predict(X, raw_score=True)`` (``X`` ``(n, F)``, NaN
    missing) equals ``model.predict(X)``: thresholds, NaN sides, base score and round weights
    (folded into the leaf values) carry over exactly. Per-query normalisation of the features
    is not part of the file: apply it before predicting. Split gains carry over; leaf counts
    and weights are written as 0. Other weak models raise ``ValueError``.
    """
    base, F, trees = plain_trees(model, "to_lightgbm")
    trees = _split_trees(base, trees)
    header = ["tree", "version=v4", "num_class=1", "num_tree_per_iteration=1", "label_index=0",
              f"max_feature_idx={F - 1}", "objective=regression",
              "feature_names=" + _join(f"Column_{j}" for j in range(F)),
              "feature_infos=" + _join(["none"] * F)]
    body = "".join(_tree_text(i, t) for i, t in enumerate(trees))
    text = "\n".join(header) + "\n\n" + body + "end of trees\n\npandas_categorical:null\n"
    atomic_write(os.fspath(path), lambda fh: fh.write(text))
