r"""The weak learner's side of a boosting round: the rows it sees, its least-squares problem,
its fit.

Each round the learner fits, by weighted least squares, the Newton target
:math:`r = -g/h_c` with weights :math:`h_c = \max(h, \text{floor})` (``(n,)`` float64;
:func:`learner_targets`; unit weights and :math:`-g` for ``curvature="none"``) on the rows
of a seeded draw of whole queries (:class:`QuerySubsample`, over the global query numbering
of a data-parallel fit) and returns the fitted weak model with its output on every document
(:func:`fit_learner`, seeded by the round number so that a continued fit draws as one run).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ._round_sums import newton_target

__all__ = ["QuerySubsample", "learner_targets", "fit_learner", "round_seed"]


def round_seed(seed: int, rnd: int) -> int:
    """The seed of round ``rnd``'s learner generator (a function of the fit's ``seed``)."""
    return (int(seed) * 1_000_003 + 7919 * int(rnd) + 17) % (2 ** 63 - 1)


class QuerySubsample:
    """The rows of a seeded draw of ``fraction × q_total`` whole queries each round (``None``:
    every row, for ``fraction = 1``). The draw is over the global query numbering (the
    shards in rank order); this rank keeps its own queries of it, ``q_offset`` its first.
    ``generator`` (seeded with ``seed``) is the fit's random state a checkpoint keeps."""

    def __init__(self, fraction: float, *, seed: int, q_total: int, q_offset: int = 0):
        self.fraction, self.q_total, self.q_offset = float(fraction), int(q_total), int(q_offset)
        self.generator = torch.Generator().manual_seed(int(seed))

    def rows(self, groups: Groups, device) -> Optional[Tensor]:
        """This round's rows of this rank, ``(k,)`` int64 in document order (or ``None``)."""
        if self.fraction >= 1.0:
            return None
        G = groups.num_groups
        k = max(1, int(round(self.fraction * self.q_total)))
        pick = torch.randperm(self.q_total, generator=self.generator)[:k]
        off = self.q_offset
        pick = (pick[(pick >= off) & (pick < off + G)] - off).to(device)
        qmask = torch.zeros(G, dtype=torch.bool, device=device)
        qmask[pick] = True
        return torch.nonzero(qmask[groups.group_index], as_tuple=False).reshape(-1)


def learner_targets(g: Tensor, h: Tensor, kind: str, *, curvature: str, hess_floor: float,
                    mean_h: Optional[float] = None, work: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Optional[Tensor], Tensor, str]:
    """``(target, weight, curvature used, kind)`` for the learner's least-squares fit from the
    gradient ``g`` and curvature ``h`` ``(n,)``: ``-g / hc`` with weights ``hc``, ``h``
    clamped below at ``hess_floor × mean_h`` (``mean_h``: the mean of ``|h|`` over every
    rank's documents; ``None``: this rank's); ``-g`` with unit weights (``weight=None``)
    for ``curvature="none"`` or when every curvature is 0 (``kind="unit"``). ``work``: a
    dead ``(n,)`` buffer the target may reuse."""
    if curvature == "none":
        return -g, None, torch.ones_like(g), kind
    if mean_h is None:
        mean_h = float(h.abs().mean()) if h.numel() else 0.0
    if not mean_h > 0:
        return -g, None, torch.ones_like(g), "unit"
    target, hc = newton_target(g, h, hess_floor * mean_h, work)
    return target, hc, hc, kind


def fit_learner(learner, prepared, target: Tensor, weight: Optional[Tensor], *,
                rows: Optional[Tensor], seed: int, rnd: int, device) -> tuple:
    """``(model, f)``: the learner fitted to ``target`` / ``weight`` on ``rows`` of the
    ``prepared`` data with round ``rnd``'s generator, and its output ``f`` on every document
    (from ``fit_predict`` when the learner has it: the output for free)."""
    gen = torch.Generator(device=device).manual_seed(round_seed(seed, rnd))
    fit_predict = getattr(learner, "fit_predict", None)
    if fit_predict is not None:
        return fit_predict(prepared, target, weight, rows=rows, generator=gen)
    model = learner.fit(prepared, target, weight, rows=rows, generator=gen)
    return model, model.predict_prepared(prepared)
