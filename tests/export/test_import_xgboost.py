"""XGBoost's JSON and UBJSON models read by our own code: real models of every supported
objective (base score through the objective's link) and early-stopped models import with
XGBoost's own ``output_margin`` (within 1e-6 relative), and what cannot be imported is one
``ValueError`` naming the tree and node."""

import json

import numpy as np
import pytest

from torchrankboost.export import from_xgboost
from torchrankboost.export.import_xgboost import LINKS

xgb = pytest.importorskip("xgboost")


def _data(seed=0, n=240, F=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, F)).astype(np.float32)
    X[rng.random((n, F)) < 0.1] = np.nan
    z = np.nan_to_num(X[:, 0]) - 0.5 * np.nan_to_num(X[:, 1]) + 0.3 * rng.normal(size=n)
    return X, z


def _labels(objective, z):
    if objective.startswith(("binary:", "reg:logistic")) or objective == "rank:map":
        return (z > 0).astype(np.float32)
    if objective.startswith("rank:"):
        return np.digitize(z, [-0.5, 0.5, 1.2]).astype(np.float32)
    if objective in ("count:poisson", "reg:tweedie"):
        return np.floor(np.exp(np.clip(z, -3, 2))).astype(np.float32)
    if objective in ("reg:gamma", "survival:aft"):
        return np.exp(np.clip(z, -3, 2)).astype(np.float32) + 0.1
    if objective == "survival:cox":
        return np.where(z > 0, 1.0, -1.0).astype(np.float32) * (1 + np.abs(z))
    if objective == "reg:squaredlogerror":
        return np.abs(z).astype(np.float32)
    return z.astype(np.float32)


def _train(objective, X, z, rounds=12, **extra):
    y = _labels(objective, z)
    dm = xgb.DMatrix(X, y, missing=np.nan)
    if objective.startswith("rank:"):
        dm.set_group([24] * (len(y) // 24))
    if objective == "survival:aft":
        dm.set_float_info("label_lower_bound", y)
        dm.set_float_info("label_upper_bound", np.where(z > 0, y, np.inf))
    params = dict(objective=objective, nthread=1, max_depth=3, eta=0.3, seed=0, **extra)
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.3
    return xgb.train(params, dm, rounds)


def _margins(b, X, **kw):
    return b.predict(xgb.DMatrix(X, missing=np.nan), output_margin=True, **kw)


def _close(ours, theirs):
    scale = max(1.0, float(np.abs(theirs).max()))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("objective", [o for o in LINKS if o != "reg:linear"])
def test_every_supported_objective_imports_with_its_margins(objective, tmp_path):
    """A real model of each objective, from the booster, its JSON file and its UBJSON file:
    the margins equal XGBoost's output_margin (the base score through the link)."""
    X, z = _data()
    b = _train(objective, X, z)
    theirs = _margins(b, X)
    b.save_model(str(tmp_path / "m.json"))
    b.save_model(str(tmp_path / "m.ubj"))
    for src in (b, tmp_path / "m.json", tmp_path / "m.ubj",
                (tmp_path / "m.json").read_bytes()):
        ens = from_xgboost(src)
        assert ens.info["objective"] == objective
        _close(ens.predict(X).numpy(), theirs)
        _close(ens.predict(X.astype(np.float64)).numpy(), theirs)


def test_an_early_stopped_model_keeps_its_best_iteration(tmp_path):
    """Early stopping: the import keeps the rounds up to best_iteration, as XGBRanker's
    predict and iteration_range do; all_trees=True keeps every tree (Booster.predict's
    default). Also through a file and the scikit-learn ranker."""
    X, z = _data(1, n=480)
    y = _labels("rank:ndcg", z)
    tr, va = slice(0, 240), slice(240, 480)
    dtr, dva = (xgb.DMatrix(X[s], y[s], missing=np.nan) for s in (tr, va))
    dtr.set_group([24] * 10)
    dva.set_group([24] * 10)
    b = xgb.train(dict(objective="rank:ndcg", nthread=1, max_depth=4, eta=0.6, seed=0),
                  dtr, 200, evals=[(dva, "va")], early_stopping_rounds=3, verbose_eval=False)
    best = b.best_iteration
    assert best + 1 < b.num_boosted_rounds()
    b.save_model(str(tmp_path / "m.json"))
    for src in (b, tmp_path / "m.json"):
        ens = from_xgboost(src)
        assert ens.n_rounds == best + 1 and ens.info["best_iteration"] == best
        _close(ens.predict(X).numpy(), _margins(b, X, iteration_range=(0, best + 1)))
        every = from_xgboost(src, all_trees=True)
        assert every.n_rounds == b.num_boosted_rounds()
        _close(every.predict(X).numpy(), _margins(b, X, iteration_range=(0, 0)))
    ranker = xgb.XGBRanker(n_estimators=200, max_depth=4, learning_rate=0.6, n_jobs=1,
                           early_stopping_rounds=3, objective="rank:ndcg")
    qid = np.repeat(np.arange(20), 24)
    ranker.fit(X[tr], y[tr], qid=qid[tr], eval_set=[(X[va], y[va])], eval_qid=[qid[va]],
               verbose=False)
    _close(from_xgboost(ranker).predict(X).numpy(), ranker.predict(X, output_margin=True))


def _doc(objective="reg:squarederror"):
    X, z = _data(2, n=120)
    return json.loads(bytes(_train(objective, X, z, rounds=3).save_raw("json")))


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, 10 ** 9), "tree 0, node 0: split feature 1000000000 outside"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"]
     .__setitem__(0, -2), "tree 0, node 0: child index -2 outside"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][1]["right_children"]
     .__setitem__(0, 0), "tree 1, node 0: reached twice"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, 1.5), "not an integer"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"]
     .__setitem__(0, True), "not an integer"),
    (lambda d: d["learner"]["gradient_booster"]["model"]["trees"][0]["split_conditions"]
     .__setitem__(0, float("nan")), "tree 0, node 0: threshold nan is not finite"),
    (lambda d: d["learner"]["objective"].__setitem__("name", "multi:softprob"), "multi-class"),
    (lambda d: d["learner"]["objective"].__setitem__("name", "reg:mystery"), "not supported"),
    (lambda d: d["learner"]["learner_model_param"].__setitem__("num_target", "2"),
     "multi-target"),
    (lambda d: d["learner"]["gradient_booster"].__setitem__("name", "gblinear"), "gblinear"),
    (lambda d: d["learner"]["attributes"].__setitem__("best_iteration", "7"),
     "best_iteration 7 outside"),
])
def test_damaged_models_are_one_valueerror(edit, says):
    doc = _doc()
    doc["learner"].setdefault("attributes", {})
    edit(doc)
    with pytest.raises(ValueError, match=says.replace("(", r"\(")) as err:
        from_xgboost(doc)
    assert "\n" not in str(err.value) and str(err.value).startswith("from_xgboost: ")
