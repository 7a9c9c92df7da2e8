"""Export acceptance: on MQ2008 Fold1 (synthetic LETOR data when it is absent) with NaNs
injected in some features, a 50-round exponential-loss tree ensemble, a stump ensemble and
the models imported back with ``from_lightgbm`` / ``from_xgboost`` score the test set in
LightGBM, XGBoost, onnxruntime, Treelite and the ``to_torch`` module within
``1e-5 · (1 + max|s|)`` of ``model.predict``; the same on LightGBM's lambdarank example
(sparse features); and an ``lgb.train`` lambdarank model imported with ``from_lightgbm``
gives LightGBM's scores within 1e-6 and is improved (validation loss) by boosting on with
our exponential loss. The models are fitted once per session."""

import functools

import numpy as np
import pytest
import torch

from torchrankboost.boosting import Booster
from torchrankboost.boosting.learners import RegressionTree, Stumps
from torchrankboost.data import dataset_path, load_files, make_letor
from torchrankboost.export import (from_lightgbm, from_xgboost, to_lightgbm, to_onnx, to_torch,
                                   to_treelite, to_xgboost)
from torchrankboost.losses import ExponentialPairwiseLoss

from export_models import tolerance

lgb = pytest.importorskip("lightgbm")
xgb = pytest.importorskip("xgboost")


def _with_nans(X, features, seed):
    X = X.clone()
    gen = torch.Generator().manual_seed(seed)
    for f in features:
        X[torch.rand(X.shape[0], generator=gen) < 0.2, f] = float("nan")
    return X


@functools.lru_cache(maxsize=None)
def _letor():
    """``(train, test)`` ``(X, y, groups)``: MQ2008 Fold1 train/test, else synthetic; 20 %
    NaN in features 0, 5, 11 (and 40 on MQ2008)."""
    fold = dataset_path("mq2008", "Fold1")
    if (fold / "train.txt").exists() and (fold / "test.txt").exists():
        tr, te = load_files([fold / "train.txt", fold / "test.txt"])
        parts = [(tr.X, tr.labels, tr.groups), (te.X, te.labels, te.groups)]
    else:
        parts = [tuple(make_letor(300, 20, 46, seed=s)) for s in (0, 1)]  # (X, y, groups)
    nan_features = [f for f in (0, 5, 11, 40) if f < parts[0][0].shape[1]]
    return tuple((_with_nans(X, nan_features, seed), y, g)
                 for seed, (X, y, g) in enumerate(parts))


@functools.lru_cache(maxsize=None)
def _fitted(kind):
    (X, y, g), _ = _letor()
    if kind == "tree":
        learner, rounds, lr = RegressionTree(max_leaves=8, min_samples_leaf=5), 50, 0.3
    else:
        learner, rounds, lr = Stumps(max_thresholds=16), 20, 0.5
    ens = Booster(ExponentialPairwiseLoss(), learner, n_rounds=rounds, learning_rate=lr).fit(X, y, g)
    assert ens.n_rounds == rounds
    return ens


@functools.lru_cache(maxsize=None)
def _imported(source, tmp):
    ens = _fitted("tree")
    if source == "lightgbm":
        to_lightgbm(ens, f"{tmp}/rt.txt")
        return from_lightgbm(f"{tmp}/rt.txt")
    to_xgboost(ens, f"{tmp}/rt.json")
    return from_xgboost(f"{tmp}/rt.json")


# ----------------------------------------------------------------------------- scorers
def _lightgbm(ens, X, tmp):
    to_lightgbm(ens, tmp / "m.txt")
    return lgb.Booster(model_file=str(tmp / "m.txt")).predict(X, raw_score=True)


def _xgboost(ens, X, tmp):
    to_xgboost(ens, tmp / "m.json")
    booster = xgb.Booster(model_file=str(tmp / "m.json"))
    return booster.predict(xgb.DMatrix(X, missing=np.nan), output_margin=True)


def _onnx(ens, X, tmp):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    to_onnx(ens, tmp / "m.onnx")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(tmp / "m.onnx"), opts, providers=["CPUExecutionProvider"])
    return sess.run(["scores"], {"X": np.asarray(X, dtype=np.float32)})[0][:, 0]


def _treelite(ens, X, tmp):
    treelite = pytest.importorskip("treelite")
    model = to_treelite(ens)
    back = treelite.Model.deserialize_bytes(model.serialize_bytes())  # what the CLI writes
    return treelite.gtil.predict(back, np.asarray(X), nthread=1, pred_margin=True).reshape(-1)


def _torch(ens, X, tmp):
    with torch.no_grad():
        return to_torch(ens)(torch.as_tensor(X)).numpy()


SCORERS = {"lightgbm": _lightgbm, "xgboost": _xgboost, "onnx": _onnx, "treelite": _treelite,
           "torch": _torch}


def _model(which, tmp_path_factory):
    if which.startswith("from_"):
        return _imported(which[5:], str(tmp_path_factory.getbasetemp()))
    return _fitted(which)


@pytest.mark.parametrize("fmt", list(SCORERS))
@pytest.mark.parametrize("which", ["tree", "stump", "from_lightgbm", "from_xgboost"])
def test_every_format_scores_the_test_set_as_predict(which, fmt, tmp_path, tmp_path_factory):
    ens = _model(which, tmp_path_factory)
    _, (X, _, _) = _letor()
    assert torch.isnan(X).any()
    ours = ens.predict(X).numpy()
    theirs = SCORERS[fmt](ens, X.numpy(), tmp_path)
    assert theirs.shape == ours.shape
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(ours))


def test_imported_back_models_predict_as_the_original(tmp_path_factory):
    ens = _fitted("tree")
    _, (X, _, _) = _letor()
    ours = ens.predict(X)
    assert torch.equal(_model("from_lightgbm", tmp_path_factory).predict(X), ours)
    back = _model("from_xgboost", tmp_path_factory).predict(X).numpy()
    np.testing.assert_allclose(back, ours.numpy(), rtol=0, atol=tolerance(ours.numpy()))


# ----------------------------------------------------------------------------- lambdarank example
@functools.lru_cache(maxsize=None)
def _lambdarank_example():
    folder = dataset_path("lightgbm_lambdarank")
    if not (folder / "rank.train").exists():
        pytest.skip(f"LightGBM's lambdarank example not found under {folder}")
    return tuple(load_files([folder / "rank.train", folder / "rank.test"]))


def test_lambdarank_example_sparse_features_in_every_format(tmp_path):
    scipy_sparse = pytest.importorskip("scipy.sparse")
    tr, te = _lambdarank_example()
    assert (tr.X == 0).float().mean() > 0.5  # mostly absent (zero) features
    ens = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=8, min_samples_leaf=5),
                  n_rounds=20, learning_rate=0.3).fit(tr.X, tr.labels, tr.groups)
    X = te.X.numpy()
    ours = ens.predict(te.X).numpy()
    tol = tolerance(ours)
    for fmt, score in SCORERS.items():  # dense inputs: XGBoost and Treelite read an absent
        np.testing.assert_allclose(score(ens, X, tmp_path), ours, rtol=0, atol=tol)  # entry as NaN
    # LightGBM reads a CSR matrix's absent entries as 0, as our loader does
    sparse = lgb.Booster(model_file=str(tmp_path / "m.txt")).predict(
        scipy_sparse.csr_matrix(X), raw_score=True)
    np.testing.assert_allclose(sparse, ours, rtol=0, atol=tol)


def test_lgb_lambdarank_imported_then_boosted_on_with_our_loss():
    tr, te = _lambdarank_example()
    params = dict(objective="lambdarank", num_threads=1, verbose=-1, num_leaves=15,
                  min_data_in_leaf=20, deterministic=True, learning_rate=0.1)
    ds = lgb.Dataset(tr.X.numpy(), tr.labels.numpy(), group=tr.groups.sizes.numpy())
    booster = lgb.train(params, ds, num_boost_round=30)
    start = from_lightgbm(booster)
    theirs = booster.predict(te.X.numpy(), raw_score=True)
    np.testing.assert_allclose(start.predict(te.X).numpy(), theirs, rtol=0, atol=1e-6)
    loss = ExponentialPairwiseLoss()
    ens = Booster(loss, RegressionTree(max_leaves=8, min_samples_leaf=10), n_rounds=10,
                  learning_rate=0.05).fit(tr.X, tr.labels, tr.groups, init_model=start)
    assert ens.n_rounds == 40

    def valid_loss(model):
        return float(loss(model.predict(te.X), te.labels, te.groups))

    assert valid_loss(ens) < valid_loss(start)
