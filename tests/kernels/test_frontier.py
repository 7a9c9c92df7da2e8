"""The batched best-first grower (kernels/frontier.py) and its two primitives.

* ``batch_histograms`` and ``route_rows`` against loop references (every slot, rows of no
  node, the compaction bound, int16 codes);
* the grown trees equal the compiled kernel's bit for bit (structure, gains, leaf sums, the
  output of every row) on random problems with NaNs, exact ties, ``rows`` subsets,
  ``max_depth``, a binding ``min_samples_leaf``, feature sampling and int16 codes. The inputs
  are integer-derived (``w·t`` a multiple of 2^-20, ``w`` of 2^-10, small): float64 sums of
  them are exact, so the compiled kernel's float64 histograms and the int64 fixed point hold
  the same values and every gain is the same float;
* one host synchronisation per batch, at most ``depth + 1`` batches per tree, whatever the
  rows and the leaves (the sync counter of ``tests/sync_counter.py``).
"""

import math

import pytest
import torch

from sync_counter import SyncCounter
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.kernels import native_backend
from torchrankboost.kernels.fixed_point import quantize_fit
from torchrankboost.kernels.torch_backend import TorchBackend

needs_native = pytest.mark.skipif(native_backend.status() != "native",
                                  reason=f"compiled kernels unavailable: {native_backend.status()}")


def _codes(n, F, seed, n_bins=255):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[torch.rand(n, F, generator=g) < 0.1] = math.nan
    return RegressionTree(n_bins=n_bins).prepare(X)


def _reference_histograms(p, q, slot, B):
    n, F = p.codes.shape
    S = p.missing_code + 1
    out = torch.zeros((B, 3, F, S), dtype=torch.int64)
    for r in range(n):
        b = int(slot[r])
        if b < 0:
            continue
        for f in range(F):
            c = int(p.codes[r, f])
            out[b, 0, f, c] += int(q[r, 0])
            out[b, 1, f, c] += int(q[r, 1])
            out[b, 2, f, c] += 1
    return out


@pytest.mark.parametrize("n_bins", [255, 600])
def test_batch_histograms_equal_the_loop(n_bins):
    p = _codes(300, 4, 1, n_bins)
    g = torch.Generator().manual_seed(2)
    q = torch.randint(-2 ** 52, 2 ** 52, (300, 2), generator=g)
    slot = torch.randint(-1, 5, (300,), generator=g, dtype=torch.int32)
    ref = _reference_histograms(p, q, slot, 5)
    be = TorchBackend()
    exact = int((slot >= 0).sum())
    for max_rows in (None, exact, exact + 7, 10 ** 6):
        assert torch.equal(be.batch_histograms(p, q, slot, 5, max_rows=max_rows), ref)


def test_batch_histograms_at_the_extremes_of_the_fixed_point():
    """|q| near 2^62 / n: exact integer sums."""
    p = _codes(64, 2, 3)
    q = torch.full((64, 2), (1 << 62) // 64 - 1, dtype=torch.int64)
    q[::2, 0] *= -1
    slot = torch.zeros(64, dtype=torch.int32)
    ref = _reference_histograms(p, q, slot, 1)
    assert torch.equal(TorchBackend().batch_histograms(p, q, slot, 1), ref)


def test_route_rows_equals_the_loop():
    p = _codes(200, 3, 4)
    g = torch.Generator().manual_seed(5)
    leaf = torch.randint(-1, 4, (200,), generator=g, dtype=torch.int32)
    feature = torch.tensor([2, 0, 1, 0])
    bins = torch.tensor([3, 100, 128, 0])
    dl = torch.tensor([True, False, True, False])
    right = torch.tensor([4, -1, 5, 6], dtype=torch.int32)
    got = TorchBackend().route_rows(p, leaf, feature, bins, dl, right)
    assert got.dtype == torch.int32
    for r in range(200):
        lf = int(leaf[r])
        want = lf
        if lf >= 0 and int(right[lf]) >= 0:
            c = int(p.codes[r, int(feature[lf])])
            left = bool(dl[lf]) if c == p.missing_code else c <= int(bins[lf])
            want = lf if left else int(right[lf])
        assert int(got[r]) == want


def _integer_problem(seed, n, F):
    """Features with NaNs and few distinct values (exact ties), a duplicated feature (equal
    gains: the lower feature wins), integer-derived ``w·t`` and ``w``."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[:, 0] = torch.randint(0, 3, (n,), generator=g).double()
    X[:, F - 1] = X[:, 1]  # a copy: every split of it ties with feature 1's
    X[torch.rand(n, F, generator=g) < 0.1] = math.nan
    wt = torch.randint(-2 ** 19, 2 ** 19, (n,), generator=g).double() * 2.0 ** -20
    w = torch.randint(0, 2 ** 10, (n,), generator=g).double() * 2.0 ** -10
    if seed % 3 == 1:
        w = torch.ones(n, dtype=torch.float64)
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 3 == 0 else None
    return X, wt, w, rows


def _grow_both(X, wt, w, rows, feat_ok, **kw):
    tree = RegressionTree(**kw)
    p = tree.prepare(X)
    params = tree.params
    fixed = quantize_fit(p, [wt, w], rows)
    a = native_backend.NativeBackend().grow(p, fixed, rows, feat_ok, params=params, reduce=None)
    b = TorchBackend().grow(p, fixed, rows, feat_ok, params=params, reduce=None)
    return p, a, b


def _assert_same_growth(a, b, n, rows):
    for k in ("split_feature", "threshold_bin", "default_left", "left_child", "right_child",
              "split_gain", "depth"):
        assert getattr(a, k) == getattr(b, k), k
    assert torch.equal(a.leaf_sums, b.leaf_sums)
    assert torch.equal(a.leaf_count, b.leaf_count)
    if rows is None:
        values = torch.arange(a.leaf_sums.shape[0], dtype=torch.float64) * 0.5 - 3
        assert torch.equal(a.output(values), b.output(values))


@needs_native
@pytest.mark.parametrize("seed", range(12))
def test_frontier_equals_the_compiled_kernel(seed):
    g = torch.Generator().manual_seed(100 + seed)
    n = int(torch.randint(40, 2500, (), generator=g))
    F = int(torch.randint(3, 9, (), generator=g))
    X, wt, w, rows = _integer_problem(seed, n, F)
    feat_ok = torch.ones(F, dtype=torch.bool)
    if seed % 5 == 0:
        feat_ok[int(torch.randint(0, F, (), generator=g))] = False
    kw = dict(max_leaves=int(torch.randint(2, 80, (), generator=g)),
              min_samples_leaf=int(torch.randint(1, 40, (), generator=g)),
              l2=float(seed % 4), n_bins=int(torch.randint(2, 256, (), generator=g)),
              max_depth=None if seed % 4 else 4, min_child_weight=0.0 if seed % 7 == 0 else 1e-3,
              min_split_gain=0.0 if seed % 6 else 1e-3)
    p, a, b = _grow_both(X, wt, w, rows, feat_ok, **kw)
    _assert_same_growth(a, b, n, rows)


@needs_native
@pytest.mark.parametrize("n_bins", [300, 1023])
def test_frontier_equals_the_compiled_kernel_on_int16_codes(n_bins):
    X, wt, w, rows = _integer_problem(5, 3000, 5)
    feat_ok = torch.ones(5, dtype=torch.bool)
    p, a, b = _grow_both(X, wt, w, rows, feat_ok, n_bins=n_bins, max_leaves=40,
                         min_samples_leaf=3)
    assert p.codes.dtype == torch.int16 and len(a.split_feature) > 10
    _assert_same_growth(a, b, 3000, rows)


@needs_native
def test_equal_gains_split_the_lower_leaf_first():
    """Two halves of the same rows, ``w·t`` negated in the second: the gains ``G²/(H + λ)``
    are equal bit for bit, so after the root splits the halves apart every leaf of one half
    ties with its twin in the other; the lower leaf id goes first, and the budget ends in the
    middle of ties."""
    X0, wt0, w0, _ = _integer_problem(3, 400, 4)
    X = torch.cat([torch.cat([X0, torch.zeros(400, 1, dtype=torch.float64)], 1),
                   torch.cat([X0, torch.ones(400, 1, dtype=torch.float64)], 1)])
    wt0 = wt0 + 2.0 ** -3  # the halves' means +c and -c: the root separates them
    wt, w = torch.cat([wt0, -wt0]), torch.cat([w0, w0])
    for leaves in (6, 9, 16, 40):
        _, a, b = _grow_both(X, wt, w, None, torch.ones(5, dtype=torch.bool), max_leaves=leaves,
                             min_samples_leaf=5)
        assert a.split_feature[0] == 4 and a.split_gain[1] == a.split_gain[2]
        _assert_same_growth(a, b, 800, None)


def _tree_syncs(learner, p, t):
    with SyncCounter() as sc:
        model = learner.fit(p, t)
    return sc.syncs, model


def test_syncs_per_tree_follow_the_depth_not_rows_or_leaves():
    """One host synchronisation per batch and at most depth + 1 batches, plus two in the
    learner (the target's finiteness, the covers); the same bound at 4x the rows and 4x the
    leaves (max_depth 5)."""
    from torchrankboost.data import make_letor
    counts = {}
    for docs in (150, 600):
        data = make_letor(docs, 20, 10, seed=1)
        t = torch.randn(data.X.shape[0], dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        for leaves in (8, 32):
            learner = RegressionTree(max_leaves=leaves, max_depth=5, kernel="torch",
                                     min_samples_leaf=5)
            p = learner.prepare(data.X)
            learner.fit(p, t)  # the per-prepared reads (the most value bins)
            syncs, model = _tree_syncs(learner, p, t)
            assert syncs <= model.depth + 1 + 2, (docs, leaves, syncs, model.depth)
            counts[docs, leaves] = syncs
    assert max(counts.values()) <= 5 + 1 + 2


def test_a_deep_tree_takes_one_batch_per_level():
    """255 leaves, unlimited depth: at most depth + 1 batches."""
    from torchrankboost.data import make_letor
    data = make_letor(300, 20, 8, seed=2)
    t = torch.randn(data.X.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    learner = RegressionTree(max_leaves=255, min_samples_leaf=2, kernel="torch")
    p = learner.prepare(data.X)
    learner.fit(p, t)
    with SyncCounter() as sc:
        model = learner.fit(p, t)
    assert model.num_leaves == 255
    assert sc.by_kind["tolist"] <= model.depth + 1
    assert sc.syncs <= model.depth + 1 + 2
