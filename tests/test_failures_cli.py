"""The command line when things go wrong: each fault runs the real command in a subprocess
(``python -m torchrankboost ...``) and expects one line on stderr, the right exit status and
nothing lost."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def cli(args, cwd, timeout=180):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torchrankboost", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


def main_quiet(args):
    """Set-up steps (not the faults under test) run in-process: faster than a subprocess."""
    from torchrankboost import cli as cli_mod

    return cli_mod.main([str(a) for a in args])


def one_line(r, status):
    err = r.stderr.strip()
    assert r.returncode == status, (r.returncode, err[-2000:])
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def _letor(path, rows, *, zero_based):
    """rows: (label, qid, {index: value}) written with the given numbering."""
    with open(path, "w") as fh:
        for label, q, feats in rows:
            items = " ".join(f"{i if zero_based else i + 1}:{v}" for i, v in sorted(feats.items()))
            fh.write(f"{label} qid:{q} {items}\n")
    return path


def _rows(seed, n_queries=12, F=4, skip_zero=False):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for q in range(n_queries):
        for _ in range(6):
            x = torch.rand(F, generator=g)
            label = int(x[0] + x[2] > 1.0)
            feats = {j: round(float(x[j]), 4) for j in range(F) if not (skip_zero and j == 0)}
            rows.append((label, q, feats))
    return rows


@pytest.fixture
def small(tmp_path):
    train = _letor(tmp_path / "train.txt", _rows(0), zero_based=False)
    valid = _letor(tmp_path / "valid.txt", _rows(1), zero_based=False)
    return tmp_path, train, valid


@pytest.fixture
def trained(small):
    """``(folder, train file, model file)``: a 2-round model trained by the CLI in-process."""
    tmp, train, _ = small
    model = tmp / "m.safetensors"
    assert main_quiet(["train", "--data", train, "--rounds", 2, "-q", "--no-tensorboard",
                       "-o", model]) == 0
    return tmp, train, model


# ---------------------------------------------------------------- 2. feature numbering
def test_feature_numbering_is_decided_once_per_run_stored_and_used_by_evaluate(tmp_path):
    # 0-based files; the validation and scored files never use feature 0
    train = _letor(tmp_path / "train.txt", _rows(0), zero_based=True)
    valid = _letor(tmp_path / "valid.txt", _rows(1, skip_zero=True), zero_based=True)
    score = _letor(tmp_path / "score.txt", _rows(2, skip_zero=True), zero_based=True)
    model = tmp_path / "m.safetensors"
    assert main_quiet(["train", "--data", train, "--valid", valid, "--rounds", 3, "-q",
                       "--no-tensorboard", "-o", model]) == 0
    from torchrankboost.factory import load_model

    assert load_model(model).info["zero_based"] is True
    pred = tmp_path / "p.txt"
    assert main_quiet(["predict", model, score, "-o", pred]) == 0
    from torchrankboost.data import load_svmlight

    X = load_svmlight(score, zero_based=True, n_features=4).X
    want = load_model(model).predict(X)
    got = torch.tensor([float(v) for v in pred.read_text().split()], dtype=torch.float64)
    torch.testing.assert_close(got, want)
    # an explicit numbering that contradicts the model is refused
    err = one_line(cli(["evaluate", model, score, "--zero-based", "no"], tmp_path), 2)
    assert "contradicts the model's 0-based" in err


def test_file_with_index_0_is_refused_by_a_one_based_model(trained):
    tmp, train, model = trained
    zero = _letor(tmp / "zero.txt", _rows(3), zero_based=True)
    err = one_line(cli(["evaluate", model, zero], tmp), 2)
    assert "feature index 0" in err and "1-based" in err


# ---------------------------------------------------------------- 7. output checked first
def test_output_under_a_file_or_onto_a_folder_is_refused_before_training(small):
    tmp, train, _ = small
    for out, why in ((tmp / "train.txt" / "m.st", "is a file, not a folder"),
                     (tmp, "is a directory")):
        err = one_line(cli(["train", "--data", train, "--rounds", 500, "-q",
                            "--no-tensorboard", "-o", out], tmp, timeout=60), 2)
        assert why in err


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only folders")
def test_output_in_a_read_only_folder_is_refused_before_training(small):
    tmp, train, _ = small
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_line(cli(["train", "--data", train, "--rounds", 500, "-q",
                            "--no-tensorboard", "-o", ro / "m.safetensors"], tmp, 60), 2)
        assert "cannot write" in err
    finally:
        ro.chmod(0o755)


def test_a_failing_final_save_falls_back_to_the_run_folder(small, monkeypatch, capsys):
    from torchrankboost import cli as cli_mod
    from torchrankboost.boosting import Ensemble

    tmp, train, _ = small
    monkeypatch.chdir(tmp)
    target = tmp / "m.safetensors"
    real = Ensemble.save

    def flaky(self, path):
        if Path(path) == target:
            raise OSError(28, "No space left on device")
        return real(self, path)

    monkeypatch.setattr(Ensemble, "save", flaky)
    rc = cli_mod.main(["train", "--data", str(train), "--rounds", "2", "-q",
                       "--no-tensorboard", "-o", str(target), "--logdir", str(tmp / "run")])
    err = capsys.readouterr().err
    assert rc == 0 and "No space left on device" in err
    assert (tmp / "run" / "model.fallback.safetensors").is_file() and "fallback" in err


# ---------------------------------------------------------------- 8. partial model on Ctrl-C
def test_ctrl_c_saves_the_model_of_the_last_good_round_to_a_partial_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = tmp_path / "m.safetensors"
    p = subprocess.Popen([sys.executable, "-m", "torchrankboost", "train", "--data",
                          "synthetic", "--rounds", "300", "--early-stopping", "0",
                          "--no-tensorboard", "-o", str(out)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if line.startswith("round"):
                p.send_signal(signal.SIGINT)
                break
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    partial = tmp_path / "m.partial.safetensors"
    assert partial.is_file() and "m.partial.safetensors" in err and not out.exists()
    from torchrankboost.factory import load_model

    model = load_model(partial)
    assert model.n_rounds >= 1 and model.info["partial"] is True
    assert "interrupted" in model.info["stop_reason"]


# ---------------------------------------------------------------- 9. outputs that are inputs
def test_output_equal_to_an_input_is_refused(trained):
    tmp, train, model = trained
    before = train.read_bytes()
    err = one_line(cli(["train", "--data", train, "--rounds", 2, "-q", "--no-tensorboard",
                        "-o", train], tmp), 2)
    assert "also an input" in err and train.read_bytes() == before
    saved = model.read_bytes()
    for out in (model, train):
        err = one_line(cli(["predict", model, train, "-o", out], tmp), 2)
        assert "also an input" in err
    assert model.read_bytes() == saved and train.read_bytes() == before


@pytest.mark.skipif(IS_ROOT, reason="root writes read-only files")
def test_read_only_output_is_not_silently_replaced(trained):
    tmp, train, model = trained
    out = tmp / "scores.txt"
    out.write_text("keep\n")
    out.chmod(0o444)
    err = one_line(cli(["predict", model, train, "-o", out], tmp), 2)
    assert "read-only" in err and out.read_text() == "keep\n"


def test_predict_output_is_written_atomically(trained, monkeypatch):
    from torchrankboost import _io, cli as cli_mod

    tmp, train, model = trained
    calls = []
    real = _io.atomic_write
    monkeypatch.setattr(_io, "atomic_write", lambda p, w, **k: (calls.append(p), real(p, w, **k)))
    out = tmp / "scores.txt"
    assert cli_mod.main(["predict", str(model), str(train), "-o", str(out)]) == 0
    assert calls == [str(out)] and len(out.read_text().split()) == 72


# ---------------------------------------------------------------- 12. one line, status 2
def test_bad_data_files_are_one_line_with_status_2(small):
    import bz2  # noqa: F401
    import gzip

    tmp, train, _ = small
    (tmp / "qid.txt").write_text("1 qid:12345678901234567890 1:1\n0 qid:12345678901234567890 1:2\n")
    assert "qid.txt:1: query id" in one_line(cli(["train", "--data", tmp / "qid.txt"], tmp), 2)
    (tmp / "t.txt.gz").write_bytes(gzip.compress(train.read_bytes())[:200])
    assert "truncated or corrupt" in one_line(cli(["train", "--data", tmp / "t.txt.gz"], tmp), 2)
    (tmp / "c.txt.bz2").write_bytes(b"BZh91AY&SY" + b"junk" * 50)
    assert "truncated or corrupt" in one_line(cli(["train", "--data", tmp / "c.txt.bz2"], tmp), 2)
    (tmp / "empty.txt").write_text("")
    err = one_line(cli(["train", "--data", train, "--valid", tmp / "empty.txt", "-q",
                        "--no-tensorboard"], tmp), 2)
    assert "validation data" in err and "empty.txt" in err and "is empty" in err
    err = one_line(cli(["train", "--data", train, "--seed", 10 ** 30, "-q"], tmp), 2)
    assert "--seed must be" in err


def test_bad_model_paths_are_one_line_with_status_2(small):
    tmp, train, _ = small
    err = one_line(cli(["evaluate", tmp, train], tmp), 2)
    assert "is a folder" in err and "No such device" not in err
    os.mkfifo(tmp / "pipe")
    err = one_line(cli(["evaluate", tmp / "pipe", train], tmp, timeout=60), 2)
    assert "not a regular file" in err
    if not IS_ROOT:
        m = tmp / "m.safetensors"
        m.write_bytes(b"x")
        m.chmod(0)
        err = one_line(cli(["evaluate", m, train], tmp), 2)
        assert "permission denied" in err and "No such file" not in err


def test_out_of_range_split_feature_is_one_line_with_status_2(trained):
    import json

    from safetensors import safe_open

    tmp, train, model = trained
    with safe_open(str(model), framework="pt") as fh:
        meta = fh.metadata()
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    tensors["m0.split_feature"][0] = 1000
    bad = tmp / "bad.safetensors"
    # with a fresh checksum (a hand edit that recomputes it): the structure check refuses it
    from torchrankboost._modelfile import write_model_file

    write_model_file(bad, tensors, "ensemble", json.loads(meta["ensemble"]))
    err = one_line(cli(["predict", bad, train], tmp), 2)
    assert "invalid model file" in err and "split feature 1000" in err
    json.loads(meta["ensemble"])


def test_unwritable_log_folder_and_predict_onto_a_folder_are_one_line(trained):
    tmp, train, model = trained
    err = one_line(cli(["train", "--data", train, "--rounds", 2, "-q",
                        "--logdir", train / "logs"], tmp), 2)
    assert "train.txt" in err
    err = one_line(cli(["predict", model, train, "-o", tmp], tmp), 2)
    assert "is a directory" in err


def test_full_disk_on_predict_is_one_line_with_status_2(trained):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    tmp, train, model = trained
    err = one_line(cli(["predict", model, train, "-o", "/dev/full"], tmp), 2)
    assert "/dev/full" in err


def test_disk_full_while_writing_predictions_is_one_line_and_keeps_the_old_file(
        trained, monkeypatch, capsys):
    import torchrankboost._io as io_mod
    from torchrankboost import cli as cli_mod

    tmp, train, model = trained
    out = tmp / "scores.txt"
    out.write_text("old\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io_mod.os, "fsync", full)
    assert cli_mod.main(["predict", str(model), str(train), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err
    assert out.read_text() == "old\n"


# ---------------------------------------------------------------- 10. huge feature indices
def test_huge_feature_index_is_refused_before_allocating(tmp_path):
    f = tmp_path / "huge.txt"
    f.write_text("1 qid:1 1000000000:1\n0 qid:1 1:2\n")
    assert f.stat().st_size < 64
    err = one_line(cli(["train", "--data", f, "-q", "--no-tensorboard"], tmp_path), 2)
    assert "huge.txt:1: feature index 1000000000" in err and "max-features" in err
    g = tmp_path / "wide.txt"
    g.write_text("1 qid:1 10000000:1\n0 qid:1 1:2\n")
    err = one_line(cli(["train", "--data", g, "-q", "--no-tensorboard"], tmp_path), 2)
    assert "wide.txt:1: feature index 10000000" in err


def test_max_features_raises_the_limit(tmp_path):
    from torchrankboost.data import load_svmlight

    f = tmp_path / "wide.txt"
    f.write_text("1 qid:1 200000:1\n0 qid:1 1:2\n")
    with pytest.raises(ValueError, match="max_features="):
        load_svmlight(f)
    assert load_svmlight(f, max_features=200_000).X.shape == (2, 200_000)


# ---------------------------------------------------------------- 13. early stopping needs data
def test_early_stopping_without_validation_data_is_an_error(small):
    tmp, train, _ = small
    err = one_line(cli(["train", "--data", train, "--early-stopping", 5, "-q",
                        "--no-tensorboard"], tmp), 2)
    assert "--early-stopping 5 needs validation data" in err


# ---------------------------------------------------------------- 1. large labels from the CLI
def test_large_labels_do_not_make_early_stopping_keep_round_one(tmp_path):
    rows = [(lab * 1000, q, f) for lab, q, f in _rows(0, n_queries=20)]
    vrows = [(lab * 1000, q, f) for lab, q, f in _rows(1, n_queries=20)]
    train = _letor(tmp_path / "train.txt", rows, zero_based=False)
    valid = _letor(tmp_path / "valid.txt", vrows, zero_based=False)
    r = cli(["train", "--data", train, "--valid", valid, "--rounds", 30, "--metric",
             "ndcg@10", "-q", "--no-tensorboard", "-o", tmp_path / "m.safetensors"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "nan" not in r.stdout.split("valid")[1].splitlines()[0]
    from torchrankboost.factory import load_model

    info = load_model(tmp_path / "m.safetensors").info
    vals = info["evals_result"]["valid_0"]["ndcg@10"]
    assert all(v == v for v in vals) and info["best_round"] > 1
