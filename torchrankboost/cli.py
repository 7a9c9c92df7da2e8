"""The ``torchrankboost`` command (also ``python -m torchrankboost``).

Sub-commands::

    torchrankboost train     [--data wdbc|synthetic|FOLD_DIR|FILE] [--valid FILE] [--test FILE]
                             [--algorithm NAME | --loss NAME --learner NAME] [--rounds N] ...
    torchrankboost evaluate  MODEL FILE [--metric NAME ...]
    torchrankboost predict   MODEL FILE [--output OUT]
    torchrankboost list      [losses|algorithms|learners|metrics]
    torchrankboost export    MODEL --format {lightgbm,xgboost,onnx,treelite} -o PATH
    torchrankboost bin       DATA -o data.trbin   (then: train --data DATA --cache data.trbin)

``torchrankboost train`` with no arguments trains the main job on built-in data (wdbc,
bipartite) in seconds, logs to ``runs/<name>-<timestamp>`` and prints how to open
TensorBoard. Errors in the input (unknown names, missing or malformed files, bad parameters)
print one line ``torchrankboost: error: ...`` on stderr and exit with status 2; a run that
fails numerically (:class:`~torchrankboost.contract.NumericalError`: a NaN gradient, an
unbounded step with ``-p on_unbounded=raise``...) prints one such line and exits with status
1; no traceback.

**Several processes.** ``torchrun --standalone --nproc-per-node N -m torchrankboost train ...``
(or ``torchrankboost train --nproc N ...``, which checks its input, then starts the N
processes itself, forwards SIGINT/SIGTERM to them and waits for them) trains one
model data-parallel: each process initialises the process group (gloo on CPU, NCCL with
``--device cuda``, one GPU per ``LOCAL_RANK``), holds a shard of whole queries of every split
(built-in data: the split of one process cut by :meth:`~torchrankboost.data.RankingData.shard`;
files: :func:`~torchrankboost.data.load_svmlight_shard`, each rank parsing its own byte
range) and fits with the algorithm's data-parallel path (``boost``, ``qbrank``, ``gbt``,
``rankboost``); metrics are combined over the ranks; rank 0 alone prints, writes the
TensorBoard events and saves the model — the model of one process on the whole data. A
failure on one rank stops every rank with one line naming it, from rank 0 (status 1; 2 for
bad input). ``--timeout`` (default 60 s) bounds every wait for the other ranks.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ._cli_clicks import add_click_options
from ._cache_cli import add_bin_command, cmd_bin, prepare_before_launch
from ._errors import first_line
from .contract import NumericalError
from .data import load_file, pad_features
from .export.cli import add_export_command, export_command
from .factory import load_model, rounds_kept
from .parallel import DistributedError
from .parallel.launch import (end_process_group, relaunch, reports_failures, start_process_group,
                              under_launcher)
from .parallel.launcher import report_to_parent
from .training import (DEFAULT_REPORT_BINARY, DEFAULT_REPORT_GRADED, PROG, ZERO_BASED,
                       CLIError, TrainResult, check_output, check_run_name, device, is_binary,
                       normalized, parse_params, train)

__all__ = ["main", "build_parser", "parse_params", "CLIError"]


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

_NUMBERING_HELP = ("feature numbering of the SVMlight files: auto (0-based iff some file of "
                   "the run uses index 0), yes (0-based) or no (1-based, LETOR)")
_MAX_FEATURES_HELP = ("widest feature matrix a file may imply before it is allocated "
                      "(default 100000; a stray huge index is refused, naming its line)")


def _add_reading_options(p) -> None:
    """``--zero-based`` and ``--max-features`` of ``evaluate`` and ``predict``."""
    p.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                   help=_NUMBERING_HELP + "; default: the numbering stored in the model (required "
                        "for a model saved from Python, which records none)")
    p.add_argument("--max-features", type=int, default=None, metavar="N",
                   help=_MAX_FEATURES_HELP)


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
    _add_train_data_options(tr)
    _add_train_model_options(tr)
    _add_train_output_options(tr)
    ev = _add_scoring_command(sub, "evaluate", "metrics of a saved model on a data file",
                              "Print the metrics of a saved model on an SVMlight file.",
                              "SVMlight/LETOR file (with qid for several queries)")
    ev.add_argument("--metric", "-m", nargs="+", default=None, metavar="NAME",
                    help="metrics (default: a standard set)")
    pr = _add_scoring_command(sub, "predict", "write one score per line for a data file",
                              "Score every line of an SVMlight file with a saved model.",
                              "SVMlight/LETOR file")
    pr.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="output file (default: standard output)")
    add_export_command(sub)
    add_bin_command(sub)
    ls = sub.add_parser("list", help="list losses, algorithms, learners and metrics",
                        description="List the available names with a one-line description.")
    ls.add_argument("kind", nargs="?", default=None,
                    help="losses, algorithms, learners or metrics (default: all)")
    return parser


def _add_scoring_command(sub, name: str, help: str, description: str, file_help: str):
    """``evaluate`` / ``predict``: a saved model applied to a data file."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("model", help="a model saved by `torchrankboost train`")
    p.add_argument("file", help=file_help)
    p.add_argument("--device", default="cpu")
    p.add_argument("--normalize", action="store_true",
                   help="per-query min-max feature scaling, for a model that does not record "
                        "it (a model records its training choice and applies it)")
    _add_reading_options(p)
    return p


def _add_train_data_options(tr) -> None:
    """``train``'s data options."""
    g = tr.add_argument_group("data")
    g.add_argument("--data", default="wdbc", metavar="DATA",
                   help="built-in set (wdbc, synthetic), a LETOR fold folder "
                        "(train.txt/vali.txt/test.txt) or an SVMlight file with qid "
                        "(default: wdbc)")
    g.add_argument("--valid", metavar="FILE", help="validation file (SVMlight) for early stopping")
    g.add_argument("--test", metavar="FILE", help="test file (SVMlight) for the final report")
    g.add_argument("--weights", metavar="FILE",
                   help="document weights of the training data, one per data line (default: "
                        "the training file's FILE.weight beside it, as LightGBM reads it)")
    g.add_argument("--normalize", action="store_true",
                   help="per-query min-max feature scaling (LETOR's QueryLevelNorm; "
                        "recommended for MSLR-WEB); stored in the model, evaluate/predict "
                        "apply it")
    g.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                   help=_NUMBERING_HELP + "; decided once for every file of the run and "
                        "stored in the model")
    g.add_argument("--max-features", type=int, default=None, metavar="N", help=_MAX_FEATURES_HELP)
    add_click_options(g)
    g.add_argument("--cache", metavar="PATH", help="train on the bin cache PATH of --data "
                   "(`torchrankboost bin`): built when missing, rebuilt when stale")


def _add_train_model_options(tr) -> None:
    """``train``'s model options: algorithm, loss, learner and their parameters."""
    g = tr.add_argument_group("model")
    g.add_argument("--algorithm", "-a", default=None, metavar="NAME",
                   help="an algorithm by name (see `torchrankboost list algorithms`); "
                        "default: boost (the generic driver with --loss and --learner)")
    g.add_argument("--loss", "-l", default=None, metavar="NAME",
                   help="loss for the generic driver (default: exponential)")
    g.add_argument("--learner", default=None, metavar="NAME",
                   help="weak learner for the generic driver (default: tree)")
    g.add_argument("--rounds", "-n", type=int, default=None, metavar="N",
                   help="boosting rounds (default: the algorithm's own; 100 for boost)")
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
    g.add_argument("--seed", type=int, default=0,
                   help="random seed of the data split and of torch (default 0); an "
                        "algorithm's own seed: -p seed=N, a weak learner's: "
                        "--learner-param seed=N")


def _add_train_output_options(tr) -> None:
    """``train``'s run options: device, processes, logs, output, warm start, checkpoints."""
    g = tr.add_argument_group("output")
    g.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, mps ...")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads of torch (default 1: small tensor operations stall with "
                        "more on a busy machine; see the README's section on threads)")
    g.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="train data-parallel on N local processes (as torchrun --standalone "
                        "--nproc-per-node N would), each process holding a shard of the "
                        "queries")
    g.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="with --nproc/torchrun: how long a process waits for the others "
                        "(joining, and at each exchange) before the run fails (default 60)")
    g.add_argument("--logdir", default=None, metavar="DIR",
                   help="TensorBoard run directory (default runs/<name>-<timestamp>)")
    g.add_argument("--name", default=None, help="run name (default <data>-<algorithm>)")
    g.add_argument("--output", "-o", default=None, metavar="PATH",
                   help="where to save the model (default <logdir>/model.safetensors)")
    g.add_argument("--no-tensorboard", action="store_true", help="do not write event files")
    g.add_argument("--init-model", metavar="PATH", help="continue this saved model: "
                   "--rounds more rounds (warm start)")
    g.add_argument("--checkpoint-every", type=int, metavar="K", help="save the fit's state "
                   "every K rounds to <output stem>.checkpoint.safetensors")
    g.add_argument("--resume", metavar="PATH", help="resume the same run exactly from "
                   "its checkpoint (same data and options; --rounds is the total)")
    g.add_argument("--quiet", "-q", action="store_true",
                   help="no progress output (the final table is still printed)")


# ============================================================================ commands
def _set_threads(n) -> None:
    """torch's intra-op threads for the whole command (``--threads``; default 1)."""
    import torch

    from ._threads import DEFAULT_THREADS, check_threads

    try:
        n = check_threads(n, "--threads")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    torch.set_num_threads(n if n is not None else DEFAULT_THREADS)


def _one_line_warnings() -> None:
    """A rank's warnings as one line each (``torchrankboost: warning: ...``), without the
    file and source line."""
    import warnings

    def fmt(message, category, filename, lineno, line=None):
        text = str(message)
        text = text[len(PROG) + 2:] if text.startswith(f"{PROG}: ") else text
        return f"{PROG}: warning: {text}\n"

    warnings.formatwarning = fmt


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


# ---------------------------------------------------------------------------- train
def _print_summary(result: TrainResult) -> None:
    """The final report of ``train``: what was fitted, the metrics table, where it went."""
    run, ranker, model = result.plan, result.ranker, result.model
    used = rounds_kept(ranker, run.early_stopping)
    ran = len(ranker.history_)
    note = f" (the best on validation; {ran} rounds run)" if ran > used else ""
    rounds = f"{used} round{'s' if used != 1 else ''}"
    what = f"{type(model).__name__}, {rounds}{note}" if ran else type(model).__name__
    print(f"\n{run.label} on {run.data_name}: {what}, {result.seconds:.1f} s")
    print(format_table(result.rows))
    print(f"\nmodel saved to {result.out_path}")
    if result.logged:
        root = str(Path(run.logdir).parent)
        print(f"TensorBoard logs in {run.logdir}; view them with: tensorboard --logdir {root}")


def cmd_train(args) -> int:
    """``train``: the one training run (:func:`torchrankboost.training.train`); rank 0
    prints the summary."""
    result = train(args)
    if result is not None:
        _print_summary(result)
    return 0


def _load_model(path: str, device):
    if not os.path.lexists(path):
        raise CLIError(f"model not found: {path}")
    try:
        return load_model(path, device=device)
    except Exception as exc:  # any reader error (safetensors, JSON, ...) is one line
        msg = first_line(exc)
        if msg.startswith(f"{path}: "):
            msg = msg[len(path) + 2:]
        raise CLIError(f"cannot load model {path}: {msg}") from None


def _normalize(args, stored) -> bool:
    """Per-query scaling for ``evaluate``/``predict``: the model's stored choice (a
    ``--normalize`` that contradicts it is an error); the flag alone for a model without one."""
    asked = bool(getattr(args, "normalize", False))
    if stored is None:
        return asked
    if asked and not stored:
        raise CLIError(f"--normalize contradicts the model {args.model}: it was trained "
                       f"without per-query normalisation")
    return bool(stored)


def _score_file(args):
    """``(data, scores)``: the saved model ``args.model`` applied to ``args.file`` (its
    features padded to the model's count) on ``args.device``."""
    import torch

    dev = device(args.device)
    model = _load_model(args.model, dev)
    stored = model.info.get("zero_based")  # the training run's numbering
    asked = ZERO_BASED[getattr(args, "zero_based", "auto")]
    if stored is not None and asked != "auto" and asked != stored:
        raise CLIError(f"--zero-based {args.zero_based} contradicts the model's "
                       f"{'0' if stored else '1'}-based feature numbering ({args.model})")
    if stored is None and asked == "auto":  # saved from Python: no numbering to go by
        raise CLIError(f"{args.model} records no feature numbering (a model saved from "
                       f"Python); pass --zero-based yes (file index i is feature i) or "
                       f"--zero-based no (index i is feature i-1)")
    zb = asked if asked != "auto" else bool(stored)
    try:
        data = load_file(args.file, zero_based=zb,
                         max_features=getattr(args, "max_features", None))
    except ValueError as exc:
        if stored is False and "feature index 0" in str(exc):
            raise CLIError(f"{first_line(exc, default='')}; the model {args.model} was trained with "
                           f"1-based feature numbering (index 0 does not exist there)"
                           ) from None
        raise
    F = model.num_features
    if data.num_features > F:
        raise CLIError(f"{args.file}: has {data.num_features} features, the model expects {F}")
    data = pad_features(data, F).to(dev)
    if _normalize(args, model.info.get("normalize")):
        data = normalized(data)
    with torch.no_grad():
        return data, model.predict(data.X)


def cmd_evaluate(args) -> int:
    from . import registry

    names = args.metric
    for n in names or ():
        registry.metric(n)
    data, s = _score_file(args)
    if names is None:
        names = DEFAULT_REPORT_BINARY if is_binary(data.labels) else DEFAULT_REPORT_GRADED
    print(format_table({Path(args.file).name: compute_metrics(s, data.labels, data.groups,
                                                              names)}))
    return 0


def cmd_predict(args) -> int:
    import torch

    from ._io import atomic_write

    if args.output:  # before any work: not an input, a folder, read-only or unwritable
        check_output(args.output, [Path(p) for p in (args.model, args.file)
                                    if Path(p).exists()])
    data, s = _score_file(args)
    if data.row is not None:  # back to file order if the loader regrouped the rows
        s = torch.empty_like(s).index_copy_(0, data.row.to(s.device), s)
    text = "\n".join(repr(float(v)) for v in s.detach().cpu().tolist())
    if args.output:
        atomic_write(args.output, lambda fh: fh.write(text + ("\n" if text else "")))
    else:
        sys.stdout.write(text + ("\n" if text else ""))
    return 0


#: the failures of ranks that make a data-parallel run an input error (status 2)
_INPUT_ERRORS = ("CLIError", "ValueError", "FileNotFoundError", "PermissionError",
                 "IsADirectoryError", "NotADirectoryError", "OSError", "UnicodeDecodeError")


def _distributed_status(exc: DistributedError) -> int:
    """2 when every failing rank had an input error (a bad line in its shard), else 1."""
    kinds = {str(m).split(":", 1)[0] for m in exc.failures.values()}
    return 2 if kinds and kinds <= set(_INPUT_ERRORS) else 1


def _distributed_message(exc: DistributedError) -> str:
    """One line for a failure of a data-parallel run: the same message of several ranks
    once ("ranks 0, 1 failed: CLIError: ...")."""
    msgs = set(exc.failures.values())
    if len(exc.failures) > 1 and len(msgs) == 1:
        ranks = ", ".join(str(r) for r in sorted(exc.failures))
        return f"ranks {ranks} failed: {next(iter(msgs)).splitlines()[0]}"
    return first_line(exc, default='')


def _check_before_launch(args) -> None:
    """``train --nproc N`` in the parent: what would stop every rank, checked once
    (:mod:`torchrankboost.launch_checks`; one line, status 2)."""
    if args.command == "train" and args.nproc is not None and not under_launcher():
        from .launch_checks import check_before_launch

        check_before_launch(args, args.nproc)


def _say(line: str, reporter: Optional[int] = None) -> None:
    """The command's final line on stderr; in a rank of ``--nproc``, handed to the parent
    (which prints one line for every rank); under ``torchrun``, printed by rank
    ``reporter`` only (``None``: by every rank that fails)."""
    if report_to_parent(line):
        return
    if reports_failures(reporter):
        print(line, file=sys.stderr)


def cmd_export(args) -> int:
    """``export``: :mod:`torchrankboost.export.cli` on the saved model."""
    return export_command(args, lambda: _load_model(args.model, device("cpu")))


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict,
            "list": cmd_list, "export": cmd_export, "bin": cmd_bin}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``torchrankboost`` console script; returns the exit status."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    if args.command is None:
        parser.print_help()
        return 0
    owned = False
    try:
        _check_before_launch(args)  # train --nproc: input errors here, before any rank
        if args.command == "train" and args.nproc is not None and not under_launcher():
            check_run_name(args.name)  # status 2 here, before any rank starts
            prepare_before_launch(args)  # --cache: built once, the ranks map it
            return relaunch(raw, args.nproc)
        _set_threads(getattr(args, "threads", None))
        if under_launcher():
            _one_line_warnings()
        if args.command == "train":  # under torchrun: this process joins the group
            owned, args.device = start_process_group(args.device, args.timeout)
        status = COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that left (`| head`) shows up here, not at exit
        return status
    except BrokenPipeError:  # `torchrankboost list | head -2`: no traceback, no message
        try:  # nothing more can reach the reader; keep the interpreter's exit flush quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, as a command killed by the closed pipe
    except NumericalError as exc:  # the run failed numerically: status 1, one line
        _say(f"{PROG}: error: {first_line(exc, default='')}")
        return 1
    except DistributedError as exc:  # some rank failed: rank 0 says it, status 1 (2: input)
        _say(f"{PROG}: error: {_distributed_message(exc)}", exc.reporter)
        return _distributed_status(exc)
    except CLIError as exc:
        _say(f"{PROG}: error: {exc}")
        return 2
    except FileNotFoundError as exc:
        _say(f"{PROG}: error: {exc.filename or exc}: file not found"
             if exc.filename else f"{PROG}: error: {exc}")
        return 2
    except ValueError as exc:
        _say(f"{PROG}: error: {first_line(exc, default='') or 'invalid value'}")
        return 2
    except OSError as exc:  # an unwritable folder, a full disk, ...: one line, status 2
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        _say(f"{PROG}: error: {where}{exc.strerror or first_line(exc, default='')}")
        return 2
    except KeyboardInterrupt:
        _say(f"{PROG}: interrupted", 0)
        return 130
    finally:
        if owned:  # the failure's frames (tensors, graphs) go before the process group
            end_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
