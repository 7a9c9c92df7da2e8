r"""RankBoost's exponential pairwise loss and AdaBoost's exponential loss with its F-skew.

References: Freund, Iyer, Schapire & Singer (2003) (the RankBoost objective); Rudin &
Schapire (2009) (AdaBoost, F₊, F₋, the F-skew and its identities, the bipartite O(m) form).

**Exponential pairwise loss** (RankBoost, :class:`ExponentialPairwiseLoss`), per query ``q``::

    F̃_q = Σ_{(i, j) crucial in q} w_ij · exp(-(s_i - s_j))

Label-induced pairs factorise over label levels (``A_k = Σ_{l_i = k} w_i e^{-s_i}``,
``B_{<k} = Σ_{l_j < k} w_j e^{s_j}``): ``F̃_q = Σ_k A_k B_{<k}`` — O(n log n) time (one segmented
sort) and O(n) memory, in log space. Explicit pairs cost O(#pairs).

**AdaBoost** (:class:`AdaBoostLoss`) over bipartite labels ``y = +1`` if ``label > threshold``
else ``-1``, per query: ``F₊ = Σ_pos w e^{-s}``, ``F₋ = Σ_neg w e^{s}``, ``F = F₊ + F₋``.
Identities (Rudin & Schapire 2009; tested): ``F̃ = F₊·F₋`` (bipartite RankBoost loss),
``F² − (F₊ − F₋)² = 4F̃``, and ``min_c F(s + c) = 2√F̃`` attained at the intercept
``b = ½ ln(F₊/F₋)`` (:func:`zero_skew_intercept`), where the F-skew vanishes; the relative
F-skew ``(F₊ − F₋)/(F₊ + F₋) = tanh(b)``.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import Bipartite, PairSpec, resolve_pairs, Graded
from .._pair_engine import exponential as K
from .._pair_engine.segment import NEG_INF, acc_dtype, seg_lse, signed_exp_diff
from .base import BindState, Prepared, RankingLoss, prepare_inputs

__all__ = ["ExponentialPairwiseLoss", "AdaBoostLoss", "f_skew", "relative_f_skew",
           "zero_skew_intercept"]


class ExpFamilyLoss(RankingLoss):
    """Shared machinery of the pairwise exponential family (p-norm push with exponent p).

    Per-query values come from the pair engine's ``FamilyFn``: log-space
    kernel forward, closed-form backward (O(n) memory, NaN-free when the raw loss
    overflows), differentiable twice for Hessians. The bound state holds the label buckets
    (checked explicit pairs) and, per accumulation dtype, the engine's ``FamilyConfig``
    (log weights, the ``normalize`` denominators); ``value_grad_hess`` takes the value and
    the gradient terms from one pass of the log-space scans.
    """

    def __init__(self, *, log: bool = False, normalize: bool = False, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        self.log = bool(log)
        self.normalize = bool(normalize)

    @property
    def _p(self) -> float:
        return 1.0

    def _bind_state(self, inp: Prepared) -> BindState:
        # a state-less copy of the inputs (no reference cycle through inp.state)
        bare = Prepared(None, inp.labels, inp.groups, inp.pairs, inp.weights)
        return BindState(inp=bare, levels=K.family_levels(inp))

    def _config(self, inp: Prepared, dtype) -> K.FamilyConfig:
        st = self._state(inp)
        return st.cached(dtype, lambda: K.make_config(
            st.inp, p=self._p, log=self.log, normalize=self.normalize, dtype=dtype,
            levels=st.levels))

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        dt = acc_dtype(inp.scores.dtype)
        cfg = self._config(inp, dt)
        value, has = K.FamilyFn.apply(inp.scores.to(dt), cfg)
        return value, has

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        dt = acc_dtype(inp.scores.dtype)
        cfg = self._config(inp, dt)
        g, h = K.family_grad_hess(inp.scores.to(dt), cfg, hess, self.reduction)
        return g.to(inp.scores.dtype), h.to(inp.scores.dtype)

    def _per_group_grad_hess(self, inp: Prepared, hess: str):
        dt = acc_dtype(inp.scores.dtype)
        cfg = self._config(inp, dt)
        value, has, g, h = K.family_value_grad_hess(inp.scores.to(dt), cfg, hess,
                                                    self.reduction)
        return value, has, g.to(inp.scores.dtype), h.to(inp.scores.dtype)

    def extra_repr(self) -> str:
        return f"log={self.log}, normalize={self.normalize}, reduction={self.reduction!r}"


class ExponentialPairwiseLoss(ExpFamilyLoss):
    r"""RankBoost's exponential pairwise loss ``Σ_{crucial (hi, lo)} w · exp(-(s_hi - s_lo))``.

    Call: ``loss(scores, labels, groups=None, *, pairs=None, weights=None, mask=None)``.

    * ``scores`` ``(n,)`` float (or ``(B, L)`` with ``mask``); ``labels`` ``(n,)`` grades;
      ``groups`` a :class:`~torchrankboost.Groups` (``None`` = one query).
    * ``pairs``: ``"graded"`` (default: every pair in a query whose labels differ),
      ``Bipartite(t)`` (label > t preferred to label ≤ t) or ``ExplicitPairs(hi, lo[, w])``
      (any preference graph, non-transitive ones included; ``hi == lo`` is rejected).
    * ``weights``: ``(n,)`` document weights; a label-induced pair weighs ``w_hi · w_lo``.

    Options (keyword-only):
        log: return the per-query *log* loss ``ln F̃_q`` (finite for any finite scores; the
            raw loss overflows to ``inf`` beyond ``exp(88)`` in float32 — never NaN, and its
            gradient is ``±inf``/finite, never NaN). Queries without pairs give 0. With
            ``reduction="sum"`` this is ``Σ_q ln F̃_q``, *not* ``ln Σ_q F̃_q`` (take
            ``torch.logsumexp`` of the ``"none"`` output for that).
        normalize: divide each query's loss by its total crucial-pair weight
            ``Σ_pairs w`` (the number of crucial pairs when unweighted): RankBoost's uniform
            initial distribution over crucial pairs. Counted in O(n), never materialised.
            With ``log=True`` this subtracts ``ln Σ w``.
        reduction: ``"sum"`` | ``"mean"`` (over queries with at least one pair) | ``"none"``
            (``(G,)``).

    Math (label-induced pairs): with ``A_k = Σ_{l_i=k} w_i e^{-s_i}``, ``E_{>k} = Σ_{k'>k} A_{k'}``
    and ``B_{<k} = Σ_{l_j<k} w_j e^{s_j}``::

        F̃ = Σ_j w_j e^{s_j} E_{>l_j}
        ∂F̃/∂s_d = w_d e^{s_d} E_{>l_d} − w_d e^{-s_d} B_{<l_d}
        ∂²F̃/∂s_d² = w_d e^{s_d} E_{>l_d} + w_d e^{-s_d} B_{<l_d}        (exact diagonal)

    computed with per-(query, level) log-sum-exps and exclusive log-cum-sum-exp scans.

    ``grad_hess(..., hess="bound")`` returns ``2 · diag(H)``, a valid diagonal upper bound:
    ``H = Σ_pairs w e^{-m} (e_i − e_j)(e_i − e_j)^T`` and
    ``(e_i − e_j)(e_i − e_j)^T ⪯ 2(e_i e_i^T + e_j e_j^T)`` (since
    ``(e_i + e_j)(e_i + e_j)^T ⪰ 0``), so ``H ⪯ 2 Σ_pairs w e^{-m}(e_i e_i^T + e_j e_j^T) = 2 diag(H)``.
    For ``log=True``, ``∇² ln F̃ = ∇²F̃/F̃ − ∇F̃∇F̃^T/F̃² ⪯ ∇²F̃/F̃ ⪯ 2 diag(∇²F̃)/F̃``, which is
    the bound returned; ``"diag"`` is the exact ``diag(∇²F̃)/F̃ − (∇F̃/F̃)²``.
    """


class AdaBoostLoss(RankingLoss):
    r"""AdaBoost's exponential loss ``F = F₊ + F₋`` per query over bipartite labels.

    ``y_d = +1`` if ``labels[d] > threshold`` else ``-1``; ``F₊ = Σ_{y=+1} w e^{-s}``,
    ``F₋ = Σ_{y=-1} w e^{s}``, ``F = Σ_d w_d e^{-y_d s_d}``. Pointwise: a query with a single
    class still contributes (unlike pairwise losses); ``"mean"`` averages over non-empty
    queries.

    Call: ``loss(scores, labels, groups=None, *, pairs=None, weights=None, mask=None)`` where
    ``pairs`` may be ``None`` (use the constructor's ``threshold``) or ``Bipartite(t)``.

    Options:
        threshold: the class threshold (default 0.0).
        log: return ``ln F`` per query (0 for an empty query).
        reduction: ``"sum"`` | ``"mean"`` | ``"none"``.

    ``grad_hess``: ``∂F/∂s_d = −y_d w_d e^{−y_d s_d}``; the Hessian is diagonal,
    ``w_d e^{−y_d s_d}``, so ``"bound"`` equals ``"diag"`` (exact). With ``log=True`` the
    gradient is ``−y π`` (``π`` the per-query softmax of ``−y s + ln w``), the exact diagonal
    ``π − π²`` and the bound ``diag(π)`` (``∇² ln F = diag(π) − (yπ)(yπ)^T ⪯ diag(π)``).

    See :func:`f_skew`, :func:`relative_f_skew`, :func:`zero_skew_intercept` and the RankBoost
    identities in this module's docstring.
    """

    negative_labels = True  # labels <= threshold are the negatives

    def __init__(self, *, threshold: float = 0.0, log: bool = False, reduction: str = "sum"):
        super().__init__(reduction=reduction)
        self.threshold = float(Bipartite(threshold).threshold)  # finite, else ValueError
        self.log = bool(log)

    def _pairs(self, pairs: PairSpec) -> PairSpec:
        """``pairs``: ``None`` (the constructor's ``threshold``) or ``Bipartite(t)``."""
        return Bipartite(_bipartite_threshold(pairs, self.threshold))

    def _bind_state(self, inp: Prepared) -> BindState:
        if isinstance(inp.pairs, Bipartite):
            thr = float(inp.pairs.threshold)
        elif isinstance(inp.pairs, Graded):
            thr = self.threshold
        else:
            raise ValueError("pairs: AdaBoostLoss needs bipartite labels, not explicit pairs")
        return BindState(weights=inp.weights, pos=inp.labels > thr,
                         gi=inp.groups.group_index.to(inp.labels.device))

    def _signs(self, st: BindState, dt) -> Tuple[Tensor, Optional[Tensor]]:
        """``y`` (±1) and the log weights (or ``None``) in the accumulation dtype."""
        def build():
            y = torch.where(st.pos, 1.0, -1.0).to(dt)
            w = st.weights
            return y, (None if w is None else torch.log(w.to(dt)))
        return st.cached(dt, build)

    def _terms(self, inp: Prepared):
        st = self._state(inp)
        dt = acc_dtype(inp.scores.dtype)
        s = inp.scores.to(dt)
        y, lw = self._signs(st, dt)
        u = -y * s
        if lw is not None:
            u = u + lw
        gi = st.gi
        logF = seg_lse(u, gi, inp.groups.num_groups)  # (G,) ln F per query
        return s, y, u, gi, logF, logF > NEG_INF

    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        """Per-query ``F`` (or ``ln F``) and the non-empty mask. ``inp.pairs``:
        ``Bipartite(t)`` uses ``t``; the default (graded) uses the constructor threshold."""
        s, y, u, gi, logF, has = self._terms(inp)
        if self.log:
            per = torch.where(has, logF, torch.zeros_like(logF))
        else:
            per = inp.groups.segment_sum(torch.exp(u))
        return per, has

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        """Closed-form gradient and curvature (``"bound"`` == ``"diag"``, the Hessian is
        diagonal; with ``log=True`` the bound is ``π``, the diagonal ``π − π²``)."""
        s, y, u, gi, logF, has = self._terms(inp)
        if self.log:
            c = torch.where(has, logF, torch.zeros_like(logF))[gi]
            pi = torch.exp(u - c)
            g = -y * pi
            h = pi - pi * pi if hess == "diag" else pi
            h = h.clamp_min(0)
        else:
            e = torch.exp(u)
            g, h = -y * e, e
        if self.reduction == "mean":
            k = has.sum().clamp_min(1).to(s.dtype)
            g, h = g / k, h / k
        return g.to(inp.scores.dtype), h.to(inp.scores.dtype)

    def round_diagnostics(self, scores: Tensor, labels: Optional[Tensor] = None,
                          groups: Optional[Groups] = None) -> Dict[str, float]:
        """Rudin & Schapire's (2009) AdaBoost quantities of the current scores, for a boosting driver's
        per-round log: ``F_plus``, ``F_minus``, ``F``, ``f_skew`` (``F₊ − F₋``),
        ``relative_f_skew`` (``(F₊ − F₋)/(F₊ + F₋)``), ``log_F_plus``, ``log_F_minus``,
        with ``F₊``, ``F₋`` summed over all queries (the constructor's ``threshold``)."""
        lp, ln = _class_logs(scores.detach(), labels, groups, self.threshold, None, False)
        return f_skew_summary(float(lp), float(ln))

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, log={self.log}, reduction={self.reduction!r}"


def f_skew_summary(log_f_plus: float, log_f_minus: float) -> Dict[str, float]:
    """``F₊``, ``F₋``, ``F``, the F-skew and the relative F-skew from ``ln F₊`` and ``ln F₋``
    (``inf`` past float64's range; the relative skew stays finite)."""
    lfp, lfm = float(log_f_plus), float(log_f_minus)
    m = max(lfp, lfm)
    if m == -math.inf:  # no documents at all
        return {"log_F_plus": lfp, "log_F_minus": lfm, "F_plus": 0.0, "F_minus": 0.0,
                "F": 0.0, "f_skew": 0.0, "relative_f_skew": 0.0}
    fp, fm = math.exp(lfp - m), math.exp(lfm - m)
    big = m >= 700
    return {"log_F_plus": lfp, "log_F_minus": lfm,
            "F_plus": math.inf if lfp >= 700 else math.exp(lfp),
            "F_minus": math.inf if lfm >= 700 else math.exp(lfm),
            "F": math.inf if big else math.exp(m) * (fp + fm),
            "f_skew": math.nan if big else math.exp(lfp) - math.exp(lfm),
            "relative_f_skew": (fp - fm) / (fp + fm)}


def _bipartite_threshold(pairs, default: float) -> float:
    if pairs is None:
        return float(default)
    p = resolve_pairs(pairs)
    if isinstance(p, Bipartite):
        return float(p.threshold)
    raise ValueError(
        f"pairs: AdaBoost-type quantities need bipartite labels; pass threshold=... or "
        f"pairs=Bipartite(threshold), got {pairs!r}"
    )


def _class_logs(scores, labels, groups, threshold, weights, per_query):
    """``(ln F₊, ln F₋)`` per query ``(G,)`` or pooled (0-dim), accumulation dtype."""
    inp = prepare_inputs(scores, labels, groups, pairs=Bipartite(float(threshold)),
                         weights=weights)
    dt = acc_dtype(inp.scores.dtype)
    s = inp.scores.to(dt)
    pos = inp.labels > float(threshold)
    lw = torch.log(inp.weights.to(dt)) if inp.weights is not None else torch.zeros_like(s)
    if per_query and groups is not None:
        idx, G = inp.groups.group_index.to(s.device), inp.groups.num_groups
    else:
        idx, G = torch.zeros_like(inp.groups.group_index.to(s.device)), 1
    ninf = torch.full_like(s, NEG_INF)
    lp = seg_lse(torch.where(pos, lw - s, ninf), idx, G)
    ln = seg_lse(torch.where(pos, ninf, lw + s), idx, G)
    if not (per_query and groups is not None):
        lp, ln = lp[0], ln[0]
    return lp, ln


def f_skew(scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
           threshold: float = 0.0, weights: Optional[Tensor] = None,
           per_query: bool = True) -> Tensor:
    """F-skew ``F₊ − F₋`` (Rudin & Schapire 2009) per query ``(G,)`` or, with ``groups=None`` or
    ``per_query=False``, pooled over all documents (0-dim).

    May overflow to ``±inf`` for huge scores (it is a difference of exponentials); use
    :func:`relative_f_skew` or :func:`zero_skew_intercept` for a scale-free value.
    Returned in the dtype of ``scores``.
    """
    lp, ln = _class_logs(scores, labels, groups, threshold, weights, per_query)
    return signed_exp_diff(lp, ln).to(scores.dtype)


def relative_f_skew(scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
                    threshold: float = 0.0, weights: Optional[Tensor] = None,
                    per_query: bool = True) -> Tensor:
    """Relative F-skew ``(F₊ − F₋)/(F₊ + F₋) = tanh(b)`` in ``[-1, 1]`` (``b`` the zero-skew
    intercept); ``±1`` when a class is absent, 0 for an empty query. Shapes as
    :func:`f_skew`."""
    b = zero_skew_intercept(scores, labels, groups, threshold=threshold, weights=weights,
                            per_query=per_query)
    return torch.tanh(b.to(acc_dtype(b.dtype))).to(scores.dtype)


def zero_skew_intercept(scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
                        threshold: float = 0.0, weights: Optional[Tensor] = None,
                        per_query: bool = True) -> Tensor:
    """The intercept ``b = ½ ln(F₊/F₋)`` (Rudin & Schapire 2009, Corollary 13): adding ``b`` to every score
    of the query zeroes its F-skew and minimises ``F(s + c)`` over ``c``, to ``2√(F₊F₋)``.

    Per query ``(G,)`` (or pooled, 0-dim, with ``groups=None`` / ``per_query=False``);
    ``+inf`` (``-inf``) when the query has no negative (positive), 0 when it has neither.
    Computed from two log-sum-exps: finite for any finite scores.
    """
    lp, ln = _class_logs(scores, labels, groups, threshold, weights, per_query)
    fp, fn = lp > NEG_INF, ln > NEG_INF
    zero = torch.zeros_like(lp)
    b = 0.5 * (torch.where(fp, lp, zero) - torch.where(fn, ln, zero))
    inf = torch.full_like(lp, float("inf"))
    b = torch.where(fp & ~fn, inf, torch.where(fn & ~fp, -inf, torch.where(fp | fn, b, zero)))
    return b.to(scores.dtype)
