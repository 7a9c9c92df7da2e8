"""BoostedRanker: scikit-learn conventions (clone, get/set_params, GroupKFold cross-validation
both with a qid column and with metadata routing), query handling, eval_set, errors."""

import numpy as np
import pytest
import sklearn
import torch
from sklearn.base import clone
from sklearn.model_selection import GroupKFold, cross_val_score

from torchrankboost import BoostedRanker, metrics
from torchrankboost.data import make_letor

SMALL = dict(n_rounds=6, max_leaves=4, learner_params={"min_samples_leaf": 5})


@pytest.fixture(scope="module")
def letor():
    d = make_letor(45, 12, 6, 3, seed=3)
    return d.X.numpy().astype(np.float64), d.labels.numpy(), d.qid.numpy()


def test_get_params_clone_round_trip():
    est = BoostedRanker(loss="pnorm_push", loss_params={"p": 4}, n_rounds=7, max_leaves=5,
                        learning_rate=0.2, qid_column=0)
    params = est.get_params()
    assert params["loss"] == "pnorm_push" and params["loss_params"] == {"p": 4}
    assert params["n_rounds"] == 7 and params["qid_column"] == 0
    twin = clone(est)
    assert twin is not est and twin.get_params() == params
    twin.set_params(n_rounds=3, loss="hinge")
    assert twin.n_rounds == 3 and est.n_rounds == 7 and twin.loss == "hinge"
    assert BoostedRanker(**params).get_params() == params
    assert "BoostedRanker(" in repr(est)


def test_fit_predict_score_with_qid(letor):
    X, y, qid = letor
    est = BoostedRanker(**SMALL).fit(X, y, qid=qid)
    s = est.predict(X)
    assert isinstance(s, np.ndarray) and s.shape == (X.shape[0],) and s.dtype == np.float64
    assert est.n_features_in_ == X.shape[1] and est.n_rounds_ >= 1
    from torchrankboost import Groups

    ref = float(metrics.ndcg_at_k(torch.as_tensor(s), torch.as_tensor(y),
                                  Groups.from_qid(qid), k=10))
    assert est.score(X, y, qid=qid) == pytest.approx(ref)
    untrained = float(metrics.ndcg_at_k(torch.zeros(len(y), dtype=torch.float64),
                                        torch.as_tensor(y), Groups.from_qid(qid), k=10))
    assert est.score(X, y, qid=qid) > untrained

    # rows in any order: same model (regrouped by a stable sort), predictions follow the rows
    perm = np.random.default_rng(0).permutation(len(y))
    est2 = BoostedRanker(**SMALL).fit(X[perm], y[perm], qid=qid[perm])
    np.testing.assert_allclose(est2.predict(X[perm]), s[perm], rtol=1e-6, atol=1e-9)
    # (ties among scores break by row order inside a query, so compare with the regrouped rows)
    g, order = Groups.from_unsorted_qid(qid[perm])
    ref2 = float(metrics.ndcg_at_k(torch.as_tensor(s[perm])[order],
                                   torch.as_tensor(y[perm])[order], g, k=10))
    assert est2.score(X[perm], y[perm], qid=qid[perm]) == pytest.approx(ref2)
    # group sizes (LightGBM style) are equivalent to contiguous qids
    sizes = np.unique(qid, return_counts=True)[1]
    est3 = BoostedRanker(**SMALL).fit(X, y, group=sizes)
    np.testing.assert_allclose(est3.predict(X), s)


def test_group_kfold_cross_validation_with_a_qid_column(letor):
    X, y, qid = letor
    Xq = np.column_stack([qid, X])
    est = BoostedRanker(qid_column=0, **SMALL)
    scores = cross_val_score(est, Xq, y, groups=qid, cv=GroupKFold(n_splits=3))
    assert scores.shape == (3,) and np.all((scores > 0) & (scores <= 1))
    # the same folds by hand
    for (tr, te), sc in zip(GroupKFold(n_splits=3).split(Xq, y, qid), scores):
        ref = BoostedRanker(**SMALL).fit(X[tr], y[tr], qid=qid[tr]).score(X[te], y[te],
                                                                           qid=qid[te])
        assert sc == pytest.approx(ref)


def test_group_kfold_cross_validation_with_metadata_routing(letor):
    X, y, qid = letor
    with sklearn.config_context(enable_metadata_routing=True):
        est = BoostedRanker(**SMALL).set_fit_request(qid=True).set_score_request(qid=True)
        routed = cross_val_score(est, X, y, cv=GroupKFold(n_splits=3),
                                 params={"qid": qid, "groups": qid})
    plain = cross_val_score(BoostedRanker(qid_column=0, **SMALL), np.column_stack([qid, X]), y,
                            groups=qid, cv=GroupKFold(n_splits=3))
    np.testing.assert_allclose(routed, plain)


def test_eval_set_early_stopping_and_algorithms(letor):
    X, y, qid = letor
    tr, va = qid < 30, qid >= 30
    est = BoostedRanker(n_rounds=40, early_stopping_rounds=3, learning_rate=0.5,
                        eval_metric="ndcg@5", max_leaves=4, learner_params={"min_samples_leaf": 5})
    est.fit(X[tr], y[tr], qid=qid[tr], eval_set=[(X[va], y[va], qid[va])])
    assert est.best_round_ is not None and est.n_rounds_ == est.best_round_
    # eval_qid form gives the same model
    est_b = clone(est).fit(X[tr], y[tr], qid=qid[tr], eval_set=[(X[va], y[va])],
                           eval_qid=[qid[va]])
    np.testing.assert_allclose(est_b.predict(X), est.predict(X))
    # a paper's algorithm by name, with validation tracking and early stopping
    rb = BoostedRanker(algorithm="rankboost", learner="stump", n_rounds=10,
                       early_stopping_rounds=100).fit(X[tr], y[tr], qid=qid[tr],
                                                      eval_set=[(X[va], y[va], qid[va])])
    assert rb.best_round_ is not None and rb.score(X[va], y[va], qid=qid[va]) > 0
    assert rb.evals_result_["valid_0"]["ndcg@10"] and len(rb.history_) >= rb.n_rounds_
    # an algorithm without rounds of boosting: the defaults fit it as it is
    svm = BoostedRanker(algorithm="ranksvm", params={"max_iter": 20}).fit(X[tr], y[tr],
                                                                         qid=qid[tr])
    assert svm.score(X[va], y[va], qid=qid[va]) > 0 and svm.best_round_ is None


def test_loss_and_learner_objects(letor):
    X, y, qid = letor
    from torchrankboost.boosting import Stumps
    from torchrankboost.losses import ExponentialPairwiseLoss

    est = BoostedRanker(loss=ExponentialPairwiseLoss(), learner=Stumps(criterion="least_squares"),
                        n_rounds=4).fit(X, y, qid=qid)
    assert est.model_.n_rounds == 4
    assert clone(est).get_params()["loss"] is not None


def test_bipartite_without_qid_and_torch_inputs():
    from sklearn.datasets import load_breast_cancer

    X, t = load_breast_cancer(return_X_y=True)
    X, y = torch.as_tensor(X[:200]), torch.as_tensor((t[:200] == 0).astype(np.float64))
    est = BoostedRanker(score_metric="auc", **SMALL).fit(X, y)
    assert est.score(X, y) > 0.95


def test_errors(letor):
    X, y, qid = letor
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        BoostedRanker().predict(X)
    with pytest.raises(ValueError, match="qid has 3 entries"):
        BoostedRanker(**SMALL).fit(X, y, qid=qid[:3])
    with pytest.raises(ValueError, match="group sizes add up"):
        BoostedRanker(**SMALL).fit(X, y, group=[1, 2])
    with pytest.raises(ValueError, match="not both"):
        BoostedRanker(**SMALL).fit(X, y, qid=qid, group=[len(y)])
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        BoostedRanker(loss="nope").fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="unknown metric"):
        BoostedRanker(score_metric="ndgc", **SMALL).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="qid_column=9"):
        BoostedRanker(qid_column=9).fit(X, y)
    with pytest.raises(ValueError, match="y has"):
        BoostedRanker(**SMALL).fit(X, y[:-1], qid=qid)


# ------------------------------------------------------------------ silent wrong CV scores
def test_grid_search_with_qid_to_fit_only_fails_at_once_and_the_two_ways_work(letor):
    """GridSearchCV passes qid to fit but not to score: every fold would be scored as one
    query. fit refuses it at once (before training), naming qid_column and metadata
    routing, instead of 12 tracebacks and best_score_ = nan."""
    from sklearn.model_selection import GridSearchCV

    X, y, qid = letor
    grid = {"n_rounds": [2, 6]}
    base = dict(max_leaves=4, learner_params={"min_samples_leaf": 5})
    with pytest.raises(ValueError, match=r"^BoostedRanker.fit got qid/group inside "
                                         r"scikit-learn's cross-validation.*qid_column=0.*"
                                         r"metadata routing"):
        GridSearchCV(BoostedRanker(**base), grid, cv=GroupKFold(3),
                     error_score="raise").fit(X, y, groups=qid, qid=qid)
    with pytest.raises(ValueError, match="All the 6 fits failed"):  # scikit-learn's default
        GridSearchCV(BoostedRanker(**base), grid, cv=GroupKFold(3)).fit(X, y, groups=qid,
                                                                         qid=qid)
    # way 1: a qid column; way 2: metadata routing -- the same CV scores
    g1 = GridSearchCV(BoostedRanker(qid_column=0, **base), grid, cv=GroupKFold(3)).fit(
        np.column_stack([qid, X]), y, groups=qid)
    with sklearn.config_context(enable_metadata_routing=True):
        est = BoostedRanker(**base).set_fit_request(qid=True).set_score_request(qid=True)
        g2 = GridSearchCV(est, grid, cv=GroupKFold(3)).fit(X, y, groups=qid, qid=qid)
    np.testing.assert_allclose(g1.cv_results_["mean_test_score"],
                               g2.cv_results_["mean_test_score"])
    assert g1.best_params_ == g2.best_params_
    # the hand-made reference of one fold
    tr, te = next(GroupKFold(3).split(X, y, qid))
    ref = BoostedRanker(n_rounds=2, **base).fit(X[tr], y[tr], qid=qid[tr]).score(
        X[te], y[te], qid=qid[te])
    assert g1.cv_results_["split0_test_score"][0] == pytest.approx(ref)
    # one query (bipartite ranking): no query ids needed
    est = BoostedRanker(**base).fit(X, (y > 0).astype(float))
    assert 0 < est.score(X, (y > 0).astype(float)) <= 1


def test_lightgbm_style_attributes_and_select_from_model(letor, tmp_path):
    from sklearn.feature_selection import SelectFromModel

    X, y, qid = letor
    half = np.searchsorted(qid, qid[len(qid) // 2])
    est = BoostedRanker(n_rounds=30, max_leaves=4, early_stopping_rounds=3,
                        learner_params={"min_samples_leaf": 5}).fit(
        X[:half], y[:half], qid=qid[:half], eval_set=[(X[half:], y[half:], qid[half:])])
    assert est.n_features_in_ == X.shape[1]
    assert set(est.evals_result_) == {"train", "valid_0"}
    assert len(est.evals_result_["valid_0"]["ndcg@10"]) == len(est.history_)
    assert est.best_iteration_ == est.best_round_ and 1 <= est.best_iteration_
    assert est.best_score_ == max(est.evals_result_["valid_0"]["ndcg@10"])
    gain = est.feature_importances_
    assert gain.shape == (X.shape[1],) and (gain >= 0).all() and gain.sum() > 0
    np.testing.assert_allclose(gain, est.model_.feature_importance("gain").numpy())
    splits = clone(est).set_params(importance_type="split").fit(X, y, qid=qid)
    counts = splits.feature_importances_
    assert counts.sum() > 0 and np.array_equal(counts, np.round(counts))
    np.testing.assert_array_equal(counts, splits.model_.feature_importance("count").numpy())
    sel = SelectFromModel(est, prefit=True, threshold="mean")
    assert 0 < sel.transform(X).shape[1] <= X.shape[1]
    # qid column: importance 0 in its place
    q = BoostedRanker(qid_column=0, **SMALL).fit(np.column_stack([qid, X]), y)
    assert q.feature_importances_.shape == (X.shape[1] + 1,) and q.feature_importances_[0] == 0
    # load_model returns the estimator, ready to predict
    est.save_model(tmp_path / "m.safetensors")
    back = BoostedRanker().load_model(tmp_path / "m.safetensors")
    assert isinstance(back, BoostedRanker) and back.n_features_in_ == X.shape[1]
    np.testing.assert_allclose(back.predict(X), est.predict(X))
    assert back.score(X, y, qid=qid) == pytest.approx(est.score(X, y, qid=qid))
    with pytest.raises(ValueError, match="expecting 6 features"):
        back.predict(X[:, :4])


def test_tags_sparse_input_and_linear_importances(letor):
    import scipy.sparse as sp

    X, y, qid = letor
    est = BoostedRanker(**SMALL)
    tags = est.__sklearn_tags__()
    assert tags.input_tags.sparse and tags.input_tags.allow_nan
    dense = BoostedRanker(**SMALL).fit(X, y, qid=qid)
    sparse = BoostedRanker(**SMALL).fit(sp.csr_matrix(X), y, qid=qid)
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X)), dense.predict(X))
    lin = BoostedRanker(algorithm="ranksvm", params={"max_iter": 5}).fit(X, y, qid=qid)
    assert lin.feature_importances_.shape == (X.shape[1],)


def test_check_estimator():
    """scikit-learn's own estimator checks (every one passes: input validation with its
    messages, n_features_in_, sparse input, NaN as missing)."""
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(BoostedRanker(n_rounds=3), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert not failed, failed


def test_device_without_cuda_is_one_line_and_n_jobs(letor, monkeypatch):
    X, y, qid = letor
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^device 'cuda' requested but CUDA is not available$"):
        BoostedRanker(device="cuda", **SMALL).fit(X, y, qid=qid)
    seen = []

    class Spy:
        def on_round_end(self, ranker, record):
            seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    BoostedRanker(n_jobs=2, **SMALL).fit(X, y, qid=qid, callbacks=[Spy()])
    BoostedRanker(**SMALL).fit(X, y, qid=qid, callbacks=[Spy()])
    assert seen[0] == 2 and seen[-1] == 1 and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n_jobs"):
        BoostedRanker(n_jobs=0, **SMALL).fit(X, y, qid=qid)


def test_qid_column_by_name_in_a_data_frame():
    """``qid_column="qid"`` names a data frame's column (ids of any kind, strings too): the
    same model as the ids passed apart; a name without a frame, or a missing column, is one
    ``ValueError`` (not "invalid literal for int()")."""
    pd = pytest.importorskip("pandas")
    from torchrankboost import BoostedRanker
    from torchrankboost.data import make_letor

    d = make_letor(30, 10, 5, seed=0)
    X, y, qid = d.X.numpy(), d.labels.numpy(), d.qid.numpy()
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    df.insert(2, "qid", [f"q{q}" for q in qid])
    named = BoostedRanker(n_rounds=5, qid_column="qid").fit(df, y)
    apart = BoostedRanker(n_rounds=5).fit(X, y, qid=qid)
    assert np.array_equal(named.predict(df), apart.predict(X))
    assert named.n_features_in_ == 6 and named.feature_importances_[2] == 0.0
    assert named.score(df, y) == pytest.approx(apart.score(X, y, qid=qid))
    with pytest.raises(ValueError, match="must be a data frame"):
        BoostedRanker(qid_column="qid").fit(X, y)
    with pytest.raises(ValueError, match="has no column 'q'"):
        BoostedRanker(qid_column="q").fit(df, y)


def test_no_query_ids_on_many_documents_warns_and_score_refuses():
    """fit on more than ONE_QUERY_DOCS documents with no query ids warns once, naming
    qid/group (it fits one query); score refuses to report that one query's NDCG silently
    (it was 0.54 where the per-query NDCG@10 is 0.81), and scores it when asked to
    (group=[n]); query ids silence both."""
    import warnings

    from torchrankboost.estimator.ranker import ONE_QUERY_DOCS

    d = make_letor(60, 20, 5, 3, seed=1)
    X, y, qid = d.X.numpy().astype(np.float64), d.labels.numpy(), d.qid.numpy()
    assert X.shape[0] > ONE_QUERY_DOCS
    with pytest.warns(UserWarning, match=r"no query ids \(qid=, group= or qid_column\)") as rec:
        est = BoostedRanker(**SMALL).fit(X, y)
    assert len([w for w in rec if issubclass(w.category, UserWarning)]) == 1
    with pytest.raises(ValueError, match="no query ids: the whole X would be scored as one"):
        est.score(X, y)
    assert 0.0 < est.score(X, y, group=[X.shape[0]]) <= 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = BoostedRanker(**SMALL).fit(X, y, qid=qid)
        assert fitted.score(X, y, qid=qid) > 0.0
        small = BoostedRanker(**SMALL).fit(X[:200], y[:200])  # a small bipartite fit: quiet
        assert 0.0 <= small.score(X[:200], y[:200]) <= 1.0
