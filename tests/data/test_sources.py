"""Data by name (``data/sources.py``): the data folder rule, built-in data, data by name or
path, relative names under the data folder, ``load_data`` in one process with a context and
on every rank of a process group."""

import pytest
import torch

from torchrankboost.data import data_root, dataset_path, load_builtin, load_data, make_letor
from torchrankboost.parallel import get_context

from dist_helpers import explain, launch
from letor_files import assert_same_data, write_letor_data


def test_builtin_splits():
    tr, va, te = load_builtin("wdbc")
    assert len(tr) + len(va) + len(te) == 569
    assert tr.num_queries == 1 and set(torch.unique(tr.labels).tolist()) == {0.0, 1.0}
    assert float(tr.labels.mean()) == pytest.approx(212 / 569, abs=0.01)  # stratified
    tr, va, te = load_builtin("synthetic", n_queries=50, docs_per_query=10, n_features=8)
    assert tr.num_queries + va.num_queries + te.num_queries == 50
    assert tr.num_features == 8


def test_data_root_rule(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHRANKBOOST_DATA", str(tmp_path / "d"))
    assert data_root() == tmp_path / "d"
    assert dataset_path("mq2008", "Fold1") == tmp_path / "d" / "mq2008" / "Fold1"
    monkeypatch.delenv("TORCHRANKBOOST_DATA")
    monkeypatch.chdir(tmp_path)
    assert data_root() == tmp_path / "data"  # the default: ./data
    monkeypatch.setenv("TORCHRANKBOOST_DATA", "")
    assert data_root() == tmp_path / "data"


def test_load_data_by_name_and_path(tmp_path):
    tr, va, te, name = load_data("synthetic", seed=1)
    assert name == "synthetic" and va is not None and te is not None
    assert tr.num_features == va.num_features == te.num_features
    with pytest.raises(FileNotFoundError, match="data not found: 'nope'"):
        load_data("nope")
    with pytest.raises(FileNotFoundError, match="file not found"):
        load_data("wdbc", valid=str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="unknown built-in data"):
        load_builtin("iris")
    (tmp_path / "fold").mkdir()
    with pytest.raises(ValueError, match="not a LETOR fold folder"):
        load_data(str(tmp_path / "fold"))
    # files with fewer features are padded to the widest split
    (tmp_path / "a.txt").write_text("1 qid:1 1:0.5 3:0.2\n0 qid:1 1:0.1\n")
    (tmp_path / "b.txt").write_text("1 qid:2 1:0.5\n0 qid:2 2:0.1\n")
    tr, va, te, name = load_data(str(tmp_path / "a.txt"), valid=str(tmp_path / "b.txt"))
    assert name == "a" and te is None and tr.num_features == va.num_features == 3


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

    a = write_letor_data(tmp_path / "a.txt", make_letor(12, 6, 4, seed=1))
    for source, valid in (("synthetic", None), (str(a), None), ("wdbc", str(a))):
        plain = load_data(source, valid=valid)
        ctx = load_data(source, valid=valid, context=get_context(False))
        assert plain[3] == ctx[3]
        for d, e in zip(plain[:3], ctx[:3]):
            assert (d is None) == (e is None)
            if d is not None:
                assert_same_data(d, e)


def test_load_data_on_two_ranks_gives_shards_of_the_one_process_splits(tmp_path):
    """Files: each rank parses its byte range of each file; index 0 only in the validation
    file and the widest index only in the last training line: with auto numbering every
    shard of every split is 0-based and has the run's feature count. Built-in data: the
    one-process split cut by RankingData.shard."""
    from torchrankboost.data import load_data

    tr = write_letor_data(tmp_path / "train.txt", make_letor(30, 8, 5, seed=4), wide_tail=True)
    va = write_letor_data(tmp_path / "vali.txt", make_letor(20, 6, 5, seed=5), zero_col=True)
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


def test_relative_data_names_are_found_under_the_data_root(tmp_path, monkeypatch):
    fold = tmp_path / "root" / "set" / "Fold1"
    fold.mkdir(parents=True)
    for name in ("train", "vali", "test"):
        (fold / f"{name}.txt").write_text("2 qid:1 1:1 2:0\n0 qid:1 1:0 2:1\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TORCHRANKBOOST_DATA", str(tmp_path / "root"))
    tr, va, te, name = load_data("set/Fold1", valid="set/Fold1/vali.txt")
    assert name == "Fold1" and len(tr) == 2 and len(va) == 2
    with pytest.raises(FileNotFoundError, match=r"looked in .*work/set/Fold9 and "
                                                r".*root/set/Fold9 \(\$TORCHRANKBOOST_DATA\)"):
        load_data("set/Fold9")
    with pytest.raises(FileNotFoundError, match=r"nope.txt \(looked in .*work/nope.txt and "):
        load_data("set/Fold1", test="nope.txt")
