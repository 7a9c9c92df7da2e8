"""Weak learners against plain references: brute-force splits, best-first trees, stumps, features."""

import json
import math

import numpy as np
import pytest
import torch

from torchrankboost.kernels.histogram import histogram
from torchrankboost.boosting.learners import (
    FeatureRankers,
    RegressionTree,
    Stumps,
    weak_model_from_state,
)

MISSING = 255


# ----------------------------------------------------------------------------- references


def _gain_terms(G, H, lam):
    d = H + lam
    return G * G / d if d > 0 else 0.0


def brute_best_split(codes, wt, w, rows, nb, *, lam, msl, mcw):
    """Enumerate every (feature, threshold bin, NaN side) split of ``rows``; plain numpy."""
    best = None
    G, H = wt[rows].sum(), w[rows].sum()
    parent = _gain_terms(G, H, lam)
    for f in range(codes.shape[1]):
        c = codes[rows, f]
        for t in range(nb[f]):
            for d_left in (True, False):
                left = (c <= t) | ((c == MISSING) & d_left)
                nl, nr = left.sum(), (~left).sum()
                HL, HR = w[rows][left].sum(), w[rows][~left].sum()
                if nl < msl or nr < msl or HL < mcw or HR < mcw:
                    continue
                GL, GR = wt[rows][left].sum(), wt[rows][~left].sum()
                gain = _gain_terms(GL, HL, lam) + _gain_terms(GR, HR, lam) - parent
                if best is None or gain > best[0] + 1e-12:
                    best = (gain, f, t, d_left)
    return best


def brute_tree(codes, wt, w, nb, *, max_leaves, lam, msl, mcw):
    """Exhaustive best-first growth; returns leaf values per row and the split list."""
    leaves = [np.arange(codes.shape[0])]
    bests = [brute_best_split(codes, wt, w, leaves[0], nb, lam=lam, msl=msl, mcw=mcw)]
    splits = []
    while len(leaves) < max_leaves:
        cand = [(b[0], i) for i, b in enumerate(bests) if b is not None and b[0] > 1e-10]
        if not cand:
            break
        _, i = max(cand, key=lambda x: (x[0], -x[1]))
        gain, f, t, d_left = bests[i]
        rows = leaves[i]
        c = codes[rows, f]
        left = (c <= t) | ((c == MISSING) & d_left)
        splits.append((f, t, d_left))
        leaves[i] = rows[left]
        leaves.append(rows[~left])
        bests[i] = brute_best_split(codes, wt, w, leaves[i], nb, lam=lam, msl=msl, mcw=mcw)
        bests.append(brute_best_split(codes, wt, w, leaves[-1], nb, lam=lam, msl=msl, mcw=mcw))
    pred = np.zeros(codes.shape[0])
    for rows in leaves:
        pred[rows] = wt[rows].sum() / (w[rows].sum() + lam)
    return pred, splits


def _data(n=300, F=4, seed=0, nan=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[:, 1] = torch.round(X[:, 1] * 3)
    if nan:
        X[torch.rand(n, generator=g) < 0.15, 2] = float("nan")
    y = X[:, 0] + torch.sin(2 * X[:, 1]) + torch.nan_to_num(X[:, 2], nan=1.5) + 0.3 * torch.randn(n, generator=g)
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.2
    return X.to(dtype), y.to(dtype), w.to(dtype)


# ----------------------------------------------------------------------------- trees


@pytest.mark.parametrize("lam,msl", [(0.0, 1), (2.0, 5), (0.5, 20)])
def test_root_split_matches_brute_force(lam, msl):
    X, y, w = _data(seed=1)
    tree = RegressionTree(max_leaves=2, l2=lam, min_samples_leaf=msl, n_bins=16)
    p = tree.prepare(X)
    m = tree.fit(p, y, w)
    codes = p.codes.numpy().astype(np.int64)
    wt = (w * y).numpy()
    ref = brute_best_split(codes, wt, w.numpy(), np.arange(len(y)), p.num_bins.tolist(), lam=lam, msl=msl,
                           mcw=1e-3)
    assert m.split_gain[0].item() == pytest.approx(ref[0], rel=1e-9)
    assert (m.split_feature[0].item(), m.threshold_bin[0].item(), bool(m.default_left[0])) == ref[1:]
    # leaf values = Σ w t / (Σ w + λ)
    leaf = m.predict_prepared(p)
    left = (codes[:, ref[1]] <= ref[2]) | ((codes[:, ref[1]] == MISSING) & ref[3])
    for side in (left, ~left):
        exp = wt[side].sum() / (w.numpy()[side].sum() + lam)
        assert np.allclose(leaf.numpy()[side], exp)


@pytest.mark.parametrize("seed,lam,msl,leaves", [(0, 0.0, 1, 8), (3, 1.0, 10, 12), (4, 0.0, 3, 6)])
def test_full_tree_matches_best_first_reference(seed, lam, msl, leaves):
    X, y, w = _data(n=250, seed=seed)
    tree = RegressionTree(max_leaves=leaves, l2=lam, min_samples_leaf=msl, n_bins=12)
    p = tree.prepare(X)
    m = tree.fit(p, y, w)
    codes = p.codes.numpy().astype(np.int64)
    pred, splits = brute_tree(codes, (w * y).numpy(), w.numpy(), p.num_bins.tolist(), max_leaves=leaves, lam=lam,
                              msl=msl, mcw=1e-3)
    got = list(zip(m.split_feature.tolist(), m.threshold_bin.tolist(), m.default_left.tolist()))
    assert got == splits
    assert np.allclose(m.predict_prepared(p).numpy(), pred, rtol=1e-10, atol=1e-12)
    assert m.num_leaves == len(splits) + 1


def test_histogram_subtraction_equals_direct(device):
    X, y, w = _data(n=2000, F=5, seed=5)
    tree = RegressionTree()
    p = tree.prepare(X.to(device))
    vals = torch.stack([(w * y), w], 1).to(device)
    packed = torch.complex(vals[:, 0], vals[:, 1])
    rows = torch.arange(2000, device=device)
    left = rows[p.codes[:, 0].long() <= 100]
    right = rows[p.codes[:, 0].long() > 100]
    for pk in (packed, None):
        hp, hl, hr = (histogram(p.codes, r, vals, slots=256, packed=pk) for r in (rows, left, right))
        assert torch.allclose(hp[:2] - hl[:2], hr[:2], atol=1e-10) and torch.equal(hp[2] - hl[2], hr[2])
    # direct histogram against a dense count
    dense = torch.zeros(5, 256, dtype=torch.float64)
    for f in range(5):
        dense[f].index_add_(0, p.codes[:, f].long().cpu(), (w * y))
    assert torch.allclose(hp[0].cpu(), dense)


@pytest.mark.parametrize("nan_high", [True, False])
def test_missing_values_learn_default_direction(nan_high):
    g = torch.Generator().manual_seed(6)
    n = 1000
    x = torch.randn(n, generator=g, dtype=torch.float64)
    y = (x > 0).double()
    miss = torch.rand(n, generator=g) < 0.3
    y[miss] = 1.0 if nan_high else 0.0
    x[miss] = float("nan")
    X = torch.stack([x, torch.randn(n, generator=g, dtype=torch.float64)], 1)
    tree = RegressionTree(max_leaves=2, min_samples_leaf=5)
    p = tree.prepare(X)
    m = tree.fit(p, y)
    assert m.split_feature[0].item() == 0
    assert bool(m.default_left[0]) == (not nan_high)
    pred = m.predict(torch.tensor([[float("nan"), 0.0]], dtype=torch.float64))
    assert pred.item() == pytest.approx(1.0 if nan_high else 0.0)
    assert torch.equal(m.predict(X), m.predict_prepared(p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_predict_agrees_with_predict_prepared(device, dtype):
    X, y, w = _data(n=3000, F=6, seed=7, dtype=dtype)
    X[::11, 4] = float("nan")
    X, y, w = X.to(device), y.to(device), w.to(device)
    tree = RegressionTree(max_leaves=31, min_samples_leaf=5, n_bins=64)
    p = tree.prepare(X)
    m = tree.fit(p, y, w)
    assert m.num_leaves == 31
    assert torch.equal(m.predict(X), m.predict_prepared(p))
    assert m.predict(X).dtype == dtype


def test_state_round_trip_bit_identical(tmp_path):
    X, y, w = _data(n=800, seed=8)
    for learner in (RegressionTree(max_leaves=9), Stumps(criterion="least_squares"),
                    FeatureRankers(criterion="least_squares"), Stumps(), FeatureRankers()):
        p = learner.prepare(X)
        m = learner.fit(p, y, w)
        tensors, meta = m.state()
        path = tmp_path / "m.pt"
        torch.save(tensors, path)
        meta2 = json.loads(json.dumps(meta))
        m2 = weak_model_from_state(torch.load(path, weights_only=True), meta2)
        assert torch.equal(m.predict(X), m2.predict(X))
        assert torch.equal(m.predict_prepared(p), m2.predict_prepared(p))
        assert torch.equal(m.feature_gain(4), m2.feature_gain(4))
        assert torch.equal(m.feature_count(4), m2.feature_count(4))
    with pytest.raises(ValueError, match="type"):
        weak_model_from_state({}, {"type": "Nope"})


def test_feature_gain_and_count():
    X, y, w = _data(n=1000, seed=9)
    tree = RegressionTree(max_leaves=10, min_samples_leaf=5)
    p = tree.prepare(X)
    m = tree.fit(p, y, w)
    cnt = m.feature_count(4)
    assert cnt.sum().item() == 9 and cnt.dtype == torch.int64
    gain = m.feature_gain(4)
    assert gain.sum().item() == pytest.approx(m.split_gain.sum().item())
    assert (gain >= 0).all()


def test_tree_matches_sklearn_sse():
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(10)
    n = 2000
    X = np.round(rng.normal(size=(n, 5)) * 20) / 20  # ≤ 255 distinct values: exact bins
    y = np.sin(X[:, 0] * 2) + X[:, 1] ** 2 + 0.2 * rng.normal(size=n)
    sk = DecisionTreeRegressor(max_leaf_nodes=16, min_samples_leaf=1, random_state=0).fit(X, y)
    tree = RegressionTree(max_leaves=16, min_samples_leaf=1, min_child_weight=0.0)
    p = tree.prepare(torch.from_numpy(X))
    m = tree.fit(p, torch.from_numpy(y))
    sse0 = ((y - y.mean()) ** 2).sum()
    red_sk = sse0 - ((y - sk.predict(X)) ** 2).sum()
    red_ours = sse0 - ((y - m.predict(torch.from_numpy(X)).numpy()) ** 2).sum()
    assert red_ours == pytest.approx(red_sk, rel=1e-3)
    assert m.split_gain.sum().item() == pytest.approx(red_ours, rel=1e-9)


def test_tree_limits_and_stopping():
    X, y, w = _data(n=500, seed=11)
    m = RegressionTree(max_leaves=31, max_depth=2, min_samples_leaf=1).fit(
        RegressionTree().prepare(X), y, w)
    assert m.depth <= 2 and m.num_leaves <= 4
    # constant target: no split, one leaf
    tree = RegressionTree()
    p = tree.prepare(X)
    m = tree.fit(p, torch.full_like(y, 3.0), w)
    assert m.num_leaves == 1 and torch.allclose(m.predict(X), torch.full_like(y, 3.0))
    # min_split_gain above every gain: one leaf
    assert tree.__class__(min_split_gain=1e9).fit(p, y, w).num_leaves == 1
    # rows restricts the fit
    rows = torch.arange(0, 500, 2)
    m1 = RegressionTree(max_leaves=4).fit(p, y, w, rows=rows)
    y2 = y.clone()
    y2[1::2] = 1e6  # rows outside the subset are ignored
    m2 = RegressionTree(max_leaves=4).fit(p, y2, w, rows=rows)
    assert torch.equal(m1.predict(X), m2.predict(X))


def test_feature_fraction_is_seeded():
    X, y, w = _data(n=500, F=4, seed=12)
    tree = RegressionTree(max_leaves=6, feature_fraction=0.5)
    p = tree.prepare(X)
    a = tree.fit(p, y, w, generator=torch.Generator().manual_seed(3))
    b = tree.fit(p, y, w, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.predict(X), b.predict(X))
    assert len(set(a.split_feature.tolist())) <= 2


def test_tree_validation():
    X, y, w = _data(n=50, seed=13)
    tree = RegressionTree()
    p = tree.prepare(X)
    with pytest.raises(ValueError, match="weight"):
        tree.fit(p, y, -w)
    with pytest.raises(ValueError, match="weight"):
        tree.fit(p, y, w[:10])
    with pytest.raises(ValueError, match="target"):
        tree.fit(p, y[:10], None)
    with pytest.raises(ValueError, match="target"):
        tree.fit(p, y.unsqueeze(1), None)
    with pytest.raises(ValueError, match="rows"):
        tree.fit(p, y, w, rows=torch.tensor([0, 99]))
    with pytest.raises(ValueError, match="max_leaves"):
        RegressionTree(max_leaves=1)
    with pytest.raises(ValueError, match="n_bins"):
        RegressionTree(n_bins=32767)  # int16 codes: at most 32766 bins
    with pytest.raises(ValueError, match="X"):
        tree.prepare(torch.randn(5))
    with pytest.raises(ValueError, match="prepared"):
        tree.fit(X, y)


def test_cpu_cuda_parity(device):
    X, y, w = _data(n=1500, F=5, seed=14, dtype=torch.float32)
    ref_tree = RegressionTree(max_leaves=15, min_samples_leaf=5)
    m_cpu = ref_tree.fit(ref_tree.prepare(X), y, w)
    Xd, yd, wd = X.to(device), y.to(device), w.to(device)
    p = ref_tree.prepare(Xd)
    m = ref_tree.fit(p, yd, wd)
    assert m.split_feature.tolist() == m_cpu.split_feature.tolist()
    assert m.threshold_bin.tolist() == m_cpu.threshold_bin.tolist()
    assert torch.allclose(m.predict(Xd).cpu(), m_cpu.predict(X), atol=1e-6)
    assert torch.allclose(m.to("cpu").predict(X), m_cpu.predict(X), atol=1e-6)
    st = Stumps()
    assert st.fit(st.prepare(Xd), yd, wd).feature == st.fit(st.prepare(X), y, w).feature


# ----------------------------------------------------------------------------- stumps


def _dense_threshold_sums(X, thresholds, valid, v):
    """Dense (n, F, T) reference: Σ_i v_i · 1[x_if > θ_ft] (NaN → 0)."""
    H = (X.unsqueeze(2) > thresholds.unsqueeze(0)).double()  # NaN > θ is False
    S = torch.einsum("nft,nk->ftk", H, v.double().reshape(X.shape[0], -1))
    return torch.where(valid.unsqueeze(-1), S, torch.zeros_like(S))


@pytest.mark.parametrize("max_thresholds", [5, 255, 400])
def test_threshold_sums_match_dense(device, max_thresholds):
    X, y, w = _data(n=600, F=4, seed=15)
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
    X, y, w = _data(n=400, F=4, seed=16)
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
    X, y, w = _data(n=300, seed=17)
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


# ----------------------------------------------------------------------------- features


def test_feature_rankers_scaling_and_fit():
    X, y, w = _data(n=500, F=4, seed=18)
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
    X, y, w = _data(n=400, F=4, seed=19)
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


def test_histogram_shortcuts_are_bitwise_equal(device):
    """The histogram's shortcuts (all rows without a gather, known counts, unit-weight counts,
    the packed complex scatter) give the plain histogram bit for bit (same accumulation order)."""
    X, y, w = _data(n=3000, F=6, seed=11)
    p = RegressionTree().prepare(X.to(device))
    vals = torch.stack([(w * y), w], 1).to(device)
    pk = torch.complex(vals[:, 0], vals[:, 1])
    rows = torch.arange(3000, device=device)
    sub = rows[p.codes[:, 1].long() <= 60]
    for r, all_rows in ((rows, True), (sub, False)):
        ref = histogram(p.codes, r, vals, slots=256)
        got = histogram(p.codes, None if all_rows else r, vals, slots=256, packed=pk)
        assert torch.equal(got, ref)
        got = histogram(p.codes, None if all_rows else r, vals, slots=256, packed=pk, count=ref[2])
        assert torch.equal(got, ref)
        assert torch.equal(histogram(p.codes, r, vals, slots=256, count=None), ref[:2])
    ones = torch.ones(3000, dtype=torch.float64, device=device)
    v1 = torch.stack([y.to(device), ones], 1)
    ref = histogram(p.codes, sub, v1, slots=256)
    got = histogram(p.codes, sub, v1, slots=256, packed=torch.complex(v1[:, 0], v1[:, 1]), count="weight")
    assert torch.equal(got, ref)


def test_tree_cached_root_counts_and_unit_weights():
    """Fits with rows=None reuse cached all-rows counts; a rows subset or unit weights give the
    same tree as without the shortcuts (weights of exactly 1 vs 1 + 0 perturbation). The
    torch path's shortcuts (the compiled kernels count rows as they go)."""
    X, y, w = _data(n=1500, F=5, seed=12)
    tree = RegressionTree(max_leaves=12, min_samples_leaf=10, kernel="torch")
    p = tree.prepare(X)
    a = tree.fit(p, y, w)
    assert ("count", 256) in p.cache
    rows = torch.arange(0, 1500, 2)
    b = tree.fit(p, y, w, rows=rows)  # subset: counts from the rows, not the cache
    p2 = tree.prepare(X)
    b2 = tree.fit(p2, y, w, rows=rows)
    assert torch.equal(b.leaf_value, b2.leaf_value) and torch.equal(b.split_feature, b2.split_feature)
    a2 = tree.fit(p, y, w)
    assert torch.equal(a.leaf_value, a2.leaf_value) and torch.equal(a.threshold_bin, a2.threshold_bin)
    # unit weights (count channel copied from Σ w) against the brute-force reference
    X, y, _ = _data(n=250, seed=3)
    tree = RegressionTree(max_leaves=10, min_samples_leaf=7, n_bins=12)
    p = tree.prepare(X)
    m = tree.fit(p, y)
    one = np.ones(250)
    pred, splits = brute_tree(p.codes.numpy().astype(np.int64), y.numpy(), one, p.num_bins.tolist(), max_leaves=10,
                              lam=0.0, msl=7, mcw=1e-3)
    assert list(zip(m.split_feature.tolist(), m.threshold_bin.tolist(), m.default_left.tolist())) == splits
    assert np.allclose(m.predict_prepared(p).numpy(), pred, rtol=1e-10, atol=1e-12)


def test_nan_only_outside_fit_rows_matches_nan_free_data():
    """A feature whose NaNs all lie outside `rows` behaves as a NaN-free feature (NaN-left)."""
    X, y, w = _data(n=600, F=4, seed=13, nan=False)
    X = torch.round(X * 2).clamp(-4, 4)  # few distinct values: exact bins, same edges on the subset
    X[::3, 1] = float("nan")
    keep = torch.arange(600)[~torch.isnan(X[:, 1])]
    tree = RegressionTree(max_leaves=10, min_samples_leaf=5)
    pa, pb = tree.prepare(X), tree.prepare(X[keep])
    assert torch.equal(pa.edges, pb.edges) and bool(pa.has_missing[1]) and not bool(pb.has_missing.any())
    a = tree.fit(pa, y, w, rows=keep)
    b = tree.fit(pb, y[keep], w[keep])
    for k in ("split_feature", "threshold_bin", "threshold", "default_left", "left_child", "right_child",
              "leaf_value"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    assert torch.allclose(a.split_gain, b.split_gain, rtol=1e-12)
