"""Export to LightGBM / XGBoost: their predictions of the written files equal ours."""

import numpy as np
import pytest
import torch

from torchrankboost.boosting import Booster
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import FeatureModel, RegressionTree, Stumps
from torchrankboost.boosting.rankboost import RankBoost
from torchrankboost.data import make_letor
from torchrankboost.export import to_lightgbm, to_xgboost
from torchrankboost.losses import ExponentialPairwiseLoss


def _data(seed=0):
    X, y, g = make_letor(40, 12, 8, seed=seed)
    X = X.clone()
    gen = torch.Generator().manual_seed(seed)
    for f in (0, 2, 5):  # NaNs in some features, informative or not
        X[torch.rand(X.shape[0], generator=gen) < 0.2, f] = float("nan")
    return X, y, g


def _tolerance(scores):
    return 1e-5 * (1.0 + float(np.abs(scores).max()))


@pytest.fixture(scope="module")
def tree_model():
    X, y, g = _data()
    ens = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=8, min_samples_leaf=3),
                  n_rounds=20, learning_rate=0.3).fit(X, y, g)
    assert ens.n_rounds == 20
    return ens, X


@pytest.fixture(scope="module")
def stump_model():
    X, y, g = _data(1)
    rb = RankBoost("rb-c", learner=Stumps(max_thresholds=16), n_rounds=15)
    rb.fit(X, y, g)
    return rb.model_, X


def _lightgbm_scores(ens, X, path):
    lgb = pytest.importorskip("lightgbm")
    to_lightgbm(ens, path)
    return lgb.Booster(model_file=str(path)).predict(X.numpy(), raw_score=True)


def _xgboost_scores(ens, X, path):
    xgb = pytest.importorskip("xgboost")
    to_xgboost(ens, path)
    booster = xgb.Booster(model_file=str(path))
    return booster.predict(xgb.DMatrix(X.numpy(), missing=np.nan), output_margin=True)


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_lightgbm_predicts_as_the_exported_ensemble(which, request, tmp_path):
    ens, X = request.getfixturevalue(which)
    ours = ens.predict(X).numpy()
    theirs = _lightgbm_scores(ens, X, tmp_path / "model.txt")
    assert np.isnan(X.numpy()).any()
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=_tolerance(ours))
    # float64 inputs take the same branches (thresholds placed for float32 rounding)
    theirs64 = _lightgbm_scores(ens, X.double(), tmp_path / "model64.txt")
    np.testing.assert_allclose(theirs64, ens.predict(X.double()).numpy(), rtol=0,
                               atol=_tolerance(ours))


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_xgboost_predicts_as_the_exported_ensemble(which, request, tmp_path):
    ens, X = request.getfixturevalue(which)
    ours = ens.predict(X).numpy()
    theirs = _xgboost_scores(ens, X, tmp_path / "model.json")
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=_tolerance(ours))


def test_export_refuses_weak_models_that_are_not_trees(tmp_path):
    m = FeatureModel(feature=0, lo=torch.tensor(0.0), hi=torch.tensor(1.0),
                     coef=torch.tensor([0.0, 1.0]), normalize=False)
    ens = Ensemble([m], [1.0], num_features=2)
    for write in (to_lightgbm, to_xgboost):
        with pytest.raises(ValueError, match="FeatureModel"):
            write(ens, tmp_path / "m")
