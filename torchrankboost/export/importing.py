r"""LightGBM and XGBoost models as :class:`~torchrankboost.boosting.ensemble.Ensemble`\ s of
our trees (:class:`~torchrankboost.boosting.learners.TreeModel`), the reverse of
:mod:`.lightgbm` / :mod:`.xgboost`: the imported ensemble predicts the source model's raw
score ``F(x) = b + Σ_t f_t(x)`` (round weights 1.0, ``b`` the base score), and continues with
our losses through ``fit(..., init_model=...)``.

LightGBM (``booster.dump_model()``): a node sends ``x`` left when ``x <= threshold`` in
float64, our rule, so thresholds and leaf values carry over exactly (float64 trees) and the
float64 sum in round order repeats LightGBM's. Missing type NaN sends NaN to the
``default_left`` side; missing type None treats NaN as ``0``, i.e. NaN goes where ``0`` goes
(``default_left = 0 <= threshold``). Missing type Zero, categorical splits, linear trees,
several classes and random-forest averaging are refused with a one-line ``ValueError``.

XGBoost (its JSON model): a node sends ``x`` left when ``x < c`` on float32 inputs; for
float32 ``x`` that is ``x <= θ`` with ``θ`` the largest float32 below ``c``, so the trees
get float32 thresholds ``θ`` (inputs compared as float32, as XGBoost does). XGBoost sums its
float32 leaf values in float32, so predictions agree to float32 rounding. The base score is
turned into a margin by the objective's link (identity; logit for the logistic objectives;
log for Poisson/Gamma/Tweedie/Cox). Categorical splits, DART, vector leaves and multi-class /
multi-target models are refused.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any, List, Tuple

import numpy as np
import torch

if TYPE_CHECKING:
    from ..boosting.ensemble import Ensemble

__all__ = ["from_lightgbm", "from_xgboost"]


def _tree_model(nodes: List[tuple], leaves: List[float], float32: bool):
    """A :class:`TreeModel` from ``nodes`` ``(feature, threshold, default_left, left, right,
    gain)`` (children ``>= 0`` internal, ``< 0`` leaf ``~child``) and ``leaves`` (float64)."""
    from ..boosting.learners import TreeModel

    K = len(nodes)
    cols = list(zip(*nodes)) if nodes else [()] * 6
    i64 = dict(dtype=torch.int64)
    depth = [0] * max(K, 1)
    for k in range(K):  # parents come before their children
        for c in (nodes[k][3], nodes[k][4]):
            if c >= 0:
                depth[c] = depth[k] + 1
    return TreeModel(
        split_feature=torch.tensor(cols[0], **i64),
        threshold_bin=torch.zeros(K, **i64),
        threshold=torch.tensor(cols[1], dtype=torch.float32 if float32 else torch.float64),
        default_left=torch.tensor(cols[2], dtype=torch.bool),
        left_child=torch.tensor(cols[3], **i64), right_child=torch.tensor(cols[4], **i64),
        split_gain=torch.tensor(cols[5], dtype=torch.float64),
        leaf_value=torch.tensor(leaves, dtype=torch.float64),
        depth=(max(depth) + 1) if K else 0)


def _ensemble(trees, base: float, num_features: int, source: str):
    from ..boosting.ensemble import Ensemble

    return Ensemble(trees, [1.0] * len(trees), base_score=base, num_features=num_features,
                    info={"imported_from": source})


# ----------------------------------------------------------------------------- LightGBM
def _lgb_dump(model) -> dict:
    if isinstance(model, dict):
        return model
    if isinstance(model, (str, os.PathLike)):
        import lightgbm as lgb

        return lgb.Booster(model_file=os.fspath(model)).dump_model()
    booster = getattr(model, "booster_", model)  # LGBMRanker and friends
    if not hasattr(booster, "dump_model"):
        raise ValueError(f"from_lightgbm: expected a lightgbm.Booster, a model file or its "
                         f"dump_model() dict, got {type(model).__name__}")
    return booster.dump_model()


def _lgb_tree(t: int, root: dict):
    """One LightGBM ``tree_structure`` as a :class:`TreeModel` (nodes in preorder)."""
    nodes: List[list] = []
    leaves: List[float] = []

    def visit(node: dict) -> int:
        if "leaf_value" in node and "split_feature" not in node:
            if node.get("leaf_coeff"):
                raise ValueError(f"from_lightgbm: tree {t}: linear trees are not supported")
            leaves.append(float(node["leaf_value"]))
            return ~(len(leaves) - 1)
        dt, miss = node.get("decision_type"), str(node.get("missing_type", "None"))
        if dt != "<=":
            raise ValueError(f"from_lightgbm: tree {t}: categorical split ({dt!r}) is not "
                             f"supported")
        if miss not in ("None", "NaN"):
            raise ValueError(f"from_lightgbm: tree {t}: missing_type {miss!r} is not "
                             f"supported (only None and NaN)")
        thr = float(node["threshold"])
        left = bool(node["default_left"]) if miss == "NaN" else 0.0 <= thr
        k = len(nodes)
        nodes.append([int(node["split_feature"]), thr, left, 0, 0,
                      float(node.get("split_gain", 0.0))])
        nodes[k][3] = visit(node["left_child"])
        nodes[k][4] = visit(node["right_child"])
        return k

    visit(root)
    return _tree_model([tuple(n) for n in nodes], leaves, float32=False)


def from_lightgbm(model: Any) -> "Ensemble":
    r"""A LightGBM model as an :class:`~torchrankboost.boosting.ensemble.Ensemble` of trees.

    Args:
        model: a ``lightgbm.Booster`` (or a fitted ``LGBMRanker`` / ``LGBMRegressor``), a
            LightGBM model file, or ``booster.dump_model()``'s dict.

    Returns: an Ensemble (base score 0, one float64 tree per LightGBM tree, weights 1.0) whose
    ``predict(X)`` (``X`` ``(n, F)``, float32 or float64, NaN missing) equals
    ``booster.predict(X, raw_score=True)`` exactly. ``ValueError`` (one line) for what cannot
    be represented (see the module).
    """
    dump = _lgb_dump(model)
    if int(dump.get("num_class", 1)) != 1 or int(dump.get("num_tree_per_iteration", 1)) != 1:
        raise ValueError("from_lightgbm: multi-class models are not supported")
    if dump.get("average_output"):
        raise ValueError("from_lightgbm: random-forest models (average_output) are not "
                         "supported")
    trees = [_lgb_tree(t, info["tree_structure"]) for t, info in enumerate(dump["tree_info"])]
    return _ensemble(trees, 0.0, int(dump["max_feature_idx"]) + 1, "lightgbm")


# ----------------------------------------------------------------------------- XGBoost
def _xgb_document(model) -> dict:
    if isinstance(model, dict):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        import xgboost as xgb

        model = xgb.Booster(model_file=path)
    booster = model.get_booster() if hasattr(model, "get_booster") else model
    if not hasattr(booster, "save_raw"):
        raise ValueError(f"from_xgboost: expected an xgboost.Booster, a model file or its "
                         f"JSON dict, got {type(model).__name__}")
    return json.loads(bytes(booster.save_raw("json")))


def _xgb_base_margin(learner: dict) -> float:
    text = str(learner["learner_model_param"]["base_score"]).strip().strip("[]")
    values = [float(v) for v in text.split(",") if v.strip()]
    if len(values) != 1:
        raise ValueError(f"from_xgboost: expected one base score, got {len(values)}")
    base = float(np.float32(values[0]))
    name = learner.get("objective", {}).get("name", "")
    if name in ("binary:logistic", "reg:logistic", "binary:logitraw"):
        return math.log(base / (1.0 - base))
    if name in ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox"):
        return math.log(base)
    if name.startswith("multi:"):
        raise ValueError(f"from_xgboost: objective {name} (several classes) is not supported")
    return base


def _below_f32(c: float) -> float:
    """The largest float32 strictly below ``c`` (a float32 value): ``x < c ⟺ x <= it``."""
    return float(np.nextafter(np.float32(c), np.float32(-np.inf)))


def _xgb_tree(t: int, tree: dict):
    if any(int(s) != 0 for s in tree.get("split_type", [])) or tree.get("categories_nodes"):
        raise ValueError(f"from_xgboost: tree {t}: categorical splits are not supported")
    if int(tree.get("tree_param", {}).get("size_leaf_vector", "1") or 1) > 1:
        raise ValueError(f"from_xgboost: tree {t}: vector leaves are not supported")
    left, right = tree["left_children"], tree["right_children"]
    cond, feat, dleft = tree["split_conditions"], tree["split_indices"], tree["default_left"]
    gain = tree.get("loss_changes", [0.0] * len(left))
    nodes: List[list] = []
    leaves: List[float] = []

    def visit(i: int) -> int:  # preorder, iterative depth is small for boosted trees
        if int(left[i]) == -1:
            leaves.append(float(np.float32(cond[i])))
            return ~(len(leaves) - 1)
        k = len(nodes)
        nodes.append([int(feat[i]), _below_f32(cond[i]), bool(int(dleft[i])), 0, 0,
                      float(gain[i])])
        nodes[k][3] = visit(int(left[i]))
        nodes[k][4] = visit(int(right[i]))
        return k

    visit(0)
    return _tree_model([tuple(n) for n in nodes], leaves, float32=True)


def _xgb_trees(learner: dict) -> Tuple[list, dict]:
    gb = learner["gradient_booster"]
    if gb.get("name") != "gbtree":
        raise ValueError(f"from_xgboost: booster {gb.get('name')!r} is not supported "
                         f"(only gbtree)")
    model = gb["model"]
    if any(int(c) != 0 for c in model.get("tree_info", [])):
        raise ValueError("from_xgboost: multi-class / multi-target models are not supported")
    return model["trees"], model


def from_xgboost(model: Any) -> "Ensemble":
    r"""An XGBoost model as an :class:`~torchrankboost.boosting.ensemble.Ensemble` of trees.

    Args:
        model: an ``xgboost.Booster`` (or a fitted ``XGBRanker`` / ``XGBRegressor``), a model
            file (``*.json`` read directly; other formats through ``xgboost``), or the JSON
            model's dict (``json.loads(booster.save_raw("json"))``).

    Returns: an Ensemble (base score: XGBoost's, as a margin; one float32-threshold tree per
    XGBoost tree, weights 1.0) whose ``predict(X)`` equals ``booster.predict(DMatrix(X,
    missing=nan), output_margin=True)`` up to XGBoost's float32 sums. ``ValueError`` (one
    line) for what cannot be represented (see the module).
    """
    learner = _xgb_document(model)["learner"]
    trees, _ = _xgb_trees(learner)
    base = _xgb_base_margin(learner)
    F = int(learner["learner_model_param"]["num_feature"])
    return _ensemble([_xgb_tree(t, tree) for t, tree in enumerate(trees)], base, F, "xgboost")
