"""The ``train`` command (:mod:`torchrankboost.cli.train`): the README's first command end to end,
the help texts, the flags turned into one ``TrainOptions``, and the ``--nproc`` parent that
refuses bad options before any rank starts."""

import re

import pytest

from conftest import read_events

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import ROOT, captured_one_line, data, main_quiet, run_cli


def test_readme_first_command_trains_prints_metrics_and_writes_events(tmp_path):
    readme = (ROOT / "README.md").read_text()
    first = [l for l in readme.splitlines() if "pip install -e . " in l or "pip install -e . &&" in l]
    assert first and first[0].rstrip().endswith("torchrankboost train"), \
        "README's first command must end with `torchrankboost train`"
    r = run_cli(["train"], cwd=tmp_path, timeout=300, console_script=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert re.search(r"^test\s+\d\.\d{4}", out, re.M), out  # the final metric table
    assert "auc" in out and "tensorboard --logdir runs" in out
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1 and runs[0].name.startswith("wdbc-exponential-")
    # the HParams columns: the log folder's definition in the run, no run "." of its own
    assert not [p for p in (tmp_path / "runs").iterdir() if "tfevents" in p.name]
    assert (runs[0] / "model.safetensors").is_file()
    ea = read_events(runs[0])
    assert "_hparams_/experiment" in ea.PluginTagToContent("hparams")
    tags = ea.Tags()
    # the curves that matter under metrics/ (normalised loss, no duplicate of it elsewhere)
    assert {"metrics/loss_per_query", "train/auc", "metrics/valid/auc",
            "metrics/valid/ndcg@10", "metrics/valid/map", "metrics/valid/pair_error",
            "metrics/step_size", "metrics/seconds_per_round", "round/valid_loss",
            "round/grad_norm", "round/curvature_norm",
            "summary/test/auc"} <= set(tags["scalars"])
    assert not {"round/loss", "train/loss", "round/learning_rate"} & set(tags["scalars"])
    assert {"weak_model/leaf_value", "scores/test"} <= set(tags["histograms"])
    assert "weak_model/left_child" not in tags["histograms"]
    assert "summary/test_pr_curve" in tags["tensors"]
    assert "summary/test_roc_pr" in tags["images"]
    assert "summary/final_metrics/text_summary" in tags["tensors"]
    assert "_hparams_/session_start_info" in ea.PluginTagToContent("hparams")


def test_train_help_texts(tmp_path):
    r = run_cli(["train", "--help"], cwd=tmp_path)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "<logdir>/model.safetensors" in text
    assert "--threads N" in text and "default 1" in text
    assert "--normalize" in text and "per-query" in text


def test_run_name_is_refused_before_several_processes_are_launched(tmp_path, data, monkeypatch,
                                                                   capsys):
    from torchrankboost.cli import train as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "relaunch", lambda *a: pytest.fail("relaunched"))
    assert main_quiet(["train", "--data", data, "--nproc", 2, "--name", "../x"]) == 2
    assert "--name" in captured_one_line(capsys) and not (tmp_path.parent / "x").exists()
