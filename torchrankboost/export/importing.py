r"""LightGBM and XGBoost models as :class:`~torchrankboost.boosting.ensemble.Ensemble`\ s of
our trees (:class:`~torchrankboost.boosting.learners.TreeModel`), the reverse of
:mod:`.lightgbm` / :mod:`.xgboost`: the imported ensemble predicts the source model's raw
score ``F(x) = b + Σ_t f_t(x)`` (round weights 1.0, ``b`` the base score as a margin), and
continues with our losses through ``fit(..., init_model=...)``.

The files are read by this library's own code — LightGBM's text model and the JSON of its
``dump_model()`` (:mod:`.import_lightgbm`), XGBoost's JSON and UBJSON models
(:mod:`.import_xgboost`, :mod:`.ubjson`) —, never by the peers' loaders, so a hostile file
cannot take the process down. Everything is validated before a tree is built
(:mod:`.import_trees`): feature indices (integers in range), child links forming a tree
of bounded depth (no cycles, no shared children, every node reached), thresholds (never
NaN; ``±inf`` only from LightGBM, which writes ``+inf`` itself), finite gains and leaf
values, the objective and its base-score link, the best iteration; what
cannot be imported exactly (categorical splits, linear trees, several classes, XGBoost's
DART, ...) is refused by name. Every failure is one ``ValueError``, naming the tree and the
node where there is one.

A booster object (``lightgbm.Booster``, ``xgboost.Booster`` or their scikit-learn models)
is serialised by its own library (``model_to_string``, ``save_raw``) and read the same way.
An early-stopped model keeps its best iteration's trees, as its library predicts by
default (``LGBMRanker`` / ``XGBRanker``); ``all_trees=True`` keeps every tree.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

from .import_lightgbm import lightgbm_rule, read_lightgbm_dump, read_lightgbm_text
from .import_trees import build_tree, imported_ensemble, load_json
from .import_xgboost import read_xgboost, xgboost_rule
from .ubjson import read_ubjson

if TYPE_CHECKING:
    from ..boosting.ensemble import Ensemble

__all__ = ["from_lightgbm", "from_xgboost"]


def _read(path, who: str) -> bytes:
    """The bytes of the model file ``path`` (``FileNotFoundError`` when it does not exist;
    a folder, a pipe or an unreadable file is a ``ValueError``)."""
    p = Path(path)
    try:
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{who}: {p} is not a regular file")
        return p.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(2, f"{who}: model file not found", str(p)) from None
    except OSError as exc:
        raise ValueError(f"{who}: cannot read {p} ({exc.strerror or exc})") from None


def _lightgbm_source(model, who: str) -> Tuple[object, Optional[int]]:
    """``(bytes or dict, best iteration or None)`` of what :func:`from_lightgbm` takes."""
    if isinstance(model, (dict, bytes, bytearray)):
        return (bytes(model) if not isinstance(model, dict) else model), None
    if isinstance(model, (str, os.PathLike)):
        return _read(model, who), None
    booster = getattr(model, "booster_", model)  # LGBMRanker and friends
    if not hasattr(booster, "model_to_string"):
        raise ValueError(f"{who}: expected a lightgbm.Booster, a model file, its bytes or its "
                         f"dump_model() dict, got {type(model).__name__}")
    best = getattr(booster, "best_iteration", 0)
    text = booster.model_to_string(num_iteration=-1)
    return text.encode("utf-8"), (int(best) if isinstance(best, int) and best > 0 else None)


def from_lightgbm(model: Any, *, all_trees: bool = False, max_features: Optional[int] = None) -> "Ensemble":
    r"""A LightGBM model as an :class:`~torchrankboost.boosting.ensemble.Ensemble` of trees.

    Args:
        model: a ``lightgbm.Booster`` (or a fitted ``LGBMRanker`` / ``LGBMRegressor``), a
            model file — the text model or the JSON of ``dump_model()`` —, its bytes, or
            ``dump_model()``'s dict. Read by this library (:mod:`.import_lightgbm`).
        all_trees: keep every tree of an early-stopped booster (default: the trees of its
            ``best_iteration``, what its ``predict`` uses). A file holds the trees it was
            saved with (LightGBM saves the best iteration's).
        max_features: the widest model accepted (default 100,000, as ``load_model``).

    Returns: an Ensemble (base score 0, one float64 tree per LightGBM tree, weights 1.0)
    whose ``predict(X)`` (``X`` ``(n, F)``, float32 or float64, NaN missing) equals
    ``booster.predict(X, raw_score=True)`` exactly, ±inf and values at the thresholds
    included. Supported objectives: :data:`~.import_lightgbm.OBJECTIVES` (the raw score
    does not depend on the objective; there is no base score). ``ValueError`` (one line,
    naming the tree and node) for a malformed model or what cannot be represented
    (several classes, random forests, categorical splits, missing type Zero, linear
    trees).
    """
    who = "from_lightgbm"
    src, best = _lightgbm_source(model, who)
    if isinstance(src, dict):
        parsed = read_lightgbm_dump(src, who, max_features=max_features)
    elif src.lstrip()[:1] == b"{":
        parsed = read_lightgbm_dump(load_json(src, who), who, max_features=max_features)
    else:
        parsed = read_lightgbm_text(src, who, max_features=max_features)
    F = parsed.num_features
    trees = [build_tree(t, num_features=F, who=who, rule=lightgbm_rule, float32=False,
                        infinite_thresholds=True) for t in parsed.trees]
    keep = len(trees) if all_trees or best is None else min(best, len(trees))
    info = {"imported_from": "lightgbm", "objective": parsed.objective,
            "source_trees": len(trees), "best_iteration": best}
    return imported_ensemble(trees[:keep], base=0.0, num_features=F, who=who, info=info)


def _xgboost_document(model, who: str):
    """The JSON / UBJSON document of what :func:`from_xgboost` takes."""
    if isinstance(model, dict):
        return model
    if isinstance(model, (str, os.PathLike)):
        model = _read(model, who)
    if isinstance(model, (bytes, bytearray)):
        data = bytes(model)
        head = data.lstrip()[:2]
        if head[:1] == b"{" and head[1:2] in (b"i", b"U", b"I", b"l", b"L", b"#", b"$", b"N"):
            return read_ubjson(data, who)
        if head[:1] != b"{":
            raise ValueError(f"{who}: not an XGBoost JSON or UBJSON model (XGBoost's old "
                             f"binary format is not read: save the model as .json or .ubj)")
        return load_json(data, who)
    booster = model.get_booster() if hasattr(model, "get_booster") else model
    if not hasattr(booster, "save_raw"):
        raise ValueError(f"{who}: expected an xgboost.Booster, a model file, its bytes or its "
                         f"JSON dict, got {type(model).__name__}")
    return read_ubjson(bytes(booster.save_raw("ubj")), who)


def from_xgboost(model: Any, *, all_trees: bool = False, max_features: Optional[int] = None) -> "Ensemble":
    r"""An XGBoost model as an :class:`~torchrankboost.boosting.ensemble.Ensemble` of trees.

    Args:
        model: an ``xgboost.Booster`` (or a fitted ``XGBRanker`` / ``XGBRegressor``), a
            model file (JSON or UBJSON, told by its content), its bytes, or the JSON
            model's dict. Read by this library (:mod:`.import_xgboost`).
        all_trees: keep every tree of an early-stopped model (default: the rounds up to its
            ``best_iteration``, what ``XGBRanker.predict`` uses; ``Booster.predict`` uses
            every tree).
        max_features: the widest model accepted (default 100,000, as ``load_model``).

    Returns: an Ensemble (XGBoost's base score as a margin, through the objective's link;
    one float32-threshold tree per XGBoost tree, weights 1.0) whose ``predict(X)`` equals
    ``booster.predict(DMatrix(X), output_margin=True)`` up to XGBoost's float32 sums (the
    same leaves, ±inf and values at the thresholds included). Supported objectives:
    :data:`~.import_xgboost.LINKS`. ``ValueError`` (one line, naming the tree and node)
    for a malformed model or what cannot be represented (several classes or targets,
    DART, linear boosters, categorical splits).
    """
    who = "from_xgboost"
    parsed = read_xgboost(_xgboost_document(model, who), who, max_features=max_features)
    F = parsed.num_features
    trees = [build_tree(t, num_features=F, who=who, rule=xgboost_rule, float32=True)
             for t in parsed.trees]
    best = parsed.best_iteration
    keep = len(trees) if all_trees or best is None else parsed.iterations[best + 1]
    info = {"imported_from": "xgboost", "objective": parsed.objective,
            "source_trees": len(trees), "best_iteration": best}
    return imported_ensemble(trees[:keep], base=parsed.base_margin, num_features=F, who=who,
                             info=info)
