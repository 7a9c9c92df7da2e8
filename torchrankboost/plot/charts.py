"""Feature importance and metric curves, drawn with matplotlib.

A fit's curves are read into one form, ``{set: {metric: (rounds, values)}}``
(:func:`metric_curves`), from whatever holds them: an ``evals_result_`` dict (``{set:
{metric: [value per round]}}``), a fitted algorithm or ``BoostedRanker`` (its
``evals_result_``), an ``Ensemble`` that kept its fit's (``model.evals_result``, saved in
the model file), a ``history_`` (one ``RoundRecord`` per round), a model file, or a run
folder of TensorBoard events (``metrics/<set>/<metric>``, ``train/<metric>`` and
``metrics/loss_per_query``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["require_matplotlib", "importances", "metric_curves", "plot_importance",
           "plot_metric", "plot_metrics"]

Curves = Dict[str, Dict[str, Tuple[List[float], List[float]]]]

#: what to install when matplotlib is missing (one line)
MISSING = ("plotting needs matplotlib: pip install 'torchrankboost[plots]' "
           "(or pip install matplotlib)")


def require_matplotlib() -> Any:
    """The ``matplotlib`` module, or an ``ImportError`` saying what to install."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(MISSING) from None
    return matplotlib


def axes_or_new(ax, figsize=(6.4, 4.0)):
    """``ax``, or the axes of a new pyplot figure."""
    if ax is not None:
        return ax
    require_matplotlib()
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=figsize)[1]


def fitted_model(model):
    """The fitted model behind ``model``: a model file loaded, a fitted algorithm's or
    estimator's ``model_``."""
    if isinstance(model, (str, os.PathLike)):
        from ..factory import load_model

        return load_model(model)
    return getattr(model, "model_", model)


# ---------------------------------------------------------------------------- importance
def importances(model: Any, importance_type: str = "gain") -> np.ndarray:
    """``(F,)`` float64: the total split gain of each feature (``"gain"``) or its number of
    splits (``"split"``) over the model's rounds; ``|weight|`` for a linear model."""
    kinds = {"gain": "gain", "split": "count"}
    if importance_type not in kinds:
        raise ValueError(f"importance_type must be 'gain' or 'split', got {importance_type!r}")
    m = fitted_model(model)
    if not callable(getattr(m, "feature_importance", None)):
        raise ValueError(f"a {type(m).__name__} has no feature importance (a fitted "
                         f"ensemble or linear model has)")
    return np.asarray(m.feature_importance(kinds[importance_type]).cpu(), dtype=np.float64)


def plot_importance(model: Any, *, importance_type: str = "gain", max_features: Optional[int] = 20,
                    feature_names: Optional[Sequence[str]] = None, ax: Any = None) -> Any:
    """Horizontal bars of the features' importance, largest at the top.

    Args:
        model: a fitted ``Ensemble`` or ``LinearRanker``, a fitted algorithm or
            ``BoostedRanker``, or a model file.
        importance_type: ``"gain"`` (total split gain, LightGBM's ``importance_type=
            "gain"``) or ``"split"`` (number of splits).
        max_features: the largest this many (``None``: all); features of importance 0 are
            left out.
        feature_names: one name per feature (default ``f0``, ``f1``, ...: the column
            index).
        ax: matplotlib axes to draw on (default: a new figure's).

    Returns:
        The axes.
    """
    imp = importances(model, importance_type)
    if feature_names is not None and len(feature_names) != imp.shape[0]:
        raise ValueError(f"feature_names has {len(feature_names)} names, the model "
                         f"{imp.shape[0]} features")
    names = list(feature_names) if feature_names is not None else \
        [f"f{j}" for j in range(imp.shape[0])]
    order = [int(j) for j in np.argsort(-imp, kind="stable") if imp[j] > 0]
    if max_features is not None:
        order = order[:max_features]
    ax = axes_or_new(ax, figsize=(6.4, max(2.0, 0.3 * len(order) + 1.0)))
    y = np.arange(len(order))[::-1]
    ax.barh(y, imp[order], color="#1f5ac8")
    ax.set_yticks(y)
    ax.set_yticklabels([names[j] for j in order])
    ax.set_xlabel("total split gain" if importance_type == "gain" else "number of splits")
    ax.set_title("feature importance")
    if not order:
        ax.text(0.5, 0.5, "no feature is used", ha="center", va="center",
                transform=ax.transAxes)
    return ax


# ---------------------------------------------------------------------------- curves
def _from_events(folder: Path) -> Curves:
    """The curves of a run folder's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    ea.Reload()
    out: Curves = {}
    for tag in ea.Tags().get("scalars", []):
        parts = tag.split("/")
        if parts[0] == "metrics" and len(parts) == 3:
            split, name = parts[1], parts[2]
        elif parts[0] == "train" and len(parts) == 2:
            split, name = "train", parts[1]
        elif tag == "metrics/loss_per_query":
            split, name = "train", "loss_per_query"
        else:
            continue
        events = ea.Scalars(tag)
        out.setdefault(split, {})[name] = ([float(e.step) for e in events],
                                           [float(e.value) for e in events])
    if not out:
        raise ValueError(f"{folder}: no metric curves in its TensorBoard events (a run "
                         f"folder of torchrankboost train holds metrics/<set>/<metric>)")
    return out


def _from_history(history: Sequence[Any]) -> Curves:
    out: Curves = {}
    for rec in history:
        for split, vals in (getattr(rec, "metrics", None) or {}).items():
            for name, v in vals.items():
                xs, ys = out.setdefault(split, {}).setdefault(name, ([], []))
                xs.append(float(rec.round))
                ys.append(float(v))
    return out


def metric_curves(source: Any) -> Curves:
    """``{set: {metric: (rounds, values)}}`` of a fit (see the module docstring for what
    ``source`` may be). ``ValueError`` when it holds no curves."""
    if isinstance(source, dict) and all(
            isinstance(c, tuple) and len(c) == 2 for per in source.values()
            if isinstance(per, dict) for c in per.values()) and source:
        return source  # already curves
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            return _from_events(path)
        source = fitted_model(path)
    if isinstance(source, (list, tuple)):
        curves = _from_history(source)
    else:
        result = source if isinstance(source, dict) else \
            getattr(source, "evals_result_", None) or getattr(source, "evals_result", None)
        if callable(result):
            result = result()
        curves = {split: {name: ([float(i + 1) for i in range(len(vals))],
                                 [float(v) for v in vals]) for name, vals in per.items()}
                  for split, per in (result or {}).items()}
    curves = {s: {m: c for m, c in per.items() if c[0]} for s, per in curves.items()}
    curves = {s: per for s, per in curves.items() if per}
    if not curves:
        raise ValueError(f"{type(source).__name__}: no metric curves (fit with an eval_set, "
                         f"or give the run folder)")
    return curves


def plot_metric(source: Any, metric: Optional[str] = None, *, sets: Optional[Sequence[str]] = None,
                ax: Any = None) -> Any:
    """One metric per round, a line per data set.

    Args:
        source: a fit's curves (see :func:`metric_curves`).
        metric: the metric (default: the first one of the first set, e.g. ``ndcg@10``).
        sets: the data sets to draw (default: every set that has ``metric``).
        ax: matplotlib axes to draw on (default: a new figure's).

    Returns:
        The axes.
    """
    curves = metric_curves(source)
    if metric is None:
        metric = next(iter(next(iter(curves.values()))))
    chosen = [s for s in (sets or curves) if metric in curves.get(s, {})]
    if not chosen:
        have = sorted({m for per in curves.values() for m in per})
        raise ValueError(f"no curve of {metric!r}; the curves are: {', '.join(have)}")
    ax = axes_or_new(ax)
    for split in chosen:
        xs, ys = curves[split][metric]
        ax.plot(xs, ys, label=split)
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(metric)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


def plot_metrics(source: Any, *, figure: Any = None) -> Any:
    """Every metric of a fit, one panel each (a line per data set); returns the figure
    (a new pyplot figure when ``figure`` is ``None``)."""
    curves = metric_curves(source)
    names = list(dict.fromkeys(m for per in curves.values() for m in per))
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    if figure is None:
        require_matplotlib()
        import matplotlib.pyplot as plt

        figure = plt.figure(figsize=(4.8 * cols, 3.4 * rows))
    else:
        figure.set_size_inches(4.8 * cols, 3.4 * rows)
    for i, name in enumerate(names):
        plot_metric(curves, name, ax=figure.add_subplot(rows, cols, i + 1))
    figure.tight_layout()
    return figure
