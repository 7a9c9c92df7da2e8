"""The chooser (kernels/__init__.py): the one place that picks a tree backend. A backend
defined here and registered by one line (an entry of ``_AUTO_ORDER``) runs every kernel step:
binning, tree growth, oblivious levels, traversal and prediction; a named backend that cannot
run is an error, an unavailable one under ``"auto"`` is announced once; kernel names are
checked."""

from collections import Counter

import pytest
import torch

import torchrankboost._native as native
from torchrankboost import kernels as K
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.learners import ObliviousTree, RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.kernels import native_backend
from torchrankboost.kernels.torch_backend import TorchBackend


def _random_problem(seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(600, 5, generator=g, dtype=torch.float64)
    X[torch.rand(600, 5, generator=g) < 0.1] = float("nan")
    t = torch.randn(600, generator=g, dtype=torch.float64)
    return X, t, None, None, None


def test_unavailable_kernels_are_announced(monkeypatch):
    def refuse():
        raise native.NativeUnavailable("no C compiler (test)")

    monkeypatch.setattr(native_backend, "library", refuse)
    monkeypatch.setattr(native, "_announced", False)
    X, t, _, _, _ = _random_problem(1)
    with pytest.raises(RuntimeError, match="no C compiler"):
        tree = RegressionTree(kernel="native")
        tree.fit(tree.prepare(X), t)
    tree = RegressionTree()
    with pytest.warns(RuntimeWarning, match="pure-torch path"):
        tree.fit(tree.prepare(X), t)
    assert tree.kernel_ == "torch"


def test_kernel_option_is_checked():
    with pytest.raises(ValueError, match="kernel") as e:
        RegressionTree(kernel="fast")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="kernel"):
        K.choose_backend("fast", device=torch.device("cpu"), data_dtype=torch.uint8, num_rows=1)


class ToyBackend(TorchBackend):
    """A backend of another name: the torch reference, counting the calls of each step."""

    name = "toy"

    def __init__(self):
        self.calls = Counter()

    def grow(self, *a, **k):
        self.calls["grow"] += 1
        return super().grow(*a, **k)

    def leaves_from_codes(self, *a, **k):
        self.calls["leaves_from_codes"] += 1
        return super().leaves_from_codes(*a, **k)

    def leaves_from_raw(self, *a, **k):
        self.calls["leaves_from_raw"] += 1
        return super().leaves_from_raw(*a, **k)

    def predict_trees(self, *a, **k):
        self.calls["predict_trees"] += 1
        return super().predict_trees(*a, **k)

    def apply_bins(self, *a, **k):
        self.calls["apply_bins"] += 1
        return super().apply_bins(*a, **k)

    def level_histograms(self, *a, **k):
        self.calls["level_histograms"] += 1
        return super().level_histograms(*a, **k)

    def best_level(self, *a, **k):
        self.calls["best_level"] += 1
        return super().best_level(*a, **k)

    def batch_histograms(self, *a, **k):
        self.calls["batch_histograms"] += 1
        return super().batch_histograms(*a, **k)

    def route_rows(self, *a, **k):
        self.calls["route_rows"] += 1
        return super().route_rows(*a, **k)


def _every_step(kernel):
    """Bin, grow trees and oblivious trees, traverse and predict with ``kernel``."""
    d = make_letor(30, 20, 6, seed=4, dtype=torch.float64)
    X = d.X.clone()
    X[::7, 2] = float("nan")
    t = torch.randn(X.shape[0], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    tree = RegressionTree(max_leaves=9, min_samples_leaf=3, bin_sample_count=100, kernel=kernel)
    p = tree.prepare(X)  # edges from 100 sampled rows: the other rows are coded by apply_bins
    m, f = tree.fit_predict(p, t, rows=torch.arange(0, X.shape[0], 2))
    oblivious = ObliviousTree(depth=3, kernel=kernel)
    o = oblivious.fit(oblivious.prepare(X), t)
    ens = Ensemble([m, o], [0.5, 0.25], base_score=0.1, num_features=X.shape[1])
    return p.codes, f, ens.predict(X), (tree.kernel_, oblivious.kernel_)


def test_a_backend_is_one_class_and_one_line(monkeypatch):
    toy = ToyBackend()
    monkeypatch.setattr(K, "_AUTO_ORDER", (toy,) + K._AUTO_ORDER)  # the one line
    assert K.check_kernel("toy") == "toy"
    codes, f, scores, used = _every_step("auto")
    assert used == ("toy", "toy")
    # the trees grow through the batch primitives (both learners on a backend that has them)
    assert set(toy.calls) == {"apply_bins", "grow", "batch_histograms", "route_rows",
                              "leaves_from_codes", "predict_trees", "leaves_from_raw"}, toy.calls
    monkeypatch.setattr(K, "_AUTO_ORDER", K._AUTO_ORDER[1:])
    ref = _every_step("torch")
    assert ref[3] == ("torch", "torch")
    for a, b in zip((codes, f, scores), ref[:3]):
        assert a.dtype == b.dtype and torch.equal(a, b)
