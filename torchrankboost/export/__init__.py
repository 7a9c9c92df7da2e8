"""Fitted models where rankers are served: :func:`to_lightgbm` (LightGBM's text model),
:func:`to_xgboost` (XGBoost's JSON model), :func:`to_onnx` (an ai.onnx.ml tree-ensemble graph
for ONNX Runtime; a linear ranker's ``w·x + b``), :func:`to_treelite` (a ``treelite.Model``)
and :func:`to_torch` (a ``torch.nn.Module`` of
plain tensor ops, for TorchScript, ``torch.export`` and CUDA), for tree and stump
ensembles; :func:`from_lightgbm` / :func:`from_xgboost` read those libraries' tree models
back as an :class:`~torchrankboost.boosting.Ensemble` (to evaluate or continue them)."""

from .importing import from_lightgbm, from_xgboost
from .lightgbm import to_lightgbm
from .onnx import to_onnx
from .torch_module import TreeEnsembleModule, to_torch
from .treelite import to_treelite
from .xgboost import to_xgboost

__all__ = ["to_lightgbm", "to_xgboost", "to_onnx", "to_torch", "to_treelite",
           "TreeEnsembleModule",
           "from_lightgbm", "from_xgboost"]
