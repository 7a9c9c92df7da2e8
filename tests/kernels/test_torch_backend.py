"""The pure-torch backend (kernels/torch_backend.py), the reference on any device: bin codes
are ``searchsorted``'s, an ensemble's scores are the per-tree loop's, the level histograms are
the histograms of each built node's rows (summed over the ranks)."""

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.kernels.binning import bin_features
from torchrankboost.kernels.fixed_point import quantize
from torchrankboost.kernels.histogram import histogram
from torchrankboost.kernels.torch_backend import TorchBackend, scatter_int64, scatter_packed


def _features(n=900, F=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=dtype)
    X[:, 1] = X[:, 1].round()
    X[torch.rand(n, F, generator=g) < 0.1] = float("nan")
    X[::17, 3] = float("inf")
    return X


def test_apply_bins_is_searchsorted(device):
    X = _features().to(device)
    edges = bin_features(X[:300], n_bins=20).edges
    for missing, dtype in ((255, torch.uint8), (20, torch.int16)):
        got = TorchBackend().apply_bins(X, edges, missing_code=missing, dtype=dtype)
        for f in range(X.shape[1]):
            ref = torch.searchsorted(edges[f].contiguous(), X[:, f].contiguous(), side="left")
            ref[torch.isnan(X[:, f])] = missing
            assert got.dtype == dtype and torch.equal(got[:, f].long(), ref), f


def test_predict_trees_adds_the_trees_in_round_order(device):
    X = _features(seed=1).to(device)
    t = torch.sin(X[:, 0].nan_to_num()) + X[:, 1].nan_to_num()
    tree = RegressionTree(max_leaves=6, min_samples_leaf=5, kernel="torch")
    p = tree.prepare(X)
    trees = [tree.fit(p, t * k) for k in (1.0, -0.5, 2.0)]
    weights = [0.1, 0.3, 0.05]
    out = torch.full((X.shape[0],), 0.25, dtype=torch.float64, device=device)
    TorchBackend().predict_trees(trees, weights, X, out, cache={})
    ref = torch.full_like(out, 0.25)
    for m, w in zip(trees, weights):
        ref += w * m.predict(X, kernel="torch").to(torch.float64)
    assert torch.equal(out, ref)


def test_level_histograms_are_the_built_nodes_histograms(device):
    X = _features(seed=2).to(device)
    p = bin_features(X, n_bins=31)
    g = torch.Generator().manual_seed(2)
    values = quantize(torch.rand(X.shape[0], 2, generator=g, dtype=torch.float64).to(device),
                      num_rows=X.shape[0]).q
    rows = torch.arange(0, X.shape[0], 2, device=device)
    counts = [100, 0, rows.numel() - 100]
    seen = []
    out = TorchBackend().level_histograms(p, values, rows, counts, [0, 1, 2],
                                          reduce=lambda buf: seen.append(buf.shape) or buf)
    assert out.shape == (3, 3, X.shape[1], 256) and seen == [out.shape]
    parts = (rows[:100], rows[:0], rows[100:])
    for j, r in enumerate(parts):
        assert torch.equal(out[j], histogram(p.codes, r, values, slots=256)), j


def test_packed_quantized_histograms_equal_the_int64_scatter(device):
    """Quantized channels (bits 2, 8, 16, every field at its extremes) packed two to an int64
    lane give the int64 scatter's sums; the batch pass with ``bits`` the one without; more
    rows than a packed group are refused with one line."""
    X = _features(n=700, seed=3).to(device)
    p = RegressionTree(n_bins=16).prepare(X)
    n, F = p.codes.shape
    S = p.missing_code + 1
    g = torch.Generator().manual_seed(4)
    slot = torch.randint(-1, 3, (n,), generator=g, dtype=torch.int32).to(device)
    for bits in (2, 8, 16):
        L = (1 << (bits - 1)) - 1
        q = torch.stack([torch.randint(-L, L + 1, (n,), generator=g),
                         torch.randint(0, 1 << bits, (n,), generator=g)], 1)
        q[:50, 0], q[:50, 1], q[50:100, 0] = L, (1 << bits) - 1, -L
        q = q.to(device)
        off = (torch.arange(n, device=device) % 4) * S
        a = torch.zeros(3, F, 4 * S, dtype=torch.int64, device=device)
        b = torch.zeros_like(a)
        scatter_int64(a, p.codes, q, off)
        scatter_packed(b, p.codes, q, off, bits)
        assert torch.equal(a, b), bits
        be = TorchBackend()
        assert torch.equal(be.batch_histograms(p, q, slot, 3, bits=bits),
                           be.batch_histograms(p, q, slot, 3))
    with pytest.raises(ValueError, match="at most 2"):
        big = torch.zeros(1 << 16, 2, dtype=torch.int64)
        scatter_packed(torch.zeros(3, 1, 4, dtype=torch.int64),
                       torch.zeros(1 << 16, 1, dtype=torch.uint8), big,
                       torch.zeros(1 << 16, dtype=torch.int64), 16)
