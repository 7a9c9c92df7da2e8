"""File shards (``data/shards.py``: ``load_svmlight_shard``): each rank parses only its byte
range of the file, the shards concatenate to the whole file, queries are never split between
ranks, lines are numbered as in the whole file, and a bad shard stops every rank."""

import pytest
import torch

from torchrankboost.data import RankingData, load_svmlight, load_svmlight_shard, make_letor

from conftest import require_data
from dist_helpers import explain, launch
from letor_files import assert_same_data, write_letor_data


def _check_shards(path, W, **kw):
    whole = load_svmlight(path, **kw)
    opts = dict(n_features=whole.num_features, zero_based=whole.zero_based)
    parts = [load_svmlight_shard(path, rank=r, world_size=W, **{**kw, **opts})
             for r in range(W)]
    assert_same_data(RankingData.concat(parts), whole)
    qids = [set(p.qid.tolist()) for p in parts]
    for r in range(W):  # no query split across ranks
        for s in range(r + 1, W):
            assert not qids[r] & qids[s]
    return whole, parts


@pytest.mark.parametrize("W", [1, 2, 3, 5, 16])
def test_file_shards_concatenate_to_the_whole_file(tmp_path, W):
    d = make_letor(53, 9, 7, seed=W, size_spread=0.9)
    path = write_letor_data(tmp_path / "train.txt", d)
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
    path = write_letor_data(tmp_path / "long.txt", d, comments=False)
    whole, parts = _check_shards(path, 4)
    assert sum(len(p) == 0 for p in parts) >= 1  # a rank whose range lies inside the query
    assert all(p.num_features == whole.num_features for p in parts)


def test_file_shards_of_a_list_of_files(tmp_path):
    files = [write_letor_data(tmp_path / f"part{i}.txt", make_letor(5, 6, 4, seed=i))
             for i in range(5)]
    opts = dict(n_features=4, zero_based=False)
    r0 = load_svmlight_shard(files, rank=0, world_size=2, **opts)
    r1 = load_svmlight_shard(files, rank=1, world_size=2, **opts)
    assert_same_data(r0, RankingData.concat([load_svmlight(files[i], **opts) for i in (0, 2, 4)]))
    assert_same_data(r1, RankingData.concat([load_svmlight(files[i], **opts) for i in (1, 3)]))
    with pytest.raises(ValueError, match="a list of 5 files cannot be shared by world_size=6"):
        load_svmlight_shard(files, rank=0, world_size=6, **opts)


def test_file_shard_errors(tmp_path):
    path = write_letor_data(tmp_path / "t.txt", make_letor(10, 5, 3, seed=1))
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
    assert_same_data(load_svmlight_shard(gz), load_svmlight(gz))
    noqid = tmp_path / "noqid.txt"
    noqid.write_text("".join(f"{i % 2} 1:{i} 2:1\n" for i in range(40)))
    with pytest.raises(ValueError, match="has no 'qid:'"):
        load_svmlight_shard(noqid, rank=1, world_size=2, n_features=2, zero_based=False)
    with pytest.raises(FileNotFoundError):
        load_svmlight_shard(tmp_path / "missing.txt", rank=0, world_size=2, **opts)


def test_file_shard_bad_line_is_numbered_as_in_the_whole_file(tmp_path):
    d = make_letor(20, 5, 3, seed=2)
    path = write_letor_data(tmp_path / "t.txt", d, comments=False)
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
    path = write_letor_data(tmp_path / "t.txt", d, zero_col=True, wide_tail=True)
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


def test_guard_bad_shard_stops_every_rank(tmp_path):
    """A malformed line in rank 1's byte range: both ranks raise DistributedError naming
    rank 1 and the line (instead of rank 0 waiting for rank 1 in the agreement)."""
    d = make_letor(30, 8, 4, seed=6)
    path = write_letor_data(tmp_path / "bad.txt", d, comments=False)
    lines = path.read_text().splitlines()
    lines[-2] = lines[-2].split(" ", 1)[0] + " qid:129 1:0.5 3:nan? 4:1"
    path.write_text("\n".join(lines) + "\n")
    res = launch("load_shard", 2, [path, tmp_path / "out"], timeout=60)
    for r in res:
        assert r.returncode != 0, explain(res)
        assert (f"DistributedError: rank 1 failed: ValueError: {path}:{len(lines) - 1}: "
                f"cannot parse the feature value in '3:nan?'") in r.err, explain(res)
    assert not list(tmp_path.glob("out.*"))


# qid 1 comes back at line 7 (its first line is 1); cut for two ranks, rank 0 reads lines
# 1-4 or 1-6 and rank 1 the rest, where qid 4 also comes back (line 10, first line 8)
SPLIT = "".join(f"{i % 3} qid:{q} 1:{i} 2:{i % 2}\n"
                for i, q in enumerate([1, 1, 2, 2, 3, 3, 1, 4, 5, 4]))


SPLIT_MSG = "split.txt:7: query id 1 comes back after other queries (its first line is 1)"


def test_shard_read_alone_refuses_a_query_split_inside_its_range(tmp_path):
    """Without a process group a rank sees its own byte range only: a qid coming back
    inside it is refused, the lines numbered as in the whole file."""
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    with pytest.raises(ValueError, match=r"split.txt:10: query id 4 comes back after other "
                                         r"queries \(its first line is 8\)"):
        load_svmlight_shard(p, rank=1, world_size=2, n_features=2, zero_based=False)


def test_two_ranks_refuse_a_split_query_with_the_one_process_message(tmp_path):
    """The rule over byte ranges read by two gloo processes: the ranks gather their qid
    runs, so a query split between them is refused exactly as one process refuses it
    (the same file:line message, raised by the rank holding that line; not rank 1's own
    first repeat)."""
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    one = None
    try:
        load_svmlight(p)
    except ValueError as exc:
        one = str(exc)
    assert one is not None and SPLIT_MSG in one
    res = launch("load_shard", 2, [str(p), str(tmp_path / "out")], timeout=90)
    assert all(r.returncode != 0 for r in res), explain(res)
    for r in res:
        assert f"DistributedError: rank 1 failed: ValueError: {one}" in r.err, explain(res)
    assert not (tmp_path / "out.0").exists()
