"""Explaining tree and stump ensembles: exact path-dependent TreeSHAP contributions
(:func:`contributions`, behind ``Ensemble.predict(X, contrib=True)``) and the leaf each row
reaches in each round (:func:`leaf_indices`, behind ``Ensemble.apply(X)``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .treeshap import PlainRound, TreeShap, round_trees

__all__ = ["contributions", "leaf_indices", "TreeShap", "PlainRound", "round_trees"]


def contributions(ensemble: Any, X: Tensor, n_rounds: int) -> Tensor:
    """``(n, F + 1)`` float64 SHAP values of the first ``n_rounds`` rounds of ``ensemble`` on
    the checked features ``X`` (n, F), expected value last (LightGBM's ``pred_contrib``
    layout); each row sums to ``ensemble.predict(X, n_rounds=n_rounds)``."""
    shap = TreeShap(round_trees(ensemble, n_rounds), ensemble.num_features,
                    ensemble.base_score, X.device)
    return shap.contributions(X)


def _stump_leaf(m, X: Tensor) -> Tensor:
    """0 (``x <= θ`` or NaN) / 1 (``x > θ``); a constant stump has the one leaf 0."""
    a, ab = m._out(torch.tensor([0.0, 1.0], device=m.coef.device)).tolist()
    x = X[:, m.feature].to(device=m.coef.device, dtype=m.threshold.dtype)
    if a == ab:
        return torch.zeros(X.shape[0], dtype=torch.int64, device=X.device)
    return (x > m.threshold).to(torch.int64).to(X.device)


def leaf_indices(ensemble: Any, X: Tensor, n_rounds: int) -> Tensor:
    """``(n, n_rounds)`` int64: the leaf of every row in each round (LightGBM's
    ``pred_leaf`` layout; leaf ids as in ``TreeModel.leaf_value``; a stump's left leaf
    (``x <= θ`` or NaN) is 0, its right leaf 1)."""
    out = torch.empty((X.shape[0], n_rounds), dtype=torch.int64, device=X.device)
    for t in range(n_rounds):
        m = ensemble.models[t]
        kind = getattr(m, "type_name", None)  # no import of boosting here: it imports us
        if kind == "TreeModel":
            out[:, t] = m.leaves(X).to(X.device)
        elif kind == "StumpModel":
            out[:, t] = _stump_leaf(m, X)
        else:
            raise ValueError(f"apply: round {t + 1} is a {type(m).__name__}, not a tree or a "
                             f"stump: it has no leaves")
    return out
