"""A saved model applied to a data file: the ``evaluate`` command (a metrics table) and the
``predict`` command (the scores in the file's order, with the query ids), and the plain text
table of metrics that ``train`` prints as well.

An SVMlight file is read with the model's own feature numbering (``--zero-based`` may only
confirm it; a model saved from Python records none and needs it) and padded to the model's
feature count. A table (Parquet, Feather/Arrow, CSV/TSV) is read by column names: a model
trained on a table records its feature columns and reads those (a missing one is refused);
a model without names takes the table's other numeric columns, as many as it has
features. Either is scaled per query when the model was trained so (``--normalize`` may only
confirm it).

``predict`` writes to a table when ``--output`` names one (``.parquet``, ``.feather``,
``.csv``, ...: the query id column and ``score``), else text: one score per line, or with
``--with-qid`` (the default for a table with a query id column) the query id, a tab and the
score.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Dict, List, Sequence

from .._errors import first_line
from ..data import load_file, pad_features
from .inputs import (COLUMNS_HELP, DEFAULT_REPORT_BINARY, DEFAULT_REPORT_GRADED,
                     MAX_FEATURES_HELP, NUMBERING_HELP, ZERO_BASED, CLIError,
                     add_column_options, check_output, column_roles, device, is_binary,
                     load_saved_model, normalized)

__all__ = ["add_commands", "cmd_evaluate", "cmd_predict", "compute_metrics",
           "format_table"]


# ============================================================================ tables
def compute_metrics(scores, labels, groups, names: Sequence[str]) -> Dict[str, float]:
    """``{name: value}`` for each metric name (see ``torchrankboost list metrics``)."""
    from .. import registry

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


# ============================================================================ parsers
def add_commands(sub) -> None:
    """The ``evaluate`` and ``predict`` sub-commands' parsers."""
    ev = _add_scoring_command(sub, "evaluate", "metrics of a saved model on a data file",
                              "Print the metrics of a saved model on a data file "
                              "(SVMlight/LETOR, Parquet, Feather/Arrow, CSV/TSV). "
                              + COLUMNS_HELP + ".",
                              "data file (SVMlight with qid, or a table)")
    ev.set_defaults(handler=cmd_evaluate)
    ev.add_argument("--metric", "-m", nargs="+", default=None, metavar="NAME",
                    help="metrics (default: a standard set)")
    pr = _add_scoring_command(sub, "predict", "write the scores of a data file",
                              "Score every row of a data file (SVMlight/LETOR, Parquet, "
                              "Feather/Arrow, CSV/TSV) with a saved model. "
                              + COLUMNS_HELP + ".", "data file")
    pr.set_defaults(handler=cmd_predict)
    pr.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="output file (default: standard output); a .parquet, .feather, "
                         ".arrow, .csv or .tsv file gets a table of the query ids and scores")
    pr.add_argument("--with-qid", action=argparse.BooleanOptionalAction, default=None,
                    help="text output: the query id, a tab and the score on each line "
                         "(default: on for a table with a query id column)")


def _add_scoring_command(sub, name: str, help: str, description: str, file_help: str):
    """``evaluate`` / ``predict``: a saved model applied to a data file."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("model", help="a model saved by `torchrankboost train`")
    p.add_argument("file", help=file_help)
    p.add_argument("--device", default="cpu")
    p.add_argument("--normalize", action="store_true",
                   help="per-query min-max feature scaling, for a model that does not record "
                        "it (a model records its training choice and applies it)")
    p.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                   help=NUMBERING_HELP + "; default: the numbering stored in the model (required "
                        "for a model saved from Python, which records none)")
    p.add_argument("--max-features", type=int, default=None, metavar="N",
                   help=MAX_FEATURES_HELP)
    add_column_options(p, features=False)
    return p


# ============================================================================ commands
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
    """``(data, scores, qid_column)``: the saved model ``args.model`` applied to
    ``args.file`` (its features padded to the model's count, or a table's columns by name)
    on ``args.device``; ``qid_column``: the table's query id column (``None``: it has none;
    ``"qid"`` for SVMlight)."""
    import torch

    from ..data.cache import is_table_file

    dev = device(args.device)
    model = load_saved_model(args.model, dev)
    if is_table_file(args.file):
        data, qname = _read_table(args, model)
    else:
        data, qname = _read_svmlight(args, model), "qid"
    data = data.to(dev)
    if _normalize(args, model.info.get("normalize")):
        data = normalized(data)
    with torch.no_grad():
        if getattr(model, "uses_groups", False):  # a neural ranker reads the queries
            return data, model.predict(data.X, data.groups), qname
        return data, model.predict(data.X), qname


def _read_table(args, model):
    """``(data, qid column or None)`` of a table file read by column names: the model's
    feature columns (a model trained on a table), else the other numeric columns, as many
    as the model has features."""
    from ..data.tables import open_source, read_source

    names = model.info.get("feature_names")
    scoring = args.handler is cmd_predict
    cols = column_roles(args, optional=("label", "qid") if scoring else (),
                        features=tuple(names) if names else None)
    with open_source(args.file, cols) as src:
        if src.num_rows == 0:
            raise CLIError(f"{args.file}: the file has no data rows")
        data = read_source(src)
        qname = src.roles.get("qid")
    F = model.num_features
    if data.num_features != F:
        raise CLIError(f"{args.file}: has {data.num_features} feature columns "
                       f"({', '.join(data.feature_names[:5])}...), the model {args.model} "
                       f"expects {F} (a model trained on SVMlight data records no column "
                       f"names)")
    return data, qname


def _read_svmlight(args, model):
    """An SVMlight file with the model's feature numbering, padded to its feature count."""
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
            raise CLIError(f"{first_line(exc, default='')}; the model {args.model} was "
                           f"trained with 1-based feature numbering (index 0 does not exist "
                           f"there)") from None
        raise
    F = model.num_features
    if data.num_features > F:
        raise CLIError(f"{args.file}: has {data.num_features} features, the model expects {F}")
    return pad_features(data, F)


def cmd_evaluate(args) -> int:
    """``evaluate``: the metrics table of the model on the file."""
    from .. import registry

    names = args.metric
    for n in names or ():
        registry.metric(n)
    data, s, _ = _score_file(args)
    if names is None:
        names = DEFAULT_REPORT_BINARY if is_binary(data.labels) else DEFAULT_REPORT_GRADED
    print(format_table({Path(args.file).name: compute_metrics(s, data.labels, data.groups,
                                                              names)}))
    return 0


def cmd_predict(args) -> int:
    """``predict``: the scores of the file's rows, in its order, to ``--output`` (a table,
    or text) or standard output."""
    import torch

    from .._io import atomic_write
    from ..data.readers import format_of, reader_for

    table_out = bool(args.output) and reader_for(format=format_of(args.output)).tabular
    if args.output:  # before any work: not an input, a folder, read-only or unwritable
        check_output(args.output, [Path(p) for p in (args.model, args.file)
                                    if Path(p).exists()])
    data, s, qname = _score_file(args)
    if data.row is not None:  # back to file order if the loader regrouped the rows
        s = torch.empty_like(s).index_copy_(0, data.row.to(s.device), s)
        qid = torch.empty_like(data.qid).index_copy_(0, data.row.to(data.qid.device), data.qid)
    else:
        qid = data.qid
    scores, qid = s.detach().cpu().double().numpy(), qid.cpu().numpy()
    if table_out:
        _write_scores_table(args.output, scores, qid if qname else None, qname or "qid")
        return 0
    with_qid = args.with_qid if args.with_qid is not None else (
        data.feature_names is not None and qname is not None)
    lines = [f"{int(q)}\t{v!r}" for q, v in zip(qid.tolist(), scores.tolist())] if with_qid \
        else [repr(v) for v in scores.tolist()]
    text = "\n".join(lines)
    if args.output:
        atomic_write(args.output, lambda fh: fh.write(text + ("\n" if text else "")))
    else:
        sys.stdout.write(text + ("\n" if text else ""))
    return 0


def _write_scores_table(path: str, scores, qid, qid_name: str) -> None:
    """The scores (and the query ids, unless ``qid`` is ``None``) as a table file (its
    format by suffix), atomically."""
    from .._io import atomic_path
    from ..data.readers import format_of, require_pyarrow

    pa = require_pyarrow("writing scores to a table")
    cols = {} if qid is None else {qid_name: pa.array(qid)}
    cols["score"] = pa.array(scores)
    table = pa.table(cols)
    fmt = format_of(path)
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, str(tmp))
        elif fmt == "arrow":
            import pyarrow.feather as feather

            feather.write_feather(table, str(tmp))
        else:
            import pyarrow.csv as pcsv

            pcsv.write_csv(table, str(tmp), pcsv.WriteOptions(
                delimiter="\t" if fmt == "tsv" else ","))
