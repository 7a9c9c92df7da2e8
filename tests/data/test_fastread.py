"""The compiled SVMlight/LETOR reader (torchrankboost/data/fastread.py + svmlight_reader.c)
gives exactly the values of scikit-learn's reader and of the Python path (the reader with
the compiled part switched off): on the shared data files (whole or a slice), on hand-made
edge cases, for byte ranges, compressed files, several threads and small blocks."""

from __future__ import annotations

import bz2
import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrankboost.data import fastread, load_svmlight, load_svmlight_shard, sources

load_svmlight_file = pytest.importorskip("sklearn.datasets").load_svmlight_file
pytestmark = pytest.mark.skipif(not fastread.available(), reason="no C compiler")

FIELDS = ("X", "labels", "qid", "row")


def _python_path(monkeypatch, fn):
    with monkeypatch.context() as m:
        m.setattr(fastread, "read_part", lambda *a, **k: None)
        return fn()


def _same(a, b) -> None:
    for k in FIELDS:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert torch.equal(torch.nan_to_num(x, nan=7.25), torch.nan_to_num(y, nan=7.25)), k
        if x.is_floating_point():  # NaN at the same places, signs of zeros alike
            assert torch.equal(torch.isnan(x), torch.isnan(y)), k
            assert torch.equal(torch.signbit(x), torch.signbit(y)), k
    assert torch.equal(a.groups.offsets, b.groups.offsets) and a.zero_based == b.zero_based


def _vs_sklearn(path: Path, data) -> None:
    X, y, q = load_svmlight_file(str(path), dtype=np.float32, query_id=True, zero_based="auto")
    dense = np.zeros(tuple(data.X.shape), dtype=np.float32)
    dense[:, :X.shape[1]] = X.toarray()
    assert np.array_equal(data.X.numpy(), dense, equal_nan=True)
    assert np.array_equal(data.labels.numpy(), y.astype(np.float32))
    assert np.array_equal(data.qid.numpy(), q) or (q.size == 0)


def _slice(src: Path, dst: Path, lines: int) -> Path:
    with open(src, "rb") as fh, open(dst, "wb") as out:
        for _, line in zip(range(lines), fh):
            out.write(line)
    return dst


def _shared_files():
    root = sources.dataset_path()
    picks = [root / "lightgbm_lambdarank" / "rank.train", root / "lightgbm_lambdarank" / "rank.test"]
    sliced = [root / "mq2008" / f"Fold{k}" / f"{s}.txt" for k in range(1, 6)
              for s in ("train", "vali", "test")]
    sliced += sorted((root / "mslr_web10k_rankeval_5k").glob("*.txt"))
    return [p for p in picks if p.is_file()], [p for p in sliced if p.is_file()]


def test_shared_data_files_as_sklearn_and_python_path(tmp_path, monkeypatch):
    whole, sliced = _shared_files()
    if not whole and not sliced:
        pytest.skip("shared data folder absent")
    for p in whole:  # the lambdarank example: sparse, with .query side files
        got = load_svmlight(p)
        _vs_sklearn(p, got)
    for i, p in enumerate(sliced):  # MQ2008's folds and MSLR (CRLF): a slice each
        part = _slice(p, tmp_path / f"s{i}.txt", 150)
        got = load_svmlight(part, query_file=False)
        _vs_sklearn(part, got)
        _same(got, _python_path(monkeypatch, lambda: load_svmlight(part, query_file=False)))
    test = [p for p in whole if p.name == "rank.test"]
    for p in test:  # the .query side file
        _same(load_svmlight(p), _python_path(monkeypatch, lambda: load_svmlight(p)))


EDGE = (
    "2 qid:10 1:1.5e3 2:-2.5E-2 3:+7 # a comment 1:99\n"
    "0 qid:10 2:.5 5:3. \t \n"
    "\n"
    "# a comment line\n"
    "   \t\n"
    "+1 qid:3 1:1e-320 3:123456789012345678901234 4:0.1000000000000000055511151231257827\n"
    "-1 qid:3 1:NaN 2:-0 3:+0.0 4:3.4028235e38 5:1e-46 6:9007199254740993\n"
    "2.5 qid:-4 1:0.30000000000000004441 2:123456789.123456789e-5 3:1.e3 4:-nan 5:2e-05\n"
    "3 qid:7 6:1E+2 7:0#x\n"
    "1 qid:7\n"
    "0 qid:7 1:4.9406564584124654e-324 2:2.2250738585072011e-308 3:1.7976931348623157e-292\n"
)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edge_cases_as_sklearn_and_python_path(tmp_path, monkeypatch, newline, dtype):
    p = tmp_path / "edge.txt"
    p.write_bytes(EDGE.replace("\n", newline).encode())
    assert fastread.read_part(p, None, npdt=np.float32, zero_based="auto", max_index=100,
                              max_bytes=1 << 30) is not None  # the compiled reader took it
    got = load_svmlight(p, dtype=dtype)
    _same(got, _python_path(monkeypatch, lambda: load_svmlight(p, dtype=dtype)))
    if dtype == torch.float32:
        _vs_sklearn(p, got)
    assert got.qid.tolist() == [10, 10, 3, 3, -4, 7, 7, 7]


def test_zero_based_and_numbering(tmp_path, monkeypatch):
    p = tmp_path / "z.txt"
    p.write_text("1 qid:1 2:1 3:2\n0 qid:1 0:4 7:0\n")
    for kw in ({}, {"zero_based": True}, {"n_features": 9, "zero_based": True}):
        got = load_svmlight(p, **kw)
        _same(got, _python_path(monkeypatch, lambda: load_svmlight(p, **kw)))
    q = tmp_path / "one.txt"
    q.write_text("1 qid:1 2:1 3:2\n0 qid:1 1:4 7:0\n")
    for kw in ({}, {"zero_based": False}, {"zero_based": True}, {"n_features": 12}):
        got = load_svmlight(q, **kw)
        _same(got, _python_path(monkeypatch, lambda: load_svmlight(q, **kw)))


@pytest.mark.parametrize("text", [
    "1 qid:1 1:1\r2 qid:1 1:2\n",          # a bare carriage return
    "1 qid:1 2:1 1:2\n",                    # indices not increasing
    "1 qid:1 1:1\n0 1:2\n",                 # qid on some lines only
    "1 qid:1 1:0x10\n",                     # a value Python's float() reads differently
    "1 qid:1 1:inf\n",                      # infinite: the Python path's message
    "1 qid:1 1:1e39\n",                     # finite, infinite in float32
])
def test_declined_lines_give_the_python_path_error(tmp_path, monkeypatch, text):
    p = tmp_path / "bad.txt"
    p.write_bytes(text.encode())
    with pytest.raises(ValueError) as native:
        load_svmlight(p)
    with pytest.raises(ValueError) as python:
        _python_path(monkeypatch, lambda: load_svmlight(p))
    assert str(native.value) == str(python.value) and "\n" not in str(native.value)


def test_declined_but_valid_values_read_by_python(tmp_path, monkeypatch):
    p = tmp_path / "odd.txt"
    p.write_text("1 qid:1 1:1_0 2:2\n0 qid:1 1:3\n")  # Python's float() reads 1_0 as 10
    assert fastread.read_part(p, None, npdt=np.float32, zero_based="auto", max_index=9,
                              max_bytes=1 << 20) is None
    _same(load_svmlight(p), _python_path(monkeypatch, lambda: load_svmlight(p)))
    assert load_svmlight(p).X[0, 0] == 10


def test_threads_blocks_ranges_and_compression(tmp_path, monkeypatch):
    src = sources.dataset_path("mq2008", "Fold1", "train.txt")
    if not src.is_file():
        pytest.skip("shared data folder absent")
    p = _slice(src, tmp_path / "train.txt", 2000)  # > 1 MB: cut into chunks per thread
    ref = _python_path(monkeypatch, lambda: load_svmlight(p))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _same(load_svmlight(p), ref)
        monkeypatch.setattr(fastread, "BLOCK", 4096)  # many blocks, lines across them
        _same(load_svmlight(p), ref)
        monkeypatch.setattr(fastread, "BLOCK", 64)  # lines longer than a block
        _same(load_svmlight(p), ref)
    finally:
        torch.set_num_threads(old)
    monkeypatch.setattr(fastread, "BLOCK", 1 << 16)
    for opener, ext in ((gzip.open, ".gz"), (bz2.open, ".bz2")):
        z = tmp_path / f"train.txt{ext}"
        with open(p, "rb") as fh, opener(z, "wb") as out:
            shutil.copyfileobj(fh, out)
        _same(load_svmlight(z), ref)
    for r in range(3):
        kw = dict(rank=r, world_size=3, n_features=46, zero_based=False)
        _same(load_svmlight_shard(p, **kw),
              _python_path(monkeypatch, lambda: load_svmlight_shard(p, **kw)))


def test_disabled_native_reads_with_python(tmp_path, monkeypatch):
    p = tmp_path / "a.txt"
    p.write_text("1 qid:1 1:1 2:2\n0 qid:1 1:3\n")
    monkeypatch.setattr(fastread, "library", lambda: None)
    got = load_svmlight(p)
    assert got.X.tolist() == [[1.0, 2.0], [3.0, 0.0]] and os.path.exists(p)
