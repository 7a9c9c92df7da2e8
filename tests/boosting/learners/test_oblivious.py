"""Oblivious (symmetric) trees: the level question shared by every node, the split choice
against a brute-force oracle, the compiled and torch paths bit for bit, and the model being an
ordinary tree (prediction, saving, export)."""

import itertools
import math

import pytest
import torch

from torchrankboost import Booster, Ensemble, ObliviousTree, RegressionTree
from torchrankboost.data.synthetic import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss

NAMES = ("split_feature", "threshold_bin", "threshold", "default_left", "left_child",
         "right_child", "split_gain", "leaf_value")


def _problem(seed, n_queries=40, docs=15, F=6, nan_every=5):
    d = make_letor(n_queries, docs, F, seed=seed, dtype=torch.float64)
    X = d.X.clone()
    X[::nan_every, 1] = float("nan")
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(X.shape[0], generator=g, dtype=torch.float64)
    w = torch.rand(X.shape[0], generator=g, dtype=torch.float64) + 0.1
    return X, t, w


def _same(a, b):
    assert a.depth == b.depth
    for k in NAMES:
        assert torch.equal(getattr(a, k), getattr(b, k)), k


@pytest.mark.parametrize("depth,msl,l2,sub", [(1, 1, 1.0, False), (3, 2, 0.0, True),
                                              (6, 1, 3.0, False)])
def test_compiled_and_torch_paths_grow_the_same_tree(depth, msl, l2, sub):
    X, t, w = _problem(depth)
    rows = torch.arange(0, X.shape[0], 2) if sub else None
    trees = []
    for kernel in ("native", "torch"):
        learner = ObliviousTree(depth=depth, min_samples_leaf=msl, l2=l2, kernel=kernel)
        p = learner.prepare(X)
        m, f = learner.fit_predict(p, t, w, rows=rows)
        assert torch.equal(f, m.predict(X)) and torch.equal(f, m.predict_prepared(p))
        trees.append(m)
    _same(*trees)


def test_every_node_of_a_level_asks_the_same_question():
    X, t, w = _problem(4, n_queries=80)
    m = ObliviousTree(depth=4).fit(ObliviousTree(depth=4).prepare(X), t, w)
    assert m.depth == 4 and m.num_leaves == 16
    for d in range(4):
        lo, hi = 2 ** d - 1, 2 ** (d + 1) - 1
        for k in NAMES[:4]:
            v = getattr(m, k)[lo:hi]
            assert torch.equal(v, v[:1].expand_as(v)), (d, k)
    # a row's leaf is the binary number of its answers, first level first
    x = X[:50]
    bits = torch.zeros(50, dtype=torch.int64)
    for d in range(4):
        k = 2 ** d - 1
        f, thr, dl = int(m.split_feature[k]), float(m.threshold[k]), bool(m.default_left[k])
        v = x[:, f]
        right = torch.where(v.isnan(), torch.tensor(not dl), v > thr)
        bits = bits * 2 + right.long()
    assert torch.equal(m.leaf_value[bits], m.predict(x))


def test_depth_one_is_the_best_stump():
    X, t, w = _problem(5)
    a = ObliviousTree(depth=1, min_samples_leaf=1, l2=1.0)
    b = RegressionTree(max_leaves=2, min_samples_leaf=1, l2=1.0)
    ma, mb = a.fit(a.prepare(X), t, w), b.fit(b.prepare(X), t, w)
    for k in ("split_feature", "threshold_bin", "default_left", "leaf_value"):
        assert torch.equal(getattr(ma, k), getattr(mb, k)), k


def _term(g, h, lam):
    return g * g / (h + lam) if h + lam > 0 else 0.0


def test_second_level_is_the_brute_force_best_question():
    """Level 2 against every (feature, bin, NaN side) scored by summing the two nodes'
    gains from the rows themselves."""
    X, t, w = _problem(6, n_queries=12, docs=8, F=3, nan_every=3)
    learner = ObliviousTree(depth=2, min_samples_leaf=3, l2=0.5)
    p = learner.prepare(X)
    m = learner.fit(p, t, w)
    codes = p.codes.long()
    f0, b0, dl0 = int(m.split_feature[0]), int(m.threshold_bin[0]), bool(m.default_left[0])
    c0 = codes[:, f0]
    node = torch.where(c0 == p.missing_code, torch.tensor(not dl0), c0 > b0).long()
    best, arg = -math.inf, None
    for f in range(X.shape[1]):
        nan_here = bool((codes[:, f] == p.missing_code).any())
        for b, side in itertools.product(range(int(p.num_bins[f])), (True, False)):
            if not side and not nan_here:
                continue
            c = codes[:, f]
            right = torch.where(c == p.missing_code, torch.tensor(not side), c > b)
            total, ok = 0.0, True
            for j in (0, 1):
                r, lft = (node == j) & right, (node == j) & ~right
                for side_rows in (r, lft):
                    if 0 < int(side_rows.sum()) < 3:
                        ok = False
                G, H = float((w * t)[node == j].sum()), float(w[node == j].sum())
                gl, hl = float((w * t)[lft].sum()), float(w[lft].sum())
                total += _term(gl, hl, 0.5) + _term(G - gl, H - hl, 0.5) - _term(G, H, 0.5)
            if ok and total > best + 1e-9:
                best, arg = total, (f, b, side)
    assert arg == (int(m.split_feature[1]), int(m.threshold_bin[1]), bool(m.default_left[1]))
    assert math.isclose(float(m.split_gain[1:3].sum()), best, rel_tol=1e-9)


def test_boosted_oblivious_trees_save_load_and_export(tmp_path):
    d = make_letor(30, 12, 5, seed=2)
    X = d.X.clone()
    X[::4, 0] = float("nan")
    model = Booster(ExponentialPairwiseLoss(), ObliviousTree(depth=3), n_rounds=5,
                    verbose=False).fit(X, d.labels, d.groups)
    assert model.n_rounds == 5
    model.save(tmp_path / "m.safetensors")
    again = Ensemble.load(tmp_path / "m.safetensors")
    assert torch.equal(again.predict(X), model.predict(X))
    from torchrankboost import to_torch

    assert torch.allclose(to_torch(model)(X.float()).double(), model.predict(X).double(),
                          atol=1e-5)
    lgb = pytest.importorskip("lightgbm")
    from torchrankboost import to_lightgbm

    to_lightgbm(model, tmp_path / "m.txt")
    ours = model.predict(X).double().numpy()
    booster = lgb.Booster(model_file=str(tmp_path / "m.txt"))
    theirs = booster.predict(X.numpy())
    assert abs(ours - theirs).max() <= 1e-5 * (1 + abs(ours).max())
    # SHAP as LightGBM's on the rounds without an empty leaf (LightGBM gives NaN for those)
    shallow = Booster(ExponentialPairwiseLoss(), ObliviousTree(depth=2, min_samples_leaf=10),
                      n_rounds=3, verbose=False).fit(X, d.labels, d.groups)
    kept = [(m, w) for m, w in zip(shallow.models, shallow.weights) if bool((m.cover > 0).all())]
    assert kept
    full = Ensemble([m for m, _ in kept], [w for _, w in kept], base_score=shallow.base_score,
                    num_features=X.shape[1])
    to_lightgbm(full, tmp_path / "s.txt")
    theirs = lgb.Booster(model_file=str(tmp_path / "s.txt")).predict(X.numpy(), pred_contrib=True)
    assert abs(full.predict(X, contrib=True).numpy() - theirs).max() <= 1e-6


def test_bad_depth_is_refused():
    with pytest.raises(ValueError, match="depth"):
        ObliviousTree(depth=0)
    with pytest.raises(ValueError, match="depth"):
        ObliviousTree(depth=11)


def test_contributions_sum_to_the_prediction_with_empty_leaves():
    """A deep oblivious tree on few rows leaves empty subtrees (cover 0): their leaves weigh
    nothing in the expectations, and every row's contributions still sum to its score."""
    d = make_letor(4, 6, 4, seed=7, dtype=torch.float64)
    X = d.X.clone()
    X[::3, 1] = float("nan")
    model = Booster(ExponentialPairwiseLoss(), ObliviousTree(depth=6), n_rounds=3,
                    verbose=False).fit(X, d.labels, d.groups)
    covers = torch.cat([m.cover for m in model.models])
    assert (covers == 0).any()  # the case this test is about
    phi = model.predict(X, contrib=True)
    assert phi.shape == (X.shape[0], X.shape[1] + 1)
    assert torch.allclose(phi.sum(1), model.predict(X).double(), atol=1e-9)
