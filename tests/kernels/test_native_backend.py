"""The compiled CPU backend (kernels/native_backend.py over trees.c) against the pure-torch
reference: identical trees (uint8 and int16 codes, any thread count, every row or none, NaNs
and exact ties), the same int64 histograms, the same boosted ensembles, the same bin codes and
the same ensemble scores, bit for bit; where a kernel does not apply the reference runs
instead.
"""

import math

import pytest
import torch

from torchrankboost import Ensemble
from torchrankboost.boosting import Booster
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.kernels import binning, native_backend
from torchrankboost.kernels.fixed_point import quantize
from torchrankboost.kernels.histogram import histogram
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
    if F > 2 and seed % 2 == 0:  # exact ties: a copy of a feature has the same gains
        X[:, F - 1] = X[:, 1]
    t = torch.randn(n, generator=g, dtype=torch.float64)
    if seed % 6 == 1:  # few distinct targets: equal sums in many bins
        t = t.sign()
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
    assert a.depth == b.depth and a.missing_code == b.missing_code


@pytest.mark.parametrize("seed", range(24))
def test_native_tree_equals_torch_tree(seed):
    X, t, w, rows, kw = _random_problem(seed)
    ref = RegressionTree(kernel="torch", **kw)
    nat = RegressionTree(kernel="native", **kw)
    p = ref.prepare(X)
    a = ref.fit(p, t, w, rows=rows)
    old = torch.get_num_threads()
    torch.set_num_threads(1 + seed % 2)  # the compiled kernels' result does not depend on it
    try:
        b = nat.fit(p, t, w, rows=rows)
    finally:
        torch.set_num_threads(old)
    assert ref.kernel_ == "torch" and nat.kernel_ == "native"
    _assert_same_tree(a, b)
    assert torch.equal(a.predict_prepared(p, kernel="torch"), b.predict_prepared(p))
    assert torch.equal(a.predict(X), b.predict_prepared(p))


def test_native_histogram_equals_reference():
    X, t, w, rows, _ = _random_problem(3)
    p = RegressionTree().prepare(X)
    w = torch.rand(X.shape[0], dtype=torch.float64)
    vals = quantize(torch.stack([w * t, w], 1), num_rows=X.shape[0]).q
    lib = native_backend.library()
    for r in (None, torch.arange(0, X.shape[0], 3)):
        ref = histogram(p.codes, r, vals, slots=256)
        out = torch.empty((X.shape[1], 256, 3), dtype=torch.int64)
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


@pytest.mark.parametrize("kernel", ["torch", "native"])
def test_fit_predict_equals_fit_then_predict(kernel):
    X, t, w, rows, kw = _random_problem(4)
    tree = RegressionTree(kernel=kernel, **kw)
    p = tree.prepare(X)
    for r in (None, torch.arange(0, X.shape[0], 2)):
        model, f = tree.fit_predict(p, t, w, rows=r)
        assert torch.equal(f, model.predict_prepared(p))


# ----------------------------------------------------------------------------- int16 codes


def _problem(seed, n=3000, F=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[torch.rand(n, F, generator=g) < 0.08] = math.nan
    X[:, 1] = torch.randint(0, 4, (n,), generator=g).double()  # few distinct values
    if seed % 2 == 0:  # exact ties: a copy of a feature has the same gains
        X[:, F - 1] = X[:, 0]
    t = torch.sin(4 * X[:, 0].nan_to_num()) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) if seed % 2 else None
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 3 == 0 else None
    return X, t, w, rows


@pytest.mark.parametrize("seed,n_bins,threads,n", [(0, 256, 1, 3000), (1, 300, 2, 3000),
                                                   (2, 1023, 1, 3000), (7, 1023, 2, 70000),
                                                   (4, 5000, 2, 3000), (5, 700, 1, 3000)])
def test_native_equals_torch_bit_for_bit_on_int16_codes(seed, n_bins, threads, n):
    # n = 70000 rows x 5 features: the threaded histogram and row partition run
    X, t, w, rows = _problem(seed, n=n)
    kw = dict(n_bins=n_bins, max_leaves=25, min_samples_leaf=1 + seed * 3, l2=float(seed % 2),
              max_depth=None if seed % 2 else 6)
    ref, nat = RegressionTree(kernel="torch", **kw), RegressionTree(kernel="native", **kw)
    p = ref.prepare(X)
    assert p.codes.dtype == torch.int16 and p.missing_code == n_bins
    a, fa = ref.fit_predict(p, t, w, rows=rows)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)  # the native kernels' result does not depend on it
    try:
        b, fb = nat.fit_predict(p, t, w, rows=rows)
    finally:
        torch.set_num_threads(old)
    assert (ref.kernel_, nat.kernel_) == ("torch", "native") and a.num_leaves > 2
    if seed % 2 == 0:  # the copy of feature 0 ties with it exactly: the lower feature wins
        assert 0 in a.split_feature.tolist() and X.shape[1] - 1 not in a.split_feature.tolist()
    _assert_same_tree(a, b)
    assert torch.equal(fa, fb)
    # the traversal of the codes: the same leaves in both kernels
    assert torch.equal(a.predict_prepared(p, kernel="torch"), b.predict_prepared(p))


def test_native_histogram16_equals_reference():
    X, t, _, _ = _problem(9, n=5000)
    p = RegressionTree(n_bins=900).prepare(X)
    S = p.missing_code + 1
    w = torch.rand(X.shape[0], dtype=torch.float64)
    vals = quantize(torch.stack([w * t, w], 1), num_rows=X.shape[0]).q
    for r in (None, torch.arange(0, X.shape[0], 3)):
        ref = histogram(p.codes, r, vals, slots=S)
        out = torch.empty((X.shape[1], S, 3), dtype=torch.int64)
        r32 = None if r is None else r.to(torch.int32)
        native_backend.library().trb_histogram16(
            p.codes.data_ptr(), X.shape[0], X.shape[1], None if r32 is None else r32.data_ptr(),
            X.shape[0] if r is None else r.numel(), vals.data_ptr(), out.data_ptr(), S, 2)
        assert torch.equal(out.permute(2, 0, 1), ref)


def test_native_tree_on_no_rows_counts_no_rows():
    """A fit on an empty ``rows`` (a rank whose rows all weigh 0) grows the torch kernels'
    tree: the compiled kernel must not read an empty row list as "every row"."""
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=gen)
    t = torch.randn(50, generator=gen, dtype=torch.float64)
    w = torch.rand(50, generator=gen, dtype=torch.float64)
    none = torch.empty(0, dtype=torch.int64)
    fits = []
    for kernel in ("native", "torch"):
        tree = RegressionTree(max_leaves=4, min_samples_leaf=2, kernel=kernel)
        fits.append(tree.fit(tree.prepare(X), t, w, rows=none))
    a, b = fits
    assert a.split_feature.numel() == b.split_feature.numel() == 0
    assert torch.equal(a.leaf_value, b.leaf_value)


# ----------------------------------------------------------------------------- bin codes


def _reference(X, edges, missing, dtype):
    Xt = X.t().contiguous()
    ref = torch.searchsorted(edges, Xt, side="left")
    ref.masked_fill_(torch.isnan(Xt), missing)
    return ref.t().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_codes_equal_searchsorted(dtype):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3000, 9, generator=g, dtype=dtype)
    X[X > 1.8] = float("nan")
    X[:, 2] = X[:, 2].round()  # few distinct values: exact bins, values on the edges
    X[::7, 3], X[::11, 4], X[::13, 5] = float("inf"), -float("inf"), -0.0
    X[:, 6] = 0.0  # one constant feature
    edges = binning.bin_features(X[:1000], n_bins=16).edges
    for missing, code_dtype in ((255, torch.uint8), (300, torch.int16)):
        got = native_backend.NativeBackend().apply_bins(X, edges, missing_code=missing,
                                                        dtype=code_dtype)
        assert torch.equal(got, _reference(X, edges, missing, code_dtype))
    # apply_bins takes the compiled path and gives the same codes as before
    assert torch.equal(binning.apply_bins(X, edges), _reference(X, edges, 255, torch.uint8))


def test_the_reference_where_the_kernel_does_not_apply(monkeypatch):
    """Codes the compiled coder does not make (X not in the edges' dtype, int64 codes, NaN
    in the edges) come from the torch reference, never from the kernel."""
    def refuse():
        raise AssertionError("the compiled coder was called")

    monkeypatch.setattr(native_backend, "library", refuse)
    X = torch.randn(10, 3)
    edges = torch.full((3, 4), float("inf"))
    nat, ref = native_backend.NativeBackend(), native_backend.TorchBackend()
    nan_edges = edges.clone()
    nan_edges[0, 0] = float("nan")
    for x, e, dt in ((X.double(), edges, torch.uint8), (X, edges, torch.int64),
                     (X, nan_edges, torch.uint8)):
        got = nat.apply_bins(x, e, missing_code=255, dtype=dt)
        assert torch.equal(got, ref.apply_bins(x, e, missing_code=255, dtype=dt))


# ----------------------------------------------------------------------------- prediction


def _per_round(model, X, T=None):
    T = model.n_rounds if T is None else T
    out = torch.full((X.shape[0],), model.base_score, dtype=torch.float64)
    for t in range(T):
        out += model.weights[t] * model.models[t].predict(X).to(torch.float64)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pass_equals_the_per_round_loop(dtype):
    d = make_letor(40, 15, 6, seed=1, dtype=dtype)
    X = d.X.clone()
    X[::3, 2] = float("nan")
    model = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=7), n_rounds=8,
                    verbose=False).fit(X, d.labels, d.groups)
    for Xq in (X, X.double(), X.float()):
        assert torch.equal(model.predict(Xq), _per_round(model, Xq))
        assert torch.equal(model.predict(Xq, n_rounds=3), _per_round(model, Xq, 3))
        assert torch.equal(model.predict(Xq, batch_size=7), _per_round(model, Xq))
    # a tree changed in place is repacked, not served stale
    model.models[0].leaf_value.mul_(2.0)
    assert torch.equal(model.predict(X), _per_round(model, X))
    # a mix of thresholds in float32 and float64 (an imported model compares in float64)
    m64 = model.models[1]
    model.models[1] = type(m64)(**{k: getattr(m64, k) for k in m64._tensor_names[:2]},
                                threshold=m64.threshold.double(),
                                **{k: getattr(m64, k) for k in m64._tensor_names[3:]},
                                depth=m64.depth)
    both = Ensemble(model.models, model.weights, base_score=0.25, num_features=X.shape[1])
    assert torch.equal(both.predict(X.float()), _per_round(both, X.float()))


def test_predict_trees_equals_the_reference():
    d = make_letor(30, 20, 6, seed=3, dtype=torch.float64)
    X = d.X.clone()
    X[::5, 1] = float("nan")
    tree = RegressionTree(max_leaves=9, min_samples_leaf=3)
    p = tree.prepare(X)
    g = torch.Generator().manual_seed(3)
    trees = [tree.fit(p, torch.randn(X.shape[0], generator=g, dtype=torch.float64))
             for _ in range(4)]
    weights = [0.5, 0.1, -0.2, 0.05]
    nat, ref = native_backend.NativeBackend(), native_backend.TorchBackend()
    for Xq in (X, X.float()):
        a = torch.full((X.shape[0],), 0.5, dtype=torch.float64)
        b = a.clone()
        nat.predict_trees(trees, weights, Xq, a, cache={})
        ref.predict_trees(trees, weights, Xq, b, cache={})
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- oblivious levels


@pytest.mark.parametrize("seed", range(4))
def test_level_steps_equal_the_reference(seed):
    """The level histograms and the level search of the compiled kernels: the reference's
    values and question bit for bit, on two levels of random node splits."""
    from torchrankboost.kernels import TreeParams

    X, t, w, _, _ = _random_problem(seed + 30)
    p = binning.bin_features(X, n_bins=int(40 + 50 * seed))
    n, F = p.codes.shape
    w = torch.ones(n, dtype=torch.float64) if w is None else w
    fixed = quantize(torch.stack([w * t, w], 1), num_rows=n)
    values = fixed.q
    params = TreeParams(max_leaves=8, max_depth=3, min_child_weight=1e-3,
                        min_samples_leaf=1 + seed, l2=float(seed), min_split_gain=0.0)
    nat, ref = native_backend.NativeBackend(), native_backend.TorchBackend()
    feat_ok = torch.rand(F, generator=torch.Generator().manual_seed(seed)) < 0.8
    feat_ok[0] = True
    node = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(seed))
    rows = torch.argsort(node, stable=True)
    counts = torch.bincount(node, minlength=4).tolist()
    hists = [b.level_histograms(p, values, rows, counts, [0, 1, 2, 3], reduce=None)
             for b in (nat, ref)]
    assert hists[0].shape == hists[1].shape == (4, 3, F, p.missing_code + 1)
    assert torch.equal(hists[0], hists[1])
    miss = hists[1][0, 2, :, -1] > 0
    a = nat.best_level(hists[0], p, feat_ok, miss, params=params, scale=fixed.scale)
    b = ref.best_level(hists[1], p, feat_ok, miss, params=params, scale=fixed.scale)
    assert (a is None) == (b is None)
    if a is not None:
        assert a[:3] == b[:3]
        assert torch.equal(a.node_gain, b.node_gain) and torch.equal(a.left_count, b.left_count)


# ------------------------------------------------------------------------------------------
# The histogram passes of trees_hist.h: the plain pass, the wide (AVX2) pass of the exact
# fixed point and the packed / paired passes of quantized channels give the same int64 sums
# (the reference's), uint8 and int16 codes, one or two threads, past a packed lane's flush.


def _quantized_q(n, bits, seed):
    """Channels within the quantized bounds, their extremes included."""
    g = torch.Generator().manual_seed(seed)
    L = (1 << (bits - 1)) - 1
    q = torch.stack([torch.randint(-L, L + 1, (n,), generator=g),
                     torch.randint(0, 1 << bits, (n,), generator=g)], 1)
    q[: n // 4, 0], q[: n // 4, 1] = L, (1 << bits) - 1  # every field at its largest
    q[n // 4: n // 2, 0] = -L
    return q.contiguous()


@pytest.mark.parametrize("bits,n,F,n_bins,threads", [
    (8, 40000, 3, 255, 2),  # 8 bits flush every 2^15 rows: more than one block
    (2, 3000, 5, 255, 1), (9, 3000, 4, 255, 2), (16, 5000, 3, 255, 1),
    (8, 3000, 4, 600, 1), (16, 3000, 3, 900, 2)])  # int16 codes
def test_quantized_histograms_equal_reference(bits, n, F, n_bins, threads):
    X, _, _, _ = _problem(bits, n=n)
    X = X[:, :F].contiguous()
    p = RegressionTree(n_bins=n_bins).prepare(X)
    S = p.missing_code + 1
    q = _quantized_q(n, bits, seed=bits)
    lib = native_backend.library()
    for r in (None, torch.arange(0, n, 3)):
        ref = histogram(p.codes, r, q, slots=S)
        out = torch.empty((F, S, 3), dtype=torch.int64)
        r32 = None if r is None else r.to(torch.int32)
        lib.trb_histogram_quantized(p.codes.data_ptr(), p.codes.element_size(), n, F,
                                    None if r32 is None else r32.data_ptr(),
                                    n if r is None else r.numel(), q.data_ptr(),
                                    out.data_ptr(), S, threads, bits)
        assert torch.equal(out.permute(2, 0, 1), ref)


@pytest.mark.parametrize("bits", [None, 8, 16])
def test_plain_pass_gives_the_fast_passes_trees(bits):
    d = make_letor(40, 40, 6, seed=3)
    t = torch.randn(d.X.shape[0], dtype=torch.float64)
    tree = RegressionTree(max_leaves=16, kernel="native", quantized_bits=bits)
    p = tree.prepare(d.X)
    lib = native_backend.library()
    gen = lambda: torch.Generator().manual_seed(11)  # noqa: E731
    a = tree.fit(p, t, generator=gen())
    lib.trb_set_fast_passes(0)
    try:
        b = tree.fit(p, t, generator=gen())
    finally:
        lib.trb_set_fast_passes(1)
    _assert_same_tree(a, b)


@pytest.mark.parametrize("seed", range(8))
def test_quantized_native_tree_equals_torch_tree(seed):
    X, t, w, rows, kw = _random_problem(seed)
    bits = (2, 8, 16)[seed % 3]
    trees = []
    for kernel in ("torch", "native"):
        lr = RegressionTree(kernel=kernel, quantized_bits=bits, **kw)
        p = lr.prepare(X)
        trees.append(lr.fit(p, t, w, rows=rows, generator=torch.Generator().manual_seed(seed)))
    _assert_same_tree(*trees)


def test_partition_from_the_row_major_codes_gives_the_same_trees(monkeypatch):
    """Without the column-major copy (above its share of the memory) the partition reads the
    row-major codes: the same rows, the same trees."""
    X, t, w, rows, kw = _random_problem(5)
    p = RegressionTree(**kw).prepare(X)
    a = RegressionTree(kernel="native", **kw).fit(p, t, w, rows=rows)
    assert p.cache["codes_cm"] is not None
    monkeypatch.setattr(native_backend, "COLUMN_COPY_SHARE", 0.0)
    p2 = RegressionTree(**kw).prepare(X)
    b = RegressionTree(kernel="native", **kw).fit(p2, t, w, rows=rows)
    assert p2.cache["codes_cm"] is None
    _assert_same_tree(a, b)
