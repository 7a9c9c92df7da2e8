"""The compiled tree kernels against the pure-torch reference path: identical trees.

Both paths grow the same best-first trees; the compiled one (``kernels/trees.c``)
must give the same split features, thresholds, NaN sides, gains and leaf values bit for bit,
for any thread count, and the same boosted ensembles.
"""

import math

import pytest
import torch

import torchrankboost._native as native
from torchrankboost.boosting import Booster
from torchrankboost import kernels as K
from torchrankboost.kernels import native_backend
from torchrankboost.kernels.histogram import histogram
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss, QBRankLoss

pytestmark = pytest.mark.skipif(native_backend.status() != "native",
                                reason=f"compiled kernels unavailable: {native_backend.status()}")


def _random_problem(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(40, 2500, (), generator=g))
    F = int(torch.randint(1, 10, (), generator=g))
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[torch.rand(n, F, generator=g) < 0.1] = math.nan
    X[:, 0] = torch.randint(0, 3, (n,), generator=g).double()  # few distinct values
    t = torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) if seed % 2 else None
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 3 == 0 else None
    kw = dict(max_leaves=int(torch.randint(2, 40, (), generator=g)),
              min_samples_leaf=int(torch.randint(1, 30, (), generator=g)),
              l2=float(seed % 4), n_bins=int(torch.randint(2, 256, (), generator=g)),
              feature_fraction=0.6 if seed % 5 == 0 else 1.0,
              max_depth=None if seed % 4 else 4, min_child_weight=0.0 if seed % 7 == 0 else 1e-3)
    return X, t, w, rows, kw


def _assert_same_tree(a, b):
    for k in a._tensor_names:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and torch.equal(x, y), k
    assert a.depth == b.depth


@pytest.mark.parametrize("seed", range(24))
def test_native_tree_equals_torch_tree(seed):
    X, t, w, rows, kw = _random_problem(seed)
    ref = RegressionTree(kernel="torch", **kw)
    nat = RegressionTree(kernel="native", **kw)
    p = ref.prepare(X)
    a = ref.fit(p, t, w, rows=rows)
    b = nat.fit(p, t, w, rows=rows)
    assert ref.kernel_ == "torch" and nat.kernel_ == "native"
    _assert_same_tree(a, b)
    assert torch.equal(a.predict_prepared(p, kernel="torch"), b.predict_prepared(p))
    assert torch.equal(a.predict(X), b.predict_prepared(p))


def test_native_histogram_equals_reference():
    X, t, w, rows, _ = _random_problem(3)
    p = RegressionTree().prepare(X)
    w = torch.rand(X.shape[0], dtype=torch.float64)
    vals = torch.stack([w * t, w], 1)
    lib = native_backend.library()
    for r in (None, torch.arange(0, X.shape[0], 3)):
        ref = histogram(p.codes, r, vals, slots=256, packed=torch.complex(vals[:, 0], vals[:, 1]))
        out = torch.empty((X.shape[1], 256, 3), dtype=torch.float64)
        r32 = None if r is None else r.to(torch.int32)
        lib.trb_histogram(p.codes.data_ptr(), X.shape[0], X.shape[1],
                          None if r32 is None else r32.data_ptr(),
                          X.shape[0] if r is None else r.numel(), vals.contiguous().data_ptr(),
                          out.data_ptr(), 256, 2)
        assert torch.equal(out.permute(2, 0, 1), ref)


@pytest.mark.parametrize("queries", [60, 1200])
def test_thread_count_does_not_change_trees(queries):
    """Histograms split by feature and the blocked partition (from 65,536 rows) give the
    trees of one thread, and the torch path's."""
    d = make_letor(queries, 60, 6, seed=1)
    t = torch.randn(d.X.shape[0], dtype=torch.float64)
    tree = RegressionTree(max_leaves=31, kernel="native")
    p = tree.prepare(d.X)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = tree.fit(p, t)
        torch.set_num_threads(2)
        b = tree.fit(p, t)
        c, fc = tree.fit_predict(p, t)
    finally:
        torch.set_num_threads(before)
    _assert_same_tree(a, b)
    _assert_same_tree(a, c)
    assert torch.equal(fc, a.predict_prepared(p, kernel="torch"))
    _assert_same_tree(a, RegressionTree(max_leaves=31, kernel="torch").fit(p, t))


@pytest.mark.parametrize("loss", [ExponentialPairwiseLoss(), QBRankLoss()], ids=["exp", "qbrank"])
def test_booster_same_ensemble_on_both_paths(loss):
    d = make_letor(40, 30, 8, seed=2)
    models = []
    for kernel in ("torch", "native"):
        b = Booster(loss, RegressionTree(max_leaves=8, min_samples_leaf=5, kernel=kernel),
                    n_rounds=8, learning_rate=0.3, verbose=False)
        models.append(b.fit(d.X, d.labels, d.groups))
    assert torch.equal(models[0].predict(d.X), models[1].predict(d.X))


def test_unavailable_kernels_are_announced(monkeypatch):
    def refuse():
        raise native.NativeUnavailable("no C compiler (test)")

    monkeypatch.setattr(native_backend, "library", refuse)
    monkeypatch.setattr(K, "_warned_fallback", False)
    X, t, _, _, _ = _random_problem(1)
    with pytest.raises(RuntimeError, match="no C compiler"):
        tree = RegressionTree(kernel="native")
        tree.fit(tree.prepare(X), t)
    tree = RegressionTree()
    with pytest.warns(RuntimeWarning, match="pure-torch path"):
        tree.fit(tree.prepare(X), t)
    assert tree.kernel_ == "torch"


def test_kernel_option_is_checked():
    with pytest.raises(ValueError, match="kernel"):
        RegressionTree(kernel="fast")


@pytest.mark.parametrize("kernel", ["torch", "native"])
def test_fit_predict_equals_fit_then_predict(kernel):
    X, t, w, rows, kw = _random_problem(4)
    tree = RegressionTree(kernel=kernel, **kw)
    p = tree.prepare(X)
    for r in (None, torch.arange(0, X.shape[0], 2)):
        model, f = tree.fit_predict(p, t, w, rows=r)
        assert torch.equal(f, model.predict_prepared(p))
