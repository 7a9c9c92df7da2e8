r"""XGBoost's models read in our own code (XGBoost's loader is never called): the JSON
model and its binary form UBJSON (:mod:`.ubjson`), as :class:`~.import_trees.SourceTree`\ s
for :func:`~.import_trees.build_tree`.

The document is ``{"learner": {"learner_model_param": {"base_score", "num_feature",
"num_class", "num_target"}, "objective": {"name"}, "attributes": {"best_iteration"},
"gradient_booster": {"name": "gbtree", "model": {"trees", "tree_info",
"iteration_indptr"}}}}``. A tree holds parallel arrays over its nodes: ``left_children`` /
``right_children`` (``-1`` at a leaf), ``split_indices`` (features), ``split_conditions``
(thresholds ``c``, at leaves the leaf values; float32), ``default_left``, ``split_type``
(1: categorical) and ``loss_changes`` (gains).

XGBoost sends ``x`` left when ``x < c`` on float32 inputs; for a float32 ``x`` that is
``x <= θ`` with ``θ`` the float32 below ``c`` (:func:`xgboost_rule`), so the trees get
float32 thresholds. Numbers written in decimal are rounded once to float32, as XGBoost
reads them. The base score is stored as a prediction; its margin is the objective's
inverse link (:data:`LINKS`): the identity, the logit (``reg:logistic``,
``binary:logistic``) or the log (``count:poisson``, ``reg:gamma``, ``reg:tweedie``,
``survival:cox``, ``survival:aft``), computed in float32 as XGBoost computes it. XGBoost
sums the float32 leaves in float32, the import in float64: the same leaves, margins equal
to XGBoost's float32 rounding (a float32 sum of the imported leaves in round order
repeats XGBoost's margin bit for bit).

What XGBoost's loader and predictor require is required here too (``parents``,
``sum_hessian``, ``base_weights``, the ``categories*`` arrays; a split's right child is its
left child + 1), so that no file is imported that XGBoost would read otherwise.

Refused, by name: several classes or targets (``multi:*`` objectives, ``num_class`` or
``num_target`` above 1, vector leaves, trees of another output group), DART
(``gradient_booster`` ``dart``: its trees are weighted at prediction), linear boosters
(``gblinear``), categorical splits, objectives this reader does not know.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from .import_trees import (JsonFloat, SourceTree, bool_values, check_num_features,
                           float32_values, float_values, int_values)

__all__ = ["XGBoostModel", "LINKS", "xgboost_rule", "read_xgboost"]

#: objective -> the inverse link that turns the stored base score into a margin
LINKS = {**{name: "identity" for name in (
    "reg:squarederror", "reg:linear", "reg:squaredlogerror", "reg:pseudohubererror",
    "reg:absoluteerror", "reg:quantileerror", "binary:logitraw", "binary:hinge",
    "rank:pairwise", "rank:ndcg", "rank:map")},
    "reg:logistic": "logit", "binary:logistic": "logit",
    **{name: "log" for name in ("count:poisson", "reg:gamma", "reg:tweedie", "survival:cox",
                                "survival:aft")}}
_INT_TEXT = re.compile(r"-?[0-9]{1,18}")
_FLOAT_TEXT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


@dataclass
class XGBoostModel:
    """An XGBoost model read: ``num_features``, ``objective``, ``base_margin`` (the base
    score through the objective's link), ``trees`` (:class:`SourceTree`, thresholds ``c``
    as written), ``iterations`` (the trees of each boosting round: offsets ``(R + 1,)``)
    and ``best_iteration`` (0-based, ``None`` when not early-stopped)."""

    num_features: int
    objective: str
    base_margin: float
    trees: List[SourceTree]
    iterations: List[int]
    best_iteration: Optional[int]


def xgboost_rule(c: np.ndarray) -> np.ndarray:
    """``θ``: the largest float32 below each float32 ``c`` (``x < c ⟺ x <= θ`` for float32
    ``x``; ``-inf`` for ``c = -3.4e38``)."""
    c32 = np.asarray(c, dtype=np.float32)
    return np.nextafter(c32, np.float32(-np.inf)).astype(np.float64)


def _obj(d, key: str, where: str) -> dict:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, dict):
        raise ValueError(f"{where}: {key} is {'missing' if v is None else type(v).__name__}"
                         f"{'' if v is None else ', not an object'}")
    return v


def _param_int(d: dict, key: str, where: str, default: Optional[int] = None) -> int:
    """An integer parameter (XGBoost writes them as strings: ``"num_feature": "5"``)."""
    v = d.get(key)
    if v is None and default is not None:
        return default
    if isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
        return int(v)
    if type(v) is int:
        return v
    raise ValueError(f"{where}: {key} is {v!r}, not an integer"[:200])


def _base_margin(param: dict, objective: str, where: str) -> float:
    text = param.get("base_score", "0.5")
    if not isinstance(text, str):
        text = str(text) if type(text) in (int, float, JsonFloat) else None
    parts = None if text is None else [p.strip() for p in text.strip().strip("[]").split(",")]
    if not parts or len(parts) != 1 or not _FLOAT_TEXT.fullmatch(parts[0]):
        raise ValueError(f"{where}: base_score {param.get('base_score')!r} is not one number"
                         [:200])
    b = float(float32_values([JsonFloat(parts[0])], "base_score")[0])
    link = LINKS[objective]
    ok = math.isfinite(b) and (link == "identity" or (b > 0 and (link == "log" or b < 1)))
    if not ok:
        raise ValueError(f"{where}: base_score {b!r} is outside the domain of {objective}'s "
                         f"link ({link})")
    f32 = np.float32
    if link == "logit":  # XGBoost's float32 -logf(1.0f / b - 1.0f)
        return float(f32(-math.log(float(f32(f32(1.0) / f32(b)) - f32(1.0)))))
    return float(f32(math.log(b))) if link == "log" else b


def _objective(learner: dict, param: dict, where: str) -> str:
    name = _obj(learner, "objective", where).get("name")
    if not isinstance(name, str):
        raise ValueError(f"{where}: objective.name is {name!r}, not a string"[:200])
    if name.startswith("multi:"):
        raise ValueError(f"{where}: objective {name!r}: multi-class models are not supported")
    if name not in LINKS:
        raise ValueError(f"{where}: objective {name!r} is not supported (supported: "
                         f"{', '.join(LINKS)})"[:400])
    for key, what in (("num_class", "multi-class"), ("num_target", "multi-target")):
        if _param_int(param, key, where, 0) > 1:
            raise ValueError(f"{where}: {key} is {param[key]}: {what} models are not supported")
    return name


def _tree(t: int, tree, who: str) -> SourceTree:
    where = f"{who}: tree {t}"
    if not isinstance(tree, dict):
        raise ValueError(f"{where}: not an object")
    tp = tree.get("tree_param", {})
    if not isinstance(tp, dict) or _param_int(tp, "size_leaf_vector", where, 1) > 1:
        raise ValueError(f"{where}: vector leaves (multi-target) are not supported")

    def name(i: int) -> str:
        return f"node {i}"

    def node(i: int) -> str:
        return f"{where}, node {i}"

    def arr(key: str, n=None):
        if key not in tree:
            raise ValueError(f"{where}: {key} is missing")
        return tree[key], f"{where}: {key}", n

    left = int_values(*arr("left_children"), node=node)
    n = left.shape[0]
    if "num_nodes" in tp and _param_int(tp, "num_nodes", where) != n:
        raise ValueError(f"{where}: num_nodes is {tp['num_nodes']!r} but the arrays hold {n}")
    right = int_values(*arr("right_children", n), node=node)
    feat = int_values(*arr("split_indices", n), node=node)
    cond = float32_values(*arr("split_conditions", n), node=node)
    dleft = bool_values(*arr("default_left", n), node=node)
    gain = float_values(*arr("loss_changes", n), node=node)
    _peer_fields(tree, left, right, n, where, node)
    leaf = left == -1
    odd = np.flatnonzero(leaf & (right != -1))
    if odd.size:
        raise ValueError(f"{node(int(odd[0]))}: left child -1 (a leaf) but right child "
                         f"{right[odd[0]]}")
    if "split_type" in tree:
        cat = np.flatnonzero(int_values(tree["split_type"], f"{where}: split_type", n, node)
                             * ~leaf)
        if cat.size:
            raise ValueError(f"{node(int(cat[0]))}: categorical splits are not supported")
    cats = tree.get("categories_nodes")
    if cats is not None and len(cats):
        raise ValueError(f"{where}: categorical splits are not supported")
    return SourceTree(index=t, is_leaf=leaf, feature=feat, threshold=cond, default_left=dleft,
                      left=left, right=right, gain=gain, value=cond, name=name)


def _peer_fields(tree: dict, left, right, n: int, where: str, node) -> None:
    """What XGBoost requires of a tree (its loader refuses, or crashes on, a tree without
    it; its predictor steps to ``left + (x >= c)``), so that nothing is imported that
    XGBoost would not load or would predict otherwise: ``sum_hessian`` and
    ``base_weights`` (numbers) and ``parents`` over the ``n`` nodes, each split's right
    child its left child + 1, parents consistent with the links (the root's 2147483647),
    and with ``split_type`` (XGBoost >= 1.6) the four ``categories*`` arrays."""
    for key in ("sum_hessian", "base_weights"):
        if key not in tree:
            raise ValueError(f"{where}: {key} is missing")
        float_values(tree[key], f"{where}: {key}", n, node)
    if "parents" not in tree:
        raise ValueError(f"{where}: parents is missing")
    par = int_values(tree["parents"], f"{where}: parents", n, node)
    inner = np.flatnonzero(left != -1)
    kids = np.concatenate([left[inner], right[inner]])
    if n and not bool(((kids < 0) | (kids >= n)).any()):  # else build_tree names the link
        apart = inner[right[inner] != left[inner] + 1]
        if apart.size:  # XGBoost's predictor goes to left + (x >= c): right is left + 1
            raise ValueError(f"{node(int(apart[0]))}: right child {right[apart[0]]} is not "
                             f"left child {left[apart[0]]} + 1 (XGBoost's layout, which its "
                             f"predictor assumes)")
        wrong = np.flatnonzero(par[kids] != np.concatenate([inner, inner]))
        if wrong.size or par[0] not in (2147483647, -1):
            who = int(np.concatenate([inner, inner])[wrong[0]]) if wrong.size else 0
            raise ValueError(f"{node(who)}: parents do not match the child links")
    if "split_type" in tree:
        for key in ("categories", "categories_nodes", "categories_segments",
                    "categories_sizes"):
            if not isinstance(tree.get(key), (list, np.ndarray)):
                raise ValueError(f"{where}: {key} is missing or not an array")


def _iterations(model: dict, trees: list, where: str) -> List[int]:
    """The offsets of each round's trees (``iteration_indptr``, else one tree a round times
    ``num_parallel_tree``)."""
    ptr = model.get("iteration_indptr")
    if ptr is None:
        k = _param_int(_obj(model, "gbtree_model_param", where), "num_parallel_tree", where, 1)
        if k < 1 or len(trees) % k:
            raise ValueError(f"{where}: {len(trees)} trees are not whole rounds of {k}")
        return list(range(0, len(trees) + 1, k))
    off = int_values(ptr, f"{where}: iteration_indptr")
    if off.size == 0 or off[0] != 0 or off[-1] != len(trees) or bool((np.diff(off) < 0).any()):
        raise ValueError(f"{where}: iteration_indptr does not split the {len(trees)} trees "
                         f"into rounds")
    return off.tolist()


def _best(learner: dict, rounds: int, where: str) -> Optional[int]:
    attrs = learner.get("attributes", {})
    if not isinstance(attrs, dict) or "best_iteration" not in attrs:
        return None
    best = _param_int(attrs, "best_iteration", where)
    if not 0 <= best < max(rounds, 1):
        raise ValueError(f"{where}: best_iteration {best} outside the model's {rounds} rounds")
    return best


def read_xgboost(doc, who: str, *, max_features: Optional[int]) -> XGBoostModel:
    """The model of XGBoost's JSON / UBJSON document ``doc`` (module docstring)."""
    learner = _obj(doc, "learner", who)
    where = f"{who}: learner"
    param = _obj(learner, "learner_model_param", where)
    objective = _objective(learner, param, where)
    gb = _obj(learner, "gradient_booster", where)
    kind = gb.get("name")
    if kind != "gbtree":
        raise ValueError(f"{where}: booster {kind!r} is not supported (only gbtree"
                         + ("; DART weighs its trees at prediction)" if kind == "dart" else
                            "; a linear booster has no trees)" if kind == "gblinear" else ")"))
    model = _obj(gb, "model", where)
    trees = model.get("trees")
    if not isinstance(trees, list):
        raise ValueError(f"{where}: trees is {type(trees).__name__}, not an array")
    if "tree_info" in model:
        groups = int_values(model["tree_info"], f"{where}: tree_info", len(trees))
        if bool((groups != 0).any()):
            raise ValueError(f"{where}: trees of several output groups: multi-class / "
                             f"multi-target models are not supported")
    F = check_num_features(_param_int(param, "num_feature", where), who, max_features)
    base = _base_margin(param, objective, where)
    iterations = _iterations(model, trees, where)
    return XGBoostModel(F, objective, base, [_tree(t, d, who) for t, d in enumerate(trees)],
                        iterations, _best(learner, len(iterations) - 1, where))
