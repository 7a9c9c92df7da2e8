"""Smoke tests of scripts/train_neural.py: an MLP trained with each loss through the ragged
query batches, logged to TensorBoard; improves NDCG@10 over its untrained start."""

import importlib.util
from pathlib import Path

import pytest
import torch

from torchrankboost import registry

from conftest import require_data

ROOT = Path(__file__).resolve().parents[2]


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
    # the log folder's columns, in the run (no event file of the log folder's own)
    assert not [p for p in tmp_path.iterdir() if "tfevents" in p.name]
    exp = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/experiment"]).experiment
    assert {"summary/test/ndcg@10", "summary/test/map",
            "summary/test/untrained_ndcg@10"} <= {m.name.tag for m in exp.metric_infos}
    assert {"learner.hidden", "weight_decay", "data"} <= {h.name for h in exp.hparam_infos}
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


def _write_letor(path, data):
    """``data`` as a LETOR file (1-based feature indices, ``qid:``)."""
    lines = []
    qid = 0
    for q, (a, b) in enumerate(zip(data.groups.offsets[:-1].tolist(),
                                   data.groups.offsets[1:].tolist())):
        for i in range(a, b):
            feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(data.X[i].tolist()))
            lines.append(f"{int(data.labels[i])} qid:{q + 1} {feats}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def saved_network(script, tmp_path_factory):
    """A tiny network trained with --normalize and saved with -o; the test split."""
    from torchrankboost.data import load_builtin

    tmp = tmp_path_factory.mktemp("net")
    res = script.main(["--data", "synthetic", "--synthetic-queries", "30", "--epochs", "1",
                       "--hidden", "8", "--loss", "pnorm_push", "--loss-param", "p=2",
                       "--normalize", "--no-tensorboard", "--quiet",
                       "-o", str(tmp / "net.safetensors")])
    test = load_builtin("synthetic", seed=0, n_queries=30, docs_per_query=20,
                        n_features=30)[2]
    _write_letor(tmp / "test.txt", test)
    return res, tmp, test


def test_saved_network_scores_a_file_exactly_as_the_trained_network(script, saved_network,
                                                                      capsys):
    res, tmp, test = saved_network
    expected = script.score(res["model"], script.normalized(test).X)
    assert script.main(["score", str(tmp / "net.safetensors"), str(tmp / "test.txt"),
                        "-o", str(tmp / "scores.txt")]) == 0
    got = torch.tensor([float(x) for x in (tmp / "scores.txt").read_text().split()])
    assert torch.equal(got, expected.to(got.dtype))
    # rebuilt as fresh objects from the file alone: the same scores
    model, meta = script.load_network(tmp / "net.safetensors")
    assert model is not res["model"]
    assert torch.equal(script.score(model, script.normalized(test).X), expected)
    assert meta["n_features"] == 30 and meta["hidden"] == 8
    assert meta["preprocessing"]["normalize"] == script.NORMALIZE
    assert meta["loss"]["name"] == "pnorm_push" and meta["loss"]["params"] == {"p": 2}
    assert meta["loss"]["description"]["type"] == "PNormPushLoss"


def test_loading_a_damaged_network_file_is_a_one_line_value_error(script, saved_network):
    from torchrankboost._modelfile import read_model_file, write_model_file

    _, tmp, _ = saved_network
    meta, tensors = read_model_file(tmp / "net.safetensors", script.NETWORK_KEY, "net")
    nan = {**tensors, "0.weight": tensors["0.weight"].clone().fill_(float("nan"))}
    cases = {"non-finite": (meta, nan),
             "shape": ({**meta, "hidden": 9}, tensors),
             "missing": (meta, {k: v for k, v in tensors.items() if k != "0.bias"}),
             "architecture": ({**meta, "architecture": "transformer"}, tensors),
             "n_features": ({**meta, "n_features": 0}, tensors)}
    for word, (m, t) in cases.items():
        bad = tmp / f"bad-{word}.safetensors"
        write_model_file(bad, t, script.NETWORK_KEY, m)
        with pytest.raises(ValueError, match=word) as exc:
            script.load_network(bad)
        assert str(bad) in str(exc.value) and "\n" not in str(exc.value)
    # the score command: one line, no traceback
    with pytest.raises(SystemExit) as exc:
        script.main(["score", str(tmp / "bad-shape.safetensors"), str(tmp / "test.txt")])
    assert "invalid model file" in str(exc.value.code) and "\n" not in str(exc.value.code)


def test_network_file_has_features_beyond_the_model_refused(script, saved_network, tmp_path):
    _, tmp, _ = saved_network
    (tmp_path / "wide.txt").write_text("1 qid:1 31:0.5\n0 qid:1 1:0.2\n")
    with pytest.raises(SystemExit) as exc:
        script.main(["score", str(tmp / "net.safetensors"), str(tmp_path / "wide.txt")])
    assert "expects 30" in str(exc.value.code)


def test_threads_quiet_flag_and_where_the_network_went(script, tmp_path, capsys):
    """``--threads N`` sets torch's threads (one by default: the script's few small
    operations stall with more on a busy machine), ``-q`` is ``--quiet``, and ``-o`` says
    where the network was saved."""
    before = torch.get_num_threads()
    try:
        out = tmp_path / "net.safetensors"
        script.main(["--data", "synthetic", "--synthetic-queries", "20", "--epochs", "1",
                     "--hidden", "4", "--no-tensorboard", "-q", "--threads", "1",
                     "-o", str(out)])
        assert torch.get_num_threads() == 1
        assert f"network saved to {out}" in capsys.readouterr().out
        assert script.build_parser().parse_args([]).threads == 1
        with pytest.raises(SystemExit, match="--threads must be >= 1"):
            script.main(["--threads", "0"])
    finally:
        torch.set_num_threads(before)
