"""The ``plot`` command: PNG files of a saved model or a run folder, drawn with
:mod:`torchrankboost.plot` (matplotlib; a missing matplotlib is one line saying what to
install):

* ``importance.png``: the features' importance (total split gain; ``--importance-type
  split`` for split counts);
* ``tree.png``: one tree (``--tree N``, 0-based; the first by default);
* ``metrics.png``: every metric per round, one panel each: from a run folder's TensorBoard
  events, or from the fit's history a model file kept.

``SOURCE`` is a model file (``model.safetensors``) or a run folder (``runs/<run>``: its
events and, when it holds one, its ``model.safetensors``).
"""

from __future__ import annotations

from pathlib import Path
from typing import List

from .inputs import PROG, CLIError, load_saved_model

__all__ = ["add_commands", "cmd_plot"]


def add_commands(sub) -> None:
    """The ``plot`` sub-command's parser."""
    p = sub.add_parser("plot", help="write PNG plots of a saved model or a run folder",
                       description="Write importance.png, tree.png and metrics.png of a saved "
                                   "model or a run folder (needs matplotlib).")
    p.set_defaults(handler=cmd_plot)
    p.add_argument("source", metavar="SOURCE",
                   help="a model file, or a run folder (runs/<run>)")
    p.add_argument("--output", "-o", default=".", metavar="DIR",
                   help="folder the PNG files go to (default: the current folder)")
    p.add_argument("--tree", type=int, default=0, metavar="N",
                   help="the round whose tree is drawn (0-based; -1: the last; default 0)")
    p.add_argument("--importance-type", choices=("gain", "split"), default="gain",
                   help="feature importance as total split gain or number of splits")
    p.add_argument("--max-features", type=int, default=20, metavar="N",
                   help="the N most important features (default 20)")


def _figure():
    from matplotlib.figure import Figure  # no pyplot: no display needed

    return Figure()


def _save(fig, folder: Path, name: str, written: List[str]) -> None:
    path = folder / name
    fig.savefig(path, dpi=100, bbox_inches="tight")
    written.append(str(path))


def _model_plots(model, args, folder: Path, written: List[str], notes: List[str]) -> None:
    from ..plot import plot_importance, plot_tree

    fig = _figure()
    plot_importance(model, importance_type=args.importance_type,
                    max_features=args.max_features, ax=fig.add_subplot())
    fig.set_size_inches(6.4, max(2.0, 0.3 * min(args.max_features, model.num_features) + 1))
    _save(fig, folder, "importance.png", written)
    try:
        fig = _figure()
        ax = plot_tree(model, args.tree, ax=fig.add_subplot())
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        fig.set_size_inches(max(6.0, 1.6 * (x1 - x0)), max(3.0, 1.4 * (y1 - y0)))
        _save(fig, folder, "tree.png", written)
    except ValueError as exc:  # a linear model, single-feature rankers: no tree to draw
        notes.append(f"no tree drawn ({exc})")


def cmd_plot(args) -> int:
    """``plot SOURCE [-o DIR]``: the PNG files, each path printed."""
    try:
        from ..plot import plot_metrics, require_matplotlib

        require_matplotlib()
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    source = Path(args.source)
    if not source.exists():
        raise CLIError(f"{source}: no such model file or run folder")
    if args.max_features < 1:
        raise CLIError(f"--max-features must be >= 1, got {args.max_features}")
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    model_file = source / "model.safetensors" if source.is_dir() else source
    written: List[str] = []
    notes: List[str] = []
    model = load_saved_model(str(model_file), None) if model_file.is_file() else None
    if model is not None and callable(getattr(model, "feature_importance", None)):
        _model_plots(model, args, folder, written, notes)
    try:
        _save(plot_metrics(source if source.is_dir() else model, figure=_figure()), folder,
              "metrics.png", written)
    except ValueError as exc:
        notes.append(f"no metric curves ({exc})")
    if not written:
        raise CLIError(f"{source}: nothing to plot (a model file or a run folder of "
                       f"torchrankboost train)")
    for path in written:
        print(f"wrote {path}")
    for note in notes:
        print(f"{PROG}: note: {note}")
    return 0
