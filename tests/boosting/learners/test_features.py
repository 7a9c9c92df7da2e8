"""Single-feature rankers (boosting/learners/features.py): scaling, the least-squares fit
against a brute-force search, correlation and feature sums."""

import numpy as np
import pytest
import torch

from learner_data import make_data
from torchrankboost.boosting.learners import FeatureRankers


def test_feature_rankers_scaling_and_fit():
    X, y, w = make_data(n=500, F=4, seed=18)
    X = torch.cat([X, torch.full((500, 1), 2.0, dtype=torch.float64)], 1)  # constant feature
    fr = FeatureRankers(criterion="least_squares")
    p = fr.prepare(X)
    assert p.valid.tolist() == [True, True, True, True, False]
    v = p.values[:, :4]
    ok = ~torch.isnan(X[:, :4])
    for f in range(4):
        assert v[ok[:, f], f].min().item() == pytest.approx(-1.0)
        assert v[ok[:, f], f].max().item() == pytest.approx(1.0)
        assert (v[~ok[:, f], f] == 0).all()
    assert (p.values[:, 4] == 0).all()
    m = fr.fit(p, y, w)
    # brute force: weighted LS of y on each scaled feature
    best = None
    for f in range(4):
        h = v[:, f].numpy()
        A = np.stack([np.ones_like(h), h], 1)
        sw = np.sqrt(w.numpy())
        coef, *_ = np.linalg.lstsq(A * sw[:, None], y.numpy() * sw, rcond=None)
        yn, wn = y.numpy(), w.numpy()
        red = (wn * (yn - np.average(yn, weights=wn)) ** 2).sum() - (wn * (yn - A @ coef) ** 2).sum()
        if best is None or red > best[0]:
            best = (red, f, coef)
    assert m.feature == best[1]
    assert np.allclose(m.coef.numpy(), best[2])
    assert m.gain == pytest.approx(best[0], rel=1e-8)
    # predict on new data uses the training scale
    Xn = X[:3].clone()
    Xn[0, m.feature] = p.hi[m.feature] * 3
    Xn[1, m.feature] = float("nan")
    h = fr.prepare(X).values[:3, m.feature].clone()
    lo, hi = p.lo[m.feature], p.hi[m.feature]
    h[0] = 2 * (Xn[0, m.feature] - lo) / (hi - lo) - 1
    h[1] = 0.0
    assert torch.allclose(m.predict(Xn), m.coef[0] + m.coef[1] * h)
    assert torch.allclose(m.predict(X), m.predict_prepared(p))


def test_feature_rankers_correlation_and_sums(device):
    X, y, w = make_data(n=400, F=4, seed=19)
    fr = FeatureRankers()
    p = fr.prepare(X.to(device))
    v = torch.randn(400, 2, dtype=torch.float64)
    S = fr.feature_sums(p, v.to(device)).cpu()
    assert torch.allclose(S, p.values.cpu().t() @ v)
    m = fr.fit(p, y.to(device), w.to(device))
    corr = (p.values.cpu() * (w * y).unsqueeze(1)).sum(0).abs()
    assert m.feature == int(torch.argmax(corr))
    assert m.coef.tolist() == [0.0, 1.0]
    raw = FeatureRankers(normalize=False).prepare(X)
    assert torch.equal(raw.values[:, 0], X[:, 0])
