"""Callbacks: the hooks every algorithm calls (see :mod:`torchrankboost.contract`).

A callback is any object with some of these methods (missing ones are skipped)::

    on_fit_start(ranker, info: FitInfo)           # once, before round 1
    on_round_end(ranker, record: RoundRecord) -> Optional[bool]
                                                  # after each round; True requests a stop
    on_fit_end(ranker, model)                     # once, with the final (possibly cut) model

:class:`~torchrankboost.contract.FitInfo` carries ``algorithm``, ``n_docs``, ``n_queries``,
``n_features``, ``n_rounds``, ``eval_names``, ``metric_names``, ``initial_loss`` and
``params`` (the driver's: ``loss``, ``learner`` (reprs), ``step``, ``curvature``,
``learning_rate``, ``subsample``, ``seed``, ``device``, ``base_score``).

:class:`~torchrankboost.contract.RoundRecord` carries ``round`` (1-based), ``loss`` (the
training objective after the round), ``step``, ``weight``, ``metrics`` (``{"train": {"loss":
...}, "valid_0": {"ndcg@10": ...}}``), ``seconds``, ``best_round``/``best_score`` and
``extra``, the algorithm's own diagnostics (plain Python numbers / lists / dicts). The
driver's ``extra``: ``loss_before``, ``learning_rate`` (ν), ``grad_norm`` (‖g‖₂),
``grad_max`` (‖g‖∞), ``curvature_norm`` (‖h‖₂ after the floor), ``curvature_mean``,
``curvature_kind`` (``"diag"``/``"bound"``/``"none"``/``"autograd-diag"``/``"unit"``),
``line_search`` (``{"status", "n_evals", "deriv0", "value0"}``), ``seconds_grad``,
``seconds_learner``, ``seconds_step``, ``seconds_eval``, ``n_rows`` (documents the learner
saw, after query subsampling), ``learner`` (the weak model's summary) and whatever the loss's
``round_diagnostics(scores, labels, groups)`` returns (``AdaBoostLoss``: ``F_plus``,
``F_minus``, ``F``, ``f_skew``, ``relative_f_skew``). The RankBoost family's ``extra``:
``alpha``, ``loss_before``, ``feature``/``threshold``, the edge statistics... (see each
class). ``record["grad_norm"]`` / ``record.get(...)`` read a field or an ``extra`` entry.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, List, Optional, TextIO, Tuple

from ..contract import FitInfo, RoundRecord
from ..params import format_params

__all__ = ["Callback", "HistoryCallback", "PrintCallback", "EarlyStopping", "BestTracker"]


class BestTracker:
    """The best value of one metric so far (a NaN value is never an improvement)."""

    def __init__(self, greater_is_better: bool = True):
        self.greater = bool(greater_is_better)
        self.round: Optional[int] = None
        self.score: Optional[float] = None

    def update(self, round: int, value: float) -> bool:
        """Record ``value`` of round ``round``; ``True`` if it is a new best."""
        v = float("nan") if value is None else float(value)
        if math.isnan(v):
            return False
        if self.score is None or (v > self.score if self.greater else v < self.score):
            self.round, self.score = int(round), v
            return True
        return False

    def rounds_since_best(self, round: int) -> int:
        return int(round) - (self.round or 0)


class Callback:
    """Base class with no-op hooks (subclassing is optional: duck typing is enough)."""

    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:  # pragma: no cover - no-op
        pass

    def on_round_end(self, ranker: Any, record: RoundRecord) -> Optional[bool]:
        return None

    def on_fit_end(self, ranker: Any, model: Any) -> None:  # pragma: no cover - no-op
        pass


class HistoryCallback(Callback):
    """Keeps everything: ``info`` (fit start), ``rounds`` (the :class:`RoundRecord` of every
    round) and ``model`` (fit end). ``history[key]`` gives the per-round list of a field or an
    ``extra`` entry."""

    def __init__(self):
        self.info: Optional[FitInfo] = None
        self.rounds: List[RoundRecord] = []
        self.model = None

    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:
        self.info = info
        self.rounds = []

    def on_round_end(self, ranker: Any, record: RoundRecord) -> Optional[bool]:
        self.rounds.append(record)
        return None

    def on_fit_end(self, ranker: Any, model: Any) -> None:
        self.model = model

    def __getitem__(self, key: str) -> list:
        return [r.get(key) for r in self.rounds]


class PrintCallback(Callback):
    """Print one line every ``every`` rounds (and the last one): round, loss, step, metrics,
    seconds. ``file`` defaults to stdout."""

    def __init__(self, every: int = 10, *, file: Optional[TextIO] = None):
        if int(every) < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = int(every)
        self.file = file
        self._t0: Optional[float] = None
        self._n: Optional[int] = None

    def _print(self, text: str) -> None:
        print(text, file=self.file or sys.stdout)

    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:
        self._t0 = time.perf_counter()
        self._n = info.n_rounds
        opts = ", ".join(f"{k}={format_params(info.params[k])}" for k in ("loss", "step", "curvature",
                                                          "learning_rate") if k in info.params)
        init = "" if info.initial_loss is None else f"; initial loss {info.initial_loss:.6g}"
        self._print(f"[{info.algorithm}] {info.n_docs} docs, {info.n_queries} queries, "
                    f"{info.n_features} features" + (f"; {opts}" if opts else "") + init)

    def on_round_end(self, ranker: Any, record: RoundRecord) -> Optional[bool]:
        rnd = record.round
        if rnd % self.every and rnd != self._n:
            return None
        loss = "-" if record.loss is None else f"{record.loss:.6g}"
        parts = [f"[{rnd:4d}] loss {loss}", f"step {record.step:.4g}"]
        for name, vals in record.metrics.items():
            for m, v in vals.items():
                if name == "train" and m == "loss":
                    continue
                parts.append(f"{name}-{m} {v:.5f}")
        parts.append(f"{record.seconds:.3f}s")
        self._print("  ".join(parts))
        return None

    def on_fit_end(self, ranker: Any, model: Any) -> None:
        el = time.perf_counter() - (self._t0 or time.perf_counter())
        extra = ""
        if getattr(ranker, "best_round_", None) is not None:
            extra = f", best round {ranker.best_round_} ({ranker.best_score_:.6g})"
        self._print(f"[done] {len(getattr(ranker, 'history_', []))} rounds in {el:.2f}s{extra}")


class EarlyStopping(Callback):
    """Stop when a metric has not improved for ``patience`` rounds (Friedman-style early
    stopping on a held-out set; the rule of every algorithm's ``early_stopping_rounds``).

    ``key``: ``None`` (default) watches the fit's own best round (``record.best_round``: the
    first metric on the first evaluation set — ``fit(early_stopping_rounds=...)`` installs
    this one and also cuts the model back to that round); or a ``("valid_0", "ndcg@10")``
    path into ``record.metrics`` with ``greater_is_better`` (this callback then only stops).
    A NaN value never counts as an improvement. After a stop, ``reason`` says why.
    """

    def __init__(self, patience: int, *, key: Optional[Tuple[str, str]] = None,
                 greater_is_better: bool = True):
        if isinstance(patience, bool) or int(patience) < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = int(patience)
        self.key = None if key is None else tuple(key)
        self.greater_is_better = bool(greater_is_better)
        self.reason: Optional[str] = None
        self.label: Optional[str] = None  # what ``key=None`` watches, for the message
        self._best: Optional[BestTracker] = None

    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:
        self._best = BestTracker(self.greater_is_better)
        self.reason = None

    def on_round_end(self, ranker: Any, record: RoundRecord) -> Optional[bool]:
        if self.key is None:
            best_round, best_score = record.best_round, record.best_score
            what = self.label or "the first metric on the first eval set"
        else:
            if self._best is None:
                self.on_fit_start(ranker, None)
            self._best.update(record.round, record.metrics[self.key[0]][self.key[1]])
            best_round, best_score = self._best.round, self._best.score
            what = f"{self.key[0]} {self.key[1]}"
        if record.round - (best_round or 0) < self.patience:
            return None
        best = "none" if best_round is None else f"{best_round}: {best_score:.6g}"
        self.reason = (f"round {record.round}: early stopping, {what} has not improved for "
                       f"{self.patience} rounds (best round {best})")
        return True
