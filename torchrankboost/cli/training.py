"""One training run: what ``torchrankboost train`` does, in one process and on every rank.

:func:`run_training` takes the run's :class:`~torchrankboost.cli.options.TrainOptions` and
walks the run's steps: check the options against the registry and the output, read the data
(this rank's shard of every split on several processes), plan (metrics, patience, run
folder), fit with progress and TensorBoard callbacks, compute the final metrics, save the
model. The process context (:func:`~torchrankboost.parallel.get_context`) is used
unconditionally: in one process its collectives are identities and ``guard`` lets errors
through unchanged; on several processes (an initialised process group: ``torchrun``, or
``train --nproc``) a failure on one rank stops every rank, the final metrics are combined
over the ranks (:func:`~torchrankboost.parallel.metric_parts`, exactly the metrics
themselves in one process), and rank 0 alone (``ctx.is_main``) prints, logs and saves — the
model of one process on the whole data.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._errors import first_line
from ..contract import NumericalError
from ..data import load_data
from ..data.sources import resolve_data_path
from ..data.svmlight import document_weights
from ..factory import rounds_kept
from ..parallel.launch import (check_distributed_algorithm, context, empty_split_message,
                               run_facts, where_text)
from .clicks import click_positions
from .inputs import (DEFAULT_REPORT_BINARY, DEFAULT_REPORT_GRADED, PROG, CLIError, build_ranker,
                     check_model_output, check_output, device, is_binary, normalized)
from .options import TrainOptions

__all__ = ["RunPlan", "TrainResult", "run_training", "ranker_options", "run_ranker",
           "predict", "input_paths",
           "data_name", "checkpoint_path", "DISTRIBUTED_ALGORITHMS"]

#: the algorithms with a data-parallel fit (the Booster and its configurations, RankBoost,
#: the neural ranker of --model)
DISTRIBUTED_ALGORITHMS = ("boost", "qbrank", "gbt", "rankboost", "neural")
#: the neural ranker's loss when --model is given without --loss
NEURAL_LOSS = "listnet"
# options turned on when TensorBoard logs the run: the driver's training metrics per round,
# RankBoost's ranking margin per round
_LOGGED_OPTIONS = {"boost": {"eval_train": True}, "rankboost": {"track_margin": True}}


def data_name(source: str, name: str) -> str:
    """The data's name in run names and messages: a built-in set as is, a LETOR fold folder
    with its data set (``mq2008-Fold1``), a file with its folder (``Fold1-train``,
    ``mq2008-Fold1-train``), not the bare file stem ("train")."""
    import re

    p = Path(source)
    if not p.exists():
        return name

    def folder_name(d: Path) -> str:
        d = d.resolve()
        if re.fullmatch(r"(?i)fold\d+", d.name) and d.parent.name:
            return f"{d.parent.name}-{d.name}"
        return d.name

    if p.is_dir():
        return folder_name(p) or name
    parent = folder_name(p.parent)
    return f"{parent}-{p.stem}" if parent else p.stem


# ============================================================================ the plan
@dataclass
class RunPlan:
    """What ``train`` decided before fitting."""

    algorithm: str  # canonical algorithm name
    label: str  # the algorithm, or the driver's loss
    data_name: str
    metric: str  # validation metric (early stopping)
    report: Sequence[str]  # metrics of the final table
    logdir: str
    early_stopping: int  # patience, 0 = off
    weights: Any = None  # (n,) document weights of the training data (--weights, .weight)
    position: Any = None  # (n,) displayed positions of click labels (--position, --debias)
    start: str = ""  # what the run continues (--resume, --init-model), said at the start
    config_path: Optional[str] = None  # the run's options, saved beside the model
    group_weight: Any = None  # (G,) query weights (a table's group weight column)


@dataclass
class TrainResult:
    """A finished run as rank 0 reports it."""

    plan: RunPlan
    ranker: Any  # the fitted estimator (history_, best_round_, stop_reason_)
    model: Any  # the saved model
    seconds: float  # the fit's wall time
    rows: Dict[str, Dict[str, float]]  # {split: {metric: value}} over every rank's data
    out_path: str  # where the model was saved
    logged: bool  # TensorBoard events were written to plan.logdir


def ranker_options(opts: TrainOptions) -> Dict[str, Any]:
    """``make_ranker`` keywords of the run; unknown names fail here, before any data is
    read."""
    from .. import registry

    if opts.model is not None:
        return _neural_options(opts)
    algorithm = registry.lookup("algorithm", opts.algorithm or "boost").name
    if algorithm != "boost" and (opts.loss or opts.loss_params):
        raise CLIError(f"--loss/--loss-param go with the generic driver (--algorithm boost); "
                       f"algorithm {algorithm!r} has its own objective (options: -p KEY=VALUE)")
    for m in ([opts.metric] if opts.metric else []) + list(opts.report or ()):
        registry.metric(m)
    return dict(algorithm=algorithm,
                loss=registry.lookup("loss", opts.loss).name if opts.loss else None,
                learner=registry.lookup("learner", opts.learner).name if opts.learner else None,
                n_rounds=opts.rounds, learning_rate=opts.learning_rate,
                max_leaves=opts.max_leaves, loss_params=dict(opts.loss_params),
                learner_params=dict(opts.learner_params), params=dict(opts.params),
                n_threads=opts.threads or 1)


def _neural_options(opts: TrainOptions) -> Dict[str, Any]:
    """The run's :class:`~torchrankboost.nn.NeuralRanker` keywords (``algorithm`` is
    ``"neural"``); unknown names fail here, before any data is read."""
    from .. import registry

    for m in ([opts.metric] if opts.metric else []) + list(opts.report or ()):
        registry.metric(m)
    kwargs = dict(model=opts.model, model_params=dict(opts.model_params),
                  loss=registry.lookup("loss", opts.loss or NEURAL_LOSS).name,
                  loss_params=dict(opts.loss_params), precision=opts.precision,
                  seed=opts.seed, n_threads=opts.threads or 1, **dict(opts.params))
    if opts.rounds is not None:
        kwargs["epochs"] = opts.rounds
    if opts.learning_rate is not None:
        kwargs["learning_rate"] = opts.learning_rate
    return dict(algorithm="neural", loss=kwargs["loss"], neural=kwargs)


def run_ranker(kwargs: Dict[str, Any]) -> Any:
    """The unfitted ranker of :func:`ranker_options`' keywords: a neural ranker, or
    :func:`~.inputs.build_ranker`'s (an unknown parameter's error names the flag that takes
    it)."""
    if kwargs["algorithm"] == "neural":
        from ..nn import NeuralRanker

        return NeuralRanker(**kwargs["neural"])
    return build_ranker(**kwargs)


def predict(model, data):
    """The scores of ``data`` (a :class:`~torchrankboost.data.RankingData`) by ``model``:
    with the queries for a model that reads them (a neural ranker)."""
    if getattr(model, "uses_groups", False):
        return model.predict(data.X, data.groups)
    return model.predict(data.X)


def _run_folder(opts: TrainOptions, run: RunPlan) -> str:
    """The run folder, claimed (created atomically) on first use."""
    from ..tensorboard import default_logdir

    if not run.logdir:
        run.logdir = default_logdir(opts.name or f"{run.data_name}-{run.label}")
    return run.logdir


def input_paths(opts: TrainOptions) -> List[Path]:
    """The files and folders a train run reads (an output must not be one of them)."""
    out = []
    for name in (opts.data, opts.valid, opts.test):
        p = resolve_data_path(name) if name else None
        if p is not None and p.exists():  # as given, or found under the data root
            out.append(p)
            if p.is_dir():
                out.extend(p.iterdir())
    return out


def _plan(opts: TrainOptions, kwargs: Dict[str, Any], binary: bool, valid,
          name: str) -> RunPlan:
    algorithm = kwargs["algorithm"]
    label = algorithm if algorithm != "boost" else kwargs["loss"] or "exponential"
    if algorithm == "neural":
        label = f"{opts.model}-{kwargs['loss']}"
    patience = opts.early_stopping
    if patience is None:
        patience = 20 if valid is not None else 0
    return RunPlan(algorithm=algorithm, label=label, data_name=name,
                   metric=opts.metric or ("auc" if binary else "ndcg@10"),
                   report=opts.report or (DEFAULT_REPORT_BINARY if binary
                                          else DEFAULT_REPORT_GRADED),
                   logdir=opts.logdir or "",  # default: claimed by _run_folder when needed
                   early_stopping=patience)


# ============================================================================ saving
def _write_error(exc: BaseException) -> str:
    """The reason of a failed write in a few words: the ``strerror`` of an ``OSError``,
    the first line of any other writer error (safetensors raises its own type)."""
    return getattr(exc, "strerror", None) or first_line(exc)


def _save_model(model, out_path: str, opts: TrainOptions, run: RunPlan) -> str:
    """Save ``model`` to ``out_path``; if that fails (any writer error: ``OSError``, a
    safetensors error on a full disk, ...), to a fallback file in the run folder (saying
    where). Returns the path written; when nothing could be written, a :class:`CLIError`
    says so in one line with both reasons."""
    try:
        model.save(out_path)
        return out_path
    except Exception as exc:  # noqa: BLE001 - every writer error goes to the fallback
        reason = _write_error(exc)
    fallback = "the run folder"
    try:
        folder = _run_folder(opts, run)
        fallback = os.path.join(folder, "model.fallback.safetensors")
        if os.path.abspath(fallback) == os.path.abspath(out_path):
            raise CLIError(f"cannot save the model to {out_path}: {reason}; nothing was saved")
        os.makedirs(folder, exist_ok=True)
        model.save(fallback)
    except CLIError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise CLIError(f"cannot save the model to {out_path} ({reason}) nor to {fallback} "
                       f"({_write_error(exc)}); nothing was saved") from None
    print(f"{PROG}: warning: cannot save the model to {out_path} ({reason}); saved it to "
          f"{fallback} instead", file=sys.stderr)
    return fallback


def _save_config(out_path: str, opts: TrainOptions) -> Optional[str]:
    """The run's options beside its model (``<model stem>.config.toml``); a file that cannot
    be written is one warning line, not a failed run."""
    from .config import write_config

    try:
        return write_config(out_path, opts)
    except OSError as exc:
        print(f"{PROG}: warning: cannot save the run's options beside {out_path} "
              f"({_write_error(exc)})", file=sys.stderr)
        return None


def _save_partial(ranker, out_path: Optional[str], opts: TrainOptions, run: RunPlan):
    """After an interrupted or failed fit: the model of the last good round (``model_``) to
    ``<output stem>.partial.safetensors``. Returns ``(path, None)`` when saved, ``(None,
    reason)`` when the save failed (any writer error), ``(None, None)`` when there is no
    model. A second Ctrl-C (or SIGTERM) during the save is held until the file is written
    (:func:`~torchrankboost._io.deferred_interrupts`), so it cannot lose the file."""
    from .._io import deferred_interrupts

    model = ranker.model_
    if model is None:
        return None, None
    path = "the partial model"
    with deferred_interrupts():
        try:
            base = out_path or os.path.join(_run_folder(opts, run), "model.safetensors")
            stem = base[:-len(".safetensors")] if base.endswith(".safetensors") else base
            path = stem + ".partial.safetensors"
            os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
            model.save(path)
        except Exception as exc:  # noqa: BLE001 - reported by the caller, one line
            return None, f"cannot save the model of the last good round to {path}: " \
                         f"{_write_error(exc)}"
    return path, None


# ============================================================================ the run
def _start(opts: TrainOptions, ctx):
    """The checks before any data is read (on every rank); returns ``(device, make_ranker
    keywords)``."""
    import torch

    with ctx.guard():  # a bad option or output on one rank stops every rank
        dev = device(opts.device)
        torch.manual_seed(opts.seed)
        kwargs = ranker_options(opts)
        check_distributed_algorithm(ctx, kwargs["algorithm"], DISTRIBUTED_ALGORITHMS,
                                    error=CLIError)
        if opts.output and ctx.is_main:  # the model must have somewhere to go
            check_output(opts.output, input_paths(opts))
            check_model_output(opts.output)
        for flag, path in (("--init-model", opts.init_model), ("--resume", opts.resume)):
            if path and not os.path.isfile(path):
                raise CLIError(f"{flag}: no such file: {path}")
    return dev, kwargs


def _load_splits(opts: TrainOptions, ctx, kwargs: Dict[str, Any]):
    """``(train, valid, test, name, weights)`` of this rank, checked (no empty split;
    validation data when early stopping is asked for) and scaled per query with
    ``normalize``; with ``cache`` the training split comes from the bin cache."""
    if opts.cache:
        from .cached import cached_splits

        tr, va, te, name, weights = cached_splits(opts, ctx, kwargs)
    else:
        from ..parallel import get_context

        neural = kwargs["algorithm"] == "neural"  # every rank trains on the whole data
        read = get_context(False) if neural else ctx  # (one process's read: no shards)
        tr, va, te, name = load_data(opts.data, valid=opts.valid, test=opts.test,
                                     seed=opts.seed, zero_based=opts.zero_based,
                                     max_features=opts.max_features, context=read,
                                     columns=opts.columns())
        with ctx.guard():
            if tr.weight is not None and opts.weights:
                raise CLIError(f"--weights {opts.weights}: the training table has a weight "
                               f"column ({opts.weight_column or 'weight'}); use one")
        weights = tr.weight if tr.weight is not None else document_weights(
            resolve_data_path(opts.data), opts.weights, tr, context=read)
        if neural and ctx.world_size > 1:  # the evaluation sets: this rank's shard
            with ctx.guard():
                va, te = (None if d is None else d.shard(ctx.rank, ctx.world_size)
                          for d in (va, te))
    with ctx.guard():
        for what, d, source in (("training", tr, opts.data), ("validation", va, opts.valid),
                                ("test", te, opts.test)):
            if d is not None and d.X.shape[0] == 0:
                raise CLIError(empty_split_message(ctx, f"{what} data {source or opts.data!r}"))
        if opts.early_stopping and va is None:
            raise CLIError(f"--early-stopping {opts.early_stopping} needs validation data "
                           f"(--valid FILE, or a LETOR fold / built-in data with a "
                           f"validation split)")
        if opts.normalize and not opts.cache:  # (cached: the cache and its side files are)
            tr, va, te = (normalized(d) for d in (tr, va, te))
    return tr, va, te, name, weights


def _prepare(opts: TrainOptions, ctx, kwargs: Dict[str, Any], splits, name: str):
    """The plan and the (unfitted) ranker; the run folder claimed on rank 0."""
    import torch

    tr, va = splits["train"], splits["valid"]
    binary = bool(ctx.all_reduce_min(torch.tensor([int(is_binary(tr.labels))]))[0])
    with ctx.guard():
        run = _plan(opts, kwargs, binary, va, data_name(opts.data, name))
        if opts.tensorboard:  # what the log shows beyond the defaults
            for key, value in _LOGGED_OPTIONS.get(run.algorithm, {}).items():
                kwargs["params"].setdefault(key, value)
        ranker = run_ranker(kwargs)  # bad parameters fail here, before a run folder
        if (opts.init_model or opts.resume) and not getattr(ranker, "can_continue", False):
            raise CLIError(f"--init-model/--resume: algorithm {run.algorithm!r} cannot "
                           f"continue a model (boost, qbrank, gbt, rankboost, pnorm_push can)")
        if ctx.is_main:
            if opts.tensorboard or not opts.output:
                _run_folder(opts, run)
            if not opts.output:  # the model goes into the run folder, which the run makes
                os.makedirs(run.logdir, exist_ok=True)
                check_output(os.path.join(run.logdir, "model.safetensors"), [])
    return run, ranker


def _callbacks(opts: TrainOptions, ctx, run: RunPlan):
    """``(callbacks, logger)``: progress and TensorBoard on rank 0 (the fit runs callbacks
    there only), none elsewhere."""
    from ..boosting.progress import ProgressCallback
    from ..tensorboard import TensorBoardLogger

    if not ctx.is_main:
        return [], None
    run.start, done = _start_text(opts) if not opts.quiet else ("", None)
    total = None  # the fit's own (n_rounds); a continued model's rounds come first
    if opts.init_model and done is not None and opts.rounds is not None:
        total = done + opts.rounds
    callbacks: List[Any] = [ProgressCallback(quiet=opts.quiet, total=total)]
    logger = None
    if opts.tensorboard:
        logger = TensorBoardLogger(run.logdir, hparams={
            "algorithm": run.algorithm, "data": run.data_name, "metric": run.metric,
            "early_stopping": run.early_stopping, **run_facts(ctx)}, hparams_on_fit_end=False)
        callbacks.append(logger)
    if opts.checkpoint_every:
        from ..boosting.checkpoint import Checkpoint

        callbacks.append(Checkpoint(checkpoint_path(opts, run), every=opts.checkpoint_every))
    return callbacks, logger


def checkpoint_path(opts: TrainOptions, run: RunPlan) -> str:
    """Where ``checkpoint_every`` writes: ``<output stem>.checkpoint.safetensors`` (or
    the run folder's ``checkpoint.safetensors``)."""
    if not opts.output:
        return os.path.join(run.logdir, "checkpoint.safetensors")
    out = opts.output
    stem = out[:-len(".safetensors")] if out.endswith(".safetensors") else out
    return stem + ".checkpoint.safetensors"


def _announce(opts: TrainOptions, ctx, run: RunPlan, tr, dev) -> None:
    """The start line on stderr (rank 0, without ``--quiet``): the whole data's size."""
    import torch

    counts = ctx.all_reduce_sum(torch.tensor([len(tr), tr.num_queries], dtype=torch.int64))
    if ctx.is_main and not opts.quiet:
        print(f"{PROG}: training {run.label} on {run.data_name} ({int(counts[1])} train "
              f"queries, {int(counts[0])} documents, {tr.num_features} features) on "
              f"{where_text(ctx, dev)}", file=sys.stderr)
        if run.start:
            print(f"{PROG}: {run.start}", file=sys.stderr)


def _start_text(opts: TrainOptions) -> Tuple[str, Optional[int]]:
    """What a run continues, said before its first round, and the rounds the model already
    has: ``resuming CHECKPOINT after round k`` (``--resume``; the rounds count on from
    ``k + 1`` up to ``--rounds``) or ``continuing MODEL (k rounds)`` (``--init-model``;
    ``--rounds`` more); ``("", None)`` for a fresh run."""
    try:
        if opts.resume:
            from ..boosting.checkpoint import load_checkpoint

            k = load_checkpoint(opts.resume).round
            return f"resuming {opts.resume} after round {k}", k
        if opts.init_model:
            from ..factory import load_model

            k = getattr(load_model(opts.init_model), "n_rounds", None)
            return (f"continuing {opts.init_model}" + (f" ({k} rounds)" if k is not None
                                                       else ""), k)
    except (OSError, ValueError):  # the fit reports an unreadable file in its own words
        pass
    return "", None


def _fit(ranker, splits: Dict[str, Any], run: RunPlan, callbacks: List[Any], **start):
    """Fit on ``splits["train"]``, watching ``splits["valid"]`` when there is one (``start``:
    ``init_model=`` / ``resume=``); returns ``(model, seconds)``."""
    from .. import registry

    tr, va = splits["train"], splits.get("valid")
    kwargs: Dict[str, Any] = {"callbacks": callbacks, **start}
    if va is not None:
        main_metric = registry.metric(run.metric).name
        watch = [run.metric] + [m for m in run.report if registry.metric(m).name != main_metric]
        if run.algorithm == "boost":  # the driver's loss is the user's choice: watch it too
            watch.append("loss")
        kwargs.update(eval_set=[(va.X, va.labels, va.groups)], eval_metric=watch,
                      early_stopping_rounds=run.early_stopping or None)
    if run.weights is not None:
        kwargs["sample_weight"] = run.weights
    if run.position is not None:
        kwargs["position"] = run.position
    if run.group_weight is not None:
        kwargs["group_weight"] = run.group_weight
    t0 = time.perf_counter()
    model = ranker.fit(tr.X, tr.labels, tr.groups, **kwargs)
    return model, time.perf_counter() - t0


def _fit_or_save_partial(opts: TrainOptions, ctx, ranker, splits, run: RunPlan, callbacks):
    """:func:`_fit`; after Ctrl-C or a numerical failure, rank 0 saves the model of the last
    good round (``*.partial.safetensors``) and says so (or why it could not), and the error
    goes on."""
    try:
        start = {k: v for k, v in (("init_model", opts.init_model), ("resume", opts.resume))
                 if v}
        return _fit(ranker, splits, run, callbacks, **start)
    except (KeyboardInterrupt, NumericalError) as exc:
        saved, failed = _save_partial(ranker, opts.output, opts, run) if ctx.is_main \
            else (None, None)
        if saved is None and failed is None:
            raise
        note = failed or f"the model of the last good round is saved to {saved}"
        if isinstance(exc, NumericalError):  # still one line
            raise NumericalError(f"{first_line(exc, default='')}; {note}", round=exc.round,
                                 model=exc.model) from None
        print(f"{PROG}: {ranker.stop_reason_}; {note}", file=sys.stderr)
        raise


def _final_metrics(opts: TrainOptions, ctx, model, splits: Dict[str, Any], run: RunPlan, logger,
                   step: int):
    """``{split: {metric: value}}`` of the final model over every rank's queries (one
    all-reduce of :func:`~torchrankboost.parallel.metric_parts`; a metric undefined on some
    rank is NaN); with TensorBoard, the score histograms and the PR/ROC curves of the last
    split (test, else valid, else train) over every rank's documents, logged on rank 0."""
    import torch

    from .. import registry
    from ..parallel import METRIC_PARTS, metric_parts, metric_value

    names = [registry.metric(n).name for n in run.report]
    parts, last = [], list(splits)[-1]
    for split, d in splits.items():
        with torch.no_grad():
            s = predict(model, d)
        for n in run.report:
            try:
                parts.append(metric_parts(n, s, d.labels, d.groups))
            except ValueError:
                parts.append(torch.full((METRIC_PARTS,), float("nan"), dtype=torch.float64))
        if opts.tensorboard:  # the same on every rank: the gathers are collective
            s_all = ctx.all_gather_rows(s)
            y_all = ctx.all_gather_rows(d.labels) if split == last else None
            if logger is not None:
                logger.log_histograms(step, {f"scores/{split}": s_all})
                if split == last:
                    logger.log_curves(step, y_all, s_all, tag=split)
    tot = ctx.all_reduce_sum(torch.stack(parts))
    values = [metric_value(p) for p in tot]
    return {split: dict(zip(names, values[i * len(names):(i + 1) * len(names)]))
            for i, split in enumerate(splits)}


def _finish(opts: TrainOptions, ctx, ranker, model, splits, run: RunPlan, logger,
            seconds: float):
    """Final metrics, the model saved and the hparams logged (rank 0); ``(rows, path)``."""
    used = rounds_kept(ranker, run.early_stopping)
    rows = _final_metrics(opts, ctx, model, splits, run, logger, used)
    if splits["train"].zero_based is not None:
        model.info["zero_based"] = bool(splits["train"].zero_based)
    if splits["train"].feature_names is not None:  # a table's: predict selects them by name
        model.info["feature_names"] = list(splits["train"].feature_names)
    model.info["normalize"] = bool(opts.normalize)  # evaluate/predict apply it
    model.info.update(run_facts(ctx))
    out_path = opts.output or os.path.join(run.logdir, "model.safetensors")
    with ctx.guard():
        if ctx.is_main:
            out_path = _save_model(model, out_path, opts, run)
            run.config_path = _save_config(out_path, opts)
            if logger is not None:
                final = {f"{split}/{k}": v for split, r in rows.items() for k, v in r.items()}
                final.update(seconds=seconds, rounds_used=used, best_round=ranker.best_round_)
                logger.log_hparams(None, final, step=used)
    return rows, out_path


def run_training(options: TrainOptions) -> Optional[TrainResult]:
    """Run one training run (what ``torchrankboost train`` does) with ``options``; returns
    the result on rank 0, ``None`` on the other ranks of a process group.

    Raises :class:`~torchrankboost.cli.inputs.CLIError` (or ``ValueError``,
    ``FileNotFoundError``) for input problems, ``NumericalError`` for a failed fit and, on
    several processes, ``DistributedError`` when some rank failed.
    """
    if not isinstance(options, TrainOptions):
        raise TypeError(f"run_training takes a TrainOptions, got {type(options).__name__}")
    ctx = context()
    dev, kwargs = _start(options, ctx)
    tr, va, te, name, weights = _load_splits(options, ctx, kwargs)
    splits = {"train": tr, "valid": va, "test": te}
    run, ranker = _prepare(options, ctx, kwargs, splits, name)
    run.weights = weights
    run.position = click_positions(options, ctx, tr, ranker)
    run.group_weight = tr.group_weight
    callbacks, logger = _callbacks(options, ctx, run)
    splits = {k: d.to(dev) for k, d in splits.items() if d is not None}
    _announce(options, ctx, run, tr, dev)
    try:
        model, seconds = _fit_or_save_partial(options, ctx, ranker, splits, run, callbacks)
        if options.cache:  # the final metrics score values, not a stand-in
            from ..data.cache import realized

            splits["train"] = realized(splits["train"])
        if run.algorithm == "neural" and ctx.world_size > 1:  # each rank: its shard
            splits["train"] = splits["train"].shard(ctx.rank, ctx.world_size)
        rows, out_path = _finish(options, ctx, ranker, model, splits, run, logger, seconds)
    finally:  # a failed run (NumericalError...) still leaves readable event files
        if logger is not None:
            logger.close()
    if not ctx.is_main:
        return None
    return TrainResult(plan=run, ranker=ranker, model=model, seconds=seconds, rows=rows,
                       out_path=out_path, logged=logger is not None)
