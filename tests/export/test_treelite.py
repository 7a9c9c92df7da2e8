"""``to_treelite`` on the edge cases (base score, constant rounds, a NaN-only split, inputs
at the thresholds, float64 thresholds, empty ensembles, a weak model that is not a tree)."""

import numpy as np
import pytest
import torch

from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import TreeModel
from torchrankboost.export import to_treelite

import export_models
from export_models import feature_model, gtil_scores, hand_tree

treelite = pytest.importorskip("treelite")


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
        np.testing.assert_allclose(gtil_scores(to_treelite(big), Zi.numpy()), ours, rtol=0,
                                   atol=1e-12 * (1 + np.abs(ours).max()))


def test_treelite_float64_thresholds_and_empty_ensembles():
    theta = 0.1  # not a float32: compared in float64
    tree = hand_tree([0], [theta], [True], [~0], [~1], [1.0, 2.0], dtype=torch.float64)
    ens = Ensemble([tree], [1.0], num_features=1)
    Z = torch.tensor([[theta], [np.nextafter(theta, 1.0)], [np.nextafter(theta, 0.0)],
                      [float("nan")]], dtype=torch.float64)
    np.testing.assert_array_equal(gtil_scores(to_treelite(ens), Z.numpy()), ens.predict(Z).numpy())
    empty = Ensemble([], [], base_score=0.25, num_features=3)
    np.testing.assert_array_equal(gtil_scores(to_treelite(empty), np.zeros((2, 3))), [0.25, 0.25])
    with pytest.raises(ValueError, match="to_treelite: round 0: weak model FeatureModel"):
        to_treelite(Ensemble([feature_model()], [1.0], num_features=2))
