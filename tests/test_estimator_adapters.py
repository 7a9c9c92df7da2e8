"""The LightGBM / XGBoost adapters called through those libraries' scikit-learn APIs: one
clear error saying what works instead of a raw AttributeError (skipped when a package is
absent)."""

import numpy as np
import pytest

from torchrankboost import ExponentialPairwiseLoss
from torchrankboost.data import make_letor
from torchrankboost.integrations import (lightgbm_objective, xgboost_metric,
                                         xgboost_objective)


@pytest.fixture(scope="module")
def data():
    d = make_letor(8, 6, 4, seed=1)
    return d.X.numpy(), d.labels.numpy(), d.qid.numpy()


def test_xgboost_scikit_learn_api_says_to_use_xgb_train(data):
    xgb = pytest.importorskip("xgboost")
    X, y, qid = data
    use_train = r"^xgboost_(objective|metric) works with xgb\.train, not XGBoost's scikit-learn"
    with pytest.raises(ValueError, match=use_train):
        xgb.XGBRegressor(objective=xgboost_objective(ExponentialPairwiseLoss()),
                         n_estimators=2, n_jobs=1).fit(X, y)
    with pytest.raises(ValueError, match=use_train):
        xgb.XGBRanker(eval_metric=xgboost_metric("ndcg@10"), n_estimators=2, n_jobs=1).fit(
            X, y, qid=qid, eval_set=[(X, y)], eval_qid=[qid])
    with pytest.raises(ValueError, match="objective"):  # XGBoost's own refusal
        xgb.XGBRanker(objective=xgboost_objective(ExponentialPairwiseLoss()),
                      n_estimators=2, n_jobs=1).fit(X, y, qid=qid)


def test_lightgbm_regressor_with_a_ranking_objective_says_it_has_no_queries(data):
    lgb = pytest.importorskip("lightgbm")
    X, y, qid = data
    with pytest.raises(ValueError, match=r"LGBMRegressor has no queries\) has no query groups"):
        lgb.LGBMRegressor(objective=lightgbm_objective(ExponentialPairwiseLoss()),
                          n_estimators=2, verbose=-1, n_jobs=1).fit(X, y)
    ranker = lgb.LGBMRanker(objective=lightgbm_objective(ExponentialPairwiseLoss()),
                            n_estimators=2, verbose=-1, n_jobs=1, min_child_samples=2)
    ranker.fit(X, y, group=np.bincount(qid))
    assert ranker.predict(X).shape == y.shape
