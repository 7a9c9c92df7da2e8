"""The tree learner with more than 255 bins: 2-byte (int16) bin codes, missing code ``n_bins``.

The native kernels grow the same trees as the torch reference bit for bit on int16 codes too;
the models predict raw features as they scored the training rows, save and load, export; the
binned reader and the bin cache keep the 2-byte codes (and say so in the cache's metadata).
"""

import json
import math

import numpy as np
import pytest
import torch
from safetensors import safe_open

from torchrankboost.boosting import Booster, Ensemble
from torchrankboost.kernels.binning import bin_features
from torchrankboost.kernels import native_backend
from torchrankboost.boosting.learners import ObliviousTree, RegressionTree
from torchrankboost.cli import main
from torchrankboost.data import cache as cache_mod
from torchrankboost.data import load_file
from torchrankboost.data.binned_read import bin_row_chunks, load_svmlight_binned
from torchrankboost.data.cache import BinSpec, CacheError, build_cache, load_cache
from torchrankboost.export import to_torch
from torchrankboost.losses import ExponentialPairwiseLoss

native_only = pytest.mark.skipif(native_backend.status() != "native",
                                 reason=f"compiled kernels unavailable: {native_backend.status()}")


def _problem(seed, n=3000, F=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[torch.rand(n, F, generator=g) < 0.08] = math.nan
    X[:, 1] = torch.randint(0, 4, (n,), generator=g).double()  # few distinct values
    t = torch.sin(4 * X[:, 0].nan_to_num()) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.rand(n, generator=g, dtype=torch.float64) if seed % 2 else None
    rows = torch.nonzero(torch.rand(n, generator=g) < 0.7).reshape(-1) if seed % 3 == 0 else None
    return X, t, w, rows


def _same_tree(a, b):
    for k in a._tensor_names:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype and torch.equal(x, y), k
    assert a.depth == b.depth and a.missing_code == b.missing_code


def test_more_bins_give_more_thresholds():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(20000, 1, generator=g, dtype=torch.float64)  # ~20000 distinct values
    y = x[:, 0] + 0.01 * torch.randn(20000, generator=g, dtype=torch.float64)
    found = {}
    for nb in (255, 1023):
        lr = RegressionTree(n_bins=nb, max_leaves=600, min_samples_leaf=5)
        p = lr.prepare(x)
        m = lr.fit(p, y)
        found[nb] = (p.codes.dtype, p.missing_code, int(p.num_bins[0]),
                     m.threshold.unique().numel())
    assert found[255][:2] == (torch.uint8, 255) and found[255][3] <= 254
    assert found[1023][:3] == (torch.int16, 1023, 1023)
    assert found[1023][3] > 400


@native_only
@pytest.mark.parametrize("seed,n_bins,threads,n", [(0, 256, 1, 3000), (1, 300, 2, 3000),
                                                   (2, 1023, 1, 3000), (7, 1023, 2, 70000),
                                                   (4, 5000, 2, 3000), (5, 700, 1, 3000)])
def test_native_equals_torch_bit_for_bit(seed, n_bins, threads, n):
    # n = 70000 rows x 5 features: the threaded histogram and row partition run
    X, t, w, rows = _problem(seed, n=n)
    kw = dict(n_bins=n_bins, max_leaves=25, min_samples_leaf=1 + seed * 3, l2=float(seed % 2),
              max_depth=None if seed % 2 else 6)
    ref, nat = RegressionTree(kernel="torch", **kw), RegressionTree(kernel="native", **kw)
    p = ref.prepare(X)
    assert p.codes.dtype == torch.int16 and p.missing_code == n_bins
    a, fa = ref.fit_predict(p, t, w, rows=rows)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)  # the native kernels' result does not depend on it
    try:
        b, fb = nat.fit_predict(p, t, w, rows=rows)
    finally:
        torch.set_num_threads(old)
    assert (ref.kernel_, nat.kernel_) == ("torch", "native") and a.num_leaves > 2
    _same_tree(a, b)
    assert torch.equal(fa, fb)
    # the traversal of the codes: the same leaves in both kernels
    assert torch.equal(a.predict_prepared(p, kernel="torch"), b.predict_prepared(p))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_raw_predictions_equal_training_output(dtype):
    X, t, w, _ = _problem(7)
    X = X.to(dtype)
    lr = RegressionTree(n_bins=2000, max_leaves=40, min_samples_leaf=3)
    p = lr.prepare(X)
    m, f = lr.fit_predict(p, t.to(dtype), w)
    assert torch.equal(m.predict(X), f.to(m.leaf_value.dtype))
    assert torch.equal(m.predict(X, kernel="torch"), m.predict(X))
    assert torch.equal(m.predict_prepared(p), m.predict(X))


def _letor(n_queries=40, F=4, seed=0):
    rng = np.random.default_rng(seed)
    X, y, g = [], [], []
    for _ in range(n_queries):
        k = int(rng.integers(5, 15))
        X.append(rng.normal(size=(k, F)))
        y.append(rng.integers(0, 3, k))
        g.append(k)
    X = torch.from_numpy(np.concatenate(X)).float()
    X[torch.rand(X.shape, generator=torch.Generator().manual_seed(seed)) < 0.05] = math.nan
    qid = torch.repeat_interleave(torch.arange(len(g)), torch.tensor(g))
    return X, torch.from_numpy(np.concatenate(y)).float(), qid


def test_booster_save_load_and_export(tmp_path):
    X, y, g = _letor()
    b = Booster(loss=ExponentialPairwiseLoss(), n_rounds=5, verbose=False,
                learner=RegressionTree(n_bins=400, max_leaves=8, min_samples_leaf=2))
    model = b.fit(X, y, g)
    assert all(m.missing_code == 400 for m in model.models)
    s = model.predict(X)
    model.save(tmp_path / "m.trb")
    back = Ensemble.load(tmp_path / "m.trb")
    assert torch.equal(back.predict(X), s)
    assert [m.missing_code for m in back.models] == [400] * 5
    assert torch.equal(to_torch(back)(X), s)


def _write_letor(path, n_queries=40, F=4, seed=1):
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
    f = _write_letor(tmp_path / "train.txt")
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
    # a negative 2-byte code is damage (it would index before a histogram)
    tensors["codes"][3, 1] = -7
    cache_mod._save(tensors, tmp_path / "bad.trbin",
                    {"torchrankboost": text, "sha256": cache_mod._digest(text, tensors)})
    with pytest.raises(CacheError, match="out of range"):
        load_cache(tmp_path / "bad.trbin")


def test_binned_reader_and_row_chunks_keep_two_byte_codes(tmp_path):
    f = _write_letor(tmp_path / "train.txt", seed=2)
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


@pytest.mark.parametrize("make", [lambda: RegressionTree(n_bins=1),
                                  lambda: RegressionTree(n_bins=32767),
                                  lambda: RegressionTree(n_bins=300.0),
                                  lambda: ObliviousTree(n_bins=256),
                                  lambda: load_svmlight_binned("x.txt", n_bins=40000),
                                  lambda: bin_row_chunks(None, [1], n_bins=32767)])
def test_bad_n_bins_one_line_error(make):
    with pytest.raises(ValueError, match="n_bins") as e:
        make()
    assert "\n" not in str(e.value)


def test_cli_bin_and_train_with_two_byte_codes(tmp_path, capsys):
    f = _write_letor(tmp_path / "t.txt", seed=3)
    c = tmp_path / "c.trbin"
    common = ["--rounds", "3", "--max-leaves", "6", "--no-tensorboard", "-q",
              "--learner-param", "n_bins=700"]
    assert main(["bin", str(f), "-o", str(c), "--max-bins", "700", "-q"]) == 0
    assert load_cache(c).binned.codes.dtype == torch.int16
    assert main(["train", "--data", str(f), "--cache", str(c), "-o", str(tmp_path / "a.st")]
                + common) == 0
    assert main(["train", "--data", str(f), "-o", str(tmp_path / "b.st")] + common) == 0
    capsys.readouterr()
    tensors = []
    for name in ("a.st", "b.st"):
        with safe_open(str(tmp_path / name), "pt") as fh:
            tensors.append({k: fh.get_tensor(k) for k in fh.keys()})
    a, b = tensors
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_histogram_memory_counts_the_slots(monkeypatch):
    from torchrankboost.boosting.learners import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: 10 ** 9)
    memory.check_histogram_memory(100, 31, "cpu")  # 32 x 100 x 256 x 24 bytes: 20 MB
    with pytest.raises(ValueError, match="x 32767 bins x 24 bytes.*n_bins") as e:
        memory.check_histogram_memory(100, 31, "cpu", slots=32767)  # 2.5 GB
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="32767 bins"):
        RegressionTree(n_bins=32766, max_leaves=31).prepare(torch.zeros(2, 100))


@native_only
def test_native_histogram16_equals_reference():
    from torchrankboost.kernels.histogram import histogram

    X, t, _, _ = _problem(9, n=5000)
    p = RegressionTree(n_bins=900).prepare(X)
    S = p.missing_code + 1
    w = torch.rand(X.shape[0], dtype=torch.float64)
    vals = torch.stack([w * t, w], 1).contiguous()
    for r in (None, torch.arange(0, X.shape[0], 3)):
        ref = histogram(p.codes, r, vals, slots=S, packed=torch.complex(vals[:, 0], vals[:, 1]))
        out = torch.empty((X.shape[1], S, 3), dtype=torch.float64)
        r32 = None if r is None else r.to(torch.int32)
        native_backend.library().trb_histogram16(
            p.codes.data_ptr(), X.shape[0], X.shape[1], None if r32 is None else r32.data_ptr(),
            X.shape[0] if r is None else r.numel(), vals.data_ptr(), out.data_ptr(), S, 2)
        assert torch.equal(out.permute(2, 0, 1), ref)
