"""The tree and stump rounds as plain trees (``export/_trees.py``), checked through both
writers: LightGBM's and XGBoost's predictions of the written files equal ours on the edge
cases (base score, constant rounds, NaN splits, inputs at the thresholds); weak models that
are not trees are refused."""

import numpy as np
import pytest
import torch

from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import FeatureModel
from torchrankboost.export import to_lightgbm, to_xgboost

import export_models
from export_models import hand_tree, lightgbm_scores, tolerance, xgboost_scores


@pytest.fixture(scope="module")
def tree_model():
    return export_models.tree_model()


def test_export_refuses_weak_models_that_are_not_trees(tmp_path):
    m = FeatureModel(feature=0, lo=torch.tensor(0.0), hi=torch.tensor(1.0),
                     coef=torch.tensor([0.0, 1.0]), normalize=False)
    ens = Ensemble([m], [1.0], num_features=2)
    for write in (to_lightgbm, to_xgboost):
        with pytest.raises(ValueError, match="FeatureModel"):
            write(ens, tmp_path / "m")


def test_exports_carry_base_score_constant_rounds_and_threshold_ties(tree_model, tmp_path):
    ens, X = tree_model
    constant = hand_tree([], [], [], [], [], [0.5])
    nan_split = hand_tree([1], [float("inf")], [False], [~0], [~1], [-0.25, 1.5])  # NaN vs the rest
    models = [constant] + ens.models[:5] + [nan_split] + ens.models[5:]
    weights = [0.7] + ens.weights[:5] + [0.9] + ens.weights[5:]
    big = Ensemble(models, weights, base_score=0.75, num_features=ens.num_features)
    rows = []  # inputs at every threshold and at the float32 values around it
    for m in ens.models:
        for f, t in zip(m.split_feature.tolist(), m.threshold.tolist()):
            for v in (t, np.nextafter(np.float32(t), np.float32(np.inf)),
                      np.nextafter(np.float32(t), np.float32(-np.inf))):
                r = X[len(rows) % X.shape[0]].clone()
                r[f] = float(v)
                rows.append(r)
    Z = torch.cat([X, torch.stack(rows)])
    Z[::3, 1] = float("nan")
    ours = big.predict(Z).numpy()
    tol = tolerance(ours)
    np.testing.assert_allclose(lightgbm_scores(big, Z, tmp_path / "m.txt"), ours, rtol=0, atol=tol)
    np.testing.assert_allclose(xgboost_scores(big, Z, tmp_path / "m.json"), ours, rtol=0, atol=tol)
