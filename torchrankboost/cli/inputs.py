"""What the commands share: the program's name, the one-line input error
(:class:`CLIError`, exit status 2), ``KEY=VALUE`` parameters, devices, saved models read
with one-line errors, output checks made before any long work, per-query feature scaling
and the default metric tables.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from .._errors import first_line
from ..factory import load_model, make_ranker, resolve_device
from ..registry import parse_value

__all__ = ["PROG", "DEFAULT_REPORT_GRADED", "DEFAULT_REPORT_BINARY", "ZERO_BASED",
           "NUMBERING_HELP", "MAX_FEATURES_HELP", "CLIError",
           "parse_params", "is_binary", "device", "load_saved_model", "normalized",
           "check_output", "check_model_output", "THEIR_FLAGS", "build_ranker",
           "add_column_options", "column_roles", "COLUMNS_HELP"]

PROG = "torchrankboost"
DEFAULT_REPORT_GRADED = ("ndcg@1", "ndcg@5", "ndcg@10", "map", "auc", "pair_error")
DEFAULT_REPORT_BINARY = ("auc", "pair_error", "map", "ndcg@10", "pos_above_neg")
#: ``--zero-based`` choices → the readers' ``zero_based``
ZERO_BASED = {"auto": "auto", "yes": True, "no": False}
#: the help of ``--zero-based`` and ``--max-features`` (the commands add their default)
NUMBERING_HELP = ("feature numbering of the SVMlight files: auto (0-based iff some file of "
                  "the run uses index 0), yes (0-based) or no (1-based, LETOR)")
MAX_FEATURES_HELP = ("widest feature matrix a file may imply before it is allocated "
                     "(default 100000; a stray huge index is refused, naming its line)")


class CLIError(Exception):
    """An input problem reported as one line and exit status 2."""


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


def is_binary(labels) -> bool:
    """All labels are 0 or 1."""
    import torch

    u = torch.unique(labels)
    return u.numel() <= 2 and bool(((u == 0) | (u == 1)).all())


def device(name: str):
    """The torch device ``name``; a bad name is a :class:`CLIError`."""
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def load_saved_model(path: str, device):
    """The model saved at ``path`` (``torchrankboost train``'s output) on ``device``; a
    missing or unreadable file is a :class:`CLIError`."""
    if not os.path.lexists(path):
        raise CLIError(f"model not found: {path}")
    try:
        return load_model(path, device=device)
    except Exception as exc:  # any reader error (safetensors, JSON, ...) is one line
        msg = first_line(exc)
        if msg.startswith(f"{path}: "):
            msg = msg[len(path) + 2:]
        raise CLIError(f"cannot load model {path}: {msg}") from None


def normalized(d):
    """``d`` with its features scaled per query (``None`` stays ``None``)."""
    from dataclasses import replace

    from ..data import normalize_per_query

    return None if d is None else replace(d, X=normalize_per_query(d.X, d.groups))


def check_output(path: str, inputs: Sequence[Path], what: str = "--output") -> None:
    """Refuse, before any long work, an output that is one of the inputs, a folder, a
    special or read-only file, or in a folder that cannot take a new file."""
    from .._io import check_writable

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


def check_model_output(path: str) -> None:
    """A model output named like another format (``.json``, ``.txt``, ...): a ``CLIError``."""
    from .._modelfile import check_model_suffix

    try:
        check_model_suffix(path, "--output")
    except ValueError as exc:
        raise CLIError(str(exc).replace("--output.save: ", "--output ")) from None



#: LightGBM / XGBoost parameter names (and ours given to the wrong flag) -> what ``train``
#: takes instead, named in the error of an unknown ``-p`` / ``--learner-param`` /
#: ``--loss-param`` key
THEIR_FLAGS = {
    "num_leaves": "--max-leaves N", "max_leaves": "--max-leaves N",
    "n_estimators": "--rounds N", "num_boost_round": "--rounds N",
    "num_iterations": "--rounds N", "num_round": "--rounds N", "n_rounds": "--rounds N",
    "eta": "--learning-rate LR", "learning_rate": "--learning-rate LR",
    "max_depth": "--learner-param max_depth=D",
    "min_data_in_leaf": "--learner-param min_samples_leaf=K",
    "min_child_samples": "--learner-param min_samples_leaf=K",
    "min_samples_leaf": "--learner-param min_samples_leaf=K",
    "min_sum_hessian_in_leaf": "--learner-param min_child_weight=W",
    "min_child_weight": "--learner-param min_child_weight=W",
    "lambda_l2": "--learner-param l2=L", "reg_lambda": "--learner-param l2=L",
    "l2": "--learner-param l2=L",
    "min_split_gain": "--learner-param min_split_gain=G",
    "min_gain_to_split": "--learner-param min_split_gain=G",
    "gamma": "--learner-param min_split_gain=G",
    "max_bin": "--learner-param n_bins=B", "n_bins": "--learner-param n_bins=B",
    "feature_fraction": "--learner-param feature_fraction=F",
    "colsample_bytree": "--learner-param feature_fraction=F",
    "bagging_fraction": "-p subsample=F", "subsample": "-p subsample=F",
    "random_state": "--seed N (data split) or -p seed=N",
    "objective": "--loss NAME or --algorithm NAME",
    "metric": "--metric NAME", "eval_at": "--metric ndcg@K",
    "early_stopping_rounds": "--early-stopping N", "early_stopping_round": "--early-stopping N",
    "num_threads": "--threads N", "nthread": "--threads N", "n_jobs": "--threads N",
}


def build_ranker(**kwargs):
    """:func:`~torchrankboost.factory.make_ranker` for the command line: an unknown
    parameter's error names the flag that takes it (``-p num_leaves=15``: ``--max-leaves
    N``), when there is one."""
    try:
        return make_ranker(**kwargs)
    except ValueError as exc:
        text = first_line(exc, default="")
        if not text.startswith("unknown parameter"):
            raise
        given = [(k, flag) for key, flag in (("params", "-p"), ("learner_params",
                                                               "--learner-param"),
                                             ("loss_params", "--loss-param"))
                 for k in (kwargs.get(key) or {})]
        hints = [f"{k}: use {THEIR_FLAGS[k]}" for k, flag in dict.fromkeys(given)
                 if k in THEIR_FLAGS and repr(k) in text
                 and not THEIR_FLAGS[k].startswith(flag + " ")]  # not the flag it came by
        if not hints:
            raise
        raise CLIError(f"{text} ({'; '.join(hints)})") from None


#: what the column flags say once, in each command's help
COLUMNS_HELP = ("tables (Parquet, Feather/Arrow, CSV/TSV) name their columns: the label and the "
                "query ids are the columns 'label' and 'qid', the columns 'weight', "
                "'position' and 'group_weight' are used when present, the features are "
                "every other numeric column")


def add_column_options(group, *, features: bool = True) -> None:
    """The column-role flags of the commands that read tables."""
    for role, what in (("label", "relevance labels"), ("qid", "query ids"),
                       ("weight", "document weights"),
                       ("position", "displayed positions (with --debias)"),
                       ("group-weight", "query weights (one value per query)")):
        group.add_argument(f"--{role}-column", default=None, metavar="NAME",
                           help=f"the table column of the {what} (default: "
                                f"{role.replace('-', '_')!r}"
                                + ("" if role in ("label", "qid") else ", when present") + ")")
    if features:
        group.add_argument("--feature-columns", default=None, metavar="A,B,...",
                           help="the feature columns of a table, comma-separated (default: "
                                "every numeric column without a role)")


def feature_list(text: Optional[str]):
    """``--feature-columns A,B`` as a tuple of names (``None`` stays ``None``)."""
    if text is None:
        return None
    names = tuple(c.strip() for c in text.split(","))
    if not all(names):
        raise CLIError(f"--feature-columns expects comma-separated column names, got {text!r}")
    return names


def column_roles(args, *, optional: Sequence[str] = (), features=None):
    """The :class:`~torchrankboost.data.readers.Columns` of a command's column flags
    (``features``: the feature columns instead of ``--feature-columns``)."""
    from ..data.readers import Columns

    feats = features if features is not None else feature_list(
        getattr(args, "feature_columns", None))
    try:
        return Columns.of(label=args.label_column, qid=args.qid_column,
                          weight=args.weight_column, position=args.position_column,
                          group_weight=args.group_weight_column, features=feats,
                          optional=optional)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
