r"""YetiRank (Gulin, Kuralenok & Pavlov, 2011) as CatBoost computes it: pairwise logistic
loss over pairs whose weights come from randomly perturbed orderings of the current scores.

For each of ``P`` perturbations (``num_permutations``) every document's score gets an
independent noise draw :math:`\varepsilon_{p,i}`; the documents of each query are sorted by
:math:`s_i + \varepsilon_{p,i}` (descending, stable), and every **adjacent** pair at
positions :math:`(t, t+1)` (0-based, inside its query) with different labels gets

.. math::

    c_{wl} \mathrel{+}= \frac{0.15}{P}\, \delta^{t}\, |y_w - y_l| \qquad
    (y_w > y_l;\ \delta = \texttt{decay})

(CatBoost's "Classic" weights: the constant 0.15 and the division by ``P`` are its own).
The loss at scores :math:`s` is then the weighted pairwise logistic loss, the weights held
fixed (no gradient flows through the sort):

.. math::

    L(s) = \sum_q \sum_{(w, l)} c_{wl}\, \log\big(1 + e^{-(s_w - s_l)}\big).

Noise: ``"logistic"`` (CatBoost's default, which it calls Gumbel: ``exp(s)`` multiplied by
``u / (1 − u)``, i.e. :math:`\varepsilon = \log u - \log(1-u)`, ``u ~ U(0, 1)``),
``"gauss"`` (:math:`\mathcal N(0, \texttt{noise\_power}^2)`) or ``"none"`` (the
scores' own order, every permutation the same).

Shapes: the noise is a ``(P, n)`` float64 tensor drawn on the CPU (``torch.rand`` /
``torch.randn`` with a ``torch.Generator``; row ``p`` is permutation ``p``, column ``i``
document ``i`` of the flat batch), so draws do not depend on the device. The pairs are
``P (n − 1)`` candidates at most, built with two batched sorts over ``(P, n)`` (the queries
stay in place), no loop over queries or pairs: O(P n log n) time, O(P n) memory.

Randomness and reproducibility. An unbound call (``loss(s, y, g)`` / ``grad_hess``) draws
fresh noise from the module's generator (seeded with ``seed`` at construction; each call
advances it), so neural training sees new perturbations each step and two runs from the
same ``seed`` see the same ones. A bound loss (``loss.bind(...)``, what the booster uses)
keeps the pair weights it drew at its first evaluation until :meth:`YetiRankLoss.resample`
draws new ones at given scores from a generator seeded by ``(seed, round)`` — the booster
calls it once per round, so the weights are fixed within a round (its step rule compares
values of one loss) and a resumed fit draws exactly what the uninterrupted one drew.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .._pair_engine.elementwise import sigmoid, softplus
from ..groups import Groups
from ..pairs import Graded
from .base import BindState, BoundLoss, Prepared, RankingLoss

__all__ = ["YetiRankLoss", "yetirank_noise", "yetirank_pairs", "NOISES", "CATBOOST_SCALE"]

NOISES = ("logistic", "gauss", "none")
#: CatBoost's constant factor of the Classic pair weights ("like in GPU" in its source)
CATBOOST_SCALE = 0.15
F64 = torch.float64


def _noise_row(n: int, generator: torch.Generator, noise: str, noise_power: float) -> Tensor:
    """One permutation's ``(n,)`` float64 CPU noise (the rows of :func:`yetirank_noise`
    are successive draws of this from one generator)."""
    if noise == "none":
        return torch.zeros(n, dtype=F64)
    if noise == "gauss":
        return torch.randn(n, generator=generator, dtype=F64).mul_(float(noise_power))
    return torch.logit(torch.rand(n, generator=generator, dtype=F64), eps=1e-12)


def yetirank_noise(num_permutations: int, n: int, generator: torch.Generator, *,
                   noise: str = "logistic", noise_power: float = 1.0) -> Tensor:
    """The ``(P, n)`` float64 CPU noise of ``P`` perturbations of ``n`` scores (see the
    module docstring; ``"none"`` draws nothing: zeros): row ``p`` is the ``p``-th draw, the
    one :class:`YetiRankLoss` takes for permutation ``p``."""
    rows = [_noise_row(int(n), generator, noise, noise_power)
            for _ in range(int(num_permutations))]
    return torch.stack(rows) if rows else torch.zeros((0, int(n)), dtype=F64)


def weighted_depth(decay: float) -> Optional[int]:
    """The first position ``t`` whose weight ``δ^t`` is 0 in float64 (the adjacent pairs
    from there on weigh nothing), ``None`` for ``δ = 1`` (every position counts)."""
    if decay >= 1.0:
        return None
    t = 0
    w = torch.tensor(float(decay), dtype=F64)
    while float(torch.pow(w, float(t))) > 0.0:  # host floats: no tensor of the data
        t = t * 2 + 1 if t < 64 else t + max(t // 64, 1)
    lo, hi = 0, t  # δ^lo > 0, δ^hi == 0: bisect to the first zero
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if float(torch.pow(w, float(mid))) > 0.0 else (lo, mid)
    return hi


def _perturbed_order(z: Tensor, groups: Groups, depth: Optional[int]) -> Tuple[Tensor, Tensor]:
    """``(order, t)``: the documents by (query, decreasing ``z``, index) and each slot's
    0-based position in its query. One query longer than ``depth + 1``: only its first
    ``depth + 2`` slots (the later pairs weigh 0), by ``topk`` (O(n)) then a stable sort of
    those by ``z`` from index order — the full order up to ties of ``z`` across the cut
    (probability 0 with continuous noise)."""
    n = z.shape[0]
    if depth is not None and groups.num_groups == 1 and depth + 2 < n:
        idx = torch.sort(torch.topk(z, depth + 2, sorted=False)[1])[0]
        order = idx[torch.sort(z.index_select(0, idx), descending=True, stable=True)[1]]
        return order, torch.arange(order.shape[0], device=z.device)
    by_score = torch.argsort(z, descending=True, stable=True)
    gi = groups.group_index
    order = by_score[torch.argsort(gi[by_score], stable=True)]
    return order, torch.arange(n, device=z.device) - groups.offsets[gi[order]]


def yetirank_pairs(scores: Tensor, labels: Tensor, groups: Groups, noise, *,
                   decay: float, weights: Optional[Tensor] = None
                   ) -> Tuple[Tensor, Tensor, Tensor]:
    r"""The weighted pairs ``(win (m,), lose (m,), c (m,) float64)`` of the perturbed
    orderings: ``scores`` ``(n,)``, ``labels`` ``(n,)``, ``noise`` ``(P, n)`` or a sequence
    of ``P`` rows ``(n,)`` (drawn lazily: one row in memory at a time). A pair ``(w, l)``
    may appear once per permutation (the loss is linear in ``c``, so repeats simply add).
    ``weights`` ``(n,)``: ``c`` times ``weights[w] · weights[l]``.

    Every adjacent slot of each permutation is a candidate of fixed count (``n − 1``, or
    ``depth + 1`` for one long query: :func:`weighted_depth`); those that are no pair
    (another query, equal labels) get ``c = 0`` rather than being dropped, so no shape
    depends on the data and nothing is read on the host. Memory O(n) per permutation."""
    dev = scores.device
    n = scores.shape[0]
    empty = torch.zeros(0, dtype=torch.long, device=dev)
    rows = list(noise) if isinstance(noise, Tensor) else noise
    if n < 2:
        return empty, empty, torch.zeros(0, dtype=F64, device=dev)
    depth = weighted_depth(decay)
    s = scores.detach().to(F64)
    y = labels.to(F64)
    gi = groups.group_index
    out = []
    for row in rows:
        order, t = _perturbed_order(s + row.to(dev), groups, depth)
        a, b = order[:-1], order[1:]
        ya, yb = y[a], y[b]
        keep = (gi[a] == gi[b]) & (ya != yb)
        d = torch.pow(torch.tensor(float(decay), dtype=F64, device=dev), t[:-1].to(F64))
        e = torch.where(keep, (ya - yb).abs(), torch.zeros_like(ya))
        up = ya > yb
        out.append((torch.where(up, a, b), torch.where(up, b, a), d, e))
    if not out:
        return empty, empty, torch.zeros(0, dtype=F64, device=dev)
    win, lose, d, e = (torch.cat(x) for x in zip(*out))
    c = (CATBOOST_SCALE / len(out)) * d * e  # CatBoost's order of the products
    if weights is not None:
        w = weights.to(F64)
        c = c * w[win] * w[lose]
    return win, lose, c


def _logistic_terms(s: Tensor, groups: Groups, pairs, need_hess: bool):
    """Per-query losses ``(G,)``, the gradient and the Hessian diagonal ``(n,)`` of
    ``Σ c softplus(s_l − s_w)`` (no autograd)."""
    win, lose, c = pairs
    s = s.detach()
    c = c.to(s.dtype)
    z = s[lose] - s[win]
    loss = s.new_zeros(groups.num_groups).index_add_(0, groups.group_index[win],
                                                     c * softplus(z))
    p = sigmoid(z) * c
    grad = torch.zeros_like(s).index_add_(0, win, -p).index_add_(0, lose, p)
    hdiag = None
    if need_hess:
        q = p * sigmoid(-z)
        hdiag = torch.zeros_like(s).index_add_(0, win, q).index_add_(0, lose, q)
    return loss, grad, hdiag


def _round_seed(seed: int, rnd: int) -> int:
    return (int(seed) * 1_000_003 + 104_729 * (int(rnd) + 1) + 31) % (2 ** 63 - 1)


class YetiRankLoss(RankingLoss):
    r"""YetiRank's pairwise logistic loss with pair weights from ``num_permutations``
    randomly perturbed orderings (module docstring: the weights, the noise, the seeding).

    Args:
        num_permutations: perturbations ``P`` per draw (CatBoost's ``permutations``, 10).
        decay: position discount ``δ`` of an adjacent pair at positions ``(t, t+1)``:
            ``δ^t`` (CatBoost's ``decay``; 0.85 in its current releases).
        noise: ``"logistic"`` (default, CatBoost's), ``"gauss"`` or ``"none"``.
        noise_power: the standard deviation of the ``"gauss"`` noise.
        seed: seeds every draw (the module's generator; the per-round draws of
            :meth:`resample`).
        reduction: ``"sum"``, ``"mean"`` over queries with two label levels, ``"none"``.

    Labels are graded relevance (``pairs`` must be the default). ``grad_hess``: with
    ``p = sigmoid(s_l − s_w)``, gradient ``−c p`` at the winner and ``+c p`` at the loser;
    Hessian diagonal ``Σ c p (1 − p)``; bound ``c / 2`` per pair and endpoint. Document
    ``weights`` multiply a pair's weight by ``weights[w] · weights[l]``.
    """

    #: a loss whose value depends on random draws: the generic invariance tests skip it
    stochastic = True

    def __init__(self, *, num_permutations: int = 10, decay: float = 0.85,
                 noise: str = "logistic", noise_power: float = 1.0, seed: int = 0,
                 reduction: str = "sum"):
        super().__init__(reduction=reduction)
        if isinstance(num_permutations, bool) or int(num_permutations) != num_permutations \
                or num_permutations < 1:
            raise ValueError(f"num_permutations must be an integer >= 1, got "
                             f"{num_permutations!r}")
        decay = float(decay)
        if not (0.0 < decay <= 1.0):
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        noise_power = float(noise_power)
        if not (noise_power > 0 and noise_power < float("inf")):
            raise ValueError(f"noise_power must be positive and finite, got {noise_power}")
        self.num_permutations = int(num_permutations)
        self.decay = decay
        self.noise = noise
        self.noise_power = noise_power
        self.seed = int(seed)
        self._generator = torch.Generator().manual_seed(self.seed)

    # ------------------------------------------------------------------ draws
    def _draw(self, inp: Prepared, scores: Tensor, generator: torch.Generator):
        n = inp.groups.num_docs
        rows = (_noise_row(n, generator, self.noise, self.noise_power)
                for _ in range(self.num_permutations))  # one row at a time
        return yetirank_pairs(scores, inp.labels, inp.groups, rows, decay=self.decay,
                              weights=inp.weights)

    def _current(self, inp: Prepared):
        """The pairs of ``inp``'s bound state, drawn at ``inp.scores`` on first use."""
        st = self._state(inp)
        if st.drawn is None:
            st.drawn = self._draw(inp, inp.scores, self._generator)
        return st.drawn

    def resample(self, bound: BoundLoss, scores: Tensor, *, round: int) -> None:
        """Draw new pair weights for ``bound`` (bound with this loss) at ``scores`` ``(n,)``
        from a generator seeded by ``(seed, round)``; they hold until the next call (shared
        with ``bound.with_group_weights(...)`` copies). No host synchronisation: the scores'
        values are not checked here (non-finite scores make the loss NaN)."""
        inp = bound._inp
        gen = torch.Generator().manual_seed(_round_seed(self.seed, round))
        inp.state.drawn = self._draw(inp, bound._check(scores, finite=False).detach(), gen)

    # ------------------------------------------------------------------ contract
    def _bind_state(self, inp: Prepared) -> BindState:
        if not isinstance(inp.pairs, Graded):
            raise ValueError("YetiRankLoss takes graded labels: pairs must be None (the pairs "
                             "come from the perturbed orderings)")
        g = inp.groups
        if g.num_docs:
            has = g.segment_max(inp.labels.to(F64), empty=0.0) > g.segment_min(
                inp.labels.to(F64), empty=0.0)
        else:
            has = torch.zeros(g.num_groups, dtype=torch.bool, device=g.device)
        return BindState(has=has, drawn=None)

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        win, lose, c = self._current(inp)
        s = inp.scores
        terms = c.to(s.dtype) * softplus(s[lose] - s[win])
        per = s.new_zeros(inp.groups.num_groups).index_add(0, inp.groups.group_index[win],
                                                           terms)
        return per, self._state(inp).has

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        pairs = self._current(inp)
        loss, grad, hdiag = _logistic_terms(inp.scores, inp.groups, pairs, hess == "diag")
        if hess == "bound":
            win, lose, c = pairs
            q = (c * 0.5).to(grad.dtype)
            hdiag = torch.zeros_like(grad).index_add_(0, win, q).index_add_(0, lose, q)
        has = self._state(inp).has
        if self.reduction == "mean":
            k = float(max(int(has.sum()), 1))
            grad, hdiag = grad / k, hdiag / k
        return loss, has, grad, hdiag

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        _, _, grad, hdiag = self._per_group_grad_hess(inp, hess)
        return grad, hdiag

    def extra_repr(self) -> str:
        return (f"num_permutations={self.num_permutations}, decay={self.decay}, "
                f"noise={self.noise!r}, seed={self.seed}, reduction={self.reduction!r}")
