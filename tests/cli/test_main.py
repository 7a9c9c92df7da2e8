"""The command's entry point (:mod:`torchrankboost.cli.main`): ``list``, the exit statuses and
the one line on stderr of every failure (bad input 2, a failed run 1, a closed pipe 141, no
traceback), ``--threads``, and importing the package without the command line."""

import os
import re
import subprocess
import sys

import pytest
import torch

from torchrankboost import registry
from torchrankboost.cli import main

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import (ROOT, cli, one_error_line, one_line, run_cli, small, svm_files,
                         trained)


# ------------------------------------------------------------------ list
def test_list_all_and_one_kind(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for title in ("Losses", "Algorithms", "Weak learners", "Metrics"):
        assert title in out
    for n in registry.names("loss") + registry.names("algorithm") + registry.names("learner"):
        assert re.search(rf"^\s+{re.escape(n)}\s+\S", out, re.M), n
    assert main(["list", "losses"]) == 0
    out = capsys.readouterr().out
    assert "exponential" in out and "rankboost_plus" not in out


def test_version_prints_the_package_version(capsys):
    import torchrankboost

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"torchrankboost {torchrankboost.__version__}"


def test_list_into_a_closed_pipe_prints_no_traceback(tmp_path):
    """`torchrankboost list | head -2`: the reader leaves early; no BrokenPipeError trace."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-m", "torchrankboost", "list"], cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert err == "", err
    r = subprocess.run(f"'{sys.executable}' -m torchrankboost list losses | head -2",
                       shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert len(r.stdout.splitlines()) == 2 and "Traceback" not in r.stderr, r.stderr


def test_importing_the_package_does_not_import_the_cli():
    code = "import sys, torchrankboost; print('torchrankboost.cli' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ------------------------------------------------------------------ bad input: one line
@pytest.mark.parametrize("args, pattern", [
    (["train", "--loss", "nope"], r"unknown loss 'nope'; valid choices: .*exponential"),
    (["train", "--algorithm", "nope"], r"unknown algorithm 'nope'; valid choices: .*rankboost"),
    (["train", "--learner", "forest"], r"unknown learner 'forest'; valid choices: .*tree"),
    (["train", "--metric", "ndgc@10"], r"unknown metric 'ndgc@10'; valid choices: .*ndcg@k"),
    (["train", "--loss-param", "q=2", "--loss", "pnorm_push", "--rounds", "1"],
     r"unknown parameter 'q' for loss 'pnorm_push'; valid parameters: p"),
    (["train", "--data", "nope"], r"data not found: 'nope'"),
    (["train", "--data", "/no/such/file.txt"], r"data not found"),
    (["train", "--valid", "/no/such/vali.txt"], r"file not found: /no/such/vali.txt"),
    (["train", "--device", "cuda:7"] if not torch.cuda.is_available() else
     ["train", "--device", "warp"], r"device"),
    (["train", "--param", "oops"], r"--param expects KEY=VALUE"),
    (["list", "widgets"], r"unknown list 'widgets'; valid choices"),
    (["evaluate", "/no/model.safetensors", "/no/data.txt"], r"model not found"),
    (["predict", "/no/model.safetensors", "/no/data.txt"], r"model not found"),
])
def test_bad_input_is_one_line(args, pattern, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(args)
    cap = capsys.readouterr()
    assert rc != 0
    line = one_error_line(cap.err)
    assert re.search(pattern, line), line
    assert not (tmp_path / "runs").exists()  # no run directory for a bad command


def test_malformed_and_missing_files(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:0.5 2:0.1\n0 qid:1 1:abc 2:0.3\n")
    assert main(["train", "--data", str(bad), "--rounds", "1"]) != 0
    line = one_error_line(capsys.readouterr().err)
    assert "bad.txt" in line and ":2" in line  # names the file and the line

    notmodel = tmp_path / "model.safetensors"
    notmodel.write_text("not a model")
    good = tmp_path / "good.txt"
    good.write_text("1 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    assert main(["predict", str(notmodel), str(good)]) != 0
    line = one_error_line(capsys.readouterr().err)
    assert "cannot load model" in line
    fold = tmp_path / "fold"
    fold.mkdir()
    assert main(["train", "--data", str(fold)]) != 0
    assert "not a LETOR fold folder" in one_error_line(capsys.readouterr().err)


def test_numerical_failure_is_one_line_and_status_1(tmp_path, capsys):
    """RankBoost on separable data: the first stump orders every pair, its exact step is
    infinite; with on_unbounded=raise the run stops with a NumericalError."""
    sep = tmp_path / "separable.txt"
    sep.write_text("1 qid:1 1:1.0 2:0.3\n0 qid:1 1:0.0 2:0.5\n1 qid:1 1:0.9 2:0.1\n"
                   "0 qid:1 1:0.1 2:0.2\n")
    rc = main(["train", "--data", str(sep), "-a", "rankboost", "--learner", "stump",
               "-p", "on_unbounded=raise", "--rounds", "3", "--quiet", "--no-tensorboard",
               "--output", str(tmp_path / "m.safetensors")])
    cap = capsys.readouterr()
    assert rc == 1, cap.err
    one_error_line(cap.err)
    assert not (tmp_path / "m.safetensors").exists()


def test_bad_input_from_the_real_entry_point(tmp_path):
    r = run_cli(["train", "--loss", "nope"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    one_error_line(r.stderr)
    assert not (tmp_path / "runs").exists()  # nothing written for a bad name


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


def test_unwritable_log_folder_and_predict_onto_a_folder_are_one_line(trained):
    tmp, train, model = trained
    err = one_line(cli(["train", "--data", train, "--rounds", 2, "-q",
                        "--logdir", train / "logs"], tmp), 2)
    assert "train.txt" in err
    err = one_line(cli(["predict", model, train, "-o", tmp], tmp), 2)
    assert "is a directory" in err


# ------------------------------------------------------------------ threads
def test_threads_option_sets_torch_threads(svm_files, tmp_path, capsys):
    before = torch.get_num_threads()
    try:
        assert main(["train", "--data", str(svm_files[0]), "--rounds", "1", "--threads", "2",
                     "--quiet", "--no-tensorboard",
                     "--output", str(tmp_path / "m.safetensors")]) == 0
        assert torch.get_num_threads() == 2
        assert main(["list", "losses"]) == 0
        assert torch.get_num_threads() == 1  # the default
        assert main(["train", "--threads", "0", "--quiet"]) == 2
        assert "--threads must be a positive integer" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)


def test_labels_beyond_the_exponential_gain_are_one_line(tmp_path, capsys):
    """A label of 1e9 under a metric-weighted loss: exit 2 and one line saying the limit,
    no model (it trained on NaN gradients before)."""
    data = tmp_path / "big.txt"
    data.write_text("1000000000 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.2 2:0.3\n"
                    "2 qid:2 1:0.1 2:0.9\n0 qid:2 1:0.7 2:0.4\n")
    out = tmp_path / "m.safetensors"
    for loss in ("lambdaloss", "lambdarank_exp"):
        rc = main(["train", "--data", str(data), "--loss", loss, "--rounds", "2", "--quiet",
                   "--no-tensorboard", "--output", str(out)])
        line = one_error_line(capsys.readouterr().err)
        assert rc == 2 and "labels must be at most 64" in line, line
        assert not out.exists()
