"""The ranker contract, checked on every registered algorithm: the same ``fit`` signature and
inputs, evaluation sets and early stopping, records, callbacks, saved models and errors (a
NaN validation metric, infinite features or labels, an interrupted or failing fit that keeps
the last good round)."""

import math

import numpy as np
import pytest
import torch

from torchrankboost import registry
from torchrankboost.boosting.learners import RegressionTree, Stumps
from torchrankboost.contract import FitInfo, NumericalError, Ranker, RankingModel, RoundRecord
from torchrankboost.data import make_letor
from torchrankboost.factory import make_ranker
from torchrankboost.losses import ExponentialPairwiseLoss
from conftest import Recorder

ALGORITHMS = registry.names("algorithm")


def _params(name):
    """Small, fast settings for each algorithm (its weak learner where it takes one)."""
    tree = RegressionTree(max_leaves=4, min_samples_leaf=2)
    return {
        "boost": dict(loss=ExponentialPairwiseLoss(), learner=tree, n_rounds=10),
        "qbrank": dict(learner=tree, n_rounds=10, learning_rate=0.3),
        "gbt": dict(learner=tree, n_rounds=10, learning_rate=0.3),
        "ranksvm": dict(max_iter=10),
        "rankboost_plus": dict(learner=Stumps(max_thresholds=4), n_rounds=10),
    }.get(name, dict(learner=Stumps(max_thresholds=8), n_rounds=10))


def _make(name, **more):
    return registry.create("algorithm", name, **_params(name), **more)


@pytest.fixture(scope="module")
def data():
    X, y, g = make_letor(12, 10, 5, n_grades=3, seed=0, noise=1.5)
    Xv, yv, gv = make_letor(8, 10, 5, n_grades=3, seed=1, noise=1.5)
    return X, y, g, Xv, yv, gv


def test_every_registered_algorithm_is_covered():
    """The contract runs over the registry's algorithms: a new one is checked by registering
    it (``_params`` gives it small settings, a stump dictionary by default)."""
    assert len(ALGORITHMS) >= 9 and {"boost", "rankboost", "ranksvm"} <= set(ALGORITHMS)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_fit_predict_and_attributes(name, data):
    X, y, g, *_ = data
    algo = _make(name)
    assert isinstance(algo, Ranker)  # before any fit too
    assert algo.model_ is None and algo.history_ == [] and algo.best_round_ is None
    with pytest.raises(ValueError, match="not fitted"):
        algo.predict(X)
    model = algo.fit(X, y, g)
    assert isinstance(algo, Ranker) and isinstance(model, RankingModel)
    assert model is algo.model_ and model.num_features == X.shape[1]
    s = algo.predict(X)
    assert s.shape == (X.shape[0],) and torch.equal(s, model.predict(X))
    assert 1 <= len(algo.history_) <= 10
    assert all(isinstance(r, RoundRecord) for r in algo.history_)
    assert [r.round for r in algo.history_] == list(range(1, len(algo.history_) + 1))
    losses = [r.loss for r in algo.history_]
    assert algo.evals_result_["train"]["loss"] == losses
    assert all(math.isfinite(v) for v in losses)
    assert algo.best_round_ is None and algo.best_score_ is None
    assert algo.stop_reason_ is None or isinstance(algo.stop_reason_, str)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_numpy_inputs_and_query_ids(name, data):
    X, y, g, *_ = data
    qid = g.group_index.numpy() * 7 + 3
    a = _make(name).fit(X.numpy(), y.numpy(), qid)
    b = _make(name).fit(X, y, g)
    assert torch.allclose(a.predict(X), b.predict(X.numpy()), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_eval_set_and_early_stopping(name, data):
    """Per-round evaluation (incremental for the boosters), the best round of the first metric
    on the first set, and the model cut back to it: its predictions score ``best_score_``."""
    X, y, g, Xv, yv, gv = data
    algo = _make(name)
    model = algo.fit(X, y, g, eval_set=[(Xv, yv, gv), (X, y, g)],
                     eval_metric=["ndcg@5", "pos_above_neg"], early_stopping_rounds=2)
    res = algo.evals_result_
    assert set(res) == {"train", "valid_0", "valid_1"}
    nd = res["valid_0"]["ndcg@5"]
    assert len(nd) == len(res["valid_1"]["pos_above_neg"]) == len(algo.history_)
    best = max(range(len(nd)), key=lambda i: (nd[i], -i)) + 1
    assert algo.best_round_ == best and algo.best_score_ == nd[best - 1]
    assert len(nd) <= best + 2  # patience 2
    if len(nd) == best + 2:
        assert "early stopping" in algo.stop_reason_
    ndcg5 = registry.metric("ndcg@5")
    assert ndcg5(model.predict(Xv), yv, gv) == pytest.approx(algo.best_score_, abs=1e-9)
    assert ndcg5(model.predict(X), y, g) == pytest.approx(res["valid_1"]["ndcg@5"][best - 1],
                                                          abs=1e-9)
    rec = algo.history_[-1]
    assert set(rec.metrics) == {"train", "valid_0", "valid_1"}
    assert rec.metrics["valid_0"]["ndcg@5"] == nd[-1] and rec.best_round == best


@pytest.mark.parametrize("name", ALGORITHMS)
def test_loss_metric_is_the_training_objective(name, data):
    X, y, g, *_ = data
    algo = _make(name)
    if name == "rankboost_plus":  # its objective depends on each ranker's ties
        with pytest.raises(ValueError, match="loss"):
            algo.fit(X, y, g, eval_set=[(X, y, g)], eval_metric="loss")
        return
    algo.fit(X, y, g, eval_set=[(X, y, g)], eval_metric="loss")
    on_train = algo.evals_result_["valid_0"]["loss"]
    reported = algo.evals_result_["train"]["loss"]
    assert len(on_train) == len(reported) == len(algo.history_)
    for a, b in zip(on_train, reported):
        if name == "ranksvm":  # a set's "loss" is the data term: the primal minus ½‖w‖²
            assert 0 <= a <= b + 1e-12
        else:
            assert a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_save_load_roundtrip(name, data, tmp_path):
    X, y, g, Xv, *_ = data
    model = _make(name).fit(X, y, g)
    path = tmp_path / f"{name}.safetensors"
    model.save(path)
    again = type(model).load(path)
    assert torch.equal(again.predict(Xv), model.predict(Xv))
    from torchrankboost import load_model

    assert torch.equal(load_model(path).predict(Xv), model.predict(Xv))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_callbacks_see_the_same_records(name, data):
    X, y, g, Xv, yv, gv = data
    ctor, fit_cb = Recorder(), Recorder(stop_at=2)
    algo = _make(name, callbacks=[ctor])
    model = algo.fit(X, y, g, eval_set=[(Xv, yv, gv)], callbacks=[fit_cb])
    for rec in (ctor, fit_cb):
        kinds = [e[0] for e in rec.events]
        assert kinds == ["start", "round", "round", "end"]
        info = rec.events[0][1]
        assert isinstance(info, FitInfo) and info.algorithm == name
        assert (info.n_docs, info.n_queries, info.n_features) == (X.shape[0], g.num_groups,
                                                                  X.shape[1])
        assert info.eval_names == ["valid_0"] and info.metric_names == ["ndcg@10"]
        for k, (_, r) in enumerate(rec.events[1:3], start=1):
            assert isinstance(r, RoundRecord) and r.round == k and r is algo.history_[k - 1]
            assert r.loss is not None and math.isfinite(r.step) and math.isfinite(r.weight)
            assert set(r.metrics) == {"train", "valid_0"} and r.seconds >= 0
            assert r.best_round is not None and r.get("nothing", 7) == 7
        assert rec.events[-1][1] is model and rec.rankers == {id(algo)}
    assert "callback" in algo.stop_reason_ and len(algo.history_) == 2


@pytest.mark.parametrize("name", ALGORITHMS)
def test_same_errors_for_the_same_bad_inputs(name, data):
    X, y, g, Xv, yv, gv = data
    algo = _make(name)
    with pytest.raises(ValueError, match="features"):
        algo.fit(X, y, g, eval_set=[(Xv[:, :3], yv, gv)])
    with pytest.raises(ValueError, match="labels has"):
        algo.fit(X, y[:-1], g)
    ynan = y.clone().float()
    ynan[2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        algo.fit(X, ynan, g)
    with pytest.raises(ValueError, match=r"eval_set\[0\] labels has \d+ entries but "
                                         r"eval_set\[0\] X has"):
        algo.fit(X, y, g, eval_set=[(Xv, yv[:-1], gv)])
    with pytest.raises(ValueError, match="early_stopping_rounds needs an eval_set"):
        algo.fit(X, y, g, early_stopping_rounds=3)
    with pytest.raises(ValueError, match="eval_metric: unknown metric"):
        algo.fit(X, y, g, eval_set=[(Xv, yv, gv)], eval_metric="bleu")
    with pytest.raises(ValueError, match="2-D"):
        algo.fit(X[:, 0], y, g)
    with pytest.raises(ValueError, match="groups cover"):
        algo.fit(X, y, np.zeros(X.shape[0] - 1, dtype=np.int64))


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


def _ranker(alg, n_rounds=4):
    return make_ranker(alg) if alg == "ranksvm" else make_ranker(alg, n_rounds=n_rounds)


def test_nan_validation_metric_is_an_error_naming_the_metric_for_every_algorithm():
    X, y, g = _data()
    for alg in ALGORITHMS:
        r = _ranker(alg)
        with pytest.raises(NumericalError, match="valid_0 nanmetric is NaN"):
            r.fit(X, y, g, eval_set=[(X, y, g)],
                  eval_metric=("nanmetric", lambda s, yy, gg: float("nan"), True),
                  early_stopping_rounds=2)


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_every_algorithm_refuses_infinite_features_naming_the_column(alg):
    X, y, g = _data()
    Xi = X.clone()
    Xi[3, 2] = float("inf")
    with pytest.raises(ValueError, match="column 2"):
        _ranker(alg).fit(Xi, y, g)
    with pytest.raises(ValueError, match="eval_set.*column 2"):
        _ranker(alg).fit(X, y, g, eval_set=[(Xi, y, g)])
    yy = y.clone()
    yy[0] = float("inf")
    with pytest.raises(ValueError, match="labels"):
        _ranker(alg).fit(X, yy, g)


class _Boom:
    def __init__(self, at, exc):
        self.at, self.exc = at, exc

    def on_round_end(self, ranker, record):
        if record.round == self.at:
            raise self.exc


@pytest.mark.parametrize("alg", ALGORITHMS)
@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("callback broke")])
def test_interrupted_or_failing_fit_keeps_the_last_good_round(alg, exc):
    X, y, g = _data()
    r = _ranker(alg, n_rounds=6)
    with pytest.raises(type(exc)):
        r.fit(X, y, g, callbacks=[_Boom(1, exc)])
    assert r.model_ is not None and r.model_.info["partial"] is True
    assert len(r.history_) == 1
    assert ("interrupted" if isinstance(exc, KeyboardInterrupt) else "callback broke") \
        in r.stop_reason_
    assert r.model_.predict(X).shape == (len(y),)
