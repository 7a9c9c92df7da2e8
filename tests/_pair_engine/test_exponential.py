"""``_pair_engine/exponential.py``: the no-grad paths that reuse their temporaries (in place /
``out=``) give the same bits as the plain formulas they replace (copied below as the
reference), the segment helpers of ``segment.py`` they call among them."""

import math

import pytest
import torch

from torchrankboost import Groups
from torchrankboost._pair_engine import exponential as K
from torchrankboost._pair_engine.levels import levels_for
from torchrankboost._pair_engine.segment import NEG_INF, seg_lse, seg_scan_lse, signed_exp_diff
from torchrankboost.losses.base import prepare_inputs
from torchrankboost.pairs import ExplicitPairs


# ------------------------------------------------------------- reference (the plain formulas)
def ref_seg_lse(x, index, num):
    m = torch.full((num,), NEG_INF, dtype=x.dtype)
    m = m.scatter_reduce(0, index, x, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.zeros((num,), dtype=x.dtype).index_add(0, index, torch.exp(x - m[index]))
    return torch.log(s) + m


def ref_mask_inf(x, valid):
    return torch.where(valid, x, torch.full_like(x, NEG_INF))


def ref_signed_exp_diff(lo, hi):
    m = torch.maximum(lo, hi)
    mn = torch.minimum(lo, hi)
    fin = m > NEG_INF
    m0 = torch.where(fin, m, torch.zeros_like(m))
    mn0 = torch.where(fin, mn, torch.zeros_like(mn))
    mag = torch.exp(m0 + torch.log1p(-torch.exp(mn0 - m0)))
    mag = torch.where(fin, mag, torch.zeros_like(mag))
    return torch.where(lo >= hi, mag, -mag)


def ref_level_terms(s, lw, lev, groups, p, parts):
    B, bk, _log = lev.num_buckets, lev.bucket, K._log
    x = s if lw is None else s + lw
    y = -s if lw is None else lw - s
    logA = ref_seg_lse(y, bk, B)
    logE = seg_scan_lse(logA, lev.bgroups, reverse=True)
    px = x if p == 1 else p * x
    logG = ref_seg_lse(px, bk, B)
    hasE = logE > NEG_INF
    termb = ref_mask_inf(logG + (logE if p == 1 else p * logE), hasE)
    out = {"logF": ref_seg_lse(termb, lev.bgroups.group_index, groups.num_groups)}
    if parts == "value":
        return out
    logE_d, hasE_d, lp = logE[bk], hasE[bk], _log(p)
    out["lo"] = ref_mask_inf(lp + (x + logE_d) * p, hasE_d)
    q_b = (ref_mask_inf(logG + (p - 1) * logE, hasE) if p != 1
           else ref_mask_inf(logG, hasE))
    logQ = seg_scan_lse(q_b, lev.bgroups)
    out["hi"] = lp + y + logQ[bk]
    if parts == "diag":
        if p == 1:
            out["hi2"] = torch.full_like(s, NEG_INF)
        else:
            r_b = ref_mask_inf(logG + (p - 2) * logE, hasE)
            logR = seg_scan_lse(r_b, lev.bgroups)
            out["hi2"] = _log(p * (p - 1)) + 2 * y + logR[bk]
    return out


def ref_grad_curv(t, s, cfg, hess, reduction):
    logF = t["logF"]
    has = logF > NEG_INF
    zero = torch.zeros_like(logF)
    gi, p, G = cfg.groups.group_index, cfg.p, logF.shape[0]
    if cfg.log:
        c = torch.where(has, logF, zero)[gi]
    elif cfg.normalize:
        c = torch.where(has, cfg.logN, zero)[gi]
    else:
        c = torch.zeros_like(s)
    lo, hi = t["lo"] - c, t["hi"] - c
    if cfg.log:
        lp = K._log(p)
        c_lo = torch.where(has, ref_seg_lse(t["lo"], gi, G), zero)[gi]
        c_hi = torch.where(has, ref_seg_lse(t["hi"], gi, G), zero)[gi]
        lo, hi = (t["lo"] - c_lo) + lp, (t["hi"] - c_hi) + lp
    grad = ref_signed_exp_diff(lo, hi)
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


# ------------------------------------------------------------------------------ helpers
def same_bits(a, b):
    """Bit for bit (NaN where NaN: a NaN's payload is the only freedom)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    nan = torch.isnan(a)
    assert torch.equal(nan, torch.isnan(b))
    bits = torch.int64 if a.dtype == torch.float64 else torch.int32
    assert torch.equal(a[~nan].view(bits), b[~nan].view(bits))


def problem(seed, *, weighted, extreme, explicit=False):
    """Ragged queries with ties, one-document and single-label queries; scores with exact
    ties, ±0.0 and (``extreme``) ±inf and ±1e300."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 9, (40,), generator=g)
    sizes[:3] = 1
    n = int(sizes.sum())
    labels = torch.randint(0, 4, (n,), generator=g).double()
    off = int(sizes[:5].sum())
    labels[off:off + int(sizes[5])] = 2.0  # a single-label query
    groups = Groups.from_sizes(sizes)
    s = (torch.randint(-3, 4, (n,), generator=g) * 0.5).double()
    s[torch.rand(n, generator=g) < 0.2] = 0.0
    s[torch.rand(n, generator=g) < 0.1] = -0.0
    w = None
    if weighted:
        w = torch.rand(n, generator=g).double() * 2
        w[torch.rand(n, generator=g) < 0.1] = 0.0
    pairs = None
    if explicit:  # label pairs of a few queries, some twice, with pair weights
        gi = groups.group_index
        hi, lo = torch.nonzero((gi[:, None] == gi[None, :])
                               & (labels[:, None] > labels[None, :]), as_tuple=True)
        keep = torch.rand(hi.numel(), generator=g) < 0.6
        hi, lo = torch.cat([hi[keep], hi[:5]]), torch.cat([lo[keep], lo[:5]])
        pairs = ExplicitPairs(hi, lo, torch.rand(hi.numel(), generator=g).double() + 0.5)
    inp = prepare_inputs(s, labels, groups, weights=w, pairs=pairs)
    if extreme:
        s = s.clone()
        r = torch.rand(n, generator=g)
        s[r < 0.05] = float("inf")
        s[(r >= 0.05) & (r < 0.1)] = float("-inf")
        s[(r >= 0.1) & (r < 0.15)] = 1e300
        s[(r >= 0.15) & (r < 0.2)] = -1e300
    return inp, s


CASES = [(0, False, False), (0, True, True), (1, False, True), (1, True, False)]


@pytest.mark.parametrize("seed,weighted,extreme", CASES)
def test_level_terms_and_segments(seed, weighted, extreme):
    inp, s = problem(seed, weighted=weighted, extreme=extreme)
    lev = levels_for(inp.pairs, inp.labels, inp.groups)
    lw = None if inp.weights is None else torch.log(inp.weights)
    for p in (1.0, 2.0, 4.0):
        for parts in ("value", "grad", "diag"):
            new = K.level_terms(s, lw, lev, inp.groups, p, parts=parts)
            ref = ref_level_terms(s, lw, lev, inp.groups, p, parts)
            assert new.keys() == ref.keys()
            for k in ref:
                same_bits(new[k], ref[k])
    gi = inp.groups.group_index
    same_bits(seg_lse(s, gi, inp.groups.num_groups), ref_seg_lse(s, gi, inp.groups.num_groups))
    lo, hi = s.flip(0), s * 0.5 - 1.0
    same_bits(signed_exp_diff(lo, hi), ref_signed_exp_diff(lo, hi))
    same_bits(signed_exp_diff(lo, lo), ref_signed_exp_diff(lo, lo))


@pytest.mark.parametrize("seed,weighted,extreme,explicit",
                         [c + (False,) for c in CASES] + [(2, True, False, True),
                                                          (3, False, True, True)])
def test_family_value_grad_hess(seed, weighted, extreme, explicit):
    inp, s = problem(seed, weighted=weighted, extreme=extreme, explicit=explicit)
    for p in (1.0, 2.0, 4.0):
        for log in (False, True):
            for normalize in (False, True):
                cfg = K.make_config(inp, p=p, log=log, normalize=normalize,
                                    dtype=torch.float64)
                for hess in ("diag", "bound"):
                    parts = "diag" if hess == "diag" else "grad"
                    for red in ("sum", "mean"):
                        v, has, g, h = K.family_value_grad_hess(s, cfg, hess, red)
                        t = (K.explicit_terms(s, cfg.lw, cfg.pairs, cfg.groups, p,
                                              parts=parts) if explicit else
                             ref_level_terms(s, cfg.lw, cfg.levels, cfg.groups, p, parts))
                        rv, rhas, _ = K._values(t["logF"], cfg)
                        rg, rh = ref_grad_curv(t, s, cfg, hess, red)
                        same_bits(v, rv)
                        assert torch.equal(has, rhas)
                        same_bits(g, rg)
                        same_bits(h, rh)
                        g2, h2 = K.family_grad_hess(s, cfg, hess, red)
                        same_bits(g2, rg)
                        same_bits(h2, rh)


def test_inputs_untouched_and_float32():
    inp, s = problem(3, weighted=True, extreme=False)
    keep = s.clone()
    cfg = K.make_config(inp, p=1.0, log=False, normalize=False, dtype=torch.float64)
    lw = cfg.lw.clone()
    K.family_value_grad_hess(s, cfg, "diag", "sum")
    assert torch.equal(s, keep) and torch.equal(cfg.lw, lw)
    s32 = s.float()
    lo, hi = s32.flip(0), s32 - 1.0
    same_bits(signed_exp_diff(lo, hi), ref_signed_exp_diff(lo, hi))
