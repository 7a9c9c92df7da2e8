"""The oblivious tree's levels on the device (kernels/level_growth.py): the same trees as the
compiled kernels bit for bit on integer-derived problems (``w·t`` and ``w`` small multiples of
powers of two: float64 and int64 sums hold the same values), one host synchronisation per
level."""

import math

import pytest
import torch

from sync_counter import SyncCounter
from torchrankboost.boosting.learners import ObliviousTree
from torchrankboost.kernels import native_backend


def _problem(seed, n=1500, F=6):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[:, 0] = torch.randint(0, 3, (n,), generator=g).double()  # ties
    X[:, F - 1] = X[:, 1]  # equal level gains: the lower feature wins
    X[torch.rand(n, F, generator=g) < 0.1] = math.nan
    t = torch.randint(-2 ** 9, 2 ** 9, (n,), generator=g).double() * 2.0 ** -10
    w = torch.randint(1, 2 ** 10, (n,), generator=g).double() * 2.0 ** -10
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 2 else None
    return X, t, w, rows


@pytest.mark.skipif(native_backend.status() != "native", reason="compiled kernels unavailable")
@pytest.mark.parametrize("seed", range(6))
def test_device_levels_equal_the_compiled_kernels(seed):
    X, t, w, rows = _problem(seed)
    kw = dict(depth=1 + seed, min_samples_leaf=1 + 5 * seed, l2=float(seed % 2),
              min_split_gain=0.0 if seed < 5 else 0.05, n_bins=int(20 + 40 * seed))
    out = []
    for kernel in ("native", "torch"):
        tree = ObliviousTree(kernel=kernel, **kw)
        p = tree.prepare(X)
        out.append(tree.fit_predict(p, t, w, rows=rows))
    (a, fa), (b, fb) = out
    for k in a._tensor_names:
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    assert a.depth == b.depth and torch.equal(a.cover, b.cover) and torch.equal(fa, fb)


def test_one_sync_per_level():
    """Per tree: one host synchronisation per level (the last one refused included), plus
    the learner's check of the target; the same at 4x the rows."""
    from torchrankboost.data import make_letor
    for docs in (100, 400):
        data = make_letor(docs, 20, 8, seed=3)
        t = torch.randn(data.X.shape[0], dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        tree = ObliviousTree(depth=5, kernel="torch")
        p = tree.prepare(data.X)
        tree.fit(p, t)
        with SyncCounter() as sc:
            model = tree.fit(p, t)
        assert model.depth == 5
        assert sc.by_kind["tolist"] == 5 and sc.syncs <= 5 + 1
