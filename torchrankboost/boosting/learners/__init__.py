"""Weak learners for the boosting driver: histogram regression trees, stumps, single features.

Every learner follows :class:`~.base.WeakLearner` (``prepare(X, *, context)``, ``fit``,
optional ``fit_predict``, ``supports_data_parallel``) and fits a weak model (see
:class:`~.base.WeakModel`): ``RegressionTree`` (registry name ``"tree"``, :mod:`.tree`) fits
a ``TreeModel``, and so does ``ObliviousTree`` (``"oblivious"``, :mod:`.oblivious`, CatBoost's
symmetric trees); ``Stumps`` (``"stump"``, :mod:`.stumps`) a ``StumpModel``;
``FeatureRankers`` (``"feature"``, :mod:`.features`) a ``FeatureModel``. A saved weak
model's ``type`` is its model class name.
"""

from __future__ import annotations

from .base import WeakLearner, WeakModel  # noqa: F401
from .features import FeatureModel, FeatureRankers, ScaledFeatures  # noqa: F401
from .stumps import StumpFeatures, StumpModel, Stumps  # noqa: F401
from .oblivious import ObliviousTree  # noqa: F401
from .tree import RegressionTree, TreeModel  # noqa: F401

__all__ = [
    "WeakLearner",
    "WeakModel",
    "RegressionTree",
    "ObliviousTree",
    "Stumps",
    "FeatureRankers",
    "TreeModel",
    "StumpModel",
    "FeatureModel",
    "StumpFeatures",
    "ScaledFeatures",
    "weak_model_from_state",
]

_REGISTRY = {cls.type_name: cls for cls in (TreeModel, StumpModel, FeatureModel)}


def weak_model_from_state(tensors: dict, meta: dict) -> WeakModel:
    """Rebuild a fitted weak model from ``state()`` output, dispatching on ``meta["type"]``."""
    t = meta.get("type") if isinstance(meta, dict) else None
    cls = _REGISTRY.get(t)
    if cls is None:
        raise ValueError(f"meta: unknown weak model type {t!r} (known: {sorted(_REGISTRY)})")
    return cls.from_state(tensors, meta)
