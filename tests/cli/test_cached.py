"""``train --cache`` (:mod:`torchrankboost.cli.cached`) after ``bin`` (:mod:`torchrankboost.cli.bin`):
the model of the text file bit for bit, the same table; a cache binned otherwise is rebuilt
with a message, a damaged one is one line with status 2."""

import numpy as np
import torch
from safetensors import safe_open

from torchrankboost.cli import main
from torchrankboost.data.cache import BinSpec, cache_status, load_cache


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


def _model_tensors(path):
    with safe_open(str(path), "pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}


def test_cli_bin_and_train_cache_same_model(tmp_path, capsys):
    f = _write_letor(tmp_path / "t.txt", n_queries=40)
    v = _write_letor(tmp_path / "v.txt", n_queries=10, seed=1)
    c = tmp_path / "c.trbin"
    common = ["--valid", str(v), "--rounds", "3", "--max-leaves", "4", "--no-tensorboard",
              "-q", "--learner-param", "n_bins=15"]
    assert main(["bin", str(f), "-o", str(c), "--max-bins", "15", "-q"]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(f), "--cache", str(c), "-o", str(tmp_path / "a.st")]
                + common) == 0
    table_cache = capsys.readouterr().out.split(", ")[-1].splitlines()[1:-2]
    assert main(["train", "--data", str(f), "-o", str(tmp_path / "b.st")] + common) == 0
    table_text = capsys.readouterr().out.split(", ")[-1].splitlines()[1:-2]
    assert table_cache == table_text and any(r.startswith("valid") for r in table_text)
    a, b = _model_tensors(tmp_path / "a.st"), _model_tensors(tmp_path / "b.st")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    common[-1] = "n_bins=31"  # another binning: rebuilt with a message, then used
    assert main(["train", "--data", str(f), "--cache", str(c), "-o", str(tmp_path / "d.st")]
                + common) == 0
    assert "building the bin cache" in capsys.readouterr().err
    assert cache_status(c, BinSpec(n_bins=31)) is None
    c.write_bytes(c.read_bytes()[:100])  # damaged: one line, status 2, not overwritten
    assert main(["train", "--data", str(f), "--cache", str(c)] + common) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("torchrankboost: error:") and "\n" not in err


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


def test_cli_bin_and_train_with_two_byte_codes(tmp_path, capsys):
    f = _write_many_values(tmp_path / "t.txt", seed=3)
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
