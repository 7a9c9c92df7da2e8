"""Fitted models where rankers are served: :func:`to_lightgbm` (LightGBM's text model),
:func:`to_xgboost` (XGBoost's JSON model) and :func:`to_torch` (a ``torch.nn.Module`` of
plain tensor ops, for TorchScript, ``torch.export`` and CUDA), for tree and stump
ensembles."""

from .lightgbm import to_lightgbm
from .torch_module import TreeEnsembleModule, to_torch
from .xgboost import to_xgboost

__all__ = ["to_lightgbm", "to_xgboost", "to_torch", "TreeEnsembleModule"]
