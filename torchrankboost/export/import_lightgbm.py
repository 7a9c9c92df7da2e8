r"""LightGBM's models read in our own code (LightGBM's loader is never called): the text
model (``save_model`` / ``model_to_string``) and the JSON of ``dump_model()``, as
:class:`~.import_trees.SourceTree`\ s for :func:`~.import_trees.build_tree`.

The text model is ``tree``, a header of ``key=value`` lines (``max_feature_idx``,
``num_class``, ``num_tree_per_iteration``, ``objective``, ``tree_sizes``, ...), one block
per tree from ``Tree=t`` (``num_leaves``, ``split_feature``, ``threshold``,
``decision_type``, ``left_child``, ``right_child``, ``leaf_value``, ``split_gain``, ...)
to ``end of trees``, then the parameters. A tree has ``K = num_leaves - 1`` splits and
``num_leaves`` leaves; a child ``c >= 0`` is split ``c``, ``c < 0`` leaf ``~c``. The block
sizes must equal ``tree_sizes`` (LightGBM's own loader seeks by them), every number is
written as LightGBM writes numbers (no ``"1_0"``, no hex), and keys appear once. What
LightGBM's loader requires is required here too (``num_class``, ``label_index``,
``max_feature_idx``, one feature name and info per feature, a ``parameters:`` section closed
by ``end of parameters``), so that no file is imported that LightGBM itself would refuse.

``decision_type`` is a bit field: 1 categorical (refused), 2 default left, bits 2-3 the
missing type (0 None, 1 Zero — refused —, 2 NaN). Missing type NaN sends NaN to the
default side; missing type None reads NaN as 0.

**Zero.** LightGBM's predictor reads every input with ``|x| <= 1e-35f`` (its
``kZeroThreshold``) as 0. A threshold ``t`` with ``-1e-35f <= t < 1e-35f`` therefore
splits at ``±1e-35f``, not at ``t``: :func:`lightgbm_rule` moves such a threshold to the
value that sends the same inputs left under our ``x <= θ`` (``θ = 1e-35f`` for
``0 <= t``, the float64 below ``-1e-35f`` for ``t < 0``); any other threshold is kept, so
a float64 input goes where LightGBM sends it.

Refused, by name: several classes (``num_class`` or ``num_tree_per_iteration`` above 1,
objectives ``multiclass`` / ``multiclassova``), random forests (``average_output``),
categorical splits, missing type Zero, linear trees, objectives this reader does not know.
LightGBM's DART models are stored with their trees already normalised (LightGBM predicts
them as a sum of the stored trees), so they import as any other model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .import_trees import SourceTree, as_int, as_number, check_num_features

__all__ = ["LightGBMModel", "OBJECTIVES", "lightgbm_rule", "read_lightgbm_text",
           "read_lightgbm_dump"]

#: LightGBM's kZeroThreshold (the float literal 1e-35f): inputs this small read as 0
ZERO = float(np.float32(1e-35))
_BELOW_ZERO = float(np.nextafter(-ZERO, -np.inf))
#: the single-output objectives whose raw score is the sum of the trees (``custom``: a
#: model trained with a Python objective, whose file names none)
OBJECTIVES = ("regression", "regression_l1", "huber", "fair", "poisson", "quantile", "mape",
              "gamma", "tweedie", "binary", "cross_entropy", "cross_entropy_lambda",
              "lambdarank", "rank_xendcg", "custom")
_MULTI = ("multiclass", "multiclassova")
_INT = re.compile(rb"-?[0-9]+")
_NUM = rb"(?:[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?i:nan|inf|infinity))"
_NUMS = re.compile(rb"(?:" + _NUM + rb"(?: " + _NUM + rb")*)?")
_ONE_NUM = re.compile(_NUM)


@dataclass
class LightGBMModel:
    """A LightGBM model read: ``num_features``, ``objective`` (its name, ``None`` when the
    file names none), ``trees`` (:class:`SourceTree`, thresholds as written)."""

    num_features: int
    objective: Optional[str]
    trees: List[SourceTree]


def lightgbm_rule(t: np.ndarray) -> np.ndarray:
    """Our thresholds ``θ`` (``x <= θ`` left) of LightGBM's ``t`` (module docstring:
    the thresholds within ``1e-35f`` of zero move to the split LightGBM makes)."""
    t = np.asarray(t, dtype=np.float64)
    out = t.copy()
    out[(t >= 0) & (t < ZERO)] = ZERO
    out[(t >= -ZERO) & (t < 0)] = _BELOW_ZERO
    return out


def _objective(text, who: str) -> Optional[str]:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"{who}: objective is {type(text).__name__}, not a string")
    name = text.split(" ")[0] if text.strip() else "custom"
    if name in _MULTI:
        raise ValueError(f"{who}: objective {name!r}: multi-class models are not supported")
    if name not in OBJECTIVES:
        raise ValueError(f"{who}: objective {name!r} is not supported (supported: "
                         f"{', '.join(OBJECTIVES)})")
    return name


def _header_counts(get, who: str) -> int:
    """The feature count after checking the one-output fields (``get(key)``: the value)."""
    for key in ("num_class", "num_tree_per_iteration"):
        v = get(key)
        if v is not None and v != 1:
            raise ValueError(f"{who}: {key} is {v}: multi-class models are not supported")
    top = get("max_feature_idx")
    if top is None:
        raise ValueError(f"{who}: max_feature_idx is missing")
    return top + 1


# ----------------------------------------------------------------------------- text
def _lines(data: bytes) -> List[Tuple[int, bytes]]:
    out, pos = [], 0
    for line in data.split(b"\n"):
        out.append((pos, line[:-1] if line.endswith(b"\r") else line))
        pos += len(line) + 1
    return out


def _pairs(lines, what: str, who: str) -> Dict[bytes, bytes]:
    out: Dict[bytes, bytes] = {}
    for _, line in lines:
        if not line:
            continue
        key, eq, value = line.partition(b"=")
        if not eq:
            key, value = line, b""
        if key in out:
            raise ValueError(f"{who}: {what}: {key.decode('utf-8', 'replace')!r} given twice")
        out[key] = value
    return out


def _text_int(pairs, key: bytes, where: str) -> Optional[int]:
    v = pairs.get(key)
    if v is None:
        return None
    if not _INT.fullmatch(v) or len(v) > 19:
        raise ValueError(f"{where}: {key.decode()} is {v[:40].decode('utf-8', 'replace')!r}, "
                         f"not an integer")
    return int(v)


def _text_numbers(pairs, key: bytes, n: int, where: str, name, integer: bool) -> np.ndarray:
    v = pairs.get(key)
    if v is None:
        raise ValueError(f"{where}: {key.decode()} is missing")
    tokens = v.split(b" ") if v else []
    if len(tokens) != n:
        raise ValueError(f"{where}: {key.decode()} has {len(tokens)} values, expected {n}")
    pattern = _INT if integer else _ONE_NUM
    if not (_NUMS.fullmatch(v) if not integer else all(pattern.fullmatch(t) for t in tokens)):
        i = next(i for i, t in enumerate(tokens) if not pattern.fullmatch(t))
        raise ValueError(f"{where}, {name(i)}: {key.decode()} "
                         f"{tokens[i][:40].decode('utf-8', 'replace')!r} is not "
                         f"{'an integer' if integer else 'a number'}")
    if integer:
        if any(len(t) > 19 for t in tokens):
            i = next(i for i, t in enumerate(tokens) if len(t) > 19)
            raise ValueError(f"{where}, {name(i)}: {key.decode()} {tokens[i][:40].decode()} "
                             f"is beyond int64")
        return np.array([int(t) for t in tokens], dtype=np.int64)
    return np.array([float(t) for t in tokens], dtype=np.float64)


def _split_names(K: int):
    return lambda i: f"node {i}" if i < K else f"leaf {i - K}"


def _text_tree(t: int, pairs: Dict[bytes, bytes], who: str) -> SourceTree:
    where = f"{who}: tree {t}"
    L = _text_int(pairs, b"num_leaves", where)
    if L is None or L < 1:
        raise ValueError(f"{where}: num_leaves is {L}, expected a positive integer")
    if _text_int(pairs, b"is_linear", where) not in (None, 0):
        raise ValueError(f"{where}: linear trees are not supported")
    if _text_int(pairs, b"num_cat", where) not in (None, 0):
        raise ValueError(f"{where}: categorical splits are not supported")
    K = L - 1
    name = _split_names(K)
    leaf = _text_numbers(pairs, b"leaf_value", L, where, lambda i: f"leaf {i}", False)
    if K:
        feat = _text_numbers(pairs, b"split_feature", K, where, name, True)
        thr = _text_numbers(pairs, b"threshold", K, where, name, False)
        dt = _text_numbers(pairs, b"decision_type", K, where, name, True)
        kids = [_text_numbers(pairs, k, K, where, name, True)
                for k in (b"left_child", b"right_child")]
        gain = (_text_numbers(pairs, b"split_gain", K, where, name, False)
                if b"split_gain" in pairs else np.zeros(K))
    else:
        feat = dt = np.zeros(0, dtype=np.int64)
        thr = gain = np.zeros(0)
        kids = [np.zeros(0, dtype=np.int64)] * 2
    return _source(t, K, L, feat, thr, dt, kids, gain, leaf, where, name)


def _decisions(dt: np.ndarray, thr: np.ndarray, where: str, name) -> np.ndarray:
    """The side of NaN at each split, after refusing what the bits ask that we cannot do."""
    bad = np.flatnonzero((dt < 0) | (dt > 15))
    if bad.size:
        raise ValueError(f"{where}, {name(int(bad[0]))}: decision_type {dt[bad[0]]} is not a "
                         f"LightGBM decision type")
    cat = np.flatnonzero(dt & 1)
    if cat.size:
        raise ValueError(f"{where}, {name(int(cat[0]))}: categorical splits are not supported")
    missing = (dt >> 2) & 3
    for code, why in ((1, "missing type Zero is not supported (only None and NaN)"),
                      (3, "decision_type names no missing type")):
        hit = np.flatnonzero(missing == code)
        if hit.size:
            raise ValueError(f"{where}, {name(int(hit[0]))}: {why}")
    with np.errstate(invalid="ignore"):
        return np.where(missing == 2, (dt & 2) != 0, 0.0 <= thr)


def _source(t, K, L, feat, thr, dt, kids, gain, leaf, where, name) -> SourceTree:
    n = K + L
    links = []
    for side, c in zip(("left", "right"), kids):
        out = np.flatnonzero((c < -L) | (c >= K))
        if out.size:
            raise ValueError(f"{where}, {name(int(out[0]))}: {side} child {c[out[0]]} outside "
                             f"[{-L}, {K})")
        links.append(np.concatenate([np.where(c >= 0, c, K + ~c), np.zeros(L, np.int64)]))
    pad = np.zeros(L)
    return SourceTree(
        index=t, is_leaf=np.arange(n) >= K,
        feature=np.concatenate([feat, np.zeros(L, np.int64)]),
        threshold=np.concatenate([thr, pad]),
        default_left=np.concatenate([_decisions(dt, thr, where, name), np.zeros(L, bool)]),
        left=links[0], right=links[1], gain=np.concatenate([gain, pad]),
        value=np.concatenate([np.zeros(K), leaf]), name=name)


def _tree_blocks(lines, who: str):
    """``(header lines, [lines of each tree], offset of 'end of trees')``; what follows
    (feature importances, parameters) holds nothing the trees need."""
    starts = [i for i, (_, line) in enumerate(lines) if line.startswith(b"Tree=")]
    end = next((i for i, (_, line) in enumerate(lines) if line == b"end of trees"), None)
    if end is None:
        raise ValueError(f"{who}: no 'end of trees' line (a truncated or damaged model)")
    starts = [i for i in starts if i < end]
    first = starts[0] if starts else end
    blocks = [lines[a:b] for a, b in zip(starts, starts[1:] + [end])]
    _check_trailer(lines[end + 1:], who)
    return lines[1:first], blocks, lines[end][0]


_PARAM_LINE = re.compile(rb"\[[A-Za-z0-9_]+: [^\n]*\]")


def _check_trailer(lines, who: str) -> None:
    """The parameters after the trees, as LightGBM's loader reads them: a ``parameters:``
    line is closed by ``end of parameters`` (LightGBM reads on to the end of the file
    otherwise, and its Python package crashes on what it read), each line between is
    ``[key: value]``, and ``[linear_tree: 1]`` (linear trees) is refused."""
    text = [line for _, line in lines]
    if b"parameters:" not in text:
        return
    start = text.index(b"parameters:")
    if b"end of parameters" not in text[start:]:
        raise ValueError(f"{who}: the parameters are not closed by 'end of parameters' (a "
                         f"truncated or damaged model)")
    for line in text[start + 1:text.index(b"end of parameters", start)]:
        if line and not _PARAM_LINE.fullmatch(line):
            raise ValueError(f"{who}: the parameter line "
                             f"{line[:40].decode('utf-8', 'replace')!r} is not '[key: value]'")
        if line.startswith(b"[linear_tree: ") and line[14:15] not in (b"0", b"f"):
            raise ValueError(f"{who}: linear trees (linear_tree) are not supported")


def _check_header(head: Dict[bytes, bytes], F: int, who: str) -> None:
    """The fields LightGBM's loader requires (it refuses a model without them): the label
    index, and ``F`` feature names and infos (and monotone constraints, when given)."""
    if b"label_index" not in head:
        raise ValueError(f"{who}: label_index is missing")
    _text_int(head, b"label_index", who)
    for key, required in ((b"feature_names", True), (b"feature_infos", True),
                          (b"monotone_constraints", False)):
        if key not in head:
            if required:
                raise ValueError(f"{who}: {key.decode()} is missing")
            continue
        n = len(head[key].split(b" ")) if head[key] else 0
        if n != F:
            raise ValueError(f"{who}: {key.decode()} has {n} entries for {F} features")
    bad = [k for k, v in head.items() if b"=" in v and k not in (b"feature_names",
                                                                 b"monotone_constraints")]
    if bad:
        raise ValueError(f"{who}: the header line {bad[0][:40].decode('utf-8', 'replace')!r} "
                         f"holds more than one '='")


def read_lightgbm_text(data: bytes, who: str, *, max_features: Optional[int]) -> LightGBMModel:
    """The model of LightGBM's text ``data`` (module docstring)."""
    lines = _lines(data)
    if lines[0][1] != b"tree":
        raise ValueError(f"{who}: not a LightGBM text model (the first line is not 'tree')")
    head_lines, blocks, end_at = _tree_blocks(lines, who)
    head = _pairs(head_lines, "header", who)
    if b"average_output" in head:
        raise ValueError(f"{who}: random forests (average_output) are not supported")
    F = check_num_features(_header_counts(lambda k: _text_int(head, k.encode(), who), who),
                           who, max_features)
    if b"num_class" not in head:
        raise ValueError(f"{who}: num_class is missing")
    _check_header(head, F, who)
    obj = head.get(b"objective")
    objective = _objective(None if obj is None else obj.decode("utf-8", "replace"), who)
    sizes = head.get(b"tree_sizes")
    if sizes is not None:  # LightGBM's loader seeks by them: they must be the blocks' sizes
        toks = sizes.split(b" ") if sizes else []
        at = [b[0][0] for b in blocks] + [end_at]
        if len(toks) != len(blocks) or any(
                not _INT.fullmatch(w) or len(w) > 19 or b - a != int(w)
                for a, b, w in zip(at, at[1:], toks)):
            raise ValueError(f"{who}: tree_sizes do not match the tree blocks (a damaged "
                             f"model)")
    trees = []
    for t, block in enumerate(blocks):
        if block[0][1] != b"Tree=%d" % t:
            raise ValueError(f"{who}: tree {t}: the block starts with "
                             f"{block[0][1][:40].decode('utf-8', 'replace')!r}, not 'Tree={t}'")
        trees.append(_text_tree(t, _pairs(block[1:], f"tree {t}", who), who))
    return LightGBMModel(F, objective, trees)


# ----------------------------------------------------------------------------- JSON dump
def _field(d: dict, key: str, where: str):
    if key not in d:
        raise ValueError(f"{where}: {key} is missing")
    return d[key]


def _dump_node(node, name: str):
    """``("split" | "leaf", node)`` after the checks of its kind's fields."""
    if not isinstance(node, dict):
        raise ValueError(f"{name}: a node is {type(node).__name__}, not an object")
    if "split_feature" in node:
        if "leaf_value" in node:
            raise ValueError(f"{name}: both a split and a leaf")
        return "split"
    if "leaf_value" not in node:
        raise ValueError(f"{name}: neither a split (split_feature) nor a leaf (leaf_value)")
    if any(k in node for k in ("leaf_coeff", "leaf_const", "leaf_features")):
        raise ValueError(f"{name}: linear trees are not supported")
    return "leaf"


def _dump_split(node: dict, name: str):
    """``(feature, threshold, default_left, gain)`` of a split node."""
    dt = _field(node, "decision_type", name)
    if dt != "<=":
        raise ValueError(f"{name}: categorical splits ({dt!r}) are not supported"
                         if dt == "==" else f"{name}: decision_type {dt!r} is not '<='")
    miss = node.get("missing_type", "None")
    if miss not in ("None", "NaN"):
        raise ValueError(f"{name}: missing type {miss!r} is not supported (only None and NaN)")
    feat = as_int(_field(node, "split_feature", name), f"{name}: split feature")
    thr = as_number(_field(node, "threshold", name), f"{name}: threshold")
    dl = node.get("default_left", False)
    if not isinstance(dl, bool):
        raise ValueError(f"{name}: default_left is {type(dl).__name__}, not a boolean")
    gain = as_number(node.get("split_gain", 0.0), f"{name}: split gain")
    return feat, thr, (dl if miss == "NaN" else 0.0 <= thr), gain


def _dump_tree(t: int, info, who: str) -> SourceTree:
    where = f"{who}: tree {t}"
    if not isinstance(info, dict):
        raise ValueError(f"{where}: not an object")
    if info.get("num_cat", 0) != 0:
        raise ValueError(f"{where}: categorical splits are not supported")
    nodes: list = []
    ids: Dict[int, int] = {}

    def name(i: int) -> str:
        d = nodes[i] if i < len(nodes) else None
        for key, word in (("split_index", "node"), ("leaf_index", "leaf")):
            if isinstance(d, dict) and type(d.get(key)) is int:
                return f"{word} {d[key]}"
        return f"node #{i} (preorder)"

    def add(obj) -> int:
        if isinstance(obj, dict):
            if id(obj) in ids:
                raise ValueError(f"{where}, {name(ids[id(obj)])}: reached twice: a cycle or a "
                                 f"shared child")
            ids[id(obj)] = len(nodes)
        nodes.append(obj)
        return len(nodes) - 1

    rows, stack = {}, [add(_field(info, "tree_structure", where))]
    while stack:  # depth-first, no recursion; each node once
        i = stack.pop()
        kind = _dump_node(nodes[i], f"{where}, {name(i)}")
        if kind == "leaf":
            rows[i] = (True, 0, 0.0, False, 0, 0, 0.0,
                       as_number(nodes[i]["leaf_value"], f"{where}, {name(i)}: leaf value"))
            continue
        feat, thr, dl, gain = _dump_split(nodes[i], f"{where}, {name(i)}")
        kids = [add(_field(nodes[i], k, f"{where}, {name(i)}"))
                for k in ("left_child", "right_child")]
        rows[i] = (False, feat, thr, dl, kids[0], kids[1], gain, 0.0)
        stack.extend(reversed(kids))
    L = sum(1 for r in rows.values() if r[0])
    if "num_leaves" in info and info["num_leaves"] != L:
        raise ValueError(f"{where}: num_leaves is {info['num_leaves']!r} but the tree has "
                         f"{L} leaves")
    cols = list(zip(*(rows[i] for i in range(len(nodes)))))
    return SourceTree(index=t, is_leaf=np.array(cols[0], bool),
                      feature=np.array(cols[1], np.int64), threshold=np.array(cols[2]),
                      default_left=np.array(cols[3], bool), left=np.array(cols[4], np.int64),
                      right=np.array(cols[5], np.int64), gain=np.array(cols[6]),
                      value=np.array(cols[7]), name=name)


def read_lightgbm_dump(doc, who: str, *, max_features: Optional[int]) -> LightGBMModel:
    """The model of ``dump_model()``'s document ``doc`` (module docstring)."""
    if not isinstance(doc, dict) or "tree_info" not in doc:
        raise ValueError(f"{who}: not a LightGBM model dump (no tree_info)")
    if doc.get("average_output"):
        raise ValueError(f"{who}: random forests (average_output) are not supported")

    def get(key):
        return None if key not in doc else as_int(doc[key], f"{who}: {key}")

    F = check_num_features(_header_counts(get, who), who, max_features)
    objective = _objective(doc.get("objective"), who)
    info = doc["tree_info"]
    if not isinstance(info, list):
        raise ValueError(f"{who}: tree_info is {type(info).__name__}, not an array")
    return LightGBMModel(F, objective, [_dump_tree(t, d, who) for t, d in enumerate(info)])

