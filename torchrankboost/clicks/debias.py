r"""Position-debiased ranking losses: learning from clicks with a known displayed position.

Clicks :math:`c_i` (0/1, counts or click-through rates) of documents shown at positions
:math:`p_i` (1-based; 0 = not shown) are biased by examination: under the position-based
model :math:`E[c_i] = \theta_{p_i}\,\rho_i` with :math:`\rho_i` the probability of a click
once examined (the relevance). Each wrapper here turns any pairwise loss
:math:`\ell(s_i - s_j)` of the library (exponential, p-norm push, hinge, QBRank, RankNet)
into a loss on clicks. Every one uses the **click pairs** of a query: the document ``i`` of
each click and every other document ``j`` of its query (shown or not), weighted by

.. math:: L(s) = \sum_q \sum_{i \in q} a_i \sum_{j \in q,\, j \ne i} \ell(s_i - s_j)

(:class:`~torchrankboost.pairs.ExplicitPairs` with weights :math:`a_i`; the propensity SVM-Rank
form of Joachims et al., 2017), ``j`` over the shown documents by default (``negatives``).
The weight is linear in the clicks, so with
:math:`a_i = c_i / \theta_{p_i}` its expectation over the clicks is the same loss with
:math:`a_i = \rho_i`: **the expected gradient on clicks equals the gradient on relevance**
(exactly for the losses linear in the pair weights: exponential, hinge, QBRank's pair part,
RankNet; the p-norm push's outer power makes it hold to first order only).

* :class:`IPWLoss`: inverse propensity weighting with known propensities
  :math:`\theta_1..\theta_K`, clipped below at ``clip``: :math:`a_i = c_i / \max(\theta_{p_i},
  \tau)`.
* :class:`RegressionEMLoss`: the propensities estimated from the clicks by regression-EM
  (Wang et al., WSDM 2018) between boosting rounds: relevance
  :math:`\gamma_i = \sigma(u\,s_i + v)` regressed on the current scores; E-step posteriors of
  "examined" and "relevant" for each document, the M-step :math:`\theta_p` = mean posterior
  examination at position ``p`` (sums per position: one all-reduce of ``2K`` numbers on
  several processes) and a logistic regression of the relevance posteriors on the scores
  (Newton steps on ``(u, v)``, 5 numbers all-reduced each). :math:`\theta` is normalised to
  :math:`\theta_1 = 1`; the pairs are weighted as :class:`IPWLoss` with the estimate.
* :class:`DualLearningLoss`: the dual learning algorithm (Ai et al., SIGIR 2018): a
  per-position propensity table learned jointly with the ranker by inverse *relevance*
  weighting of the clicks with the ranker's current relevance estimates (closed form per
  round, sums per position: one all-reduce of ``2K`` numbers, plus 2 for the link); the
  ranker trained as :class:`IPWLoss` with the current table.
* :class:`AdditivePositionLoss`: the clicks' loss of the scores :math:`f(x_i) + g_{p_i}` with
  :math:`g` a learned per-position table (LightGBM's position term), ``g_1 = 0``; one
  L2-regularised Newton step on :math:`g` between rounds (sums per position). The model
  predicts :math:`f` alone.

Each wrapper is registered by name (``registry.names("debias")``: ``"ipw"``, ``"em"``,
``"dla"``, ``"additive"``; :func:`make_debias` builds one by name, ``"none"`` keeps the loss);
the registry is where a new method is named. Without positions (an unbound call, an
evaluation set) each wrapper is its base loss on the labels. The learned state (propensities, calibration, position table) is exact (float hex)
JSON: :meth:`PositionBound.state` / :meth:`PositionBound.load_state`, saved with the model.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import registry
from ..groups import Groups
from ..losses.base import BoundLoss, Prepared, RankingLoss
from ..losses.exponential import ExponentialPairwiseLoss
from ..pairs import ExplicitPairs
from ..params import from_params
from ..parallel import FitComm
from ..contract import ArrayLike

__all__ = ["PositionDebiasLoss", "IPWLoss", "RegressionEMLoss", "DualLearningLoss",
           "AdditivePositionLoss", "PositionBound", "click_pairs", "make_debias", "DEBIAS",
           "NO_DEBIAS"]

F64 = torch.float64
#: ``debias="none"``: no debiasing, the labels are relevance (not clicks)
NO_DEBIAS = "none"
#: the ``debias`` choices of the estimator and the command line: ``"none"``, then the
#: registry's debiasing methods in their registered order
DEBIAS = (NO_DEBIAS, *registry.names("debias", sort=False))
NEGATIVES = ("shown", "all")


def click_pairs(a: Tensor, groups: Groups):
    """``(hi, lo)`` int64: every document ``i`` with ``a_i > 0`` paired with every other
    document of its query (vectorised: no loop over queries)."""
    gi, off = groups.group_index, groups.offsets
    ci = torch.nonzero(a > 0, as_tuple=False).reshape(-1)
    q = gi[ci]
    size = off[q + 1] - off[q]
    hi = ci.repeat_interleave(size)
    start = torch.cumsum(size, 0) - size
    within = torch.arange(hi.numel(), device=hi.device) - start.repeat_interleave(size)
    lo = off[q].repeat_interleave(size) + within
    keep = lo != hi
    return hi[keep], lo[keep]


def _hex(t: Tensor) -> list:
    return [float(x).hex() for x in t.reshape(-1).tolist()]


def _unhex(xs, name: str) -> Tensor:
    try:
        return torch.tensor([float.fromhex(x) for x in xs], dtype=F64)
    except (TypeError, ValueError):
        raise ValueError(f"position_debias: bad {name} in the saved state") from None


class PositionBound:
    """A position-debiased loss bound to clicks, groups and positions (the bound-loss
    interface the booster uses: ``value``, ``grad_hess``, ``value_grad_hess``), plus
    ``position_update(scores, comm, rnd)`` between rounds (``True`` when the loss changed)
    and the exact JSON ``state()`` / ``load_state(state)``."""

    def __init__(self, owner: "PositionDebiasLoss", labels: Tensor, groups: Groups,
                 position: Tensor, weights: Optional[Tensor], n_positions: int):
        self.owner, self.labels, self.groups, self.position = owner, labels, groups, position
        self.n = groups.num_docs
        self.K = int(n_positions)
        self.clicks = labels.to(F64)
        self.hi, self.lo = click_pairs(self.clicks, groups)
        if owner.negatives == "shown":
            keep = position[self.lo] > 0
            self.hi, self.lo = self.hi[keep], self.lo[keep]
        dw = None if weights is None else weights.to(F64)
        self.pair_dw = None if dw is None else dw[self.hi] * dw[self.lo]
        self.theta = torch.ones(self.K, dtype=F64)  # propensities of positions 1..K
        self.offset_table: Optional[Tensor] = None  # additive: g of positions 0..K
        self.extra = {}
        self._bound: Any = None  # the inner loss bound to the clicks
        owner._init_bound(self)
        self.rebind()

    # -- the loss ---------------------------------------------------------------------
    def rebind(self) -> None:
        """Bind the base loss with the current weights ``a_i = c_i / max(θ_{p_i}, clip)`` (the
        clicks as they are for the additive model) as labels and click-pair weights."""
        a = self.clicks
        if self.owner.reweights:
            clip = float(getattr(self.owner, "clip", 0.0) or 0.0)
            prop = self.theta.clamp_min(clip) if clip > 0 else self.theta
            a = torch.where(self.position > 0, a / prop[(self.position - 1).clamp_min(0)], a)
        w = a[self.hi] if self.pair_dw is None else a[self.hi] * self.pair_dw
        pairs = ExplicitPairs(self.hi, self.lo, w.to(self.clicks.dtype))
        self._bound = self.owner.loss.bind(a, self.groups, pairs=pairs)
        self.pairs = self._bound.pairs

    def _s(self, scores: Tensor) -> Tensor:
        if self.offset_table is None:
            return scores
        return scores + self.offset_table.to(scores.dtype)[self.position]

    def value(self, scores: Tensor) -> Tensor:
        return self._bound.value(self._s(scores))

    __call__ = value

    def grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        return self._bound.grad_hess(self._s(scores), hess=hess)

    def value_grad_hess(self, scores: Tensor, *, hess: str = "diag"):
        return self._bound.value_grad_hess(self._s(scores), hess=hess)

    # -- between rounds, state ------------------------------------------------------------
    def position_update(self, scores: Tensor, comm, rnd: int, pending=None) -> bool:
        """The method's update before round ``rnd`` (``pending``: ``(scores, g, h, kind)``
        of this loss at ``scores`` when the booster has them)."""
        return self.owner._update(self, scores, comm, rnd, pending)

    def state(self) -> dict:
        out = {"method": self.owner.method, "propensity": _hex(self.theta)}
        if self.offset_table is not None:
            out["position_bias"] = _hex(self.offset_table)
        out.update({k: _hex(v) for k, v in self.extra.items()})
        return out

    def load_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("method") != self.owner.method:
            got = state.get("method") if isinstance(state, dict) else state
            raise ValueError(f"position_debias: the saved state is for {got!r}, this loss is "
                             f"{self.owner.method!r}")
        theta = _unhex(state.get("propensity"), "propensity")
        if theta.shape != self.theta.shape:
            raise ValueError(f"position_debias: {theta.numel()} saved propensities for "
                             f"{self.K} positions")
        self.theta = theta
        if self.offset_table is not None:
            self.offset_table = _unhex(state.get("position_bias"), "position_bias")
        for k in self.extra:
            self.extra[k] = _unhex(state.get(k), k)
        self.rebind()


class PositionDebiasLoss(RankingLoss):
    """Base of the position-debiasing wrappers (see the module docstring): ``loss`` a
    pairwise :class:`~torchrankboost.losses.RankingLoss` (or its ``{"type", "params"}``
    description); ``n_positions`` the number of positions ``K`` (default: the largest
    position of the training data); ``negatives``: the other document ``j`` of a click pair
    among the shown documents (``"shown"``, default) or all of the query's (``"all"``: the
    unshown ones, below the cut-off, then count as non-relevant, which teaches the logging
    ranker's selection: much worse in the experiment)."""

    method = "none"  # the registry's name of the method (saved in the model's state)
    reweights = True
    takes_propensity = False  # the constructor's second argument is the known propensities

    def __init__(self, loss: Union[RankingLoss, Dict[str, Any]], *,
                 n_positions: Optional[int] = None, negatives: str = "shown"):
        loss = from_params(loss)
        if negatives not in NEGATIVES:
            raise ValueError(f"negatives must be one of {NEGATIVES}, got {negatives!r}")
        self.negatives = negatives
        if not isinstance(loss, RankingLoss):
            raise ValueError(f"loss must be a RankingLoss, got {type(loss).__name__}")
        super().__init__(reduction=loss.reduction)
        self.loss = loss
        if n_positions is not None and int(n_positions) < 1:
            raise ValueError(f"n_positions must be >= 1, got {n_positions}")
        self.n_positions = None if n_positions is None else int(n_positions)
        self.last_state_: Optional[dict] = None

    # without positions: the base loss
    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        return self.loss.per_group(inp)

    def forward(self, scores: Tensor, labels: Optional[Tensor] = None,
                groups: Optional[Groups] = None, **kw: Any) -> Tensor:
        return self.loss(scores, labels, groups, **kw)

    def bind(self, labels: Optional[Tensor], groups: Optional[Groups] = None,
             **kw: Any) -> BoundLoss:
        return self.loss.bind(labels, groups, **kw)

    def grad_hess(self, scores: Tensor, labels: Optional[Tensor] = None,
                  groups: Optional[Groups] = None, **kw: Any) -> Tuple[Tensor, Tensor]:
        return self.loss.grad_hess(scores, labels, groups, **kw)

    def _check_clicks(self, labels: Tensor) -> None:
        if bool((labels < 0).any()):
            raise ValueError("clicks: labels must be non-negative click counts or rates")

    def bind_position(self, labels: ArrayLike, groups: Groups, position: ArrayLike, *,
                      weights: Optional[Tensor] = None, comm: Optional[FitComm] = None
                      ) -> PositionBound:
        """Bind clicks ``labels`` ``(n,)``, ``groups`` and ``position`` ``(n,)`` (int,
        1-based, 0 = not shown); ``comm`` (the fit's
        :class:`~torchrankboost.parallel.FitComm`) agrees ``K`` over the ranks."""
        labels = torch.as_tensor(labels)
        position = torch.as_tensor(position, device=labels.device)
        n = labels.shape[0]
        if position.shape != (n,) or position.dtype.is_floating_point:
            raise ValueError(f"position must be ({n},) integers like the labels, got "
                             f"{tuple(position.shape)} {position.dtype}")
        position = position.long()
        if n and int(position.min()) < 0:
            raise ValueError("position must be >= 0 (1-based rank, 0: not shown)")
        self._check_clicks(labels)
        if n and bool(((labels > 0) & (position == 0)).any()):
            raise ValueError("clicks: a document with position 0 (not shown) has clicks")
        K = self.n_positions
        if K is None:
            local = float(position.max()) if n else 1.0
            K = int(comm.max([local], size=1)[0]) if comm is not None else int(local)
        if n and int(position.max()) > K:
            raise ValueError(f"position: {int(position.max())} exceeds n_positions = {K}")
        bound = PositionBound(self, labels, groups, position, weights, max(K, 1))
        self.last_state_ = bound.state()
        return bound

    def _init_bound(self, bound: PositionBound) -> None:
        """Set up the method's state on a new bound (default: nothing)."""

    def _update(self, bound: PositionBound, scores: Tensor, comm, rnd: int,
                pending=None) -> bool:
        return False

    def round_diagnostics(self, scores: Optional[Tensor] = None,
                          labels: Optional[Tensor] = None, groups: Optional[Groups] = None
                          ) -> Dict[str, float]:
        """The last estimated propensities ``propensity_p<k>`` (and position biases)."""
        st = self.last_state_ or {}
        out = {f"propensity_p{k + 1}": float.fromhex(x)
               for k, x in enumerate(st.get("propensity", []))}
        out.update({f"position_bias_p{k}": float.fromhex(x)
                    for k, x in enumerate(st.get("position_bias", []))})
        return out

    def extra_repr(self) -> str:
        return f"loss={self.loss!r}"


class IPWLoss(PositionDebiasLoss):
    r"""Inverse propensity weighting with known propensities: ``propensity`` the
    examination probabilities of positions ``1..K`` (e.g.
    :func:`~torchrankboost.clicks.pbm_propensity`), clipped below at ``clip``."""

    method = "ipw"
    takes_propensity = True

    def __init__(self, loss: Union[RankingLoss, Dict[str, Any]], propensity: Sequence[float], *,
                 clip: float = 0.01, negatives: str = "shown"):
        prop = [float(x) for x in torch.as_tensor(propensity, dtype=F64).reshape(-1).tolist()]
        if not prop or not all(math.isfinite(x) and x > 0 for x in prop):
            raise ValueError("propensity must be a non-empty sequence of positive numbers")
        if not (0.0 <= clip <= 1.0):
            raise ValueError(f"clip must be in [0, 1], got {clip}")
        super().__init__(loss, n_positions=len(prop), negatives=negatives)
        self.propensity = prop
        self.clip = float(clip)

    def _init_bound(self, bound):
        bound.theta = torch.tensor(self.propensity, dtype=F64)


class RegressionEMLoss(PositionDebiasLoss):
    r"""Propensities estimated by regression-EM between rounds (module docstring).

    Args:
        loss: the pairwise base loss.
        n_positions: ``K`` (default the largest position).
        clip: lower clip of the normalised propensities in the weights.
        em_steps: EM iterations per round; ``newton_steps``: Newton steps of the relevance
            regression per EM iteration; ``every``: update every that many rounds.
    """

    method = "em"

    def __init__(self, loss: Union[RankingLoss, Dict[str, Any]], *,
                 n_positions: Optional[int] = None, clip: float = 0.01, em_steps: int = 1,
                 newton_steps: int = 2, every: int = 1, negatives: str = "shown"):
        super().__init__(loss, n_positions=n_positions, negatives=negatives)
        self.clip = float(clip)
        self.em_steps, self.newton_steps, self.every = int(em_steps), int(newton_steps), int(every)

    def _check_clicks(self, labels):
        if bool((labels < 0).any()) or bool((labels > 1).any()):
            raise ValueError("clicks: regression-EM needs click-through rates in [0, 1] (clicks "
                             "/ impressions, or 0/1 clicks)")

    def _init_bound(self, bound):
        bound.extra["calibration"] = torch.zeros(2, dtype=F64)  # (u, v): γ = σ(u s + v)
        # the EM's own (unnormalised) examination probabilities; θ = 1 would be a fixed point
        bound.extra["examination"] = torch.full((bound.K,), 0.5, dtype=F64)

    def _update(self, bound, scores, comm, rnd, pending=None):
        if (rnd - 1) % self.every:
            return False
        for _ in range(self.em_steps):
            em_step(bound, scores.detach().to(F64), comm, self.newton_steps)
        self.last_state_ = bound.state()
        bound.rebind()
        return True


def em_step(bound: PositionBound, s: Tensor, comm, newton_steps: int) -> None:
    """One regression-EM iteration on ``bound`` (``theta``, ``extra["calibration"]``)."""
    shown = bound.position > 0
    r, p = bound.clicks[shown], bound.position[shown] - 1
    x = s[shown]
    u, v = bound.extra["calibration"].tolist()
    gamma = torch.sigmoid(u * x + v)
    th = bound.extra["examination"][p]
    den = (1.0 - th * gamma).clamp_min(1e-12)
    post_e = r + (1.0 - r) * th * (1.0 - gamma) / den
    post_r = r + (1.0 - r) * (1.0 - th) * gamma / den
    K = bound.K

    def per_position():
        z = torch.zeros(2 * K, dtype=F64)
        z.index_add_(0, p, post_e)
        z.index_add_(0, p + K, torch.ones_like(post_e))
        return z

    tot = comm.sum(per_position, size=2 * K)
    old = bound.extra["examination"]
    theta = torch.where(tot[K:] > 0, tot[:K] / tot[K:].clamp_min(1), old).clamp(1e-6, 1 - 1e-6)
    bound.extra["examination"] = theta
    bound.theta = (theta / theta[0]).clamp(1e-6, 1.0)
    bound.extra["calibration"] = _logistic(x, post_r, torch.tensor([u, v], dtype=F64), comm,
                                           newton_steps)


def _logistic(x: Tensor, y: Tensor, w: Tensor, comm, steps: int, ridge: float = 1e-6):
    """Newton steps of the logistic regression of soft targets ``y`` on ``(x, 1)``."""
    for _ in range(steps):
        def sums():
            q = torch.sigmoid(w[0] * x + w[1])
            d, c = q - y, q * (1 - q)
            return torch.stack([(d * x).sum(), d.sum(), (c * x * x).sum(), (c * x).sum(),
                                c.sum()])
        g0, g1, haa, hab, hbb = comm.sum(sums, size=5).tolist()
        g0, haa, hbb = g0 + ridge * w[0].item(), haa + ridge, hbb + ridge
        det = haa * hbb - hab * hab
        if not det > 0:
            break
        w = w - torch.tensor([(hbb * g0 - hab * g1) / det, (haa * g1 - hab * g0) / det],
                             dtype=F64)
    return w


class DualLearningLoss(PositionDebiasLoss):
    r"""The dual learning algorithm (Ai et al., SIGIR 2018) with a per-position propensity
    table: the ranker learns from the clicks by inverse *propensity* weighting with the
    current table (as :class:`IPWLoss`), and the table learns from the clicks by inverse
    *relevance* weighting with the ranker's current relevance estimates, once per round.

    **The table's update.** Under the position-based model
    :math:`E[c_i] = \theta_{p_i}\rho_i`, so :math:`E[c_i / \rho_i] = \theta_{p_i}`: inverse
    relevance weighting of the clicks estimates the propensities exactly as inverse propensity
    weighting estimates the relevance. DLA's propensity loss with a table
    :math:`\theta = \mathrm{softmax}(g)` is the click-weighted cross-entropy
    :math:`-\sum_i \frac{c_i}{\hat\rho_i} \log \theta_{p_i}`, minimised in closed form by
    :math:`\theta_p \propto \sum_{i: p_i = p} c_i / \hat\rho_i` (the plain IRW estimate). Its
    variance is large where :math:`\hat\rho_i` is small, so the update here is the
    weighted average of the same ratios :math:`c_i/\hat\rho_i` with weights
    :math:`\hat\rho_i`:

    .. math:: \theta_p = \frac{\sum_{i: p_i = p} \hat\rho_i\,(c_i / \hat\rho_i)}
              {\sum_{i: p_i = p} \hat\rho_i} = \frac{\sum_{i: p_i = p} c_i}
              {\sum_{i: p_i = p} \hat\rho_i},

    unbiased for :math:`\theta_p` when :math:`\hat\rho = \rho` (its numerator has expectation
    :math:`\theta_p \sum \rho_i`) and the maximum-likelihood table of the quasi-Poisson model
    :math:`c_i \sim \theta_{p_i}\hat\rho_i`.

    **The relevance estimates.** A ranker's scores are relevance only up to a query's scale
    and a link: the pairwise losses' minimiser has :math:`s_i - s_j = \tau^{-1}
    \ln(\rho_i/\rho_j)` within a query (``τ = 2`` for the exponential loss, 1 for RankNet),
    which is DLA's per-list softmax normalisation. So
    :math:`\hat\rho_i = \kappa_q e^{\tau (s_i - m_q)}` (``m_q`` the query's largest shown
    score), with the query scale :math:`\kappa_q = \sum_{i \in q} c_i / \sum_{i \in q}
    \theta_{p_i} e^{\tau (s_i - m_q)}` (the same model's maximum-likelihood scale, local to a
    query) and the link :math:`\tau` one Newton step per iteration on the quasi-Poisson
    log-likelihood :math:`\sum_i c_i \ln\mu_i - \mu_i`, :math:`\mu_i = \theta_{p_i}\hat\rho_i`
    (with ``link="learn"``; by default it is fixed at the base loss's link). Each round runs
    ``steps`` iterations of
    (:math:`\kappa`, :math:`\theta`, :math:`\tau`); the sums per position and the link's two
    sums are all-reduced on several processes; :math:`\theta` is normalised to
    :math:`\theta_1 = 1` and clipped below at ``clip`` in the weights.

    Args:
        loss: the pairwise base loss.
        n_positions: ``K`` (default the largest position).
        clip: lower clip of the propensities in the ranker's weights.
        link: :math:`\tau`: ``"auto"`` (default: the base loss's link, 2 for the exponential
            loss, else 1), a positive number, or ``"learn"`` (start at ``link_init`` and learn
            it; on MQ2008 the learned link ends near 2.3-2.5 and flattens the table: the
            ranker's scores also carry the logging ranker's order, see the results README).
        steps: (κ, θ, τ) iterations per update; ``warmup``: rounds trained with
            :math:`\theta = 1` before the first update (the ranker's scores carry no
            relevance before); ``every``: update every that many rounds.
    """

    method = "dla"

    def __init__(self, loss: Union[RankingLoss, Dict[str, Any]], *,
                 n_positions: Optional[int] = None, clip: float = 0.01, link: str = "auto",
                 link_init: float = 1.0, steps: int = 2, warmup: int = 5, every: int = 1,
                 negatives: str = "shown"):
        super().__init__(loss, n_positions=n_positions, negatives=negatives)
        if not (link in ("auto", "learn") or (isinstance(link, (int, float)) and link > 0)):
            raise ValueError(f"link must be 'auto', 'learn' or a positive number, got {link!r}")
        if not link_init > 0:
            raise ValueError(f"link_init must be > 0, got {link_init}")
        self.clip, self.link, self.link_init = float(clip), link, float(link_init)
        self.steps, self.warmup, self.every = int(steps), int(warmup), max(1, int(every))

    def link_value(self) -> float:
        """The starting (or fixed) :math:`\tau`."""
        if self.link == "learn":
            return self.link_init
        if self.link == "auto":
            return 2.0 if isinstance(self.loss, ExponentialPairwiseLoss) else 1.0
        return float(self.link)

    def _init_bound(self, bound):
        tau = self.link_value()
        bound.extra["link"] = torch.tensor([tau], dtype=F64)

    def _update(self, bound, scores, comm, rnd, pending=None):
        if rnd <= self.warmup or (rnd - 1 - self.warmup) % self.every:
            return False
        for _ in range(self.steps):
            dla_step(bound, scores.detach().to(F64), comm, learn_link=self.link == "learn")
        self.last_state_ = bound.state()
        bound.rebind()
        return True

    def round_diagnostics(self, scores: Optional[Tensor] = None,
                          labels: Optional[Tensor] = None, groups: Optional[Groups] = None
                          ) -> Dict[str, float]:
        out = super().round_diagnostics(scores, labels, groups)
        link = (self.last_state_ or {}).get("link")
        if link:
            out["propensity_link"] = float.fromhex(link[0])
        return out


def dla_step(bound: PositionBound, s: Tensor, comm, *, learn_link: bool = True,
             tau_range=(0.05, 20.0)) -> None:
    r"""One (κ, θ, τ) iteration of :class:`DualLearningLoss` on ``bound`` (its ``theta`` and
    ``extra["link"]``), ``s`` ``(n,)`` float64 the ranker's scores."""
    shown = bound.position > 0
    q = bound.groups.group_index[shown]
    G, K = bound.groups.num_groups, bound.K
    c, p, x = bound.clicks[shown], bound.position[shown] - 1, s[shown]
    m = torch.full((G,), -math.inf, dtype=F64).scatter_reduce(0, q, x, "amax")
    x = x - m[q]  # <= 0: exp() cannot overflow
    tau = float(bound.extra["link"][0])
    theta = bound.theta

    def rho_hat(tau_, th):
        e = torch.exp(tau_ * x)
        num = torch.zeros(G, dtype=F64).index_add_(0, q, c)
        den = torch.zeros(G, dtype=F64).index_add_(0, q, th[p] * e)
        kappa = torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(den))
        return kappa[q] * e

    rho = rho_hat(tau, theta)

    def per_position():
        z = torch.zeros(2 * K, dtype=F64)
        z.index_add_(0, p, c)
        z.index_add_(0, p + K, rho)
        return z

    tot = comm.sum(per_position, size=2 * K)
    ok = (tot[K:] > 0) & (tot[:K] > 0)
    th = torch.where(ok, tot[:K] / tot[K:].clamp_min(1e-300), theta)
    if bool(ok[0]):
        th = th / th[0]
    theta = th.clamp(1e-6, 1.0)
    bound.theta = theta
    if learn_link:
        rho = rho_hat(tau, theta)

        def link_sums():
            mu = theta[p] * rho
            return torch.stack([((c - mu) * x).sum(), (mu * x * x).sum()])

        g, h = comm.sum(link_sums, size=2).tolist()
        if h > 1e-12:
            tau = min(max(tau + g / h, tau_range[0]), tau_range[1])
        bound.extra["link"] = torch.tensor([tau], dtype=F64)


class AdditivePositionLoss(PositionDebiasLoss):
    r"""The clicks' loss of :math:`f(x) + g_p` with :math:`g` learned between rounds
    (module docstring): one Newton step per round on
    :math:`L + \tfrac{\lambda}{2}\lVert g\rVert^2` (``reg`` :math:`=\lambda`), ``g_1 = 0``."""

    method = "additive"
    reweights = False

    def __init__(self, loss: Union[RankingLoss, Dict[str, Any]], *,
                 n_positions: Optional[int] = None, reg: float = 1.0, every: int = 1,
                 negatives: str = "shown"):
        super().__init__(loss, n_positions=n_positions, negatives=negatives)
        if not (reg >= 0):
            raise ValueError(f"reg must be >= 0, got {reg}")
        self.reg, self.every = float(reg), int(every)

    def _init_bound(self, bound):
        bound.offset_table = torch.zeros(bound.K + 1, dtype=F64)  # positions 0..K

    def _update(self, bound, scores, comm, rnd, pending=None):
        if (rnd - 1) % self.every:
            return False
        K1 = bound.K + 1

        def per_position():
            if pending is not None and pending[3] == "diag":
                g, h = pending[1], pending[2]  # this loss at these scores, computed already
            else:
                g, h = bound.grad_hess(scores.detach(), hess="diag")
            z = torch.zeros(2 * K1, dtype=F64)
            z.index_add_(0, bound.position, g.to(F64))
            z.index_add_(0, bound.position + K1, h.to(F64))
            return z

        tot = comm.sum(per_position, size=2 * K1)
        t = bound.offset_table
        step = (tot[:K1] + self.reg * t) / (tot[K1:] + self.reg).clamp_min(1e-12)
        t = t - step
        if K1 > 1:
            t = t - t[1]  # g_1 = 0
        bound.offset_table = t
        self.last_state_ = bound.state()
        return True


def make_debias(method: str, loss: Union[RankingLoss, Dict[str, Any]], *,
                propensity: Optional[Sequence[float]] = None, **options: Any) -> RankingLoss:
    """The debiasing wrapper registered as ``method`` around ``loss`` (one that takes known
    propensities, ``"ipw"``, needs ``propensity``; ``"none"`` returns ``loss``): what the
    estimator's and the command line's ``debias`` build."""
    if method not in DEBIAS:
        raise ValueError(f"debias must be one of {DEBIAS}, got {method!r}")
    if method == NO_DEBIAS:
        return loss
    cls = registry.lookup("debias", method).resolve()
    if not cls.takes_propensity:
        return cls(loss, **options)
    if propensity is None:
        raise ValueError(f"debias={method!r} needs the propensities of positions 1..K "
                         f"(propensity=...)")
    return cls(loss, propensity, **options)
