"""Private kernels of the exponential loss family: label-level buckets and log-space scans.

Everything here works in log space on flat ragged tensors, without materialising pairs.

**Buckets.** Label-induced pairs (graded labels, or a bipartite threshold) only depend on
which *label level* a document has inside its query. One segmented sort
(:meth:`Groups.argsort` by ``(group, level)``) numbers the non-empty ``(group, level)``
buckets ``0..B-1`` in (group, ascending level) order; the buckets of one query are
contiguous, so they form a ragged structure of their own (``Levels.bgroups``), and
"all levels strictly above / below mine in my query" is an exclusive (reverse) segmented
log-cum-sum-exp over buckets. ``B ≤ n``, and the number of buckets per query is small (the
number of distinct grades), so the scans cost O(B log K).

**The p-family kernel** (spec ``pnorm_push_and_chapter10.md`` (C14), ``rankboost_plus_and_qbrank.md``
§D.4). With document weights ``w``, label-induced pair ``(i, j)`` (``i`` above ``j``) has weight
``w_i w_j`` and term ``t_ij = w_i w_j e^{-(s_i - s_j)}``. For each "lower" document ``j``::

    L_j = Σ_{i above j} t_ij = w_j e^{s_j} · E_{>l_j},   E_{>k} = Σ_{level(i) > k} w_i e^{-s_i}
    F_p = Σ_j L_j^p       (p = 1: the RankBoost / exponential pairwise loss)

so that ``log F_p = LSE_b( log G_b + p log E_{>b} )`` with ``G_b = Σ_{j in b} (w_j e^{s_j})^p``.
Gradient, exact Hessian diagonal and the diagonal bound (derivations in the docstring of
:func:`level_terms`) need two more scans of the same kind.

**-inf safety.** Empty sets give ``log 0 = -inf`` (the top level has nothing above it, a query
with one grade has no pairs, zero weights). ``torch.logaddexp(-inf, -inf)`` and ``logsumexp``
of an all ``-inf`` segment have NaN gradients (0 · inf). All reductions here use the
"double-where" trick (spec §C.10): invalid inputs are replaced by 0 *before* the
exponential and the results masked *after*, so values are exact ``-inf`` where they should
be and every gradient is finite — through double backward too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor

from ..groups import Groups
from ..pairs import Bipartite, ExplicitPairs, Graded

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------- helpers
def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float64 stays float64, everything else computes in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def seg_lse(x: Tensor, index: Tensor, num: int) -> Tensor:
    """``out[k] = log Σ_{index == k} exp(x)``, ``-inf`` for empty/all ``-inf`` segments.

    ``index`` need not be sorted. NaN-free gradients (double-where), differentiable twice.
    """
    xd = x.detach()
    m = torch.full((num,), NEG_INF, dtype=x.dtype, device=x.device)
    m = m.scatter_reduce(0, index, xd, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    valid = xd > NEG_INF
    z = torch.where(valid, x, torch.zeros_like(x)) - m[index]
    e = torch.where(valid, torch.exp(torch.where(valid, z, torch.zeros_like(z))),
                    torch.zeros_like(z))
    s = torch.zeros(num, dtype=x.dtype, device=x.device).index_add(0, index, e)
    pos = s > 0
    return torch.where(pos, torch.log(torch.where(pos, s, torch.ones_like(s))) + m,
                       torch.full_like(s, NEG_INF))


def safe_logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """``log(e^a + e^b)`` with finite gradients when both are ``-inf`` (result ``-inf``)."""
    m = torch.maximum(a, b).detach()
    both = m == NEG_INF
    zero = torch.zeros_like(m)
    m = torch.where(both, zero, m)
    a0 = torch.where(a > NEG_INF, a, zero) - m
    b0 = torch.where(b > NEG_INF, b, zero) - m
    ea = torch.where(a > NEG_INF, torch.exp(torch.where(a > NEG_INF, a0, zero)), zero)
    eb = torch.where(b > NEG_INF, torch.exp(torch.where(b > NEG_INF, b0, zero)), zero)
    s = ea + eb
    return torch.where(both, torch.full_like(m, NEG_INF),
                       torch.log(torch.where(both, torch.ones_like(s), s)) + m)


def lse_n(*xs: Tensor) -> Tensor:
    """Elementwise log-sum-exp of several same-shape tensors (``-inf``-safe)."""
    out = xs[0]
    for x in xs[1:]:
        out = safe_logaddexp(out, x)
    return out


def mask_inf(x: Tensor, valid: Tensor) -> Tensor:
    """``x`` where ``valid``, else ``-inf`` (used to kill ``0 · (-inf)`` products)."""
    return torch.where(valid, x, torch.full_like(x, NEG_INF))


def seg_scan_lse(v: Tensor, groups: Groups, *, reverse: bool = False) -> Tensor:
    """Exclusive segmented log-cum-sum-exp: ``out[i] = log Σ_{j < i in i's segment} e^{v_j}``.

    ``reverse=True`` sums over ``j > i`` instead. Hillis–Steele scan (``ceil(log2 L)`` steps of
    :func:`safe_logaddexp`), exact in log space, ``-inf``-safe, differentiable.
    """
    if reverse:
        return seg_scan_lse(v.flip(0), groups.reversed()).flip(0)
    pos = groups.position.to(v.device)
    out = v
    step = 1
    L = groups.max_size
    while step < L:
        shifted = torch.cat([out.new_full((step,), NEG_INF), out[:-step]])
        shifted = torch.where(pos >= step, shifted, torch.full_like(shifted, NEG_INF))
        out = safe_logaddexp(out, shifted)
        step *= 2
    prev = torch.cat([out.new_full((1,), NEG_INF), out[:-1]])
    return torch.where(pos > 0, prev, torch.full_like(prev, NEG_INF))


def signed_exp_diff(lo: Tensor, hi: Tensor) -> Tensor:
    """``exp(lo) - exp(hi)`` without ``inf - inf``: ``±exp(max + log1p(-exp(-|lo - hi|)))``.

    Finite or ``±inf`` (when the difference itself overflows), never NaN. Under grad mode
    (double backward) the plain differentiable difference is used instead.
    """
    if torch.is_grad_enabled() and (lo.requires_grad or hi.requires_grad):
        return torch.exp(lo) - torch.exp(hi)
    m = torch.maximum(lo, hi)
    mn = torch.minimum(lo, hi)
    fin = m > NEG_INF
    m0 = torch.where(fin, m, torch.zeros_like(m))
    mn0 = torch.where(fin, mn, torch.zeros_like(mn))
    mag = torch.exp(m0 + torch.log1p(-torch.exp(mn0 - m0)))
    mag = torch.where(fin, mag, torch.zeros_like(mag))
    return torch.where(lo >= hi, mag, -mag)


# ---------------------------------------------------------------------------- buckets
@dataclass
class Levels:
    """Documents bucketed per ``(group, label level)``.

    Attributes:
        bucket: ``(n,)`` int64, the bucket of each document (original order).
        bgroups: :class:`Groups` over the ``B`` buckets (buckets of query ``g`` contiguous,
            in ascending level order).
        num_buckets: ``B``.
    """

    bucket: Tensor
    bgroups: Groups
    num_buckets: int


def build_levels(key: Tensor, groups: Groups) -> Levels:
    """Bucket documents by ``(group, key)`` with one segmented sort (O(n log n))."""
    n = key.shape[0]
    dev = key.device
    if n == 0:
        return Levels(torch.zeros(0, dtype=torch.long, device=dev),
                      Groups.from_sizes(torch.zeros(groups.num_groups, dtype=torch.long,
                                                    device=dev)), 0)
    perm = groups.argsort(key)
    ks = key[perm]
    gs = groups.group_index.to(dev)[perm]
    new = torch.ones(n, dtype=torch.bool, device=dev)
    new[1:] = (ks[1:] != ks[:-1]) | (gs[1:] != gs[:-1])
    bsorted = torch.cumsum(new.to(torch.long), 0) - 1
    bucket = torch.empty(n, dtype=torch.long, device=dev)
    bucket[perm] = bsorted
    B = int(bsorted[-1]) + 1
    bgroup = gs[new]
    sizes = torch.bincount(bgroup, minlength=groups.num_groups)
    return Levels(bucket, Groups.from_sizes(sizes), B)


def levels_for(pairs, labels: Tensor, groups: Groups) -> Levels:
    """The :class:`Levels` of a label-induced pair spec (``Graded`` or ``Bipartite``)."""
    if isinstance(pairs, Bipartite):
        key = (labels > pairs.threshold).to(torch.int32)
    elif isinstance(pairs, Graded):
        key = labels
        if key.dtype == torch.bool:
            key = key.to(torch.int32)
        elif key.dtype in (torch.uint8,):
            key = key.to(torch.int32)
    else:  # pragma: no cover - guarded by callers
        raise TypeError(pairs)
    return build_levels(key, groups)


# ---------------------------------------------------------------------------- kernels
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
    """Everything but the scores that an exponential-family evaluation needs."""

    pairs: object
    labels: Optional[Tensor]
    groups: Groups
    levels: Optional[Levels]
    lw: Optional[Tensor]
    p: float
    log: bool
    normalize: bool


def make_config(inp, *, p: float, log: bool, normalize: bool, dtype: torch.dtype
                ) -> FamilyConfig:
    """Build the config (buckets, log weights) from :class:`Prepared` inputs."""
    pairs = inp.pairs
    if isinstance(pairs, ExplicitPairs):
        if pairs.num_pairs and bool((pairs.hi == pairs.lo).any()):
            k = int(torch.nonzero(pairs.hi == pairs.lo)[0])
            raise ValueError(
                f"pairs: pair {k} has hi == lo == {int(pairs.hi[k])}; a document cannot be "
                "preferred to itself"
            )
        levels = None
    else:
        levels = levels_for(pairs, inp.labels, inp.groups)
    lw = None
    if inp.weights is not None:
        lw = torch.log(inp.weights.to(dtype))
    return FamilyConfig(pairs, inp.labels, inp.groups, levels, lw, float(p), bool(log),
                        bool(normalize))


def _log_normaliser(s: Tensor, cfg: FamilyConfig) -> Tensor:
    """``log F_p`` at all-zero scores: the total pair weight for p = 1 (``(G,)``)."""
    with torch.no_grad():
        z = torch.zeros_like(s.detach())
        return pair_terms(z, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p,
                          levels=cfg.levels)["logF"]


def family_value(s: Tensor, cfg: FamilyConfig, *, need_dval: bool):
    """Per-query values ``(G,)``, ``has_pairs`` ``(G,)`` and (optionally) ``dval`` ``(n,)``,
    the derivative of each document's own query value with respect to its score."""
    t = pair_terms(s, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p,
                   parts="grad" if need_dval else "value", levels=cfg.levels)
    logF = t["logF"]
    has = (logF > NEG_INF).detach()
    zero = torch.zeros_like(logF)
    if cfg.normalize:
        logN = torch.where(has, _log_normaliser(s, cfg), zero)
    else:
        logN = zero
    if cfg.log:
        value = torch.where(has, logF - logN, zero)
    else:
        value = torch.where(has, torch.exp(torch.where(has, logF - logN, zero)), zero)
    dval = None
    if need_dval:
        gi = cfg.groups.group_index.to(s.device)
        c = (torch.where(has, logF, zero) if cfg.log else logN)[gi]
        dval = signed_exp_diff(t["lo"] - c, t["hi"] - c)
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


def family_grad_hess(s: Tensor, cfg: FamilyConfig, hess: str, reduction: str):
    """Closed-form gradient and curvature of the reduced family loss (see losses' docs)."""
    t = pair_terms(s, cfg.lw, cfg.pairs, cfg.labels, cfg.groups, cfg.p,
                   parts="diag" if hess == "diag" else "grad", levels=cfg.levels)
    logF = t["logF"]
    has = logF > NEG_INF
    zero = torch.zeros_like(logF)
    gi = cfg.groups.group_index.to(s.device)
    p = cfg.p
    if cfg.log:
        c = torch.where(has, logF, zero)[gi]
    elif cfg.normalize:
        c = torch.where(has, _log_normaliser(s, cfg), zero)[gi]
    else:
        c = torch.zeros_like(s)
    lo, hi = t["lo"] - c, t["hi"] - c
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
