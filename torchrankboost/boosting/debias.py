"""The booster's side of learning from clicks: ``fit(..., position=...)``.

With ``position`` (``(n,)`` 1-based displayed ranks, 0 = not shown) the loss must be a
position-debiasing wrapper of :mod:`torchrankboost.clicks.debias` (``IPWLoss``,
``RegressionEMLoss``, ``DualLearningLoss``, ``AdditivePositionLoss``): :func:`bind_position` binds it to the clicks
(the labels), the groups and the positions, restoring a continued or resumed fit's learned
state from the model's ``info["position_debias"]``; :func:`between_rounds` runs at the start
of every round: the wrapper's update (EM or DLA propensities, the position table; its sums
all-reduced on several processes through the fit's ``FitComm``), then the loss at the
current scores again when it changed, and the state written into the ensemble's ``info``
(exact float hex JSON, so it is saved with the model and with every checkpoint, and a
resume continues bit for bit).
"""

from __future__ import annotations

import torch

__all__ = ["KEY", "bind_position", "between_rounds"]

KEY = "position_debias"


def bind_position(fw, bind_fn, loss, labels, groups, position, comm, start):
    """The bound loss of a fit: ``fw.bind(...)`` without ``position``, else the debiasing
    wrapper bound to the positions (``ValueError`` for a loss that is not one)."""
    if position is None:
        return fw.bind(bind_fn, loss, labels, groups)
    if not callable(getattr(loss, "bind_position", None)):
        raise ValueError("position: needs a position-debiasing loss around the ranking loss "
                         "(torchrankboost.clicks: IPWLoss, RegressionEMLoss, "
                         "DualLearningLoss, AdditivePositionLoss)")
    if fw.group is not None:
        raise ValueError("position: group_weight is not supported with a debiasing loss; "
                         "use sample_weight")
    position = torch.as_tensor(position).to(labels.device)
    bound = loss.bind_position(labels, groups, position, weights=fw.sample, comm=comm)
    saved = (start.ensemble.info.get(KEY) if start is not None
             and start.ensemble is not None else None)
    if saved is not None:
        bound.load_state(saved)
        loss.last_state_ = bound.state()
    return bound


def between_rounds(booster, run, rnd: int) -> None:
    """The debiasing update at the start of round ``rnd`` (nothing for other losses)."""
    update = getattr(run.bound, "position_update", None)
    if update is None:
        return
    pending = run.pending if run.pending is not None and run.pending[0] is run.scores else None
    if update(run.scores, run.comm, rnd, pending):
        # the loss changed: its value, gradient and curvature at the scores again, in one call
        kind = booster._curv_kind()
        out = [0.0, None, None]
        with run.comm.local():
            v, out[1], out[2] = run.bound.value_grad_hess(run.scores, hess=kind)
            out[0] = float(v)
        run.loss = float(run.comm.sum(lambda: [out[0]], size=1)[0])
        run.pending = (run.scores, out[1], out[2], kind)
    run.ensemble.info[KEY] = run.bound.state()
