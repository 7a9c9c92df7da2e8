"""The tag layout of a run's event files and the one-line description of every tag.

TensorBoard's Time Series tab orders card groups by name, so the curves that matter go first:
``metrics/`` (validation metrics, the training loss per query, the step size, the time per
round), ``round/`` (the algorithm's per-round diagnostics), ``scores/`` and ``weak_model/``
(histograms), ``summary/`` (final values, the text summary, the ROC / PR figure).
:func:`round_tag` maps a round record's flat keys (:func:`record_items`) to these tags;
:func:`describe_tag` gives the tooltip of each; :func:`scalar_summary` writes a scalar with
its description.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..contract import RoundRecord

__all__ = ["MAIN", "DIAG", "SUMMARY", "SPLITS", "STANDARD_METRICS", "RUN_METRICS",
           "describe_tag", "metric_tag", "declared_metrics", "scalar_summary",
           "markdown_table", "flatten", "round_tag", "record_items"]

#: the curves that matter: validation metrics, the normalised training loss, the step size,
#: the time per round (the first card group of TensorBoard's Time Series tab, which orders
#: groups by name: ``metrics`` < ``round`` < ``scores`` < ``summary`` < ``weak_model``)
MAIN = "metrics"
#: per-round diagnostics (gradient and curvature norms, line-search evaluations, timings...)
DIAG = "round"
#: final values (the HParams metrics), the text summary, the ROC / PR figure
SUMMARY = "summary"

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
    """The metric tags every run declares, then ``extra`` (this run's others): split by
    split (test, valid, train), NDCG@10 first in each, so that TensorBoard's HParams table
    shows test NDCG@10 right after the hyper-parameters."""
    first = ("ndcg@10",) + tuple(m for m in STANDARD_METRICS if m != "ndcg@10")
    out = [metric_tag(s, m) for s in SPLITS for m in first]
    out += [f"{SUMMARY}/{m}" for m in RUN_METRICS]
    for t in extra:
        if t not in out:
            out.append(t)
    return out


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


def flatten(d: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Nested dicts as one level of ``a/b`` keys."""
    out: Dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


# identifiers and flags, not quantities worth a plot; ``loss_before`` and ``best_score``
# repeat other curves; ``learning_rate`` is a hyper-parameter
_SKIP_KEYS = {"round", "curvature_kind", "line_search/status", "candidate", "feature",
              "threshold", "threshold_index", "constant", "complemented", "phase",
              "closed_form", "greedy", "new_ranker", "best_round", "best_score",
              "loss_before", "learning_rate", "loss", "alpha", "alpha_signed"}


def round_tag(key: str, *, single_valid: bool = True) -> Optional[str]:
    """TensorBoard tag of a flattened round-record key (``None``: not logged).

    The curves that matter go to ``metrics/``: ``metrics/train/loss`` →
    ``metrics/train/loss`` (written as ``metrics/loss_per_query`` by the logger); other
    training metrics → ``train/<metric>``; ``metrics/valid_0/ndcg@10``
    → ``metrics/valid/ndcg@10`` (``valid_0`` keeps its name when there are several
    evaluation sets); ``step`` → ``metrics/step_size``; ``seconds`` →
    ``metrics/seconds_per_round``. The loss on an evaluation set (a sum over its queries)
    and every other scalar are diagnostics: ``round/<key>`` (``/`` in a nested key becomes
    ``_``: ``line_search/n_evals`` → ``round/line_search_n_evals``); ``learner/...``
    (weak model summaries) → ``weak_model/...``.
    """
    if key in _SKIP_KEYS:
        return None
    if key.startswith("metrics/"):
        rest = key[len("metrics/"):]
        head, _, tail = rest.partition("/")
        if single_valid and head == "valid_0":
            head = "valid"
        if not tail:
            return f"{MAIN}/train/{head}"
        if tail == "loss" and head != "train":
            return f"{DIAG}/{head}_loss"
        if head == "train" and tail != "loss":  # eval_train: below the validation curves
            return f"train/{tail}"
        return f"{MAIN}/{head}/{tail}"
    if key == "step":
        return f"{MAIN}/step_size"
    if key == "seconds":
        return f"{MAIN}/seconds_per_round"
    if key.startswith("learner/"):
        return "weak_model/" + key[len("learner/"):]
    return f"{DIAG}/{key.replace('/', '_')}"


def record_items(record: RoundRecord) -> Dict[str, Any]:
    """A round record as flat ``a/b`` keys: ``step``, ``weight``, ``seconds``,
    ``metrics/<set>/<metric>`` and every ``extra`` entry (nested dicts flattened; ``None``
    values left out; ``extra`` never overrides a field). The training loss is
    ``metrics/train/loss`` (the monitor puts it there)."""
    d: Dict[str, Any] = dict(record.extra)
    d.update({"step": record.step, "weight": record.weight, "seconds": record.seconds,
              "metrics": record.metrics})
    if record.loss is not None and "loss" not in record.metrics.get("train", {}):
        d["metrics"] = {**record.metrics,
                        "train": {**record.metrics.get("train", {}), "loss": record.loss}}
    return {k: v for k, v in flatten(d).items() if v is not None}
