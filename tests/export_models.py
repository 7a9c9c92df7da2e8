"""Models and data shared by the export tests (to_lightgbm / to_xgboost / to_onnx /
from_*) and the explain tests: LETOR data with NaNs, a tree and a stump ensemble (each
fitted once per session), hand-made trees, the tolerance ``1e-5 · (1 + max|score|)`` of
float32 libraries, and the raw scores LightGBM / XGBoost give a written model."""

import functools

import numpy as np
import pytest
import torch

from torchrankboost.boosting import Booster
from torchrankboost.boosting.learners import RegressionTree, Stumps, TreeModel
from torchrankboost.boosting.papers import RankBoost
from torchrankboost.data import make_letor
from torchrankboost.export import to_lightgbm, to_xgboost
from torchrankboost.losses import ExponentialPairwiseLoss


def letor_with_nans(seed=0):
    """``(X, y, groups)``: synthetic LETOR data, 20 % NaN in features 0, 2 and 5."""
    X, y, g = make_letor(40, 12, 8, seed=seed)
    X = X.clone()
    gen = torch.Generator().manual_seed(seed)
    for f in (0, 2, 5):  # NaNs in some features, informative or not
        X[torch.rand(X.shape[0], generator=gen) < 0.2, f] = float("nan")
    return X, y, g


def tolerance(scores):
    return 1e-5 * (1.0 + float(np.abs(scores).max()))


@functools.lru_cache(maxsize=None)
def tree_model():
    """``(Ensemble, X)``: 20 rounds of exponential-loss trees on NaN data."""
    X, y, g = letor_with_nans()
    ens = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=8, min_samples_leaf=3),
                  n_rounds=20, learning_rate=0.3).fit(X, y, g)
    assert ens.n_rounds == 20
    return ens, X


@functools.lru_cache(maxsize=None)
def stump_model():
    """``(fitted RankBoost, X)``: 15 rounds of RB-C stumps on NaN data."""
    X, y, g = letor_with_nans(1)
    rb = RankBoost("rb-c", learner=Stumps(max_thresholds=16), n_rounds=15)
    rb.fit(X, y, g)
    return rb, X


def hand_tree(features, thresholds, default_left, left, right, leaves, dtype=torch.float32):
    """A :class:`TreeModel` from its node lists (children < 0: leaf ``~child``)."""
    i64 = torch.int64
    return TreeModel(split_feature=torch.tensor(features, dtype=i64),
                     threshold_bin=torch.zeros(len(features), dtype=i64),
                     threshold=torch.tensor(thresholds, dtype=dtype),
                     default_left=torch.tensor(default_left, dtype=torch.bool),
                     left_child=torch.tensor(left, dtype=i64), right_child=torch.tensor(right, dtype=i64),
                     split_gain=torch.zeros(len(features), dtype=torch.float64),
                     leaf_value=torch.tensor(leaves, dtype=torch.float32), depth=len(features))


def lightgbm_scores(ens, X, path):
    """LightGBM's raw scores of ``X`` under ``ens`` written to ``path`` (skips without it)."""
    lgb = pytest.importorskip("lightgbm")
    to_lightgbm(ens, path)
    return lgb.Booster(model_file=str(path)).predict(X.numpy(), raw_score=True)


def xgboost_scores(ens, X, path):
    """XGBoost's margins of ``X`` under ``ens`` written to ``path`` (skips without it)."""
    xgb = pytest.importorskip("xgboost")
    to_xgboost(ens, path)
    booster = xgb.Booster(model_file=str(path))
    return booster.predict(xgb.DMatrix(X.numpy(), missing=np.nan), output_margin=True)
