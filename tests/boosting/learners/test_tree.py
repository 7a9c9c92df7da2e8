"""The histogram regression tree (boosting/learners/tree.py) against plain references:
brute-force splits and best-first trees, NaN sides, limits and validation, scikit-learn's
trees, CPU = CUDA; and with more than 255 bins (2-byte int16 codes, missing code ``n_bins``):
the raw predictions equal the training output, boosted models save, load and export."""

import math

import numpy as np
import pytest
import torch

from learner_data import make_data
from torchrankboost.boosting import Booster, Ensemble
from torchrankboost.boosting.learners import ObliviousTree, RegressionTree, Stumps
from torchrankboost.data.binned_read import bin_row_chunks, load_svmlight_binned
from torchrankboost.export import to_torch
from torchrankboost.losses import ExponentialPairwiseLoss

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


# ----------------------------------------------------------------------------- trees


@pytest.mark.parametrize("lam,msl", [(0.0, 1), (2.0, 5), (0.5, 20)])
def test_root_split_matches_brute_force(lam, msl):
    X, y, w = make_data(seed=1)
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
    X, y, w = make_data(n=250, seed=seed)
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
    X, y, w = make_data(n=3000, F=6, seed=7, dtype=dtype)
    X[::11, 4] = float("nan")
    X, y, w = X.to(device), y.to(device), w.to(device)
    tree = RegressionTree(max_leaves=31, min_samples_leaf=5, n_bins=64)
    p = tree.prepare(X)
    m = tree.fit(p, y, w)
    assert m.num_leaves == 31
    assert torch.equal(m.predict(X), m.predict_prepared(p))
    assert m.predict(X).dtype == dtype


def test_feature_gain_and_count():
    X, y, w = make_data(n=1000, seed=9)
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
    X, y, w = make_data(n=500, seed=11)
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
    X, y, w = make_data(n=500, F=4, seed=12)
    tree = RegressionTree(max_leaves=6, feature_fraction=0.5)
    p = tree.prepare(X)
    a = tree.fit(p, y, w, generator=torch.Generator().manual_seed(3))
    b = tree.fit(p, y, w, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.predict(X), b.predict(X))
    assert len(set(a.split_feature.tolist())) <= 2


def test_tree_validation():
    X, y, w = make_data(n=50, seed=13)
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
    X, y, w = make_data(n=1500, F=5, seed=14, dtype=torch.float32)
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


# ----------------------------------------------------------------------------- features


def test_tree_cached_root_counts_and_unit_weights():
    """A rows subset, unit weights and a reused prepared give the same tree as fresh data
    (weights of exactly 1 vs 1 + 0 perturbation)."""
    X, y, w = make_data(n=1500, F=5, seed=12)
    tree = RegressionTree(max_leaves=12, min_samples_leaf=10, kernel="torch")
    p = tree.prepare(X)
    a = tree.fit(p, y, w)
    rows = torch.arange(0, 1500, 2)
    b = tree.fit(p, y, w, rows=rows)  # subset: counts from the rows, not the cache
    p2 = tree.prepare(X)
    b2 = tree.fit(p2, y, w, rows=rows)
    assert torch.equal(b.leaf_value, b2.leaf_value) and torch.equal(b.split_feature, b2.split_feature)
    a2 = tree.fit(p, y, w)
    assert torch.equal(a.leaf_value, a2.leaf_value) and torch.equal(a.threshold_bin, a2.threshold_bin)
    # unit weights (count channel copied from Σ w) against the brute-force reference
    X, y, _ = make_data(n=250, seed=3)
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
    X, y, w = make_data(n=600, F=4, seed=13, nan=False)
    X = torch.round(X * 2).clamp(-4, 4)  # few distinct values: exact bins, same edges on the subset
    X[::3, 1] = float("nan")
    keep = torch.arange(600)[~torch.isnan(X[:, 1])]
    tree = RegressionTree(max_leaves=10, min_samples_leaf=5)
    pa, pb = tree.prepare(X), tree.prepare(X[keep])
    assert torch.equal(pa.edges, pb.edges) and bool(pa.has_missing[1]) and not bool(pb.has_missing.any())
    a = tree.fit(pa, y, w, rows=keep)
    b = tree.fit(pb, y[keep], w[keep])
    for k in ("split_feature", "threshold_bin", "threshold", "default_left", "left_child", "right_child"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    # 600 and 400 rows: fixed points of 52 and 53 fraction bits, the same values to ~1e-14
    assert torch.allclose(a.leaf_value, b.leaf_value, rtol=1e-12)
    assert torch.allclose(a.split_gain, b.split_gain, rtol=1e-12)


# ----------------------------------------------------------------------------- one arithmetic


def _tie_problem(n=1500, seed=21):
    """NaNs, few distinct values and exact ties: feature 3 is a copy of feature 1."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    X[:, 1] = torch.randint(0, 5, (n,), generator=g).double()
    X[torch.rand(n, generator=g) < 0.1, 1] = math.nan
    X[:, 3] = X[:, 1]
    y = X[:, 1].nan_to_num(2.5) + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    return X, y, w


@pytest.mark.parametrize("kernel", ["torch", "native"])
@pytest.mark.parametrize("learner", [RegressionTree, ObliviousTree])
def test_same_tree_for_any_row_order_and_ties_to_the_lower_feature(kernel, learner):
    """Integer histograms: the rows in another order give the same tree bit for bit (leaf
    values and gains included); exact ties between a feature and its copy go to the lower
    feature."""
    X, y, w = _tie_problem()
    kw = dict(max_leaves=16, min_samples_leaf=5) if learner is RegressionTree else dict(depth=4)
    tree = learner(kernel=kernel, **kw)
    if kernel == "native" and tree.resolve_kernel(tree.prepare(X[:10])) != "native":
        pytest.skip("compiled kernels unavailable")
    a = tree.fit(tree.prepare(X), y, w)
    perm = torch.randperm(X.shape[0], generator=torch.Generator().manual_seed(3))
    b = tree.fit(tree.prepare(X[perm]), y[perm], w[perm])
    for k in a._tensor_names:
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    assert 1 in a.split_feature.tolist() and 3 not in a.split_feature.tolist()


# ----------------------------------------------------------------------------- int16 codes


def _problem(seed, n=3000, F=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[torch.rand(n, F, generator=g) < 0.08] = math.nan
    X[:, 1] = torch.randint(0, 4, (n,), generator=g).double()  # few distinct values
    t = torch.sin(4 * X[:, 0].nan_to_num()) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) if seed % 2 else None
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 3 == 0 else None
    return X, t, w, rows


def test_more_bins_give_more_thresholds():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(20000, 1, generator=g, dtype=torch.float64)  # ~20000 distinct values
    y = x[:, 0] + 0.01 * torch.randn(20000, generator=g, dtype=torch.float64)
    found = {}
    for nb in (255, 1023):
        lr = RegressionTree(n_bins=nb, max_leaves=600, min_samples_leaf=5)
        p = lr.prepare(x)
        m = lr.fit(p, y)
        found[nb] = (p.codes.dtype, p.missing_code, int(p.num_bins[0]),
                     m.threshold.unique().numel())
    assert found[255][:2] == (torch.uint8, 255) and found[255][3] <= 254
    assert found[1023][:3] == (torch.int16, 1023, 1023)
    assert found[1023][3] > 400


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_raw_predictions_equal_training_output(dtype):
    X, t, w, _ = _problem(7)
    X = X.to(dtype)
    lr = RegressionTree(n_bins=2000, max_leaves=40, min_samples_leaf=3)
    p = lr.prepare(X)
    m, f = lr.fit_predict(p, t.to(dtype), w)
    assert torch.equal(m.predict(X), f.to(m.leaf_value.dtype))
    assert torch.equal(m.predict(X, kernel="torch"), m.predict(X))
    assert torch.equal(m.predict_prepared(p), m.predict(X))


def _letor(n_queries=40, F=4, seed=0):
    rng = np.random.default_rng(seed)
    X, y, g = [], [], []
    for _ in range(n_queries):
        k = int(rng.integers(5, 15))
        X.append(rng.normal(size=(k, F)))
        y.append(rng.integers(0, 3, k))
        g.append(k)
    X = torch.from_numpy(np.concatenate(X)).float()
    X[torch.rand(X.shape, generator=torch.Generator().manual_seed(seed)) < 0.05] = math.nan
    qid = torch.repeat_interleave(torch.arange(len(g)), torch.tensor(g))
    return X, torch.from_numpy(np.concatenate(y)).float(), qid


def test_booster_save_load_and_export(tmp_path):
    X, y, g = _letor()
    b = Booster(loss=ExponentialPairwiseLoss(), n_rounds=5, verbose=False,
                learner=RegressionTree(n_bins=400, max_leaves=8, min_samples_leaf=2))
    model = b.fit(X, y, g)
    assert all(m.missing_code == 400 for m in model.models)
    s = model.predict(X)
    model.save(tmp_path / "m.trb")
    back = Ensemble.load(tmp_path / "m.trb")
    assert torch.equal(back.predict(X), s)
    assert [m.missing_code for m in back.models] == [400] * 5
    assert torch.equal(to_torch(back)(X), s)


@pytest.mark.parametrize("make", [lambda: RegressionTree(n_bins=1),
                                  lambda: RegressionTree(n_bins=32767),
                                  lambda: RegressionTree(n_bins=300.0),
                                  lambda: ObliviousTree(n_bins=256),
                                  lambda: load_svmlight_binned("x.txt", n_bins=40000),
                                  lambda: bin_row_chunks(None, [1], n_bins=32767)])
def test_bad_n_bins_one_line_error(make):
    with pytest.raises(ValueError, match="n_bins") as e:
        make()
    assert "\n" not in str(e.value)
