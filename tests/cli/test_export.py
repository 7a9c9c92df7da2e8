"""The ``export`` command (:mod:`torchrankboost.cli.export`): each format's file read back by its
library scores as the model, and its errors are one line."""

import numpy as np
import pytest

from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.cli import main

import export_models
from export_models import feature_model, gtil_scores, linear_model, ort_scores, tolerance

treelite = pytest.importorskip("treelite")


@pytest.fixture(scope="module")
def ranksvm():
    """A linear model as ``RankSVM`` fits it, and features with NaNs."""
    return linear_model()


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
        "onnx": lambda p: ort_scores(p, Xn),
        "treelite": lambda p: gtil_scores(treelite.Model.deserialize(str(p)), Xn)}
    for fmt, read in readers.items():
        out = tmp_path / ("m." + {"lightgbm": "txt", "xgboost": "json"}.get(fmt, fmt))
        status, text, err = _export(capsys, tmp_path / "m.safetensors", "--format", fmt, "-o", out)
        assert status == 0 and err == "" and text.startswith(f"wrote {out}: ")
        np.testing.assert_allclose(read(out), ours, rtol=0, atol=tolerance(ours))


def test_cli_export_errors_are_one_line(tmp_path, capsys, ranksvm):
    ens, _ = export_models.tree_model()
    ens.save(tmp_path / "m.safetensors")
    ranksvm[0].save(tmp_path / "lin.safetensors")
    Ensemble([feature_model()], [1.0], num_features=2).save(tmp_path / "feat.safetensors")
    (tmp_path / "afile").write_text("x")
    cases = [("m", "bogus", "o", "unknown export format 'bogus'; valid choices: lightgbm, "
                                 "xgboost, onnx, treelite"),
             ("lin", "lightgbm", "o", "a linear model (LinearRanker) exports to onnx only"),
             ("feat", "xgboost", "o", "round 0: weak model FeatureModel is not a tree"),
             ("m", "onnx", "afile/m.onnx", "is a file, not a folder"),
             ("m", "onnx", "missing/dir/m.onnx", "the folder " + str(tmp_path / "missing" / "dir")
              + " does not exist"),
             ("nothere", "onnx", "o", "model not found")]
    for model, fmt, out, message in cases:
        status, text, err = _export(capsys, tmp_path / f"{model}.safetensors", "--format", fmt,
                                    "-o", tmp_path / out)
        assert status == 2 and text == ""
        assert err.startswith("torchrankboost: error: ") and err.count("\n") == 1
        assert message in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "missing").exists()
    status, text, _ = _export(capsys, tmp_path / "lin.safetensors", "-f", "onnx", "-o",
                              tmp_path / "lin.onnx")
    assert status == 0 and "(linear, 6 features)" in text
