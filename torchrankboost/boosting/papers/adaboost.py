r"""AdaBoost with the constant weak classifier and the F-skew (Rudin & Schapire 2009, §5)
over the coordinate-boosting loop (:mod:`.coordinate`)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import math

import torch
from torch import Tensor

from ...losses import zero_skew_intercept
from ...losses.exponential import AdaBoostLoss
from ...pairs import Bipartite
from .pair_stats import LabelPairStats
from .coordinate import CoordinateBoosting, Step, flush_denormals, select_candidate
from ..ensemble import Ensemble
from ...contract import ArrayLike, EvalSets, MetricSpec, PathLike
from ...groups import GroupsLike

__all__ = ["AdaBoost", "with_zero_skew_intercept"]


def with_zero_skew_intercept(model: Ensemble, X: ArrayLike, labels: ArrayLike, *,
                             threshold: float = 0.0) -> Tuple[Ensemble, float]:
    """Corollary 13 (Rudin & Schapire): a copy of ``model`` (an :class:`Ensemble`) whose base
    score is shifted by ``b = ½ ln(F₊/F₋)`` computed on the training data ``(X, labels)``
    (``F₊ = Σ_{label > threshold} e^{-s}``, ``F₋ = Σ_{label <= threshold} e^{s}``, pooled over
    all documents).

    Every pair margin (so F̃, the ranking and AUC) is unchanged, the F-skew ``F₊ - F₋``
    becomes 0 and AdaBoost's loss becomes ``F = 2√F̃``: a RankBoost model then also minimises
    AdaBoost's objective in the limit. Returns ``(new_model, b)``.
    """
    labels = torch.as_tensor(labels)
    s = model.predict(X)
    b = float(zero_skew_intercept(s, labels.to(s.device), None, threshold=threshold))
    if not math.isfinite(b):
        raise ValueError("labels: need both positives and negatives for the F-skew intercept")
    out = Ensemble(model.models, model.weights, base_score=model.base_score + b,
                   num_features=model.num_features, info=dict(model.info, zero_skew_intercept=b))
    return out, b


def _fskew_stats(s: Tensor, pos: Tensor):
    """AdaBoostLoss's own F₊, F₋ and F-skew of the scores (pooled), and ln F̃ = ln F₊ + ln F₋."""
    d = AdaBoostLoss(threshold=0.5).round_diagnostics(s, pos.to(s.dtype))
    return dict(d, log_F_tilde_bipartite=d["log_F_plus"] + d["log_F_minus"])


class AdaBoost(CoordinateBoosting):
    r"""AdaBoost (Rudin & Schapire §5) on ±1 versions ``2h - 1`` of the binary rankers plus,
    by default, the constant weak classifier ``h₀ = 1``.

    Instances are labelled ``y = +1`` if ``label > threshold`` else ``-1``; query groups are
    ignored by AdaBoost's loss ``F = F₊ + F₋`` (classification), but the RankBoost loss
    ``ln F̃`` over the bipartite pairs inside each query is reported too. Each round picks
    ``argmax |r|`` with ``r = Σ_i d_i y_i h(x_i)`` and ``α = ½ ln((1+r)/(1-r))``.

    Diagnostics: ``alpha``, ``r``, ``feature``/``threshold`` (``feature=None`` for the
    constant), ``F_plus``, ``F_minus``, ``F``, ``f_skew``, ``relative_f_skew`` (after the
    step), ``loss_before``/``loss`` (ln F), ``loss_tilde`` (ln F̃ after the step).
    """

    _algorithm = "adaboost"

    def __init__(self, *, learner: Any = None, n_rounds: int = 100, threshold: float = 0.0,
                 include_constant: bool = True, on_unbounded: str = "stop",
                 alpha_cap: float = 50.0, callbacks: Sequence[Any] = ()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=Bipartite(threshold),
                         callbacks=callbacks, on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.threshold = float(threshold)
        self.include_constant = bool(include_constant)

    def _eval_objective(self, pairs):
        """AdaBoost's ``ln F = ln Σ_i exp(-y_i s_i)`` (pooled over the set's documents)."""
        threshold = self.threshold

        def objective(scores, labels, groups=None):
            y = torch.where(labels.to(scores.device) > threshold, 1.0, -1.0)
            return torch.logsumexp(-y.to(torch.float64) * scores.to(torch.float64), 0)

        return objective

    @flush_denormals
    def fit(self, X: ArrayLike, labels: ArrayLike, groups: GroupsLike = None, *,
            eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            sample_weight: Optional[ArrayLike] = None, group_weight: Optional[ArrayLike] = None,
            init_model: Any = None, resume: Optional[PathLike] = None) -> Ensemble:
        """The ranker contract's ``fit``; ``sample_weight`` ``(n,)`` / ``group_weight``
        ``(Q,)``: document ``d`` of query ``q`` starts with the mass ``c_q w_d`` in the
        distribution over documents (weight 0: left out); ``init_model`` / ``resume`` are
        refused (its state is not a function of the scores)."""
        return self._fit(X, labels, groups, Bipartite(self.threshold), eval_set, eval_metric,
                         early_stopping_rounds, callbacks, more=(sample_weight, group_weight),
                         init_model=init_model, resume=resume)

    def _begin(self, X, labels, groups, p, init_scores):
        self._D = D = self.source_.dictionary
        if not D.binary:
            raise ValueError("AdaBoost needs binary {0,1} rankers (used as ±1 classifiers 2h-1)")
        self._pos = pos = labels > self.threshold
        self._y = torch.where(pos, 1.0, -1.0).to(torch.float64)
        self.stats_ = LabelPairStats(labels, groups, Bipartite(self.threshold))
        self._logw = self.weights_.log_doc_weights(groups)  # None: unweighted
        return self._zero_scores(X)

    def _z(self, s):
        """``-y s`` (plus ``ln(c_q w_d)`` with weights): the log masses of the documents."""
        z = -self._y * s
        return z if self._logw is None else z + self._logw

    def _step(self, s, l1):
        """``argmax |r|`` over the ±1 stumps ``2h - 1`` (``r = 2 Σ d y h - Σ d y``) and the
        constant; ``α = atanh r``."""
        y, D = self._y, self._D
        z = self._z(s)
        logF = torch.logsumexp(z, 0)
        dy = torch.exp(z - logF) * y
        c0 = float(dy.sum())
        r_all = 2 * D.linear_sums(dy) - c0
        c = select_candidate(r_all, D.valid, signed=True)
        r = float(r_all[c])
        const = self.include_constant and abs(c0) > abs(r)
        if const:
            r = c0
        alpha = self._atanh(r, "perfect weak classifier (|r| = 1)")
        if const:
            desc = {"feature": None, "threshold": None, "constant": True}
            return Step(delta=alpha, alpha=alpha, terms=[], intercept=alpha,
                        carry=(desc, None, r, logF))
        h = D.column(c)
        desc = dict(self.source_.describe(c), constant=False)
        return Step(delta=alpha * (2 * h - 1), alpha=alpha, terms=[(c, 2 * alpha)],
                    intercept=-alpha, carry=(desc, c, r, logF))

    def _round_diag(self, step, s, l1):
        desc, c, r, logF = step.carry
        diag = dict(desc, candidate=c, alpha=step.alpha, r=r, loss_before=float(logF),
                    loss=float(torch.logsumexp(self._z(s), 0)), l1=l1,
                    loss_tilde=float(self.stats_.log_loss(s)))
        diag.update(_fskew_stats(s, self._pos))
        return diag
