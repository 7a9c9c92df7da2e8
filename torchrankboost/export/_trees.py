r"""The weak models of an :class:`~torchrankboost.boosting.ensemble.Ensemble` as plain trees,
for the writers of other libraries' model files (:mod:`.lightgbm`, :mod:`.xgboost`).

An ensemble ``F(x) = b + Σ_t ν_t h_t(x)`` becomes ``b`` plus one :class:`PlainTree` per round
with the round weight folded into its leaves (leaf value ``ν_t · v`` in float64, the product
:meth:`Ensemble.predict` adds). Trees (``TreeModel``) keep their nodes; a stump
``a + b·1[x_f > θ]`` (``StumpModel``, NaN → ``a``) is the one-split tree ``x_f <= θ`` → ``a``,
else ``a + b``, NaN left. A weak model of another kind (a single-feature ranker ``FeatureModel``
is linear in its feature, no tree) is refused with a one-line ``ValueError`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

__all__ = ["PlainTree", "plain_trees"]


@dataclass
class PlainTree:
    """One round as a tree: internal nodes ``k = 0..K-1`` (root 0 when ``K > 0``) with
    ``split_feature[k]``, ``threshold[k]`` (our value: ``x <= threshold`` goes left),
    ``default_left[k]`` (the side of NaN), ``left_child[k]`` / ``right_child[k]`` (``>= 0``
    internal node, ``< 0`` leaf ``~child``), ``split_gain[k]``; ``leaf_value`` (``K + 1``
    floats, the round weight folded in). ``float32``: the model compares inputs rounded to
    float32 (its thresholds are float32); else in float64. ``cover``: the training rows of
    each internal node then each leaf (``2K + 1`` floats, :attr:`TreeModel.cover`), or
    ``None`` when the model has none."""

    split_feature: List[int]
    threshold: List[float]
    default_left: List[bool]
    left_child: List[int]
    right_child: List[int]
    split_gain: List[float]
    leaf_value: List[float]
    float32: bool
    cover: Optional[List[float]] = None

    @property
    def num_splits(self) -> int:
        return len(self.split_feature)


def _tree(model, weight: float) -> PlainTree:
    leaves = model.leaf_value.detach().to("cpu", torch.float64).tolist()
    return PlainTree(
        split_feature=[int(v) for v in model.split_feature.tolist()],
        threshold=model.threshold.detach().to("cpu", torch.float64).tolist(),
        default_left=[bool(v) for v in model.default_left.tolist()],
        left_child=[int(v) for v in model.left_child.tolist()],
        right_child=[int(v) for v in model.right_child.tolist()],
        split_gain=[float(v) for v in model.split_gain.tolist()],
        leaf_value=[weight * v for v in leaves],
        float32=model.threshold.dtype != torch.float64,
        cover=None if getattr(model, "cover", None) is None
        else model.cover.detach().to("cpu", torch.float64).tolist())


def _stump(model, weight: float) -> PlainTree:
    # the model's own arithmetic for h = 0 and h = 1 (a + b·h in the coefficients' dtype)
    out = model._out(torch.tensor([0.0, 1.0], device=model.coef.device))
    a, ab = out.detach().to("cpu", torch.float64).tolist()
    thr = float(model.threshold)
    f32 = model.threshold.dtype != torch.float64
    if ab == a or thr == float("inf"):  # a constant: no split
        return PlainTree([], [], [], [], [], [], [weight * a], f32)
    c = getattr(model, "cover", None)
    cover = None if c is None else [float(c.sum()), *(float(v) for v in c.tolist())]
    return PlainTree([int(model.feature)], [thr], [True], [~0], [~1], [float(model.gain)],
                     [weight * a, weight * ab], f32, cover)


def plain_trees(model, who: str) -> Tuple[float, int, List[PlainTree]]:
    """``(base_score, num_features, trees)`` of a fitted ensemble (or of a ranker whose
    ``model_`` is one); ``who`` names the caller in the errors."""
    from ..boosting.ensemble import Ensemble
    from ..boosting.learners import StumpModel, TreeModel

    ens = getattr(model, "model_", model)
    if not isinstance(ens, Ensemble):
        raise ValueError(f"{who}: expected a fitted boosting Ensemble, got {type(ens).__name__}")
    trees = []
    for t, (m, w) in enumerate(zip(ens.models, ens.weights)):
        if isinstance(m, TreeModel):
            trees.append(_tree(m, float(w)))
        elif isinstance(m, StumpModel):
            trees.append(_stump(m, float(w)))
        else:
            raise ValueError(f"{who}: round {t}: weak model {type(m).__name__} is not a "
                             f"tree or a stump and cannot be exported")
    return ens.base_score, ens.num_features, trees
