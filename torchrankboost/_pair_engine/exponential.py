r"""The exponential pair family in log space: RankBoost's loss, the p-norm push, and friends.

With document weights ``w``, label-induced pair ``(i, j)`` (``i`` above ``j``) has weight
``w_i w_j`` and term ``t_ij = w_i w_j e^{-(s_i - s_j)}``. For each "lower" document ``j``::

    L_j = Σ_{i above j} t_ij = w_j e^{s_j} · E_{>l_j},   E_{>k} = Σ_{level(i) > k} w_i e^{-s_i}
    F_p = Σ_j L_j^p       (p = 1: RankBoost's exponential pairwise loss, Freund et al. 2003)

so that ``log F_p = LSE_b( log G_b + p log E_{>b} )`` with ``G_b = Σ_{j in b} (w_j e^{s_j})^p``
over the label-level buckets ``b`` of :mod:`.levels` (Rudin 2009's p-norm push, its graded
extension; the bipartite case is ``F_p = Σ_k (Σ_i e^{-(s_i - s_k)})^p``). Gradient, exact
Hessian diagonal and the diagonal bound (derivations in :func:`level_terms`) need two more
exclusive scans of the same kind (:func:`~.segment.seg_scan_lse`). Explicit pair lists cost
O(#pairs + n) (:func:`explicit_terms`).

The loss classes (``ExponentialPairwiseLoss``, ``PNormPushLoss``, ``SmoothMarginLoss``) are
:class:`FamilyFn` / :func:`family_grad_hess` / :func:`family_value_grad_hess` over a
:class:`FamilyConfig`, built once per bound loss (:func:`family_levels`, then
:func:`make_config` per accumulation dtype: everything that does not depend on the scores,
the ``normalize`` denominators included); the paper
algorithms use :func:`pooled_log_loss` (``ln Σ_q F_{p,q}`` and its gradient) on the same
kernels. All shapes are flat: scores ``(n,)``, per-query values ``(G,)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import ExplicitPairs
from .levels import Levels, levels_for
from .segment import (NEG_INF, mask_inf, seg_lse, seg_lse_into, seg_scan_lse, signed_exp_diff,
                      signed_exp_diff_into)

__all__ = ["level_terms", "explicit_terms", "pair_terms", "FamilyConfig", "family_levels",
           "make_config", "family_value", "FamilyFn", "family_grad_hess",
           "family_value_grad_hess", "pooled_log_loss", "log_cosh"]


def _log(x: float) -> float:
    return math.log(x) if x > 0 else NEG_INF


def level_terms(s: Tensor, lw: Optional[Tensor], lev: Levels, groups: Groups, p: float, *,
                parts: str = "value") -> Dict[str, Tensor]:
    r"""Log-space pieces of ``F_p`` per query for label-induced pairs.

    Args:
        s: ``(n,)`` scores (accumulation dtype).
        lw: ``(n,)`` log document weights or ``None``.
        lev: the buckets. groups: the queries. p: the push exponent (1 = exponential loss).
        parts: ``"value"`` (``logF`` only), ``"grad"`` (+ ``lo``, ``hi``), ``"diag"``
            (+ ``hi2``).

    Returns a dict with ``logF`` ``(G,)`` and per-document ``(n,)`` logs:

    * ``lo`` = ``log(p L_d^p)`` — the gradient share of ``d`` as the *lower* document;
    * ``hi`` = ``log(p w_d e^{-s_d} Q_<)``, ``Q_< = Σ_{j below d} L_j^{p-1} w_j e^{s_j}`` — minus
      the gradient share of ``d`` as the *upper* document;

    so ``∂F_p/∂s_d = e^{lo} - e^{hi}``. The exact Hessian diagonal is
    ``e^{lo}·p + e^{hi} + e^{hi2}`` with ``hi2 = log(p(p-1) w_d^2 e^{-2 s_d} R_<)``,
    ``R_< = Σ_{j below d} L_j^{p-2} w_j^2 e^{2 s_j}`` (from
    ``∂²(L_j^p) = p(p-1) L_j^{p-2} (∂L_j)^2 + p L_j^{p-1} ∂²L_j``).
    """
    if not _needs_graph(s, lw):
        out = _level_terms_lean(s, lw, lev, groups, p, parts)
        out.pop("spare", None)
        if parts == "diag" and out["hi2"] is None:
            out["hi2"] = torch.full_like(s, NEG_INF)
        return out
    B = lev.num_buckets
    bk = lev.bucket
    x = s if lw is None else s + lw          # log(w e^{s})
    y = -s if lw is None else lw - s         # log(w e^{-s})
    logA = seg_lse(y, bk, B)                 # upper mass per bucket
    logE = seg_scan_lse(logA, lev.bgroups, reverse=True)   # mass strictly above
    px = x if p == 1 else p * x
    logG = seg_lse(px, bk, B)                # Σ (w e^{s})^p per bucket
    hasE = logE > NEG_INF
    termb = mask_inf(logG + (logE if p == 1 else p * logE), hasE)
    bgi = lev.bgroups.group_index.to(s.device)
    out = {"logF": seg_lse(termb, bgi, groups.num_groups)}
    if parts == "value":
        return out
    logE_d = logE[bk]
    hasE_d = hasE[bk]
    lp = _log(p)
    out["lo"] = mask_inf(lp + (x + logE_d) * p, hasE_d)
    q_b = mask_inf(logG + (p - 1) * logE, hasE) if p != 1 else mask_inf(logG, hasE)
    logQ = seg_scan_lse(q_b, lev.bgroups)    # Σ over buckets below
    out["hi"] = lp + y + logQ[bk]
    if parts == "diag":
        if p == 1:
            out["hi2"] = torch.full_like(s, NEG_INF)
        else:
            r_b = mask_inf(logG + (p - 2) * logE, hasE)
            logR = seg_scan_lse(r_b, lev.bgroups)
            out["hi2"] = _log(p * (p - 1)) + 2 * y + logR[bk]
    return out


def _needs_graph(s: Tensor, lw: Optional[Tensor]) -> bool:
    """Whether the terms at ``s`` must record an autograd graph (else the lean path)."""
    return torch.is_grad_enabled() and (s.requires_grad
                                        or (lw is not None and lw.requires_grad))


def _level_terms_lean(s: Tensor, lw: Optional[Tensor], lev: Levels, groups: Groups, p: float,
                      parts: str) -> Dict[str, Optional[Tensor]]:
    """:func:`level_terms` without autograd, bit for bit, in three ``(n,)`` buffers (``y``,
    ``work``, ``buf``; four for ``p ≠ 1`` with ``"diag"``): the same kernels, written in place
    or through ``out=``, in the same order. ``hi2`` is ``None`` for ``p = 1`` (all ``-inf``);
    ``spare``: the dead ``(n,)`` scratch, free to overwrite. Skipped: ``· p`` at ``p = 1``
    (``x · 1 = x`` exactly, NaN included)."""
    B, bk = lev.num_buckets, lev.bucket
    x = s if lw is None else s + lw          # log(w e^{s})
    y = -s if lw is None else lw - s         # log(w e^{-s})
    work = torch.empty_like(s)
    logA = seg_lse_into(y, bk, B, work)
    logE = seg_scan_lse(logA, lev.bgroups, reverse=True)
    logG = seg_lse_into(x if p == 1 else p * x, bk, B, work)
    hasE = logE > NEG_INF
    termb = mask_inf(logG + (logE if p == 1 else p * logE), hasE)
    bgi = lev.bgroups.group_index.to(s.device)
    out: Dict[str, Optional[Tensor]] = {"logF": seg_lse(termb, bgi, groups.num_groups)}
    if parts == "value":
        return out
    ninf, lp = s.new_full((), NEG_INF), _log(p)
    lo = torch.index_select(logE, 0, bk, out=work)       # lp + (x + logE[bk]) * p, masked
    torch.add(x, lo, out=lo)
    if p != 1:
        lo.mul_(p)
    lo.add_(lp)
    out["lo"] = torch.where(hasE[bk], lo, ninf, out=lo)
    q_b = mask_inf(logG + (p - 1) * logE, hasE) if p != 1 else mask_inf(logG, hasE)
    logQ = seg_scan_lse(q_b, lev.bgroups)
    buf = torch.index_select(logQ, 0, bk, out=x if lw is not None else torch.empty_like(s))
    last = parts != "diag" or p == 1         # y is not needed after hi
    hi = y.add_(lp) if last else torch.add(y, lp)
    out["hi"] = torch.add(hi, buf, out=hi)   # lp + y + logQ[bk]
    if parts == "diag":
        out["hi2"] = None
    if not last:                             # _log(p (p - 1)) + 2 y + logR[bk]
        r_b = mask_inf(logG + (p - 2) * logE, hasE)
        logR = seg_scan_lse(r_b, lev.bgroups)
        torch.index_select(logR, 0, bk, out=buf)
        y.mul_(2).add_(_log(p * (p - 1)))
        out["hi2"] = torch.add(y, buf, out=y)
    out["spare"] = buf
    return out


def explicit_terms(s: Tensor, lw: Optional[Tensor], pairs: ExplicitPairs, groups: Groups,
                   p: float, *, parts: str = "value") -> Dict[str, Tensor]:
    """Same pieces as :func:`level_terms` for an explicit pair list (O(#pairs + n)).

    ``L_j = Σ_{pairs k with lo_k = j} w_k w_{hi} w_{lo} e^{-(s_hi - s_lo)}``; ``F_p = Σ_j L_j^p``.
    The exact-diagonal term ``hi2`` needs the squared *coalesced* pair terms, so duplicate
    ``(hi, lo)`` entries are merged (one ``unique``) for ``parts="diag"`` with ``p > 1``.
    """
    n = s.shape[0]
    hi, lo = pairs.hi, pairs.lo
    lt = s[lo] - s[hi]
    if pairs.weight is not None:
        lt = lt + torch.log(pairs.weight.to(s.dtype))
    if lw is not None:
        lt = lt + lw[hi] + lw[lo]
    logL = seg_lse(lt, lo, n)
    gi = groups.group_index.to(s.device)
    out = {"logF": seg_lse(logL if p == 1 else p * logL, gi, groups.num_groups)}
    if parts == "value":
        return out
    lp = _log(p)
    out["lo"] = lp + p * logL
    valid = lt > NEG_INF
    qk = lt if p == 1 else mask_inf((p - 1) * logL[lo] + lt, valid)
    out["hi"] = lp + seg_lse(qk, hi, n)
    if parts == "diag":
        if p == 1 or hi.numel() == 0:
            out["hi2"] = torch.full_like(s, NEG_INF)
        else:
            key = hi * n + lo
            uniq, inv = torch.unique(key, return_inverse=True)
            logT = seg_lse(lt, inv, uniq.numel())
            uhi, ulo = uniq // n, uniq % n
            rk = mask_inf((p - 2) * logL[ulo] + 2 * logT, logT > NEG_INF)
            out["hi2"] = _log(p * (p - 1)) + seg_lse(rk, uhi, n)
    return out


def pair_terms(s: Tensor, lw: Optional[Tensor], pairs, labels: Optional[Tensor],
               groups: Groups, p: float, *, parts: str = "value",
               levels: Optional[Levels] = None) -> Dict[str, Tensor]:
    """Dispatch to :func:`explicit_terms` or :func:`level_terms` by pair kind."""
    if isinstance(pairs, ExplicitPairs):
        return explicit_terms(s, lw, pairs, groups, p, parts=parts)
    if levels is None:
        levels = levels_for(pairs, labels, groups)
    return level_terms(s, lw, levels, groups, p, parts=parts)


# ---------------------------------------------------------------------------- the family
@dataclass
class FamilyConfig:
    """Everything but the scores that an exponential-family evaluation needs.

    ``logN`` is the per-query log normaliser ``log F_p`` at all-zero scores (``(G,)``, the
    total pair weight for ``p = 1``), computed once when ``normalize``."""

    pairs: object
    labels: Optional[Tensor]
    groups: Groups
    levels: Optional[Levels]
    lw: Optional[Tensor]
    p: float
    log: bool
    normalize: bool
    logN: Optional[Tensor] = None


def family_levels(inp) -> Optional[Levels]:
    """The score-independent pair structure of :class:`Prepared` inputs: the buckets of
    label-induced pairs, or ``None`` for an explicit list (checked: no ``hi == lo``)."""
    pairs = inp.pairs
    if isinstance(pairs, ExplicitPairs):
        if pairs.num_pairs and bool((pairs.hi == pairs.lo).any()):
            k = int(torch.nonzero(pairs.hi == pairs.lo)[0])
            raise ValueError(
                f"pairs: pair {k} has hi == lo == {int(pairs.hi[k])}; a document cannot be "
                "preferred to itself"
            )
        return None
    return levels_for(pairs, inp.labels, inp.groups)


_UNSET = object()


def make_config(inp, *, p: float, log: bool, normalize: bool, dtype: torch.dtype,
                levels=_UNSET) -> FamilyConfig:
    """Build the config (buckets, log weights, normaliser) from :class:`Prepared` inputs
    (their scores unused); ``levels`` from :func:`family_levels` when already built."""
    if levels is _UNSET:
        levels = family_levels(inp)
    lw = None
    if inp.weights is not None:
        lw = torch.log(inp.weights.to(dtype))
    cfg = FamilyConfig(inp.pairs, inp.labels, inp.groups, levels, lw, float(p), bool(log),
                       bool(normalize))
    if normalize:
        cfg.logN = _log_normaliser(cfg, dtype)
    return cfg


def _log_normaliser(cfg: FamilyConfig, dtype: torch.dtype) -> Tensor:
    """``log F_p`` at all-zero scores: the total pair weight for p = 1 (``(G,)``)."""
    with torch.no_grad():
        z = torch.zeros(cfg.groups.num_docs, dtype=dtype, device=cfg.groups.device)
        return pair_terms(z, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p,
                          levels=cfg.levels)["logF"]


def _log_shares(t: Dict[str, Tensor], has: Tensor, gi: Tensor, G: int, p: float):
    """``(lo - c_lo, hi - c_hi)`` for the gradient of ``log F_p``, each normalised by its own
    per-query log-sum: ``Σ_d e^{lo_d} = Σ_d e^{hi_d} = p F_p`` exactly, so
    ``LSE_q(·) - log p`` equals ``log F_p`` in exact arithmetic but cancels the rounding
    of the large logs at huge scores (|s| ~ 1e30: the dominant share is exactly ``log p``,
    never 0 or inf from a difference of two 1e30-sized logs)."""
    lp, zero = _log(p), torch.zeros(G, dtype=t["lo"].dtype, device=t["lo"].device)
    c_lo = torch.where(has, seg_lse(t["lo"], gi, G), zero)[gi]
    c_hi = torch.where(has, seg_lse(t["hi"], gi, G), zero)[gi]
    return (t["lo"] - c_lo) + lp, (t["hi"] - c_hi) + lp  # log p added after the cancellation


def _values(logF: Tensor, cfg: FamilyConfig):
    """Per-query values ``(G,)``, ``has_pairs`` and the log normaliser from ``log F_p``."""
    has = (logF > NEG_INF).detach()
    zero = torch.zeros_like(logF)
    logN = torch.where(has, cfg.logN, zero) if cfg.normalize else zero
    if cfg.log:
        value = torch.where(has, logF - logN, zero)
    else:
        value = torch.where(has, torch.exp(torch.where(has, logF - logN, zero)), zero)
    return value, has, logN


def family_value(s: Tensor, cfg: FamilyConfig, *, need_dval: bool):
    """Per-query values ``(G,)``, ``has_pairs`` ``(G,)`` and (optionally) ``dval`` ``(n,)``,
    the derivative of each document's own query value with respect to its score."""
    t = pair_terms(s, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p,
                   parts="grad" if need_dval else "value", levels=cfg.levels)
    logF = t["logF"]
    value, has, logN = _values(logF, cfg)
    dval = None
    if need_dval:
        gi = cfg.groups.group_index.to(s.device)
        if cfg.log:
            dval = signed_exp_diff(*_log_shares(t, has, gi, logF.shape[0], cfg.p))
        else:
            dval = signed_exp_diff(t["lo"] - logN[gi], t["hi"] - logN[gi])
    return value, has, dval


class FamilyFn(torch.autograd.Function):
    """Per-query exponential-family values with a closed-form backward.

    The backward is ``grad_out[group] · dval`` (no autograd graph through the scans: O(n)
    memory, and no ``inf · 0`` when a raw loss overflows). Under ``create_graph`` it
    recomputes ``dval`` with differentiable ops, so double backward (Hessians) works.
    """

    @staticmethod
    def forward(ctx, s, cfg):
        need = bool(ctx.needs_input_grad[0])
        value, has, dval = family_value(s, cfg, need_dval=need)
        ctx.cfg = cfg
        ctx.mark_non_differentiable(has)
        ctx.save_for_backward(s, dval if dval is not None else s.new_empty(0))
        return value, has

    @staticmethod
    def backward(ctx, gout, _ghas):
        s, dval = ctx.saved_tensors
        cfg = ctx.cfg
        if torch.is_grad_enabled():  # create_graph: differentiable recomputation
            _, _, dval = family_value(s, cfg, need_dval=True)
        gi = cfg.groups.group_index.to(s.device)
        g = gout[gi]
        grad = torch.where(g != 0, g * dval, torch.zeros_like(dval))
        return grad, None


def _grad_curv(t: Dict[str, Tensor], s: Tensor, cfg: FamilyConfig, hess: str,
               reduction: str):
    """Gradient and curvature of the reduced family loss from the pieces of
    :func:`pair_terms` (``parts="diag"`` for ``hess="diag"``, else ``"grad"``)."""
    if not _needs_graph(s, cfg.lw):
        return _grad_curv_lean(t, s, cfg, hess, reduction)
    logF = t["logF"]
    has = logF > NEG_INF
    zero = torch.zeros_like(logF)
    gi = cfg.groups.group_index.to(s.device)
    p = cfg.p
    if cfg.log:
        c = torch.where(has, logF, zero)[gi]
    elif cfg.normalize:
        c = torch.where(has, cfg.logN, zero)[gi]
    else:
        c = torch.zeros_like(s)
    lo, hi = t["lo"] - c, t["hi"] - c
    if cfg.log:  # the same values, without the cancellation at huge scores
        lo, hi = _log_shares(t, has, gi, logF.shape[0], p)
    grad = signed_exp_diff(lo, hi)
    # sums of exponentials of finite-or--inf logs: 0, finite or +inf, never NaN
    if hess == "diag":
        h = torch.exp(lo + math.log(p)) + torch.exp(hi) + torch.exp(t["hi2"] - c)
        if cfg.log:
            h = (h - grad * grad).clamp_min(0)
    else:
        h = 2 * p * (torch.exp(lo) + torch.exp(hi))
    if reduction == "mean":
        k = has.sum().clamp_min(1).to(s.dtype)
        grad, h = grad / k, h / k
    return grad, h


def _log_shares_lean(lo: Tensor, hi: Tensor, has: Tensor, gi: Tensor, G: int, p: float,
                     work: Tensor) -> None:
    """:func:`_log_shares` in place on ``lo`` and ``hi`` (``work``: an ``(n,)`` scratch)."""
    lp, zero = _log(p), torch.zeros(G, dtype=lo.dtype, device=lo.device)
    c_lo = torch.where(has, seg_lse_into(lo, gi, G, work), zero)
    c_hi = torch.where(has, seg_lse_into(hi, gi, G, work), zero)
    for v, c in ((lo, c_lo), (hi, c_hi)):
        torch.sub(v, torch.index_select(c, 0, gi, out=work), out=v)
        v.add_(lp)


def _grad_curv_lean(t: Dict[str, Optional[Tensor]], s: Tensor, cfg: FamilyConfig, hess: str,
                    reduction: str):
    """:func:`_grad_curv` without autograd, bit for bit, in place on the terms of ``t`` (made
    by :func:`pair_terms`, owned here; ``t["hi2"]`` ``None``: all ``-inf``; ``t["spare"]``:
    a scratch, if any), the shift ``c`` in the scratch. Skipped, as exact: ``- 0`` (``c = 0``
    without ``log`` / ``normalize``: ``x - 0 = x``, ``-0.0`` included); the ``log=True``
    shares ``t["lo"] - c``, ``t["hi"] - c`` (overwritten by :func:`_log_shares`); ``+ log p``
    at ``p = 1`` before ``exp`` (``exp(-0.0) = exp(0.0)``); ``+ exp(hi2 - c)`` for an all
    ``-inf`` ``hi2`` (``c`` is finite or ``+inf``, so the term is ``+0.0``, and
    ``h + 0.0 = h`` for ``h = e^a + e^b``, never ``-0.0``)."""
    logF, lo, hi, hi2, spare = t["logF"], t["lo"], t["hi"], t.get("hi2"), t.get("spare")
    if spare is None:
        spare = torch.empty_like(lo)
    has = logF > NEG_INF
    zero = torch.zeros_like(logF)
    gi = cfg.groups.group_index.to(s.device)
    p = cfg.p
    if cfg.log or cfg.normalize:  # c = where(has, logF or logN, 0)[gi]
        c = torch.index_select(torch.where(has, logF if cfg.log else cfg.logN, zero), 0, gi,
                               out=spare)
        if hi2 is not None:
            torch.sub(hi2, c, out=hi2)
        if not cfg.log:
            torch.sub(lo, c, out=lo)
            torch.sub(hi, c, out=hi)
    if cfg.log:
        _log_shares_lean(lo, hi, has, gi, logF.shape[0], p, spare)
    grad = signed_exp_diff_into(lo, hi, spare)
    if hess == "diag":
        if p != 1:
            lo.add_(math.log(p))
        h = torch.add(lo.exp_(), hi.exp_(), out=lo)
        if hi2 is not None:
            h.add_(hi2.exp_())
        if cfg.log:
            h.sub_(torch.mul(grad, grad, out=hi)).clamp_min_(0)
    else:
        h = torch.add(lo.exp_(), hi.exp_(), out=lo).mul_(2 * p)
    if reduction == "mean":
        k = has.sum().clamp_min(1).to(s.dtype)
        grad.div_(k)
        h.div_(k)
    return grad, h


def _terms(s: Tensor, cfg: FamilyConfig, parts: str) -> Dict[str, Optional[Tensor]]:
    """:func:`pair_terms` of the config; without autograd, ``hi2`` of ``p = 1`` label pairs
    is ``None`` (all ``-inf``, never built)."""
    if isinstance(cfg.pairs, ExplicitPairs) or _needs_graph(s, cfg.lw):
        return pair_terms(s, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p, parts=parts,
                          levels=cfg.levels)
    levels = cfg.levels
    if levels is None:
        levels = levels_for(cfg.pairs, cfg.labels, cfg.groups)
    return _level_terms_lean(s, cfg.lw, levels, cfg.groups, cfg.p, parts)


def family_grad_hess(s: Tensor, cfg: FamilyConfig, hess: str, reduction: str):
    """Closed-form gradient and curvature of the reduced family loss (see losses' docs)."""
    t = _terms(s, cfg, "diag" if hess == "diag" else "grad")
    return _grad_curv(t, s, cfg, hess, reduction)


def family_value_grad_hess(s: Tensor, cfg: FamilyConfig, hess: str, reduction: str):
    """Per-query values ``(G,)``, ``has_pairs``, gradient and curvature ``(n,)`` from one
    evaluation of the log-space scans (the value is their ``log F_p``): what
    :func:`family_value` and :func:`family_grad_hess` return, computed together."""
    t = _terms(s, cfg, "diag" if hess == "diag" else "grad")
    value, has, _ = _values(t["logF"], cfg)
    grad, h = _grad_curv(t, s, cfg, hess, reduction)
    return value, has, grad, h


def pooled_log_loss(s: Tensor, lev: Levels, groups: Groups, p: float, *,
                    grad: bool = False, lw: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Optional[Tensor]]:
    """``ln F_p`` pooled over all queries, ``ln Σ_q F_{p,q}`` (a 0-d tensor), and with
    ``grad=True`` its gradient ``∂ ln F_p/∂s`` ``(n,)`` in closed form (``e^{lo} − e^{hi}``
    of :func:`level_terms`, divided by ``F_p``); ``lw`` ``(n,)`` the log document weights (a
    pair weighing ``w_i w_j``; ``None``: unit weights). ``-inf`` when no query has a pair."""
    t = level_terms(s, lw, lev, groups, p, parts="grad" if grad else "value")
    logF = torch.logsumexp(t["logF"], 0)
    if not grad:
        return logF, None
    return logF, signed_exp_diff(t["lo"] - logF, t["hi"] - logF)


def log_cosh(x: Tensor) -> Tensor:
    """``ln cosh x = |x| + log1p(e^{-2|x|}) − ln 2``, exact for any magnitude: the tie cost of
    RankBoost+'s Ê2 (Connamacher, Pancha, Liu & Ray 2019)."""
    ax = x.abs()
    return ax + torch.log1p(torch.exp(-2 * ax)) - math.log(2.0)
