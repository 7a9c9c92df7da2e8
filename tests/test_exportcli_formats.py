"""``to_treelite`` on the edge cases (base score, constant rounds, a NaN-only split, inputs
at the thresholds, float64 thresholds), ``to_onnx`` of a linear ranker (RankSVM), and the
``torchrankboost export`` command: each format's file read back by its library scores as
the model, and its errors are one line."""

import numpy as np
import pytest
import torch

from torchrankboost import LinearRanker
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import FeatureModel, TreeModel
from torchrankboost.cli import main
from torchrankboost.data import make_letor
from torchrankboost.export import to_treelite

import export_models
from export_models import hand_tree, tolerance

treelite = pytest.importorskip("treelite")


def _gtil(m, X):
    return treelite.gtil.predict(m, np.asarray(X), nthread=1, pred_margin=True).reshape(-1)


def _threshold_rows(ens, X):
    rows = []
    for m in ens.models:
        features = m.split_feature.tolist() if isinstance(m, TreeModel) else [int(m.feature)]
        for f, t in zip(features, m.threshold.reshape(-1).tolist()):
            for v in (t, np.nextafter(np.float32(t), np.float32(np.inf)),
                      np.nextafter(np.float32(t), np.float32(-np.inf))):
                r = X[len(rows) % X.shape[0]].clone()
                r[f] = float(v)
                rows.append(r)
    return torch.cat([X, torch.stack(rows)])


@pytest.mark.parametrize("make", [export_models.tree_model, export_models.stump_model])
def test_treelite_carries_base_score_constant_rounds_nan_splits_and_ties(make):
    model, X = make()
    ens = getattr(model, "model_", model)
    constant = hand_tree([], [], [], [], [], [0.5])
    nan_split = hand_tree([1], [float("inf")], [False], [~0], [~1], [-0.25, 1.5])
    big = Ensemble([constant] + ens.models[:5] + [nan_split] + ens.models[5:],
                   [0.7] + ens.weights[:5] + [0.9] + ens.weights[5:], base_score=0.75,
                   num_features=ens.num_features)
    Z = _threshold_rows(ens, X)
    Z[::3, 1] = float("nan")
    for Zi in (Z, Z.double()):  # float32 trees compare float32(x): float64 inputs too
        ours = big.predict(Zi).numpy()
        np.testing.assert_allclose(_gtil(to_treelite(big), Zi.numpy()), ours, rtol=0,
                                   atol=1e-12 * (1 + np.abs(ours).max()))


def test_treelite_float64_thresholds_and_empty_ensembles():
    theta = 0.1  # not a float32: compared in float64
    tree = hand_tree([0], [theta], [True], [~0], [~1], [1.0, 2.0], dtype=torch.float64)
    ens = Ensemble([tree], [1.0], num_features=1)
    Z = torch.tensor([[theta], [np.nextafter(theta, 1.0)], [np.nextafter(theta, 0.0)],
                      [float("nan")]], dtype=torch.float64)
    np.testing.assert_array_equal(_gtil(to_treelite(ens), Z.numpy()), ens.predict(Z).numpy())
    empty = Ensemble([], [], base_score=0.25, num_features=3)
    np.testing.assert_array_equal(_gtil(to_treelite(empty), np.zeros((2, 3))), [0.25, 0.25])
    with pytest.raises(ValueError, match="to_treelite: round 0: weak model FeatureModel"):
        to_treelite(Ensemble([_feature_model()], [1.0], num_features=2))


def _feature_model():
    return FeatureModel(feature=0, lo=torch.tensor(0.0), hi=torch.tensor(1.0),
                        coef=torch.tensor([0.0, 1.0]), normalize=False)


def _ort_scores(path, X):
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(["scores"], {"X": np.asarray(X, dtype=np.float32)})[0][:, 0]


@pytest.fixture(scope="module")
def ranksvm():
    """A linear model as ``RankSVM`` fits it (``LinearRanker``: ``w·x + b``, float64), and
    features with NaNs (counting as 0). Built directly: RankSVM's L-BFGS imports
    ``torch._dynamo`` (seconds), and ``boosting/papers/test_ranksvm.py`` checks the fit."""
    X, _, _ = make_letor(30, 10, 6, seed=0)
    X = X.clone()
    X[::4, 1] = float("nan")
    w = torch.linspace(-1.3, 2.1, 6, dtype=torch.float64) / 3.0
    return LinearRanker(w, bias=-0.123456789, info={"algorithm": "ranksvm"}), X


def test_ranksvm_linear_model_to_onnx(ranksvm, tmp_path):
    pytest.importorskip("onnx")
    from torchrankboost.export import to_onnx

    model, X = ranksvm
    to_onnx(model, tmp_path / "lin.onnx")
    ours = model.predict(X).numpy()
    np.testing.assert_allclose(_ort_scores(tmp_path / "lin.onnx", X), ours, rtol=0,
                               atol=tolerance(ours))


# ----------------------------------------------------------------------------- the CLI
def _export(capsys, *argv):
    status = main(["export", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_export_writes_files_their_libraries_score_as_the_model(tmp_path, capsys):
    lgb = pytest.importorskip("lightgbm")
    xgb = pytest.importorskip("xgboost")
    ens, X = export_models.tree_model()
    ens.save(tmp_path / "m.safetensors")
    ours = ens.predict(X).numpy()
    Xn = X.numpy()
    readers = {
        "lightgbm": lambda p: lgb.Booster(model_file=str(p)).predict(Xn, raw_score=True),
        "xgboost": lambda p: xgb.Booster(model_file=str(p)).predict(
            xgb.DMatrix(Xn, missing=np.nan), output_margin=True),
        "onnx": lambda p: _ort_scores(p, Xn),
        "treelite": lambda p: _gtil(treelite.Model.deserialize(str(p)), Xn)}
    for fmt, read in readers.items():
        out = tmp_path / ("m." + {"lightgbm": "txt", "xgboost": "json"}.get(fmt, fmt))
        status, text, err = _export(capsys, tmp_path / "m.safetensors", "--format", fmt, "-o", out)
        assert status == 0 and err == "" and text.startswith(f"wrote {out}: ")
        np.testing.assert_allclose(read(out), ours, rtol=0, atol=tolerance(ours))


def test_cli_export_errors_are_one_line(tmp_path, capsys, ranksvm):
    ens, _ = export_models.tree_model()
    ens.save(tmp_path / "m.safetensors")
    ranksvm[0].save(tmp_path / "lin.safetensors")
    Ensemble([_feature_model()], [1.0], num_features=2).save(tmp_path / "feat.safetensors")
    (tmp_path / "afile").write_text("x")
    cases = [("m", "bogus", "o", "unknown export format 'bogus'; valid choices: lightgbm, "
                                 "xgboost, onnx, treelite"),
             ("lin", "lightgbm", "o", "a linear model (LinearRanker) exports to onnx only"),
             ("feat", "xgboost", "o", "round 0: weak model FeatureModel is not a tree"),
             ("m", "onnx", "afile/m.onnx", "is a file, not a folder"),
             ("nothere", "onnx", "o", "model not found")]
    for model, fmt, out, message in cases:
        status, text, err = _export(capsys, tmp_path / f"{model}.safetensors", "--format", fmt,
                                    "-o", tmp_path / out)
        assert status == 2 and text == ""
        assert err.startswith("torchrankboost: error: ") and err.count("\n") == 1
        assert message in err
    assert not (tmp_path / "o").exists()
    status, text, _ = _export(capsys, tmp_path / "lin.safetensors", "-f", "onnx", "-o",
                              tmp_path / "lin.onnx")
    assert status == 0 and "(linear, 6 features)" in text
