"""The binned-data cache (``data/cache.py``): the same model bit for bit as from the text
file, memory-mapped shards per rank, stale and damaged caches refused, never silently used;
the grouped column maxima that check a cache's codes equal ``amax`` (the ``bin`` command and
``train --cache``: ``tests/cli/test_cached.py``)."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from torchrankboost.boosting import Booster
from torchrankboost.kernels.binning import attach_bins, bin_features
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.data import cache as cache_mod
from torchrankboost.data import load_file
from torchrankboost.data.cache import (BinSpec, CacheError, StaleCacheError, build_cache,
                                       cache_status, column_max, load_cache, realized,
                                       representatives, run_sources)
from torchrankboost.losses import ExponentialPairwiseLoss


def _write_letor(path, n_queries=30, F=7, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    lines, n = [], 0
    for q in range(n_queries):
        for _ in range(int(rng.integers(3, 12))):
            x = np.round(rng.normal(size=F), 3)
            x[rng.random(F) < 0.2] = 0.0  # sparse entries
            feats = " ".join(f"{j + 1}:{v}" for j, v in enumerate(x) if v != 0.0)
            lines.append(f"{int(rng.integers(0, 3))} qid:{q + 1} {feats}".rstrip())
            n += 1
    path.write_text("\n".join(lines) + "\n")
    if weights:
        w = rng.random(n)
        w[::7] = 0.0  # rows of weight 0 place no bin edges
        (path.parent / (path.name + ".weight")).write_text("\n".join(map(str, w)) + "\n")
    return path


def _fit(X, y, g, w=None, n_bins=255):
    b = Booster(loss=ExponentialPairwiseLoss(), learner=RegressionTree(max_leaves=6, n_bins=n_bins,
                min_samples_leaf=3), n_rounds=4, verbose=False)
    return b.fit(X, y, g, sample_weight=w)


def test_cache_fit_equals_text_fit_bit_for_bit(tmp_path):
    f = _write_letor(tmp_path / "train.txt", weights=True)
    spec = BinSpec(n_bins=31)
    build_cache(tmp_path / "c.trbin", f, spec=spec)
    c = load_cache(tmp_path / "c.trbin", spec=spec)
    d = load_file(f)
    w = torch.from_numpy(np.loadtxt(str(f) + ".weight"))
    assert c.binned.codes.dtype == torch.uint8 and torch.equal(c.weights, w)
    assert torch.equal(c.data.labels, d.labels) and torch.equal(c.data.groups.offsets,
                                                                 d.groups.offsets)
    m_text, m_cache = _fit(*d, w=w, n_bins=31), _fit(*c.data, w=c.weights, n_bins=31)
    s = m_text.predict(d.X)
    assert torch.equal(s, m_cache.predict(d.X)) and torch.equal(s, m_cache.predict(c.data.X))
    for a, b in zip(m_text.models, m_cache.models):
        assert torch.equal(a.threshold, b.threshold) and torch.equal(a.leaf_value, b.leaf_value)


def test_representatives_score_like_raw_values_with_nans():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(400, 5, generator=g)
    X[torch.rand(400, 5, generator=g) < 0.1] = float("nan")
    X[:, 4] = 1.0  # one bin
    y = (torch.rand(400, generator=g) * 3).floor()
    b = bin_features(X, n_bins=16)
    R = representatives(b)
    assert torch.equal(torch.isnan(R), torch.isnan(X)) and bool(torch.isfinite(R[~R.isnan()]).all())
    attach_bins(R, b, key=(16, 200_000, 0))
    m1, m2 = _fit(X, y, None, n_bins=16), _fit(R, y, None, n_bins=16)
    assert torch.equal(m1.predict(X), m2.predict(X)) and torch.equal(m2.predict(X), m2.predict(R))
    with pytest.raises(ValueError, match="cached bins"):  # never a silent re-binning
        _fit(R, y, None, n_bins=32)


def test_stand_in_features_fit_alike_and_realize(tmp_path):
    f = _write_letor(tmp_path / "t.txt")
    build_cache(tmp_path / "c.trbin", f, spec=BinSpec(n_bins=31))
    full = load_cache(tmp_path / "c.trbin")
    lean = load_cache(tmp_path / "c.trbin", values=False)
    assert lean.data.X.stride() == (0, 0) and lean.data.X.shape == full.data.X.shape
    m1, m2 = _fit(*full.data, n_bins=31), _fit(*lean.data, n_bins=31)
    assert torch.equal(m1.predict(full.data.X), m2.predict(full.data.X))
    assert torch.equal(realized(lean.data).X, full.data.X)
    assert realized(full.data) is full.data


def test_shards_per_rank_cover_the_queries(tmp_path):
    f = _write_letor(tmp_path / "t.txt", n_queries=23)
    build_cache(tmp_path / "c.trbin", f)
    whole = load_cache(tmp_path / "c.trbin")
    parts = [load_cache(tmp_path / "c.trbin", context=SimpleNamespace(rank=r, world_size=3))
             for r in range(3)]
    assert torch.equal(torch.cat([p.binned.codes for p in parts]), whole.binned.codes)
    assert torch.equal(torch.cat([p.data.labels for p in parts]), whole.data.labels)
    assert sum(p.data.groups.num_groups for p in parts) == 23
    assert min(len(p.data) for p in parts) > 0


def test_stale_cache_refused(tmp_path):
    f = _write_letor(tmp_path / "t.txt")
    c = tmp_path / "c.trbin"
    build_cache(c, f)
    assert cache_status(c, BinSpec()) is None
    assert "n_bins=255 (run: 63)" in cache_status(c, BinSpec(n_bins=63))
    with pytest.raises(StaleCacheError, match="stale bin cache"):
        load_cache(c, spec=BinSpec(seed=3))
    text = f.read_text()
    f.write_text(text.replace("qid:1 ", "qid:1 ", 1)[:-2] + "9\n")  # same size, new content
    os.utime(f, ns=(1, 1))
    with pytest.raises(StaleCacheError, match="changed \\(content\\)"):
        load_cache(c)
    f.write_text(text + text.splitlines()[0] + "\n")
    assert "changed (size)" in cache_status(c)
    other = _write_letor(tmp_path / "other.txt")  # built from another file: stale
    assert "it was built from" in cache_status(c, BinSpec(), run_sources(other))


@pytest.mark.parametrize("damage", ["truncate", "labels", "code", "not_a_cache"])
def test_damaged_cache_is_one_line_error(tmp_path, damage):
    f = _write_letor(tmp_path / "t.txt")
    c = tmp_path / "c.trbin"
    build_cache(c, f)
    raw = bytearray(c.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage in ("labels", "code"):
        with safe_open(str(c), "pt") as fh:
            t = {k: fh.get_tensor(k) for k in fh.keys()}
            meta = fh.metadata()
        if damage == "labels":
            t["labels"][0] += 1
        else:
            t["codes"][0, 0] = 200
        save_file(t, str(c), metadata=meta)
        raw = bytearray(c.read_bytes())
    else:
        save_file({"x": torch.zeros(2)}, str(c))
        raw = bytearray(c.read_bytes())
    c.write_bytes(bytes(raw))
    with pytest.raises(CacheError) as info:
        load_cache(c)
    assert "not a valid torchrankboost bin cache" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("n, F", [(1, 5), (63, 7), (64, 7), (65, 7), (1000, 220), (129, 1),
                                  (5, 0)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16])
def test_column_max_equals_amax(n, F, dtype):
    g = torch.Generator().manual_seed(n * 31 + F)
    hi = 256 if dtype == torch.uint8 else 4000
    lo = 0 if dtype == torch.uint8 else -4000
    x = torch.randint(lo, hi, (n, F), generator=g).to(dtype)
    assert torch.equal(column_max(x), x.amax(0))
    assert torch.equal(column_max(x, group=3), x.amax(0))
    assert torch.equal(column_max(x, reduce=torch.amin), x.amin(0))
    assert torch.equal(column_max(x, group=3, reduce=torch.amin), x.amin(0))


def test_column_max_of_a_strided_view():
    x = torch.randint(0, 256, (300, 10), dtype=torch.uint8)[:, ::2]
    assert torch.equal(column_max(x), x.amax(0))


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


def test_cache_keeps_two_byte_codes(tmp_path):
    f = _write_many_values(tmp_path / "train.txt")
    spec = BinSpec(n_bins=600)
    c_path = build_cache(tmp_path / "c.trbin", f, spec=spec)
    c = load_cache(c_path, spec=spec)
    assert c.binned.codes.dtype == torch.int16 and c.binned.missing_code == 600
    assert c.info["code_dtype"] == "int16" and int(c.binned.num_bins.max()) > 255
    d = load_file(f)
    ref = bin_features(d.X, n_bins=600, max_bins=32766)
    assert torch.equal(c.binned.codes, ref.codes) and torch.equal(c.binned.edges, ref.edges)
    learner = dict(n_bins=600, max_leaves=6, min_samples_leaf=3)
    fits = [Booster(loss=ExponentialPairwiseLoss(), learner=RegressionTree(**learner), n_rounds=3,
                    verbose=False).fit(*data) for data in (c.data, d)]
    assert torch.equal(fits[0].predict(d.X), fits[1].predict(d.X))
    # a cache without code_dtype (written before it was recorded) still loads
    info, t = cache_mod._map(c_path)
    del info["code_dtype"]
    text = json.dumps(info, sort_keys=True)
    tensors = {k: v.clone() for k, v in t.items()}
    cache_mod._save(tensors, tmp_path / "old.trbin",
                    {"torchrankboost": text, "sha256": cache_mod._digest(text, tensors)})
    assert torch.equal(load_cache(tmp_path / "old.trbin").binned.codes, c.binned.codes)
    # a negative 2-byte code is damage (it would index before a histogram): refused by the
    # checksum, and by the range check under checksums made to match
    tensors["codes"][3, 1] = -7
    cache_mod._save(tensors, tmp_path / "bad.trbin",
                    {"torchrankboost": text, "sha256": cache_mod._digest(text, tensors)})
    with pytest.raises(CacheError, match="checksum mismatch in the bin codes of rows 0 to"):
        load_cache(tmp_path / "bad.trbin")
    crc = info["codes_crc32"]
    crc["chunks"] = cache_mod.code_checksums(tensors["codes"], crc["rows"],
                                             (0, len(crc["chunks"])))
    text = json.dumps(info, sort_keys=True)
    cache_mod._save(tensors, tmp_path / "bad.trbin",
                    {"torchrankboost": text, "sha256": cache_mod._digest(text, tensors)})
    with pytest.raises(CacheError, match="out of range"):
        load_cache(tmp_path / "bad.trbin")




# ----------------------------------------------------------------------------- checksums
def _codes_at(path):
    """``(offset, size)`` of the codes' bytes in the cache file."""
    raw = path.read_bytes()
    hlen = int.from_bytes(raw[:8], "little")
    b0, b1 = json.loads(raw[8:8 + hlen])["codes"]["data_offsets"]
    return 8 + hlen + b0, b1 - b0


def test_every_changed_byte_of_the_codes_is_refused(tmp_path, monkeypatch):
    """Each byte of the codes changed in turn (+1: often still a valid bin), pairs of rows
    swapped, and a whole row zeroed: every one refused on load, naming the rows of its
    chunk — the codes carry a CRC-32 per chunk (small chunks here: several per file)."""
    monkeypatch.setattr(cache_mod, "_CRC_CHUNK", 64)
    f = _write_letor(tmp_path / "t.txt", n_queries=25)
    c = build_cache(tmp_path / "c.trbin", f)
    clean = c.read_bytes()
    at, size = _codes_at(c)
    n, F = load_cache(c).binned.codes.shape
    assert len(load_cache(c).info["codes_crc32"]["chunks"]) > 10
    rng = np.random.default_rng(0)
    edits = [(at + i, bytes([(clean[at + i] + 1) % 256])) for i in range(size)]
    for _ in range(20):
        a, b = sorted(rng.choice(n, 2, replace=False))
        ra, rb = (clean[at + r * F:at + (r + 1) * F] for r in (a, b))
        if ra != rb:
            edits.append((at + a * F, rb + clean[at + (a + 1) * F:at + b * F] + ra))
    edits.append((at + 5 * F, bytes(F)))
    for pos, new in edits:
        if clean[pos:pos + len(new)] == new:
            continue
        c.write_bytes(clean[:pos] + new + clean[pos + len(new):])
        with pytest.raises(CacheError, match="checksum mismatch in the bin codes of rows"):
            load_cache(c, values=False)
    assert len(edits) > size + 15


def test_each_rank_checks_the_chunks_it_trains_on(tmp_path, monkeypatch):
    """A changed code in the last rows: the rank that trains on them refuses the cache, the
    first rank (whose rows are intact and checked) loads its part."""
    monkeypatch.setattr(cache_mod, "_CRC_CHUNK", 64)
    f = _write_letor(tmp_path / "t.txt", n_queries=23)
    c = build_cache(tmp_path / "c.trbin", f)
    raw = bytearray(c.read_bytes())
    at, size = _codes_at(c)
    raw[at + size - 1] ^= 1
    c.write_bytes(bytes(raw))
    first = load_cache(c, context=SimpleNamespace(rank=0, world_size=3))
    assert len(first.data) > 0
    with pytest.raises(CacheError, match="checksum mismatch"):
        load_cache(c, context=SimpleNamespace(rank=2, world_size=3))


def test_a_cache_without_code_checksums_is_stale(tmp_path):
    """A cache written before the codes had checksums is never trained on: stale, so
    ``train --cache`` rebuilds it."""
    f = _write_letor(tmp_path / "t.txt")
    c = build_cache(tmp_path / "c.trbin", f)
    info, t = cache_mod._map(c)
    del info["codes_crc32"]
    text = json.dumps(info, sort_keys=True)
    tensors = {k: v.clone() for k, v in t.items()}
    cache_mod._save(tensors, tmp_path / "old.trbin",
                    {"torchrankboost": text, "sha256": cache_mod._digest(text, tensors)})
    assert "before the bin codes had checksums" in cache_status(tmp_path / "old.trbin")
    with pytest.raises(StaleCacheError, match="before the bin codes had checksums"):
        load_cache(tmp_path / "old.trbin")


def load_damaged(case, mark):
    """Fuzz child: load a damaged cache; ``refused`` (one-line CacheError) or whether it
    loads exactly the clean cache's tensors."""
    from torchrankboost.data.cache import CacheError as Err
    from torchrankboost.data.cache import load_cache as load

    mark("load")
    try:
        got = load(case["path"], values=False)
    except Err as exc:
        return {"outcome": "refused" if "\n" not in str(exc) else "multi-line"}
    ref = load(case["clean"], values=False)
    same = (torch.equal(got.binned.codes, ref.binned.codes)
            and torch.equal(got.data.labels, ref.data.labels)
            and torch.equal(got.data.groups.offsets, ref.data.groups.offsets)
            and torch.equal(got.binned.edges, ref.binned.edges)
            and got.info == ref.info)
    return {"outcome": "same" if same else "different"}


def test_fuzzed_cache_files_are_refused_or_load_the_same(tmp_path):
    """Seeded byte damage anywhere in the file (flipped bits, truncation, inserted and
    deleted bytes), each load in a child process: every case is one-line CacheError or
    loads exactly the clean cache's data; never a crash or different data."""
    from fuzz_runner import damaged, run_cases

    f = _write_letor(tmp_path / "t.txt", n_queries=20, weights=True)
    c = build_cache(tmp_path / "c.trbin", f)
    clean = c.read_bytes()
    rng = np.random.default_rng(37)
    cases = []
    for i in range(160):
        (tmp_path / f"d{i}.trbin").write_bytes(damaged(clean, i, rng))
        cases.append({"path": str(tmp_path / f"d{i}.trbin"), "clean": str(c)})
    here = os.path.abspath(__file__)
    results = run_cases(f"{here}:load_damaged", cases)
    bad = [(i, r) for i, r in enumerate(results) if r.get("outcome") not in ("refused", "same")]
    assert not bad, bad[:10]
    assert sum(r["outcome"] == "refused" for r in results) >= 140
