"""Export to XGBoost: its predictions of the written files equal ours."""

import numpy as np
import pytest

import export_models
from export_models import tolerance, xgboost_scores


@pytest.fixture(scope="module")
def tree_model():
    return export_models.tree_model()


@pytest.fixture(scope="module")
def stump_model():
    rb, X = export_models.stump_model()
    return rb.model_, X


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_xgboost_predicts_as_the_exported_ensemble(which, request, tmp_path):
    ens, X = request.getfixturevalue(which)
    ours = ens.predict(X).numpy()
    theirs = xgboost_scores(ens, X, tmp_path / "model.json")
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=tolerance(ours))
