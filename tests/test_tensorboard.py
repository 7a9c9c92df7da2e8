"""TensorBoardLogger (read back with TensorBoard's event reader), ROC helpers, progress."""

import io

import numpy as np
import pytest
import torch

from torchrankboost.contract import FitInfo, RoundRecord
from torchrankboost.tensorboard import (TensorBoardLogger, default_logdir, render_roc_image,
                                        roc_curve_points)
from torchrankboost.progress import ProgressCallback

from conftest import read_events

pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def test_explicit_api_writes_scalars_histograms_hparams_curves(tmp_path):
    with TensorBoardLogger(tmp_path / "run", hparams={"lr": 0.1, "loss": "exponential",
                                                      "obj": object(), "none": None}) as lg:
        for step in range(5):
            lg.log_step(step, {"train/loss": torch.tensor(1.0 / (step + 1)),
                               "valid": {"ndcg@10": 0.5 + 0.01 * step},
                               "skipped/nan": float("nan"), "skipped/vector": torch.ones(3)})
        lg.log_histograms(4, {"scores": torch.randn(100), "scalar_is_ignored": 1.0})
        lg.log_curves(4, torch.tensor([0, 2, 1, 0, 0, 1.0]),
                      torch.tensor([0.1, 3.0, 0.5, 0.2, 0.7, 0.4]), tag="test")
        lg.log_hparams()
    ea = read_events(tmp_path / "run")
    tags = ea.Tags()
    assert {"train/loss", "valid/ndcg@10"} <= set(tags["scalars"])
    assert "skipped/nan" not in tags["scalars"] and "skipped/vector" not in tags["scalars"]
    assert [e.step for e in ea.Scalars("train/loss")] == [0, 1, 2, 3, 4]
    assert ea.Scalars("valid/ndcg@10")[-1].value == pytest.approx(0.54)
    assert "final/valid/ndcg@10" in tags["scalars"]
    assert tags["histograms"] == ["scores"]
    assert "test/pr_curve" in tags["tensors"]
    assert "test/roc_curve" in tags["images"]
    hp = ea.PluginTagToContent("hparams")
    assert "_hparams_/experiment" in hp and "_hparams_/session_start_info" in hp
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/session_start_info"])
    got = start.session_start_info.hparams
    assert got["lr"].number_value == pytest.approx(0.1)
    assert got["loss"].string_value == "exponential"
    assert "none" not in got and "obj" in got  # None dropped, other objects stringified


def _info(n_rounds=12):
    """A FitInfo shaped like the driver's (see boosting/callbacks.py)."""
    return FitInfo(algorithm="boost", n_docs=50, n_queries=1, n_features=4, n_rounds=n_rounds,
                   eval_names=["valid_0"], metric_names=["auc", "ndcg@10"],
                   params={"learning_rate": 0.1, "loss": torch.nn.MSELoss(),
                           "callbacks": [1, 2]})


def _record(r, scores=None):
    """A RoundRecord shaped like the driver's (see boosting/callbacks.py)."""
    extra = {"loss_before": 11.0 - r, "learning_rate": 0.1, "grad_norm": 2.0,
             "curvature_norm": 1.0, "curvature_kind": "diag",
             "line_search": {"status": "ok", "n_evals": 3}, "seconds_learner": 0.005,
             "learner": {"feature": 3, "leaf_values": [0.1 * r, -0.2, 0.3, 0.05]}}
    if scores is not None:
        extra["scores"] = scores
    return RoundRecord(round=r, loss=10.0 - r, step=0.5, weight=0.05,
                       metrics={"train": {"loss": 10.0 - r},
                                "valid_0": {"auc": 0.9, "ndcg@10": 0.5}},
                       seconds=0.01, best_round=1, best_score=0.9, extra=extra)


def test_callback_protocol(tmp_path):
    lg = TensorBoardLogger(tmp_path / "cb", histogram_every=5)
    ranker = object()  # the logger reads only what the hooks give it
    lg.on_fit_start(ranker, _info(12))
    for r in range(1, 13):
        assert lg.on_round_end(ranker, _record(r, scores=torch.randn(50))) is None
    lg.on_fit_end(ranker, None)
    lg.close()
    ea = read_events(tmp_path / "cb")
    tags = set(ea.Tags()["scalars"])
    assert {"train/loss", "valid/auc", "valid/ndcg@10", "round/alpha", "round/learning_rate",
            "round/grad_norm", "round/curvature_norm", "line_search/n_evals",
            "time/seconds_per_round", "time/seconds_learner"} <= tags
    assert not any(t.startswith("learner/") or "status" in t or "kind" in t for t in tags)
    assert [e.step for e in ea.Scalars("train/loss")] == list(range(1, 13))
    assert set(ea.Tags()["histograms"]) == {"train/scores", "learner/leaf_values"}
    assert sorted({e.step for e in ea.Histograms("learner/leaf_values")}) == [1, 5, 10, 12]
    hp = ea.PluginTagToContent("hparams")
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/session_start_info"])
    names = set(start.session_start_info.hparams)
    assert {"n_rounds", "learning_rate", "loss", "algorithm"} <= names
    assert "callbacks" not in names
    assert "final/valid/auc" in tags


def test_round_tags():
    from torchrankboost.tensorboard import round_tag

    assert round_tag("metrics/valid_0/map") == "valid/map"
    assert round_tag("metrics/valid_0/map", single_valid=False) == "valid_0/map"
    assert round_tag("step") == "round/alpha"
    assert round_tag("f_skew") == "round/f_skew"
    assert round_tag("round") is None


def test_default_logdir_is_unique(tmp_path):
    a = default_logdir("x", root=str(tmp_path))
    (tmp_path / a.split("/")[-1]).mkdir()
    b = default_logdir("x", root=str(tmp_path))
    assert a != b and a.startswith(str(tmp_path)) and "x-" in b


def test_roc_points_match_sklearn():
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    s = np.round(rng.normal(size=200), 1)  # ties
    fpr, tpr = roc_curve_points(y, s)
    f2, t2, _ = roc_curve(y > 0, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, f2)
    np.testing.assert_allclose(tpr, t2)
    assert roc_curve_points(np.zeros(4), s[:4]) is None
    img = render_roc_image(fpr, tpr, size=100)
    assert img.shape == (100, 100, 3) and img.dtype == np.uint8
    assert (img != 255).any()


def test_histogram_every_validated(tmp_path):
    with pytest.raises(ValueError, match="histogram_every"):
        TensorBoardLogger(tmp_path / "x", histogram_every=0)


def test_progress_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = ProgressCallback(stream=out, every=2)
    p.on_fit_start(None, _info(5))
    for r in range(1, 6):
        p.on_round_end(None, RoundRecord(round=r, loss=1.0 / r, step=0.2,
                                         metrics={"train": {"loss": 1.0 / r},
                                                  "valid_0": {"ndcg@10": 0.3}}))
    p.on_fit_end(None, None)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 3  # rounds 2, 4 and the last
    assert lines[0].startswith("round 2/5") and "valid/ndcg@10 0.3000" in lines[0]
    assert "round/alpha" not in lines[0] and "s/round" in lines[0]


def test_progress_prints_the_last_round_of_an_early_stop():
    out = io.StringIO()
    p = ProgressCallback(stream=out, every=10, total=100)
    p.start()
    for r in range(13):
        p.update(r, {"train/loss": 1.0})
    p.finish()
    lines = out.getvalue().strip().splitlines()
    assert [l.split()[1] for l in lines] == ["10/100", "13/100"]


def test_progress_quiet_and_tqdm():
    out = io.StringIO()
    p = ProgressCallback(stream=out, quiet=True)
    p.start(3)
    for r in range(3):
        p.update(r, {"train/loss": 1.0})
    p.finish("done")
    assert out.getvalue() == ""
    out = io.StringIO()
    p = ProgressCallback(stream=out, use_tqdm=True, keys=["valid/auc"])
    p.start(3)
    for r in range(3):
        p.update(r, {"valid": {"auc": torch.tensor(0.75)}, "train/loss": 2.0})
    p.finish()
    text = out.getvalue()
    assert "3/3" in text and "valid/auc=0.7500" in text and "train/loss" not in text
