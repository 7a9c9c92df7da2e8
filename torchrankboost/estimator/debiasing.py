"""The estimator's side of learning from clicks (:class:`~torchrankboost.BoostedRanker`'s
``debias`` / ``propensity`` parameters and ``fit(..., position=...)``): the training loss
wrapped by the debiasing method named ``debias`` (``"none"`` or a name of
``registry.names("debias")``), the positions put in the fit's row order."""

from __future__ import annotations

import numpy as np
import torch

from .. import registry
from ..clicks.debias import NO_DEBIAS, make_debias
from .arrays import groups_from

__all__ = ["debias_fit_args"]


def _methods_text() -> str:
    """``"'ipw', 'em', 'dla' or 'additive'"``: the registry's debiasing methods."""
    quoted = [repr(n) for n in registry.names("debias", sort=False)]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def debias_fit_args(est, ranker, qid, group, position, n: int) -> dict:
    """Wrap ``ranker``'s loss as ``est.debias`` says and return the fit's ``position``
    keyword (``{}`` without ``position``), the positions put in the fit's row order (the
    stable sort by query id of :func:`~torchrankboost.estimator.arrays.groups_from`)."""
    if est.debias == NO_DEBIAS:
        if position is not None:
            raise ValueError(f"position: set debias={_methods_text()} to use it")
        return {}
    if position is None:
        raise ValueError(f"debias={est.debias!r} needs fit(..., position=...)")
    if not hasattr(ranker, "loss") or not callable(getattr(ranker, "fit", None)):
        raise ValueError(f"debias: algorithm {est.algorithm!r} has no loss to wrap")
    ranker.loss = make_debias(est.debias, ranker.loss, propensity=est.propensity)
    pos = torch.as_tensor(np.asarray(position)).reshape(-1)
    if pos.shape[0] != n:
        raise ValueError(f"position must have one entry per row ({n}), got {pos.shape[0]}")
    _, perm = groups_from(n, qid, group)
    return {"position": pos if perm is None else pos[perm.cpu()]}
