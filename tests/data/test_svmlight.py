"""SVMlight / LETOR reading (``data/svmlight.py``): round trips, query ids, side files and
query files, contiguous queries, malformed lines named by file and line, labels and features
beyond float32, LETOR folds, the shared data files."""

import re

import numpy as np
import pytest
import torch

from conftest import require_data
from torchrankboost.data import RankingData, load_letor_fold, load_data, load_svmlight


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


# qid 1 comes back at line 7 (its first line is 1); cut for two ranks, rank 0 reads lines
# 1-4 or 1-6 and rank 1 the rest, where qid 4 also comes back (line 10, first line 8)
SPLIT = "".join(f"{i % 3} qid:{q} 1:{i} 2:{i % 2}\n"
                for i, q in enumerate([1, 1, 2, 2, 3, 3, 1, 4, 5, 4]))


def test_split_query_is_refused_in_one_process(tmp_path):
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    with pytest.raises(ValueError, match=r"split.txt:7: query id 1 comes back .* first line "
                                         r"is 1\); the lines of a query must be contiguous"):
        load_svmlight(p)
    with pytest.raises(ValueError, match="comes back"):
        load_data(str(p))


def test_loader_refuses_labels_and_features_beyond_float32(tmp_path):
    p = tmp_path / "big.txt"
    p.write_text("1e300 qid:1 1:1\n0 qid:1 1:2\n")
    with pytest.raises(ValueError, match=r"big.txt:1: label is 1e\+300, beyond float32"):
        load_svmlight(p)
    assert float(load_svmlight(p, dtype=torch.float64).labels[0]) == 1e300
    p.write_text("1 qid:1 1:1\n0 qid:1 1:1e300\n")
    with pytest.raises(ValueError, match="big.txt:2: a feature value is infinite"):
        load_svmlight(p)


def load_with_side_files(case, mark):
    """Fuzz child: a data file with damaged ``.query`` / ``.weight`` side files: one-line
    ValueError, or data whose queries add up to its rows and whose weights are finite and
    non-negative, one per row."""
    from torchrankboost.data import load_file as load
    from torchrankboost.data.svmlight import document_weights

    mark("load")
    try:
        d = load(case["path"])
        w = document_weights(case["path"], None, d)
    except ValueError as exc:
        return {"outcome": "refused" if "\n" not in str(exc).strip() else "multi-line"}
    sizes = d.groups.sizes
    ok = int(sizes.sum()) == len(d.labels) and bool((sizes > 0).all())
    ok = ok and (w is None or (w.shape == (len(d.labels),) and bool(torch.isfinite(w).all())
                               and bool((w >= 0).all())))
    return {"outcome": "accepted" if ok else "inconsistent"}


def test_fuzzed_side_files_are_refused_or_consistent(tmp_path):
    """Seeded damage of the ``.query`` and ``.weight`` side files (flipped bits, truncation,
    inserted and deleted bytes, NaN / inf / negative / huge values, extra lines), each read
    in a child process: one-line ValueError, or consistent data — never a crash, another
    exception, or sizes and weights that do not fit the rows."""
    from fuzz_runner import run_cases

    rng = np.random.default_rng(37)
    rows = [f"{int(rng.integers(0, 3))} {' '.join(f'{j}:{rng.normal():.3f}' for j in range(1, 5))}"
            for _ in range(40)]
    sizes = "\n".join(["7", "13", "9", "11"]) + "\n"
    weights = "\n".join(f"{v:.4f}" for v in rng.random(40)) + "\n"
    values = ["nan", "inf", "-1", "1e400", "0x10", "1_0", "-0", "3.5", "", "99999999999999999999"]
    cases = []
    for i in range(120):
        side = ".query" if i % 2 == 0 else ".weight"
        clean = (sizes if side == ".query" else weights).encode()
        b = bytearray(clean)
        pos = int(rng.integers(len(b)))
        kind = i // 2 % 5
        if kind == 0:
            b[pos] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            b = b[:pos]
        elif kind == 2:
            b[pos:pos] = bytes([int(rng.integers(256))])
        elif kind == 3:
            lines = clean.decode().splitlines()
            lines[int(rng.integers(len(lines)))] = values[int(rng.integers(len(values)))]
            b = bytearray(("\n".join(lines) + "\n").encode())
        else:
            b += b"1\n"
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        (folder / "t.txt").write_text("\n".join(rows) + "\n")
        (folder / ("t.txt" + side)).write_bytes(bytes(b))
        cases.append({"path": str(folder / "t.txt")})
    results = run_cases(f"{__file__}:load_with_side_files", cases)
    bad = [(i, r) for i, r in enumerate(results) if r.get("outcome") not in ("refused",
                                                                                "accepted")]
    assert not bad, bad[:10]
    assert sum(r["outcome"] == "refused" for r in results) >= 40
