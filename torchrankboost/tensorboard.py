"""TensorBoard logging for boosting runs and neural training loops.

:class:`TensorBoardLogger` writes TensorBoard event files with
:class:`torch.utils.tensorboard.SummaryWriter`. It is used two ways:

1. as a callback of any algorithm (``ranker.fit(..., callbacks=[logger])``): it implements
   the contract's hooks ``on_fit_start(ranker, info: FitInfo)``,
   ``on_round_end(ranker, record: RoundRecord)`` and ``on_fit_end(ranker, model)`` (see
   :mod:`torchrankboost.contract`) and reads only what they are given;
2. from any training loop, through explicit methods::

       logger = TensorBoardLogger("runs/mlp")
       for step in range(n_steps):
           ...
           logger.log_step(step, {"train/loss": loss.item(), "valid/ndcg@10": ndcg})
       logger.log_histograms(step, {"scores": scores})
       logger.log_curves(step, labels, scores, tag="test")
       logger.log_hparams({"lr": 1e-3, "loss": "exponential"}, {"test/ndcg@10": 0.48})
       logger.close()

What is written (tags):

* scalars: every scalar of the round's :class:`~torchrankboost.contract.RoundRecord` — its
  ``metrics`` as ``train/loss``, ``valid/ndcg@10``..., its ``step`` as ``round/alpha``, its
  other fields and ``extra`` entries under their own names (``round/learning_rate``,
  ``round/f_skew``, ``round/margin``, ``round/smooth_margin``, ``round/grad_norm``,
  ``round/curvature_norm``, ``line_search/n_evals``...; names without a ``/`` are put under
  ``round/``), plus ``time/seconds_per_round``;
* histograms: every vector entry of ``extra`` (e.g. the weak model's ``leaf_values``;
  ``scores``, when an algorithm reports its training scores, as ``train/scores``), every
  ``histogram_every`` rounds and at the last round;
* ``hparams``: the run's hyper-parameters with its final metrics (the last value of every
  ``train/``, ``valid/`` and ``test/`` scalar unless given explicitly), written into the same
  run directory so that TensorBoard's HPARAMS tab links to the scalars;
* curves: a precision-recall curve (``add_pr_curve``, numpy only) and an ROC curve drawn as an
  image (pure numpy rasteriser, no matplotlib needed) for binary relevance
  ``label > relevance_threshold``.

Event files go to ``logdir`` (default ``runs/<name>-<timestamp>``); view them with
``tensorboard --logdir runs``.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from datetime import datetime
from typing import Any, Dict, Iterable, Mapping, Optional

import numpy as np
import torch
from torch import Tensor

from .contract import FitInfo, RoundRecord

__all__ = ["TensorBoardLogger", "default_logdir", "roc_curve_points", "render_roc_image",
           "round_tag", "record_items", "info_hparams", "flatten"]


def default_logdir(name: str = "run", *, root: str = "runs") -> str:
    """``<root>/<name>-<YYYYmmdd-HHMMSS>`` (a suffix ``-2``, ``-3``... if it already exists)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(root, f"{name}-{stamp}")
    path, k = base, 1
    while os.path.exists(path):
        k += 1
        path = f"{base}-{k}"
    return path


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


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
        return _to_numpy(v).ravel()
    if isinstance(v, np.ndarray) and v.size > 1:
        return v.astype(np.float64).ravel()
    if isinstance(v, (list, tuple)) and len(v) > 1 and all(isinstance(e, numbers.Real) for e in v):
        return np.asarray(v, dtype=np.float64)
    return None


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


def roc_curve_points(labels, scores, *, relevance_threshold: float = 0.0):
    """ROC points ``(fpr, tpr)`` (numpy, float64) of ``scores`` for ``labels > threshold``.

    Tied scores form one step (a diagonal segment), as in scikit-learn's ``roc_curve``.
    Returns ``None`` when one of the two classes is empty.
    """
    y = _to_numpy(labels).ravel() > relevance_threshold
    s = _to_numpy(scores).ravel()
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


def render_roc_image(fpr: np.ndarray, tpr: np.ndarray, *, size: int = 240) -> np.ndarray:
    """Draw an ROC curve into an ``(size, size, 3)`` uint8 RGB image (no matplotlib).

    White background, grey frame and chance diagonal, the curve in blue.
    """
    img = np.full((size, size, 3), 255, dtype=np.uint8)
    pad = 12
    span = size - 2 * pad - 1

    def to_px(x, y):
        cols = np.clip(np.round(pad + np.asarray(x) * span), 0, size - 1).astype(int)
        rows = np.clip(np.round(size - 1 - pad - np.asarray(y) * span), 0, size - 1).astype(int)
        return rows, cols

    def polyline(xs, ys, color, width=1):
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        seg = np.hypot(np.diff(xs), np.diff(ys))
        n = max(2, int(seg.sum() * span * 2) + 2)
        t = np.linspace(0.0, 1.0, n)
        # resample the polyline uniformly along its length
        cum = np.r_[0.0, np.cumsum(seg)]
        if cum[-1] <= 0:
            return
        u = t * cum[-1]
        px = np.interp(u, cum, xs)
        py = np.interp(u, cum, ys)
        rows, cols = to_px(px, py)
        for dr in range(-(width // 2), width - width // 2):
            for dc in range(-(width // 2), width - width // 2):
                img[np.clip(rows + dr, 0, size - 1), np.clip(cols + dc, 0, size - 1)] = color

    grey = np.array([170, 170, 170], np.uint8)
    polyline([0, 1, 1, 0, 0], [0, 0, 1, 1, 0], grey)
    polyline([0, 1], [0, 1], grey)
    polyline(fpr, tpr, np.array([31, 90, 200], np.uint8), width=2)
    return img


class TensorBoardLogger:
    """Write a run's scalars, histograms, hyper-parameters and curves to TensorBoard.

    Args:
        logdir: run directory; default ``runs/<name>-<timestamp>`` (see :func:`default_logdir`).
        name: run name used for the default ``logdir``.
        hparams: hyper-parameters recorded with the final metrics (merged with the
            algorithm's, from the ``FitInfo`` of ``on_fit_start``).
        histogram_every: write histograms every this many rounds/steps (and at the end).
        relevance_threshold: labels ``> relevance_threshold`` count as relevant for the
            PR/ROC curves.
        flush_secs: passed to ``SummaryWriter``.
        hparams_on_fit_end: write the hyper-parameters with the final metrics when the fit
            ends (set ``False`` to call :meth:`log_hparams` yourself later, e.g. with test
            metrics; a run should hold one hparams record).

    Callback: ``on_fit_start(ranker, info)``, ``on_round_end(ranker, record) -> None`` (never
    asks to stop), ``on_fit_end(ranker, model)``.
    Explicit use: :meth:`log_step`, :meth:`log_histograms`, :meth:`log_curves`,
    :meth:`log_hparams`, :meth:`close` (also a context manager).
    """

    def __init__(self, logdir: Optional[str] = None, *, name: str = "run",
                 hparams: Optional[Mapping[str, Any]] = None, histogram_every: int = 10,
                 relevance_threshold: float = 0.0, flush_secs: int = 10,
                 hparams_on_fit_end: bool = True):
        if histogram_every < 1:
            raise ValueError(f"histogram_every must be >= 1, got {histogram_every}")
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = str(logdir) if logdir is not None else default_logdir(name)
        self.writer = SummaryWriter(log_dir=self.logdir, flush_secs=flush_secs)
        self.hparams: Dict[str, Any] = dict(hparams or {})
        self.histogram_every = int(histogram_every)
        self.relevance_threshold = float(relevance_threshold)
        self.hparams_on_fit_end = bool(hparams_on_fit_end)
        self.last_scalars: Dict[str, float] = {}
        self._last_time: Optional[float] = None
        self._last_round: Optional[int] = None
        self._hist_round: Optional[int] = None
        self._pending_vectors: Dict[str, Any] = {}
        self._best_round: Optional[int] = None
        self._n_rounds: Optional[int] = None
        self._hparams_written = False
        self._closed = False

    # ------------------------------------------------------------------ explicit API
    def log_step(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Write every scalar-like value of ``scalars`` (nested dicts become ``a/b`` tags).

        Non-scalar values are ignored here (see :meth:`log_histograms`); non-finite values
        are skipped (TensorBoard cannot plot them).
        """
        for tag, v in flatten(scalars).items():
            x = _as_scalar(v)
            if x is None or not math.isfinite(x):
                continue
            self.writer.add_scalar(tag, x, int(step))
            self.last_scalars[tag] = x

    def log_histograms(self, step: int, values: Mapping[str, Any]) -> None:
        """Write a histogram for every vector value (tensor/array with > 1 element)."""
        for tag, v in flatten(values).items():
            arr = _as_vector(v)
            if arr is None:
                continue
            arr = arr[np.isfinite(arr)]
            if arr.size:
                self.writer.add_histogram(tag, arr, int(step))

    def log_curves(self, step: int, labels, scores, *, tag: str = "test") -> None:
        """PR curve (``<tag>/pr_curve``) and ROC image (``<tag>/roc_curve``) of ``scores``.

        ``labels`` are binarised as ``labels > relevance_threshold``; nothing is written when
        one class is empty. The curves pool all documents (for several queries this is the
        global PR/ROC, not a per-query average).
        """
        y = _to_numpy(labels).ravel() > self.relevance_threshold
        s = _to_numpy(scores).ravel()
        if y.size == 0 or y.all() or (~y).all():
            return
        # add_pr_curve expects probabilities in [0, 1]: map scores monotonically.
        lo, hi = float(s.min()), float(s.max())
        p = (s - lo) / (hi - lo) if hi > lo else np.full_like(s, 0.5)
        self.writer.add_pr_curve(f"{tag}/pr_curve", y.astype(np.int64), p, int(step),
                                 num_thresholds=201)
        pts = roc_curve_points(y.astype(np.float64), s, relevance_threshold=0.5)
        if pts is not None:
            img = render_roc_image(*pts)
            try:  # SummaryWriter encodes images with Pillow; skip the picture without it
                self.writer.add_image(f"{tag}/roc_curve", img, int(step), dataformats="HWC")
            except ImportError:  # pragma: no cover - Pillow is usually installed
                pass

    def log_hparams(self, hparams: Optional[Mapping[str, Any]] = None,
                    metrics: Optional[Mapping[str, Any]] = None) -> None:
        """Record hyper-parameters with final metrics in this run directory.

        ``hparams`` is merged into those already known; ``metrics`` defaults to the last
        value of every ``train/``, ``valid/`` and ``test/`` scalar written so far. Values that
        are not int/float/str/bool are stored as strings; ``None`` is dropped.
        """
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        hp = dict(self.hparams)
        hp.update(hparams or {})
        clean: Dict[str, Any] = {}
        for k, v in hp.items():
            if v is None:
                continue
            if isinstance(v, bool) or isinstance(v, str):
                clean[k] = v
            elif isinstance(v, numbers.Integral):
                clean[k] = int(v)
            elif isinstance(v, numbers.Real):
                clean[k] = float(v)
            else:
                clean[k] = str(v)
        if metrics is None:
            metrics = {k: v for k, v in self.last_scalars.items()
                       if k.split("/", 1)[0] in ("train", "valid", "test")}
        mets = {}
        for k, v in metrics.items():
            x = _as_scalar(v)
            if x is not None and math.isfinite(x):
                mets[f"final/{k}" if not k.startswith("final/") else k] = x
        exp, ssi, sei = hparams_summary(clean, mets)
        fw = self.writer._get_file_writer()
        fw.add_summary(exp)
        fw.add_summary(ssi)
        fw.add_summary(sei)
        for k, x in mets.items():
            self.writer.add_scalar(k, x, 0)
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
    def on_fit_start(self, ranker, info: FitInfo) -> None:
        """Record the run's hyper-parameters (``info.algorithm``, ``info.n_rounds``,
        ``info.params``) and start the round timer."""
        for k, v in info_hparams(info).items():
            self.hparams.setdefault(k, v)
        self._n_rounds = info.n_rounds
        self._last_round = self._hist_round = self._best_round = None
        self._pending_vectors = {}
        self._last_time = time.perf_counter()

    def on_round_end(self, ranker, record: RoundRecord) -> None:
        """Write the round's scalars (and, every ``histogram_every`` rounds, histograms).

        Tags follow :func:`round_tag`: the record's ``metrics`` become ``train/<m>`` and
        ``valid/<m>``, its ``step`` ``round/alpha``, timings ``time/...``, other scalars
        ``round/<key>``; vectors (leaf values, scores) become histograms.
        """
        now = time.perf_counter()
        single_valid = len([k for k in record.metrics if k != "train"]) <= 1
        scalars: Dict[str, Any] = {}
        vectors: Dict[str, Any] = {}
        for k, v in record_items(record).items():
            tag = round_tag(k, single_valid=single_valid)
            if tag is None:
                continue
            if tag.startswith("learner/"):
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
                vectors["train/scores" if tag == "round/scores" else tag] = v
        if "time/seconds" in scalars:
            scalars["time/seconds_per_round"] = scalars.pop("time/seconds")
        elif self._last_time is not None:
            scalars["time/seconds_per_round"] = now - self._last_time
        rnd = int(record.round)
        self.log_step(rnd, scalars)
        last = self._n_rounds is not None and rnd >= self._n_rounds
        if vectors and (rnd % self.histogram_every == 0 or last or rnd <= 1):
            self.log_histograms(rnd, vectors)
            self._hist_round = rnd
        self._last_round = rnd
        self._best_round = record.best_round
        self._pending_vectors = vectors
        self._last_time = time.perf_counter()
        return None

    def on_fit_end(self, ranker, model=None) -> None:
        """Write the last round's histograms (if not yet written), the hyper-parameters with
        the final metrics (unless ``hparams_on_fit_end=False``), flush."""
        if self._pending_vectors and self._last_round is not None and \
                self._hist_round != self._last_round:
            self.log_histograms(self._last_round, self._pending_vectors)
        extra = {"rounds_run": self._last_round, "best_round": self._best_round}
        if self.hparams_on_fit_end:
            self.log_hparams(extra)
        else:
            self.hparams.update({k: v for k, v in extra.items() if v is not None})
        self.flush()


# identifiers and flags, not quantities worth a plot
_SKIP_KEYS = {"round", "curvature_kind", "line_search/status", "candidate", "feature",
              "threshold", "threshold_index", "constant", "complemented", "phase",
              "closed_form", "greedy", "new_ranker", "best_round"}


def round_tag(key: str, *, single_valid: bool = True) -> Optional[str]:
    """TensorBoard tag of a flattened diagnostics key (``None``: not logged).

    ``metrics/train/loss`` → ``train/loss``; ``metrics/valid_0/ndcg@10`` → ``valid/ndcg@10``
    (``valid_0`` keeps its name when there are several evaluation sets); ``step`` →
    ``round/alpha``; ``seconds*`` → ``time/seconds*``; ``learner/...`` and other nested keys
    as they are; other top-level keys → ``round/<key>``.
    """
    if key in _SKIP_KEYS:
        return None
    if key.startswith("metrics/"):
        rest = key[len("metrics/"):]
        head, _, tail = rest.partition("/")
        if single_valid and head == "valid_0":
            head = "valid"
        return f"{head}/{tail}" if tail else f"train/{head}"
    if key == "step":
        return "round/alpha"
    if key.startswith("seconds"):
        return f"time/{key}"
    if "/" in key:
        return key
    return f"round/{key}"


def record_items(record: RoundRecord) -> Dict[str, Any]:
    """A round record as flat ``a/b`` keys: ``loss``, ``step``, ``weight``, ``seconds``,
    ``best_score``, ``metrics/<set>/<metric>`` and every ``extra`` entry (nested dicts
    flattened; ``None`` values left out; ``extra`` never overrides a field)."""
    d: Dict[str, Any] = dict(record.extra)
    d.update({"loss": record.loss, "step": record.step, "weight": record.weight,
              "seconds": record.seconds, "best_score": record.best_score,
              "metrics": record.metrics})
    return {k: v for k, v in flatten(d).items() if v is not None}


def info_hparams(info: FitInfo) -> Dict[str, Any]:
    """The hyper-parameters of a run from its ``FitInfo``: ``algorithm``, ``n_rounds`` and
    ``params`` (plain values as they are, anything else as a string)."""
    out: Dict[str, Any] = {"algorithm": info.algorithm, "n_rounds": info.n_rounds}
    for k, v in info.params.items():
        if k == "callbacks":
            continue
        out[k] = v if v is None or isinstance(v, (bool, str, numbers.Real)) else str(v)
    return out
