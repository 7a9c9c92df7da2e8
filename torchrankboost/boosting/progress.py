"""Progress reporting for boosting runs and training loops.

:class:`ProgressCallback` is a callback of every algorithm (the contract's ``on_fit_start`` /
``on_round_end`` / ``on_fit_end``, see :mod:`torchrankboost.contract`) that also works from
any loop through :meth:`ProgressCallback.update`.

* On a terminal: a ``tqdm`` bar whose postfix shows the current metrics.
* Not a terminal (a log file, CI, a pipe): a plain line every ``every`` rounds and at the end,
  e.g. ``round  40/200  train/loss 12.31  valid/ndcg@10 0.4712  (0.021 s/round)``.
* ``quiet=True``: nothing.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Mapping, Optional, Sequence, TextIO

from ..contract import FitInfo, RoundRecord
from ..tensorboard.tags import flatten, round_tag

__all__ = ["ProgressCallback"]


def _scalar(v) -> Optional[float]:
    try:
        import torch

        if isinstance(v, torch.Tensor):
            return float(v.detach().reshape(()).cpu()) if v.numel() == 1 else None
    except ImportError:  # pragma: no cover
        pass
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3e}"
    return f"{x:.4f}" if ax < 10 else f"{x:.2f}"


class ProgressCallback:
    """Show training progress: a tqdm bar on a terminal, plain lines otherwise.

    Args:
        total: number of rounds/steps (taken from the fit's ``FitInfo.n_rounds`` if omitted).
        keys: which metrics to show; default: every ``train/`` and ``valid/`` scalar whose
            name contains ``loss``, ``ndcg``, ``auc``, ``map`` or ``error`` (at most 4).
        every: plain-line period when not on a terminal (default: about 10 lines per run).
        quiet: print nothing.
        stream: where to write (default ``sys.stderr``).
        use_tqdm: force the bar on (True) or off (False); default: on iff ``stream`` is a
            terminal.
        desc: label of the bar/lines (default ``"round"``).
    """

    _DEFAULT_WORDS = ("loss", "ndcg", "auc", "map", "error")

    def __init__(self, total: Optional[int] = None, *, keys: Optional[Sequence[str]] = None,
                 every: Optional[int] = None, quiet: bool = False,
                 stream: Optional[TextIO] = None, use_tqdm: Optional[bool] = None,
                 desc: str = "round"):
        self.total = total
        self.keys = list(keys) if keys is not None else None
        self.every = every
        self.quiet = bool(quiet)
        self.stream = stream
        self.use_tqdm = use_tqdm
        self.desc = desc
        self._bar: Any = None  # a tqdm bar while one is shown
        self._t0: Optional[float] = None
        self._count = 0
        self._last_line_step: Optional[int] = None
        self._last: dict = {}
        self._last_step: Optional[int] = None
        self._offset = 0  # rounds done before this fit (a resumed or continued model)

    # ------------------------------------------------------------------ helpers
    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def is_tty(self) -> bool:
        """Whether the display is a terminal (a bar; else lines), or what ``use_tqdm``
        says."""
        if self.use_tqdm is not None:
            return bool(self.use_tqdm)
        isatty = getattr(self._out(), "isatty", None)
        try:
            return bool(isatty and isatty())
        except Exception:  # pragma: no cover
            return False

    def _select(self, flat: Mapping[str, Any]) -> dict:
        tagged = {}
        for k, v in flat.items():
            t = round_tag(k) if k.startswith("metrics/") else k
            if t is not None:
                if t.startswith("metrics/"):  # TensorBoard's group of the main curves
                    t = t[len("metrics/"):]
                tagged[t] = v
        vals = {k: _scalar(v) for k, v in tagged.items()}
        vals = {k: v for k, v in vals.items() if v is not None}
        if self.keys is not None:
            return {k: vals[k] for k in self.keys if k in vals}
        cands = [k for k in vals
                 if k.split("/", 1)[0] in ("train", "valid")
                 and any(w in k.lower() for w in self._DEFAULT_WORDS)]
        # the training loss first, then validation metrics (in the driver's order), then
        # training metrics
        cands.sort(key=lambda k: (0 if k == "train/loss" else 1 if k.startswith("valid")
                                  else 2))
        chosen = {k: vals[k] for k in cands[:4]}
        return chosen

    def start(self, total: Optional[int] = None) -> None:
        """Begin a run of ``total`` steps (optional)."""
        if total is not None:
            self.total = int(total)
        self._t0 = time.perf_counter()
        self._count = 0
        self._offset = 0
        if self.quiet:
            return
        if self.is_tty():
            from tqdm.auto import tqdm

            # a bar of fixed width: the metrics after it get the rest of the line (tqdm's
            # default bar takes what the postfix leaves, down to one character)
            self._bar = tqdm(total=self.total, desc=self.desc, file=self._out(),
                             dynamic_ncols=True, leave=True,
                             bar_format="{desc} {n_fmt}/{total_fmt} |{bar:16}| "
                                        "{elapsed}<{remaining}{postfix}")

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Report one more step/round with its metrics (nested dicts allowed).

        ``step`` is informational: the lines count the updates received (drivers number
        their rounds from 0 or from 1)."""
        if self._t0 is None:
            self.start()
        self._count += 1
        done = self._offset + self._count  # rounds so far (drivers count from 0 or from 1)
        shown = self._select(flatten(metrics or {}))
        self._last = shown
        self._last_step = done
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(shown), refresh=False)
            if self._count == 1 and self._offset:
                self._bar.n = self._bar.last_print_n = self._offset
            self._bar.update(1)
            return
        every = self.every
        if every is None:
            every = max(1, (self.total or 100) // 10)
        if done % every == 0 or (self.total is not None and done >= self.total):
            self._line(done, shown)

    def _postfix(self, shown: Mapping[str, float]) -> str:
        """The metrics that fit on the terminal line after the bar, whole (never a name cut
        in the middle): ``valid/ndcg@10 0.4712  train/loss 12.31``."""
        import shutil

        try:
            cols = self._bar.ncols or shutil.get_terminal_size((100, 20)).columns
        except Exception:  # pragma: no cover
            cols = 100
        room = cols - (len(self.desc) + 2 * len(str(self.total or 0)) + 40)
        parts: list = []
        for k, v in shown.items():
            item = f"{k} {_fmt(v)}"
            if sum(len(p) + 2 for p in parts) + len(item) + 2 > room:
                break
            parts.append(item)
        return "  ".join(parts)

    def _line(self, done: int, shown: Mapping[str, float]) -> None:
        elapsed = time.perf_counter() - (self._t0 or time.perf_counter())
        tot = f"/{self.total}" if self.total else ""
        width = len(str(self.total)) if self.total else 1
        parts = [f"{self.desc} {done:>{width}}{tot}"]
        parts += [f"{k} {_fmt(v)}" for k, v in shown.items()]
        per = elapsed / max(self._count, 1)
        parts.append(f"({per:.3g} s/{self.desc})")
        print("  ".join(parts), file=self._out(), flush=True)
        self._last_line_step = done

    def finish(self, message: Optional[str] = None) -> None:
        """Close the bar (and print ``message`` if given)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif (not self.quiet and self._last_step is not None
              and self._last_step != self._last_line_step):
            self._line(self._last_step, self._last)  # the final round of an early stop
        if message and not self.quiet:
            print(message, file=self._out(), flush=True)

    # ------------------------------------------------------------------ callback
    def on_fit_start(self, ranker: Any, info: FitInfo) -> None:
        self.start(info.n_rounds if self.total is None else self.total)

    def on_round_end(self, ranker: Any, record: RoundRecord) -> None:
        """Show the record's metrics (``train/loss``, ``valid/ndcg@10``, ...); never stops.
        The rounds are numbered as the fit numbers them (1-based ``record.round``): a
        resumed or continued fit counts on from the rounds it starts after."""
        if self._count == 0 and self._t0 is not None:
            self._offset = max(int(record.round) - 1, 0)
            if self._offset and self.total is not None and self._offset >= self.total:
                self.total += self._offset  # a warm start: n_rounds more rounds
        self.update(record.round, {"metrics": record.metrics})
        return None

    def on_fit_end(self, ranker: Any, model: Any = None) -> None:
        self.finish()
