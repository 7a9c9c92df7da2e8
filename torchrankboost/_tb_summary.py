"""What :mod:`torchrankboost.tensorboard` writes beyond plain scalars: the tag layout and the
tag descriptions, the HParams session records (written directly as TensorBoard's hparams
plugin protos, so that booleans stay booleans; the columns are written once per log folder
by :mod:`torchrankboost._tb_experiment`) and
the ROC / precision-recall figure (drawn with Pillow, which ``SummaryWriter.add_image``
needs anyway; matplotlib is not used).
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from . import registry
from .params import describe, format_params

# ------------------------------------------------------------------------------ layout
#: the curves that matter: validation metrics, the normalised training loss, the step size,
#: the time per round (the first card group of TensorBoard's Time Series tab, which orders
#: groups by name: ``metrics`` < ``round`` < ``scores`` < ``summary`` < ``weak_model``)
MAIN = "metrics"
#: per-round diagnostics (gradient and curvature norms, line-search evaluations, timings...)
DIAG = "round"
#: final values (the HParams metrics), the text summary, the ROC / PR figure
SUMMARY = "summary"

#: the first hyper-parameter columns of a log folder's experiment definition (in this
#: order; :mod:`torchrankboost._tb_experiment` adds every other column the library knows)
STANDARD_HPARAMS = ("algorithm", "loss", "learner", "learner.max_leaves", "learning_rate",
                    "n_rounds", "seed", "data")
#: the columns TensorBoard's HParams table shows without a click (it shows five: those
#: marked ``differs``, in name order; the others are one click away in its left panel);
#: ``data`` among them, so that runs on different data are told apart at a glance
SHOWN_HPARAMS = ("algorithm", "data", "learner", "learning_rate", "loss")
#: settings of the machinery rather than of the model: not HParams columns
INTERNAL_PARAMS = frozenset({
    "callbacks", "step", "curvature", "device", "base_score", "eval_train",
    "exact_hess_max_n", "hess_floor", "line_search_tol", "line_search_order",
    "max_step_ratio", "verbose", "track_margin", "on_unbounded", "n_threads"})
#: metrics every run declares as HParams metric columns, for each split (``summary/<split>/
#: <metric>``), so that every run's NDCG@k / MAP / AUC columns appear whichever run
#: TensorBoard reads the declaration from
STANDARD_METRICS = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "auc", "pair_error")
SPLITS = ("test", "valid", "train")
#: other final values declared as metric columns
RUN_METRICS = ("rounds_used", "best_round", "seconds")

_METRIC_WORDS = {
    "ndcg": "normalised discounted cumulative gain (mean over queries; higher is better)",
    "map": "mean average precision over queries (higher is better)",
    "auc": "area under the ROC curve (mean over queries; higher is better)",
    "pair_error": "fraction of misordered pairs (lower is better)",
    "pos_above_neg": "fraction of correctly ordered relevant/irrelevant pairs",
    "loss": "the training objective on this set (a sum over its queries; lower is better)",
    "precision": "precision at k (higher is better)",
}


def describe_tag(tag: str) -> str:
    """A one-line description of a tag (shown by TensorBoard next to the chart)."""
    parts = tag.split("/")
    last = parts[-1]
    if tag.endswith("loss_per_query"):
        return ("training objective divided by the number of training queries (comparable "
                "across data sizes; lower is better)")
    if tag.endswith("step_size"):
        return "step size α of the round (line search / closed form), before the learning rate"
    if tag.endswith("seconds_per_round"):
        return "wall time of the round in seconds (weak learner, step, evaluation)"
    if tag.startswith(f"{DIAG}/seconds"):
        return f"time spent in the round's {last[len('seconds_'):] or 'whole'} step, seconds"
    if tag.startswith(f"{DIAG}/"):
        return f"per-round diagnostic {last!r} reported by the algorithm"
    if tag.startswith(f"{SUMMARY}/") and last in RUN_METRICS:
        return {"rounds_used": "rounds in the saved model",
                "best_round": "round with the best validation score",
                "seconds": "training time, seconds"}[last]
    base = last.split("@")[0]
    what = _METRIC_WORDS.get(base)
    if what is None:
        return ""
    where = parts[-2] if len(parts) >= 2 else ""
    k = f" at {last.split('@')[1]}" if "@" in last else ""
    final = "final model: " if tag.startswith(f"{SUMMARY}/") else ""
    return f"{final}{base}{k} on the {where} set — {what}"


def metric_tag(split: str, name: str) -> str:
    """``summary/<split>/<metric>``: the tag of a final value (an HParams metric)."""
    return f"{SUMMARY}/{split}/{name}"


def declared_metrics(extra: Sequence[str] = ()) -> List[str]:
    """The metric tags every run declares, then ``extra`` (this run's others)."""
    out = [metric_tag(s, m) for s in SPLITS for m in STANDARD_METRICS]
    out += [f"{SUMMARY}/{m}" for m in RUN_METRICS]
    out += [t for t in extra if t not in out]
    return out


# ------------------------------------------------------------------------------ hparams
#: settings always shown as their own column when the component has them
_MAIN_SETTINGS = {"learner": ("max_leaves",), "loss": ("p",)}


def component_setting(value, name: str):
    """The setting ``name`` of a component description (``{"type", "params"}``), or
    ``None``."""
    if isinstance(value, dict):
        return (value.get("params") or {}).get(name)
    return None


def _registry_defaults(kind: str, class_name: str):
    """``(registered name, its default parameters)`` of a component class (``(None, {})``
    when the class is not registered under ``kind``)."""
    for e in sorted(registry.entries(kind), key=lambda e: bool(e.defaults)):
        if e.target.rpartition(":")[2] == class_name:
            return e.name, e.create().get_params()
    return None, {}


def _differs(value, default) -> bool:
    if isinstance(value, float) and isinstance(default, numbers.Real) and \
            not isinstance(default, bool):
        return not math.isclose(float(default), value)
    return value != default


def component_hparams(kind: str, value) -> Dict[str, Any]:
    """``{kind: name, "<kind>.<setting>": value, ...}`` for a loss or weak learner given as
    an object, its description ``{"type": ..., "params": {...}}`` (its ``get_params``, as
    :class:`~torchrankboost.contract.FitInfo` carries it) or a name: the registered name,
    the main settings (a tree's ``max_leaves``) and the settings that differ from the
    registered defaults, as separate columns (a nested component as one line of text)."""
    if value is None:
        return {}
    if not isinstance(value, (str, dict)):
        value = describe(value)
    if isinstance(value, str) or "type" not in value:
        return {kind: value if isinstance(value, str) else str(value)}
    name, defaults = _registry_defaults(kind, value["type"])
    out: Dict[str, Any] = {kind: name or value["type"]}
    for k, v in (value.get("params") or {}).items():
        if v is None:
            continue
        if k in _MAIN_SETTINGS.get(kind, ()) or (k in defaults and _differs(v, defaults[k])):
            out[f"{kind}.{k}"] = format_params(v) if isinstance(v, dict) else v
    return out


def clean_hparams(hp: Mapping[str, Any]) -> Dict[str, Any]:
    """Values TensorBoard can show: bool, str, int/float; ``None`` dropped; other objects as
    their ``str``."""
    clean: Dict[str, Any] = {}
    for k, v in hp.items():
        if v is None:
            continue
        if isinstance(v, (bool, str)):
            clean[k] = v
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            clean[k] = float(v) if not isinstance(v, numbers.Integral) else int(v)
        else:
            clean[k] = str(v)
    return clean


def hparams_plugin_summary(tag: str, data):
    """A summary carrying hparams plugin data (``HParamsPluginData``) under ``tag``."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import metadata

    data.version = metadata.PLUGIN_DATA_VERSION
    md = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString()))
    return Summary(value=[Summary.Value(tag=tag, metadata=md)])


def hparam_value(v):
    """A cleaned hyper-parameter value (see :func:`clean_hparams`) as the
    ``google.protobuf.Value`` of a session: a bool stays a bool (unlike
    ``torch.utils.tensorboard.summary.hparams``), numbers are float64."""
    from google.protobuf import struct_pb2

    if isinstance(v, bool):
        return struct_pb2.Value(bool_value=v)
    if isinstance(v, (int, float)):
        return struct_pb2.Value(number_value=float(v))
    return struct_pb2.Value(string_value=str(v))


def session_summaries(hparams: Mapping[str, Any], *, group_name: str = ""):
    """The session summaries of one run (session start with its hyper-parameter values,
    session end): what a run writes into its own folder. The columns (the experiment) are
    written once per log folder (:mod:`torchrankboost._tb_experiment`)."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(group_name=group_name,
                                             start_time_secs=time.time())
    for k, v in clean_hparams(hparams).items():
        start.hparams[k].CopyFrom(hparam_value(v))
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS,
                                         end_time_secs=time.time())
    return (hparams_plugin_summary(metadata.SESSION_START_INFO_TAG,
                                   plugin_data_pb2.HParamsPluginData(session_start_info=start)),
            hparams_plugin_summary(metadata.SESSION_END_INFO_TAG,
                                   plugin_data_pb2.HParamsPluginData(session_end_info=end)))


def scalar_summary(tag: str, value: float, description: str = ""):
    """A scalar summary carrying the scalars plugin metadata and ``description``."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata

    md = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"),
                         summary_description=description)
    return Summary(value=[Summary.Value(tag=tag, simple_value=float(value), metadata=md)])


def markdown_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """``{split: {metric: value}}`` as a markdown table (TensorBoard's Text tab renders it)."""
    cols: List[str] = []
    for r in rows.values():
        cols += [c for c in r if c not in cols]
    if not cols:
        return ""
    lines = ["| split | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for split, r in rows.items():
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append("" if v is None else "nan" if isinstance(v, float) and math.isnan(v)
                         else f"{v:.4f}" if isinstance(v, float) else str(v))
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ figure
def to_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def roc_curve_points(labels, scores, *, relevance_threshold: float = 0.0):
    """ROC points ``(fpr, tpr)`` (numpy, float64) of ``scores`` for ``labels > threshold``.

    Tied scores form one step (a diagonal segment), as in scikit-learn's ``roc_curve``.
    Returns ``None`` when one of the two classes is empty.
    """
    y = to_numpy(labels).ravel() > relevance_threshold
    s = to_numpy(scores).ravel()
    npos, nneg = int(y.sum()), int((~y).sum())
    if npos == 0 or nneg == 0:
        return None
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # last index of each tie block
    tp = np.cumsum(y)[last]
    fp = np.cumsum(~y)[last]
    tpr = np.r_[0.0, tp / npos]
    fpr = np.r_[0.0, fp / nneg]
    return fpr, tpr


def pr_curve_points(y: np.ndarray, s: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray,
                                                                  float]]:
    """Precision-recall points (tie blocks as one step) and the average precision."""
    y = np.asarray(y, bool).ravel()
    s = np.asarray(s, np.float64).ravel()
    npos = int(y.sum())
    if npos == 0 or npos == y.size:
        return None
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]
    tp = np.cumsum(y)[last].astype(np.float64)
    k = (last + 1).astype(np.float64)
    recall = np.r_[0.0, tp / npos]
    precision = np.r_[1.0, tp / k]
    ap = float(np.sum(np.diff(recall) * precision[1:]))
    return recall, precision, ap


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # pragma: no cover - Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


def _panel(draw, box, xs, ys, *, title: str, xlabel: str, ylabel: str, diagonal: bool,
           fonts):
    """One chart: frame, ticks at 0, 0.25, ..., 1 with labels, grid, axis labels, title."""
    x0, y0, x1, y1 = box
    small, big = fonts
    grid, axis, curve = (225, 225, 225), (60, 60, 60), (31, 90, 200)

    def px(x, y):
        return x0 + x * (x1 - x0), y1 - y * (y1 - y0)

    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx, _ = px(t, 0)
        _, gy = px(0, t)
        draw.line([(gx, y0), (gx, y1)], fill=grid)
        draw.line([(x0, gy), (x1, gy)], fill=grid)
        lab = f"{t:g}"
        draw.text((gx, y1 + 4), lab, fill=axis, font=small, anchor="mt")
        draw.text((x0 - 5, gy), lab, fill=axis, font=small, anchor="rm")
    if diagonal:
        draw.line([px(0, 0), px(1, 1)], fill=(170, 170, 170))
    draw.rectangle([x0, y0, x1, y1], outline=axis)
    pts = [px(float(a), float(b)) for a, b in zip(xs, ys)]
    if len(pts) >= 2:
        draw.line(pts, fill=curve, width=3)
    draw.text(((x0 + x1) / 2, y1 + 24), xlabel, fill=axis, font=small, anchor="mt")
    draw.text(((x0 + x1) / 2, y0 - 10), title, fill=(0, 0, 0), font=big, anchor="md")
    # the y label, written vertically
    from PIL import Image, ImageDraw

    w = int(draw.textlength(ylabel, font=small)) + 4
    lab = Image.new("RGB", (w, 18), "white")
    ImageDraw.Draw(lab).text((2, 1), ylabel, fill=axis, font=small)
    lab = lab.rotate(90, expand=True)
    return lab, (int(x0 - 58), int((y0 + y1) / 2 - lab.size[1] / 2))


def render_curves_figure(y, s, *, title: str = "") -> Optional[np.ndarray]:
    """An ``(H, W, 3)`` uint8 figure: the ROC curve with its AUC and the precision-recall
    curve with its average precision, axes, ticks and labels (pooled over all documents;
    ``y`` boolean relevance). ``None`` when a class is empty."""
    from PIL import Image, ImageDraw

    y = np.asarray(y, bool).ravel()
    s = np.asarray(s, np.float64).ravel()
    roc = roc_curve_points(y.astype(np.float64), s, relevance_threshold=0.5)
    pr = pr_curve_points(y, s)
    if roc is None or pr is None:
        return None
    fpr, tpr = roc
    auc = float(np.trapz(tpr, fpr)) if hasattr(np, "trapz") else float(np.trapezoid(tpr, fpr))
    W, H, side = 900, 470, 340
    img = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(img)
    fonts = (_font(14), _font(17))
    top = 70
    boxes = [(90, top, 90 + side, top + side), (540, top, 540 + side, top + side)]
    labels = []
    labels.append(_panel(draw, boxes[0], fpr, tpr, title=f"ROC  (AUC {auc:.4f})",
                         xlabel="false positive rate", ylabel="true positive rate",
                         diagonal=True, fonts=fonts))
    rec, prec, ap = pr
    labels.append(_panel(draw, boxes[1], rec, prec,
                         title=f"precision-recall  (AP {ap:.4f})", xlabel="recall",
                         ylabel="precision", diagonal=False, fonts=fonts))
    for lab, at in labels:
        img.paste(lab, at)
    npos = int(y.sum())
    head = title + (":  " if title else "") + (f"{y.size} documents, {npos} relevant "
                                                 f"(pooled over queries)")
    draw.text((W / 2, 14), head, fill=(0, 0, 0), font=fonts[0], anchor="mt")
    return np.asarray(img, dtype=np.uint8)
