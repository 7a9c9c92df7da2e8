"""Reading an SVMlight file straight into bin codes (data/binned_read.py): the same codes,
edges, labels and queries as reading the float matrix and binning it; declined files read the
ordinary way; the bin cache built by streaming equals the one built from the float matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchrankboost.kernels.binning import bin_features
from torchrankboost.data import binned_read, fastread, load_file, load_svmlight
from torchrankboost.data import cache as cache_mod
from torchrankboost.data.binned_read import bin_row_chunks, load_svmlight_binned
from torchrankboost.data.cache import BinSpec, build_cache, load_cache


def _write(path, n_queries=60, F=9, seed=0, zero=False, tail_newline=False):
    rng = np.random.default_rng(seed)
    lines = ["# a header comment", ""]
    for q in range(n_queries):
        for _ in range(int(rng.integers(3, 15))):
            x = np.round(rng.normal(size=F), 2)
            x[rng.random(F) < 0.3] = 0.0
            x[:2] = np.round(x[:2])  # ties
            first = 0 if zero else 1
            feats = " ".join(f"{j + first}:{v}" for j, v in enumerate(x) if v != 0.0)
            lines.append(f"{int(rng.integers(0, 3))} qid:{q + 1} {feats}".rstrip())
        lines.append("")  # blank lines between queries
    lines.append(f"1 qid:{n_queries + 1} {F + first + 2}:1.5  # a wider row, last")
    path.write_text("\r\n".join(lines[:3]) + "\n" + "\n".join(lines[3:])
                    + ("\n" if tail_newline else ""))
    return path


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(fastread, "BLOCK", 2048)  # blocks cut mid-line, carried over
    monkeypatch.setattr(binned_read, "SCAN_BLOCK", 777)
    monkeypatch.setattr(binned_read, "_SAMPLE_BATCH", 17)


def _same(got, ref, d):
    b = got.binned
    for name in ("codes", "edges", "num_bins", "has_missing"):
        assert torch.equal(getattr(b, name), getattr(ref, name)), name
    assert b.missing_code == ref.missing_code
    assert torch.equal(got.data.labels, d.labels)
    assert torch.equal(got.data.groups.offsets, d.groups.offsets)
    assert torch.equal(got.data.qid, d.qid)
    assert got.data.zero_based == d.zero_based
    assert got.data.X.shape == d.X.shape and got.data.X.stride() == (0, 0)


@pytest.mark.parametrize("tail", [False, True])
def test_streamed_codes_equal_float_path(tmp_path, small_blocks, tail):
    if not fastread.available():
        pytest.skip("no compiled reader here")
    p = _write(tmp_path / "train.txt", tail_newline=tail)
    d = load_svmlight(p)
    for sc in (40, 150):
        got = load_svmlight_binned(p, sample_count=sc, seed=5)
        assert got.streamed
        _same(got, bin_features(d.X, sample_count=sc, seed=5), d)


def test_declined_files_read_the_ordinary_way(tmp_path, small_blocks):
    p = _write(tmp_path / "zero.txt", zero=True)  # index 0 under "auto": 0-based
    d = load_svmlight(p)
    got = load_svmlight_binned(p, sample_count=40)
    assert not got.streamed and got.data.zero_based
    _same(got, bin_features(d.X, sample_count=40), d)
    small = load_svmlight_binned(p, sample_count=10_000)  # the sample is the whole file
    assert not small.streamed
    bad = tmp_path / "bad.txt"
    bad.write_text("".join(f"1 qid:1 1:{i}\n" for i in range(50)) + "2 qid:1 1:x\n")
    with pytest.raises(ValueError) as ours:
        load_svmlight_binned(bad, sample_count=5)
    with pytest.raises(ValueError) as theirs:
        load_svmlight(bad)
    assert str(ours.value) == str(theirs.value) and "bad.txt:51" in str(ours.value)


def test_streamed_cache_equals_float_cache(tmp_path, small_blocks, monkeypatch):
    if not fastread.available():
        pytest.skip("no compiled reader here")
    p = _write(tmp_path / "train.txt")
    spec = BinSpec(sample_count=50, seed=2)
    a = load_cache(build_cache(tmp_path / "a.trbin", p, spec=spec), spec=spec, values=False)
    monkeypatch.setattr(cache_mod, "load_binned", lambda *a, **k: None)  # read whole
    b = load_cache(build_cache(tmp_path / "b.trbin", p, spec=spec), spec=spec, values=False)
    for name in ("codes", "edges", "num_bins", "has_missing"):
        assert torch.equal(getattr(a.binned, name), getattr(b.binned, name)), name
    assert torch.equal(a.data.labels, b.data.labels)
    assert torch.equal(a.data.groups.offsets, b.data.groups.offsets)
    assert a.info == {**b.info}


@pytest.mark.parametrize("sample_count", [30, 1000])
def test_row_chunks_bin_like_the_whole_matrix(sample_count):
    from torchrankboost.data.binned_read import bin_row_chunks

    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 6, generator=g)
    X[:, 1] = X[:, 1].round()
    X[::13, 2] = float("nan")
    sizes = [70, 0, 100, 130]
    cuts = np.cumsum([0] + sizes)
    got = bin_row_chunks(lambda i: X[cuts[i]:cuts[i + 1]].numpy(), sizes,
                         sample_count=sample_count, seed=4)
    ref = bin_features(X, sample_count=sample_count, seed=4)
    for name in ("codes", "edges", "num_bins", "has_missing"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name


def test_a_rank_checks_only_its_own_codes(tmp_path, monkeypatch):
    """A damaged code in the last rank's rows (caught by the checksum of its chunk, small
    chunks here): the first rank, which checks only the chunks of its own rows, loads."""
    from types import SimpleNamespace

    from safetensors import safe_open
    from safetensors.torch import save_file

    from torchrankboost.data import cache as cache_mod
    from torchrankboost.data.cache import CacheError

    monkeypatch.setattr(cache_mod, "_CRC_CHUNK", 64)
    p = _write(tmp_path / "train.txt")
    c = build_cache(tmp_path / "c.trbin", p)
    with safe_open(str(c), "pt") as fh:
        t = {k: fh.get_tensor(k) for k in fh.keys()}
        meta = fh.metadata()
    t["codes"][-1, 0] = 254  # a code past feature 0's bins, in the last rank's rows
    save_file(t, str(c), metadata=meta)
    ranks = [SimpleNamespace(rank=r, world_size=2) for r in range(2)]
    assert len(load_cache(c, context=ranks[0], values=False).data) > 0
    for ctx in (ranks[1], None):
        with pytest.raises(CacheError, match="checksum mismatch in the bin codes"):
            load_cache(c, context=ctx, values=False)


# ----------------------------------------------------------------------------- int16 codes


def _write_many_values(path, n_queries=40, F=4, seed=1):
    """A LETOR text file with hundreds of distinct values per feature (more than 255 bins)."""
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(n_queries):
        for _ in range(int(rng.integers(5, 15))):
            x = np.round(rng.normal(size=F), 5)  # hundreds of distinct values per feature
            feats = " ".join(f"{j + 1}:{v}" for j, v in enumerate(x) if v != 0.0)
            lines.append(f"{int(rng.integers(0, 3))} qid:{q + 1} {feats}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_binned_reader_and_row_chunks_keep_two_byte_codes(tmp_path):
    f = _write_many_values(tmp_path / "train.txt", seed=2)
    d = load_file(f)
    ref = bin_features(d.X, n_bins=500, sample_count=200, seed=3, max_bins=32766)
    got = load_svmlight_binned(f, n_bins=500, sample_count=200, seed=3)
    assert got.binned.codes.dtype == torch.int16 and got.binned.missing_code == 500
    assert torch.equal(got.binned.codes, ref.codes) and torch.equal(got.binned.edges, ref.edges)
    n = d.X.shape[0]
    sizes = [n // 3, n // 3, n - 2 * (n // 3)]
    bounds = np.cumsum([0] + sizes)
    chunked = bin_row_chunks(lambda i: d.X[bounds[i]:bounds[i + 1]], sizes, n_bins=500,
                             sample_count=200, seed=3)
    assert torch.equal(chunked.codes, ref.codes) and torch.equal(chunked.edges, ref.edges)
