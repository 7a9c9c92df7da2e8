"""Smoke tests of scripts/train_neural.py: an MLP trained with each loss through the ragged
query batches, logged to TensorBoard; improves NDCG@10 over its untrained start."""

import importlib.util
from pathlib import Path

import pytest
import torch

from torchrankboost import registry

from conftest import require_data

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_neural", ROOT / "scripts" / "train_neural.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("loss", registry.names("loss"))
def test_every_loss_trains_on_synthetic_data(script, loss, tmp_path, capsys):
    res = script.main(["--data", "synthetic", "--synthetic-queries", "80", "--epochs", "3",
                       "--loss", loss, "--lr", "3e-3", "--quiet", "--logdir",
                       str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert f"loss {loss}: test NDCG@10 before" in out
    assert res["after"] > res["before"], res
    assert res["steps"] > 0


def test_events_written_and_readable(script, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    script.main(["--data", "synthetic", "--synthetic-queries", "40", "--epochs", "2",
                 "--loss", "pnorm_push", "--loss-param", "p=2", "--quiet",
                 "--logdir", str(tmp_path / "run")])
    ea = EventAccumulator(str(tmp_path / "run"), size_guidance={"scalars": 0, "histograms": 0})
    ea.Reload()
    tags = ea.Tags()
    assert {"train/loss", "train/grad_norm", "valid/ndcg@10", "test/ndcg@10",
            "final/test/ndcg@10"} <= set(tags["scalars"])
    assert {"valid/scores", "test/scores"} <= set(tags["histograms"])
    assert "_hparams_/session_start_info" in ea.PluginTagToContent("hparams")


def test_mq2008_fold1_improves(script, capsys):
    fold = require_data("mq2008", "Fold1")
    res = script.main(["--data", str(fold), "--loss", "exponential", "--epochs", "2",
                       "--no-tensorboard", "--quiet"])
    assert res["after"] > res["before"] + 0.05, res


def test_bad_loss_name_is_one_line(script, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(["--data", "synthetic", "--loss", "nope"])
    assert "unknown loss 'nope'; valid choices" in str(exc.value.code)
