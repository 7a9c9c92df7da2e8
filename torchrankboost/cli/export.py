"""``torchrankboost export MODEL --format {lightgbm,xgboost,onnx,treelite} -o PATH``: a saved
model in another library's format (the writers of :mod:`torchrankboost.export`).

Tree and stump ensembles go to every format; a linear model (``LinearRanker``, what
``ranksvm`` fits) to ``onnx`` only. Treelite's model is written with its own serialisation
(``treelite.Model.deserialize(PATH)`` reads it). Errors (an unknown format, a model that
cannot go to the format, an output that cannot be written, a missing optional package) are
one line ``torchrankboost: error: ...`` with status 2, as the other commands'. What the file
does not carry — the per-query normalisation the model was trained with, the feature
numbering of its data files — is printed as a note.
"""

from __future__ import annotations

from pathlib import Path

from .._io import atomic_write
from .inputs import CLIError, check_output, device, load_saved_model

__all__ = ["FORMATS", "add_commands", "cmd_export"]

#: format name -> (what is written, the optional package it needs)
FORMATS = {"lightgbm": ("LightGBM text model", "lightgbm"),
           "xgboost": ("XGBoost JSON model", "xgboost"),
           "onnx": ("ONNX model", "onnx"),
           "treelite": ("Treelite checkpoint", "treelite")}


def add_commands(sub) -> None:
    """The ``export`` sub-command's parser on ``sub`` (argparse sub-parsers)."""
    p = sub.add_parser("export", help="write a saved model as LightGBM, XGBoost, ONNX or "
                       "Treelite", description="Write a saved model in a format that "
                       "serving systems read (see the docs' guide 'Export and serve').")
    p.set_defaults(handler=cmd_export)
    p.add_argument("model", help="a model saved by `torchrankboost train`")
    p.add_argument("--format", "-f", required=True, metavar="FORMAT",
                   help="lightgbm (text model), xgboost (JSON model), onnx (ai.onnx.ml graph; "
                        "also linear models) or treelite (checkpoint for "
                        "treelite.Model.deserialize)")
    p.add_argument("--output", "-o", required=True, metavar="PATH", help="the file to write")


def _check_format(name: str) -> str:
    key = name.strip().lower()
    if key not in FORMATS:
        raise CLIError(f"unknown export format {name!r}; valid choices: "
                       f"{', '.join(FORMATS)}")
    return key


def _write(model, fmt: str, path: str) -> None:
    from ..export import to_lightgbm, to_onnx, to_treelite, to_xgboost

    if fmt == "treelite":
        data = to_treelite(model).serialize_bytes()
        atomic_write(path, lambda fh: fh.write(data), mode="wb")
    else:
        {"lightgbm": to_lightgbm, "xgboost": to_xgboost, "onnx": to_onnx}[fmt](model, path)


def _notes(model, args) -> list:
    """What the file does not carry, as notes for the user."""
    out = []
    if args.format.strip().lower() == "xgboost" and not args.output.endswith(".json"):
        out.append("XGBoost tells its formats by the file name: rename the file to *.json "
                   "before xgboost.Booster(model_file=...) loads it")
    if model.info.get("normalize"):
        out.append("the model was trained with --normalize: scale each query's features "
                   "(per-query min-max) before scoring with the exported model")
    if model.info.get("zero_based") is False:
        out.append("the model's data files were 1-based (LETOR): feature j of the "
                   "exported model is file index j+1")
    return out


def cmd_export(args) -> int:
    """Run ``export``: the saved model read on the CPU once the format and the output are
    checked, written by the writer of :mod:`torchrankboost.export`."""
    from ..boosting.papers.ranksvm import LinearRanker

    fmt = _check_format(args.format)
    check_output(args.output, [Path(args.model)] if Path(args.model).exists() else [])
    model = load_saved_model(args.model, device("cpu"))
    if getattr(model, "uses_groups", False) and fmt != "onnx":
        raise CLIError(f"cannot export {args.model} to {fmt}: a neural ranker exports to onnx "
                       f"only (or torch.export from Python: NeuralModel.export)")
    if isinstance(model, LinearRanker) and fmt != "onnx":
        raise CLIError(f"cannot export {args.model} to {fmt}: a linear model (LinearRanker) "
                       f"exports to onnx only")
    what, package = FORMATS[fmt]
    try:
        _write(model, fmt, args.output)
    except ImportError:
        raise CLIError(f"--format {fmt} needs the {package!r} package (pip install "
                       f"{package})") from None
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CLIError(f"cannot export {args.model} to {fmt}: {msg}") from None
    kind = (f"{model.n_rounds} rounds" if hasattr(model, "n_rounds") else
            f"{model.architecture}, padded queries" if hasattr(model, "architecture") else
            "linear")
    print(f"wrote {args.output}: {what} ({kind}, {model.num_features} features)")
    for note in _notes(model, args):
        print(f"note: {note}")
    return 0
