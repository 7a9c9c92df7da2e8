"""The one model-file format of the library: safetensors tensors plus a JSON description in
the file's metadata (no pickle), with a SHA-256, written atomically and verified on the way in.

* :func:`write_model_file` — ``save`` of every model: the tensors, the canonical JSON
  (:func:`canonical_json`) under one metadata key and :func:`model_digest` under
  ``"sha256"``, written through :func:`torchrankboost._io.atomic_path` (temporary file in
  the target's folder, ``fsync``, ``os.replace``), so a crash or a full disk never leaves
  half a model. A suffix of another format (``.json``, ``.txt``, ...) is refused.
* :func:`read_model_file` — ``load`` of every model: refuses what is not a regular readable
  file (a folder, a named pipe that would block, a file without permission), reads it once,
  verifies the checksum (:func:`verify_checksum`; format version 1 files have none and load
  with a warning) and reports any reader error as one ``ValueError`` naming the file.
* :func:`check_ensemble_state` / :func:`check_linear_state` — the raw description and
  tensors before anything is coerced: JSON types, tensor names and dtypes, and
  ``num_features <= max_features`` (default :data:`DEFAULT_MAX_FEATURES`).
* :func:`check_ensemble` / :func:`check_linear` — the built model before it can score
  anything: index ranges, acyclic tree links, the stored depth equal to the links' depth,
  finite values, feature indices below the stored feature count, and scores bounded by
  :data:`SCORE_BOUND` (``|b| + Σ_t |ν_t| · max |f_t|``).
* :func:`guarded` — any other exception while loading (``OverflowError``,
  ``RecursionError``, ...) becomes ``ValueError("<file>: invalid model file: <problem>")``.
* :func:`provenance_component` — the loss or weak learner a model was trained with, built
  back from the provenance in its ``info`` (the component's ``get_params`` description;
  files written before descriptions carry a ``repr`` string instead: informational only).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import warnings
from pathlib import Path
from typing import Dict, Tuple

import torch
from torch import Tensor

from ._errors import first_line
from ._io import atomic_path
from .params import build_from_params

__all__ = ["write_model_file", "read_model_file", "metadata_keys", "check_ensemble", "check_linear",
           "ModelFileError", "provenance_component"]


class ModelFileError(ValueError):
    """A model file that cannot be read or fails validation (a ``ValueError``)."""


#: metadata key of the file's SHA-256 (see :func:`model_digest`)
CHECKSUM_KEY = "sha256"
#: first format version whose files carry the checksum; older files load with a warning
CHECKSUM_VERSION = 2
#: the widest model accepted on load unless ``max_features`` raises it: the SVMlight
#: reader's ``DEFAULT_MAX_FEATURES`` (scoring pads the data to the model's width)
DEFAULT_MAX_FEATURES = 100_000
#: file suffixes that mean another format: ``save`` refuses them
OTHER_FORMATS = (".json", ".txt", ".text", ".onnx", ".pkl", ".pickle", ".joblib", ".pt",
                 ".pth", ".bin", ".model", ".ubj", ".xgb", ".lgb", ".csv", ".tsv", ".npy",
                 ".npz", ".h5", ".hdf5", ".cbm", ".pmml", ".xml", ".yaml", ".yml", ".tl")


def check_model_suffix(path, what: str = "model") -> None:
    """``ValueError`` when ``path`` ends in a suffix of another format (``.json``,
    ``.txt``, ``.onnx``, ``.pkl``, ...): model files are safetensors."""
    suffix = Path(str(path)).suffix.lower()
    if suffix in OTHER_FORMATS:
        raise ValueError(f"{what}.save: {path}: model files are safetensors (tensors + JSON), "
                         f"not {suffix}; use the suffix .safetensors (or none)")


def canonical_json(meta: dict) -> str:
    """The description as written in a file: compact JSON, keys sorted (NaN allowed)."""
    return json.dumps(meta, allow_nan=True, sort_keys=True, separators=(",", ":"))


def model_digest(key: str, text: str, tensors: Dict[str, Tensor]) -> str:
    """SHA-256 (hex) over the metadata key, the description's JSON ``text`` and every tensor
    (sorted by name: name, dtype, shape and raw bytes)."""
    h = hashlib.sha256(b"torchrankboost model file\0")
    for part in (key, text):
        b = part.encode("utf-8")
        h.update(len(b).to_bytes(8, "little") + b)
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        head = f"{name}\0{str(t.dtype)}\0{list(t.shape)}".encode("utf-8")
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        h.update(len(head).to_bytes(8, "little") + head + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def write_model_file(path, tensors: Dict[str, Tensor], key: str, meta: dict,
                     what: str = "model") -> None:
    """Save ``tensors`` with ``meta`` (canonical JSON) under metadata ``key`` and their
    SHA-256 under ``"sha256"``, atomically. A suffix of another format is refused."""
    from safetensors.torch import save_file

    check_model_suffix(path, what)
    try:
        text = canonical_json(meta)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}.save: model description is not JSON-able ({exc})") from None
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    digest = model_digest(key, text, tensors)
    with atomic_path(path, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={key: text, CHECKSUM_KEY: digest})


def provenance_component(info: dict, key: str):
    """The component (``key``: ``"loss"`` or ``"learner"``) described in a model's
    ``info``, built from its ``{"type", "params"}`` description; ``None`` when the model has
    no such description (an older file's ``repr`` string, a user's loss without
    parameters, a paper's algorithm)."""
    spec = (info or {}).get(key)
    if isinstance(spec, dict) and "type" in spec and "params" in spec:
        return build_from_params(spec)
    return None


@contextlib.contextmanager
def guarded(path):
    """Every failure while loading ``path`` is a ``ValueError`` naming it: an
    ``OverflowError``, ``RecursionError``, ``MemoryError``... of a corrupt file becomes a
    :class:`ModelFileError` (a missing file stays ``FileNotFoundError``)."""
    try:
        yield
    except (ValueError, FileNotFoundError):
        raise
    except Exception as exc:  # noqa: BLE001 - one message naming the file
        raise ModelFileError(f"{path}: invalid model file: {type(exc).__name__}: "
                             f"{first_line(exc, default='')}"[:300]) from None


def _check_regular(path) -> Path:
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise FileNotFoundError(2, "model file not found", str(p)) from None
    except OSError as exc:
        raise ModelFileError(f"{p}: cannot read the model file ({exc.strerror or exc})"
                             ) from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelFileError(f"{p}: is a folder, not a model file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{p}: not a regular file (a pipe or a device?), not a model file")
    if not os.access(p, os.R_OK):
        raise ModelFileError(f"{p}: cannot read the model file (permission denied)")
    return p


def metadata_keys(path) -> set:
    """The metadata keys of a model file (which model it holds), with the checks of
    :func:`read_model_file` on the path."""
    from safetensors import safe_open

    p = _check_regular(path)
    try:
        with safe_open(str(p), framework="pt") as fh:
            return set((fh.metadata() or {}).keys())
    except Exception as exc:  # noqa: BLE001
        raise ModelFileError(f"{p}: not a readable safetensors model file "
                             f"({first_line(exc)})") from None


def _read_safetensors(p: Path) -> Tuple[dict, Dict[str, Tensor]]:
    """``(metadata, tensors)`` of a safetensors file, read once (CPU tensors)."""
    from safetensors.torch import load

    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ModelFileError(f"{p}: cannot read the model file ({exc.strerror or exc})"
                             ) from None
    try:
        tensors = load(data)  # validates the header, dtypes, shapes and offsets
        n = int.from_bytes(data[:8], "little")
        md = json.loads(data[8:8 + n]).get("__metadata__") or {}
        if not isinstance(md, dict):
            raise ValueError("the metadata is not an object")
    except Exception as exc:  # noqa: BLE001 - any reader error is one message naming the file
        raise ModelFileError(f"{p}: not a readable safetensors model file "
                             f"({first_line(exc)})"[:300]) from None
    return md, tensors


def read_model_file(path, key: str, what: str, *, device=None) -> Tuple[dict, Dict[str, Tensor]]:
    """``(meta, tensors)`` of a file written by :func:`write_model_file` under ``key``, its
    checksum verified (:func:`verify_checksum`) before anything is built from it."""
    p = _check_regular(path)
    md, tensors = _read_safetensors(p)
    if not isinstance(md.get(key), str):
        raise ModelFileError(f"{p}: not a torchrankboost {what} file (no {key!r} metadata)")
    try:
        meta = json.loads(md[key])
    except (ValueError, RecursionError) as exc:
        raise ModelFileError(f"{p}: invalid model file: the description is not JSON "
                             f"({first_line(exc)})"[:300]) from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{p}: invalid model file: the description is not an object")
    verify_checksum(p, key, md[key], md.get(CHECKSUM_KEY), meta, tensors)
    if device is not None and torch.device(device).type != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return meta, tensors


def check_format(path, meta: dict, fmt: str, newest: int, *, default_version: int) -> None:
    """The file's ``format`` is ``fmt`` and its ``version`` is not newer than ``newest``
    (``default_version`` when it records none); else :class:`ModelFileError`."""
    if meta.get("format") != fmt:
        raise ModelFileError(f"{path}: unknown format {meta.get('format')!r}"[:300])
    version = meta.get("version", default_version)
    if type(version) is int and version > newest:
        raise ModelFileError(f"{path}: format version {version} is newer than this "
                             f"library ({newest})")


def verify_checksum(p, key: str, text: str, stored, meta: dict, tensors) -> None:
    """Refuse a file whose stored SHA-256 differs from :func:`model_digest` of what was
    read. A file without one is refused too, unless its format version predates the
    checksum (``version < 2``): such an older file loads with a ``UserWarning`` (its
    structure is still validated, but byte corruption cannot be detected)."""
    if stored is None:
        version = meta.get("version", 1)
        if type(version) is not int:
            raise ModelFileError(f"{p}: invalid model file: format version {version!r}")
        if version >= CHECKSUM_VERSION:
            raise ModelFileError(f"{p}: invalid model file: its checksum is missing (the file "
                                 f"is corrupt or was edited)")
        warnings.warn(f"{p}: written by an older torchrankboost, without a checksum: its "
                      f"structure is checked but corruption cannot be detected; save it "
                      f"again to add one", UserWarning, stacklevel=4)
        return
    if stored != model_digest(key, text, tensors):
        raise ModelFileError(f"{p}: invalid model file: checksum mismatch (the file is "
                             f"corrupt or was edited)")


# ------------------------------------------------------------------------- raw state
_FLOATS = (torch.float32, torch.float64)
_INT, _FLOAT, _BOOL = "int64", "float32/float64", "bool"
_DTYPES = {_INT: (torch.int64,), _FLOAT: _FLOATS, _BOOL: (torch.bool,)}
#: per weak model type: its tensors (name -> dtype rule), its JSON entries (name -> type
#: rule, ``?``: optional) — checked before anything is coerced
_WEAK_SPECS = {
    "TreeModel": ({"split_feature": _INT, "threshold_bin": _INT, "threshold": _FLOAT,
                   "default_left": _BOOL, "left_child": _INT, "right_child": _INT,
                   "split_gain": _FLOAT, "leaf_value": _FLOAT, "cover": _FLOAT + "?"},
                  {"depth": "int", "missing_code": "int?"}),
    "StumpModel": ({"threshold": _FLOAT, "coef": _FLOAT, "cover": _FLOAT + "?"},
                   {"feature": "int", "threshold_index": "int", "gain": "number?",
                    "missing_code": "int?"}),
    "FeatureModel": ({"lo": _FLOAT, "hi": _FLOAT, "coef": _FLOAT},
                     {"feature": "int", "normalize": "bool?", "gain": "number?"}),
}
_WEAK_SPECS.update(RegressionTree=_WEAK_SPECS["TreeModel"], Stump=_WEAK_SPECS["StumpModel"],
                   FeatureRanker=_WEAK_SPECS["FeatureModel"])
_JSON_TYPES = {"int": lambda v: type(v) is int, "hex": lambda v: type(v) in (str, int, float), "bool": lambda v: type(v) is bool,
               "number": lambda v: type(v) in (int, float), "str": lambda v: type(v) is str,
               "list": lambda v: type(v) is list, "dict": lambda v: type(v) is dict}


def _json_entries(meta: dict, spec: dict, name: str) -> None:
    for k, rule in spec.items():
        kind, optional = rule.rstrip("?"), rule.endswith("?")
        if k not in meta:
            if optional:
                continue
            raise ValueError(f"{name}: missing entry {k!r}")
        if not _JSON_TYPES[kind](meta[k]):
            raise ValueError(f"{name}: {k} must be JSON {kind}, got {meta[k]!r}"[:200])


def _tensor_entries(ts: dict, spec: dict, name: str) -> None:
    """The tensors ``ts`` are those of ``spec`` (name -> dtype rule; ``?``: optional)."""
    needed = {k for k, rule in spec.items() if not rule.endswith("?")}
    if not needed <= set(ts) <= set(spec):
        raise ValueError(f"{name}: tensors {sorted(ts)} but expected {sorted(spec)}")
    for k, rule in spec.items():
        rule = rule.rstrip("?")
        if k not in ts:
            continue
        t = ts[k]
        if t.dtype not in _DTYPES[rule]:
            raise ValueError(f"{name}: {k} has dtype {str(t.dtype).replace('torch.', '')}, "
                             f"expected {rule}")
        if t.dim() > 1:
            raise ValueError(f"{name}: {k} must be 1-D, got shape {tuple(t.shape)}")


def _check_weak_state(ts: dict, meta, F: int, name: str) -> None:
    if type(meta) is not dict:
        raise ValueError(f"{name}: the description is not an object")
    if type(meta.get("type")) is not str:
        raise ValueError(f"{name}: type must be JSON str, got {meta.get('type')!r}")
    spec = _WEAK_SPECS.get(meta["type"])
    if spec is None:  # a model of the caller's own model_from_state: its own checks
        return
    tensor_spec, json_spec = spec
    _json_entries(meta, json_spec, name)
    _tensor_entries(ts, tensor_spec, name)
    if "feature" in json_spec:
        _feature(meta["feature"], F, name)
        for k in tensor_spec:
            if k in ts and ts[k].numel() != (2 if k in ("coef", "cover") else 1):
                raise ValueError(f"{name}: {k} has {ts[k].numel()} values")
    if meta.get("missing_code", 255) < 0:
        raise ValueError(f"{name}: missing_code {meta['missing_code']} is negative")


def _preprocessing(meta: dict) -> None:
    """The preprocessing a model records in its ``info`` (``normalize``: per-query scaling,
    ``zero_based``: the feature numbering) is JSON ``true``/``false`` or absent."""
    _json_entries(meta.get("info") or {}, {"normalize": "bool?", "zero_based": "bool?"},
                  "info")


def check_ensemble_state(path, meta: dict, tensors: Dict[str, Tensor], *,
                         max_features: int = None) -> None:
    """The raw description and tensors of an ensemble file, before anything is built from
    them: JSON types as written (no ``true`` or ``"3"`` taken for an index, no ``null`` for
    a flag), tensor names and dtypes (float thresholds, int64 links and features), and
    ``1 <= num_features <= max_features`` (default :data:`DEFAULT_MAX_FEATURES`)."""
    limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    try:
        _json_entries(meta, {"version": "int?", "base_score": "hex", "num_features": "int",
                             "n_rounds": "int?", "models": "list", "info": "dict?"},
                      "the description")
        _preprocessing(meta)
        F = meta["num_features"]
        if not 1 <= F <= limit:
            raise ValueError(f"num_features is {F}, outside [1, {limit}] (max_features= "
                             f"raises the limit)")
        w = tensors.get("weights")
        if w is None or w.dtype != torch.float64 or w.dim() != 1:
            raise ValueError("the round weights must be a 1-D float64 tensor 'weights'")
        T = len(meta["models"])
        if w.numel() != T:
            raise ValueError(f"{w.numel()} round weights for {T} weak models")
        parts: Dict[int, dict] = {t: {} for t in range(T)}
        for k, v in tensors.items():
            head, _, rest = k.partition(".")
            t = int(head[1:]) if head[:1] == "m" and head[1:].isdigit() and rest else -1
            if k != "weights" and t not in parts:
                raise ValueError(f"unexpected tensor {k!r}")
            if k != "weights":
                parts[t][rest] = v
        for t, m in enumerate(meta["models"]):
            _check_weak_state(parts[t], m, F, f"round {t + 1}")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None


def check_linear_state(path, meta: dict, tensors: Dict[str, Tensor], *,
                       max_features: int = None) -> None:
    """The raw description and tensors of a linear model file (see
    :func:`check_ensemble_state`): ``weight`` a 1-D float64 tensor of at most
    ``max_features`` entries, ``bias`` a hex string."""
    limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    try:
        _json_entries(meta, {"version": "int?", "bias": "hex", "info": "dict?"},
                      "the description")
        _preprocessing(meta)
        if set(tensors) != {"weight"}:
            raise ValueError(f"tensors {sorted(tensors)} but expected ['weight']")
        w = tensors["weight"]
        if w.dtype != torch.float64 or w.dim() != 1:
            raise ValueError("weight must be a 1-D float64 tensor")
        if not 1 <= w.numel() <= limit:
            raise ValueError(f"{w.numel()} weights, outside [1, {limit}] (max_features= "
                             f"raises the limit)")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None


def hex_float(text, name: str) -> float:
    """``float.fromhex`` of a hex string (a number as is) with one ``ValueError`` for any
    bad text, overflow included."""
    try:
        return float.fromhex(text) if isinstance(text, str) else float(text)
    except (ValueError, OverflowError, TypeError):
        raise ValueError(f"{name} {text!r} is not a hex float"[:200]) from None


# ------------------------------------------------------------------------- validation
def _finite(t, name: str, *, nan_only: bool = False) -> None:
    t = torch.as_tensor(t)
    if not t.dtype.is_floating_point:
        return
    bad = torch.isnan(t) if nan_only else ~torch.isfinite(t)
    if t.numel() and bool(bad.any()):
        raise ValueError(f"{name} holds {'NaN' if nan_only else 'non-finite'} values")


def _feature(f, F: int, name: str) -> None:
    if isinstance(f, bool) or not isinstance(f, int) or not 0 <= f < F:
        raise ValueError(f"{name}: split feature {f!r} outside [0, {F}) (the model's "
                         f"feature count)")


def _check_tree(m, F: int, name: str) -> None:
    sf, lc, rc = m.split_feature, m.left_child, m.right_child
    K, L = int(sf.numel()), int(m.leaf_value.numel())
    for k in ("split_feature", "threshold_bin", "threshold", "default_left", "left_child",
              "right_child", "split_gain", "leaf_value"):
        t = getattr(m, k)
        if not isinstance(t, Tensor) or t.dim() != 1:
            raise ValueError(f"{name}: {k} must be a 1-D tensor")
        if k != "leaf_value" and t.numel() != K:
            raise ValueError(f"{name}: {k} has {t.numel()} entries for {K} internal nodes")
    if L != K + 1:
        raise ValueError(f"{name}: {L} leaves for {K} internal nodes (a binary tree has "
                         f"{K + 1})")
    _finite(m.leaf_value, f"{name}: leaf values")
    _finite(m.threshold, f"{name}: thresholds", nan_only=True)
    cover = getattr(m, "cover", None)
    if cover is not None:
        if not isinstance(cover, Tensor) or cover.dim() != 1 or cover.numel() != K + L:
            raise ValueError(f"{name}: cover must be a 1-D tensor of {K + L} entries")
        _finite(cover, f"{name}: covers")
        if cover.numel() and float(cover.min()) < 0:
            raise ValueError(f"{name}: covers must not be negative")
    if K == 0:
        if m.depth != 0:
            raise ValueError(f"{name}: depth {m.depth} but the tree is a single leaf")
        return
    if sf.dtype.is_floating_point or lc.dtype.is_floating_point or rc.dtype.is_floating_point:
        raise ValueError(f"{name}: split features and child links must be integers")
    lo, hi = int(sf.min()), int(sf.max())
    if lo < 0 or hi >= F:
        raise ValueError(f"{name}: split feature {lo if lo < 0 else hi} outside [0, {F}) "
                         f"(the model's feature count)")
    left, right = lc.tolist(), rc.tolist()
    for c in left + right:
        if not -L <= c < K:
            raise ValueError(f"{name}: child link {c} outside [-{L}, {K})")
    # every node below the root is reached exactly once from the root: a tree, no cycles
    seen_nodes, seen_leaves = [False] * K, [False] * L
    seen_nodes[0] = True
    frontier, depth = [0], 0
    while frontier:
        depth += 1
        nxt = []
        for k in frontier:
            for c in (left[k], right[k]):
                if c >= 0:
                    if seen_nodes[c]:
                        raise ValueError(f"{name}: node {c} is reached twice (a cycle or a "
                                         f"shared child)")
                    seen_nodes[c] = True
                    nxt.append(c)
                else:
                    if seen_leaves[~c]:
                        raise ValueError(f"{name}: leaf {~c} is reached twice")
                    seen_leaves[~c] = True
        frontier = nxt
    if not all(seen_nodes) or not all(seen_leaves):
        raise ValueError(f"{name}: some nodes or leaves are not reachable from the root")
    if m.depth != depth:
        raise ValueError(f"{name}: stored depth {m.depth} but the links give depth {depth}")


def _check_weak(m, F: int, name: str) -> None:
    kind = getattr(m, "type_name", type(m).__name__)
    if kind == "TreeModel":
        _check_tree(m, F, name)
    elif kind == "StumpModel":
        _feature(m.feature, F, name)
        _finite(m.threshold, f"{name}: threshold", nan_only=True)
        _finite(m.coef, f"{name}: coefficients")
        if m.coef.numel() != 2:
            raise ValueError(f"{name}: coefficients must be 2 values")
        if getattr(m, "cover", None) is not None:
            _finite(m.cover, f"{name}: covers")
            if float(m.cover.min()) < 0:
                raise ValueError(f"{name}: covers must not be negative")
    elif kind == "FeatureModel":
        _feature(m.feature, F, name)
        for k in ("lo", "hi", "coef"):
            _finite(getattr(m, k), f"{name}: {k}")
        if m.coef.numel() != 2:
            raise ValueError(f"{name}: coefficients must be 2 values")


#: the largest score a valid model may produce on its training range (float64 max 1.8e308,
#: with room for the accumulation)
SCORE_BOUND = 1e300


def _output_bound(m) -> float:
    """``max |f(x)|`` of a known weak model (trees and stumps: over every input; feature
    models: over the training range ``[lo, hi]``); 0 for other models."""
    kind = getattr(m, "type_name", type(m).__name__)
    if kind == "TreeModel":
        return float(m.leaf_value.abs().max()) if m.leaf_value.numel() else 0.0
    if kind == "StumpModel":
        return float(m.coef.abs().sum())
    if kind == "FeatureModel":
        a, b = (abs(float(v)) for v in m.coef)
        span = 1.0 if m.normalize else max(abs(float(m.lo)), abs(float(m.hi)))
        return a + b * span
    return 0.0


def check_ensemble(path, ens, meta: dict) -> None:
    """Validate a loaded :class:`~torchrankboost.boosting.Ensemble` (see the module
    docstring); ``ModelFileError`` naming ``path`` and the problem."""
    try:
        F = ens.num_features
        if F < 1:
            raise ValueError(f"num_features is {F}")
        n = meta.get("n_rounds")
        if n is not None and int(n) != ens.n_rounds:
            raise ValueError(f"n_rounds is {n} but the file holds {ens.n_rounds} weak models")
        if len(ens.weights) != ens.n_rounds:
            raise ValueError(f"{len(ens.weights)} round weights for {ens.n_rounds} weak models")
        if not math.isfinite(ens.base_score):
            raise ValueError(f"base score is {ens.base_score}")
        bad = [w for w in ens.weights if not math.isfinite(w)]
        if bad:
            raise ValueError(f"a round weight is {bad[0]}")
        bound = abs(ens.base_score)
        for t, m in enumerate(ens.models):
            _check_weak(m, F, f"round {t + 1} ({getattr(m, 'type_name', type(m).__name__)})")
            bound += abs(ens.weights[t]) * _output_bound(m)
        if not bound <= SCORE_BOUND:
            raise ValueError(f"its scores can reach {bound:.3g}: the round weights and leaf "
                             f"values overflow float64")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None


def check_linear(path, model) -> None:
    """Validate a loaded :class:`~torchrankboost.boosting.papers.LinearRanker`."""
    try:
        if model.weight.numel() < 1:
            raise ValueError("no weights")
        _finite(model.weight, "weights")
        if not math.isfinite(model.bias):
            raise ValueError(f"bias is {model.bias}")
        bound = float(model.weight.abs().sum()) + abs(model.bias)
        if not bound <= SCORE_BOUND:
            raise ValueError(f"its weights sum to {bound:.3g}: scores of unit features "
                             f"overflow float64")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None
