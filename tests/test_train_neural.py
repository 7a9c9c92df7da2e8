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
    # the boosting runs' layout: curves under metrics/, final values under summary/
    assert {"metrics/loss_per_query", "round/grad_norm", "metrics/valid/ndcg@10",
            "metrics/seconds_per_epoch", "summary/test/ndcg@10", "summary/test/map",
            "summary/valid/ndcg@10"} <= set(tags["scalars"])
    assert {"scores/valid", "scores/test"} <= set(tags["histograms"])
    from tensorboard.plugins.hparams import plugin_data_pb2

    hp = ea.PluginTagToContent("hparams")
    exp = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/experiment"]).experiment
    assert {"summary/test/ndcg@10", "summary/test/map"} <= {m.name.tag for m in
                                                            exp.metric_infos}
    start = plugin_data_pb2.HParamsPluginData.FromString(
        hp["_hparams_/session_start_info"]).session_start_info.hparams
    assert start["loss"].string_value == "pnorm_push" and start["learner"].string_value == "mlp"
    assert start["learning_rate"].number_value > 0
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
