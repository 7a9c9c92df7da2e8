"""The pure-torch backend (kernels/torch_backend.py), the reference on any device: bin codes
are ``searchsorted``'s, an ensemble's scores are the per-tree loop's, the level histograms are
the histograms of each built node's rows (summed over the ranks)."""

import torch

from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.kernels.binning import bin_features
from torchrankboost.kernels.fixed_point import quantize
from torchrankboost.kernels.histogram import histogram
from torchrankboost.kernels.torch_backend import TorchBackend


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
