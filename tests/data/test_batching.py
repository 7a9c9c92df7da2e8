"""Query batches (``data/batching.py``): the batch sampler, the dataset and its collate
function, ``iterate_query_batches``, the distributed query batch sampler."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from torchrankboost import Groups
from torchrankboost.data import (DistributedQueryBatchSampler, QueryBatchSampler, QueryDataset,
                                 collate_queries, iterate_query_batches, make_letor)


def _groups_with_big_query():
    sizes = torch.tensor([3, 1, 12, 5, 0, 2, 7, 4, 9, 1, 6, 30, 2])
    return Groups.from_sizes(sizes)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("max_docs", [1, 8, 16, 1000])
def test_batch_sampler_covers_queries_once(shuffle, max_docs):
    groups = _groups_with_big_query()
    sizes = groups.sizes.tolist()
    sampler = QueryBatchSampler(groups, max_docs=max_docs, shuffle=shuffle, seed=7)
    n_batches = len(sampler)
    batches = list(sampler)
    assert len(batches) == n_batches
    flat = [q for b in batches for q in b]
    assert sorted(flat) == list(range(groups.num_groups))
    for b in batches:
        assert len(b) >= 1
        total = sum(sizes[q] for q in b)
        assert total <= max_docs or len(b) == 1
    if not shuffle:
        assert flat == list(range(groups.num_groups))
    # greedy packing: the next batch's first query would not have fit
    for b, nxt in zip(batches, batches[1:]):
        assert sum(sizes[q] for q in b) + sizes[nxt[0]] > max_docs


def test_batch_sampler_epochs_deterministic():
    groups = Groups.from_sizes(torch.arange(1, 40) % 7 + 1)
    s1 = QueryBatchSampler(groups, max_docs=20, seed=1)
    s2 = QueryBatchSampler(groups, max_docs=20, seed=1)
    e0, e1 = list(s1), list(s1)
    assert e0 == list(s2) and e1 == list(s2)
    assert e0 != e1  # a new shuffle each epoch
    s2.set_epoch(0)
    assert list(s2) == e0
    with pytest.raises(ValueError, match="max_docs"):
        QueryBatchSampler(groups, max_docs=0)


def test_dataloader_collate(device):
    d = make_letor(30, 8, 4, seed=2)
    X, y, groups = d.to(device)
    ds = QueryDataset(X, y, groups)
    assert len(ds) == 30
    Xq, yq = ds[4]
    s, e = int(groups.offsets[4]), int(groups.offsets[5])
    assert torch.equal(Xq, X[s:e]) and torch.equal(yq, y[s:e])
    sampler = QueryBatchSampler(groups, max_docs=40, seed=0)
    planned = list(QueryBatchSampler(groups, max_docs=40, seed=0))
    dl = DataLoader(ds, batch_sampler=sampler, collate_fn=collate_queries)
    seen = 0
    off = groups.offsets.tolist()
    for (Xb, yb, gb), qs in zip(dl, planned):
        assert isinstance(gb, Groups) and gb.num_groups == len(qs)
        assert gb.sizes.tolist() == [off[q + 1] - off[q] for q in qs]
        idx = torch.cat([torch.arange(off[q], off[q + 1]) for q in qs]).to(device)
        assert torch.equal(Xb, X[idx]) and torch.equal(yb, y[idx])
        assert Xb.device.type == device.type and gb.device.type == device.type
        seen += len(qs)
    assert seen == 30
    assert len(QueryDataset(d)) == 30
    with pytest.raises(ValueError, match="empty batch"):
        collate_queries([])


@pytest.mark.parametrize("shuffle", [False, "batches", True])
def test_iterate_query_batches(shuffle, device):
    d = make_letor(40, 10, 3, seed=5)
    X, y, groups = d.to(device)
    X = X.clone()
    X[:, 0] = torch.arange(X.shape[0], device=device, dtype=X.dtype)  # document id column
    off = groups.offsets.tolist()
    seen_docs, seen_queries = [], 0
    for Xb, yb, gb in iterate_query_batches(X, y, groups, max_docs=37, shuffle=shuffle, seed=1):
        assert gb.num_docs == Xb.shape[0] == yb.shape[0]
        assert gb.num_docs <= 37 or gb.num_groups == 1
        ids = Xb[:, 0].long()
        torch.testing.assert_close(yb, y[ids])
        # each group of the batch is one whole query, in document order
        starts = ids[gb.offsets[:-1]].tolist()
        for g, s in enumerate(starts):
            q = off.index(s)
            assert int(gb.sizes[g]) == off[q + 1] - off[q]
        assert torch.equal(ids, torch.cat([torch.arange(s, s + int(z), device=device)
                                           for s, z in zip(starts, gb.sizes.tolist())]))
        if shuffle in (False, "batches"):
            assert Xb.data_ptr() == X[int(ids[0])].data_ptr()  # a view
        seen_docs.append(ids)
        seen_queries += gb.num_groups
    allids = torch.cat(seen_docs).sort().values
    assert torch.equal(allids, torch.arange(X.shape[0], device=device))
    assert seen_queries == 40
    if shuffle is False:
        assert torch.equal(torch.cat(seen_docs), torch.arange(X.shape[0], device=device))


def test_iterate_query_batches_seeded():
    d = make_letor(30, 6, 2, seed=0)
    a = [g.sizes.tolist() for _, _, g in iterate_query_batches(*d, max_docs=20, seed=3)]
    b = [g.sizes.tolist() for _, _, g in iterate_query_batches(*d, max_docs=20, seed=3)]
    c = [g.sizes.tolist() for _, _, g in iterate_query_batches(*d, max_docs=20, seed=4)]
    assert a == b and a != c
    with pytest.raises(ValueError, match="shuffle"):
        next(iterate_query_batches(*d, max_docs=20, shuffle="maybe"))


def _epoch(groups, W, epoch, **kw):
    out = []
    for r in range(W):
        s = DistributedQueryBatchSampler(groups, num_replicas=W, rank=r, **kw)
        s.set_epoch(epoch)
        n = len(s)
        out.append(list(s))
        assert len(out[-1]) == n
    return out


@pytest.mark.parametrize("W", [1, 2, 3])
def test_sampler_covers_every_query_once_with_equal_batch_counts(W):
    d = make_letor(90, 14, 3, seed=7, size_spread=0.8)
    sizes = d.groups.sizes
    for epoch in range(3):
        ranks = _epoch(d.groups, W, epoch, max_docs=120, seed=11)
        assert len({len(b) for b in ranks}) == 1  # DDP needs the same number everywhere
        s0 = DistributedQueryBatchSampler(d.groups, max_docs=120, num_replicas=W, rank=0,
                                          seed=11)
        s0.set_epoch(epoch)
        plan = s0.plan()
        seen = np.concatenate([np.concatenate(p) for p in plan])
        assert sorted(seen.tolist()) == list(range(90))  # dealt once, whole queries
        for r in range(W):
            mine = [q for b in ranks[r] for q in b]
            assert set(mine) == set(np.concatenate(plan[r]).tolist())  # padding repeats
            for b in ranks[r]:
                assert int(sizes[b].sum()) <= 120 or len(b) == 1
        docs = [int(sizes[np.concatenate(plan[r])].sum()) for r in range(W)]
        assert max(docs) - min(docs) <= 2 * int(sizes.max())


def test_sampler_shuffle_is_seeded_by_seed_and_epoch():
    g = make_letor(40, 10, 3, seed=1).groups
    a = _epoch(g, 2, 0, max_docs=64, seed=5)
    assert a == _epoch(g, 2, 0, max_docs=64, seed=5)  # identical on every rank / instance
    assert a != _epoch(g, 2, 1, max_docs=64, seed=5)  # reshuffled each epoch
    assert a != _epoch(g, 2, 0, max_docs=64, seed=6)
    s = DistributedQueryBatchSampler(g, max_docs=64, num_replicas=2, rank=1, seed=5)
    first, second = list(s), list(s)  # the epoch advances after a pass
    assert first == a[1] and second == _epoch(g, 2, 1, max_docs=64, seed=5)[1]
    fixed = DistributedQueryBatchSampler(g, max_docs=64, num_replicas=2, rank=0,
                                         shuffle=False)
    flat = np.concatenate(fixed.plan()[0]).tolist()
    assert flat == list(range(len(flat)))  # rank 0: the first block, in query order


def test_sampler_pads_by_repeating_or_drops():
    from torchrankboost import Groups

    g = Groups.from_sizes(torch.tensor([50, 50, 10, 10, 10, 10, 10, 10, 10, 10]))
    plan = DistributedQueryBatchSampler(g, max_docs=20, num_replicas=2, rank=0,
                                        shuffle=False).plan()
    counts = [len(p) for p in plan]
    assert counts == [2, 4]  # 100 documents each: two big queries / eight small ones
    pad = _epoch(g, 2, 0, max_docs=20, shuffle=False)
    assert [len(b) for b in pad] == [4, 4] and pad[0][2:] == pad[0][:2]
    drop = _epoch(g, 2, 0, max_docs=20, shuffle=False, drop_last=True)
    assert [len(b) for b in drop] == [2, 2] and drop[1] == pad[1][:2]


def test_sampler_arguments():
    g = make_letor(3, 4, 2, seed=0).groups
    with pytest.raises(ValueError, match="fewer than the 4 ranks"):
        DistributedQueryBatchSampler(g, max_docs=8, num_replicas=4, rank=0)
    with pytest.raises(ValueError, match="rank must be an integer in"):
        DistributedQueryBatchSampler(g, max_docs=8, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="max_docs"):
        DistributedQueryBatchSampler(g, max_docs=0, num_replicas=1, rank=0)
    s = DistributedQueryBatchSampler(g, max_docs=8)  # no process group: rank 0 of 1
    assert s.num_replicas == 1 and s.rank == 0 and sorted(q for b in s for q in b) == [0, 1, 2]


@pytest.mark.parametrize("ranks", [1, 3])
def test_plan_packs_each_ranks_queries_by_length(ranks):
    """``by_length`` (fixed batches): each rank's queries, sorted by length, packed within
    the budget; every query once per epoch; the same batches every epoch, in a new order."""
    from torchrankboost.data import QueryBatchPlan

    sizes = torch.tensor([5, 1, 9, 3, 3, 7, 2, 8, 4, 6, 1, 5])
    g = Groups.from_sizes(sizes)
    plan = QueryBatchPlan(g, max_docs=12, ranks=ranks, seed=3)
    flat = QueryBatchPlan(g, max_docs=12, ranks=ranks, seed=3, by_length=False)
    e0, e1 = plan.steps(0), plan.steps(1)
    assert sorted(k for k, _, _ in e0) == sorted(k for k, _, _ in e1)
    assert [k for k, _, _ in e0] != [k for k, _, _ in e1] or len(e0) < 3
    seen = []
    for _, per_rank, count in e0:
        assert len(per_rank) == ranks and count == sum(len(b) for b in per_rank)
        for b in per_rank:
            assert int(sizes[b].sum()) <= 12 or len(b) == 1
            seen.append(b)
    for r in range(ranks):  # within a rank, the batches follow the order of length
        mine = [step[1][r] for step in sorted(e0, key=lambda s: s[0])]
        lengths = [sizes[b].tolist() for b in mine]
        assert all(x == sorted(x) for x in lengths)
    assert set(np.concatenate(seen).tolist()) == set(range(12))
    assert len(flat.steps(0)) >= 1
