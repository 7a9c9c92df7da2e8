"""The ROC curve points of a run's scores (as scikit-learn's) and the ROC picture."""

import numpy as np

from torchrankboost.tensorboard import render_roc_image, roc_curve_points


def test_roc_points_match_sklearn():
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    s = np.round(rng.normal(size=200), 1)  # ties
    fpr, tpr = roc_curve_points(y, s)
    f2, t2, _ = roc_curve(y > 0, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, f2)
    np.testing.assert_allclose(tpr, t2)
    assert roc_curve_points(np.zeros(4), s[:4]) is None
    img = render_roc_image(fpr, tpr, size=100)
    assert img.shape == (100, 100, 3) and img.dtype == np.uint8
    assert (img != 255).any()
