"""TensorBoardLogger (read back with TensorBoard's event reader), ROC helpers, progress."""

import io

import numpy as np
import pytest
import torch

from torchrankboost import PNormPushLoss, RegressionTree
from torchrankboost.contract import FitInfo, RoundRecord
from torchrankboost.params import describe
from torchrankboost.tensorboard import (TensorBoardLogger, default_logdir, render_roc_image,
                                        roc_curve_points)
from torchrankboost.progress import ProgressCallback

from conftest import read_events

pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _hparams(ea, folder):
    """(experiment, session start info) of a run, read back as the hparams plugin's protos:
    the experiment from the log folder ``folder`` above the run, the session from the run."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    hp = ea.PluginTagToContent("hparams")
    assert "_hparams_/experiment" not in hp  # one definition per log folder, not per run
    root = read_events(folder).PluginTagToContent("hparams")
    exp = plugin_data_pb2.HParamsPluginData.FromString(root["_hparams_/experiment"]).experiment
    start = plugin_data_pb2.HParamsPluginData.FromString(
        hp["_hparams_/session_start_info"]).session_start_info
    return exp, start


def test_explicit_api_writes_scalars_histograms_hparams_curves(tmp_path):
    with TensorBoardLogger(tmp_path / "run", hparams={"learning_rate": 0.1, "loss": "exponential",
                                                      "obj": object(), "none": None,
                                                      "flag": True}) as lg:
        for step in range(5):
            lg.log_step(step, {"metrics/loss_per_query": torch.tensor(1.0 / (step + 1)),
                               "metrics": {"valid": {"ndcg@10": 0.5 + 0.01 * step}},
                               "skipped/nan": float("nan"), "skipped/vector": torch.ones(3)})
        lg.log_histograms(4, {"scores/test": torch.randn(100), "scalar_is_ignored": 1.0})
        lg.log_curves(4, torch.tensor([0, 2, 1, 0, 0, 1.0]),
                      torch.tensor([0.1, 3.0, 0.5, 0.2, 0.7, 0.4]), tag="test")
        lg.log_hparams()
    ea = read_events(tmp_path / "run")
    tags = ea.Tags()
    assert {"metrics/loss_per_query", "metrics/valid/ndcg@10"} <= set(tags["scalars"])
    assert "skipped/nan" not in tags["scalars"] and "skipped/vector" not in tags["scalars"]
    assert [e.step for e in ea.Scalars("metrics/loss_per_query")] == [0, 1, 2, 3, 4]
    assert ea.Scalars("metrics/valid/ndcg@10")[-1].value == pytest.approx(0.54)
    # the final value, once, under summary/ (the HParams metric), and the text summary
    assert [e.value for e in ea.Scalars("summary/valid/ndcg@10")] == [pytest.approx(0.54)]
    assert "summary/final_metrics/text_summary" in tags["tensors"]
    assert "ndcg@10" in str(ea.Tensors("summary/final_metrics/text_summary")[0].tensor_proto)
    assert tags["histograms"] == ["scores/test"]
    assert "summary/test_pr_curve" in tags["tensors"]
    assert "summary/test_roc_pr" in tags["images"]
    img = ea.Images("summary/test_roc_pr")[0]
    assert img.width >= 800 and img.height >= 400  # a readable figure, not a 240 px icon
    # descriptions travel with the tags
    assert "higher is better" in ea.SummaryMetadata("metrics/valid/ndcg@10").summary_description
    assert "queries" in ea.SummaryMetadata("metrics/loss_per_query").summary_description
    exp, start = _hparams(ea, tmp_path)
    got = start.hparams
    assert got["learning_rate"].number_value == pytest.approx(0.1)
    assert got["loss"].string_value == "exponential"
    assert got["flag"].WhichOneof("kind") == "bool_value" and got["flag"].bool_value
    assert "none" not in got and "obj" in got  # None dropped, other objects stringified
    # every run declares the standard metric columns, whatever it logged
    declared = [m.name.tag for m in exp.metric_infos]
    assert {f"summary/{s}/{m}" for s in ("test", "valid", "train")
            for m in ("ndcg@1", "ndcg@5", "ndcg@10", "map", "auc")} <= set(declared)
    assert [h.name for h in exp.hparam_infos][:8] == ["algorithm", "loss", "learner",
                                                      "learner.max_leaves", "learning_rate",
                                                      "n_rounds", "seed", "data"]


def _info(n_rounds=12):
    """A FitInfo shaped like the driver's (see boosting/booster.py)."""
    return FitInfo(algorithm="boost", n_docs=50, n_queries=5, n_features=4, n_rounds=n_rounds,
                   eval_names=["valid_0"], metric_names=["auc", "ndcg@10"],
                   params={"learning_rate": 0.1, "callbacks": [1, 2],
                           "loss": describe(PNormPushLoss(2.0)),
                           "learner": describe(RegressionTree(max_leaves=15, l2=1.0)),
                           "step": "line_search", "curvature": "diag", "base_score": 0.0,
                           "seed": 0, "subsample": 1.0, "device": "cpu"})


def _record(r, scores=None):
    """A RoundRecord shaped like the driver's (see boosting/booster.py)."""
    extra = {"loss_before": 11.0 - r, "learning_rate": 0.1, "grad_norm": 2.0,
             "curvature_norm": 1.0, "curvature_kind": "diag",
             "line_search": {"status": "ok", "n_evals": 3}, "seconds_learner": 0.005,
             "learner": {"feature": 3, "leaf_values": [0.1 * r, -0.2, 0.3, 0.05]}}
    if scores is not None:
        extra["scores"] = scores
    return RoundRecord(round=r, loss=10.0 - r, step=0.5, weight=0.05,
                       metrics={"train": {"loss": 10.0 - r},
                                "valid_0": {"auc": 0.9 - 0.01 * abs(r - 4),
                                            "ndcg@10": 0.5}},
                       seconds=0.01, best_round=min(r, 4), best_score=0.9, extra=extra)


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
    assert {"metrics/loss_per_query", "metrics/valid/auc", "metrics/valid/ndcg@10",
            "metrics/step_size", "metrics/seconds_per_round", "round/grad_norm",
            "round/curvature_norm", "round/line_search_n_evals",
            "round/seconds_learner"} <= tags
    # no duplicate of the loss, no constant hyper-parameter as a curve, no flags
    assert not {"round/loss", "round/loss_before", "round/learning_rate",
                "round/best_score"} & tags
    assert not any(t.startswith("learner/") or "status" in t or "kind" in t for t in tags)
    # the loss per query: the sum over the 5 training queries divided by 5
    assert [e.value for e in ea.Scalars("metrics/loss_per_query")][:2] == \
        [pytest.approx(9.0 / 5), pytest.approx(8.0 / 5)]
    assert [e.step for e in ea.Scalars("metrics/valid/auc")] == list(range(1, 13))
    assert set(ea.Tags()["histograms"]) == {"scores/train", "weak_model/leaf_values"}
    assert sorted({e.step for e in ea.Histograms("weak_model/leaf_values")}) == [1, 5, 10, 12]
    # the final metrics are the best round's (round 4), written once under summary/
    assert [e.value for e in ea.Scalars("summary/valid/auc")] == [pytest.approx(0.9)]
    assert ea.Scalars("summary/rounds_used")[0].value == 12
    assert ea.Scalars("summary/best_round")[0].value == 4
    exp, start = _hparams(ea, tmp_path)
    got = start.hparams
    # the hyper-parameters a person tunes, as separate columns; no machinery settings
    assert got["algorithm"].string_value == "boost"
    assert got["loss"].string_value == "pnorm_push" and got["loss.p"].number_value == 2
    assert got["learner"].string_value == "tree"
    assert got["learner.max_leaves"].number_value == 15
    assert got["learner.l2"].number_value == 1.0  # differs from the default
    assert "learner.n_bins" not in got  # the default: not a column
    assert got["learning_rate"].number_value == pytest.approx(0.1)
    assert got["n_rounds"].number_value == 12
    assert not {"callbacks", "step", "curvature", "base_score", "device", "seconds"} & set(got)
    assert "summary/valid/auc" in {m.name.tag for m in exp.metric_infos}


def test_hparams_of_a_papers_algorithm_and_of_the_cli_runs(tmp_path):
    """qbrank is logged as qbrank (not the driver with its proxy loss); every run declares the
    same standard metric columns, so NDCG and AUC columns appear for every run."""
    from torchrankboost.factory import make_ranker
    from torchrankboost.data import load_data

    tr, va, te, _ = load_data("synthetic", seed=0)
    tags = {}
    for name in ("qbrank", "rankboost"):
        lg = TensorBoardLogger(tmp_path / name)
        make_ranker(name, n_rounds=3).fit(tr.X, tr.labels, tr.groups,
                                         eval_set=[(va.X, va.labels, va.groups)],
                                         eval_metric=["ndcg@10", "map"], callbacks=[lg])
        lg.close()
        ea = read_events(tmp_path / name)
        exp, start = _hparams(ea, tmp_path)
        assert start.hparams["algorithm"].string_value == name
        assert "loss" not in start.hparams
        tags[name] = [m.name.tag for m in exp.metric_infos]
        assert "summary/valid/ndcg@10" in ea.Tags()["scalars"]
    assert tags["qbrank"] == tags["rankboost"]


def test_default_logdir_is_unique(tmp_path):
    a = default_logdir("x", root=str(tmp_path))
    assert (tmp_path / a.split("/")[-1]).is_dir()  # created (claimed) by default_logdir
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
    assert "3/3" in text and "valid/auc 0.7500" in text and "train/loss" not in text


def test_progress_bar_on_a_120_column_terminal_keeps_its_bar_and_whole_names():
    out = io.StringIO()
    p = ProgressCallback(stream=out, use_tqdm=True)
    p.start(200)
    p._bar.ncols = 120
    metrics = {"metrics": {"train": {"loss": 123.456}, "valid_0": {
        "ndcg@10": 0.77, "ndcg@1": 0.6, "ndcg@5": 0.7, "map": 0.71}}}
    for r in range(200):
        p.update(r, metrics)
    p.finish()
    last = out.getvalue().split("\r")[-1].strip()
    assert len(last) <= 120, last
    assert "|################|" in last  # the bar keeps its width
    shown = last.split(", ", 1)[1].split("  ")
    known = {"train/loss", "valid/ndcg@10", "valid/ndcg@1", "valid/ndcg@5", "valid/map"}
    assert shown and all(item.rsplit(" ", 1)[0] in known for item in shown), shown


def _tensorboard_experiment(logdir):
    """``(experiment, {run: session start hparams}, runs holding an experiment)`` as
    TensorBoard itself finds them over a log folder (its multiplexer and the hparams
    plugin's own experiment lookup)."""
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import backend_context, metadata

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    content = mux.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    exp = backend_context.Context(None)._find_experiment_tag(content, include_metrics=True)
    sessions = {run: metadata.parse_session_start_info_plugin_data(
        tags[metadata.SESSION_START_INFO_TAG]).hparams
        for run, tags in content.items() if metadata.SESSION_START_INFO_TAG in tags}
    holders = [run for run, tags in content.items() if metadata.EXPERIMENT_TAG in tags]
    return exp, sessions, holders


def test_runs_of_different_algorithms_share_one_experiment_with_the_union_of_columns(tmp_path):
    """Two runs under one log folder (RankBoost with its default weak rankers, the generic
    booster with a p-norm loss) give one experiment, at the folder's root, whose columns
    hold both runs' hyper-parameters and every one the library knows; ``data`` is a column
    shown by default; RankBoost's learner is the stumps it used, not ``None``."""
    from torchrankboost.tensorboard.experiment import known_hparams
    from torchrankboost.data import load_data, slice_queries
    from torchrankboost.factory import make_ranker

    tr = slice_queries(load_data("synthetic", seed=0)[0], 0, 8)
    runs = {"rb": make_ranker("rankboost", n_rounds=2),
            "pnorm": make_ranker("boost", loss="pnorm_push", loss_params={"p": 3},
                                 learner="tree", learner_params={"max_leaves": 3},
                                 n_rounds=2)}
    for name, ranker in runs.items():
        with TensorBoardLogger(tmp_path / name, hparams={"data": f"data-{name}"}) as lg:
            ranker.fit(tr.X, tr.labels, tr.groups, callbacks=[lg])
    exp, sessions, holders = _tensorboard_experiment(tmp_path)
    assert holders == ["."]  # one definition, not one per run
    columns = {h.name for h in exp.hparam_infos}
    assert set(sessions) == {"rb", "pnorm"}
    for run, hp in sessions.items():
        assert set(hp) <= columns, (run, set(hp) - columns)
    assert set(known_hparams()) <= columns
    assert {"loss.p", "variant", "learner.max_thresholds", "learner.l2", "C"} <= columns
    assert sessions["pnorm"]["loss.p"].number_value == 3
    assert sessions["rb"]["learner"].string_value == "stump"
    assert sessions["rb"]["data"].string_value == "data-rb"
    shown = sorted(h.name for h in exp.hparam_infos if h.differs)  # TensorBoard shows 5
    assert len(shown) == 5 and "data" in shown and "algorithm" in shown


def test_experiment_definition_is_rewritten_only_when_its_columns_grow(tmp_path):
    from torchrankboost.tensorboard.experiment import (EXPERIMENT_FILE, known_hparams,
                                               read_experiment, update_experiment)

    assert update_experiment(tmp_path, {"algorithm": "boost", "data": "a"}, ["summary/x"])
    cols, metrics = read_experiment(tmp_path)
    assert list(cols)[:3] == ["algorithm", "loss", "learner"]
    assert "summary/x" in metrics and "summary/test/ndcg@10" in metrics
    # nothing new: the file is left alone
    assert not update_experiment(tmp_path, {"algorithm": "rankboost", "loss.p": 2.0})
    # a run's own column (a script's setting) and a type learnt for a None default
    assert "learner.hidden" not in known_hparams()
    assert update_experiment(tmp_path, {"learner.hidden": 64, "learner.max_depth": 4})
    cols2, metrics2 = read_experiment(tmp_path)
    assert cols2["learner.hidden"] == cols2["learner.max_depth"] == cols2["learning_rate"]
    assert set(cols) <= set(cols2) and "summary/x" in metrics2  # nothing dropped
    assert len([p for p in tmp_path.iterdir() if "tfevents" in p.name]) == 1
    (tmp_path / EXPERIMENT_FILE).write_bytes(b"not an event file")  # damaged: rewritten
    assert update_experiment(tmp_path, {}) and read_experiment(tmp_path) is not None
