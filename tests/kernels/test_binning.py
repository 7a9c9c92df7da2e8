"""Quantile binning: exact bins, quantile bins, NaN code, consistency of codes and edges."""

import numpy as np
import pytest
import torch

from torchrankboost.kernels.binning import apply_bins, bin_features, compute_bin_edges


def test_exact_bins_for_few_distinct_values(device):
    X = torch.tensor([[3.0], [1.0], [2.0], [1.0], [5.0], [float("nan")]], device=device)
    b = bin_features(X, n_bins=8)
    assert b.num_bins.tolist() == [4]
    assert b.edges[0, :3].tolist() == [1.5, 2.5, 4.0]
    assert b.edges[0, 3].item() == float("inf")
    assert b.codes[:, 0].tolist() == [2, 0, 1, 0, 3, 255]
    assert b.codes.dtype == torch.uint8 and b.missing_code == 255
    assert b.has_missing.tolist() == [True]


def test_quantile_bins_are_balanced_and_bounded(device):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(20000, 3, generator=g).to(device)
    b = bin_features(X, n_bins=16)
    assert (b.num_bins == 16).all()
    counts = torch.stack([torch.bincount(b.codes[:, f].long(), minlength=16) for f in range(3)])
    assert counts.min() > 20000 / 16 * 0.9 and counts.max() < 20000 / 16 * 1.1
    # a heavy value never straddles two bins
    X2 = torch.cat([torch.zeros(5000, 1), torch.randn(5000, 1, generator=g)]).to(device)
    b2 = bin_features(X2, n_bins=10)
    assert b2.num_bins.item() <= 10
    zero_codes = b2.codes[:5000, 0].unique()
    assert zero_codes.numel() == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_code_threshold_equivalence(device, dtype):
    """code <= t  <=>  x <= edges[f, t] for every t, and apply_bins reproduces the codes."""
    g = torch.Generator().manual_seed(2)
    X = torch.randn(3000, 4, generator=g, dtype=torch.float64)
    X[:, 1] = torch.round(X[:, 1] * 4)  # few distinct values
    X[::7, 2] = float("nan")
    X[:, 3] = X[:, 3] * 1e-30 + 1.0  # near-adjacent floats (midpoint rounding)
    X = X.to(device=device, dtype=dtype)
    b = bin_features(X, n_bins=32)
    assert torch.equal(apply_bins(X, b.edges), b.codes)
    for f in range(4):
        x = X[:, f]
        nb = int(b.num_bins[f])
        e = b.edges[f, :nb]
        assert bool((e[1:] > e[:-1]).all())
        c = b.codes[:, f].long()
        ok = ~torch.isnan(x)
        assert bool((c[~ok] == 255).all())
        for t in range(nb):
            assert torch.equal(c[ok] <= t, x[ok] <= b.edges[f, t])


def test_all_nan_and_constant_features():
    X = torch.tensor([[float("nan"), 2.0], [float("nan"), 2.0], [float("nan"), 2.0]])
    b = bin_features(X)
    assert b.num_bins.tolist() == [1, 1]
    assert b.codes[:, 0].tolist() == [255] * 3 and b.codes[:, 1].tolist() == [0] * 3


def test_sampling_is_seeded():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(5000, 2, generator=g)
    e1, _ = compute_bin_edges(X, n_bins=20, sample_count=500, seed=7)
    e2, _ = compute_bin_edges(X, n_bins=20, sample_count=500, seed=7)
    e3, _ = compute_bin_edges(X, n_bins=20, sample_count=500, seed=8)
    assert torch.equal(e1, e2) and not torch.equal(e1, e3)


def test_int16_codes_above_255_bins():
    X = torch.arange(1000, dtype=torch.float64).unsqueeze(1)
    b = bin_features(X, n_bins=600, max_bins=1000)
    assert b.codes.dtype == torch.int16 and b.missing_code == 600
    assert int(b.num_bins[0]) <= 600
    Xn = torch.tensor([[float("nan")], [5.0]], dtype=torch.float64)
    c = apply_bins(Xn, b.edges, missing_code=b.missing_code, dtype=torch.int16)
    assert c[0, 0].item() == 600


def test_validation():
    with pytest.raises(ValueError, match="n_bins"):
        bin_features(torch.randn(10, 2), n_bins=256)
    with pytest.raises(ValueError, match="n_bins"):
        bin_features(torch.randn(10, 2), n_bins=1)
    with pytest.raises(ValueError, match="X"):
        bin_features(torch.randn(10))
    with pytest.raises(ValueError, match="X"):
        bin_features(torch.ones(10, 2, dtype=torch.int64))
    b = bin_features(torch.randn(10, 2))
    with pytest.raises(ValueError, match="features"):
        apply_bins(torch.randn(3, 3), b.edges)


def test_quantiles_match_numpy_on_distinct_values():
    """With all-distinct values, bin boundaries sit at the k/B empirical quantiles."""
    x = np.random.default_rng(0).permutation(1000).astype(np.float64)
    b = bin_features(torch.from_numpy(x).unsqueeze(1), n_bins=10)
    counts = np.bincount(b.codes[:, 0].numpy(), minlength=10)
    assert counts.tolist() == [100] * 10


def _reference_edges(X, n_bins, sample_count=200_000, seed=0):
    """The per-feature loop (unique_consecutive + searchsorted on cumulative counts) that the
    vectorised compute_bin_edges replaced; edges must agree bit for bit."""
    from torchrankboost.kernels.binning import _safe_midpoints

    n, F = X.shape
    if n > sample_count:
        g = torch.Generator().manual_seed(int(seed))
        S = X.index_select(0, torch.randperm(n, generator=g)[:sample_count].sort().values)
    else:
        S = X
    S = torch.sort(S, dim=0).values
    n_valid = (~torch.isnan(S)).sum(0).tolist()
    out = []
    for f in range(F):
        col = S[: n_valid[f], f]
        if col.numel() == 0:
            out.append(col.new_empty(0))
            continue
        u, c = torch.unique_consecutive(col, return_counts=True)
        k = u.numel()
        if k <= n_bins:
            out.append(_safe_midpoints(u[:-1], u[1:]))
        else:
            targets = torch.arange(1, n_bins, dtype=torch.float64) * (col.numel() / n_bins)
            j = torch.searchsorted(torch.cumsum(c, 0).double(), targets, side="left").clamp_(max=k - 2)
            j = torch.unique(j)
            out.append(_safe_midpoints(u[j], u[j + 1]))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vectorised_edges_match_per_feature_loop(dtype):
    g = torch.Generator().manual_seed(3)
    for n, n_bins, sc in [(1, 4, 100), (7, 2, 100), (400, 3, 100), (3000, 16, 1000), (3000, 255, 200_000),
                          (2500, 600, 200_000)]:
        X = torch.randn(n, 7, generator=g, dtype=torch.float64)
        X[:, 0] = torch.round(X[:, 0] * 20)  # ties
        X[torch.rand(n, generator=g) < 0.3, 1] = float("nan")
        X[:, 2] = float("nan")  # all missing
        X[:, 3] = X[:, 3] * 1e-30 + 1.0  # adjacent floats
        X[:, 4] = torch.where(torch.rand(n, generator=g) < 0.6, 0.0, torch.round(X[:, 4] * 3))  # heavy value
        X[:, 5] = torch.where(torch.rand(n, generator=g) < 0.5, -0.0, X[:, 5])
        X = X.to(dtype)
        edges, num_bins = compute_bin_edges(X, n_bins=n_bins, sample_count=sc, seed=5)
        ref = _reference_edges(X, n_bins, sample_count=sc, seed=5)
        assert num_bins.tolist() == [e.numel() + 1 for e in ref]
        assert edges.shape[1] == max(e.numel() + 1 for e in ref)
        for f, e in enumerate(ref):
            assert torch.equal(edges[f, : e.numel()], e)
            assert torch.isinf(edges[f, e.numel() :]).all()


@pytest.mark.parametrize("sample_count", [200_000, 700])
def test_codes_read_off_the_sort_equal_apply_bins(device, sample_count):
    """Sampled rows are coded from the sort permutation, the rest by search: both equal
    apply_bins on every row (NaN, ±inf, ties, heavy values)."""
    g = torch.Generator().manual_seed(9)
    X = torch.randn(2000, 6, generator=g)
    X[:, 0] = torch.round(X[:, 0] * 4)
    X[torch.rand(2000, generator=g) < 0.25, 1] = float("nan")
    X[torch.rand(2000, generator=g) < 0.1, 2] = float("inf")
    X[torch.rand(2000, generator=g) < 0.1, 3] = -float("inf")
    X[:, 4] = torch.where(torch.rand(2000, generator=g) < 0.8, 0.0, X[:, 4])
    X = X.to(device)
    for n_bins in (4, 255, 1000):
        b = bin_features(X, n_bins=n_bins, sample_count=sample_count, seed=1, max_bins=32766)
        ref = apply_bins(X, b.edges, missing_code=b.missing_code, dtype=b.codes.dtype)
        assert torch.equal(b.codes, ref)
