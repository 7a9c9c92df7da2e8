"""Dense all-pairs oracle helpers (tests only): enumerate crucial pairs with plain loops.

``dense_pairs`` lists every pair ``(hi, lo, weight)`` that a pair specification induces,
query by query, in float64. Loss oracles then sum an elementwise pair loss over them.
Slow on purpose: O(sum of squared query sizes), Python loops — never use outside tests.
"""

import torch

from torchrankboost import Groups
from torchrankboost.pairs import Bipartite, ExplicitPairs, Graded, resolve_pairs


def dense_pairs(labels, groups: Groups, pairs=None, weights=None):
    """Return ``(hi, lo, w)`` long/long/float64 tensors of all crucial pairs.

    Graded: every (i, j) in one query with labels[i] > labels[j]. Bipartite(t): i with
    label > t, j with label <= t. Explicit: as given. Document weights multiply:
    w = weights[i] * weights[j] (explicit pairs: their own weight, times document weights
    if given).
    """
    p = resolve_pairs(pairs)
    if isinstance(p, ExplicitPairs):
        hi, lo = p.hi.cpu(), p.lo.cpu()
        w = torch.ones(len(hi), dtype=torch.float64) if p.weight is None else p.weight.double().cpu()
    else:
        lab = labels.double().cpu()
        off = groups.offsets.cpu().tolist()
        H, L = [], []
        for g in range(len(off) - 1):
            for i in range(off[g], off[g + 1]):
                for j in range(off[g], off[g + 1]):
                    if isinstance(p, Graded):
                        ok = lab[i] > lab[j]
                    else:
                        ok = lab[i] > p.threshold >= lab[j]
                    if ok:
                        H.append(i)
                        L.append(j)
        hi = torch.tensor(H, dtype=torch.long)
        lo = torch.tensor(L, dtype=torch.long)
        w = torch.ones(len(H), dtype=torch.float64)
    if weights is not None:
        wd = weights.double().cpu()
        w = w * wd[hi] * wd[lo]
    return hi, lo, w


def pair_group(hi, groups: Groups):
    """Group index of each pair."""
    return groups.group_index.cpu()[hi]


def check_against_oracle(loss_fn, oracle_fn, s, *, tol=None):
    """``loss_fn(s)`` and its autograd gradient equal the oracle's (an oracle that does not
    reach some score, e.g. no active pair, has gradient 0 there). Returns the gradient."""
    kw = {} if tol is None else {"rtol": tol, "atol": tol}
    s1 = s.clone().requires_grad_()
    out = loss_fn(s1)
    s2 = s.clone().requires_grad_()
    ref = oracle_fn(s2)
    torch.testing.assert_close(out, ref, **kw)
    (gr,) = torch.autograd.grad(out.sum(), s1)
    (gref,) = torch.autograd.grad(ref.sum(), s2, allow_unused=True)
    gref = torch.zeros_like(s) if gref is None else gref
    torch.testing.assert_close(gr, gref, **kw)
    return gr
