"""Stumps (boosting/learners/stumps.py) against plain references: threshold sums against a
dense computation, brute-force best stumps, NaN below every threshold, rows and validation."""

import numpy as np
import pytest
import torch

from learner_data import make_data
from torchrankboost.boosting.learners import Stumps


def _dense_threshold_sums(X, thresholds, valid, v):
    """Dense (n, F, T) reference: Σ_i v_i · 1[x_if > θ_ft] (NaN → 0)."""
    H = (X.unsqueeze(2) > thresholds.unsqueeze(0)).double()  # NaN > θ is False
    S = torch.einsum("nft,nk->ftk", H, v.double().reshape(X.shape[0], -1))
    return torch.where(valid.unsqueeze(-1), S, torch.zeros_like(S))


@pytest.mark.parametrize("max_thresholds", [5, 255, 400])
def test_threshold_sums_match_dense(device, max_thresholds):
    X, y, w = make_data(n=600, F=4, seed=15)
    st = Stumps(max_thresholds=max_thresholds)
    p = st.prepare(X.to(device))
    assert p.valid.sum(1).max().item() <= max_thresholds
    v = torch.randn(600, 3, dtype=torch.float64)
    S = st.threshold_sums(p, v.to(device)).cpu()
    ref = _dense_threshold_sums(X, p.thresholds.cpu(), p.valid.cpu(), v)
    assert torch.allclose(S, ref, atol=1e-9)
    S1 = st.threshold_sums(p, v[:, 0].to(device)).cpu()
    assert torch.allclose(S1, ref[..., 0], atol=1e-9)
    S2 = st.threshold_sums(p, v[:, :2].to(device)).cpu()  # complex fast path on CPU
    assert torch.allclose(S2, ref[..., :2], atol=1e-9)


def test_thresholds_are_midpoints_of_distinct_values():
    X = torch.tensor([[1.0], [2.0], [4.0], [float("nan")], [2.0]], dtype=torch.float64)
    p = Stumps().prepare(X)
    assert p.thresholds[0][p.valid[0]].tolist() == [1.5, 3.0]


@pytest.mark.parametrize("criterion", ["correlation", "least_squares"])
def test_best_stump_matches_brute_force(criterion):
    X, y, w = make_data(n=400, F=4, seed=16)
    st = Stumps(criterion=criterion)
    p = st.prepare(X)
    m = st.fit(p, y, w)
    best = None
    Wt = (w * y).sum()
    W = w.sum()
    for f in range(4):
        x = X[:, f]
        vals = torch.unique(x[~torch.isnan(x)])
        for lo, hi in zip(vals[:-1].tolist(), vals[1:].tolist()):
            theta = (lo + hi) / 2
            h = (x > theta).double()
            if criterion == "correlation":
                score = abs((w * y * h).sum().item())
                coef = (0.0, 1.0)
            else:
                W1, Y1 = (w * h).sum(), (w * y * h).sum()
                W0, Y0 = W - W1, Wt - Y1
                score = (Y1 ** 2 / W1 + Y0 ** 2 / W0 - Wt ** 2 / W).item()
                coef = ((Y0 / W0).item(), (Y1 / W1 - Y0 / W0).item())
            if best is None or score > best[0] + 1e-12:
                best = (score, f, theta, coef)
    assert m.feature == best[1]
    assert m.threshold.item() == pytest.approx(best[2])
    assert m.gain == pytest.approx(best[0], rel=1e-9)
    assert np.allclose(m.coef.tolist(), best[3])
    # least squares output is the weighted LS fit of a + b h
    h = (X[:, m.feature] > m.threshold).double()
    assert torch.allclose(m.predict(X), best[3][0] + best[3][1] * h)
    assert torch.equal(m.predict(X), m.predict_prepared(p))


def test_stump_nan_is_below_every_threshold():
    X = torch.tensor([[0.0], [1.0], [float("nan")], [2.0]])
    st = Stumps()
    p = st.prepare(X)
    m = st.make_model(0, 0, prepared=p)  # θ = 0.5
    assert m.predict(X).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert m.predict_prepared(p).tolist() == [0.0, 1.0, 0.0, 1.0]
    m2 = st.make_model(0, threshold=1.5)
    assert m2.predict(X).tolist() == [0.0, 0.0, 0.0, 1.0]
    assert m2.predict_prepared(p).tolist() == [0.0, 0.0, 0.0, 1.0]


def test_stumps_rows_and_validation():
    X, y, w = make_data(n=300, seed=17)
    st = Stumps()
    p = st.prepare(X)
    rows = torch.arange(0, 300, 3)
    m = st.fit(p, y, w, rows=rows)
    m_ref = st.fit(st.prepare(X[rows]), y[rows], w[rows])
    # same split of the subset (θ may differ inside the same gap between subset values)
    assert m.feature == m_ref.feature and m.gain == pytest.approx(m_ref.gain, rel=1e-9)
    assert torch.equal(m.predict(X[rows]), m_ref.predict(X[rows]))
    with pytest.raises(ValueError, match="criterion"):
        Stumps(criterion="gini")
    with pytest.raises(ValueError, match="weight"):
        st.fit(p, y, -w)
    with pytest.raises(ValueError, match="v"):
        st.threshold_sums(p, torch.randn(5))


@pytest.mark.parametrize("criterion", ["correlation", "least_squares"])
def test_stump_sums_are_exact_for_any_row_order(criterion):
    """The tree learners' arithmetic: fixed-point integer sums, so the rows in another order
    give the same sums and the same stump bit for bit."""
    X, y, w = make_data(n=800, F=4, seed=18)
    st = Stumps(criterion=criterion)
    perm = torch.randperm(800, generator=torch.Generator().manual_seed(0))
    pa, pb = st.prepare(X), st.prepare(X[perm])
    v = torch.stack([w * y, w], 1)
    assert torch.equal(st.threshold_sums(pa, v), st.threshold_sums(pb, v[perm]))
    a, b = st.fit(pa, y, w), st.fit(pb, y[perm], w[perm])
    assert (a.feature, a.threshold_index, a.gain) == (b.feature, b.threshold_index, b.gain)
    assert torch.equal(a.coef, b.coef) and torch.equal(a.cover, b.cover)
