"""Export to LightGBM: its predictions of the written files equal ours."""

import numpy as np
import pytest

import export_models
from export_models import lightgbm_scores, tolerance


@pytest.fixture(scope="module")
def tree_model():
    return export_models.tree_model()


@pytest.fixture(scope="module")
def stump_model():
    rb, X = export_models.stump_model()
    return rb.model_, X


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_lightgbm_predicts_as_the_exported_ensemble(which, request, tmp_path):
    ens, X = request.getfixturevalue(which)
    ours = ens.predict(X).numpy()
    theirs = lightgbm_scores(ens, X, tmp_path / "model.txt")
    assert np.isnan(X.numpy()).any()
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(ours))
    # float64 inputs take the same branches (thresholds placed for float32 rounding)
    theirs64 = lightgbm_scores(ens, X.double(), tmp_path / "model64.txt")
    np.testing.assert_allclose(theirs64, ens.predict(X.double()).numpy(), rtol=0,
                               atol=tolerance(ours))


def test_a_missing_output_folder_is_refused_not_created(tree_model, tmp_path):
    """Every writer refuses a path in a folder that does not exist (never creates it)."""
    from torchrankboost.export import to_lightgbm, to_onnx, to_xgboost

    ens, _ = tree_model
    writers = [lambda p: to_lightgbm(ens, p), lambda p: to_xgboost(ens, p), ens.save]
    if _has("onnx"):
        writers.append(lambda p: to_onnx(ens, p))
    for write in writers:
        with pytest.raises(OSError):
            write(tmp_path / "missing" / "dir" / "m.out")
        assert not (tmp_path / "missing").exists()


def _has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
