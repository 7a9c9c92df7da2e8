"""The TensorBoard logger of a run: :class:`TensorBoardLogger`, a callback of any algorithm
(the contract's ``on_fit_start`` / ``on_round_end`` / ``on_fit_end``) or a writer driven from
any training loop (``log_step``, ``log_histograms``, ``log_curves``, ``log_hparams``), and
:func:`default_logdir`, the run folder ``runs/<name>-<timestamp>`` claimed atomically. What
it writes and under which tags: :mod:`torchrankboost.tensorboard`.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from datetime import datetime
from typing import Any, Dict, Mapping, Optional

import numpy as np
from torch import Tensor

from ..contract import FitInfo, RoundRecord
from .experiment import update_experiment
from .figures import render_curves_figure, to_numpy
from .hparams import clean_hparams, component_setting, info_hparams, session_summaries
from .tags import (DIAG, MAIN, SPLITS, SUMMARY, describe_tag, flatten, markdown_table,
                   record_items, round_tag, scalar_summary)
from ..contract import ArrayLike

__all__ = ["TensorBoardLogger", "default_logdir"]


def default_logdir(name: str = "run", *, root: str = "runs") -> str:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>`` (a suffix ``-2``, ``-3``... if it already exists),
    created here: ``mkdir`` without ``exist_ok`` claims the folder atomically, so two runs
    started in the same second never share one (the loser of the race takes the next
    suffix)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(root, f"{name}-{stamp}")
    os.makedirs(root, exist_ok=True)
    path, k = base, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            k += 1
            path = f"{base}-{k}"


def _as_scalar(v) -> Optional[float]:
    """A Python float for scalar-like values (numbers, 0-d/1-element tensors), else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, Tensor) and v.numel() == 1:
        return float(v.detach().reshape(()).cpu())
    if isinstance(v, np.ndarray) and v.size == 1:
        return float(v.reshape(()))
    return None


def _as_vector(v) -> Optional[np.ndarray]:
    if isinstance(v, Tensor) and v.numel() > 1:
        return to_numpy(v).ravel()
    if isinstance(v, np.ndarray) and v.size > 1:
        return v.astype(np.float64).ravel()
    if isinstance(v, (list, tuple)) and len(v) > 1 and all(isinstance(e, numbers.Real) for e in v):
        return np.asarray(v, dtype=np.float64)
    return None


class TensorBoardLogger:
    """Write a run's curves, diagnostics, hyper-parameters and final results to TensorBoard.

    Args:
        logdir: run directory; default ``runs/<name>-<timestamp>`` (see :func:`default_logdir`).
        name: run name used for the default ``logdir``.
        hparams: hyper-parameters of the run (the HParams columns), merged with those read
            from the algorithm's ``FitInfo`` at ``on_fit_start`` (these win: they are what
            the user chose, e.g. the CLI's ``data``).
        histogram_every: write histograms every this many rounds/steps (and at the end).
        relevance_threshold: labels ``> relevance_threshold`` count as relevant for the
            ROC / precision-recall figure.
        flush_secs: passed to ``SummaryWriter``.
        hparams_on_fit_end: write the hyper-parameters with the final metrics when the fit
            ends (the metrics of the kept model: the best round's under early stopping); set
            ``False`` to call :meth:`log_hparams` yourself later, e.g. with test metrics (a
            run should hold one hparams record).
        experiment_dir: the log folder whose runs share one HParams experiment definition
            (each run holds a copy; default: the folder above ``logdir``, e.g. ``runs``;
            give the folder you point ``tensorboard --logdir`` at when runs are nested
            deeper).

    Callback: ``on_fit_start(ranker, info)``, ``on_round_end(ranker, record) -> None`` (never
    asks to stop), ``on_fit_end(ranker, model)``.
    Explicit use: :meth:`log_step`, :meth:`log_histograms`, :meth:`log_curves`,
    :meth:`log_hparams`, :meth:`close` (also a context manager).
    """

    def __init__(self, logdir: Optional[str] = None, *, name: str = "run",
                 hparams: Optional[Mapping[str, Any]] = None, histogram_every: int = 10,
                 relevance_threshold: float = 0.0, flush_secs: int = 10,
                 hparams_on_fit_end: bool = True, experiment_dir: Optional[str] = None):
        if histogram_every < 1:
            raise ValueError(f"histogram_every must be >= 1, got {histogram_every}")
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = str(logdir) if logdir is not None else default_logdir(name)
        self.writer = SummaryWriter(log_dir=self.logdir, flush_secs=flush_secs)
        self.hparams: Dict[str, Any] = dict(hparams or {})
        self.histogram_every = int(histogram_every)
        self.relevance_threshold = float(relevance_threshold)
        self.hparams_on_fit_end = bool(hparams_on_fit_end)
        self.experiment_dir = str(experiment_dir) if experiment_dir is not None else \
            os.path.dirname(os.path.abspath(self.logdir))
        self.last_scalars: Dict[str, float] = {}
        self._described: set = set()
        self._last_time: Optional[float] = None
        self._last_round: Optional[int] = None
        self._hist_round: Optional[int] = None
        self._pending_vectors: Dict[str, Any] = {}
        self._best_round: Optional[int] = None
        self._n_rounds: Optional[int] = None
        self._n_queries: Optional[int] = None
        self._mean_loss = False
        self._round_metrics: Dict[int, Dict[str, Dict[str, float]]] = {}
        self._hparams_written = False
        self._closed = False

    # ------------------------------------------------------------------ explicit API
    def _scalar(self, tag: str, x: float, step: int, description: Optional[str] = None) -> None:
        """One scalar; the first write of a tag carries its description."""
        if tag not in self._described:
            desc = describe_tag(tag) if description is None else description
            self.writer._get_file_writer().add_summary(scalar_summary(tag, x, desc),
                                                       int(step))
            self._described.add(tag)
        else:
            self.writer.add_scalar(tag, x, int(step))
        self.last_scalars[tag] = x

    def log_step(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Write every scalar-like value of ``scalars`` (nested dicts become ``a/b`` tags).

        Tags are written as given; the library's layout puts the curves that matter under
        ``metrics/`` (``metrics/valid/ndcg@10``, ``metrics/loss_per_query``,
        ``metrics/step_size``, ``metrics/seconds_per_round``) and diagnostics under
        ``round/``. Non-scalar values are ignored here (see :meth:`log_histograms`);
        non-finite values are skipped (TensorBoard cannot plot them).
        """
        for tag, v in flatten(scalars).items():
            x = _as_scalar(v)
            if x is None or not math.isfinite(x):
                continue
            self._scalar(tag, x, step)

    def log_histograms(self, step: int, values: Mapping[str, Any]) -> None:
        """Write a histogram for every vector value (tensor/array with > 1 element)."""
        for tag, v in flatten(values).items():
            arr = _as_vector(v)
            if arr is None:
                continue
            arr = arr[np.isfinite(arr)]
            if arr.size:
                self.writer.add_histogram(tag, arr, int(step))

    def log_curves(self, step: int, labels: ArrayLike, scores: ArrayLike, *, tag: str = "test"
                   ) -> None:
        """The ROC / precision-recall figure of ``scores`` (``summary/<tag>_roc_pr``: both
        curves with axes, AUC and average precision) and TensorBoard's interactive PR curve
        (``summary/<tag>_pr_curve``, PR Curves tab).

        ``labels`` are binarised as ``labels > relevance_threshold``; nothing is written when
        one class is empty. The curves pool all documents (for several queries this is the
        global PR/ROC, not a per-query average).
        """
        y = to_numpy(labels).ravel() > self.relevance_threshold
        s = to_numpy(scores).ravel()
        if y.size == 0 or y.all() or (~y).all():
            return
        # add_pr_curve expects probabilities in [0, 1]: map scores monotonically.
        lo, hi = float(s.min()), float(s.max())
        p = (s - lo) / (hi - lo) if hi > lo else np.full_like(s, 0.5)
        self.writer.add_pr_curve(f"{SUMMARY}/{tag}_pr_curve", y.astype(np.int64), p,
                                 int(step), num_thresholds=201)
        try:  # SummaryWriter encodes images with Pillow; skip the picture without it
            img = render_curves_figure(y, s, title=f"{tag} set")
            if img is not None:
                self.writer.add_image(f"{SUMMARY}/{tag}_roc_pr", img, int(step),
                                      dataformats="HWC")
        except ImportError:  # pragma: no cover - Pillow is usually installed
            pass

    def log_hparams(self, hparams: Optional[Mapping[str, Any]] = None,
                    metrics: Optional[Mapping[str, Any]] = None, *,
                    step: Optional[int] = None) -> None:
        """Record the run's hyper-parameters and final results (the HParams tab).

        ``hparams`` is merged into those already known (values that are not
        int/float/str/bool are stored as strings; ``None`` is dropped; booleans stay
        booleans). ``metrics``: ``{"test/ndcg@10": v, "valid/map": v, "rounds_used": n,
        ...}`` (``<split>/<metric>`` or a plain name); default: the last value of every
        ``metrics/<split>/<metric>`` scalar written so far. Each is written once as
        ``summary/<key>`` (at ``step``, default the last round) — the HParams metric
        values — and all of them as a table in the text summary ``summary/final_metrics``.
        The run's folder gets its session (the hyper-parameter values) and the log folder's
        experiment definition (``experiment_dir``), brought up to the union of the
        standard columns, those of the folder's runs and this run's hyper-parameters and
        metrics in every run that holds it
        (:func:`~.experiment.update_experiment`).
        """
        hp = dict(self.hparams)
        hp.update(hparams or {})
        if metrics is None:
            metrics = {}
            for k, v in self.last_scalars.items():
                parts = k.split("/")
                if parts[0] == MAIN and len(parts) == 3 and parts[1] in SPLITS:
                    metrics[f"{parts[1]}/{parts[2]}"] = v
                elif parts[0] == "train" and len(parts) == 2:
                    metrics[k] = v
        final: Dict[str, float] = {}
        for k, v in metrics.items():
            x = _as_scalar(v)
            if x is None or not math.isfinite(x):
                continue
            key = k[len(SUMMARY) + 1:] if k.startswith(f"{SUMMARY}/") else k
            key = key[len("final/"):] if key.startswith("final/") else key
            final[f"{SUMMARY}/{key}"] = x
        at = int(step if step is not None else (self._last_round or 0))
        for tag, x in final.items():
            self._scalar(tag, x, at)
        rows: Dict[str, Dict[str, float]] = {}
        other: Dict[str, float] = {}
        for tag, x in final.items():
            rest = tag.split("/", 1)[1]
            split, sep, name = rest.partition("/")
            if sep:
                rows.setdefault(split, {})[name] = x
            else:
                other[rest] = x
        text = markdown_table(rows)
        if other:
            text += "\n\n" + "  \n".join(f"**{k}**: {v:g}" for k, v in other.items())
        shown = clean_hparams(hp)
        if shown:
            text += "\n\n**hyper-parameters**: " + ", ".join(f"{k}={v}"
                                                          for k, v in shown.items())
        if text.strip():
            self.writer.add_text(f"{SUMMARY}/final_metrics", text, at)
        update_experiment(self.experiment_dir, hp, list(final), run=self.logdir)
        fw = self.writer._get_file_writer()
        for summ in session_summaries(hp):
            fw.add_summary(summ)
        self._hparams_written = True
        self.writer.flush()

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        if not self._closed:
            self.writer.flush()
            self.writer.close()
            self._closed = True

    def __enter__(self) -> "TensorBoardLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ callback
    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:
        """Record the run's hyper-parameters (:func:`info_hparams`: the algorithm as named,
        the loss and the learner with their settings as separate columns, learning rate,
        rounds, seed; those given to the constructor win) and start the round timer."""
        for k, v in info_hparams(info).items():
            self.hparams.setdefault(k, v)
        self._n_rounds = info.n_rounds
        self._n_queries = info.n_queries
        self._mean_loss = component_setting(info.params.get("loss"), "reduction") == "mean"
        self._last_round = self._hist_round = self._best_round = None
        self._pending_vectors = {}
        self._round_metrics = {}
        self._last_time = time.perf_counter()

    def on_round_end(self, ranker: Any, record: RoundRecord) -> None:
        """Write the round's curves and diagnostics (and, every ``histogram_every`` rounds,
        histograms); see :func:`round_tag` for the tags."""
        now = time.perf_counter()
        single_valid = len([k for k in record.metrics if k != "train"]) <= 1
        scalars: Dict[str, Any] = {}
        vectors: Dict[str, Any] = {}
        for k, v in record_items(record).items():
            tag = round_tag(k, single_valid=single_valid)
            if tag is None:
                continue
            if tag.startswith("weak_model/"):
                # weak model summary: only value-like arrays (leaf values, gains, coefficients)
                leaf = tag.rsplit("/", 1)[-1]
                if any(w in leaf for w in ("leaf", "gain", "coef", "value")) and \
                        _as_vector(v) is not None:
                    vectors[tag] = v
            elif isinstance(v, bool):
                continue
            elif _as_scalar(v) is not None:
                scalars[tag] = v
            elif _as_vector(v) is not None:
                vectors["scores/train" if tag == f"{DIAG}/scores" else tag] = v
        loss = scalars.pop(f"{MAIN}/train/loss", None)
        if loss is not None:
            x = _as_scalar(loss)
            if not self._mean_loss and self._n_queries:
                x = x / self._n_queries
            scalars[f"{MAIN}/loss_per_query"] = x
        if f"{MAIN}/seconds_per_round" not in scalars and self._last_time is not None:
            scalars[f"{MAIN}/seconds_per_round"] = now - self._last_time
        rnd = int(record.round)
        self.log_step(rnd, scalars)
        last = self._n_rounds is not None and rnd >= self._n_rounds
        if vectors and (rnd % self.histogram_every == 0 or last or rnd <= 1):
            self.log_histograms(rnd, vectors)
            self._hist_round = rnd
        self._last_round = rnd
        self._best_round = record.best_round
        self._round_metrics[rnd] = {s: dict(m) for s, m in record.metrics.items()}
        self._pending_vectors = vectors
        self._last_time = time.perf_counter()
        return None

    def final_metrics(self, round: Optional[int] = None) -> Dict[str, float]:
        """``{"<split>/<metric>": value}`` of the round ``round`` (default: the best round
        when there is one, else the last); the training loss per query."""
        rnd = round if round is not None else (self._best_round or self._last_round)
        out: Dict[str, float] = {}
        for split, ms in self._round_metrics.get(rnd, {}).items():
            name = "valid" if split == "valid_0" and not any(
                s.startswith("valid_") and s != "valid_0" for s in
                self._round_metrics.get(rnd, {})) else split
            for m, v in ms.items():
                if m == "loss":
                    continue
                out[f"{name}/{m}"] = v
        return out

    def on_fit_end(self, ranker: Any, model: Any = None) -> None:
        """Write the last round's histograms (if not yet written), the hyper-parameters with
        the final metrics (unless ``hparams_on_fit_end=False``), flush."""
        if self._pending_vectors and self._last_round is not None and \
                self._hist_round != self._last_round:
            self.log_histograms(self._last_round, self._pending_vectors)
        if self.hparams_on_fit_end:
            final = self.final_metrics()
            final.update({"rounds_used": self._last_round, "best_round": self._best_round})
            self.log_hparams(None, {k: v for k, v in final.items() if v is not None})
        self.flush()
