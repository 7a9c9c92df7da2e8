"""Fitted models in other libraries' formats: :func:`to_lightgbm` (LightGBM's text model)
and :func:`to_xgboost` (XGBoost's JSON model) for tree and stump ensembles."""

from .lightgbm import to_lightgbm
from .xgboost import to_xgboost

__all__ = ["to_lightgbm", "to_xgboost"]
