"""The command line's side of learning from clicks: ``train --position FILE``,
``--debias METHOD`` (``none`` or a debiasing method of the registry: ``torchrankboost list
debias``), ``--propensity P1,P2,...``.

The training labels are the clicks (counts, rates or 0/1); the positions come from
``--position`` or, when it exists, the training file's ``.position`` side file (LightGBM's
convention); they are used only with ``--debias`` other than ``none`` (a ``.position`` file
beside a data set changes nothing otherwise).
"""

from __future__ import annotations

from typing import Optional, Tuple

from ..clicks.debias import DEBIAS, NO_DEBIAS, make_debias
from ..data.positions import document_positions
from ..data.sources import resolve_data_path
from .options import TrainOptions

__all__ = ["add_click_options", "propensities", "click_positions"]


def add_click_options(g) -> None:
    """The ``train`` options (on the argument group ``g``)."""
    g.add_argument("--position", metavar="FILE",
                   help="displayed positions of the training documents (1-based, 0 = not "
                        "shown), one per data line; the labels are then clicks (default: the "
                        "training file's FILE.position beside it, with --debias)")
    g.add_argument("--debias", choices=DEBIAS, default=NO_DEBIAS,
                   help="learning from clicks: a debiasing method (see `torchrankboost list "
                        "debias`; ipw takes --propensity); default none")
    g.add_argument("--propensity", metavar="P1,P2,...",
                   help="examination probabilities of positions 1..K (for --debias ipw)")


def propensities(text: Optional[str]) -> Optional[Tuple[float, ...]]:
    """``--propensity``'s ``"P1,P2,..."`` as numbers (``None`` when not given)."""
    if not text:
        return None
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--propensity: expected comma-separated numbers, got {text!r}"
                         ) from None


def click_positions(options: TrainOptions, ctx, tr, ranker):
    """Wrap ``ranker``'s loss as ``options.debias`` says and return the training positions
    (``None`` without debiasing)."""
    method = options.debias
    if method == NO_DEBIAS:
        return None
    if not hasattr(ranker, "loss"):
        raise ValueError(f"--debias {method}: the algorithm has no loss to wrap (use the "
                         f"generic driver, --algorithm boost)")
    pos = tr.position if tr.position is not None and not options.position else \
        document_positions(resolve_data_path(options.data), options.position, tr, context=ctx)
    if pos is None:
        raise ValueError(f"--debias {method}: no positions (give --position FILE or put a "
                         f"FILE.position beside the training file)")
    ranker.loss = make_debias(method, ranker.loss,
                              propensity=None if options.propensity is None
                              else list(options.propensity))
    return pos
