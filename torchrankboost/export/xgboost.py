r"""XGBoost's JSON model format (``xgboost.Booster(model_file=path)`` loads it).

XGBoost sends ``x`` left when ``x < split_condition``, on inputs held as float32, and NaN to
the ``default_left`` side. Our trees send ``x`` left when ``x <= θ``; for float32 ``x`` that
is ``x < s`` with ``s`` the smallest float32 above ``θ``, which is what is written (exact for
float32 thresholds; for a model with float64 thresholds, exact on inputs that are float32
values). Leaf values (round weight folded in) and the base score are float32 in XGBoost, and
it sums in float32: predictions agree to float32 rounding. Nodes are numbered breadth first.
"""

from __future__ import annotations

import json
import os
from typing import Any, List

import numpy as np

from .._io import atomic_write
from ..contract import PathLike
from ._trees import PlainTree, plain_trees

__all__ = ["to_xgboost"]

_ROOT_PARENT = 2147483647


def xgb_split_condition(theta: float) -> float:
    """The smallest float32 strictly above ``θ`` (``+inf`` stays ``+inf``), as a float."""
    with np.errstate(over="ignore"):
        s = np.float32(theta)
    if float(s) <= theta and not np.isinf(s):
        s = np.nextafter(s, np.float32(np.inf))
    return float(s)


def _f32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def _nodes(tree: PlainTree):
    """Breadth-first node order: entries ``(kind, index, parent)``, kind ``"n"`` (internal)
    or ``"l"`` (leaf)."""
    order = [("n", 0, _ROOT_PARENT) if tree.num_splits else ("l", 0, _ROOT_PARENT)]
    i = 0
    while i < len(order):
        kind, k, _ = order[i]
        if kind == "n":
            for c in (tree.left_child[k], tree.right_child[k]):
                order.append(("n", c, i) if c >= 0 else ("l", ~c, i))
        i += 1
    return order


def _tree_json(tid: int, tree: PlainTree, F: int) -> dict:
    order = _nodes(tree)
    n = len(order)
    left, right, parents, feat, cond, dleft, gain, base_w = ([] for _ in range(8))
    child_pos = {(kind, k): pos for pos, (kind, k, _) in enumerate(order)}
    for kind, k, parent in order:
        parents.append(parent)
        if kind == "n":
            lc, rc = tree.left_child[k], tree.right_child[k]
            left.append(child_pos[("n", lc) if lc >= 0 else ("l", ~lc)])
            right.append(child_pos[("n", rc) if rc >= 0 else ("l", ~rc)])
            feat.append(tree.split_feature[k])
            cond.append(xgb_split_condition(tree.threshold[k]))
            dleft.append(int(tree.default_left[k]))
            gain.append(_f32(tree.split_gain[k]))
            base_w.append(0.0)
        else:
            v = _f32(tree.leaf_value[k])
            for column, value in ((left, -1), (right, -1), (feat, 0), (cond, v), (dleft, 0),
                                  (gain, 0.0), (base_w, v)):
                column.append(value)
    return {"base_weights": base_w, "categories": [], "categories_nodes": [],
            "categories_segments": [], "categories_sizes": [], "default_left": dleft,
            "id": tid, "left_children": left, "loss_changes": gain, "parents": parents,
            "right_children": right, "split_conditions": cond, "split_indices": feat,
            "split_type": [0] * n, "sum_hessian": [0.0] * n,
            "tree_param": {"num_deleted": "0", "num_feature": str(F), "num_nodes": str(n),
                           "size_leaf_vector": "1"}}


def _document(base: float, F: int, trees: List[PlainTree]) -> dict:
    T = len(trees)
    model = {"gbtree_model_param": {"num_parallel_tree": "1", "num_trees": str(T)},
             "iteration_indptr": list(range(T + 1)), "tree_info": [0] * T,
             "trees": [_tree_json(i, t, F) for i, t in enumerate(trees)]}
    learner = {"attributes": {}, "feature_names": [], "feature_types": [],
               "gradient_booster": {"model": model, "name": "gbtree"},
               "learner_model_param": {"base_score": repr(_f32(base)), "boost_from_average": "0",
                                       "num_class": "0", "num_feature": str(F),
                                       "num_target": "1"},
               "objective": {"name": "reg:squarederror",
                             "reg_loss_param": {"scale_pos_weight": "1"}}}
    return {"learner": learner, "version": [2, 1, 0]}


def to_xgboost(model: Any, path: PathLike) -> None:
    r"""Write a fitted tree or stump ensemble as an XGBoost JSON model.

    Args:
        model: an :class:`~torchrankboost.boosting.ensemble.Ensemble` of ``TreeModel`` /
            ``StumpModel`` rounds (or a fitted ranker whose ``model_`` is one).
        path: the file to write (atomically; name it ``*.json``).

    ``xgboost.Booster(model_file=path).predict(xgboost.DMatrix(X, missing=np.nan),
    output_margin=True)`` equals ``model.predict(X)`` up to XGBoost's float32 leaf values
    and sums: thresholds (as ``<`` conditions), NaN sides, base score and round weights (folded
    into the leaves) carry over. Per-query normalisation of the features is not part of the
    file: apply it before predicting. Other weak models raise ``ValueError``.
    """
    base, F, trees = plain_trees(model, "to_xgboost")
    text = json.dumps(_document(base, F, trees), allow_nan=True)
    atomic_write(os.fspath(path), lambda fh: fh.write(text))
