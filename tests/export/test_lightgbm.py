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
