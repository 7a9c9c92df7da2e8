"""TreeSHAP contributions (``predict(X, contrib=True)``), leaf indices (``apply``) and the node
covers they need: against LightGBM's ``pred_contrib`` / ``pred_leaf`` and
``shap.TreeExplainer`` on the ``to_lightgbm`` export, against brute-force Shapley values of
the path-dependent expectation, and through the model file."""

import functools
import itertools
import math

import numpy as np
import pytest
import torch

from export_models import hand_tree, letor_with_nans, stump_model, tree_model
from torchrankboost.boosting import Booster, Ensemble
from torchrankboost.boosting.learners import RegressionTree, Stumps
from torchrankboost.export import to_lightgbm
from torchrankboost.losses import ExponentialPairwiseLoss


def _lightgbm(ens, tmp_path):
    lgb = pytest.importorskip("lightgbm")
    path = tmp_path / "model.txt"
    to_lightgbm(ens, path)
    return lgb.Booster(model_file=str(path))


@functools.lru_cache(maxsize=None)
def _stump_booster():
    X, y, g = letor_with_nans(2)
    ens = Booster(ExponentialPairwiseLoss(), Stumps(criterion="least_squares"), n_rounds=8,
                  learning_rate=0.3).fit(X, y, g)
    return ens, X


def _models():
    rb, X = stump_model()
    return {"trees": tree_model(), "rankboost stumps": (rb.model_, X),
            "booster stumps": _stump_booster()}


@pytest.mark.parametrize("kind", ["trees", "rankboost stumps", "booster stumps"])
def test_contrib_equals_lightgbm_and_shap(kind, tmp_path):
    ens, X = _models()[kind]
    phi = ens.predict(X, contrib=True)
    assert phi.shape == (X.shape[0], ens.num_features + 1) and phi.dtype == torch.float64
    assert (phi.sum(1) - ens.predict(X)).abs().max() < 1e-9
    booster = _lightgbm(ens, tmp_path)
    Xn = X.numpy().astype(np.float64)
    np.testing.assert_allclose(booster.predict(Xn, pred_contrib=True), phi.numpy(), rtol=0, atol=1e-6)
    leaves = booster.predict(Xn, pred_leaf=True)
    ours = ens.apply(X).numpy()
    assert ours.shape == (X.shape[0], ens.n_rounds)
    np.testing.assert_array_equal(leaves[:, leaves.shape[1] - ens.n_rounds:], ours)
    shap = pytest.importorskip("shap")
    explainer = shap.TreeExplainer(booster)
    np.testing.assert_allclose(explainer.shap_values(Xn), phi[:, :-1].numpy(), rtol=0, atol=1e-6)
    assert abs(float(np.ravel(explainer.expected_value)[0]) - float(phi[0, -1])) < 1e-6


def _brute_force(tree, cover, x, F):
    """Exact Shapley values of ``S ↦ E[f | x_S]`` (path-dependent: unknown features follow
    both children in proportion to their covers), by enumerating every subset."""
    K = tree.split_feature.numel()
    sf, thr = tree.split_feature.tolist(), tree.threshold.tolist()
    lc, rc = tree.left_child.tolist(), tree.right_child.tolist()
    dl, leaf = tree.default_left.tolist(), tree.leaf_value.double().tolist()

    def value(node, S):
        if node < 0:
            return leaf[~node]
        f = sf[node]
        if f in S:
            v = x[f]
            go_left = dl[node] if math.isnan(v) else v <= thr[node]
            return value(lc[node] if go_left else rc[node], S)
        c = lambda ch: cover[ch] if ch >= 0 else cover[K + ~ch]  # noqa: E731
        return (c(lc[node]) * value(lc[node], S) + c(rc[node]) * value(rc[node], S)) / cover[node]

    phi = [0.0] * F
    for i in range(F):
        others = [j for j in range(F) if j != i]
        for k in range(F):
            for S in itertools.combinations(others, k):
                w = math.factorial(k) * math.factorial(F - k - 1) / math.factorial(F)
                phi[i] += w * (value(0, set(S) | {i}) - value(0, set(S)))
    return phi + [value(0, set())]


def test_brute_force_with_a_feature_split_twice():
    # feature 1 twice on one path, NaN right at the root, float64 thresholds
    tree = hand_tree([1, 0, 1, 2], [0.5, -0.2, 1.5, 0.1], [False, True, True, False],
                     [1, ~0, ~1, ~3], [3, 2, ~2, ~4], [1.0, -2.0, 0.5, 3.0, -1.0],
                     dtype=torch.float64)
    tree.cover = torch.tensor([100.0, 60.0, 35.0, 40.0, 25.0, 20.0, 15.0, 30.0, 10.0])
    ens = Ensemble([tree], [0.7], base_score=0.25, num_features=4)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(30, 4, generator=gen, dtype=torch.float64) * 1.5
    X[::4, 1] = float("nan")
    phi = ens.predict(X, contrib=True)
    for r in range(X.shape[0]):
        want = _brute_force(tree, tree.cover.tolist(), X[r].tolist(), 4)
        want = [0.7 * v for v in want[:4]] + [0.25 + 0.7 * want[4]]
        np.testing.assert_allclose(phi[r].numpy(), want, rtol=0, atol=1e-12)
    assert (phi.sum(1) - ens.predict(X)).abs().max() < 1e-12


def test_native_and_torch_covers_equal():
    X, y, _ = letor_with_nans(3)
    covers = []
    for kernel in ("native", "torch"):
        learner = RegressionTree(max_leaves=12, min_samples_leaf=4, kernel=kernel)
        prepared = learner.prepare(X)
        try:
            m = learner.fit(prepared, y.double(), rows=torch.arange(0, X.shape[0], 2))
        except RuntimeError as exc:  # no C compiler here
            pytest.skip(str(exc))
        covers.append(m.cover)
    assert torch.equal(covers[0], covers[1])
    K = (covers[0].numel() - 1) // 2
    assert covers[0][0] == len(range(0, X.shape[0], 2)) == covers[0][K:].sum()


def test_save_load_round_trip_and_old_files(tmp_path):
    ens, X = tree_model()
    path = tmp_path / "m.safetensors"
    ens.save(path)
    back = Ensemble.load(path)
    assert all(torch.equal(a.cover, b.cover) for a, b in zip(ens.models, back.models))
    assert torch.equal(back.predict(X, contrib=True), ens.predict(X, contrib=True))
    assert torch.equal(back.apply(X), ens.apply(X))
    rb, Xs = stump_model()
    rb.model_.save(tmp_path / "s.safetensors")
    stumps = Ensemble.load(tmp_path / "s.safetensors")
    assert torch.equal(stumps.predict(Xs, contrib=True), rb.model_.predict(Xs, contrib=True))
    # a file written before covers: the same model without them
    old = Ensemble.load(path)
    for m in old.models:
        m.cover = None
    old.save(tmp_path / "old.safetensors")
    old = Ensemble.load(tmp_path / "old.safetensors")
    assert torch.equal(old.predict(X), ens.predict(X))
    with pytest.raises(ValueError, match=r"^predict\(contrib=True\): round 1 \(TreeModel\) has "
                                         r"no node covers[^\n]*$"):
        old.predict(X, contrib=True)


def test_n_rounds_and_ranker(tmp_path):
    from torchrankboost import BoostedRanker

    ens, X = tree_model()
    phi5 = ens.predict(X, contrib=True, n_rounds=5)
    assert (phi5.sum(1) - ens.predict(X, n_rounds=5)).abs().max() < 1e-9
    assert ens.apply(X, n_rounds=5).shape == (X.shape[0], 5)
    Xq, y, g = letor_with_nans(4)
    ranker = BoostedRanker(n_rounds=4, max_leaves=4, learner_params={"min_samples_leaf": 5})
    ranker.fit(Xq.numpy(), y.numpy(), group=g.sizes.numpy())
    phi = ranker.predict(Xq.numpy(), contrib=True)
    assert phi.shape == (Xq.shape[0], Xq.shape[1] + 1)
    np.testing.assert_allclose(phi.sum(1), ranker.predict(Xq.numpy()), rtol=0, atol=1e-9)
    assert ranker.apply(Xq.numpy()).shape == (Xq.shape[0], ranker.model_.n_rounds)
