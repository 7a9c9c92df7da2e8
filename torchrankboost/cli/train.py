"""The ``train`` command: its options (data, model, output), the :class:`TrainOptions` built
from them once, the run (:func:`~torchrankboost.cli.training.run_training`) and its printed
summary; with ``--nproc N`` (outside ``torchrun``), the parent's part: the options checked
once (:mod:`~torchrankboost.cli.launch_checks`), the bin cache built once, then ``N`` ranks
started (:func:`~torchrankboost.parallel.launch.relaunch`) that each run this command again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from ..clicks.debias import NO_DEBIAS
from ..factory import rounds_kept
from ..parallel.launch import context, relaunch
from .cached import prepare_before_launch
from .clicks import add_click_options, propensities
from .inputs import (COLUMNS_HELP, MAX_FEATURES_HELP, NUMBERING_HELP, ZERO_BASED, CLIError,
                     add_column_options, feature_list, parse_params)
from .launch_checks import check_before_launch
from .options import OptionError, TrainOptions
from .scoring import format_table
from .training import TrainResult, ranker_options, run_training

__all__ = ["add_commands", "flag", "train_options", "cmd_train", "launch_train",
           "print_summary"]

#: the fields of :class:`TrainOptions` whose flag is not ``--<field with dashes>``
_FLAGS = {"params": "--param", "loss_params": "--loss-param",
          "learner_params": "--learner-param", "model_params": "--model-param",
          "tensorboard": "--no-tensorboard"}


def add_commands(sub) -> None:
    """The ``train`` sub-command's parser."""
    tr = sub.add_parser("train", help="train a ranker, log to TensorBoard, save the model",
                        description="Train a boosted (or, with --model, a neural) ranker and "
                                    "print train/valid/test metrics.")
    tr.set_defaults(handler=cmd_train)
    tr.add_argument("--config", metavar="FILE",
                    help="read the options from a TOML file (keys: these flags without "
                         "dashes; tables params, loss_params, learner_params, model_params); "
                         "flags given here override it. Every run saves its options beside "
                         "the model as <model stem>.config.toml")
    _add_train_data_options(tr)
    _add_train_model_options(tr)
    _add_train_output_options(tr)


def _add_train_data_options(tr) -> None:
    """``train``'s data options."""
    g = tr.add_argument_group("data", description=COLUMNS_HELP)
    g.add_argument("--data", default="wdbc", metavar="DATA",
                   help="built-in set (wdbc, synthetic), a fold folder (train/vali/test, "
                        "each .txt or .parquet/.feather/.arrow/.csv/.tsv), an SVMlight file "
                        "with qid, or a table file (default: wdbc)")
    g.add_argument("--valid", metavar="FILE",
                   help="validation file (any format of --data) for early stopping")
    g.add_argument("--test", metavar="FILE",
                   help="test file (any format of --data) for the final report")
    add_column_options(g)
    g.add_argument("--weights", metavar="FILE",
                   help="document weights of the training data, one per data line (default: "
                        "the training file's FILE.weight beside it, as LightGBM reads it)")
    g.add_argument("--normalize", action="store_true",
                   help="per-query min-max feature scaling (LETOR's QueryLevelNorm; "
                        "recommended for MSLR-WEB); stored in the model, evaluate/predict "
                        "apply it")
    g.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                   help=NUMBERING_HELP + "; decided once for every file of the run and "
                        "stored in the model")
    g.add_argument("--max-features", type=int, default=None, metavar="N",
                   help=MAX_FEATURES_HELP)
    add_click_options(g)
    g.add_argument("--cache", metavar="PATH", help="train on the bin cache PATH of --data "
                   "(`torchrankboost bin`): built when missing, rebuilt when stale")


def _add_train_model_options(tr) -> None:
    """``train``'s model options: algorithm, loss, learner and their parameters."""
    g = tr.add_argument_group("model")
    g.add_argument("--algorithm", "-a", default=None, metavar="NAME",
                   help="an algorithm by name (see `torchrankboost list algorithms`); "
                        "default: boost (the generic driver with --loss and --learner)")
    g.add_argument("--model", default=None, choices=("mlp", "transformer"),
                   help="train a neural ranker instead of boosting: mlp or transformer (a "
                        "context-aware listwise Transformer); --rounds are its epochs, "
                        "--lr its learning rate, --loss its loss, -p its options (e.g. -p "
                        "max_docs=2048)")
    g.add_argument("--model-param", action="append", default=[], metavar="KEY=VALUE",
                   help="the neural network's option (repeatable), e.g. --model-param "
                        "d_model=128")
    g.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="--model: the network's autocast precision (default fp32)")
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
                        "more on a busy machine; see the docs' command-line guide, 'Threads on a "
                        "shared machine')")
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


# ============================================================================ options
def flag(name: str, metavar: Optional[str] = None) -> str:
    """The ``train`` flag of the :class:`TrainOptions` field ``name`` (``--max-leaves``;
    with ``metavar``: ``--logdir DIR``): how the command spells an :class:`OptionError`."""
    text = _FLAGS.get(name, "--" + name.replace("_", "-"))
    return text if metavar is None else f"{text} {metavar}"


def _table(args, dest: str, what: str) -> dict:
    """A parameter dict: the ``--config`` file's table, then the command line's
    ``KEY=VALUE`` items over it."""
    from_file = dict(getattr(args, "config_tables", {}).get(dest, {}))
    return {**from_file, **parse_params(getattr(args, dest), what)}


def train_options(args) -> TrainOptions:
    """The :class:`TrainOptions` of the parsed ``train`` flags ``args``; a bad option is a
    :class:`~torchrankboost.cli.inputs.CLIError` naming its flag."""
    clicks = args.debias != NO_DEBIAS  # --propensity is read only for debiasing
    try:
        return TrainOptions(
            data=args.data, valid=args.valid, test=args.test, weights=args.weights,
            normalize=args.normalize, zero_based=ZERO_BASED[args.zero_based],
            max_features=args.max_features, position=args.position, debias=args.debias,
            propensity=propensities(args.propensity) if clicks else None, cache=args.cache,
            label_column=args.label_column, qid_column=args.qid_column,
            weight_column=args.weight_column, position_column=args.position_column,
            group_weight_column=args.group_weight_column,
            feature_columns=feature_list(args.feature_columns),
            algorithm=args.algorithm, model=args.model,
            model_params=parse_params(args.model_param, "--model-param"),
            precision=args.precision, loss=args.loss, learner=args.learner, rounds=args.rounds,
            learning_rate=args.learning_rate, max_leaves=args.max_leaves,
            params=_table(args, "param", "--param"),
            loss_params=_table(args, "loss_param", "--loss-param"),
            learner_params=_table(args, "learner_param", "--learner-param"),
            early_stopping=args.early_stopping, metric=args.metric, report=args.report,
            seed=args.seed, device=args.device, threads=args.threads, logdir=args.logdir,
            name=args.name, output=args.output, tensorboard=not args.no_tensorboard,
            init_model=args.init_model, checkpoint_every=args.checkpoint_every,
            resume=args.resume, quiet=args.quiet)
    except OptionError as exc:
        raise CLIError(exc.spelled(flag)) from None


# ============================================================================ commands
def print_summary(result: TrainResult) -> None:
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
    if run.config_path:
        print(f"its options in {run.config_path} (train --config {run.config_path} runs it "
              f"again)")
    if result.logged:
        root = str(Path(run.logdir).parent)
        print(f"TensorBoard logs in {run.logdir}; view them with: tensorboard --logdir {root}")


def cmd_train(args) -> int:
    """``train`` in this process (alone, or one rank of several): the options built (a bad
    one stops every rank), the run; rank 0 prints the summary."""
    with context().guard():
        options = train_options(args)
    result = run_training(options)
    if result is not None:
        print_summary(result)
    return 0


def launch_train(args, argv: Sequence[str]) -> int:
    """``train --nproc N`` in the parent: what would stop every rank checked once (one line,
    status 2, before any rank starts), the bin cache built once, then the ``N`` ranks started
    with the command line ``argv``; returns the run's status."""
    options = train_options(args)
    check_before_launch(options, nproc=args.nproc, timeout=args.timeout)
    prepare_before_launch(options, ranker_options(options))  # --cache: built once
    return relaunch(argv, args.nproc)
