"""The ``torchrankboost`` command (also ``python -m torchrankboost``).

Sub-commands::

    torchrankboost train     [--data wdbc|synthetic|FOLD_DIR|FILE] [--valid FILE] [--test FILE]
                             [--algorithm NAME | --loss NAME --learner NAME] [--rounds N] ...
    torchrankboost evaluate  MODEL FILE [--metric NAME ...]
    torchrankboost predict   MODEL FILE [--output OUT]
    torchrankboost list      [losses|algorithms|learners|metrics]

``torchrankboost train`` with no arguments trains the main job on built-in data (wdbc,
bipartite) in seconds, logs to ``runs/<name>-<timestamp>`` and prints how to open
TensorBoard. Errors in the input (unknown names, missing or malformed files, bad parameters)
print one line ``torchrankboost: error: ...`` on stderr and exit with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .datasets import load_data, load_file, pad_features

__all__ = ["main", "build_parser", "parse_params", "CLIError"]

PROG = "torchrankboost"
DEFAULT_REPORT_GRADED = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "auc", "pair_error")
DEFAULT_REPORT_BINARY = ("auc", "pair_error", "map", "ndcg@10", "pos_above_neg")


class CLIError(Exception):
    """An input problem reported as one line and exit status 2."""


# ============================================================================ parameters
def _parse_value(text: str):
    t = text.strip()
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except json.JSONDecodeError:
            pass
    return t


def parse_params(items: Optional[Sequence[str]], what: str = "--param") -> Dict[str, Any]:
    """``["p=4", "l2=0.5", "criterion=correlation"]`` → ``{"p": 4, "l2": 0.5, ...}``.

    Values are read as bool (true/false), None, int, float, JSON list/dict, else string.
    """
    out: Dict[str, Any] = {}
    for item in items or ():
        for piece in item.split(","):
            if not piece.strip():
                continue
            key, sep, val = piece.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or not key.isidentifier():
                raise CLIError(f"{what} expects KEY=VALUE, got {piece!r}")
            out[key] = _parse_value(val)
    return out


# ============================================================================ data
def _is_binary(labels) -> bool:
    import torch

    u = torch.unique(labels)
    return u.numel() <= 2 and bool(((u == 0) | (u == 1)).all())


# ============================================================================ reporting
def compute_metrics(scores, labels, groups, names: Sequence[str]) -> Dict[str, float]:
    """``{name: value}`` for each metric name (see ``torchrankboost list metrics``)."""
    from . import registry

    out = {}
    for n in names:
        m = registry.metric(n)
        try:
            out[m.name] = m(scores, labels, groups)
        except ValueError:
            out[m.name] = float("nan")
    return out


def format_table(rows: Dict[str, Dict[str, float]]) -> str:
    """A plain text table: one row per split, one column per metric."""
    cols: List[str] = []
    for r in rows.values():
        for c in r:
            if c not in cols:
                cols.append(c)
    w0 = max([len("split")] + [len(k) for k in rows])
    widths = [max(len(c), 8) for c in cols]
    head = f"{'split':<{w0}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(cols, widths))
    lines = [head, "-" * len(head)]
    for k, r in rows.items():
        cells = []
        for c, w in zip(cols, widths):
            v = r.get(c)
            cells.append(f"{'':>{w}}" if v is None else
                         f"{'nan':>{w}}" if isinstance(v, float) and math.isnan(v) else
                         f"{v:>{w}.4f}")
        lines.append(f"{k:<{w0}}  " + "  ".join(cells))
    return "\n".join(lines)


# ============================================================================ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Learning to rank with boosting-family losses in PyTorch.",
        epilog="Run `torchrankboost train` with no arguments for the main job on built-in data.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    tr = sub.add_parser("train", help="train a ranker, log to TensorBoard, save the model",
                        description="Train a boosted ranker and print train/valid/test metrics.")
    g = tr.add_argument_group("data")
    g.add_argument("--data", default="wdbc", metavar="DATA",
                   help="built-in set (wdbc, synthetic), a LETOR fold folder "
                        "(train.txt/vali.txt/test.txt) or an SVMlight file with qid "
                        "(default: wdbc)")
    g.add_argument("--valid", metavar="FILE", help="validation file (SVMlight) for early stopping")
    g.add_argument("--test", metavar="FILE", help="test file (SVMlight) for the final report")
    g = tr.add_argument_group("model")
    g.add_argument("--algorithm", "-a", default=None, metavar="NAME",
                   help="an algorithm by name (see `torchrankboost list algorithms`); "
                        "default: boost (the generic driver with --loss and --learner)")
    g.add_argument("--loss", "-l", default=None, metavar="NAME",
                   help="loss for the generic driver (default: exponential)")
    g.add_argument("--learner", default=None, metavar="NAME",
                   help="weak learner for the generic driver (default: tree)")
    g.add_argument("--rounds", "-n", type=int, default=None, metavar="N",
                   help="boosting rounds (default 100)")
    g.add_argument("--learning-rate", "--lr", type=float, default=None, metavar="LR",
                   help="shrinkage applied to each round's step (default 0.1 for the driver)")
    g.add_argument("--max-leaves", type=int, default=None, metavar="N",
                   help="leaves per tree (tree learner)")
    g.add_argument("--param", "-p", action="append", default=[], metavar="KEY=VALUE",
                   help="extra algorithm/driver parameter (repeatable), e.g. -p subsample=0.8")
    g.add_argument("--loss-param", action="append", default=[], metavar="KEY=VALUE",
                   help="loss parameter (repeatable), e.g. --loss-param p=4")
    g.add_argument("--learner-param", action="append", default=[], metavar="KEY=VALUE",
                   help="weak learner parameter (repeatable), e.g. --learner-param l2=1.0")
    g.add_argument("--early-stopping", type=int, default=None, metavar="N",
                   help="stop when the validation metric has not improved for N rounds "
                        "(default 20 when there is validation data; 0 disables)")
    g.add_argument("--metric", "-m", default=None, metavar="NAME",
                   help="validation metric for early stopping (default: auc for binary labels, "
                        "ndcg@10 otherwise)")
    g.add_argument("--report", nargs="+", default=None, metavar="METRIC",
                   help="metrics of the final table")
    g.add_argument("--seed", type=int, default=0, help="random seed (data split, subsampling)")
    g = tr.add_argument_group("output")
    g.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, mps ...")
    g.add_argument("--logdir", default=None, metavar="DIR",
                   help="TensorBoard run directory (default runs/<name>-<timestamp>)")
    g.add_argument("--name", default=None, help="run name (default <data>-<algorithm>)")
    g.add_argument("--output", "-o", default=None, metavar="PATH",
                   help="where to save the model (default <logdir>/model)")
    g.add_argument("--no-tensorboard", action="store_true", help="do not write event files")
    g.add_argument("--quiet", "-q", action="store_true",
                   help="no progress output (the final table is still printed)")

    ev = sub.add_parser("evaluate", help="metrics of a saved model on a data file",
                        description="Print the metrics of a saved model on an SVMlight file.")
    ev.add_argument("model", help="a model saved by `torchrankboost train`")
    ev.add_argument("file", help="SVMlight/LETOR file (with qid for several queries)")
    ev.add_argument("--metric", "-m", nargs="+", default=None, metavar="NAME",
                    help="metrics (default: a standard set)")
    ev.add_argument("--device", default="cpu")

    pr = sub.add_parser("predict", help="write one score per line for a data file",
                        description="Score every line of an SVMlight file with a saved model.")
    pr.add_argument("model", help="a model saved by `torchrankboost train`")
    pr.add_argument("file", help="SVMlight/LETOR file")
    pr.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="output file (default: standard output)")
    pr.add_argument("--device", default="cpu")

    ls = sub.add_parser("list", help="list losses, algorithms, learners and metrics",
                        description="List the available names with a one-line description.")
    ls.add_argument("kind", nargs="?", default=None,
                    help="losses, algorithms, learners or metrics (default: all)")
    return parser


# ============================================================================ commands
def _device(name: str):
    import torch

    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise CLIError(f"unknown device {name!r}; e.g. cpu, cuda, cuda:0, mps") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CLIError(f"device {name!r} requested but CUDA is not available")
    if dev.type == "mps" and not (hasattr(torch.backends, "mps")
                                  and torch.backends.mps.is_available()):
        raise CLIError(f"device {name!r} requested but MPS is not available")
    return dev


def cmd_list(args) -> int:
    from . import registry

    kind = args.kind
    if kind is not None:
        key = kind.strip().lower()
        valid = ("losses", "loss", "algorithms", "algorithm", "learners", "learner",
                 "metrics", "metric")
        if key not in valid:
            raise CLIError(f"unknown list {kind!r}; valid choices: losses, algorithms, "
                           "learners, metrics")
        kind = key
    print(registry.describe(kind))
    return 0


def cmd_train(args) -> int:
    import torch

    from . import registry
    from .estimator import make_trainer

    dev = _device(args.device)
    torch.manual_seed(args.seed)
    loss_params = parse_params(args.loss_param, "--loss-param")
    learner_params = parse_params(args.learner_param, "--learner-param")
    params = parse_params(args.param, "--param")

    # resolve names first: unknown names fail before any data is read
    algorithm = registry.lookup("algorithm", args.algorithm or "boost").name
    if algorithm != "boost" and (args.loss or args.loss_param):
        raise CLIError(f"--loss/--loss-param go with the generic driver (--algorithm boost); "
                       f"algorithm {algorithm!r} has its own objective (options: -p KEY=VALUE)")
    loss_name = registry.lookup("loss", args.loss).name if args.loss else None
    learner_name = registry.lookup("learner", args.learner).name if args.learner else None
    if args.metric:
        registry.metric(args.metric)
    for m in args.report or ():
        registry.metric(m)

    tr, va, te, data_name = load_data(args.data, valid=args.valid, test=args.test,
                                      seed=args.seed)
    if tr.X.shape[0] == 0:
        raise CLIError(f"training data {args.data!r} is empty")
    binary = _is_binary(tr.labels)
    metric_name = args.metric or ("auc" if binary else "ndcg@10")
    report = args.report or (DEFAULT_REPORT_BINARY if binary else DEFAULT_REPORT_GRADED)
    label = algorithm if algorithm != "boost" else f"{loss_name or 'exponential'}"
    name = args.name or f"{data_name}-{label}"

    from .tensorboard import TensorBoardLogger, default_logdir
    from .progress import ProgressCallback

    n_rounds = args.rounds if args.rounds is not None else 100
    init_params = _init_params(algorithm)
    if not args.no_tensorboard and "track_margin" in init_params:
        params.setdefault("track_margin", True)  # log the ranking margin per round
    if not args.no_tensorboard and "eval_train" in init_params:
        params.setdefault("eval_train", True)  # training metrics per round too
    build = dict(algorithm=algorithm, loss=loss_name, learner=learner_name, n_rounds=n_rounds,
                 learning_rate=args.learning_rate, max_leaves=args.max_leaves,
                 loss_params=loss_params, learner_params=learner_params, params=params,
                 seed=args.seed)
    make_trainer(**build)  # bad parameters fail here, before a run directory is created

    logdir = args.logdir or default_logdir(name)
    callbacks = [ProgressCallback(quiet=args.quiet)]
    logger = None
    if not args.no_tensorboard:
        logger = TensorBoardLogger(logdir, hparams={"data": data_name, "metric": metric_name},
                                   hparams_on_fit_end=False)
        callbacks.append(logger)

    trainer = make_trainer(**build, callbacks=callbacks)
    trd, vad, ted = (d.to(dev) if d is not None else None for d in (tr, va, te))
    es = args.early_stopping
    if es is None:
        es = 20 if vad is not None else 0
    if not args.quiet:
        print(f"{PROG}: training {label} on {data_name} ({tr.num_queries} train queries, "
              f"{len(tr)} documents, {tr.num_features} features) on {dev}", file=sys.stderr)
    t0 = time.perf_counter()
    fit_kwargs = {}
    if vad is not None:
        fit_kwargs["eval_set"] = [(vad.X, vad.labels, vad.groups)]
        watch = [metric_name] + [m for m in report if registry.metric(m).name
                                 != registry.metric(metric_name).name]
        fit_kwargs["eval_metric"] = watch + ["loss"]  # all logged per round
        if es:
            fit_kwargs["early_stopping_rounds"] = es
    model = trainer.fit(trd.X, trd.labels, trd.groups, **fit_kwargs)
    seconds = time.perf_counter() - t0

    rows = {}
    for split, d in (("train", trd), ("valid", vad), ("test", ted)):
        if d is None:
            continue
        with torch.no_grad():
            s = model.predict(d.X)
        rows[split] = compute_metrics(s, d.labels, d.groups, report)
        if logger is not None:
            step = _rounds_of(model, n_rounds)
            logger.log_histograms(step, {f"{split}/scores": s})
            if split == ("test" if ted is not None else "valid" if vad is not None else "train"):
                logger.log_curves(step, d.labels, s, tag=split)
    out_path = args.output or os.path.join(logdir, "model.safetensors")
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    model.save(out_path)
    if logger is not None:
        final = {f"{split}/{k}": v for split, r in rows.items() for k, v in r.items()}
        logger.log_hparams({"seconds": round(seconds, 3),
                            "rounds_used": _rounds_of(model, n_rounds)}, final)
        logger.close()
    used = _rounds_of(model, n_rounds)
    best = getattr(model, "best_round", None)
    ran = len(getattr(trainer.obj, "history_", []) or []) or used
    evals = getattr(model, "evals_result", None) or {}
    for per in evals.values():
        for vals in per.values():
            ran = max(ran, len(vals))
    note = f" (best validation round of {ran})" if best is not None and ran > used else ""
    what = f"{used} rounds{note}" if hasattr(model, "n_rounds") else type(model).__name__
    print(f"\n{label} on {data_name}: {what}, {seconds:.1f} s")
    print(format_table(rows))
    print(f"\nmodel saved to {out_path}")
    if logger is not None:
        root = str(Path(logdir).parent)
        print(f"TensorBoard logs in {logdir}; view them with: tensorboard --logdir {root}")
    return 0


def _init_params(algorithm: str):
    import inspect

    from . import registry

    try:
        return inspect.signature(registry.lookup("algorithm", algorithm).resolve()).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return {}


def _rounds_of(model, default: int) -> int:
    for attr in ("n_rounds", "num_rounds", "best_iteration"):
        v = getattr(model, attr, None)
        if isinstance(v, int):
            return v
    try:
        return len(model)
    except TypeError:
        return default


def _load_model(path: str):
    from .estimator import load_model

    if not Path(path).exists():
        raise CLIError(f"model not found: {path}")
    try:
        return load_model(path)
    except Exception as exc:  # any reader error (safetensors, JSON, ...) is one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CLIError(f"cannot load model {path}: {first}") from None


def _model_data(model, path: str):
    F = getattr(model, "num_features", None)
    data = load_file(path)
    if F is not None and data.num_features != F:
        if data.num_features > F:
            raise CLIError(f"{path}: has {data.num_features} features, the model expects {F}")
        data = pad_features(data, F)
    return data


def cmd_evaluate(args) -> int:
    import torch

    from . import registry

    names = args.metric
    for n in names or ():
        registry.metric(n)
    dev = _device(args.device)
    model = _load_model(args.model)
    data = _model_data(model, args.file).to(dev)
    if hasattr(model, "to"):
        model = model.to(dev)
    if names is None:
        names = DEFAULT_REPORT_BINARY if _is_binary(data.labels) else DEFAULT_REPORT_GRADED
    with torch.no_grad():
        s = model.predict(data.X)
    print(format_table({Path(args.file).name: compute_metrics(s, data.labels, data.groups,
                                                              names)}))
    return 0


def cmd_predict(args) -> int:
    import torch

    dev = _device(args.device)
    model = _load_model(args.model)
    data = _model_data(model, args.file).to(dev)
    if hasattr(model, "to"):
        model = model.to(dev)
    with torch.no_grad():
        s = model.predict(data.X)
    if data.row is not None:  # back to file order if the loader regrouped the rows
        s = torch.empty_like(s).index_copy_(0, data.row.to(s.device), s)
    text = "\n".join(repr(float(v)) for v in s.detach().cpu().tolist())
    if args.output:
        Path(args.output).write_text(text + ("\n" if text else ""))
    else:
        sys.stdout.write(text + ("\n" if text else ""))
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict,
            "list": cmd_list}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchrankboost`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command](args)
    except CLIError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: {exc.filename or exc}: file not found"
              if exc.filename else f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid value"
        print(f"{PROG}: error: {first}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
