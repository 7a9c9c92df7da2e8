"""Our losses and metrics inside LightGBM and XGBoost (skipped when a package is absent), and
the adapters called through those libraries' scikit-learn APIs: one clear error saying what
works instead of a raw AttributeError."""

import numpy as np
import pytest
import torch

from torchrankboost import ExponentialPairwiseLoss, QBRankLoss, ndcg_at_k
from torchrankboost.data import make_letor
from torchrankboost.integrations import (lightgbm_metric, lightgbm_objective, xgboost_metric,
                                         xgboost_objective)

PARAMS = dict(num_leaves=15, learning_rate=0.1, min_data_in_leaf=20, verbose=-1, seed=0,
              deterministic=True, force_row_wise=True, num_threads=1, metric="None")


@pytest.fixture(scope="module")
def letor():
    return make_letor(120, 20, 10, seed=3)


def _np(d):
    return d.X.numpy(), d.labels.numpy(), d.groups.sizes.numpy()


@pytest.mark.parametrize("loss", [ExponentialPairwiseLoss(), QBRankLoss()])
def test_lightgbm_objective_hands_over_our_grad_hess(letor, loss):
    lgb = pytest.importorskip("lightgbm")
    X, y, sizes = _np(letor)
    ds = lgb.Dataset(X, y, group=sizes, free_raw_data=False).construct()
    s = np.random.default_rng(0).normal(size=y.shape[0])
    obj = lightgbm_objective(loss)
    g, h = obj(s, ds)
    g_ref, h_ref = loss.grad_hess(torch.as_tensor(s), letor.labels.double(), letor.groups,
                                  hess="diag")
    np.testing.assert_allclose(g, g_ref.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h, h_ref.clamp_min(1e-16).numpy(), rtol=1e-12, atol=1e-15)
    g2, h2 = obj(y, s, None, sizes)  # the scikit-learn signature (y_true, y_pred, w, group)
    np.testing.assert_array_equal(g, g2)
    np.testing.assert_array_equal(h, h2)


@pytest.mark.filterwarnings("ignore:The argument 'eval_set' is deprecated")
def test_lightgbm_trains_like_the_hand_written_objective(letor):
    lgb = pytest.importorskip("lightgbm")
    X, y, sizes = _np(letor)
    loss = ExponentialPairwiseLoss()

    def by_hand(preds, dataset):  # what a user writes without the adapter
        gr, he = loss.grad_hess(torch.as_tensor(preds), letor.labels.double(), letor.groups,
                                hess="diag")
        return gr.numpy(), he.clamp_min(1e-16).numpy()

    preds = []
    for obj in (lightgbm_objective(loss), by_hand):
        ds = lgb.Dataset(X, y, group=sizes)
        bst = lgb.train(dict(PARAMS, objective=obj), ds, num_boost_round=20)
        preds.append(bst.predict(X))
    np.testing.assert_allclose(preds[0], preds[1], rtol=1e-12)
    ndcg = float(ndcg_at_k(torch.as_tensor(preds[0]), letor.labels, letor.groups, k=10))
    base = float(ndcg_at_k(torch.zeros(len(y), dtype=torch.float64), letor.labels,
                           letor.groups, k=10))
    assert ndcg > base + 0.05

    ranker = lgb.LGBMRanker(objective=lightgbm_objective(loss), n_estimators=20,
                            num_leaves=15, min_child_samples=20, verbose=-1, random_state=0,
                            deterministic=True, force_row_wise=True, n_jobs=1)
    ranker.fit(X, y, group=sizes, eval_set=[(X, y)], eval_group=[sizes],
               eval_metric=lightgbm_metric("ndcg@10"))
    np.testing.assert_allclose(ranker.predict(X), preds[0], rtol=1e-12)
    (rec,) = [d["ndcg@10"] for d in ranker.evals_result_.values()]
    assert len(rec) == 20 and abs(rec[-1] - ndcg) < 1e-9


def test_lightgbm_metric_is_ours(letor):
    lgb = pytest.importorskip("lightgbm")
    X, y, sizes = _np(letor)
    ds = lgb.Dataset(X, y, group=sizes, free_raw_data=False).construct()
    s = np.random.default_rng(1).normal(size=y.shape[0])
    name, value, higher = lightgbm_metric("ndcg@5")(s, ds)
    assert (name, higher) == ("ndcg@5", True)
    assert value == pytest.approx(float(ndcg_at_k(torch.as_tensor(s), letor.labels,
                                                  letor.groups, k=5)), abs=1e-12)
    assert lightgbm_metric("pair_error")(s, ds)[2] is False


def test_lightgbm_without_groups_is_a_clear_error(letor):
    lgb = pytest.importorskip("lightgbm")
    X, y, _ = _np(letor)
    ds = lgb.Dataset(X, y, free_raw_data=False).construct()
    with pytest.raises(ValueError, match="no query groups"):
        lightgbm_objective(ExponentialPairwiseLoss())(np.zeros(len(y)), ds)
    with pytest.raises(ValueError, match="no query groups"):
        lgb.train(dict(PARAMS, objective=lightgbm_objective(ExponentialPairwiseLoss())),
                  lgb.Dataset(X, y), num_boost_round=2)


def test_bad_options():
    with pytest.raises(ValueError, match="hess"):
        lightgbm_objective(ExponentialPairwiseLoss(), hess="exact")
    with pytest.raises(ValueError, match="hess_floor"):
        xgboost_objective(ExponentialPairwiseLoss(), hess_floor=0)
    with pytest.raises(ValueError, match="unknown metric"):
        lightgbm_metric("ndgc@10")


def test_xgboost_objective_and_metric(letor):
    xgb = pytest.importorskip("xgboost")
    X, y, sizes = _np(letor)
    qid = letor.groups.group_index.numpy()
    loss = ExponentialPairwiseLoss()
    d = xgb.DMatrix(X, y, qid=qid)
    s = np.random.default_rng(2).normal(size=y.shape[0])
    g, h = xgboost_objective(loss)(s, d)
    g_ref, h_ref = loss.grad_hess(torch.as_tensor(s), letor.labels.double(), letor.groups)
    np.testing.assert_allclose(g, g_ref.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h, h_ref.clamp_min(1e-16).numpy(), rtol=1e-12, atol=1e-15)
    metric = xgboost_metric("ndcg@10")
    rec = {}
    bst = xgb.train({"disable_default_eval_metric": 1, "max_depth": 4, "nthread": 1,
                     "base_score": 0.0, "seed": 0}, d, 15, obj=xgboost_objective(loss),
                    custom_metric=metric, evals=[(d, "train")], evals_result=rec,
                    maximize=metric.greater_is_better, verbose_eval=False)
    p = bst.predict(d, output_margin=True)
    ndcg = float(ndcg_at_k(torch.as_tensor(p, dtype=torch.float64), letor.labels,
                           letor.groups, k=10))
    assert rec["train"]["ndcg@10"][-1] == pytest.approx(ndcg, abs=1e-6)
    assert rec["train"]["ndcg@10"][-1] > rec["train"]["ndcg@10"][0]
    with pytest.raises(ValueError, match="no query groups"):
        xgboost_objective(loss)(s, xgb.DMatrix(X, y))


def test_lightgbm_on_mq2008_reaches_the_hand_built_custom_objective():
    """20 rounds of LightGBM with our exponential loss through the adapter = the objective
    ``scripts/bench_boost.py`` writes by hand (same trees, same test NDCG@10)."""
    lgb = pytest.importorskip("lightgbm")
    from conftest import require_data
    from torchrankboost.data import load_letor_fold

    tr, _, te = load_letor_fold(require_data("mq2008", "Fold1"))
    loss = ExponentialPairwiseLoss()
    y64 = tr.labels.double()
    params = dict(PARAMS, num_leaves=31, min_sum_hessian_in_leaf=1e-3, max_bin=255)

    def by_hand(preds, dataset):
        gr, he = loss.grad_hess(torch.as_tensor(preds), y64, tr.groups, hess="diag")
        return gr.numpy(), he.clamp_min(1e-16).numpy()

    ndcg = []
    for obj in (lightgbm_objective(loss), by_hand):
        ds = lgb.Dataset(tr.X.numpy(), tr.labels.numpy(), group=tr.groups.sizes.numpy())
        bst = lgb.train(dict(params, objective=obj), ds, num_boost_round=20)
        s = torch.as_tensor(bst.predict(te.X.numpy()))
        ndcg.append(float(ndcg_at_k(s, te.labels, te.groups, k=10)))
    assert ndcg[0] == pytest.approx(ndcg[1], abs=1e-12)
    assert ndcg[0] > 0.75  # LightGBM lambdarank reaches about 0.77 on these folds


# ------------------------------------------------------------------ their scikit-learn APIs
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
