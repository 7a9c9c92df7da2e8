"""Tests for torchrankboost.data (SVMlight/LETOR reading, normalisation, make_letor, batching)
and data by name (the data folder rule, built-in data, data by name or path)."""

import math
import re

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from conftest import require_data
from torchrankboost import Groups
from torchrankboost.data import data_root, dataset_path, load_builtin, load_data
from torchrankboost.data import (
    QueryBatchSampler,
    QueryDataset,
    RankingData,
    collate_queries,
    iterate_query_batches,
    load_letor_fold,
    load_svmlight,
    make_letor,
    normalize_per_query,
)


# ---------------------------------------------------------------------- helpers
def _random_ranking(seed, n_queries=6, n_features=7, max_size=6, sparse=0.4):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size + 1, size=n_queries)
    n = int(sizes.sum())
    X = np.round(rng.normal(size=(n, n_features)), 4)
    X[rng.random(size=X.shape) < sparse] = 0.0
    y = rng.integers(0, 4, size=n).astype(float)
    qids = rng.choice(np.arange(1, 10 * n_queries), size=n_queries, replace=False)
    qid = np.repeat(qids, sizes)
    return X, y, qid, sizes


def _write_letor(path, X, y, qid=None, *, zero_based=False, comments=True, eol="\n"):
    lines = []
    if comments:
        lines.append("# a header comment")
        lines.append("")
    base = 0 if zero_based else 1
    for i in range(X.shape[0]):
        toks = [f"{y[i]:g}"]
        if qid is not None:
            toks.append(f"qid:{qid[i]}")
        toks += [f"{j + base}:{X[i, j]:.4f}" for j in range(X.shape[1]) if X[i, j] != 0]
        line = " ".join(toks)
        if comments and i % 2 == 0:
            line += f" #docid = D{i} inc = 1"
        lines.append(line)
    path.write_text(eol.join(lines) + eol)
    return path


def _first_problem_line(msg, path):
    m = re.match(re.escape(str(path)) + r":(\d+): ", msg)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------- reading
@pytest.mark.parametrize("eol", ["\n", "\r\n"])
@pytest.mark.parametrize("seed", [0, 1])
def test_round_trip_letor(tmp_path, seed, eol):
    X, y, qid, sizes = _random_ranking(seed)
    p = _write_letor(tmp_path / "train.txt", X, y, qid, eol=eol)
    data = load_svmlight(p, n_features=X.shape[1], dtype=torch.float64)
    assert isinstance(data, RankingData)
    torch.testing.assert_close(data.X, torch.from_numpy(X), rtol=0, atol=0)
    torch.testing.assert_close(data.labels, torch.from_numpy(y))
    assert torch.equal(data.groups.sizes, torch.from_numpy(sizes))
    assert torch.equal(data.qid, torch.from_numpy(qid))
    assert torch.equal(data.row, torch.arange(len(y)))
    # tuple unpacking and defaults
    Xt, yt, gt = load_svmlight(p)
    assert Xt.dtype == torch.float32 and yt.dtype == torch.float32 and gt == data.groups
    assert Xt.shape[1] <= X.shape[1]  # default F = largest index present


def test_round_trip_zero_based_and_explicit(tmp_path):
    X, y, qid, _ = _random_ranking(3, sparse=0.0)
    p = _write_letor(tmp_path / "z.txt", X, y, qid, zero_based=True)
    d = load_svmlight(p, dtype=torch.float64)  # auto detects index 0
    torch.testing.assert_close(d.X, torch.from_numpy(X), rtol=0, atol=0)
    d1 = load_svmlight(p, dtype=torch.float64, zero_based=True)
    torch.testing.assert_close(d1.X, d.X)
    with pytest.raises(ValueError, match=re.escape(f"{p}:3:")):
        load_svmlight(p, zero_based=False)  # index 0 invalid on line 3 (first data line)


def test_no_qid_single_group(tmp_path):
    X, y, _, _ = _random_ranking(4)
    p = _write_letor(tmp_path / "bip.txt", X, y, None)
    d = load_svmlight(p, n_features=X.shape[1])
    assert d.groups.num_groups == 1 and d.groups.num_docs == len(y)
    assert torch.equal(d.qid, torch.zeros(len(y), dtype=torch.long))


@pytest.mark.parametrize("ext", [".query", ".group"])
def test_query_sidecar_file(tmp_path, ext):
    X, y, _, sizes = _random_ranking(5)
    p = _write_letor(tmp_path / "rank.train", X, y, None)
    (tmp_path / ("rank.train" + ext)).write_text("\n".join(str(s) for s in sizes) + "\n")
    d = load_svmlight(p, n_features=X.shape[1])
    assert torch.equal(d.groups.sizes, torch.from_numpy(sizes))
    assert torch.equal(d.qid, d.groups.group_index)
    torch.testing.assert_close(d.X, torch.from_numpy(X).float())


def test_explicit_query_file_and_errors(tmp_path):
    X, y, qid, sizes = _random_ranking(6)
    p = _write_letor(tmp_path / "data.txt", X, y, None)
    qf = tmp_path / "sizes.txt"
    qf.write_text("\n".join(str(s) for s in sizes) + "\n\n")
    d = load_svmlight(p, query_file=qf)
    assert torch.equal(d.groups.sizes, torch.from_numpy(sizes))
    # sizes that do not add up
    bad = tmp_path / "bad_sizes.txt"
    bad.write_text("\n".join(str(s) for s in sizes[:-1]) + "\n")
    with pytest.raises(ValueError, match="add up to"):
        load_svmlight(p, query_file=bad)
    # a non-integer line in the size file names its line
    bad.write_text("3\nx\n")
    with pytest.raises(ValueError, match=re.escape(f"{bad}:2:")):
        load_svmlight(p, query_file=bad)
    with pytest.raises(FileNotFoundError, match="nope"):
        load_svmlight(p, query_file=tmp_path / "nope")
    # qid lines + a consistent query file is fine; an inconsistent one is an error
    p2 = _write_letor(tmp_path / "q.txt", X, y, qid)
    assert load_svmlight(p2, query_file=qf).groups == d.groups
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(f"{int(sizes.sum())}\n")
    with pytest.raises(ValueError, match="disagree"):
        load_svmlight(p2, query_file=wrong)


def test_non_contiguous_qids_are_refused_naming_both_lines(tmp_path):
    p = tmp_path / "nc.txt"
    p.write_text(
        "2 qid:7 1:1\n# c\n0 qid:3 1:2\n1 qid:7 1:3\n0 qid:3 1:4\n1 qid:9 1:5\n0 qid:7 1:6\n"
    )
    with pytest.raises(ValueError, match=r"nc.txt:4: query id 7 comes back after other "
                                         r"queries \(its first line is 1\)"):
        load_svmlight(p)


MALFORMED = [
    # (text, line number of the first bad line, message fragment)
    ("1 qid:1 1:0.5\n0 qid:1 2:x\n", 2, "feature value"),
    ("# c\n1 qid:1 1:0.5\n\nfoo qid:1 2:1\n", 4, "label"),
    ("1 qid:1 1:0.5\n0 qid:1 3:1 2:1\n", 2, "increasing"),
    ("1 qid:1 1:0.5\n0 qid:1 2:1 2:3\n", 2, "increasing"),
    ("1 qid:1 1:0.5\n0 qid:x 2:1\n", 2, "query id"),
    ("1 qid:1 1:0.5\n0 qid:1 2\n", 2, "index:value"),
    ("1 qid:1 1:0.5\n1 qid:1 -2:1\n", 2, "index"),
    ("1 qid:1 1:0.5\n0 qid:1 a:1\n", 2, "feature index"),
    ("1 qid:1 1:0.5\n0 2:1\n1 qid:2 1:0\n", 2, "qid"),
    ("1 1:0.5\n0 qid:4 2:1\n", 2, "qid"),
    ("1 qid:1 1:0.5\nnan qid:1 1:1\n", 2, "finite"),
    ("# x\n1 qid:1 1:0.5\n\n-inf qid:1 1:1\n", 4, "finite"),
]


@pytest.mark.parametrize("text,lineno,fragment", MALFORMED)
def test_malformed_line_names_file_and_line(tmp_path, text, lineno, fragment):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(ValueError) as ei:
        load_svmlight(p)
    msg = str(ei.value)
    assert _first_problem_line(msg, p) == lineno, msg
    assert fragment in msg


def test_n_features_too_small_names_line(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("1 qid:1 1:0.5\n0 qid:1 2:1 5:1\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:2:") + ".*n_features=3"):
        load_svmlight(p, n_features=3)
    assert load_svmlight(p, n_features=8).X.shape == (2, 8)


def test_empty_and_missing_files(tmp_path):
    e = tmp_path / "empty.txt"
    e.write_text("")
    d = load_svmlight(e)
    assert d.X.shape == (0, 0) and d.labels.shape == (0,) and d.groups.num_groups == 0
    c = tmp_path / "comments.txt"
    c.write_text("# only a comment\n\n")
    d = load_svmlight(c, n_features=4)
    assert d.X.shape == (0, 4) and d.groups.num_docs == 0
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_svmlight(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError):
        load_letor_fold(tmp_path / "nofold")
    with pytest.raises(ValueError, match="dtype"):
        load_svmlight(c, dtype=torch.int64)


def test_letor_fold_shared_feature_count(tmp_path):
    rng = np.random.default_rng(0)
    for name, F in (("train", 5), ("vali", 3), ("test", 4)):
        X = rng.normal(size=(6, F)).round(3)
        _write_letor(tmp_path / f"{name}.txt", X, np.zeros(6), np.repeat([1, 2], 3))
    tr, va, te = load_letor_fold(tmp_path, normalize=True)
    assert tr.X.shape == (6, 5) and va.X.shape == (6, 5) and te.X.shape == (6, 5)
    assert torch.all(va.X[:, 3:] == 0)
    assert float(tr.X.min()) == 0.0 and float(tr.X.max()) == 1.0


# ---------------------------------------------------------------------- normalisation
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


# ---------------------------------------------------------------------- real data
def test_mq2008_fold1_shapes():
    folder = require_data("mq2008", "Fold1")
    tr, va, te = load_letor_fold(folder)
    assert tr.X.shape == (9630, 46) and va.X.shape == (2707, 46) and te.X.shape == (2874, 46)
    assert (tr.num_queries, va.num_queries, te.num_queries) == (471, 157, 156)
    assert tr.groups.num_docs + va.groups.num_docs + te.groups.num_docs == 15211
    assert set(torch.cat([tr.labels, va.labels, te.labels]).unique().tolist()) == {0, 1, 2}
    assert torch.equal(tr.row, torch.arange(9630))  # queries contiguous in the file
    # first line: 0 qid:10002 1:0.007477 2:0.000000 3:1.000000 ... 46:0.007042
    assert int(tr.qid[0]) == 10002 and float(tr.labels[0]) == 0.0
    assert abs(float(tr.X[0, 0]) - 0.007477) < 1e-7 and float(tr.X[0, 2]) == 1.0
    assert abs(float(tr.X[0, 45]) - 0.007042) < 1e-7
    # QueryLevelNorm data are already in [0, 1]
    assert float(tr.X.min()) >= 0 and float(tr.X.max()) <= 1


def test_lightgbm_and_mslr_excerpts():
    p = require_data("lightgbm_lambdarank", "rank.train")
    d = load_svmlight(p)  # groups from rank.train.query
    assert d.groups.num_groups == 201 and d.groups.num_docs == 3005
    m = require_data("mslr_web10k_rankeval_5k", "msn1.fold1.train.5k.txt")  # CRLF lines
    d = load_svmlight(m, n_features=136, normalize=True)
    assert d.X.shape == (5000, 136) and d.num_queries == 43
    assert float(d.X.min()) == 0.0 and float(d.X.max()) == 1.0
    assert set(d.labels.unique().tolist()) <= {0, 1, 2, 3, 4}


# ---------------------------------------------------------------------- make_letor
def test_make_letor_shapes_and_determinism():
    a = make_letor(50, 20, 12, seed=3)
    b = make_letor(50, 20, 12, seed=3)
    c = make_letor(50, 20, 12, seed=4)
    assert torch.equal(a.X, b.X) and torch.equal(a.labels, b.labels) and a.groups == b.groups
    assert not torch.equal(a.labels, c.labels) or a.groups != c.groups
    assert a.X.shape == (a.groups.num_docs, 12) and a.num_queries == 50
    assert a.groups.sizes.min() >= 1 and a.groups.sizes.float().std() > 0  # variable sizes
    assert 0.5 * 50 * 20 < a.groups.num_docs < 1.5 * 50 * 20
    assert set(a.labels.unique().tolist()) == {0, 1, 2, 3, 4}
    assert torch.equal(a.qid, a.groups.group_index)
    assert torch.isfinite(a.X).all()
    # grades skewed: grade 0 is the most common
    counts = torch.bincount(a.labels.long())
    assert int(counts.argmax()) == 0
    # ties in some features
    n_unique = torch.tensor([a.X[:, j].unique().numel() for j in range(12)])
    assert int(n_unique.min()) < a.groups.num_docs // 4
    # equal sizes without spread, other grade counts
    e = make_letor(10, 7, 3, n_grades=2, size_spread=0.0, seed=1)
    assert e.groups.sizes.tolist() == [7] * 10 and set(e.labels.unique().tolist()) == {0, 1}
    with pytest.raises(ValueError, match="n_features"):
        make_letor(10, 7, 0)


def test_make_letor_informative_features_carry_signal():
    d, info = make_letor(200, 30, 20, seed=0, return_info=True, noise=0.3, query_shift=0.0)
    inf = info["informative"]
    assert inf.sum() == 5
    y = d.labels - d.labels.mean()
    Xc = d.X - d.X.mean(0)
    corr = (Xc * y[:, None]).sum(0) / (Xc.norm(dim=0) * y.norm())
    assert corr[inf].abs().max() > 0.2
    assert corr[~inf].abs().max() < 0.1


# ---------------------------------------------------------------------- batching
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


# ---------------------------------------------------------------------- data by name
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
