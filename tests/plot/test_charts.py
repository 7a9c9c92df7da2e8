"""Feature importance and metric curves: the numbers drawn are the model's and the fit's, from
every place a fit's curves are kept; bad input is one ValueError."""

import sys

import numpy as np
import pytest
from plot_helpers import figure, run_folder  # noqa: F401  (fixture)

from torchrankboost.factory import load_model
from torchrankboost.plot import importances, metric_curves, plot_importance, plot_metric, \
    plot_metrics, require_matplotlib
from torchrankboost.contract import RoundRecord


def test_importance_bars_are_the_models_largest_first(run_folder):
    model = load_model(run_folder / "model.safetensors")
    gain = np.asarray(model.feature_importance("gain"), dtype=np.float64)
    assert np.array_equal(importances(model, "gain"), gain)
    assert np.array_equal(importances(str(run_folder / "model.safetensors"), "split"),
                          np.asarray(model.feature_importance("count"), dtype=np.float64))
    names = [f"feat{j}" for j in range(gain.shape[0])]
    ax = plot_importance(model, max_features=2, feature_names=names,
                         ax=figure().add_subplot())
    widths = [p.get_width() for p in ax.patches]
    top = np.sort(gain[gain > 0])[::-1][:2]
    assert widths == pytest.approx(list(top))
    assert [t.get_text() for t in ax.get_yticklabels()] == \
        [names[int(np.flatnonzero(gain == v)[0])] for v in top]


def test_importance_bad_input_is_one_value_error(run_folder):
    model = load_model(run_folder / "model.safetensors")
    with pytest.raises(ValueError, match="importance_type must be 'gain' or 'split'"):
        importances(model, "cover")
    with pytest.raises(ValueError, match="feature_names has 1 names"):
        plot_importance(model, feature_names=["a"], ax=figure().add_subplot())
    with pytest.raises(ValueError, match="has no feature importance"):
        importances(object())


def test_curves_from_every_place_a_fit_keeps_them(run_folder):
    result = {"train": {"ndcg@10": [0.5, 0.6]}, "valid": {"ndcg@10": [0.4, 0.45]}}
    assert metric_curves(result) == {"train": {"ndcg@10": ([1.0, 2.0], [0.5, 0.6])},
                                     "valid": {"ndcg@10": ([1.0, 2.0], [0.4, 0.45])}}
    history = [RoundRecord(round=r, weight=1.0, loss=0.0, metrics={"valid": {"map": v}})
               for r, v in ((1, 0.3), (2, 0.35))]
    assert metric_curves(history) == {"valid": {"map": ([1.0, 2.0], [0.3, 0.35])}}
    # the saved model kept its fit's curves (eval sets named valid_0, ...); the run folder's
    # events hold the same rounds under the command's set names
    from_model = metric_curves(run_folder / "model.safetensors")
    from_events = metric_curves(run_folder)
    assert sorted(from_model) == ["train", "valid_0"] and "valid" in from_events
    for split, per in from_model.items():
        for name, (xs, ys) in per.items():
            if name == "loss":  # the events hold loss_per_query
                continue
            xe, ye = from_events[split.replace("valid_0", "valid")][name]
            assert xe == xs and ye == pytest.approx(ys, rel=1e-6)
    assert "loss_per_query" in from_events["train"]


def test_no_curves_is_one_value_error(tmp_path):
    with pytest.raises(ValueError, match="no metric curves"):
        metric_curves({})
    with pytest.raises(ValueError, match="no metric curves in its TensorBoard events"):
        metric_curves(tmp_path)


def test_metric_lines_and_panels():
    result = {"train": {"ndcg@10": [0.5, 0.6], "map": [0.1, 0.2]},
              "valid": {"ndcg@10": [0.4, 0.45]}}
    ax = plot_metric(result, ax=figure().add_subplot())  # the first metric: ndcg@10
    assert [line.get_label() for line in ax.get_lines()] == ["train", "valid"]
    assert list(ax.get_lines()[1].get_ydata()) == [0.4, 0.45]
    assert ax.get_ylabel() == "ndcg@10"
    with pytest.raises(ValueError, match="no curve of 'auc'; the curves are: map, ndcg@10"):
        plot_metric(result, "auc", ax=figure().add_subplot())
    fig = plot_metrics(result, figure=figure())
    assert [a.get_title() for a in fig.axes] == ["ndcg@10", "map"]


def test_a_missing_matplotlib_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'torchrankboost\[plots\]'"):
        require_matplotlib()
