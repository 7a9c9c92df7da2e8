r"""Warm start, checkpoints and exact resume of a boosting fit.

**Warm start** (``fit(..., init_model=model_or_path)``): the fit continues an
:class:`~.ensemble.Ensemble` ``F_k`` (fitted here, loaded from a file, or any ensemble of the
same form): the training and evaluation scores start at ``F_k(x)`` (the base score is
``F_k``'s), the rounds are numbered ``k+1 … k+n_rounds`` (LightGBM's and XGBoost's
``init_model`` / ``xgb_model``: ``n_rounds`` *more* rounds) and the returned model holds the
``k`` old rounds followed by the new ones. Early stopping counts in the same numbering (it
can cut back to any round after ``k``). Nothing else of the first fit is kept: continuing a
``k``-round model by ``m`` rounds gives the ``(k+m)``-round model when nothing random
intervenes (no query subsampling: the weak learner's generator is seeded by the round
number, so feature sub-sampling continues as in one run).

**Checkpoints** (:class:`Checkpoint`, a callback): every ``every`` rounds the fit's whole
state goes to one file, written atomically through :mod:`torchrankboost._modelfile`
(safetensors + JSON, no pickle): the ensemble so far, the round, the training loss, the
random generator's state (query subsampling; a ``uint8`` tensor), the evaluation history,
the best round and score (the early-stopping state) and the state of callbacks that keep
one (``checkpoint_state()`` / ``load_checkpoint_state(state)``, e.g.
:class:`~.callbacks.EarlyStopping` with a ``key``).

**Exact resume** (``fit(..., resume=path)``): the same fit (same data, same settings)
started from a checkpoint continues at the next round with the saved state, so an
interrupted run resumed from its last checkpoint gives the model of the run left alone, bit
for bit (the scores are rebuilt from the ensemble, whose float64 round-order sums are the
fit's own; on several processes every rank rebuilds its shard's scores). ``n_rounds`` is
the total the resumed run goes to.

Which algorithms: the :class:`~.booster.Booster` (and :class:`~.qbrank.QBRank`,
:class:`~.qbrank.GBT`), :class:`~.rankboost.RankBoost` (every variant), :class:`~.pnorm_push.
PNormPush`; the others (whose state is not a function of the ensemble's scores) refuse
``init_model`` and ``resume`` with a ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor

from ..contract import RoundRecord
from .callbacks import Callback
from .ensemble import Ensemble
from .evaluation import running_monitor

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "Start", "open_start",
           "restore_monitor", "KEY", "FORMAT"]

FORMAT = "torchrankboost.Checkpoint"
FORMAT_VERSION = 1
KEY = "checkpoint"
F64 = torch.float64


# ------------------------------------------------------------------------- the callback
class Checkpoint(Callback):
    """Write the fit's state to ``path`` after every ``every``-th round (see the module
    docstring); atomic, so an interruption leaves the previous checkpoint whole.

    ``fit(..., resume=path)`` (``torchrankboost train --resume PATH``) continues from it.
    On several processes the callback runs on rank 0 (the state is the same on every rank).
    ``last_round``: the round of the last checkpoint written (``None`` before the first).
    """

    def __init__(self, path, *, every: int = 10):
        if isinstance(every, bool) or int(every) != every or int(every) < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.path = os.fspath(path)
        self.every = int(every)
        self.last_round: Optional[int] = None

    def on_round_end(self, ranker, record):
        if record.round % self.every == 0:
            save_checkpoint(self.path, ranker)
            self.last_round = record.round
        return None


def save_checkpoint(path, ranker) -> None:
    """Write the state of ``ranker``'s running fit (called from a callback) to ``path``."""
    from .._modelfile import write_model_file

    monitor = running_monitor(ranker)
    snap = getattr(monitor, "snapshot", None)
    if snap is None:
        raise ValueError(f"{type(ranker).__name__}: checkpoints need a fit that supports "
                         f"resume (Booster, QBRank, GBT, RankBoost, PNormPush), during the fit")
    ensemble, tensors, meta = snap()
    ens_tensors, ens_meta = ensemble.state()
    tensors = dict(tensors)
    tensors.update({f"model.{k}": v for k, v in ens_tensors.items()})
    meta = dict(meta, format=FORMAT, version=FORMAT_VERSION, ensemble=ens_meta,
                monitor=_monitor_state(monitor))
    write_model_file(path, tensors, KEY, _jsonable(meta), what="Checkpoint")


@dataclass
class Saved:
    """A checkpoint read back: the ensemble, the JSON state and the extra tensors."""

    ensemble: Ensemble
    meta: dict
    tensors: Dict[str, Tensor]

    @property
    def round(self) -> int:
        return int(self.meta["round"])


def load_checkpoint(path, *, device=None) -> Saved:
    """Read a checkpoint written by :class:`Checkpoint` (``ValueError`` for another file)."""
    from .._modelfile import ModelFileError, check_ensemble, read_model_file
    from .ensemble import default_registry

    meta, tensors = read_model_file(path, KEY, "checkpoint", device=device)
    if meta.get("format") != FORMAT or int(meta.get("version", 0)) > FORMAT_VERSION:
        raise ModelFileError(f"{path}: not a checkpoint this library can read "
                             f"(format {meta.get('format')!r}, version {meta.get('version')})")
    try:
        em = meta["ensemble"]
        models = []
        for t, mmeta in enumerate(em["models"]):
            pre = f"model.m{t}."
            models.append(default_registry(
                {k[len(pre):]: v for k, v in tensors.items() if k.startswith(pre)}, mmeta))
        ens = Ensemble(models, tensors["model.weights"].to("cpu", F64).tolist(),
                       base_score=float.fromhex(em["base_score"]),
                       num_features=int(em["num_features"]), info=em.get("info") or {})
        int(meta["round"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ModelFileError(f"{path}: invalid checkpoint: {type(exc).__name__}: {exc}"
                             ) from None
    check_ensemble(path, ens, em)
    return Saved(ens, meta, {k: v for k, v in tensors.items() if not k.startswith("model.")})


def _jsonable(obj):
    """``obj`` with what JSON cannot hold (tensors, objects) as plain values or reprs."""
    def default(o):
        if isinstance(o, Tensor):
            return o.tolist()
        return repr(o)
    return json.loads(json.dumps(obj, default=default, allow_nan=True))


def _monitor_state(monitor) -> dict:
    r = monitor.ranker
    cbs = [cb.checkpoint_state() for cb in monitor.hooks.callbacks
           if callable(getattr(cb, "checkpoint_state", None))]
    return {"offset": monitor.offset, "best_round": monitor.best.round,
            "best_score": monitor.best.score, "stop_reason": r.stop_reason_,
            "history": [dataclasses.asdict(rec) for rec in r.history_],
            "evals_result": r.evals_result_, "callbacks": cbs}


def restore_monitor(monitor, state: dict) -> None:
    """Put a checkpoint's monitor state (the history, the evaluation results, the best
    round and score, the callbacks' states) back into a running fit's ``monitor``."""
    r = monitor.ranker
    monitor.offset = int(state["offset"])
    monitor.best.round, monitor.best.score = state["best_round"], state["best_score"]
    r.best_round_, r.best_score_ = monitor.best.round, monitor.best.score
    r.history_ = [RoundRecord(**rec) for rec in state["history"]]
    for name, per in state["evals_result"].items():
        for m, vals in per.items():
            r.evals_result_.setdefault(name, {})[m] = list(vals)
    keeps = [cb for cb in monitor.hooks.callbacks
             if callable(getattr(cb, "load_checkpoint_state", None))]
    for cb, st in zip(keeps, state.get("callbacks", [])):
        cb.load_checkpoint_state(st)


# ------------------------------------------------------------------------- starting points
@dataclass
class Start:
    """Where a fit starts: the ensemble it continues and, for an exact resume, the saved
    state (``saved``; ``None`` for a warm start)."""

    ensemble: Ensemble
    saved: Optional[Saved] = None

    @property
    def base_score(self) -> float:
        return self.ensemble.base_score

    @property
    def k(self) -> int:
        """The rounds already done."""
        return self.saved.round if self.saved is not None else self.ensemble.n_rounds

    def rounds(self, n_rounds: int) -> range:
        """The rounds this fit runs: ``k+1 … n_rounds`` (resume: the total) or
        ``k+1 … k+n_rounds`` (warm start: more rounds)."""
        last = n_rounds if self.saved is not None else self.k + n_rounds
        return range(self.k + 1, last + 1)

    def scores(self, X: Tensor) -> Tensor:
        """``(n,)`` float64 scores of the ensemble (the fit's own round-order sums)."""
        return self.ensemble.to(X.device).predict(X, batch_size=None).to(F64)

    def check(self, facts: dict) -> None:
        """A resumed fit must be the checkpointed one: the algorithm, the data's sizes, the
        seed and the subsampling (``ValueError`` naming the first difference)."""
        want = dict(self.saved.meta.get("facts", {})) if self.saved is not None else {}
        diff = [k for k in want if k in facts and want[k] != facts[k]]
        if diff:
            k = diff[0]
            raise ValueError(f"resume: the checkpoint is of another fit ({k} was {want[k]!r}, "
                             f"now {facts[k]!r}); resume with the same data and settings")

    def restore(self, monitor, X, evals, info: dict) -> None:
        """The evaluation scores from the ensemble, the saved monitor state, and the rounds
        of the continued model in the new model's ``info["init_rounds"]``."""
        for j, (_, Xv, _, _) in enumerate(evals):
            monitor.scores[j] = self.scores(Xv.to(X.device))
        if self.saved is not None:
            restore_monitor(monitor, self.saved.meta["monitor"])
        else:
            monitor.offset = self.k
        info["init_rounds"] = monitor.offset


def open_start(ranker, init_model=None, resume=None, *, init_score=None) -> Optional[Start]:
    """The :class:`Start` of a fit from ``init_model`` (an :class:`Ensemble` or a path to a
    saved one) or ``resume`` (a checkpoint path); ``None`` without either. ``ValueError``
    for both, for an ``init_score`` beside them, or for an algorithm that cannot continue."""
    if init_model is None and resume is None:
        return None
    what = "init_model" if resume is None else "resume"
    if init_model is not None and resume is not None:
        raise ValueError("give init_model or resume, not both (a checkpoint holds its model)")
    if not getattr(ranker, "can_continue", False):
        raise ValueError(f"{type(ranker).__name__} cannot continue a model ({what}): its "
                         f"state is not a function of the ensemble's scores; use Booster, "
                         f"QBRank, GBT, RankBoost or PNormPush")
    if init_score is not None:
        raise ValueError(f"init_score cannot be given with {what} (the model's scores are "
                         f"the initial scores)")
    if resume is not None:
        saved = load_checkpoint(resume)
        ens = saved.ensemble
    else:
        saved, ens = None, _as_ensemble(init_model)
    return Start(ens.truncate(ens.n_rounds), saved)  # a copy: the caller's stays as it is


def _as_ensemble(model) -> Ensemble:
    if isinstance(model, (str, os.PathLike)):
        return Ensemble.load(model)
    if isinstance(getattr(model, "model_", None), Ensemble):  # a fitted algorithm
        return model.model_
    for name in ("models", "weights", "base_score", "num_features", "truncate", "predict"):
        if not hasattr(model, name):
            raise ValueError(f"init_model must be an Ensemble (or a path to a saved one, or a "
                             f"fitted algorithm), got {type(model).__name__}")
    return model


# ------------------------------------------------------------------------- the Booster
def booster_snapshot(monitor, ensemble: Ensemble, objective, generator: torch.Generator,
                     facts: dict):
    """``(ensemble, tensors, meta)`` of a running :class:`~.booster.Booster` fit: the
    ensemble so far, the query subsample's generator state, the round, the objective's
    :meth:`~.objective.FitObjective.checkpoint_state` (the loss, whether the next round's
    gradient was fused with it) and the fit's ``facts``."""
    tensors = {"rng.subsample": generator.get_state()}
    meta = {"round": monitor.n_rounds, **objective.checkpoint_state(), "facts": facts}
    return ensemble, tensors, meta


def booster_resume(start: Optional[Start], *, n_rounds: int, facts: dict, monitor,
                   ensemble: Ensemble, objective, generator: torch.Generator, X: Tensor
                   ) -> range:
    """The rounds a :class:`~.booster.Booster` fit runs (``1 … n_rounds`` from scratch),
    its state set up from ``start``: the evaluation scores and the monitor's state, and for
    a resume the query subsample's ``generator`` state and the ``objective``'s (the loss,
    the fused gradient of the next round: :meth:`~.objective.FitObjective.restore`). The
    monitor learns to take snapshots; ``facts`` (the algorithm, the data's sizes, the seed,
    the subsampling) must be the checkpoint's."""
    facts = _jsonable(facts)
    monitor.snapshot = lambda: booster_snapshot(monitor, ensemble, objective, generator, facts)
    if start is None:
        return range(1, n_rounds + 1)
    start.check(facts)
    start.restore(monitor, X, monitor.evals, ensemble.info)
    rounds = start.rounds(n_rounds)
    if start.saved is not None:
        generator.set_state(start.saved.tensors["rng.subsample"].to("cpu", torch.uint8))
        objective.restore(start.saved.meta)
    return rounds


# ------------------------------------------------------------------------- the RankBoost family
def coordinate_resume(algo, start: Optional[Start], X: Tensor, s: Tensor):
    """``(rounds, s, l1)`` of a :class:`~.coordinate.CoordinateBoosting` fit: the 0-based
    rounds to run, the starting scores and ``‖λ‖₁ = Σ_t |w_t|`` (a continued model's), with
    the evaluation scores and a resume's monitor state restored; the monitor learns to take
    snapshots (the ensemble so far; no random state). The pair statistics' per-query
    centre (kept between rounds, see :mod:`._pair_stats`) is rebuilt from the scores of the
    round it was taken at (rank 0's round on several processes)."""
    monitor = algo.monitor_
    stats = getattr(algo, "stats_", None)
    facts = _jsonable(dict(algorithm=type(algo).__name__, n_docs=algo.totals_[0],
                           n_queries=algo.totals_[1]))
    if hasattr(stats, "track_centre"):
        stats.track_centre(lambda: monitor.n_rounds)
    monitor.snapshot = lambda: (algo.builder_.build(), {}, {
        "round": monitor.n_rounds, "facts": facts,
        "centre_round": getattr(stats, "centre_round", None)})
    if start is None:
        return range(algo.n_rounds), s, 0.0
    start.check(facts)
    start.restore(monitor, X, monitor.evals, algo.builder_.info)
    cr = start.saved.meta.get("centre_round") if start.saved is not None else None
    if cr is not None and hasattr(stats, "restore_centre"):
        stats.restore_centre(s + start.ensemble.predict(X, n_rounds=cr, batch_size=None), cr)
    l1 = 0.0
    for w in start.ensemble.weights:  # the loop's own order of sums
        l1 += abs(w)
    r = start.rounds(algo.n_rounds)
    return range(r.start - 1, r.stop - 1), s + start.scores(X), l1


def warm_start_init(ranker, previous):
    """scikit-learn's ``warm_start``: the model to continue (``None``: fit from scratch) with
    ``ranker.n_rounds`` set to the rounds still missing to its total (``ValueError`` when
    ``previous`` already has more rounds than the total)."""
    k = getattr(previous, "n_rounds", None)
    if k is None:  # nothing fitted yet, or a model without rounds (RankSVM): a new fit
        return None
    if not getattr(ranker, "can_continue", False):
        raise ValueError(f"warm_start: {type(ranker).__name__} cannot continue a model; "
                         f"use warm_start=False")
    if k > ranker.n_rounds:
        raise ValueError(f"warm_start: n_rounds={ranker.n_rounds} must be at least the "
                         f"{k} rounds of the fitted model")
    ranker.n_rounds = ranker.n_rounds - k
    return previous
