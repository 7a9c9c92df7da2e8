"""TensorBoardLogger (read back with TensorBoard's event reader): the explicit API, the
callback protocol, the run's hyper-parameters, the run folder."""

import os

import pytest
import torch

from torchrankboost.contract import RoundRecord
from torchrankboost.tensorboard import TensorBoardLogger, default_logdir

from conftest import fit_info, read_events

pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _hparams(ea, folder):
    """(experiment, session start info) of a run, read back as the hparams plugin's protos:
    both from the run (the log folder ``folder`` above it holds no event file: no phantom
    run ``.``)."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    hp = ea.PluginTagToContent("hparams")
    assert not [p for p in folder.iterdir() if "tfevents" in p.name]
    exp = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/experiment"]).experiment
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
    # readable as TensorBoard shows it: about a card's width (a wider figure is shrunk and
    # its text unreadable until "show actual image size"), both curves one above the other
    from torchrankboost.tensorboard.figures import FIGURE_WIDTH

    assert img.width == FIGURE_WIDTH <= 440 and img.height >= 2 * 300
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
    lg.on_fit_start(ranker, fit_info(12))
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


def test_histogram_every_validated(tmp_path):
    with pytest.raises(ValueError, match="histogram_every"):
        TensorBoardLogger(tmp_path / "x", histogram_every=0)


def test_runs_started_in_the_same_second_get_distinct_run_folders(tmp_path, monkeypatch):
    import threading
    from datetime import datetime as real_datetime

    import torchrankboost.tensorboard.logger as tb

    class Frozen(real_datetime):
        @classmethod
        def now(cls, tz=None):
            return real_datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(tb, "datetime", Frozen)
    out, barrier = [], threading.Barrier(8)

    def worker():
        barrier.wait()
        out.append(tb.default_logdir("same", root=str(tmp_path)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8 and all(os.path.isdir(p) for p in out)
