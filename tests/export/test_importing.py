"""Import from LightGBM / XGBoost: the imported ensembles predict as the source models."""

import json

import numpy as np
import pytest
import torch

from torchrankboost.boosting import Booster
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.export import to_lightgbm
from torchrankboost.export.importing import from_lightgbm, from_xgboost
from torchrankboost.losses import RankNetLoss

lgb = pytest.importorskip("lightgbm")


def _data(seed=0):
    X, y, g = make_letor(60, 15, 8, seed=seed)
    X = X.clone()
    gen = torch.Generator().manual_seed(seed)
    for f in (0, 2, 5):  # NaNs in some features
        X[torch.rand(X.shape[0], generator=gen) < 0.2, f] = float("nan")
    return X, y, g


@pytest.fixture(scope="module")
def letor():
    return _data()


@pytest.fixture(scope="module")
def lgb_ranker(letor):
    X, y, g = letor
    ds = lgb.Dataset(X.numpy(), y.numpy(), group=g.sizes.numpy())
    params = dict(objective="lambdarank", num_threads=1, verbose=-1, num_leaves=8,
                  min_data_in_leaf=5, deterministic=True)
    return lgb.train(params, ds, num_boost_round=20)


def test_from_lightgbm_predicts_the_raw_scores(letor, lgb_ranker):
    X = letor[0]
    ens = from_lightgbm(lgb_ranker)
    assert ens.n_rounds == 20 and ens.num_features == X.shape[1]
    for Xi in (X, X.double()):  # float32 and float64 inputs
        theirs = lgb_ranker.predict(Xi.numpy(), raw_score=True)
        np.testing.assert_allclose(ens.predict(Xi).numpy(), theirs, rtol=0, atol=1e-6)


def test_from_lightgbm_reads_files_and_missing_type_none(letor, tmp_path):
    X, y, g = letor
    params = dict(objective="lambdarank", num_threads=1, verbose=-1, num_leaves=8,
                  min_data_in_leaf=5, use_missing=False)  # missing type None: NaN acts as 0
    b = lgb.train(params, lgb.Dataset(X.numpy(), y.numpy(), group=g.sizes.numpy()), 5)
    b.save_model(str(tmp_path / "m.txt"))
    ens = from_lightgbm(tmp_path / "m.txt")
    theirs = b.predict(X.numpy(), raw_score=True)
    np.testing.assert_allclose(ens.predict(X).numpy(), theirs, rtol=0, atol=1e-6)


def test_from_xgboost_predicts_the_margins(letor):
    xgb = pytest.importorskip("xgboost")
    X, y, g = letor
    dm = xgb.DMatrix(X.numpy(), y.numpy(), group=g.sizes.numpy(), missing=np.nan)
    b = xgb.train(dict(objective="rank:pairwise", nthread=1, max_depth=4), dm, 20)
    ens = from_xgboost(b)
    assert ens.n_rounds == 20
    theirs = b.predict(xgb.DMatrix(X.numpy(), missing=np.nan), output_margin=True)
    tol = 1e-5 * (1.0 + float(np.abs(theirs).max()))
    for Xi in (X, X.double()):
        np.testing.assert_allclose(ens.predict(Xi).numpy(), theirs, rtol=0, atol=tol)


def test_to_lightgbm_then_from_lightgbm_is_our_model(letor, tmp_path):
    X, y, g = letor
    ours = Booster(RankNetLoss(), RegressionTree(max_leaves=8, min_samples_leaf=3),
                   n_rounds=10, learning_rate=0.3, base_score=0.25).fit(X, y, g)
    to_lightgbm(ours, tmp_path / "m.txt")
    back = from_lightgbm(tmp_path / "m.txt")
    for Xi in (X, X.double()):
        assert torch.equal(back.predict(Xi), ours.predict(Xi))


def test_continuing_a_lightgbm_ranker_with_our_loss(letor, lgb_ranker):
    X, y, g = letor
    start = from_lightgbm(lgb_ranker)
    ens = Booster(RankNetLoss(), RegressionTree(max_leaves=8, min_samples_leaf=3),
                  n_rounds=3, learning_rate=0.1).fit(X, y, g, init_model=start)
    assert ens.n_rounds == 23
    theirs = lgb_ranker.predict(X.numpy(), raw_score=True)
    np.testing.assert_allclose(ens.predict(X, n_rounds=20).numpy(), theirs, rtol=0, atol=1e-6)


def _split(tree: dict) -> dict:
    assert "split_feature" in tree, "expected a split at the root"
    return tree


def test_from_lightgbm_refuses_what_it_cannot_represent(lgb_ranker):
    for key, value, message in (("decision_type", "==", "categorical"),
                                ("missing_type", "Zero", "missing type 'Zero'")):
        dump = lgb_ranker.dump_model()
        _split(dump["tree_info"][0]["tree_structure"])[key] = value
        with pytest.raises(ValueError, match=message) as err:
            from_lightgbm(dump)
        assert "\n" not in str(err.value)


def test_from_xgboost_refuses_what_it_cannot_represent(letor):
    xgb = pytest.importorskip("xgboost")
    X, y, g = letor
    b = xgb.train(dict(objective="rank:pairwise", nthread=1, max_depth=2),
                  xgb.DMatrix(X.numpy(), y.numpy(), group=g.sizes.numpy()), 2)
    doc = json.loads(bytes(b.save_raw("json")))
    cat = json.loads(json.dumps(doc))
    cat["learner"]["gradient_booster"]["model"]["trees"][0]["split_type"][0] = 1
    dart = json.loads(json.dumps(doc))
    dart["learner"]["gradient_booster"]["name"] = "dart"
    for bad, message in ((cat, "categorical"), (dart, "'dart'")):
        with pytest.raises(ValueError, match=message) as err:
            from_xgboost(bad)
        assert "\n" not in str(err.value)
