r"""Rudin's p-norm push (Rudin 2009) over the coordinate-boosting loop
(:mod:`.coordinate`).

Weights (``sample_weight`` ``w`` ``(n,)``, ``group_weight`` ``c`` ``(Q,)``): a document
weight weighs the crucial pairs inside the p-norm and a query weight multiplies its query's
term (as ``PNormPushLoss`` bound with weights, and as ``c`` copies of the query would): with
:math:`L_k = \sum_{i \succ k} w_i w_k e^{-(s_i - s_k)}` the objective is
:math:`F_p = \sum_q c_q \sum_k L_k^p` (``p = 1``: RankBoost's weighted loss, a pair
weighing :math:`c_q w_i w_k`). The objective runs on the rows of positive weight only (the
others have no pair term and place no threshold), so weights of 0 on some queries give the
model trained without them.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ..._pair_engine.exponential import pooled_log_loss
from ...groups import Groups
from ...pairs import ExplicitPairs
from .pair_stats import LabelPairStats
from .coordinate import CoordinateBoosting, Step, per_eval_set, flush_denormals, select_candidate
from ..steps import exact_step
from ...contract import ArrayLike, EvalSets, MetricSpec, PathLike
from ...groups import GroupsLike
from ...pairs import PairSpec
from ..ensemble import Ensemble

__all__ = ["PNormPush"]


class _PNormObjective:
    """ln F_p(s) pooled over the queries, ``ln Σ_q Σ_j L_j^p`` (Rudin 2009; graded labels:
    every document is a "negative" against all higher grades), and its gradient: the pair
    engine's exponential family, the kernels of ``PNormPushLoss``. ``fw`` (a weighted
    :class:`~torchrankboost.boosting.weights.FitWeights`): ``Σ_q c_q Σ_k L_k^p`` with pair
    weights ``w_i w_k`` (log document weights ``ln w_d + ln c_q / (2p)``), on the rows of
    positive weight only."""

    def __init__(self, labels, groups, pairs, p, fw=None):
        self.p = float(p)
        self.n = groups.num_docs
        self.rows: Optional[Tensor] = None
        self.lw: Optional[Tensor] = None  # (n,) log document weights (-inf at weight 0)
        sub_lw = None
        if fw is not None and fw.weighted:
            self.lw = _log_weights(fw, groups, self.p)
            self.rows = fw.rows
            sub_lw = self.lw if self.rows is None else self.lw[self.rows]
            if self.rows is not None:
                labels, groups = labels[self.rows], _sub_groups(groups, self.rows)
        self.st = LabelPairStats(labels, groups, pairs)
        self._lw = sub_lw

    def _sub(self, s: Tensor) -> Tensor:
        return s if self.rows is None else s[self.rows]

    def full(self, x: Tensor) -> Tensor:
        """A per-row tensor of the rows fitted ``(n_active,)`` spread to ``(n,)`` (0/False
        at the rows of weight 0)."""
        if self.rows is None:
            return x
        out = torch.zeros(self.n, dtype=x.dtype, device=x.device)
        out[self.rows] = x
        return out

    def log_loss(self, s):
        return pooled_log_loss(self._sub(s), self.st.levels, self.st.groups, self.p,
                               lw=self._lw)[0]

    def dot(self, g: Tensor, h: Tensor) -> float:
        """``Σ_i g_i h_i`` over the rows fitted (``(n,)`` tensors): the rows of weight 0
        leave no trace, not even in the rounding of the sum, so the fit is the fit without
        them."""
        return float((self._sub(g) * self._sub(h)).sum())

    def grad(self, s):
        """(ln F_p, -∂ ln F_p/∂s)."""
        v, g = pooled_log_loss(self._sub(s.detach()), self.st.levels, self.st.groups, self.p,
                               grad=True, lw=self._lw)
        return v, -self.full(g)


def _log_weights(fw, groups: Groups, p: float) -> Tensor:
    """``ln w_d + ln c_q / (2p)`` per document: a pair's ``ln w_i + ln w_k`` is
    ``ln(c_q^{1/p} w_i w_k)``, so query ``q``'s ``Σ_k L_k^p`` comes out times ``c_q``."""
    lw = torch.zeros(groups.num_docs, dtype=torch.float64, device=groups.device)
    if fw.sample is not None:
        lw = torch.log(fw.sample)
    if fw.group is not None:
        lw = lw + torch.log(fw.group)[groups.group_index] / (2.0 * p)
    return lw


def _sub_groups(groups: Groups, rows: Tensor) -> Groups:
    """The queries of ``rows`` (sorted row indices), empty ones dropped."""
    sizes = torch.bincount(groups.group_index[rows], minlength=groups.num_groups)
    return Groups.from_sizes(sizes[sizes > 0], device=groups.device)


class PNormPush(CoordinateBoosting):
    r"""Rudin's p-norm push (``F_p = Σ_k (Σ_i e^{-(s_i - t_k)})^p``), coordinate descent.

    Each round picks ``j = argmax |⟨-∇ ln F_p, h_j⟩|`` (Gauss–Southwell, the paper's Fig. 1
    step (a); equal to ``p·|g_j|`` with ``g = Pᵀπ - Nᵀν``) and steps by the exact line
    search: the closed form ``α = ln(a(1-b)/((1-a)b))/(p+1)`` (C12) for binary rankers on a
    single bipartite query, otherwise a safeguarded 1-D root find of the convex
    ``φ'(α) = ∂ ln F_p(s + α h)/∂α``. Several queries: ``F_p`` is summed over queries;
    graded labels use the C14 extension (every document is a "negative" against all
    higher grades). ``p = 1`` is RankBoost's coordinate descent.

    Diagnostics: ``alpha``, ``g`` (the selection score ⟨-∇ ln F_p, h⟩/p), ``loss_before`` /
    ``loss`` (ln F_p), ``feature``/``threshold``, ``closed_form``.
    """

    _algorithm = "pnorm_push"
    can_continue = True
    _lists_weighted_pairs = False  # the pair weights enter the p-norm (_PNormObjective)

    def __init__(self, p: float = 4.0, *, learner: Any = None, n_rounds: int = 200,
                 pairs: PairSpec = "bipartite", tol: float = 1e-14, on_unbounded: str = "stop",
                 alpha_cap: float = 50.0, callbacks: Sequence[Any] = ()):
        if not (isinstance(p, (int, float)) and p >= 1 and math.isfinite(p)):
            raise ValueError(f"p must be a finite number >= 1 (F_p is convex only for p >= 1), got {p!r}")
        self.p = float(p)
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.tol = float(tol)

    def _eval_objective(self, pairs):
        """``ln F_p`` of the set."""
        if isinstance(pairs, ExplicitPairs):
            return None
        return per_eval_set(lambda y, g: _PNormObjective(y, g, pairs, self.p).log_loss)

    @flush_denormals
    def fit(self, X: ArrayLike, labels: ArrayLike, groups: GroupsLike = None, *,
            eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            pairs: PairSpec = None, sample_weight: Optional[ArrayLike] = None,
            group_weight: Optional[ArrayLike] = None, init_model: Any = None,
            resume: Optional[PathLike] = None) -> Ensemble:
        """The ranker contract's ``fit``; ``sample_weight`` ``(n,)`` / ``group_weight``
        ``(Q,)``: a pair weighs ``c_q w_i w_k`` inside the p-norm (module docstring)."""
        return self._fit(X, labels, groups, pairs, eval_set, eval_metric,
                         early_stopping_rounds, callbacks, more=(sample_weight, group_weight),
                         init_model=init_model, resume=resume)

    def _begin(self, X, labels, groups, pr, init_scores):
        if isinstance(pr, ExplicitPairs):
            raise ValueError("PNormPush needs label-induced pairs ('bipartite' or 'graded')")
        obj = self.objective_ = _PNormObjective(labels, groups, pr, self.p, self.weights_)
        self._single = obj.st.K == 2 and int((obj.st.pairs_per_group > 0).sum()) == 1
        self._closed = self.source_.dictionary.binary and self._single
        if self._single:  # one bipartite query: π over positives, ν over negatives (Rudin 2009)
            has = obj.st.pairs_per_group[obj.st.gi] > 0
            self._pm = obj.full((obj.st.level == 1) & has)
            self._nm = obj.full((obj.st.level == 0) & has)
        return self._zero_scores(X)

    def _step(self, s, l1):
        """Gauss–Southwell choice ``argmax |⟨-∇ ln F_p, h⟩|/p``, then the closed-form step
        (C12) or the exact line search."""
        D = self.source_.dictionary
        lz, wneg = self.objective_.grad(s)
        gsel = D.linear_sums(wneg) / self.p
        c = select_candidate(gsel, D.valid, signed=True)
        gj = float(gsel[c])
        if abs(gj) < self.tol:
            self._stop("converged (max |g| below tol)")
        h = D.column(c)
        alpha = self._closed_alpha(s, h, gj) if self._closed else self._line_alpha(s, h, gj)
        return Step(delta=alpha * h, alpha=alpha, terms=[(c, alpha)],
                    carry=(c, gj, lz, self._closed))

    def _round_diag(self, step, s, l1):
        c, gj, lz, closed = step.carry
        return dict(self.source_.describe(c), candidate=c, alpha=step.alpha, g=gj,
                    loss_before=float(lz), loss=float(self.objective_.log_loss(s)),
                    closed_form=closed, l1=l1)

    def _closed_alpha(self, s, h, gj) -> float:
        """C12: ``α = ln(a(1-b)/((1-a)b))/(p+1)`` with ``a = Σ π h`` over the positives and
        ``b = Σ ν h`` over the negatives (``π ∝ e^{-s}``, ``ν ∝ e^{p s}``)."""
        p, pm, nm = self.p, self._pm, self._nm
        sp, sn = self._single_scores(s)
        pi = torch.softmax(-sp, 0)
        nu = torch.softmax(p * sn, 0)
        hp, hn = h[pm], h[nm]
        a, b = float((pi * hp).sum()), float((nu * hn).sum())
        # 1 - a and 1 - b as sums of their own (binary h): a ranker above every positive
        # gives 1 - a = 0 exactly, not the rounding of softmax's total
        a_bar, b_bar = float((pi * (1 - hp)).sum()), float((nu * (1 - hn)).sum())
        num, den = a * b_bar, a_bar * b
        if num <= 0 or den <= 0:
            return self._unbounded(f"unbounded step (a={a:.6g}, b={b:.6g})", gj)
        return (math.log(num) - math.log(den)) / (p + 1)

    def _line_alpha(self, s, h, gj) -> float:
        """The exact line search of ``ln F_p`` along ``h``."""
        alpha, bounded = exact_step(self._line_function(s, h), max_alpha=self.alpha_cap)
        if not bounded:
            alpha = self._unbounded("ln F_p decreases without bound along the ranker", gj)
        return alpha

    def _line_function(self, s, h):
        """``α ↦ (ln F_p, φ'[, φ''])`` along ``h``: one bipartite query in closed form
        (``ln F_p = p LSE(-s - αh) + LSE(p s + pαh)``), else the objective's gradient."""
        p, obj = self.p, self.objective_
        if not self._single:
            def phi(a_, h=h):
                lz_a, wn = obj.grad(s + a_ * h)
                return float(lz_a), -obj.dot(wn, h)
            return phi
        pm, nm = self._pm, self._nm
        sp, sn = self._single_scores(s)
        sn, hp, hn = p * sn, h[pm], h[nm]

        def phi(a_):
            zp, zn = -sp - a_ * hp, sn + (p * a_) * hn
            lp, ln = torch.logsumexp(zp, 0), torch.logsumexp(zn, 0)
            pa, na = torch.exp(zp - lp), torch.exp(zn - ln)
            mp, mn = float((pa * hp).sum()), float((na * hn).sum())
            vp = float((pa * hp * hp).sum()) - mp * mp  # Var_π(h)
            vn = float((na * hn * hn).sum()) - mn * mn  # Var_ν(h)
            # φ' = -p E_π[h] + p E_ν[h], φ'' = p Var_π(h) + p² Var_ν(h)
            return float(p * lp + ln), p * (mn - mp), p * vp + p * p * vn
        return phi

    def _single_scores(self, s):
        """One bipartite query's positive and negative scores, shifted by the log weights
        (``s_i - ln w_i``, ``s_k + ln w_k``: ``π ∝ w e^{-s}``, ``ν ∝ (w e^{s})^p``)."""
        sp, sn = s[self._pm], s[self._nm]
        lw = self.objective_.lw
        if lw is not None:
            sp, sn = sp - lw[self._pm], sn + lw[self._nm]
        return sp, sn
