r"""Learning from clicks in neural training (``scripts/train_neural.py --clicks``).

A network is trained by minibatches of whole queries, so the debiasing is a loss module on a
batch: :class:`ClickLoss` takes the batch's labels as a ``(n, 2)`` table (click-through
rate, displayed position; both ride through the query batching like ordinary labels) and
returns the click-pair loss of :mod:`~torchrankboost.clicks.debias` on the batch:

* ``"naive"``: click pairs, no correction; ``"ipw"``: weights :math:`c_i/\theta_{p_i}` with
  known propensities (clipped);
* ``"em"`` / ``"dla"``: the same with propensities re-estimated once per epoch from the
  network's scores on the whole training set (:func:`~torchrankboost.clicks.debias.em_step`,
  :func:`~torchrankboost.clicks.debias.dla_step`: the booster's updates, called by
  :meth:`ClickLoss.epoch_update`);
* ``"additive"``: the scores :math:`f(x_i) + g_{p_i}` with :math:`g` an ``nn.Parameter``
  (positions ``2..K``; :math:`g_1 = 0`) learned with the network by the same optimiser.

:func:`simulate_training_clicks` makes the clicks of the experiments' protocol (a production
ranker on a small share of the training queries, its top ``k`` shown, position-based clicks).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn

from .. import registry
from ..groups import Groups
from ..parallel import FitComm, get_context
from .debias import (DualLearningLoss, IPWLoss, RegressionEMLoss, dla_step, em_step)
from .simulate import simulate_clicks

__all__ = ["ClickLoss", "NAIVE", "NEURAL_DEBIAS", "simulate_training_clicks"]

F64 = torch.float64
#: the click pairs without correction (propensity 1): the neural baseline
NAIVE = "naive"
#: ``ClickLoss``'s methods: ``"naive"``, then the registry's debiasing methods
NEURAL_DEBIAS = (NAIVE, *registry.names("debias", sort=False))


class ClickLoss(nn.Module):
    """A debiased click loss for minibatches (module docstring).

    Args:
        loss: the pairwise base loss (a :class:`~torchrankboost.losses.RankingLoss`).
        method: one of ``NEURAL_DEBIAS``.
        n_positions: ``K``, the shown positions.
        propensity: ``"ipw"``'s known propensities of positions ``1..K``.
        clip: lower clip of the propensities in the weights.
        warmup: epochs trained with propensity 1 before the first ``em``/``dla`` update.
        steps: EM or DLA iterations per epoch.

    ``forward(scores (n,), labels (n, 2), groups)``: ``labels[:, 0]`` the click-through
    rates, ``labels[:, 1]`` the positions (1-based, 0 = not shown).
    """

    theta: Tensor  # (K,) the propensities, a buffer

    def __init__(self, loss, method: str, *, n_positions: int,
                 propensity: Optional[Sequence[float]] = None, clip: float = 0.01,
                 warmup: int = 1, steps: int = 2):
        super().__init__()
        if method not in NEURAL_DEBIAS:
            raise ValueError(f"method must be one of {NEURAL_DEBIAS}, got {method!r}")
        K = int(n_positions)
        if K < 1:
            raise ValueError(f"n_positions must be >= 1, got {n_positions}")
        if method == "ipw":
            if propensity is None or len(propensity) != K:
                raise ValueError(f"ipw needs {K} propensities, got {propensity!r}")
            theta = torch.as_tensor(propensity, dtype=F64).reshape(-1)
        else:
            theta = torch.ones(K, dtype=F64)
        self.loss, self.method, self.K, self.clip = loss, method, K, float(clip)
        self.warmup, self.steps = int(warmup), int(steps)
        self.register_buffer("theta", theta)
        self.position_bias = (nn.Parameter(torch.zeros(max(K - 1, 0), dtype=F64))
                              if method == "additive" else None)
        self._full: Any = None  # the em/dla loss bound to the whole training set

    def table(self) -> Tensor:
        """``(K + 1,)`` the additive position term of positions ``0..K`` (zeros otherwise)."""
        if self.position_bias is None:
            return torch.zeros(self.K + 1, dtype=F64, device=self.theta.device)
        return torch.cat([self.position_bias.new_zeros(2), self.position_bias])

    def forward(self, scores: Tensor, labels: Tensor, groups: Groups) -> Tensor:
        if labels.dim() != 2 or labels.shape[1] != 2:
            raise ValueError("ClickLoss: labels must be (n, 2): click-through rate, position")
        c, pos = labels[:, 0].to(scores.dtype), labels[:, 1].long()
        if self.position_bias is not None:
            scores = scores + self.table().to(scores.dtype)[pos]
        ipw = IPWLoss(self.loss, self.theta.tolist(), clip=self.clip)
        return ipw.bind_position(c, groups, pos).value(scores)

    def bind_training(self, labels: Tensor, groups: Groups) -> None:
        """The whole training set's clicks (``(n, 2)`` labels) for the em/dla updates."""
        if self.method not in ("em", "dla"):
            return
        make = RegressionEMLoss if self.method == "em" else DualLearningLoss
        self._full = make(self.loss, n_positions=self.K).bind_position(
            labels[:, 0].cpu().to(F64), groups.to("cpu"), labels[:, 1].cpu().long())

    def epoch_update(self, scores: Tensor, epoch: int) -> bool:
        """Before epoch ``epoch`` (0-based): the em/dla propensities from the network's
        training scores ``(n,)``; ``True`` when they changed."""
        if self._full is None or epoch < self.warmup:
            return False
        s, comm = scores.detach().cpu().to(F64), FitComm(get_context(False))
        for _ in range(self.steps):
            if self.method == "em":
                em_step(self._full, s, comm, 2)
            else:
                dla_step(self._full, s, comm, learn_link=False)
        self.theta = self._full.theta.to(self.theta.device).clone()
        return True

    def diagnostics(self) -> dict:
        """``propensity_p<k>`` (and ``position_bias_p<k>``) for TensorBoard."""
        out = {f"propensity_p{k + 1}": float(v) for k, v in enumerate(self.theta.tolist())}
        if self.position_bias is not None:
            out.update({f"position_bias_p{k}": float(v)
                        for k, v in enumerate(self.table().tolist())})
        return out


def simulate_training_clicks(train, *, eta: float = 1.0, n_sessions: int = 20_000,
                             top_k: int = 10, frac: float = 0.01, seed: int = 0):
    """``(labels (n, 2) float64, propensity list)``: position-based clicks (``eps- = 0.1``)
    on ``train``'s queries, shown in the order of a production ranker (a small booster
    fitted on ``frac`` of the queries, at least 2), as ``ClickLoss`` labels."""
    from ..boosting import Booster, RegressionTree
    from ..data import take_queries
    from ..losses import ExponentialPairwiseLoss
    from .simulate import pbm_propensity

    G = train.groups.num_groups
    pick = torch.randperm(G, generator=torch.Generator().manual_seed(seed))
    pick = torch.sort(pick[:max(2, int(round(frac * G)))]).values
    Xp, yp, gp = take_queries(train.X, train.labels, train.groups, pick)
    prod = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=7), n_rounds=20,
                   learning_rate=0.1, seed=seed, verbose=False).fit(Xp.cpu(), yp.cpu(), gp)
    log = simulate_clicks(train.labels.cpu(), train.groups.to("cpu"), prod.predict(train.X.cpu()),
                          n_sessions=n_sessions, eta=eta, eps_minus=0.1, eps_plus=1.0,
                          top_k=top_k, seed=seed)
    labels = torch.stack([log.ctr().to(F64), log.position.to(F64)], dim=1)
    return labels, pbm_propensity(top_k, eta).tolist()
