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
print one line ``torchrankboost: error: ...`` on stderr and exit with status 2; a run that
fails numerically (:class:`~torchrankboost.contract.NumericalError`: a NaN gradient, an
unbounded step with ``-p on_unbounded=raise``...) prints one such line and exits with status
1; no traceback.

**Several processes.** ``torchrun --standalone --nproc-per-node N -m torchrankboost train ...``
(or ``torchrankboost train --nproc N ...``, which re-launches itself that way) trains one
model data-parallel: each process initialises the process group (gloo on CPU, NCCL with
``--device cuda``, one GPU per ``LOCAL_RANK``), holds a shard of whole queries of every split
(built-in data: the split of one process cut by :meth:`~torchrankboost.data.RankingData.shard`;
files: :func:`~torchrankboost.data.load_svmlight_shard`, each rank parsing its own byte
range) and fits with the algorithm's data-parallel path (``boost``, ``qbrank``, ``gbt``,
``rankboost``); metrics are combined over the ranks; rank 0 alone prints, writes the
TensorBoard events and saves the model — the model of one process on the whole data. A
failure on one rank stops every rank with an error naming it (status 1).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .contract import NumericalError
from .datasets import load_data, load_file, pad_features
from .parallel import DistributedError
from .factory import load_model, make_ranker, resolve_device, rounds_kept
from .registry import parse_value

__all__ = ["main", "build_parser", "parse_params", "CLIError"]

PROG = "torchrankboost"
DEFAULT_REPORT_GRADED = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "auc", "pair_error")
DEFAULT_REPORT_BINARY = ("auc", "pair_error", "map", "ndcg@10", "pos_above_neg")


class CLIError(Exception):
    """An input problem reported as one line and exit status 2."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


# ============================================================================ parameters
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
            out[key] = parse_value(val)
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

_NUMBERING_HELP = ("feature numbering of the SVMlight files: auto (0-based iff some file of "
                   "the run uses index 0), yes (0-based) or no (1-based, LETOR)")
_ZERO_BASED = {"auto": "auto", "yes": True, "no": False}
_MAX_FEATURES_HELP = ("widest feature matrix a file may imply before it is allocated "
                      "(default 100000; a stray huge index is refused, naming its line)")


def _add_reading_options(p) -> None:
    """``--zero-based`` and ``--max-features`` of ``evaluate`` and ``predict``."""
    p.add_argument("--zero-based", choices=tuple(_ZERO_BASED), default="auto",
                   help=_NUMBERING_HELP + "; default: the numbering stored in the model")
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
    g = tr.add_argument_group("data")
    g.add_argument("--data", default="wdbc", metavar="DATA",
                   help="built-in set (wdbc, synthetic), a LETOR fold folder "
                        "(train.txt/vali.txt/test.txt) or an SVMlight file with qid "
                        "(default: wdbc)")
    g.add_argument("--valid", metavar="FILE", help="validation file (SVMlight) for early stopping")
    g.add_argument("--test", metavar="FILE", help="test file (SVMlight) for the final report")
    g.add_argument("--normalize", action="store_true",
                   help="per-query min-max feature scaling (LETOR's QueryLevelNorm; "
                        "recommended for MSLR-WEB); pass it to evaluate/predict too")
    g.add_argument("--zero-based", choices=tuple(_ZERO_BASED), default="auto",
                   help=_NUMBERING_HELP + "; decided once for every file of the run and "
                        "stored in the model")
    g.add_argument("--max-features", type=int, default=None, metavar="N", help=_MAX_FEATURES_HELP)
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
    g = tr.add_argument_group("output")
    g.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, mps ...")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads of torch (default 1: small tensor operations stall with "
                        "more on a busy machine; see the README's section on threads)")
    g.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="train data-parallel on N local processes: re-launches this command "
                        "through torch.distributed.run (torchrun --standalone "
                        "--nproc-per-node N), each process holding a shard of the queries"),
    g.add_argument("--logdir", default=None, metavar="DIR",
                   help="TensorBoard run directory (default runs/<name>-<timestamp>)")
    g.add_argument("--name", default=None, help="run name (default <data>-<algorithm>)")
    g.add_argument("--output", "-o", default=None, metavar="PATH",
                   help="where to save the model (default <logdir>/model.safetensors)")
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
    ev.add_argument("--normalize", action="store_true",
                    help="per-query min-max feature scaling (as the model was trained with)")
    _add_reading_options(ev)

    pr = sub.add_parser("predict", help="write one score per line for a data file",
                        description="Score every line of an SVMlight file with a saved model.")
    pr.add_argument("model", help="a model saved by `torchrankboost train`")
    pr.add_argument("file", help="SVMlight/LETOR file")
    pr.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="output file (default: standard output)")
    pr.add_argument("--device", default="cpu")
    pr.add_argument("--normalize", action="store_true",
                    help="per-query min-max feature scaling (as the model was trained with)")
    _add_reading_options(pr)

    ls = sub.add_parser("list", help="list losses, algorithms, learners and metrics",
                        description="List the available names with a one-line description.")
    ls.add_argument("kind", nargs="?", default=None,
                    help="losses, algorithms, learners or metrics (default: all)")
    return parser


# ============================================================================ commands
def _device(name: str):
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _set_threads(n) -> None:
    """torch's intra-op threads for the whole command (``--threads``; default 1)."""
    import torch

    from ._threads import DEFAULT_THREADS, check_threads

    try:
        n = check_threads(n, "--threads")
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    torch.set_num_threads(n if n is not None else DEFAULT_THREADS)


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
# options turned on when TensorBoard logs the run: the driver's training metrics per round,
# RankBoost's ranking margin per round
_LOGGED_OPTIONS = {"boost": {"eval_train": True}, "rankboost": {"track_margin": True}}


@dataclass
class _Run:
    """What ``train`` decided before fitting."""

    algorithm: str  # canonical algorithm name
    label: str  # the algorithm, or the driver's loss
    data_name: str
    metric: str  # validation metric (early stopping)
    report: Sequence[str]  # metrics of the final table
    logdir: str
    early_stopping: int  # patience, 0 = off


def _data_name(source: str, name: str) -> str:
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


def _normalized(d):
    """``d`` with its features scaled per query (``None`` stays ``None``)."""
    from dataclasses import replace

    from .data import normalize_per_query

    return None if d is None else replace(d, X=normalize_per_query(d.X, d.groups))


def _ranker_options(args) -> Dict[str, Any]:
    """``make_ranker`` keywords from the command line; unknown names fail here, before any
    data is read."""
    from . import registry

    algorithm = registry.lookup("algorithm", args.algorithm or "boost").name
    if algorithm != "boost" and (args.loss or args.loss_param):
        raise CLIError(f"--loss/--loss-param go with the generic driver (--algorithm boost); "
                       f"algorithm {algorithm!r} has its own objective (options: -p KEY=VALUE)")
    for m in ([args.metric] if args.metric else []) + list(args.report or ()):
        registry.metric(m)
    return dict(algorithm=algorithm,
                loss=registry.lookup("loss", args.loss).name if args.loss else None,
                learner=registry.lookup("learner", args.learner).name if args.learner else None,
                n_rounds=args.rounds, learning_rate=args.learning_rate,
                max_leaves=args.max_leaves,
                loss_params=parse_params(args.loss_param, "--loss-param"),
                learner_params=parse_params(args.learner_param, "--learner-param"),
                params=parse_params(args.param, "--param"),
                n_threads=args.threads or 1)  # --threads (validated in main)


def _run_folder(args, run: _Run) -> str:
    """The run folder, claimed (created atomically) on first use."""
    from .tensorboard import default_logdir

    if not run.logdir:
        run.logdir = default_logdir(args.name or f"{run.data_name}-{run.label}")
    return run.logdir


def _input_paths(args) -> List[Path]:
    """The files and folders a train run reads (an output must not be one of them)."""
    out = []
    for p in (args.data, args.valid, args.test):
        if p and Path(p).exists():
            out.append(Path(p))
            if Path(p).is_dir():
                out.extend(Path(p).iterdir())
    return out


def _check_output(path: str, inputs: Sequence[Path], what: str = "--output") -> None:
    """Refuse, before any long work, an output that is one of the inputs, a folder, a
    special or read-only file, or in a folder that cannot take a new file."""
    from ._io import check_writable

    target = Path(path)
    for folder in target.parents:
        if folder.exists():
            if not folder.is_dir():
                raise CLIError(f"{what}: cannot write {path}: {folder} is a file, not a folder")
            break
    for p in inputs:
        try:
            same = target.exists() and os.path.samefile(target, p)
        except OSError:
            same = False
        if same or target.resolve() == Path(p).resolve():
            raise CLIError(f"{what} {path} is also an input ({p}); choose another file")
    try:
        check_writable(target)
    except ValueError as exc:
        raise CLIError(f"{what}: {exc}") from None


def _save_model(model, out_path: str, args, run: _Run) -> str:
    """Save ``model`` to ``out_path``; if that fails, to a fallback file in the run folder
    (saying where). Returns the path written."""
    try:
        model.save(out_path)
        return out_path
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or _first_line(exc)
        folder = _run_folder(args, run)
        os.makedirs(folder, exist_ok=True)
        fallback = os.path.join(folder, "model.fallback.safetensors")
        if os.path.abspath(fallback) == os.path.abspath(out_path):
            raise CLIError(f"cannot save the model to {out_path}: {reason}") from None
        model.save(fallback)
        print(f"{PROG}: warning: cannot save the model to {out_path} ({reason}); saved it to "
              f"{fallback} instead", file=sys.stderr)
        return fallback


def _save_partial(ranker, out_path: Optional[str], args, run: _Run) -> Optional[str]:
    """After an interrupted or failed fit: the model of the last good round (``model_``) to
    ``<output stem>.partial.safetensors``; returns the path, or ``None`` when there is none."""
    model = ranker.model_
    if model is None:
        return None
    base = out_path or os.path.join(_run_folder(args, run), "model.safetensors")
    os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
    stem = base[:-len(".safetensors")] if base.endswith(".safetensors") else base
    path = stem + ".partial.safetensors"
    try:
        model.save(path)
    except (OSError, ValueError) as exc:
        print(f"{PROG}: warning: cannot save the partial model to {path}: "
              f"{getattr(exc, 'strerror', None) or _first_line(exc)}", file=sys.stderr)
        return None
    return path


def _plan(args, options: Dict[str, Any], train, valid, data_name: str) -> _Run:
    binary = _is_binary(train.labels)
    algorithm = options["algorithm"]
    label = algorithm if algorithm != "boost" else options["loss"] or "exponential"
    patience = args.early_stopping
    if patience is None:
        patience = 20 if valid is not None else 0
    return _Run(algorithm=algorithm, label=label, data_name=data_name,
                metric=args.metric or ("auc" if binary else "ndcg@10"),
                report=args.report or (DEFAULT_REPORT_BINARY if binary else DEFAULT_REPORT_GRADED),
                logdir=args.logdir or "",  # default: claimed by _run_folder when needed
                early_stopping=patience)


# ---------------------------------------------------------------------------- several processes
#: the algorithms with a data-parallel fit (the Booster and its configurations, RankBoost)
DISTRIBUTED_ALGORITHMS = ("boost", "qbrank", "gbt", "rankboost")


def _context():
    """The process group's context (disabled without one, or with one process)."""
    from .parallel import get_context

    return get_context(None)


def _init_process_group(args):
    """Under ``torchrun`` (``WORLD_SIZE`` set) for ``train``: initialise the process group
    (gloo, or NCCL on ``LOCAL_RANK``'s GPU with ``--device cuda``). Returns ``True`` when
    this call initialised it (the caller destroys it at the end)."""
    if getattr(args, "command", None) != "train" or "WORLD_SIZE" not in os.environ:
        return False
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        return False
    backend = "gloo"
    if str(args.device).startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if not torch.cuda.is_available():
            raise CLIError("--device cuda under torchrun: CUDA is not available here")
        torch.cuda.set_device(local)
        args.device = f"cuda:{local}"
        backend = "nccl"
    dist.init_process_group(backend, timeout=timedelta(minutes=10))
    return True


def _strip_nproc(argv: Sequence[str]) -> List[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def _relaunch(argv: Sequence[str], nproc: int) -> int:
    """``train --nproc N``: this command again on ``N`` processes through
    ``torch.distributed.run``; returns its exit status."""
    import subprocess

    if nproc < 1:
        raise CLIError(f"--nproc must be a positive integer, got {nproc}")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", "-m", "torchrankboost", *_strip_nproc(argv)]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.call(cmd, env=env)


def _load_sharded(args, ctx):
    """``(train, valid, test, name)``: this rank's shards of the run's splits. Built-in
    data: the one-process split (the same seed on every rank) cut by ``shard``; files: each
    rank parses its own part (``load_svmlight_shard``), with one feature numbering for every
    file of the run (``auto``: 0-based iff some file uses index 0) and one feature count."""
    from .datasets import BUILTIN, _fold_paths, align_features, load_builtin
    from .data import load_svmlight_shard

    source = args.data
    p = Path(source)
    splits: Dict[str, Any] = {"train": None, "valid": None, "test": None}
    files: Dict[str, Any] = {}
    if source.strip().lower() in BUILTIN and not p.exists():
        name = source.strip().lower()
        for k, d in zip(splits, load_builtin(source, seed=args.seed)):
            splits[k] = None if d is None else d.shard(ctx.rank, ctx.world_size)
    elif p.is_dir():
        files = dict(zip(("train", "valid", "test"), _fold_paths(p, source)))
        name = p.name or "fold"
    elif p.exists():
        files = {"train": p}
        name = p.stem
    else:
        raise FileNotFoundError(f"data not found: {source!r} is neither a built-in data set "
                                f"({', '.join(BUILTIN)}) nor an existing file or LETOR fold "
                                "folder")
    if args.valid:
        files["valid"] = args.valid
    if args.test:
        files["test"] = args.test
    zb = _ZERO_BASED[args.zero_based]

    def read(path, numbering):
        q = Path(path)
        what = sorted(str(f) for f in q.iterdir() if f.is_file()) if q.is_dir() else str(q)
        return load_svmlight_shard(what, zero_based=numbering, max_features=args.max_features)

    loaded = {k: read(f, zb) for k, f in files.items()}
    if zb == "auto" and len({d.zero_based for d in loaded.values()}) > 1:
        # a file uses index 0: the whole run is 0-based (the 1-based reads are redone)
        loaded = {k: (d if d.zero_based else read(files[k], True)) for k, d in loaded.items()}
    splits.update(loaded)
    numbering = next(iter(loaded.values())).zero_based if loaded else None
    tr, va, te = align_features(splits["train"], splits["valid"], splits["test"])
    if numbering is not None:
        for d in (tr, va, te):
            if d is not None:
                d.zero_based = numbering
    return tr, va, te, name


def _global_metrics(model, splits: Dict[str, Any], run: _Run, ctx):
    """``{split: {metric: value}}`` of the final model over every rank's shard (one
    all-reduce; a metric that is undefined somewhere, or has no per-query values, is NaN)."""
    import torch

    from . import registry
    from .parallel import metric_parts

    names = [registry.metric(n).name for n in run.report]
    parts = []
    for d in splits.values():
        with torch.no_grad():
            s = model.predict(d.X)
        for n in run.report:
            try:
                parts.append(metric_parts(n, s, d.labels, d.groups))
            except ValueError:
                parts.append(torch.full((2,), float("nan"), dtype=torch.float64))
    tot = ctx.all_reduce_sum(torch.stack(parts)) if parts else None
    rows, k = {}, 0
    for split in splits:
        rows[split] = {}
        for n in names:
            num, den = float(tot[k, 0]), float(tot[k, 1])
            rows[split][n] = num / den if den > 0 else float("nan")
            k += 1
    return rows


def _fit(ranker, splits: Dict[str, Any], run: _Run, callbacks: List[Any]):
    """Fit on ``splits["train"]``, watching ``splits["valid"]`` when there is one; returns
    ``(model, seconds)``."""
    from . import registry

    tr, va = splits["train"], splits.get("valid")
    kwargs: Dict[str, Any] = {"callbacks": callbacks}
    if va is not None:
        main_metric = registry.metric(run.metric).name
        watch = [run.metric] + [m for m in run.report if registry.metric(m).name != main_metric]
        if run.algorithm == "boost":  # the driver's loss is the user's choice: watch it too
            watch.append("loss")
        kwargs.update(eval_set=[(va.X, va.labels, va.groups)], eval_metric=watch,
                      early_stopping_rounds=run.early_stopping or None)
    t0 = time.perf_counter()
    model = ranker.fit(tr.X, tr.labels, tr.groups, **kwargs)
    return model, time.perf_counter() - t0


def _final_metrics(model, splits: Dict[str, Any], run: _Run, logger, step: int):
    """``{split: {metric: value}}`` of the final model; with a logger, the score histograms
    and the PR/ROC curves of the last split (test, else valid, else train)."""
    import torch

    rows = {}
    last = list(splits)[-1]
    for split, d in splits.items():
        with torch.no_grad():
            s = model.predict(d.X)
        rows[split] = compute_metrics(s, d.labels, d.groups, run.report)
        if logger is not None:
            logger.log_histograms(step, {f"scores/{split}": s})
            if split == last:
                logger.log_curves(step, d.labels, s, tag=split)
    return rows


def _print_summary(run: _Run, ranker, model, seconds: float, rows, out_path: str,
                   logger) -> None:
    used, ran = rounds_kept(ranker, run.early_stopping), len(ranker.history_)
    note = f" (the best on validation; {ran} rounds run)" if ran > used else ""
    rounds = f"{used} round{'s' if used != 1 else ''}"
    what = f"{type(model).__name__}, {rounds}{note}" if ran else type(model).__name__
    print(f"\n{run.label} on {run.data_name}: {what}, {seconds:.1f} s")
    print(format_table(rows))
    print(f"\nmodel saved to {out_path}")
    if logger is not None:
        root = str(Path(run.logdir).parent)
        print(f"TensorBoard logs in {run.logdir}; view them with: tensorboard --logdir {root}")


def cmd_train(args) -> int:
    import torch

    from .progress import ProgressCallback
    from .tensorboard import TensorBoardLogger

    ctx = _context()
    if ctx.enabled:
        return _train_distributed(args, ctx)
    dev = _device(args.device)
    if not 0 <= args.seed < 2 ** 63:
        raise CLIError(f"--seed must be an integer in [0, 2^63), got {args.seed}")
    torch.manual_seed(args.seed)
    options = _ranker_options(args)
    if args.output:  # before reading data or fitting: the model must have somewhere to go
        _check_output(args.output, _input_paths(args))
    tr, va, te, data_name = load_data(args.data, valid=args.valid, test=args.test,
                                      seed=args.seed, zero_based=_ZERO_BASED[args.zero_based],
                                      max_features=args.max_features)
    if tr.X.shape[0] == 0:
        raise CLIError(f"training data {args.data!r} is empty")
    for what, d, name in (("validation", va, args.valid), ("test", te, args.test)):
        if d is not None and d.X.shape[0] == 0:
            raise CLIError(f"{what} data {name or args.data!r} is empty")
    if args.early_stopping and va is None:
        raise CLIError(f"--early-stopping {args.early_stopping} needs validation data "
                       f"(--valid FILE, or a LETOR fold / built-in data with a validation "
                       f"split)")
    data_name = _data_name(args.data, data_name)
    if args.normalize:
        tr, va, te = (_normalized(d) for d in (tr, va, te))
    run = _plan(args, options, tr, va, data_name)
    if not args.no_tensorboard:  # what the log shows beyond the defaults
        for key, value in _LOGGED_OPTIONS.get(run.algorithm, {}).items():
            options["params"].setdefault(key, value)
    ranker = make_ranker(**options)  # bad parameters fail here, before a run directory exists
    if not args.no_tensorboard or not args.output:
        _run_folder(args, run)
    if not args.output:
        _check_output(os.path.join(run.logdir, "model.safetensors"), [])

    callbacks: List[Any] = [ProgressCallback(quiet=args.quiet)]
    logger = None
    if not args.no_tensorboard:
        logger = TensorBoardLogger(run.logdir, hparams={
            "algorithm": args.algorithm or "boost", "data": data_name, "metric": run.metric,
            "early_stopping": run.early_stopping}, hparams_on_fit_end=False)
        callbacks.append(logger)
    splits = {k: d.to(dev) for k, d in (("train", tr), ("valid", va), ("test", te))
              if d is not None}
    if not args.quiet:
        print(f"{PROG}: training {run.label} on {data_name} ({tr.num_queries} train queries, "
              f"{len(tr)} documents, {tr.num_features} features) on {dev}", file=sys.stderr)
    try:
        try:
            model, seconds = _fit(ranker, splits, run, callbacks)
        except (KeyboardInterrupt, NumericalError) as exc:
            saved = _save_partial(ranker, args.output, args, run)
            if saved is None:
                raise
            note = f"the model of the last good round is saved to {saved}"
            if isinstance(exc, NumericalError):  # still one line
                raise NumericalError(f"{_first_line(exc)}; {note}", round=exc.round,
                                     model=exc.model) from None
            print(f"{PROG}: {ranker.stop_reason_}; {note}", file=sys.stderr)
            raise
        used = rounds_kept(ranker, run.early_stopping)
        rows = _final_metrics(model, splits, run, logger, used)
        out_path = args.output or os.path.join(run.logdir, "model.safetensors")
        if tr.zero_based is not None:
            model.info["zero_based"] = bool(tr.zero_based)
        out_path = _save_model(model, out_path, args, run)
        if logger is not None:
            final = {f"{split}/{k}": v for split, r in rows.items() for k, v in r.items()}
            final.update(seconds=seconds, rounds_used=used, best_round=ranker.best_round_)
            logger.log_hparams(None, final, step=used)
    finally:  # a failed run (NumericalError...) still leaves readable event files
        if logger is not None:
            logger.close()
    _print_summary(run, ranker, model, seconds, rows, out_path, logger)
    return 0


def _train_distributed(args, ctx) -> int:
    """``train`` on one rank of a process group (see the module docstring): the same run as
    :func:`cmd_train`, with sharded data, rank 0 alone printing, logging and saving."""
    import torch

    from .progress import ProgressCallback
    from .tensorboard import TensorBoardLogger

    main_rank = ctx.is_main
    run = logger = ranker = None
    with ctx.guard():  # a bad option or output on one rank stops every rank
        dev = _device(args.device)
        if not 0 <= args.seed < 2 ** 63:
            raise CLIError(f"--seed must be an integer in [0, 2^63), got {args.seed}")
        torch.manual_seed(args.seed)
        options = _ranker_options(args)
        if options["algorithm"] not in DISTRIBUTED_ALGORITHMS:
            raise CLIError(f"algorithm {options['algorithm']!r} has no data-parallel fit; "
                           f"under torchrun use one of {', '.join(DISTRIBUTED_ALGORITHMS)}")
        if args.output and main_rank:
            _check_output(args.output, _input_paths(args))
    tr, va, te, data_name = _load_sharded(args, ctx)
    with ctx.guard():
        for what, d, name in (("training", tr, args.data), ("validation", va, args.valid),
                              ("test", te, args.test)):
            if d is not None and d.X.shape[0] == 0:
                raise CLIError(f"{what} data {name or args.data!r}: this rank's shard is "
                               f"empty (fewer queries than processes?)")
        if args.early_stopping and va is None:
            raise CLIError(f"--early-stopping {args.early_stopping} needs validation data "
                           f"(--valid FILE, or a LETOR fold / built-in data with a "
                           f"validation split)")
    binary = bool(ctx.all_reduce_min(torch.tensor([int(_is_binary(tr.labels))]))[0])
    counts = ctx.all_reduce_sum(torch.tensor([len(tr), tr.num_queries], dtype=torch.int64))
    with ctx.guard():
        data_name = _data_name(args.data, data_name)
        if args.normalize:
            tr, va, te = (_normalized(d) for d in (tr, va, te))
        run = _plan(args, options, tr, va, data_name)
        run.metric = args.metric or ("auc" if binary else "ndcg@10")
        run.report = args.report or (DEFAULT_REPORT_BINARY if binary else DEFAULT_REPORT_GRADED)
        if not args.no_tensorboard:
            for key, value in _LOGGED_OPTIONS.get(run.algorithm, {}).items():
                options["params"].setdefault(key, value)
        ranker = make_ranker(**options)
        if main_rank:
            if not args.no_tensorboard or not args.output:
                _run_folder(args, run)
            if not args.output:
                _check_output(os.path.join(run.logdir, "model.safetensors"), [])
    callbacks: List[Any] = []
    if main_rank:  # rank 0 alone prints and writes events (the fit runs callbacks there only)
        callbacks.append(ProgressCallback(quiet=args.quiet))
        if not args.no_tensorboard:
            logger = TensorBoardLogger(run.logdir, hparams={
                "algorithm": args.algorithm or "boost", "data": data_name, "metric": run.metric,
                "early_stopping": run.early_stopping, "world_size": ctx.world_size},
                hparams_on_fit_end=False)
            callbacks.append(logger)
    splits = {k: d.to(dev) for k, d in (("train", tr), ("valid", va), ("test", te))
              if d is not None}
    if main_rank and not args.quiet:
        print(f"{PROG}: training {run.label} on {data_name} ({int(counts[1])} train queries, "
              f"{int(counts[0])} documents, {tr.num_features} features) on {ctx.world_size} "
              f"processes ({ctx.backend}, {dev})", file=sys.stderr)
    out_path = args.output or (os.path.join(run.logdir, "model.safetensors") if main_rank
                               else None)
    try:
        try:
            model, seconds = _fit(ranker, splits, run, callbacks)
        except (KeyboardInterrupt, NumericalError) as exc:
            saved = _save_partial(ranker, args.output, args, run) if main_rank else None
            if isinstance(exc, NumericalError) and saved is not None:
                raise NumericalError(f"{_first_line(exc)}; the model of the last good round "
                                     f"is saved to {saved}", round=exc.round,
                                     model=exc.model) from None
            raise
        used = rounds_kept(ranker, run.early_stopping)
        rows = _global_metrics(model, splits, run, ctx)
        if tr.zero_based is not None:
            model.info["zero_based"] = bool(tr.zero_based)
        model.info["world_size"] = ctx.world_size
        with ctx.guard():
            if main_rank:
                out_path = _save_model(model, out_path, args, run)
                if logger is not None:
                    final = {f"{split}/{k}": v for split, r in rows.items() for k, v in r.items()}
                    final.update(seconds=seconds, rounds_used=used, best_round=ranker.best_round_)
                    logger.log_hparams(None, final, step=used)
    finally:
        if logger is not None:
            logger.close()
    if main_rank:
        _print_summary(run, ranker, model, seconds, rows, out_path, logger)
    return 0


def _load_model(path: str, device):
    if not os.path.lexists(path):
        raise CLIError(f"model not found: {path}")
    try:
        return load_model(path, device=device)
    except Exception as exc:  # any reader error (safetensors, JSON, ...) is one line
        msg = _first_line(exc) or type(exc).__name__
        if msg.startswith(f"{path}: "):
            msg = msg[len(path) + 2:]
        raise CLIError(f"cannot load model {path}: {msg}") from None


def _score_file(args):
    """``(data, scores)``: the saved model ``args.model`` applied to ``args.file`` (its
    features padded to the model's count) on ``args.device``."""
    import torch

    dev = _device(args.device)
    model = _load_model(args.model, dev)
    stored = model.info.get("zero_based")  # the training run's numbering
    asked = _ZERO_BASED[getattr(args, "zero_based", "auto")]
    if stored is not None and asked != "auto" and asked != stored:
        raise CLIError(f"--zero-based {args.zero_based} contradicts the model's "
                       f"{'0' if stored else '1'}-based feature numbering ({args.model})")
    zb = asked if asked != "auto" or stored is None else bool(stored)
    try:
        data = load_file(args.file, zero_based=zb,
                         max_features=getattr(args, "max_features", None))
    except ValueError as exc:
        if stored is False and "feature index 0" in str(exc):
            raise CLIError(f"{_first_line(exc)}; the model {args.model} was trained with "
                           f"1-based feature numbering (index 0 does not exist there)"
                           ) from None
        raise
    F = model.num_features
    if data.num_features > F:
        raise CLIError(f"{args.file}: has {data.num_features} features, the model expects {F}")
    data = pad_features(data, F).to(dev)
    if getattr(args, "normalize", False):
        data = _normalized(data)
    with torch.no_grad():
        return data, model.predict(data.X)


def cmd_evaluate(args) -> int:
    from . import registry

    names = args.metric
    for n in names or ():
        registry.metric(n)
    data, s = _score_file(args)
    if names is None:
        names = DEFAULT_REPORT_BINARY if _is_binary(data.labels) else DEFAULT_REPORT_GRADED
    print(format_table({Path(args.file).name: compute_metrics(s, data.labels, data.groups,
                                                              names)}))
    return 0


def cmd_predict(args) -> int:
    import torch

    from ._io import atomic_write

    if args.output:  # before any work: not an input, a folder, read-only or unwritable
        _check_output(args.output, [Path(p) for p in (args.model, args.file)
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


def _distributed_message(exc: DistributedError) -> str:
    """One line for a failure of a data-parallel run: the same message of several ranks
    once ("ranks 0, 1 failed: CLIError: ...")."""
    msgs = set(exc.failures.values())
    if len(exc.failures) > 1 and len(msgs) == 1:
        ranks = ", ".join(str(r) for r in sorted(exc.failures))
        return f"ranks {ranks} failed: {next(iter(msgs)).splitlines()[0]}"
    return _first_line(exc)


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict,
            "list": cmd_list}


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
        if args.command == "train" and args.nproc is not None \
                and "WORLD_SIZE" not in os.environ:
            return _relaunch(raw, args.nproc)
        _set_threads(getattr(args, "threads", None))
        owned = _init_process_group(args)
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
        print(f"{PROG}: error: {_first_line(exc)}", file=sys.stderr)
        return 1
    except DistributedError as exc:  # some rank of a data-parallel run failed: status 1
        print(f"{PROG}: error: {_distributed_message(exc)}", file=sys.stderr)
        return 1
    except CLIError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"{PROG}: error: {exc.filename or exc}: file not found"
              if exc.filename else f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"{PROG}: error: {_first_line(exc) or 'invalid value'}", file=sys.stderr)
        return 2
    except OSError as exc:  # an unwritable folder, a full disk, ...: one line, status 2
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"{PROG}: error: {where}{exc.strerror or _first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        if owned:  # the failure's frames (tensors, graphs) go before the process group
            import gc

            import torch.distributed as dist

            gc.collect()
            if dist.is_initialized():
                dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
