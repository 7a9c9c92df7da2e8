"""BoostedRanker as LightGBM / XGBoost / scikit-learn users expect it: data-frame column
names, score(sample_weight=) under metadata routing, the cross-validation and qid-column
traps refused with the way out, predict(n_rounds=) / staged_predict, their parameter names."""

import re

import numpy as np
import pytest
import sklearn
import torch
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from torchrankboost import BoostedRanker
from torchrankboost.data import make_letor

SMALL = dict(n_rounds=4, max_leaves=4, learner_params={"min_samples_leaf": 5})


@pytest.fixture(scope="module")
def letor():
    d = make_letor(36, 10, 5, 3, seed=5)
    return d.X.numpy().astype(np.float64), d.labels.numpy(), d.qid.numpy()


@pytest.fixture(scope="module")
def fitted(letor):
    X, y, qid = letor
    return BoostedRanker(**SMALL).fit(X, y, qid=qid)


def test_reordered_data_frame_columns_raise_instead_of_other_scores(letor):
    pd = pytest.importorskip("pandas")
    X, y, qid = letor
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    est = BoostedRanker(**SMALL).fit(df, y, qid=qid)
    assert list(est.feature_names_in_) == list(df.columns) and est.n_features_in_ == X.shape[1]
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        np.testing.assert_array_equal(est.predict(df), est.predict(X))
    reordered = df[df.columns[::-1]]
    for call in (lambda: est.predict(reordered), lambda: list(est.staged_predict(reordered)),
                 lambda: est.score(reordered, y, qid=qid)):
        with pytest.raises(ValueError, match="Feature names must be in the same order"):
            call()
    with pytest.raises(ValueError, match="feature names should match"):
        BoostedRanker(**SMALL).fit(df, y, qid=qid, eval_set=[(reordered, y, qid)])
    # a qid column is one of the named columns; numpy input stores no names
    dq = df.assign(qid=qid)[["qid", *df.columns]]
    assert list(BoostedRanker(qid_column=0, **SMALL).fit(dq, y).feature_names_in_)[0] == "qid"
    assert not hasattr(BoostedRanker(**SMALL).fit(X, y, qid=qid), "feature_names_in_")


def test_pipeline_score_with_metadata_routing_gives_scores_not_nan(letor):
    """Pipeline.score always routes sample_weight (None): score must take it."""
    X, y, qid = letor
    before = sklearn.get_config()["enable_metadata_routing"]
    with sklearn.config_context(enable_metadata_routing=True):
        est = BoostedRanker(**SMALL).set_fit_request(qid=True).set_score_request(qid=True)
        cv = cross_val_score(make_pipeline(StandardScaler(), est), X, y, cv=GroupKFold(3),
                             params={"qid": qid, "groups": qid}, error_score="raise")
    assert sklearn.get_config()["enable_metadata_routing"] == before
    assert np.all(np.isfinite(cv)) and np.all((cv > 0) & (cv <= 1))
    tr, te = next(GroupKFold(3).split(X, y, qid))
    pipe = make_pipeline(StandardScaler(), BoostedRanker(**SMALL))
    pipe.fit(X[tr], y[tr], boostedranker__qid=qid[tr])
    assert cv[0] == pytest.approx(pipe[-1].score(pipe[0].transform(X[te]), y[te], qid=qid[te]))


def test_score_sample_weight_weighs_queries_and_zero_weights_drop_them(letor, fitted):
    X, y, qid = letor
    plain = fitted.score(X, y, qid=qid)
    assert fitted.score(X, y, np.full(len(y), 3.0), qid=qid) == pytest.approx(plain)
    keep = qid < 20
    w = keep.astype(float) * 2.0
    assert fitted.score(X, y, w, qid=qid) == pytest.approx(
        fitted.score(X[keep], y[keep], qid=qid[keep]))
    p = np.random.default_rng(1).permutation(len(y))  # rows in any order (ties: row order)
    kp = p[keep[p]]
    assert fitted.score(X[p], y[p], w[p], qid=qid[p]) == pytest.approx(
        fitted.score(X[kp], y[kp], qid=qid[kp]))
    with pytest.raises(ValueError, match="sample_weight has 3 entries"):
        fitted.score(X, y, w[:3], qid=qid)
    with pytest.raises(ValueError, match="finite and >= 0"):
        fitted.score(X, y, -w, qid=qid)


def test_qid_to_fit_in_cross_validation_is_refused_at_once_also_in_a_pipeline(letor):
    X, y, qid = letor
    pipe = make_pipeline(StandardScaler(), BoostedRanker(**SMALL))
    with pytest.raises(ValueError, match="^BoostedRanker.fit got qid/group inside"):
        cross_val_score(pipe, X, y, groups=qid, cv=GroupKFold(3),
                        params={"boostedranker__qid": qid}, error_score="raise")
    with pytest.raises(ValueError, match="^BoostedRanker.fit got qid/group inside"):
        GridSearchCV(BoostedRanker(**SMALL), {"n_rounds": [2]}, cv=GroupKFold(2),
                     error_score="raise").fit(X, y, groups=qid, group=np.bincount(qid))
    # a scoring of one's own may know the queries: let through
    cv = cross_val_score(BoostedRanker(**SMALL), X, y, groups=qid, cv=GroupKFold(2),
                         params={"qid": qid}, scoring=lambda est, X_, y_: 0.5,
                         error_score="raise")
    np.testing.assert_array_equal(cv, [0.5, 0.5])


def test_scaled_qid_column_says_it_was_transformed_and_passthrough_works(letor):
    from sklearn.compose import ColumnTransformer

    X, y, qid = letor
    Xq = np.column_stack([qid, X])
    with pytest.raises(ValueError, match=r"^qid_column=0: .*the column was transformed"):
        make_pipeline(StandardScaler(), BoostedRanker(qid_column=0, **SMALL)).fit(Xq, y)
    keep = ColumnTransformer([("qid", "passthrough", [0])], remainder=StandardScaler())
    pipe = make_pipeline(keep, BoostedRanker(qid_column=0, **SMALL)).fit(Xq, y)
    assert pipe[-1].n_queries_ == len(np.unique(qid))


def test_predict_n_rounds_and_staged_predict_match_the_first_rounds(letor, fitted, tmp_path):
    from torchrankboost.boosting.papers import LinearRanker

    X, y, qid = letor
    staged = list(fitted.staged_predict(X))
    assert len(staged) == fitted.n_rounds_ == 4
    np.testing.assert_array_equal(staged[-1], fitted.predict(X))
    for k in (1, 3):
        np.testing.assert_array_equal(fitted.predict(X, n_rounds=k), staged[k - 1])
        np.testing.assert_array_equal(staged[k - 1],
                                      fitted.model_.truncate(k).predict(torch.as_tensor(X)))
    assert np.all(fitted.predict(X, n_rounds=0) == fitted.model_.base_score)
    assert staged[0].dtype == np.float64 and staged[0].shape == (len(y),)
    with pytest.raises(ValueError, match="n_rounds must be in"):
        fitted.predict(X, n_rounds=9)
    LinearRanker(torch.ones(X.shape[1])).save(tmp_path / "lin.safetensors")
    lin = BoostedRanker().load_model(tmp_path / "lin.safetensors")
    with pytest.raises(ValueError, match="staged_predict needs a model of boosting rounds"):
        next(lin.staged_predict(X))
    with pytest.raises(ValueError, match="n_rounds needs a model of boosting rounds"):
        lin.predict(X, n_rounds=1)


def test_lightgbm_and_xgboost_names_are_refused_naming_ours(letor, fitted):
    X, y, qid = letor
    for theirs, ours in [("n_estimators", "n_rounds"), ("num_leaves", "max_leaves"),
                         ("random_state", "seed"), ("eval_at", "eval_metric='ndcg@5'"),
                         ("reg_lambda", "'l2'"), ("subsample", "'subsample'")]:
        msg = f"no parameter '{theirs}'.*use .*{re.escape(ours)}"
        with pytest.raises(TypeError, match=msg):
            BoostedRanker(**{theirs: 5})
        with pytest.raises(ValueError, match=msg):
            BoostedRanker().set_params(**{theirs: 5})
    with pytest.raises(ValueError, match="'n_estimators'.*use n_rounds"):  # a grid of theirs
        GridSearchCV(BoostedRanker(qid_column=0), {"n_estimators": [2]},
                     cv=GroupKFold(2)).fit(np.column_stack([qid, X]), y, groups=qid)
    with pytest.raises(TypeError, match=r"BoostedRanker.fit has no parameter 'eval_at'"):
        BoostedRanker(**SMALL).fit(X, y, qid=qid, eval_at=[5])
    with pytest.raises(TypeError, match="'num_iteration'.*use n_rounds=k"):
        fitted.predict(X, num_iteration=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        BoostedRanker(nope=1)
