r"""The neural trainer: :class:`NeuralRanker`, a training algorithm of the ranker contract
(:mod:`torchrankboost.contract`) beside the boosting algorithms.

::

    from torchrankboost.nn import NeuralRanker
    ranker = NeuralRanker(model="transformer", loss="listnet", epochs=60)
    model = ranker.fit(X, y, groups, eval_set=[(Xv, yv, gv)], early_stopping_rounds=15)
    scores = model.predict(X_test, groups_test)        # a NeuralModel
    model.save("ranker.safetensors")                   # load_model(path) reads it back

**An epoch** is one pass over the training queries in batches of whole queries
(:class:`~torchrankboost.data.QueryBatchPlan`: at most ``max_docs`` documents per rank's
batch). Each step scores the batch (:class:`~torchrankboost.nn.MLPScorer` or
:class:`~torchrankboost.nn.ListwiseTransformer`), evaluates the loss — any registered loss,
summed over the batch's queries and divided by the step's query count over all ranks, so
the gradient is that of the mean over the step's queries whatever the batch size — and
takes one optimiser step (Adam by default). After each epoch the evaluation sets are scored
and the :class:`~torchrankboost.boosting.evaluation.FitMonitor` every algorithm uses records
the epoch as a round: metrics, ``history_``, the best epoch, early stopping on the first
metric of the first set (validation NDCG@10 by default), the callbacks (progress,
:class:`~torchrankboost.tensorboard.TensorBoardLogger` with the boosting runs' layout,
:class:`~torchrankboost.boosting.checkpoint.Checkpoint`). With early stopping the model of
the best epoch is returned.

**No host synchronisation in a step** (``precision`` ``"fp32"``/``"bf16"``): the data sit on
the device once (``device``); the batches' indices and sizes are planned on the host and
uploaded; with ``shuffle="batches"`` (default) each batch keeps its queries for the whole run
and its loss is bound once (:meth:`~torchrankboost.losses.RankingLoss.bind`: the label
work and every host read happen there), after which forward and backward read nothing on
the host; the epoch's loss is read once per epoch (a non-finite epoch loss raises
:class:`~torchrankboost.contract.NumericalError`). ``"fp16"`` adds the gradient scaler's
overflow test (one read per step). ``shuffle="queries"`` reshuffles the queries every epoch
(a bind per step).

**Several processes** (``torchrun``, ``torchrankboost train --nproc``): every rank holds the
whole training data; the plan deals each step's batches to the ranks (the same plan on
every rank, no communication), ``DistributedDataParallel``
(:func:`~torchrankboost.parallel.ddp.data_parallel`) averages the gradients, and the loss
scale ``W / |Q_step|`` makes them the gradient of the mean over the step's queries of every
rank: the same model as one process that takes the same global batches
(``batch_ranks=W``: each step the union of ``W`` ranks' batches). The evaluation sets are
the ranks' shards (the monitor combines the metrics exactly); rank 0 runs the callbacks.

**Checkpoints and exact resume.** The :class:`~torchrankboost.boosting.checkpoint.
Checkpoint` callback writes, every ``every`` epochs, the network, the optimiser's state, the
random generators (dropout), the gradient scaler, the best epoch's weights and the history
(safetensors + JSON, no pickle); ``fit(..., resume=path)`` continues from it and gives the
model of the uninterrupted run bit for bit (same data, settings, device and thread count).
``init_model`` (a :class:`~torchrankboost.nn.NeuralModel` or its file) starts from its
weights instead of a fresh network (warm start).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from .. import registry
from .._threads import DEFAULT_THREADS, resolve_device
from ..boosting.checkpoint import FORMAT as CHECKPOINT_FORMAT, KEY as CHECKPOINT_KEY, \
    restore_monitor
from ..boosting.evaluation import FitMonitor, FitState
from ..boosting.inputs import fit_inputs
from ..boosting.objective import LossCapabilities
from ..boosting.progress import ProgressCallback
from ..contract import FitInfo, NumericalError, RoundRecord
from ..data.batching import QueryBatchPlan, query_index
from ..parallel import FitComm, get_context
from ..parallel.ddp import data_parallel
from ..params import describe
from .model import FORMAT as MODEL_FORMAT, NeuralModel
from .models import ARCHITECTURES, build_network
from .training import (OPTIMIZERS, PRECISIONS, Scorer, autocast, load_optimizer_state,
                       load_rng_state, make_optimizer, make_scaler, optimizer_state,
                       rng_state, scaler_state)

__all__ = ["NeuralRanker"]

F64 = torch.float64


@dataclass
class _Run:
    """One fit's state."""

    net: nn.Module
    scorer: nn.Module
    opt: Any
    scaler: Any
    loss: Any
    plan: QueryBatchPlan
    offsets: np.ndarray
    X: Tensor
    y: Tensor
    dev: torch.device
    ctx: Any
    monitor: FitMonitor
    virtual: List[int]
    facts: dict
    first: int = 1
    step: int = 0
    epoch: int = 0
    best: Optional[Dict[str, Tensor]] = None
    bound: Dict[tuple, tuple] = field(default_factory=dict)
    resample: Any = None
    rngs: Optional[List[Dict[str, Tensor]]] = None  # each virtual rank's generators


def _positive(name: str, v, *, integer: bool = False, zero: bool = False):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and (v >= 0 if zero else v > 0) and (not integer or int(v) == v)
    if not ok:
        what = "an integer" if integer else "a finite number"
        raise ValueError(f"{name} must be {what} {'>= 0' if zero else '> 0'}, got {v!r}")
    return int(v) if integer else float(v)


class NeuralRanker(FitState):
    """Train a neural ranker (module docstring).

    Args:
        model: ``"transformer"`` (default, :class:`~torchrankboost.nn.ListwiseTransformer`),
            ``"mlp"`` (:class:`~torchrankboost.nn.MLPScorer`).
        model_params: the network's options (``d_model``, ``n_layers``, ``hidden``,
            ``dropout``, ``norm``...; ``n_features`` comes from the data).
        loss: a registered loss name (``torchrankboost list losses``) or a loss object
            with ``reduction="sum"``; ``loss_params``: the named loss's options.
        epochs: passes over the training queries (the maximum with early stopping).
        learning_rate, weight_decay, optimizer: the optimiser (``"adam"``, ``"adamw"``,
            ``"sgd"``).
        max_docs: documents per batch (of one rank), whole queries.
        shuffle: ``"batches"`` (fixed batches in a new order each epoch) or ``"queries"``.
        grad_clip: clip the gradient's norm to this (``None``: no clipping).
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` (autocast; fp16 with a scaler).
        device: where the data and the network live (``None``: the data's device).
        seed: the network's initialisation, the batches and dropout.
        batch_ranks: in one process, take each step the union of the batches of this many
            ranks (the global batches of a ``batch_ranks``-process run); on ``W`` processes
            the ranks are ``W × batch_ranks``.
        callbacks: callbacks of every fit (beside ``fit(callbacks=...)``).
        verbose: show progress (a bar on a terminal, lines elsewhere).
        n_threads: torch's CPU threads while fitting (default 1).
    """

    can_continue = True

    def __init__(self, *, model: Any = "transformer", model_params: Optional[dict] = None,
                 loss: Any = "listnet", loss_params: Optional[dict] = None, epochs: int = 60,
                 learning_rate: float = 1e-3, weight_decay: float = 0.0,
                 optimizer: str = "adam", max_docs: int = 2048, shuffle: str = "batches",
                 grad_clip: Optional[float] = None, precision: str = "fp32",
                 device: Any = None, seed: int = 0, batch_ranks: int = 1,
                 callbacks: Sequence[Any] = (), verbose: bool = False,
                 n_threads: Optional[int] = DEFAULT_THREADS):
        if isinstance(model, str) and model not in ARCHITECTURES:
            raise ValueError(f"model must be one of {', '.join(ARCHITECTURES)}, got {model!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
        if shuffle not in QueryBatchPlan.SHUFFLES:
            raise ValueError(f"shuffle must be one of {QueryBatchPlan.SHUFFLES}, got "
                             f"{shuffle!r}")
        self.model, self.model_params = model, dict(model_params or {})
        self.loss, self.loss_params = loss, dict(loss_params or {})
        self.epochs = _positive("epochs", epochs, integer=True)
        self.learning_rate = _positive("learning_rate", learning_rate)
        self.weight_decay = _positive("weight_decay", weight_decay, zero=True)
        self.optimizer, self.shuffle, self.precision = optimizer, shuffle, precision
        self.max_docs = _positive("max_docs", max_docs, integer=True)
        self.grad_clip = None if grad_clip is None else _positive("grad_clip", grad_clip)
        self.device, self.seed = device, int(seed)
        self.batch_ranks = _positive("batch_ranks", batch_ranks, integer=True)
        self.callbacks, self.verbose, self.n_threads = list(callbacks), verbose, n_threads
        self._reset_fit_state()

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, labels: Any, groups: Any = None, *, eval_set: Any = None,
            eval_metric: Any = "ndcg@10", early_stopping_rounds: Optional[int] = None,
            callbacks: Sequence[Any] = (), sample_weight: Any = None, group_weight: Any = None,
            init_model: Any = None, resume: Any = None) -> NeuralModel:
        """Train on ``(X, labels, groups)``; returns the :class:`NeuralModel` (also
        ``model_``). See the ranker contract for the arguments; ``init_model`` (a
        :class:`NeuralModel` or its file) starts from its weights, ``resume`` (a checkpoint
        of this fit) continues it exactly. Weights are refused (``ValueError``)."""
        if sample_weight is not None or group_weight is not None:
            raise ValueError("NeuralRanker takes no sample_weight or group_weight")
        if init_model is not None and resume is not None:
            raise ValueError("give init_model or resume, not both (a checkpoint holds its "
                             "model)")
        run = self._setup(X, labels, groups, eval_set, eval_metric, early_stopping_rounds,
                          callbacks, init_model, resume)
        for epoch in range(run.first, self.epochs + 1):
            if self._epoch(run, epoch):
                break
        return run.monitor.finish(lambda k: self._model_at(run, k))

    def _setup(self, X, labels, groups, eval_set, eval_metric, patience, callbacks,
               init_model, resume) -> _Run:
        ctx = get_context(None)
        comm = FitComm(ctx)
        dev = resolve_device(self.device) if self.device is not None else None
        X, y, g = fit_inputs(X, labels, groups, device=dev)
        dev = X.device
        X = X.to(torch.float32)
        torch.manual_seed(self.seed)
        net = self._network(X, init_model).to(dev)
        loss = self._make_loss()
        opt = make_optimizer(self.optimizer, net.parameters(), lr=self.learning_rate,
                             weight_decay=self.weight_decay)
        ranks = ctx.world_size * self.batch_ranks
        plan = QueryBatchPlan(g.to("cpu"), max_docs=self.max_docs, ranks=ranks,
                              seed=self.seed, shuffle=self.shuffle)
        cbs = list(self.callbacks) + list(callbacks)
        if self.verbose:
            cbs.append(ProgressCallback())
        with comm.local():
            monitor = FitMonitor(self, n_features=X.shape[1], device=dev, eval_set=eval_set,
                                 eval_metric=eval_metric, early_stopping_rounds=patience,
                                 callbacks=cbs, loss=loss, comm=comm)
        comm.check()
        facts = dict(algorithm="NeuralRanker", n_docs=int(X.shape[0]), n_queries=g.num_groups,
                     seed=self.seed, world=ranks, model=describe(self.model))
        first = ctx.rank * self.batch_ranks
        run = _Run(net=net, scorer=data_parallel(Scorer(net), ctx, dev), opt=opt,
                   scaler=make_scaler(dev, self.precision), loss=loss, plan=plan,
                   offsets=g.offsets.cpu().numpy(), X=X, y=y.to(dev), dev=dev, ctx=ctx,
                   monitor=monitor, virtual=list(range(first, first + self.batch_ranks)),
                   facts=facts)
        monitor.snapshot = lambda: self._snapshot(run)
        if self.batch_ranks > 1:  # every rank of a real run starts from the same generators
            run.rngs = [rng_state(dev) for _ in run.virtual]
        if resume is not None:
            self._resume(run, resume)
        self._announce(run, g)
        return run

    def _network(self, X: Tensor, init_model) -> nn.Module:
        if init_model is not None:
            start = NeuralModel.load(init_model) if isinstance(init_model, (str, os.PathLike)) \
                else init_model
            if not isinstance(start, NeuralModel):
                raise ValueError(f"init_model must be a NeuralModel or its file, got "
                                 f"{type(start).__name__}")
            if start.num_features != X.shape[1]:
                raise ValueError(f"init_model has {start.num_features} features, X has "
                                 f"{X.shape[1]}")
            return copy.deepcopy(start.network).train()
        if isinstance(self.model, nn.Module):
            if not (callable(getattr(self.model, "score", None))
                    and callable(getattr(self.model, "config", None))):
                raise ValueError("model must be 'mlp', 'transformer' or a network of "
                                 "torchrankboost.nn (with score() and config())")
            net = copy.deepcopy(self.model)
        else:
            params = dict(self.model_params)
            params.setdefault("n_features", int(X.shape[1]))
            net = build_network(self.model, **params)
        net.fit_normalisation(X)
        return net

    def _make_loss(self):
        if isinstance(self.loss, str):
            params = dict(self.loss_params)
            if params.get("reduction", "sum") != "sum":
                raise ValueError("the trainer divides the summed loss by the step's query "
                                 "count itself: drop reduction from loss_params")
            params["reduction"] = "sum"
            if registry.lookup("loss", self.loss).name == "smooth_margin":
                params.setdefault("scale", 1.0)
            return registry.resolve_loss(self.loss, **params)
        if self.loss_params:
            raise ValueError("loss_params go with a loss name")
        caps = LossCapabilities.of(self.loss)
        if caps.reduction != "sum" or not caps.binds:
            raise ValueError("a loss object must be a RankingLoss with reduction='sum'")
        return self.loss

    def _announce(self, run: _Run, g) -> None:
        params = dict(model=run.net.architecture, model_config=run.net.config(),
                      loss=describe(run.loss), learning_rate=self.learning_rate,
                      optimizer=self.optimizer, max_docs=self.max_docs,
                      precision=self.precision, device=str(run.dev), seed=self.seed)
        params.update(run.monitor.comm.describe())
        info = FitInfo(algorithm="neural", n_docs=int(run.X.shape[0]), n_queries=g.num_groups,
                       n_features=int(run.X.shape[1]), n_rounds=self.epochs, params=params)
        run.monitor.start(info, build=lambda k: self._model_at(run, k))

    # ------------------------------------------------------------------ one epoch
    def _epoch(self, run: _Run, epoch: int) -> bool:
        t0 = time.perf_counter()
        run.net.train()
        total = torch.zeros((), dtype=F64, device=run.dev)
        queries = 0
        steps = run.plan.steps(epoch - 1)
        for key, per_rank, count in steps:
            total = total + self._step(run, key, [per_rank[v] for v in run.virtual], count)
            queries += count
        total = run.ctx.all_reduce_sum(total.reshape(1).to("cpu", F64))
        value = float(total[0]) / max(queries, 1)
        if not math.isfinite(value):
            raise NumericalError(f"epoch {epoch}: the training loss is {value} (non-finite "
                                 f"scores or gradients); lower learning_rate or use "
                                 f"grad_clip", round=epoch)
        run.epoch = epoch
        current = NeuralModel(run.net)
        for j, (_, Xv, _, gv) in enumerate(run.monitor.evals):
            run.monitor.scores[j] = current.predict(Xv, gv).to(F64)
        record = RoundRecord(round=epoch, loss=value, step=self.learning_rate,
                             weight=self.learning_rate, seconds=time.perf_counter() - t0,
                             extra={"steps": len(steps), "queries": queries,
                                    "learning_rate": self.learning_rate})
        stop = run.monitor.end_round(record)
        if run.monitor.best.round == epoch:
            run.best = {k: v.detach().clone() for k, v in run.net.state_dict().items()}
        return stop

    def _batch(self, run: _Run, key: tuple, mine: np.ndarray):
        """``(index, groups, bound loss)`` of one rank's batch of a step (cached with fixed
        batches: the bind, and its host reads, happen once per batch)."""
        hit = run.bound.get(key)
        if hit is not None:
            return hit
        idx, gb = query_index(run.offsets, mine, run.dev)
        bound = run.loss.bind(run.y.index_select(0, idx), gb)
        if run.resample is None:
            run.resample = LossCapabilities.of(run.loss).with_bound(bound).resample or False
        hit = (idx, gb, bound)
        if self.shuffle == "batches":
            run.bound[key] = hit
        return hit

    def _step(self, run: _Run, key: tuple, mine: List[np.ndarray], count: int) -> Tensor:
        """One optimiser step over this process's batches ``mine`` (one per virtual rank,
        each with its own backward and, with several, its own random generators: the
        gradients add up as ``DistributedDataParallel``'s do over real ranks)."""
        run.opt.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=F64, device=run.dev)
        for j, batch in enumerate(mine):
            if run.rngs is not None:
                load_rng_state(run.rngs[j], run.dev)
            last = j == len(mine) - 1  # DDP reduces the gradients summed by then
            with contextlib.nullcontext() if last or run.ctx.world_size == 1 \
                    else run.scorer.no_sync():
                total = total + self._backward(run, (key, j), batch, count)
            if run.rngs is not None:
                run.rngs[j] = rng_state(run.dev)
        if run.scaler is not None:
            run.scaler.unscale_(run.opt)
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(run.net.parameters(), self.grad_clip)
        if run.scaler is not None:
            run.scaler.step(run.opt)
            run.scaler.update()
        else:
            run.opt.step()
        run.step += 1
        return total

    def _backward(self, run: _Run, key: tuple, batch: np.ndarray, count: int) -> Tensor:
        """Forward and backward of one rank's batch; its summed loss (float64)."""
        idx, gb, bound = self._batch(run, key, batch)
        with autocast(run.dev, self.precision):
            s = run.scorer(run.X.index_select(0, idx), gb)
        s = s.float()
        if run.resample:  # a loss with random state (YetiRank): new draws every step
            run.resample(bound, s.detach(), round=run.step)
        local = bound(s).sum()
        loss = local * (run.ctx.world_size / max(count, 1))
        (run.scaler.scale(loss) if run.scaler is not None else loss).backward()
        return local.detach().to(F64)

    # ------------------------------------------------------------------ models
    def _model_at(self, run: _Run, k: int) -> NeuralModel:
        """The model after epoch ``k``: the current weights, or the best epoch's."""
        net = copy.deepcopy(run.net)
        if k != run.epoch and run.best is not None and k == run.monitor.best.round:
            net.load_state_dict(run.best)
        info = {"algorithm": "neural", "model": net.architecture, "loss": describe(run.loss),
                "epochs": int(k), "precision": self.precision}
        return NeuralModel(net.eval(), info=info)

    def _snapshot(self, run: _Run):
        """``(model, tensors, meta)`` of the running fit (a checkpoint's content)."""
        tensors, opt_meta = optimizer_state(run.opt)
        tensors.update(rng_state(run.dev))
        for j, states in enumerate(run.rngs or ()):
            tensors.update({f"{k}.v{j}": v for k, v in states.items()})
        if run.best is not None:
            tensors.update({f"best.{k}": v.cpu() for k, v in run.best.items()})
        meta = {"round": run.epoch, "step": run.step, "facts": run.facts,
                "optimizer": opt_meta, "scaler": scaler_state(run.scaler)}
        return NeuralModel(run.net), tensors, meta

    def _resume(self, run: _Run, path) -> None:
        from .._modelfile import ModelFileError, read_model_file

        meta, tensors = read_model_file(path, CHECKPOINT_KEY, "checkpoint", device="cpu")
        model_meta = meta.get("ensemble") or {}
        if meta.get("format") != CHECKPOINT_FORMAT or model_meta.get("format") != MODEL_FORMAT:
            raise ModelFileError(f"{path}: not a checkpoint of a NeuralRanker fit")
        want = meta.get("facts", {})
        diff = [k for k in want if run.facts.get(k) != want[k]]
        if diff:
            raise ValueError(f"resume: the checkpoint is of another fit ({diff[0]} was "
                             f"{want[diff[0]]!r}, now {run.facts.get(diff[0])!r}); resume "
                             f"with the same data and settings")
        state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
        run.net.load_state_dict({k: v.to(run.dev) for k, v in state.items()})
        load_optimizer_state(run.opt, {k: v.to(run.dev) if not k.endswith(".step") else v
                                       for k, v in tensors.items()}, meta["optimizer"])
        if run.scaler is not None and meta.get("scaler"):
            run.scaler.load_state_dict(meta["scaler"])
        best = {k[len("best."):]: v.to(run.dev) for k, v in tensors.items()
                if k.startswith("best.")}
        run.best = best or None
        restore_monitor(run.monitor, meta["monitor"])
        run.epoch = run.first = int(meta["round"])
        run.first += 1
        run.step = int(meta["step"])
        load_rng_state(tensors, run.dev)
        if run.rngs is not None:
            run.rngs = [{k: tensors[f"{k}.v{j}"] for k in run.rngs[j]}
                        for j in range(len(run.rngs))]
