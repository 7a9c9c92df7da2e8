"""Models and data shared by the export tests (to_lightgbm / to_xgboost / to_onnx /
from_*) and the explain tests: LETOR data with NaNs, a tree and a stump ensemble (each
fitted once per session), hand-made trees, a weak model that is not a tree, a linear
model as RankSVM fits it, the raw scores LightGBM / XGBoost give a written model, the
scores of an ONNX file (onnxruntime) and of a Treelite model (its GTIL), and the
tolerance ``1e-5 · (1 + max|score|)`` of float32 libraries."""

import functools

import numpy as np
import pytest
import torch

from torchrankboost import LinearRanker
from torchrankboost.boosting import Booster
from torchrankboost.boosting.learners import FeatureModel, RegressionTree, Stumps, TreeModel
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


def feature_model():
    """A single-feature weak model (not a tree: the tree formats refuse it)."""
    return FeatureModel(feature=0, lo=torch.tensor(0.0), hi=torch.tensor(1.0),
                        coef=torch.tensor([0.0, 1.0]), normalize=False)


def linear_model():
    """``(model, X)``: a linear model as ``RankSVM`` fits it (``LinearRanker``: ``w·x + b``,
    float64), and features with NaNs (counting as 0). Built directly: RankSVM's L-BFGS imports
    ``torch._dynamo`` (seconds), and ``test_linear.py`` checks the fit."""
    X, _, _ = make_letor(30, 10, 6, seed=0)
    X = X.clone()
    X[::4, 1] = float("nan")
    w = torch.linspace(-1.3, 2.1, 6, dtype=torch.float64) / 3.0
    return LinearRanker(w, bias=-0.123456789, info={"algorithm": "ranksvm"}), X


def ort_scores(path, X):
    """The scores of the ONNX file ``path`` on ``X`` in onnxruntime (one thread)."""
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(["scores"], {"X": np.asarray(X, dtype=np.float32)})[0][:, 0]


def gtil_scores(m, X):
    """The margins of the ``treelite.Model`` ``m`` on ``X`` (Treelite's GTIL, one thread)."""
    import treelite

    return treelite.gtil.predict(m, np.asarray(X), nthread=1, pred_margin=True).reshape(-1)
