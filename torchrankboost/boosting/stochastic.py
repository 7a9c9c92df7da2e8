"""Losses with random state per boosting round (YetiRank's perturbed pair weights).

A loss that defines ``resample(bound, scores, *, round)`` (see
:class:`~torchrankboost.losses.YetiRankLoss`) is a different function of the scores each
round. At the start of round ``r`` the driver calls :func:`refresh_round`: the bound loss
draws new random state at the current scores from ``(seed, r)``, and the round's starting
loss, gradient and curvature are computed with it (one fused pass), so the step rule
compares values of one loss and a resumed fit draws exactly what the uninterrupted one drew.
Losses without ``resample`` are untouched (nothing is computed).
"""

from __future__ import annotations

from .objective import scalar

__all__ = ["refresh_round"]


def refresh_round(booster, run, rnd: int) -> None:
    """Redraw the loss's random state for round ``rnd`` at ``run.scores``; set
    ``run.loss`` (summed over the ranks) and ``run.pending`` (this round's gradient and
    curvature). No-op for a loss without ``resample``."""
    loss = getattr(run.bound, "loss", None)
    resample = getattr(loss, "resample", None)
    if not callable(resample):
        return
    comm, s = run.comm, run.scores
    out = [0.0]
    run.pending = None
    with comm.local():
        resample(run.bound, s, round=rnd)
        if booster._has_gh:
            kind = booster._curv_kind()
            v, g, h = run.bound.value_grad_hess(s, hess=kind)
            run.pending = (s, g, h, kind)
        else:  # pragma: no cover - a resampling loss without grad_hess
            v = scalar(run.bound.value(s))
        out[0] = float(v)
    run.loss = float(comm.sum(lambda: [out[0]], size=1)[0])
