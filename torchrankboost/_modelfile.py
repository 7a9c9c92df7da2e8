"""The one model-file format of the library: safetensors tensors plus a JSON description in
the file's metadata (no pickle), written atomically and checked on the way in.

* :func:`write_model_file` — ``save`` of every model: the tensors and the JSON under one
  metadata key, written through :func:`torchrankboost._io.atomic_path` (temporary file in the
  target's folder, ``fsync``, ``os.replace``), so a crash or a full disk never leaves half a
  model and the file gets the usual permissions.
* :func:`read_model_file` — ``load`` of every model: refuses what is not a regular readable
  file (a folder, a named pipe that would block, a file without permission) and reports any
  reader error as one ``ValueError`` naming the file.
* :func:`provenance_component` — the loss or weak learner a model was trained with, built
  back from the provenance in its ``info`` (the component's ``get_params`` description;
  files written before descriptions carry a ``repr`` string instead: informational only).
* :func:`check_ensemble` / :func:`check_linear` — the structure of a loaded model is
  validated before it can score anything: index ranges, acyclic tree links, the stored depth
  equal to the links' depth, finite values, feature indices below the stored feature count.
  A tampered or corrupt file raises ``ValueError("<file>: invalid model file: <problem>")``.
"""

from __future__ import annotations

import json
import math
import os
import stat
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


def write_model_file(path, tensors: Dict[str, Tensor], key: str, meta: dict,
                     what: str = "model") -> None:
    """Save ``tensors`` with ``meta`` (JSON) under metadata ``key``, atomically."""
    from safetensors.torch import save_file

    try:
        text = json.dumps(meta, allow_nan=True)
    except TypeError as exc:
        raise ValueError(f"{what}.save: model description is not JSON-able ({exc})") from None
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    with atomic_path(path, suffix=".safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={key: text})


def provenance_component(info: dict, key: str):
    """The component (``key``: ``"loss"`` or ``"learner"``) described in a model's
    ``info``, built from its ``{"type", "params"}`` description; ``None`` when the model has
    no such description (an older file's ``repr`` string, a user's loss without
    parameters, a paper's algorithm)."""
    spec = (info or {}).get(key)
    if isinstance(spec, dict) and "type" in spec and "params" in spec:
        return build_from_params(spec)
    return None


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


def read_model_file(path, key: str, what: str, *, device=None) -> Tuple[dict, Dict[str, Tensor]]:
    """``(meta, tensors)`` of a file written by :func:`write_model_file` under ``key``."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    p = _check_regular(path)
    try:
        with safe_open(str(p), framework="pt") as fh:
            md = fh.metadata() or {}
    except Exception as exc:  # noqa: BLE001 - any reader error is one message naming the file
        raise ModelFileError(f"{p}: not a readable safetensors model file "
                             f"({first_line(exc)})") from None
    if key not in md:
        raise ModelFileError(f"{p}: not a torchrankboost {what} file (no {key!r} metadata)")
    try:
        meta = json.loads(md[key])
    except ValueError as exc:
        raise ModelFileError(f"{p}: invalid model file: the description is not JSON ({exc})"
                             ) from None
    if not isinstance(meta, dict):
        raise ModelFileError(f"{p}: invalid model file: the description is not an object")
    try:
        tensors = load_file(str(p), device=str(device) if device is not None else "cpu")
    except Exception as exc:  # noqa: BLE001
        raise ModelFileError(f"{p}: invalid model file: cannot read its tensors "
                             f"({first_line(exc)})") from None
    return meta, tensors


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
    elif kind == "FeatureModel":
        _feature(m.feature, F, name)
        for k in ("lo", "hi", "coef"):
            _finite(getattr(m, k), f"{name}: {k}")
        if m.coef.numel() != 2:
            raise ValueError(f"{name}: coefficients must be 2 values")


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
        for t, m in enumerate(ens.models):
            _check_weak(m, F, f"round {t + 1} ({getattr(m, 'type_name', type(m).__name__)})")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None


def check_linear(path, model) -> None:
    """Validate a loaded :class:`~torchrankboost.linear.LinearRanker`."""
    try:
        if model.weight.numel() < 1:
            raise ValueError("no weights")
        _finite(model.weight, "weights")
        if not math.isfinite(model.bias):
            raise ValueError(f"bias is {model.bias}")
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None
