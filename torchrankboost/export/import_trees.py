r"""The shared half of the importers (:mod:`.importing`): numbers read strictly, a source
model's trees validated, then built as :class:`~torchrankboost.boosting.learners.TreeModel`\ s.

The format readers (:mod:`.import_lightgbm`, :mod:`.import_xgboost`) turn each tree of a
file into a :class:`SourceTree`: ``n`` nodes in the source's own numbering, each a leaf
(``value``) or a split (``feature``, ``threshold``, ``default_left``, ``left``, ``right``,
``gain``). :func:`build_tree` validates it before anything is built, without recursion:

* the links form a tree: walked level by level from the root, every child index lies in
  ``[0, n)``, no node is reached twice (a cycle or a shared child), every node is reached,
  and the depth is at most :data:`MAX_DEPTH`;
* every split feature is an integer in ``[0, F)``;
* thresholds, gains and leaf values are finite (LightGBM's thresholds may be ``±inf``,
  which it writes itself: never NaN).

Each failure is one ``ValueError`` ``"<who>: tree t, <node>: <problem>"`` (the node named
as the source numbers it). The split rule of the source becomes ours (``x <= θ`` goes left)
through the reader's ``rule``, applied once the thresholds are known to be finite.

Numbers: :func:`load_json` keeps every JSON number with a fraction or an exponent as its
text (:class:`JsonFloat`), so that a float32 field is rounded once from the decimal, as the
source library reads it (:func:`float32_values`), not twice through float64. Booleans are
never numbers and floats are never integers (``"3"``, ``1.5`` and ``True`` are refused as
feature indices).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from .._errors import first_line

__all__ = ["MAX_DEPTH", "JsonFloat", "SourceTree", "load_json", "as_number", "as_int",
           "float_values", "float32_values", "int_values", "bool_values", "build_tree",
           "imported_ensemble", "check_num_features", "DEFAULT_MAX_FEATURES"]

#: the deepest tree an import accepts (levels of splits); deeper ones are refused
MAX_DEPTH = 4096
#: the widest model an import accepts unless ``max_features`` raises it (as ``load_model``)
DEFAULT_MAX_FEATURES = 100_000


class JsonFloat(str):
    """A JSON number written with a fraction or an exponent, kept as its text."""


def _constant(name: str) -> float:
    return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[name])


def _unique(pairs) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {key[:40]!r} appears twice in an object")
    return out


def load_json(data, who: str):
    """The JSON document ``data`` (``bytes`` or ``str``) with numbers kept as
    :class:`JsonFloat` and every key once per object; one ``ValueError`` for anything else
    (nesting too deep for the reader included)."""
    try:
        return json.loads(data, parse_float=JsonFloat, parse_constant=_constant,
                          object_pairs_hook=_unique)
    except RecursionError:
        raise ValueError(f"{who}: the JSON document is nested too deeply") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{who}: not a valid JSON document ({first_line(exc)})"[:300]) from None


def _kind(v) -> str:
    return "a JSON float" if isinstance(v, JsonFloat) else f"a {type(v).__name__}"


def as_number(v, what: str) -> float:
    """``v`` (an int, a float, a :class:`JsonFloat`; never a bool or a string) as a
    float64 (``inf`` for a number beyond float64)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(
            v, (int, float, JsonFloat, np.integer, np.floating)):
        raise ValueError(f"{what} is {_kind(v)} {_short(v)}, not a number")
    try:
        return float(v)
    except OverflowError:  # an integer beyond float64
        return math.copysign(math.inf, v)


def as_int(v, what: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    """``v`` as an integer (a JSON integer, never a bool, a float or a string) in
    ``[lo, hi]``."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{what} is {_kind(v)} {_short(v)}, not an integer")
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{what} is {v}, outside [{lo}, {hi}]")
    return v


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _sequence(values, what: str, n: Optional[int]) -> Sequence:
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{what} is not a flat array")
    elif not isinstance(values, list):
        raise ValueError(f"{what} is {_kind(values)}, not an array")
    if n is not None and len(values) != n:
        raise ValueError(f"{what} has {len(values)} entries, expected {n}")
    return values


def _first_bad(values: Sequence, ok: Callable[[object], bool]) -> Optional[int]:
    for i, v in enumerate(values):
        if not ok(v):
            return i
    return None


def int_values(values, what: str, n: Optional[int] = None,
               node: Callable[[int], str] = lambda i: f"entry {i}") -> np.ndarray:
    """An array of integers (a JSON list of integers or an integer typed array) as int64;
    ``node(i)`` names an entry in the errors."""
    values = _sequence(values, what, n)
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iu":
            raise ValueError(f"{what} holds {values.dtype} values, not integers")
        if values.dtype.kind == "u" and values.dtype.itemsize == 8 and values.size and \
                int(values.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{what}: a value beyond int64")
        return values.astype(np.int64)
    bad = _first_bad(values, lambda v: type(v) is int and -2 ** 63 <= v < 2 ** 63)
    if bad is not None:
        v = values[bad]
        why = (f"{v}, beyond int64" if type(v) is int else f"{_kind(v)} {_short(v)}, not an "
               f"integer")
        raise ValueError(f"{node(bad)}: {what.split(': ')[-1]} is {why}")
    return np.array(values, dtype=np.int64).reshape(-1)


def bool_values(values, what: str, n: Optional[int] = None,
                node: Callable[[int], str] = lambda i: f"entry {i}") -> np.ndarray:
    """Booleans given as JSON booleans or as the integers 0 / 1."""
    values = _sequence(values, what, n)
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iub":
            raise ValueError(f"{what} holds {values.dtype} values, not 0 / 1")
        bad = np.flatnonzero((values != 0) & (values != 1))
        if bad.size:
            raise ValueError(f"{node(int(bad[0]))}: {what.split(': ')[-1]} is "
                             f"{values[bad[0]]}, not 0 or 1")
        return values.astype(bool)
    bad = _first_bad(values, lambda v: type(v) is bool or (type(v) is int and v in (0, 1)))
    if bad is not None:
        raise ValueError(f"{node(bad)}: {what.split(': ')[-1]} is {_kind(values[bad])} "
                         f"{_short(values[bad])}, not a boolean or 0 / 1")
    return np.array([bool(v) for v in values], dtype=bool).reshape(-1)


def float_values(values, what: str, n: Optional[int] = None,
                 node: Callable[[int], str] = lambda i: f"entry {i}") -> np.ndarray:
    """Numbers as float64 (finiteness is checked where the values are used)."""
    values = _sequence(values, what, n)
    if isinstance(values, np.ndarray):
        if values.dtype.kind not in "iuf":
            raise ValueError(f"{what} holds {values.dtype} values, not numbers")
        return values.astype(np.float64)
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        out[i] = as_number(v, f"{node(i)}: {what.split(': ')[-1]}")
    return out


def float32_values(values, what: str, n: Optional[int] = None,
                   node: Callable[[int], str] = lambda i: f"entry {i}") -> np.ndarray:
    """Numbers rounded once to float32 (returned as float64 holding float32 values): a
    decimal text is rounded to the nearest float32 directly, as XGBoost reads it (through
    float64 only where that gives the same float32: not at an exact float32 midpoint)."""
    values = _sequence(values, what, n)
    if isinstance(values, np.ndarray) and values.dtype == np.float32:
        return values.astype(np.float64)
    d = float_values(values, what, n, node)
    with np.errstate(over="ignore", invalid="ignore"):
        f = d.astype(np.float32)
        g = np.nextafter(f, np.where(d > f, np.float32(np.inf), np.float32(-np.inf)))
        tie = np.isfinite(d) & (d != f) & (d == (f.astype(np.float64) + g) / 2.0)
    if isinstance(values, list):  # an exact midpoint of float64: the decimal decides
        for i in np.flatnonzero(tie):
            if isinstance(values[i], JsonFloat):
                exact, mid = Decimal(str(values[i])), Decimal(float(d[i]))
                if exact != mid:
                    f[i] = max(f[i], g[i]) if exact > mid else min(f[i], g[i])
    return f.astype(np.float64)


# ----------------------------------------------------------------------------- trees
@dataclass
class SourceTree:
    """One tree of a source model in its own numbering (``n`` nodes, root ``root``).

    ``is_leaf`` (n,) bool; at splits: ``feature`` (n,) int64, ``threshold`` (n,) float64
    (the source's value), ``default_left`` (n,) bool (the side of NaN), ``left`` /
    ``right`` (n,) int64 node indices, ``gain`` (n,) float64; at leaves ``value`` (n,)
    float64. Entries at the other kind of node are ignored. ``index``: the tree's number
    in the source; ``name(i)``: how the source names node ``i``."""

    index: int
    is_leaf: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    default_left: np.ndarray
    left: np.ndarray
    right: np.ndarray
    gain: np.ndarray
    value: np.ndarray
    name: Callable[[int], str]
    root: int = 0


def _walk(src: SourceTree, where: str):
    """``(splits, leaves, depth)``: the split and leaf indices in level order from the
    root, after checking that the links form a tree of depth at most :data:`MAX_DEPTH`."""
    n = src.is_leaf.shape[0]
    seen = np.zeros(n, dtype=bool)
    seen[src.root] = True
    frontier = np.array([src.root], dtype=np.int64)
    splits: List[np.ndarray] = []
    leaves: List[np.ndarray] = []
    depth = 0
    while frontier.size:
        inner = frontier[~src.is_leaf[frontier]]
        splits.append(inner)
        leaves.append(frontier[src.is_leaf[frontier]])
        if not inner.size:
            break
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"{where}, {src.name(int(inner[0]))}: the tree is deeper than "
                             f"{MAX_DEPTH} levels")
        kids = np.stack([src.left[inner], src.right[inner]], 1).reshape(-1)
        parent = np.repeat(inner, 2)
        out = np.flatnonzero((kids < 0) | (kids >= n))
        if out.size:
            j = int(out[0])
            raise ValueError(f"{where}, {src.name(int(parent[j]))}: child index {kids[j]} "
                             f"outside [0, {n})")
        order = np.argsort(kids, kind="stable")
        dup = np.flatnonzero(kids[order][1:] == kids[order][:-1])
        again = np.flatnonzero(seen[kids])
        if again.size or dup.size:
            j = int(again[0]) if again.size else int(order[dup[0] + 1])
            raise ValueError(f"{where}, {src.name(int(kids[j]))}: reached twice (from "
                             f"{src.name(int(parent[j]))}): a cycle or a shared child")
        seen[kids] = True
        frontier = kids
    missing = np.flatnonzero(~seen)
    if missing.size:
        raise ValueError(f"{where}, {src.name(int(missing[0]))}: not reached from the root")
    return np.concatenate(splits), np.concatenate(leaves), depth


def build_tree(src: SourceTree, *, num_features: int, who: str,
               rule: Callable[[np.ndarray], np.ndarray], float32: bool,
               infinite_thresholds: bool = False):
    """The validated :class:`TreeModel` of ``src`` (module docstring): splits numbered in
    level order (root 0), leaves in level order. ``rule(thresholds)`` gives our ``θ``
    (``x <= θ`` goes left) from the source's finite thresholds; ``float32``: the tree
    compares float32 inputs (float32 thresholds), else float64. ``infinite_thresholds``:
    ``±inf`` thresholds are kept (LightGBM writes ``+inf``: every value but NaN goes left;
    ``x <= θ`` does the same), else refused like NaN."""
    from ..boosting.learners import TreeModel

    where = f"{who}: tree {src.index}"
    n = src.is_leaf.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the tree has no nodes")
    splits, leaves, depth = _walk(src, where)
    checks = ((src.feature[splits], lambda v: (v >= 0) & (v < num_features),
               lambda v: f"split feature {v} outside [0, {num_features})", splits),
              (src.threshold[splits], (lambda v: ~np.isnan(v)) if infinite_thresholds
               else np.isfinite, lambda v: f"threshold {v!r}", splits),
              (src.gain[splits], np.isfinite, lambda v: f"split gain {v!r}", splits),
              (src.value[leaves], np.isfinite, lambda v: f"leaf value {v!r}", leaves))
    for vals, ok, say, ids in checks:
        bad = np.flatnonzero(~ok(vals))
        if bad.size:
            v = vals[bad[0]]
            text = say(int(v) if vals.dtype.kind in "iu" else float(v))
            raise ValueError(f"{where}, {src.name(int(ids[bad[0]]))}: {text}"
                             + ("" if vals.dtype.kind in "iu" else " is not finite"))
    number = np.full(n, 0, dtype=np.int64)
    number[splits] = np.arange(splits.size)
    number[leaves] = ~np.arange(leaves.size)
    i64 = dict(dtype=torch.int64)
    return TreeModel(
        split_feature=torch.from_numpy(src.feature[splits].copy()),
        threshold_bin=torch.zeros(splits.size, **i64),
        threshold=torch.from_numpy(rule(src.threshold[splits]).astype(
            np.float32 if float32 else np.float64)),
        default_left=torch.from_numpy(src.default_left[splits].copy()),
        left_child=torch.from_numpy(number[src.left[splits]]),
        right_child=torch.from_numpy(number[src.right[splits]]),
        split_gain=torch.from_numpy(src.gain[splits].astype(np.float64)),
        leaf_value=torch.from_numpy(src.value[leaves].astype(np.float64)),
        depth=depth)


def imported_ensemble(trees: list, *, base: float, num_features: int, who: str, info: dict):
    """The :class:`~torchrankboost.boosting.ensemble.Ensemble` ``base + Σ_t tree_t``
    (weights 1.0), refused when its scores could overflow (the bound ``load_model``
    checks)."""
    from .._modelfile import SCORE_BOUND
    from ..boosting.ensemble import Ensemble

    if not math.isfinite(base):
        raise ValueError(f"{who}: the base score {base!r} is not finite")
    bound = abs(base) + sum(float(t.leaf_value.abs().max()) for t in trees)
    if not bound <= SCORE_BOUND:
        raise ValueError(f"{who}: the model's scores can reach {bound:.3g}: its leaf values "
                         f"overflow float64")
    return Ensemble(trees, [1.0] * len(trees), base_score=base, num_features=num_features,
                    info=info)


def check_num_features(F: int, who: str, max_features: Optional[int]) -> int:
    """``F`` when it is in ``[1, max_features]`` (default 100,000)."""
    top = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    if not 1 <= F <= top:
        raise ValueError(f"{who}: the model has {F} features, outside [1, {top}]"
                         + (" (raise max_features= for a wider model)" if F > top else ""))
    return F

