"""The estimator's side of learning from clicks (:class:`~torchrankboost.BoostedRanker`'s
``debias`` / ``propensity`` parameters and ``fit(..., position=...)``)."""

from __future__ import annotations

import numpy as np
import torch

from ..clicks.debias import make_debias

__all__ = ["debias_fit_args"]


def debias_fit_args(est, ranker, qid, group, position, n: int, groups_from) -> dict:
    """Wrap ``ranker``'s loss as ``est.debias`` says and return the fit's ``position``
    keyword (``{}`` without ``position``), the positions put in the fit's row order (the
    stable sort by query id of ``groups_from``)."""
    if est.debias == "none":
        if position is not None:
            raise ValueError("position: set debias='ipw', 'em', 'dla' or 'additive' to use it")
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
