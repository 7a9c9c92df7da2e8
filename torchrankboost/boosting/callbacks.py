"""Callbacks of the boosting driver.

A callback is any object with some of these methods (missing ones are skipped)::

    on_fit_start(booster, info: dict)            # once, before round 1
    on_round_end(booster, round: int, diagnostics: dict) -> Optional[bool]
                                                 # after each round; True requests a stop
    on_fit_end(booster, ensemble)                # once, with the final (possibly truncated) model

``info`` (fit start): ``n_docs``, ``n_queries``, ``n_features``, ``n_rounds``, ``loss`` (repr),
``learner`` (repr), ``step``, ``curvature``, ``learning_rate``, ``subsample``, ``seed``,
``device``, ``base_score``, ``eval_names`` (list), ``metric_names`` (list),
``initial_loss``.

``diagnostics`` (per round, plain Python numbers / lists / dicts — JSON-able):

* ``round`` (1-based), ``loss`` (training loss after the update), ``loss_before``,
  ``step`` (α chosen by the step rule), ``learning_rate`` (ν), ``weight`` (ν·α, the
  round's weight in the ensemble);
* ``grad_norm`` (‖g‖₂), ``grad_max`` (‖g‖∞), ``curvature_norm`` (‖h‖₂ after the floor),
  ``curvature_mean``, ``curvature_kind`` (``"diag"``/``"bound"``/``"none"``/``"autograd-diag"``/``"unit"``);
* ``line_search``: ``{"status", "n_evals", "deriv0", "value0"}`` (line search / Newton);
* ``metrics``: ``{"train": {"loss": ...}, "valid_0": {"ndcg@10": ...}, ...}``;
* ``seconds`` (wall time of the round), ``seconds_learner``, ``seconds_step``,
  ``seconds_grad``; ``n_rows`` (documents the learner saw, after query subsampling);
* ``learner``: the weak model's summary (``model.summary()`` when it has one, else its
  ``meta`` plus its small tensors as lists: e.g. chosen feature/threshold, leaf values);
* ``best_round``/``best_score`` so far when early stopping is on.
* whatever the loss's ``round_diagnostics(scores, labels, groups)`` returns, when it has one
  (``AdaBoostLoss``: ``F_plus``, ``F_minus``, ``F``, ``f_skew``, ``relative_f_skew``...).

A TensorBoard logger only needs to walk ``loss``, ``step``, ``metrics`` and the norms.
"""

from __future__ import annotations

import sys
import time
from typing import List, Optional

__all__ = ["Callback", "HistoryCallback", "PrintCallback", "EarlyStoppingCallback"]


class Callback:
    """Base class with no-op hooks (subclassing is optional: duck typing is enough)."""

    def on_fit_start(self, booster, info: dict) -> None:  # pragma: no cover - no-op
        pass

    def on_round_end(self, booster, round: int, diagnostics: dict) -> Optional[bool]:
        return None

    def on_fit_end(self, booster, ensemble) -> None:  # pragma: no cover - no-op
        pass


class HistoryCallback(Callback):
    """Keeps everything: ``info`` (fit start), ``rounds`` (list of diagnostics dicts) and
    ``ensemble`` (fit end). ``history[key]`` gives the per-round list of a top-level key."""

    def __init__(self):
        self.info: Optional[dict] = None
        self.rounds: List[dict] = []
        self.ensemble = None

    def on_fit_start(self, booster, info):
        self.info = dict(info)
        self.rounds = []

    def on_round_end(self, booster, round, diagnostics):
        self.rounds.append(diagnostics)
        return None

    def on_fit_end(self, booster, ensemble):
        self.ensemble = ensemble

    def __getitem__(self, key: str) -> list:
        return [d.get(key) for d in self.rounds]


class PrintCallback(Callback):
    """Print one line every ``every`` rounds (and the last one): round, loss, step, metrics,
    seconds. ``file`` defaults to stdout."""

    def __init__(self, every: int = 10, *, file=None):
        if int(every) < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = int(every)
        self.file = file
        self._t0 = None
        self._n = None

    def on_fit_start(self, booster, info):
        self._t0 = time.perf_counter()
        self._n = info.get("n_rounds")
        print(f"[boost] {info.get('n_docs')} docs, {info.get('n_queries')} queries, "
              f"{info.get('n_features')} features; loss={info.get('loss')}; "
              f"step={info.get('step')}, curvature={info.get('curvature')}, "
              f"lr={info.get('learning_rate')}; initial loss {info.get('initial_loss'):.6g}",
              file=self.file or sys.stdout)

    def on_round_end(self, booster, round, diagnostics):
        if round % self.every and round != self._n:
            return None
        parts = [f"[{round:4d}] loss {diagnostics['loss']:.6g}",
                 f"step {diagnostics['step']:.4g}"]
        for name, vals in diagnostics.get("metrics", {}).items():
            for m, v in vals.items():
                if name == "train" and m == "loss":
                    continue
                parts.append(f"{name}-{m} {v:.5f}")
        parts.append(f"{diagnostics['seconds']:.3f}s")
        print("  ".join(parts), file=self.file or sys.stdout)
        return None

    def on_fit_end(self, booster, ensemble):
        el = time.perf_counter() - (self._t0 or time.perf_counter())
        extra = ""
        if getattr(booster, "best_round_", None) is not None:
            extra = f", best round {booster.best_round_} ({booster.best_score_:.6g})"
        print(f"[boost] done: {ensemble.n_rounds} rounds in {el:.2f}s{extra}",
              file=self.file or sys.stdout)


class EarlyStoppingCallback(Callback):
    """Stop when a diagnostic has not improved for ``patience`` rounds.

    ``key``: ``("valid_0", "ndcg@10")``-style path into ``diagnostics["metrics"]``;
    ``greater_is_better`` picks the direction. (The booster's built-in early stopping,
    ``fit(..., early_stopping_rounds=...)``, also restores the best round; this callback
    only stops.)
    """

    def __init__(self, key, patience: int, *, greater_is_better: bool = True):
        self.key = tuple(key)
        self.patience = int(patience)
        self.sign = 1.0 if greater_is_better else -1.0
        self.best = None
        self.best_round = None

    def on_fit_start(self, booster, info):
        self.best = None
        self.best_round = None

    def on_round_end(self, booster, round, diagnostics):
        v = diagnostics.get("metrics", {})
        for k in self.key:
            v = v[k]
        v = self.sign * float(v)
        if self.best is None or v > self.best:
            self.best, self.best_round = v, round
        return round - self.best_round >= self.patience
