"""The one evaluation / early-stopping / callback machinery shared by every algorithm.

An algorithm's ``fit`` opens a :class:`FitMonitor` and, each round, tells it what the round
added to the model (``add``: weak models and their weights, or ``set_scores`` for a model
that is rebuilt each iteration) and hands it the round's :class:`~torchrankboost.contract.
RoundRecord` (``end_round``). The monitor keeps the running scores of every evaluation set
(incrementally: ``scores += weight · weak_model(X_valid)``), computes the metrics (parsed
by :func:`torchrankboost.registry.metric`, ``"loss"`` being the algorithm's objective on that
set), fills ``evals_result_``, tracks the best round (the first metric on the first
evaluation set), appends the record to ``history_`` and calls the callbacks. A NaN in that
metric (the one that picks the best round and drives early stopping) stops the run with a
:class:`~torchrankboost.contract.NumericalError` naming the set and the metric (it is never
taken for "no improvement"); a NaN in any other metric (a report metric undefined on that
set, e.g. AUC without positives) is recorded and shown as ``nan``. Early stopping is the
:class:`~torchrankboost.boosting.callbacks.EarlyStopping` callback over the same record; at
the end (:meth:`FitMonitor.finish`) the model is cut back to the best round when
``early_stopping_rounds`` was given.

A fit that does not finish — Ctrl-C, an exception in a callback, a loss that turns NaN —
still keeps the model of its last good round: every algorithm's ``fit`` (any subclass of
:class:`FitState`) is wrapped so that on the way out of an exception ``model_`` is the model
of the rounds recorded so far (cut back to the best round under early stopping; ``None``
when no round finished), its ``info["partial"]`` is ``True`` and ``stop_reason_`` says why.
The algorithm tells the monitor how to build that model in :meth:`FitMonitor.start`
(``build=``). The same wrapper runs ``fit`` with torch limited to the algorithm's
``n_threads`` intra-op threads (one by default; restored afterwards; see
:mod:`torchrankboost._threads`).

Data-parallel fits (:mod:`torchrankboost.parallel`): the algorithm passes the fit's
:class:`FitComm` (``comm=``). Each rank holds a shard of every evaluation set; the monitor
combines the metrics exactly (per-query metrics: the all-reduced sum of the per-query values
over the all-reduced query count, one all-reduce per round for every set and metric;
``"loss"``: the ranks' values summed, or their log-sum-exp for a log-loss such as RankBoost's
``ln F̃``), so the best round and early stopping agree on every rank. The callbacks run on
rank 0 only (progress output, TensorBoard, user callbacks); early stopping runs on every rank
(it reads the combined metrics) and a stop asked by a callback on rank 0 reaches the other
ranks through the round's closing all-reduce, as does an exception in a callback (every rank
then raises :class:`~torchrankboost.parallel.DistributedError`).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from .._errors import first_line
from .. import registry
from ..params import Params
from .._threads import DEFAULT_THREADS, limit_threads
from ..metrics._memo import new_label_memo, remembering_label_side
from ..contract import FitInfo, NumericalError, RoundRecord
from ..parallel import FitComm
from .callbacks import BestTracker, EarlyStopping
from .inputs import eval_inputs
from .weights import split_init_score
from ..contract import ArrayLike, EvalSets, MetricSpec

__all__ = ["FitMonitor", "FitState", "BestTracker", "resolve_metrics", "running_monitor"]

F64 = torch.float64


def resolve_metrics(eval_metric: MetricSpec, loss: Optional[Callable] = None
                    ) -> List[registry.Metric]:
    """A list of :class:`~torchrankboost.registry.Metric` from one spec or a list of specs
    (names, callables, ``(name, fn, greater_is_better)`` tuples, Metric objects)."""
    single = not isinstance(eval_metric, (list, tuple)) or (
        isinstance(eval_metric, tuple) and len(eval_metric) == 3 and callable(eval_metric[1]))
    specs = [eval_metric] if single else list(eval_metric)
    out = []
    for m in specs:
        try:
            out.append(registry.metric(m, loss=loss))
        except ValueError as exc:
            raise ValueError(f"eval_metric: {exc}") from None
    return out


class _Hooks:
    """Calls the callbacks' optional ``on_fit_start(ranker, info)``,
    ``on_round_end(ranker, record)`` and ``on_fit_end(ranker, model)``."""

    def __init__(self, callbacks: Sequence[Any]):
        self.callbacks = list(callbacks)

    def _call(self, name: str, *args) -> List[Any]:
        out = []
        for cb in self.callbacks:
            fn = getattr(cb, name, None)
            out.append(fn(*args) if callable(fn) else None)
        return out

    def start(self, ranker, info: FitInfo) -> None:
        self._call("on_fit_start", ranker, info)

    def round(self, ranker, record: RoundRecord) -> Optional[Any]:
        """The first callback that asked for a stop (``None`` when none did)."""
        asks = self._call("on_round_end", ranker, record)
        return next((cb for cb, r in zip(self.callbacks, asks) if r), None)

    def end(self, ranker, model) -> None:
        self._call("on_fit_end", ranker, model)


class FitState(Params):
    """The attributes every fitted algorithm exposes (set before any fit, so an unfitted
    algorithm already satisfies :class:`~torchrankboost.contract.Ranker`)."""

    model_: Any = None
    history_: List[RoundRecord]
    evals_result_: Dict[str, Dict[str, List[float]]]
    best_round_: Optional[int] = None
    best_score_: Optional[float] = None
    stop_reason_: Optional[str] = None
    #: torch intra-op threads while ``fit`` runs (restored after; ``None``: torch's own
    #: setting). One by default: see :mod:`torchrankboost._threads` for why.
    n_threads: Optional[int] = DEFAULT_THREADS
    #: whether ``fit(init_model=..., resume=...)`` can continue a model (the algorithm's
    #: state is the ensemble's scores; see :mod:`~torchrankboost.boosting.checkpoint`)
    can_continue: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if callable(fit) and not getattr(fit, "_keeps_partial", False):
            cls.fit = _keeping_partial_model(fit)

    def _reset_fit_state(self) -> None:
        self.model_ = None
        self.history_ = []
        self.evals_result_ = {}
        self.best_round_ = None
        self.best_score_ = None
        self.stop_reason_ = None

    def predict(self, X: ArrayLike, **kwargs: Any) -> Tensor:
        """Scores of the fitted model (``model_.predict``)."""
        if self.model_ is None:
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit() first")
        return self.model_.predict(X, **kwargs)


def running_monitor(ranker) -> Optional["FitMonitor"]:
    """The :class:`FitMonitor` of ``ranker``'s running fit (``None`` outside a fit)."""
    return ranker.__dict__.get("_fit_monitor")


def eval_offsets(eval_init_score, evals) -> list:
    """Each evaluation set's offset: ``0.0``, or a ``(n_v,)`` float64 tensor."""
    if eval_init_score is None:
        return [0.0] * len(evals)
    if not isinstance(eval_init_score, (list, tuple)) or len(eval_init_score) != len(evals):
        raise ValueError(f"eval_init_score must be a list with one entry (None, a float or "
                         f"one score per document) per eval_set entry ({len(evals)})")
    out = []
    for i, (v, e) in enumerate(zip(eval_init_score, evals)):
        c, per = split_init_score(v, e[1].shape[0], device=e[1].device,
                                  name=f"eval_init_score[{i}]")
        out.append(per if per is not None else float(c or 0.0))
    return out


def _is_nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def _keeping_partial_model(fit):
    """``fit`` that, when it raises (Ctrl-C included), leaves the model of the last good
    round in ``model_`` with ``stop_reason_`` saying why (see the module docstring)."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        self.__dict__.pop("_fit_monitor", None)
        try:
            with limit_threads(getattr(self, "n_threads", DEFAULT_THREADS)):
                out = fit(self, *args, **kwargs)
        except BaseException as exc:
            monitor = self.__dict__.pop("_fit_monitor", None)
            if monitor is not None:
                monitor.keep_partial(exc)
            raise
        self.__dict__.pop("_fit_monitor", None)
        return out

    wrapper._keeps_partial = True
    return wrapper


class FitMonitor:
    """One fit's evaluation sets, metrics, history, best round, callbacks and stop reason.

    Args:
        ranker: the algorithm (its ``history_``, ``evals_result_``, ``best_round_``,
            ``best_score_`` and ``stop_reason_`` are reset and kept up to date).
        n_features, device: of the training ``X`` (each evaluation set must match).
        eval_set, eval_metric, early_stopping_rounds, callbacks: as in ``fit``.
        loss: ``loss(scores, labels, groups)``, the algorithm's objective (the ``"loss"``
            metric); ``None`` when it has none.
        base_score: the model's initial constant score (start of the running eval scores).
        train: ``(labels, groups)`` of the training set to evaluate the metrics on it too
            (``eval_train``); the algorithm then passes its training scores to ``end_round``.
        comm: the :class:`FitComm` of a data-parallel fit (see the module docstring); the
            sets and the training data are then this rank's shards.
        loss_combine: how the ranks' values of the ``"loss"`` metric combine: ``"sum"`` (a
            loss summed over queries) or ``"logsumexp"`` (the log of such a sum).
        eval_init_score: one offset per evaluation set (``None``, a float or ``(n_v,)``),
            added to its running scores (the sets' own ``init_score``, as in LightGBM).
    """

    def __init__(self, ranker: Any, *, n_features: int, device: torch.device,
                 eval_set: EvalSets = None,
                 eval_metric: MetricSpec = "ndcg@10", early_stopping_rounds: Optional[int] = None,
                 callbacks: Sequence[Any] = (), loss: Optional[Callable] = None,
                 base_score: float = 0.0, train: Optional[Sequence[Any]] = None,
                 comm: Optional[FitComm] = None,
                 loss_combine: str = "sum", eval_init_score: Optional[Sequence[Any]] = None):
        ranker._reset_fit_state()
        self.ranker = ranker
        self.comm = comm if comm is not None else FitComm(None)
        if loss_combine not in ("sum", "logsumexp"):
            raise ValueError(f"loss_combine must be 'sum' or 'logsumexp', got {loss_combine!r}")
        self.loss_combine = loss_combine
        self._build: Optional[Callable[[int], Any]] = None
        self.offset = 0  # rounds of the model the fit continues (init_model), before round 1
        self.snapshot: Optional[Callable[[], tuple]] = None  # the fit's state (checkpoints)
        self.evals = eval_inputs(eval_set, n_features, device=device)
        self._label_memo = new_label_memo()  # metrics' label side, once per fit
        self.train = train
        self.metrics = (resolve_metrics(eval_metric, loss)
                        if (self.evals or train is not None) else [])
        self.patience = None
        if early_stopping_rounds is not None:
            if isinstance(early_stopping_rounds, bool) or int(early_stopping_rounds) < 1:
                raise ValueError(f"early_stopping_rounds must be >= 1, got "
                                 f"{early_stopping_rounds}")
            if not self.evals:
                raise ValueError("early_stopping_rounds needs an eval_set")
            self.patience = int(early_stopping_rounds)
        # the callbacks run on rank 0 only; early stopping on every rank (combined metrics)
        cbs = list(callbacks) if self.comm.is_main else []
        if self.patience is not None:
            stopper = EarlyStopping(self.patience)
            stopper.label = f"{self.evals[0][0]} {self.metrics[0].name}"
            cbs.append(stopper)
        self.hooks = _Hooks(cbs)
        self.offsets = eval_offsets(eval_init_score, self.evals)
        self.scores = [torch.full((e[1].shape[0],), float(base_score), dtype=F64,
                                  device=e[1].device) + o for e, o in zip(self.evals, self.offsets)]
        self.best = BestTracker(self.metrics[0].greater_is_better if self.metrics else True)
        ranker.evals_result_ = {"train": {"loss": []}}
        if train is not None:
            for m in self.metrics:
                ranker.evals_result_["train"].setdefault(m.name, [])
        for name, *_ in self.evals:
            ranker.evals_result_[name] = {m.name: [] for m in self.metrics}
        self._t = time.perf_counter()
        ranker._fit_monitor = self  # for the model of the last good round if the fit fails

    # ---------------------------------------------------------------- lifecycle
    @property
    def eval_names(self) -> List[str]:
        return [e[0] for e in self.evals]

    @property
    def metric_names(self) -> List[str]:
        return [m.name for m in self.metrics]

    def start(self, info: FitInfo, build: Optional[Callable[[int], Any]] = None) -> None:
        """Complete ``info`` (evaluation set and metric names) and call ``on_fit_start``.
        ``build(n)`` gives the model of the first ``n`` rounds (as for :meth:`finish`): the
        model kept when the fit is interrupted or fails."""
        self._build = build
        info.eval_names = self.eval_names
        info.metric_names = self.metric_names
        with self.comm.local():
            self.hooks.start(self.ranker, info)
        self.comm.check()
        self._t = time.perf_counter()

    def add(self, terms: Sequence = (), intercept: float = 0.0) -> None:
        """The round added ``Σ weight · model(x) + intercept`` to the model: update the
        running scores of every evaluation set."""
        for j, (_, Xv, _, _) in enumerate(self.evals):
            s = self.scores[j]
            if intercept:
                s = s + float(intercept)
            for model, weight in terms:
                s = s + float(weight) * model.predict(Xv).to(F64)
            self.scores[j] = s

    def set_scores(self, predict: Callable[[Tensor], Tensor]) -> None:
        """The model after the round scores ``predict(X)`` (a model rebuilt each iteration)."""
        for j, (_, Xv, _, _) in enumerate(self.evals):
            self.scores[j] = predict(Xv).to(F64) + self.offsets[j]

    def stop(self, reason: str) -> None:
        """The algorithm stops on its own (converged, undefined step...): record why."""
        self.ranker.stop_reason_ = reason

    def end_round(self, record: RoundRecord, train_scores: Optional[Tensor] = None) -> bool:
        """Evaluate, record and call the callbacks; ``True`` when a callback (early stopping
        among them) asks to stop."""
        r = self.ranker
        t_eval = time.perf_counter()
        metrics = record.metrics
        if record.loss is not None:
            metrics.setdefault("train", {})["loss"] = float(record.loss)
            r.evals_result_["train"]["loss"].append(float(record.loss))
        use_train = self.train is not None and train_scores is not None
        values = self._metric_values(record, train_scores if use_train else None)
        if use_train:
            for m in self.metrics:
                v = (float(record.loss) if m.name == "loss" and record.loss is not None
                     else values[("train", m.name)])
                metrics.setdefault("train", {})[m.name] = v
                if m.name != "loss" or record.loss is None:
                    r.evals_result_["train"][m.name].append(v)
        for j, (name, *_) in enumerate(self.evals):
            metrics[name] = {}
            for i, m in enumerate(self.metrics):
                v = values[(j, m.name)]
                if _is_nan(v) and i == 0 and j == 0:  # the others are reported as nan
                    raise NumericalError(
                        f"round {record.round}: the evaluation metric {name} {m.name} is NaN "
                        f"(undefined on this set, or it overflowed); choose another metric "
                        f"(eval_metric / --metric)", round=record.round)
                metrics[name][m.name] = v
                r.evals_result_[name][m.name].append(v)
        record.extra.setdefault("seconds_eval", time.perf_counter() - t_eval)
        if self.evals and self.metrics:
            self.best.update(record.round, metrics[self.evals[0][0]][self.metrics[0].name])
            r.best_round_, r.best_score_ = self.best.round, self.best.score
            record.best_round, record.best_score = self.best.round, self.best.score
        now = time.perf_counter()
        if not record.seconds:
            record.seconds = now - self._t
        self._t = now
        r.history_.append(record)
        stopper = None
        with self.comm.local():
            stopper = self.hooks.round(r, record)
        # the round's closing all-reduce (the local flag in one process): a stop asked on
        # any rank (rank 0's callbacks) or a failure (a callback that raised) reaches every
        # rank
        if float(self.comm.sum(lambda: [1.0 if stopper is not None else 0.0], size=1)[0]) == 0:
            return False
        reason = None if stopper is None else (
            getattr(stopper, "reason", None)
            or f"round {record.round}: a callback requested a stop")
        r.stop_reason_ = self.comm.broadcast(reason, src=0) or reason or (
            f"round {record.round}: a callback on rank 0 requested a stop")
        return True

    def _metric_values(self, record: RoundRecord, train_scores: Optional[Tensor]) -> dict:
        """Every metric of every set (and of the training data) over every rank's queries
        (:meth:`~torchrankboost.parallel.FitComm.metrics`: one flagged all-reduce; the
        metrics themselves in one process): ``{(set index or "train", metric name):
        value}``."""
        keys, jobs = [], []
        if train_scores is not None:
            y, g = self.train
            for m in self.metrics:
                if not (m.name == "loss" and record.loss is not None):
                    keys.append(("train", m.name))
                    jobs.append((m, train_scores, y, g))
        for j, (_, _, yv, gv) in enumerate(self.evals):
            for m in self.metrics:
                keys.append((j, m.name))
                jobs.append((m, self.scores[j], yv, gv))
        with remembering_label_side(self._label_memo):  # the same labels every round
            values = self.comm.metrics(jobs, loss_combine=self.loss_combine)
        return dict(zip(keys, values))

    @property
    def n_rounds(self) -> int:
        """Rounds of the model so far (those of a continued model included)."""
        return self.offset + len(self.ranker.history_)

    def kept_rounds(self) -> int:
        """Rounds the final model keeps: the best round with early stopping, else all."""
        if self.patience is not None and self.best.round is not None:
            return self.best.round
        return self.n_rounds

    def keep_partial(self, exc: BaseException) -> None:
        """The fit stopped with ``exc``: keep the model of the last good round in the
        ranker's ``model_`` (and in ``exc.model`` of a :class:`NumericalError` without one),
        with ``stop_reason_`` saying why. Never raises."""
        r = self.ranker
        if r.model_ is not None:  # finish() already ran (e.g. a failing on_fit_end)
            return
        n = self.kept_rounds()
        if isinstance(exc, KeyboardInterrupt):
            why = f"interrupted (KeyboardInterrupt) after round {self.n_rounds}"
        elif isinstance(exc, NumericalError):
            why = first_line(exc)
        else:
            why = (f"the fit failed after round {self.n_rounds} with {type(exc).__name__}: "
                   f"{first_line(exc)}")
        r.stop_reason_ = why
        model = None
        if self._build is not None and n > 0:
            try:
                model = self._build(n)
            except Exception as err:  # noqa: BLE001 - reported; the original error goes on
                warnings.warn(f"could not keep the model of the last good round: "
                              f"{type(err).__name__}: {err}", RuntimeWarning, stacklevel=3)
                model = None
        if model is None and isinstance(exc, NumericalError) and n > 0:
            model = exc.model
        if model is not None:
            info = getattr(model, "info", None)
            if isinstance(info, dict):
                info.update({"partial": True, "stop_reason": why, "best_round": r.best_round_,
                             "best_score": r.best_score_, "evals_result": r.evals_result_})
            if isinstance(exc, NumericalError) and exc.model is None:
                exc.model = model
        r.model_ = model

    def finish(self, build: Callable[[int], Any]) -> Any:
        """``build(n_rounds)`` the final model (cut back to the best round with early
        stopping), note the evaluation results in its ``info``, call ``on_fit_end``."""
        r = self.ranker
        model = build(self.kept_rounds())
        info = getattr(model, "info", None)
        if isinstance(info, dict):
            info.update({"best_round": r.best_round_, "best_score": r.best_score_,
                         "evals_result": r.evals_result_, "stop_reason": r.stop_reason_})
        r.model_ = model
        with self.comm.local():
            self.hooks.end(r, model)
        self.comm.check()
        return model
