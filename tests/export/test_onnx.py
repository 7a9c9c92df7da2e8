"""Export to ONNX: onnxruntime's scores of the written graph equal ours (tree and stump ensembles,
and a linear ranker as RankSVM fits it)."""

import numpy as np
import pytest
import torch

from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import FeatureModel, TreeModel
from torchrankboost.export.onnx import onnx_threshold, to_onnx

import export_models
from export_models import hand_tree, linear_model, ort_scores, tolerance

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def _onnx_scores(ens, X, path):
    to_onnx(ens, path)
    onnx.checker.check_model(onnx.load(str(path)))  # a valid graph
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    out = session.run(["scores"], {"X": X.numpy().astype(np.float32)})[0]
    assert out.shape == (X.shape[0], 1)
    return out[:, 0]


def _threshold_rows(ens, X):
    """Rows with a feature set to each split threshold and the float32 values around it."""
    rows = []
    for m in ens.models:
        features = m.split_feature.tolist() if isinstance(m, TreeModel) else [int(m.feature)]
        thresholds = m.threshold.reshape(-1).tolist()
        for f, t in zip(features, thresholds):
            for v in (t, np.nextafter(np.float32(t), np.float32(np.inf)),
                      np.nextafter(np.float32(t), np.float32(-np.inf))):
                r = X[len(rows) % X.shape[0]].clone()
                r[f] = float(v)
                rows.append(r)
    return torch.cat([X, torch.stack(rows)])


@pytest.fixture(scope="module")
def tree_model():
    return export_models.tree_model()


@pytest.fixture(scope="module")
def stump_model():
    return export_models.stump_model()


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_onnxruntime_scores_as_the_exported_ensemble(which, request, tmp_path):
    model, X = request.getfixturevalue(which)
    ens = getattr(model, "model_", model)
    Z = _threshold_rows(ens, X)
    ours = ens.predict(Z).numpy()
    theirs = _onnx_scores(model, Z, tmp_path / "model.onnx")
    assert np.isnan(Z.numpy()).any()
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(ours))


def test_onnx_carries_base_score_constant_rounds_nan_splits_and_ties(tree_model, tmp_path):
    ens, X = tree_model
    constant = hand_tree([], [], [], [], [], [0.5])
    nan_split = hand_tree([1], [float("inf")], [False], [~0], [~1], [-0.25, 1.5])  # NaN vs the rest
    models = [constant] + ens.models[:5] + [nan_split] + ens.models[5:]
    weights = [0.7] + ens.weights[:5] + [0.9] + ens.weights[5:]
    big = Ensemble(models, weights, base_score=0.75, num_features=ens.num_features)
    Z = _threshold_rows(ens, X)
    Z[::3, 1] = float("nan")
    ours = big.predict(Z).numpy()
    theirs = _onnx_scores(big, Z, tmp_path / "m.onnx")
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(ours))


def test_onnx_float64_thresholds_decide_as_ours_on_float32_inputs(tmp_path):
    theta = 0.1  # not a float32: the graph holds the largest float32 below it
    assert onnx_threshold(theta) < theta and onnx_threshold(float(np.float32(theta))) == np.float32(theta)
    tree = hand_tree([0], [theta], [True], [~0], [~1], [1.0, 2.0], dtype=torch.float64)
    ens = Ensemble([tree], [1.0], num_features=1)
    t32 = np.float32(theta)
    Z = torch.tensor([[float(t32)], [float(np.nextafter(t32, np.float32(-1)))],
                      [float(np.nextafter(t32, np.float32(1)))], [float("nan")]],
                     dtype=torch.float64)
    ours = ens.predict(Z).numpy()
    np.testing.assert_array_equal(_onnx_scores(ens, Z.float(), tmp_path / "m.onnx"), ours)


def test_onnx_refuses_weak_models_that_are_not_trees(tmp_path):
    m = FeatureModel(feature=0, lo=torch.tensor(0.0), hi=torch.tensor(1.0),
                     coef=torch.tensor([0.0, 1.0]), normalize=False)
    with pytest.raises(ValueError, match="to_onnx: round 0: weak model FeatureModel"):
        to_onnx(Ensemble([m], [1.0], num_features=2), tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="expected a fitted boosting Ensemble"):
        to_onnx(object(), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


@pytest.fixture(scope="module")
def ranksvm():
    """A linear model as ``RankSVM`` fits it, and features with NaNs."""
    return linear_model()


def test_ranksvm_linear_model_to_onnx(ranksvm, tmp_path):
    pytest.importorskip("onnx")
    from torchrankboost.export import to_onnx

    model, X = ranksvm
    to_onnx(model, tmp_path / "lin.onnx")
    ours = model.predict(X).numpy()
    np.testing.assert_allclose(ort_scores(tmp_path / "lin.onnx", X), ours, rtol=0,
                               atol=tolerance(ours))
