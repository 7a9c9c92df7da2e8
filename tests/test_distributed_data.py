"""torchrankboost.parallel, data side: the context (disabled and with 2 gloo processes),
query sharding, file shards (each rank parses only its byte range), the distributed query
batch sampler, and failures that must stop every rank (check_same, guard)."""

import time

import numpy as np
import pytest
import torch

from torchrankboost.data import RankingData, load_svmlight, make_letor
from torchrankboost.parallel import DistContext, DistributedError, get_context
from torchrankboost.data import DistributedQueryBatchSampler, load_svmlight_shard, shard_queries

from conftest import require_data
from dist_helpers import explain, launch


# ------------------------------------------------------------------ the context, disabled
def test_disabled_context_is_identity():
    ctx = get_context()
    assert isinstance(ctx, DistContext) and not ctx.enabled and ctx.is_main
    assert ctx.rank == 0 and ctx.world_size == 1
    assert ctx.backend is None and get_context(False).enabled is False
    assert get_context(ctx) is ctx
    t = torch.arange(3.0, dtype=torch.float64)
    for op in (ctx.all_reduce_sum, ctx.all_reduce_max, ctx.all_reduce_min):
        assert op(t) is t and t.tolist() == [0.0, 1.0, 2.0]
    assert ctx.bytes_reduced == 0
    assert ctx.all_gather_object({"a": 1}) == [{"a": 1}]
    assert ctx.broadcast_object("x") == "x"
    ctx.barrier()
    assert ctx.check_same("n_features", 46) == 46
    with pytest.raises(KeyError, match="passes through"):
        with ctx.guard():
            raise KeyError("passes through")
    with pytest.raises(ValueError, match="t must be a torch.Tensor"):
        ctx.all_reduce_sum(3.0)
    with pytest.raises(ValueError, match="src must be a rank"):
        ctx.broadcast_object("x", src=1)
    assert issubclass(DistributedError, RuntimeError)


def test_distributed_true_without_process_group_says_how_to_launch():
    with pytest.raises(ValueError, match="torchrun.*init_process_group"):
        get_context(True)
    with pytest.raises(ValueError, match="distributed must be None, True, False"):
        get_context("yes")


def test_collectives_and_global_metrics_on_two_processes():
    """all_reduce (in place; float64 stays float64; int, bool, non-contiguous), gather,
    broadcast, barrier, bytes counter, check_same on equal values; metrics over shards
    equal the metrics over the whole data; the global normalisation factor."""
    res = launch("collectives", 2, timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    assert all("collectives ok" in r.out for r in res)


def test_same_host_sums_go_through_shared_memory():
    """Ranks of one host sum float64 tensors through the shared mapping: the rank-ordered
    sum on every rank; other dtypes and larger tensors through gloo."""
    res = launch("local_sums", 2, timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    assert all("local sums ok" in r.out for r in res)


def test_shared_memory_sum_notices_a_dead_peer():
    res = launch("local_peer_dies", 2, timeout=60)
    assert res[0].returncode == 0, explain(res)
    assert "rank 1 died" in res[0].out


# ------------------------------------------------------------------ sharding queries
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


# ------------------------------------------------------------------ file shards
def _write_letor(path, data, *, comments=True, zero_col=False, wide_tail=False):
    """``data`` as a LETOR file (1-based indices; comment and blank lines sprinkled in);
    ``zero_col``: index 0 on the first line only; ``wide_tail``: an extra feature on the
    last line only."""
    X, y, qid = data.X.numpy(), data.labels.numpy(), data.qid.numpy()
    lines = ["# a header comment", ""] if comments else []
    n = len(y)
    for i in range(n):
        feats = " ".join(f"{j + 1}:{X[i, j]:.6g}" for j in range(X.shape[1]) if X[i, j] != 0)
        if zero_col and i == 0:
            feats = "0:1 " + feats
        if wide_tail and i == n - 1:
            feats += f" {X.shape[1] + 3}:7"
        doc = f"  #docid = d{i} inc = 1" if comments and i % 3 == 0 else ""
        lines.append(f"{int(y[i])} qid:{int(qid[i]) + 100} {feats}{doc}")
        if comments and i % 17 == 5:
            lines.append("# between lines")
        if comments and i % 29 == 7:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def _assert_same(a, b):
    assert a.num_features == b.num_features
    assert torch.equal(a.X, b.X) and torch.equal(a.labels, b.labels)
    assert torch.equal(a.qid, b.qid) and torch.equal(a.groups.sizes, b.groups.sizes)
    assert a.zero_based == b.zero_based


def _check_shards(path, W, **kw):
    whole = load_svmlight(path, **kw)
    opts = dict(n_features=whole.num_features, zero_based=whole.zero_based)
    parts = [load_svmlight_shard(path, rank=r, world_size=W, **{**kw, **opts})
             for r in range(W)]
    _assert_same(RankingData.concat(parts), whole)
    qids = [set(p.qid.tolist()) for p in parts]
    for r in range(W):  # no query split across ranks
        for s in range(r + 1, W):
            assert not qids[r] & qids[s]
    return whole, parts


@pytest.mark.parametrize("W", [1, 2, 3, 5, 16])
def test_file_shards_concatenate_to_the_whole_file(tmp_path, W):
    d = make_letor(53, 9, 7, seed=W, size_spread=0.9)
    path = _write_letor(tmp_path / "train.txt", d)
    whole, parts = _check_shards(path, W)
    if W <= 5:  # ranges of about S/W bytes, longer than any query: every rank has some
        assert min(len(p) for p in parts) > 0


def test_file_shards_of_mq2008_fold1_train():
    path = require_data("mq2008", "Fold1", "train.txt")
    for W in (2, 3, 8):
        whole, parts = _check_shards(path, W)
        n = torch.tensor([len(p) for p in parts], dtype=torch.float64)
        assert float((n - len(whole) / W).abs().max()) < 0.05 * len(whole) / W, n


def test_file_shard_one_query_longer_than_a_range(tmp_path):
    from torchrankboost import Groups

    sizes = torch.tensor([3, 200, 3, 3])
    n = int(sizes.sum())
    gen = torch.Generator().manual_seed(0)
    d = RankingData(torch.randn(n, 3, generator=gen),
                    torch.randint(0, 3, (n,), generator=gen).float(), Groups.from_sizes(sizes),
                    torch.repeat_interleave(torch.arange(4), sizes))
    path = _write_letor(tmp_path / "long.txt", d, comments=False)
    whole, parts = _check_shards(path, 4)
    assert sum(len(p) == 0 for p in parts) >= 1  # a rank whose range lies inside the query
    assert all(p.num_features == whole.num_features for p in parts)


def test_file_shards_of_a_list_of_files(tmp_path):
    files = [_write_letor(tmp_path / f"part{i}.txt", make_letor(5, 6, 4, seed=i))
             for i in range(5)]
    opts = dict(n_features=4, zero_based=False)
    r0 = load_svmlight_shard(files, rank=0, world_size=2, **opts)
    r1 = load_svmlight_shard(files, rank=1, world_size=2, **opts)
    _assert_same(r0, RankingData.concat([load_svmlight(files[i], **opts) for i in (0, 2, 4)]))
    _assert_same(r1, RankingData.concat([load_svmlight(files[i], **opts) for i in (1, 3)]))
    with pytest.raises(ValueError, match="a list of 5 files cannot be shared by world_size=6"):
        load_svmlight_shard(files, rank=0, world_size=6, **opts)


def test_file_shard_errors(tmp_path):
    path = _write_letor(tmp_path / "t.txt", make_letor(10, 5, 3, seed=1))
    with pytest.raises(ValueError, match="n_features= and zero_based=.*torchrun"):
        load_svmlight_shard(path, rank=0, world_size=2)
    with pytest.raises(ValueError, match="n_features= and zero_based="):
        load_svmlight_shard(path, rank=0, world_size=2, n_features=3)
    opts = dict(n_features=3, zero_based=False)
    with pytest.raises(ValueError, match="rank must be an integer in"):
        load_svmlight_shard(path, rank=2, world_size=2, **opts)
    with pytest.raises(ValueError, match="pass both rank and world_size"):
        load_svmlight_shard(path, rank=1, **opts)
    with pytest.raises(ValueError, match="query_file"):
        load_svmlight_shard(path, rank=0, world_size=2, query_file=path, **opts)
    gz = tmp_path / "t.txt.gz"
    import gzip

    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(ValueError, match="compressed file cannot be cut"):
        load_svmlight_shard(gz, rank=0, world_size=2, **opts)
    # one process reads it all, like load_svmlight
    _assert_same(load_svmlight_shard(gz), load_svmlight(gz))
    noqid = tmp_path / "noqid.txt"
    noqid.write_text("".join(f"{i % 2} 1:{i} 2:1\n" for i in range(40)))
    with pytest.raises(ValueError, match="has no 'qid:'"):
        load_svmlight_shard(noqid, rank=1, world_size=2, n_features=2, zero_based=False)
    with pytest.raises(FileNotFoundError):
        load_svmlight_shard(tmp_path / "missing.txt", rank=0, world_size=2, **opts)


def test_file_shard_bad_line_is_numbered_as_in_the_whole_file(tmp_path):
    d = make_letor(20, 5, 3, seed=2)
    path = _write_letor(tmp_path / "t.txt", d, comments=False)
    lines = path.read_text().splitlines()
    lines[-3] = "2 qid:119 2:oops"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"t.txt:{len(lines) - 2}: cannot parse the feature "
                                         rf"value in '2:oops'"):
        load_svmlight_shard(path, rank=1, world_size=2, n_features=3, zero_based=False)
    load_svmlight_shard(path, rank=0, world_size=2, n_features=3, zero_based=False)


def test_file_shards_agree_on_numbering_through_the_process_group(tmp_path):
    """Index 0 only on rank 0's first line, the widest index only on rank 1's last line:
    with auto numbering both ranks get the whole file's columns."""
    d = make_letor(30, 8, 5, seed=4)
    path = _write_letor(tmp_path / "t.txt", d, zero_col=True, wide_tail=True)
    whole = load_svmlight(path)
    assert whole.zero_based is True and whole.num_features == 5 + 3 + 1
    out = tmp_path / "shard"
    res = launch("load_shard", 2, [path, out], timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    parts = [torch.load(f"{out}.{r}", weights_only=True) for r in range(2)]
    assert all(p["X"].shape[0] > 0 for p in parts)
    assert torch.equal(torch.cat([p["X"] for p in parts]), whole.X)
    assert torch.equal(torch.cat([p["labels"] for p in parts]), whole.labels)
    assert torch.equal(torch.cat([p["qid"] for p in parts]), whole.qid)
    assert torch.equal(torch.cat([p["sizes"] for p in parts]), whole.groups.sizes)
    assert all(p["zero_based"] is True for p in parts)


# ------------------------------------------------------------------ failures stop every rank
def test_check_same_mismatch_raises_on_every_rank():
    res = launch("check_same_mismatch", 2, timeout=90)
    for r in res:
        assert r.returncode == 3, explain(res)
        assert ("ValueError: n_features differs across ranks: rank 0 has 46, rank 1 has 45"
                in r.out), explain(res)


def test_guard_one_rank_raises_every_rank_exits():
    t0 = time.monotonic()
    res = launch("guard_raise", 2, timeout=60)
    elapsed = time.monotonic() - t0
    for r in res:
        assert r.returncode != 0, explain(res)
        assert "DistributedError: rank 1 failed: ValueError: labels contain NaN" in r.err
        assert "guard passed" not in r.out
    assert elapsed < 45  # process start-up included; a hang would hit the 60 s timeout


def test_guard_bad_shard_stops_every_rank(tmp_path):
    """A malformed line in rank 1's byte range: both ranks raise DistributedError naming
    rank 1 and the line (instead of rank 0 waiting for rank 1 in the agreement)."""
    d = make_letor(30, 8, 4, seed=6)
    path = _write_letor(tmp_path / "bad.txt", d, comments=False)
    lines = path.read_text().splitlines()
    lines[-2] = lines[-2].split(" ", 1)[0] + " qid:129 1:0.5 3:nan? 4:1"
    path.write_text("\n".join(lines) + "\n")
    res = launch("load_shard", 2, [path, tmp_path / "out"], timeout=60)
    for r in res:
        assert r.returncode != 0, explain(res)
        assert (f"DistributedError: rank 1 failed: ValueError: {path}:{len(lines) - 1}: "
                f"cannot parse the feature value in '3:nan?'") in r.err, explain(res)
    assert not list(tmp_path.glob("out.*"))


# ------------------------------------------------------------------ the sampler
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


# ------------------------------------------------------------------ load_data on every rank
def _load_data_shards(tmp_path, source, valid=""):
    out = tmp_path / "splits"
    res = launch("load_data", 2, [source, valid, out], timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    return [torch.load(f"{out}.{r}", weights_only=True) for r in range(2)]


def _assert_concat(parts, whole):
    if whole is None:
        assert all(p is None for p in parts)
        return
    assert all(p["X"].shape[0] > 0 and p["X"].shape[1] == whole.num_features for p in parts)
    assert torch.equal(torch.cat([p["X"] for p in parts]), whole.X)
    assert torch.equal(torch.cat([p["labels"] for p in parts]), whole.labels)
    assert torch.equal(torch.cat([p["qid"] for p in parts]), whole.qid)
    assert torch.equal(torch.cat([p["sizes"] for p in parts]), whole.groups.sizes)
    assert all(p["zero_based"] == whole.zero_based for p in parts)


def test_load_data_in_one_process_with_a_context_is_the_whole_data(tmp_path):
    from torchrankboost.data import load_data

    a = _write_letor(tmp_path / "a.txt", make_letor(12, 6, 4, seed=1))
    for source, valid in (("synthetic", None), (str(a), None), ("wdbc", str(a))):
        plain = load_data(source, valid=valid)
        ctx = load_data(source, valid=valid, context=get_context(False))
        assert plain[3] == ctx[3]
        for d, e in zip(plain[:3], ctx[:3]):
            assert (d is None) == (e is None)
            if d is not None:
                _assert_same(d, e)


def test_load_data_on_two_ranks_gives_shards_of_the_one_process_splits(tmp_path):
    """Files: each rank parses its byte range of each file; index 0 only in the validation
    file and the widest index only in the last training line: with auto numbering every
    shard of every split is 0-based and has the run's feature count. Built-in data: the
    one-process split cut by RankingData.shard."""
    from torchrankboost.data import load_data

    tr = _write_letor(tmp_path / "train.txt", make_letor(30, 8, 5, seed=4), wide_tail=True)
    va = _write_letor(tmp_path / "vali.txt", make_letor(20, 6, 5, seed=5), zero_col=True)
    whole = load_data(str(tr), valid=str(va))
    assert whole[0].zero_based is True and whole[0].num_features == 5 + 3 + 1
    parts = _load_data_shards(tmp_path, tr, va)
    assert all(p["name"] == "train" for p in parts)
    for key, d in zip(("train", "valid", "test"), whole[:3]):
        _assert_concat([p[key] for p in parts], d)
    whole = load_data("synthetic")
    parts = _load_data_shards(tmp_path, "synthetic")
    for key, d in zip(("train", "valid", "test"), whole[:3]):
        _assert_concat([p[key] for p in parts], d)
