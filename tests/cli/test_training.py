"""One training run (:mod:`torchrankboost.cli.training`) through the command: every algorithm by
name, the run's name, early stopping, huge feature indices refused before allocating, and a
run that keeps what it trained: a failing or full-disk final save goes to the fallback file
(or one line says nothing was saved), Ctrl-C saves the model of the last good round, a
second Ctrl-C during that save cannot lose it.

The full disk is real: a small tmpfs filled to the last byte (mounted when the tests run as
root with mount rights). Elsewhere the writer's own failure is injected instead:
``safetensors.torch.save_file`` raises a real ``SafetensorError`` with the message safetensors
gives on a full disk, for files in that folder."""

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torchrankboost import registry
from torchrankboost.cli import main

from conftest import read_events

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import (ROOT, captured_one_line, cli, data, full_disk, letor_rows, main_quiet,
                         one_line, small, svm_files, write_letor)


def test_train_algorithm_by_name_with_params(tmp_path, capsys):
    rc = main(["train", "--algorithm", "pnorm_push", "-p", "p=2", "--rounds", "5", "--quiet",
               "--no-tensorboard", "--output", str(tmp_path / "m.safetensors")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "pnorm_push on wdbc" in cap.out
    # a paper's algorithm: validation metrics per round and its own diagnostics
    rc = main(["train", "-a", "smooth_margin", "--rounds", "6", "--quiet",
               "--logdir", str(tmp_path / "sm")])
    assert rc == 0, capsys.readouterr().err
    tags = set(read_events(tmp_path / "sm").Tags()["scalars"])
    assert {"metrics/valid/auc", "metrics/valid/pair_error", "metrics/step_size", "round/margin",
            "round/smooth_margin"} <= tags
    assert "round/candidate" not in tags


@pytest.mark.parametrize("algorithm", registry.names("algorithm"))
def test_every_algorithm_trains_from_the_cli(algorithm, svm_files, tmp_path, capsys):
    size = ["-p", "max_iter=5"] if algorithm == "ranksvm" else ["--rounds", "2"]
    model = tmp_path / "m.safetensors"
    rc = main(["train", "--data", str(svm_files[0].parent), "-a", algorithm, *size, "--quiet",
               "--logdir", str(tmp_path / "run"), "--output", str(model)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    label = "exponential" if algorithm == "boost" else algorithm  # the driver: its loss
    assert f"{label} on " in cap.out and model.is_file()
    assert "metrics/valid/ndcg@10" in read_events(tmp_path / "run").Tags()["scalars"]
    assert main(["evaluate", str(model), str(svm_files[2])]) == 0


def test_run_named_after_the_data_folder_and_file(svm_files, tmp_path, capsys):
    from torchrankboost.cli.training import data_name as _data_name

    fold = svm_files[0].parent
    assert _data_name(str(svm_files[0]), "train") == f"{fold.name}-train"
    letor = tmp_path / "mq2008" / "Fold3"
    letor.mkdir(parents=True)
    assert _data_name(str(letor), "Fold3") == "mq2008-Fold3"
    assert _data_name(str(letor / "x.txt"), "x") == "x"  # not a file: the loader's name
    assert _data_name("wdbc", "wdbc") == "wdbc"
    rc = main(["train", "--data", str(svm_files[0]), "--valid", str(svm_files[1]),
               "--rounds", "30", "--early-stopping", "2", "--max-leaves", "4", "--quiet",
               "--no-tensorboard", "--output", str(tmp_path / "m.safetensors")])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"exponential on {fold.name}-train:" in out
    m = re.search(r"(\d+) rounds? \(the best on validation; (\d+) rounds run\)", out)
    assert m and int(m.group(1)) < int(m.group(2)), out


# ------------------------------------------------------------------ early stopping
def test_early_stopping_without_validation_data_is_an_error(small):
    tmp, train, _ = small
    err = one_line(cli(["train", "--data", train, "--early-stopping", 5, "-q",
                        "--no-tensorboard"], tmp), 2)
    assert "--early-stopping 5 needs validation data" in err


def test_large_labels_do_not_make_early_stopping_keep_round_one(tmp_path):
    rows = [(lab * 1000, q, f) for lab, q, f in letor_rows(0, n_queries=20)]
    vrows = [(lab * 1000, q, f) for lab, q, f in letor_rows(1, n_queries=20)]
    train = write_letor(tmp_path / "train.txt", rows, zero_based=False)
    valid = write_letor(tmp_path / "valid.txt", vrows, zero_based=False)
    r = cli(["train", "--data", train, "--valid", valid, "--rounds", 30, "--metric",
             "ndcg@10", "-q", "--no-tensorboard", "-o", tmp_path / "m.safetensors"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "nan" not in r.stdout.split("valid")[1].splitlines()[0]
    from torchrankboost.factory import load_model

    info = load_model(tmp_path / "m.safetensors").info
    vals = info["evals_result"]["valid_0"]["ndcg@10"]
    assert all(v == v for v in vals) and info["best_round"] > 1


# ------------------------------------------------------------------ huge feature indices
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


# ------------------------------------------------------------------ the final save
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


def test_full_disk_at_the_final_save_keeps_the_model_in_the_fallback_file(
        tmp_path, data, full_disk, capsys):
    from torchrankboost.factory import load_model

    out = full_disk / "m.safetensors"
    assert main_quiet(["train", "--data", data, "--rounds", 2, "-q", "--no-tensorboard",
                  "-o", out, "--logdir", tmp_path / "run"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err, err
    fallback = tmp_path / "run" / "model.fallback.safetensors"
    assert str(fallback) in err and load_model(fallback).n_rounds == 2
    assert not out.exists() and [p.name for p in full_disk.iterdir()] in ([], ["filler"])


def test_full_disk_for_output_and_fallback_says_in_one_line_nothing_was_saved(
        data, full_disk, capsys):
    out = full_disk / "m.safetensors"
    assert main_quiet(["train", "--data", data, "--rounds", 2, "-q", "--no-tensorboard",
                  "-o", out, "--logdir", full_disk / "run"]) == 2
    err = captured_one_line(capsys)
    assert "nothing was saved" in err and "No space left on device" in err
    assert "model.fallback.safetensors" in err


# ------------------------------------------------------------------ partial saves
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


def test_full_disk_at_the_partial_save_after_ctrl_c_says_why_without_a_traceback(
        data, full_disk, monkeypatch, capsys):
    from torchrankboost.cli import training

    real = training._fit

    class CtrlC:
        def on_round_end(self, ranker, record):
            if record.round == 1:
                raise KeyboardInterrupt

    monkeypatch.setattr(training, "_fit", lambda r, s, run, cb: real(r, s, run, cb + [CtrlC()]))
    out = full_disk / "m.safetensors"
    assert main_quiet(["train", "--data", data, "--rounds", 5, "-q", "--no-tensorboard",
                  "-o", out]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert "cannot save the model of the last good round to" in err
    assert "No space left on device" in err and "interrupted" in err
    assert not (full_disk / "m.partial.safetensors").exists()


_SECOND_CTRL_C = textwrap.dedent("""
    import os, signal, sys
    import safetensors.torch
    from torchrankboost import cli
    from torchrankboost.cli import training

    real_save, real_fit = safetensors.torch.save_file, training._fit

    def save_interrupted(tensors, filename, metadata=None):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, in the middle of the save
        return real_save(tensors, filename, metadata=metadata)

    class FirstCtrlC:
        def on_round_end(self, ranker, record):
            if record.round == 2:
                safetensors.torch.save_file = save_interrupted
                os.kill(os.getpid(), signal.SIGINT)

    training._fit = lambda r, s, run, cb: real_fit(r, s, run, cb + [FirstCtrlC()])
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_second_ctrl_c_during_the_partial_save_does_not_lose_it(tmp_path, data):
    """Both interrupts are real SIGINTs sent to the real command (in a subprocess)."""
    from torchrankboost.factory import load_model

    out = tmp_path / "m.safetensors"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", _SECOND_CTRL_C, "train", "--data", str(data),
                        "--rounds", "50", "--no-tensorboard", "-q", "-o", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr
    assert "SIGINT received while saving" in r.stderr
    partial = tmp_path / "m.partial.safetensors"
    assert str(partial) in r.stderr and load_model(partial).n_rounds == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.partial.safetensors", "train.txt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_resumed_run_says_so_and_numbers_its_rounds_on(tmp_path, capsys):
    """``--resume`` names the checkpoint and the round it resumes after, and the progress
    lines count on from there (``round 8/10``, not ``round 2/10``); ``--init-model`` says
    what it continues and counts to the rounds in all."""
    out = str(tmp_path / "m.safetensors")
    common = ["train", "--data", "synthetic", "--no-tensorboard", "--learner-param",
              "max_leaves=4"]
    assert main([*common, "--rounds", "6", "--checkpoint-every", "3", "-o", out, "-q"]) == 0
    capsys.readouterr()
    ckpt = str(tmp_path / "m.checkpoint.safetensors")
    assert main([*common, "--rounds", "10", "--resume", ckpt, "-o",
                 str(tmp_path / "r.safetensors")]) == 0
    err = capsys.readouterr().err
    assert f"resuming {ckpt} after round 6" in err
    rounds = re.findall(r"^round\s+(\d+)/(\d+)", err, re.M)
    assert rounds and rounds[-1] == ("10", "10") and int(rounds[0][0]) > 6, err
    assert main([*common, "--rounds", "3", "--init-model", out, "-o",
                 str(tmp_path / "w.safetensors")]) == 0
    err = capsys.readouterr().err
    assert f"continuing {out} (6 rounds)" in err
    assert re.findall(r"^round\s+(\d+)/(\d+)", err, re.M)[-1] == ("9", "9"), err
# ------------------------------------------------------------------ neural rankers (--model)
def test_train_neural_model_then_evaluate_predict_and_export(small, capsys):
    """``--model``: a neural ranker trained, saved, read back by evaluate / predict (with the
    file's queries) and exported to ONNX; TensorBoard's layout is boosting's."""
    tmp, train, valid = small
    model = tmp / "nn.safetensors"
    rc = main(["train", "--data", str(train), "--valid", str(valid), "--model", "transformer",
               "--model-param", "d_model=16", "--rounds", "3", "--lr", "0.003", "-p",
               "max_docs=32", "--quiet", "--logdir", str(tmp / "runs"), "--name", "nn",
               "-o", str(model)])
    out = capsys.readouterr().out
    assert rc == 0 and "transformer-listnet on" in out and model.exists()
    tags = read_events(tmp / "runs").Tags()["scalars"]
    assert {"metrics/loss_per_query", "metrics/valid/ndcg@10", "summary/valid/ndcg@10",
            "summary/best_round"} <= set(tags), sorted(tags)
    assert main(["evaluate", str(model), str(valid)]) == 0
    assert "valid.txt" in capsys.readouterr().out
    assert main(["predict", str(model), str(valid), "-o", str(tmp / "p.txt")]) == 0
    assert len((tmp / "p.txt").read_text().split()) == len(valid.read_text().splitlines())
    assert main(["export", str(model), "-f", "onnx", "-o", str(tmp / "nn.onnx")]) == 0
    assert "padded queries" in capsys.readouterr().out
    assert main(["export", str(model), "-f", "lightgbm", "-o", str(tmp / "nn.txt")]) == 2
    assert "exports to onnx only" in captured_one_line(capsys)


@pytest.mark.parametrize("args, match", [
    (["--model", "mlp", "--algorithm", "rankboost"], "goes with boosting"),
    (["--model", "mlp", "--max-leaves", "8"], "goes with boosting"),
    (["--precision", "bf16"], "go with --model"),
    (["--model-param", "d_model=8"], "go with --model"),
    (["--model", "mlp", "--loss", "nonesuch"], "unknown loss"),
    (["--model", "mlp", "--model-param", "widht=3"], "widht"),
])
def test_train_neural_model_bad_options_are_one_line(small, capsys, args, match):
    tmp, train, _ = small
    rc = main(["train", "--data", str(train), "--rounds", "1", "--quiet", "--no-tensorboard",
               "-o", str(tmp / "x.safetensors"), *args])
    assert rc == 2
    assert match in captured_one_line(capsys)


@pytest.mark.slow
def test_two_processes_give_the_one_process_model_of_the_same_global_batches(small):
    """``--nproc 2`` and one process with ``-p batch_ranks=2`` (the same global batches):
    the same network, bit for bit (dropout on: each rank's generator is replayed)."""
    from safetensors.torch import load_file

    tmp, train, valid = small
    common = ["train", "--data", train, "--valid", valid, "--model", "transformer",
              "--model-param", "d_model=16", "--rounds", "2", "-p", "max_docs=16", "-q",
              "--no-tensorboard"]
    r = cli([*common, "--nproc", "2", "-o", tmp / "two.safetensors"], tmp)
    assert r.returncode == 0, r.stderr
    assert main_quiet([*common, "-p", "batch_ranks=2", "-o", tmp / "one.safetensors"]) == 0
    a, b = load_file(tmp / "one.safetensors"), load_file(tmp / "two.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
