"""The in-memory ranking data (``data/dataset.py``): per-query normalisation, queries shared
out over ranks (``shard_queries``, ``RankingData.shard``)."""

import math

import numpy as np
import pytest
import torch

from torchrankboost import Groups
from torchrankboost.data import RankingData, make_letor, normalize_per_query, shard_queries


def _normalize_reference(X, sizes):
    X = X.double()
    out = torch.zeros_like(X)
    start = 0
    for s in sizes.tolist():
        blk = X[start:start + s]
        if s:
            lo, hi = blk.min(0).values, blk.max(0).values
            rng = hi - lo
            out[start:start + s] = torch.where(rng > 0, (blk - lo) / torch.where(rng > 0, rng, 1), 0.0)
        start += s
    return out


@pytest.mark.parametrize("seed", range(4))
def test_normalize_per_query_matches_loop(seed, device):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 7, (9,), generator=g)  # empty queries included
    n = int(sizes.sum())
    X = torch.randn(n, 5, generator=g, dtype=torch.float64)
    X[:, 1] = torch.round(X[:, 1])  # ties / constant blocks
    X[:, 2] = 3.0  # constant everywhere -> 0
    groups = Groups.from_sizes(sizes)
    ref = _normalize_reference(X, sizes)
    out = normalize_per_query(X.to(device), groups.to(device))
    assert out.device.type == device.type
    torch.testing.assert_close(out.cpu(), ref)
    assert torch.all(out[:, 2] == 0)
    out32 = normalize_per_query(X.float().to(device), groups)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.cpu().double(), ref, atol=1e-6, rtol=1e-5)
    out1 = normalize_per_query(X[:, 0].to(device), groups)
    torch.testing.assert_close(out1.cpu(), ref[:, 0])


def test_normalize_nan_ignored_and_kept():
    X = torch.tensor([[1.0, 0.0], [float("nan"), 2.0], [3.0, 4.0], [5.0, float("nan")]])
    groups = Groups.from_sizes([3, 1])
    out = normalize_per_query(X, groups)
    assert out[0].tolist() == [0.0, 0.0]
    assert math.isnan(out[1, 0]) and out[1, 1] == 0.5
    assert out[2].tolist() == [1.0, 1.0]
    assert out[3, 0] == 0.0 and math.isnan(out[3, 1])
    with pytest.raises(ValueError, match="X"):
        normalize_per_query(torch.zeros(3, 2), groups)


@pytest.mark.parametrize("seed", range(6))
def test_shard_queries_balanced_contiguous_whole_queries(seed):
    gen = torch.Generator().manual_seed(seed)
    G = int(torch.randint(8, 400, (1,), generator=gen))
    sizes = torch.randint(0 if seed % 2 else 1, 60, (G,), generator=gen)
    N = int(sizes.sum())
    for W in (1, 2, 3, 5, 8):
        owner = shard_queries(sizes, W)
        assert owner.dtype == torch.int64 and owner.shape == (G,)
        assert bool((owner[1:] >= owner[:-1]).all()) and int(owner[0]) == 0
        assert torch.equal(torch.unique(owner), torch.arange(W))  # every rank has a query
        docs = torch.zeros(W, dtype=torch.long).index_add_(0, owner, sizes)
        assert int(docs.sum()) == N
        # each cut is the query boundary nearest to r N / W: within one query's size
        assert float((docs - N / W).abs().max()) <= 2 * int(sizes.max()), (docs, N / W)


def test_shard_queries_exact_cases_and_errors():
    sizes = [5, 1, 1, 1, 10, 2, 2, 3, 4, 8]
    assert shard_queries(sizes, 1).tolist() == [0] * 10
    assert shard_queries(sizes, 2).tolist() == [0] * 5 + [1] * 5  # 18 / 19 documents
    assert shard_queries(sizes, 10).tolist() == list(range(10))
    assert shard_queries(np.array([1, 1, 100, 1]), 3).tolist() == [0, 0, 1, 2]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="world_size"):
            shard_queries(sizes, bad)
    with pytest.raises(ValueError, match="cannot shard 3 queries over world_size=4"):
        shard_queries([1, 2, 3], 4)
    with pytest.raises(ValueError, match="doc_counts must be 1-D"):
        shard_queries([[1, 2]], 1)
    with pytest.raises(ValueError, match="non-negative"):
        shard_queries([1, -2], 1)
    with pytest.raises(ValueError, match="integers"):
        shard_queries([1.5, 2.0], 1)


def test_rankingdata_shard_round_trip():
    d = make_letor(37, 11, 6, seed=3)
    for W in (1, 2, 3, 7, 37):
        parts = [d.shard(r, W) for r in range(W)]
        back = RankingData.concat(parts)
        assert torch.equal(back.X, d.X) and torch.equal(back.labels, d.labels)
        assert torch.equal(back.qid, d.qid) and torch.equal(back.row, d.row)
        assert torch.equal(back.groups.sizes, d.groups.sizes)
        owner = shard_queries(d.groups.sizes, W)
        assert [p.num_queries for p in parts] == torch.bincount(owner, minlength=W).tolist()
    with pytest.raises(ValueError, match="rank must be an integer in"):
        d.shard(2, 2)
    with pytest.raises(ValueError, match="cannot shard"):
        d.shard(0, 38)
