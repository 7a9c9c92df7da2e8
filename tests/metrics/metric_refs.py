"""Plain per-query Python references of the metrics (float64) and the random ragged data the
metrics tests share. Every reference works on one query at a time: lists of Python floats."""

import math

import numpy as np
import torch
from hypothesis import strategies as st

from torchrankboost.groups import Groups


def ref_order(s):
    """Indices by score descending, ties in input order (Python's sort is stable)."""
    return sorted(range(len(s)), key=lambda i: -s[i])


def ref_gain(l, gain):
    if gain == "exp":
        return 2.0 ** l - 1.0
    if gain == "linear":
        return float(l)
    return float(gain[int(l)])


def ref_dcg(s, y, k, gain="exp"):
    o = ref_order(s)
    kk = len(s) if k is None else min(k, len(s))
    return sum(ref_gain(y[o[r]], gain) / math.log2(r + 2) for r in range(kk))


def ref_ndcg(s, y, k, gain="exp", empty=1.0):
    g = sorted((ref_gain(l, gain) for l in y), reverse=True)
    kk = len(s) if k is None else min(k, len(s))
    idcg = sum(g[r] / math.log2(r + 2) for r in range(kk))
    return ref_dcg(s, y, k, gain) / idcg if idcg > 0 else empty


def ref_ap(s, y, k=None, threshold=0.0, denominator="min_k", empty=1.0):
    o = ref_order(s)
    R = sum(1 for l in y if l > threshold)
    if R == 0:
        return empty
    kk = len(s) if k is None else min(k, len(s))
    hits, tot = 0, 0.0
    for r in range(kk):
        if y[o[r]] > threshold:
            hits += 1
            tot += hits / (r + 1)
    D = R if (k is None or denominator == "relevant") else min(R, k)
    return tot / D


def ref_prec(s, y, k, threshold=0.0, denominator="k"):
    o = ref_order(s)
    kk = len(s) if k is None else min(k, len(s))
    hits = sum(1 for r in range(kk) if y[o[r]] > threshold)
    if k is None:
        D = len(s)
    else:
        D = k if denominator == "k" else min(k, len(s))
    return hits / max(D, 1)


def ref_rr(s, y, k=None, threshold=0.0, empty=0.0):
    o = ref_order(s)
    for r, i in enumerate(o):
        if y[i] > threshold:
            return 1.0 / (r + 1) if (k is None or r < k) else 0.0
    return empty


def ref_auc(s, y, threshold=0.0, tie=0.5):
    P = [a for a, l in zip(s, y) if l > threshold]
    N = [a for a, l in zip(s, y) if l <= threshold]
    if not P or not N:
        return float("nan")
    c = sum((1.0 if p > q else tie if p == q else 0.0) for p in P for q in N)
    return c / (len(P) * len(N))


def ref_pairs(y, kind="graded", threshold=0.0):
    if kind == "bipartite":
        y = [1.0 if l > threshold else 0.0 for l in y]
    return [(i, j) for i in range(len(y)) for j in range(len(y)) if y[i] > y[j]]


def ref_pair_counts(s, y, t, kind="graded"):
    P = ref_pairs(y, kind)
    err = sum((1.0 if s[i] < s[j] else t if s[i] == s[j] else 0.0) for i, j in P)
    return err, len(P)


def ref_above_first_negative(s, y, threshold=0.0):
    N = [a for a, l in zip(s, y) if l <= threshold]
    top = max(N) if N else -math.inf
    return sum(1 for a, l in zip(s, y) if l > threshold and a > top)


def ref_margin(s, y):
    P = ref_pairs(y)
    return min((s[i] - s[j] for i, j in P), default=math.inf)


def ref_precision_at_percent(d, p, tie=0.0):
    """d: list of s_hi - s_lo over all pairs. Sort by |d| descending; the N = ceil(p% m)
    first pairs, the pairs tied with the N-th gap entering with their average."""
    m = len(d)
    if m == 0:
        return float("nan")
    corr = [1.0 if x > 0 else tie if x == 0 else 0.0 for x in d]
    gaps = sorted(((abs(x), c) for x, c in zip(d, corr)), key=lambda t: -t[0])
    N = min(m, max(1, math.ceil(p / 100 * m - 1e-9)))
    cut = gaps[N - 1][0]
    above = [c for g, c in gaps if g > cut]
    at = [c for g, c in gaps if g == cut]
    return (sum(above) + (N - len(above)) * sum(at) / len(at)) / N


def split(flat, sizes):
    out, o = [], 0
    for n in sizes:
        out.append(flat[o:o + n])
        o += n
    return out


def random_ragged(seed, G=30, max_size=12, levels=4, score_levels=5, device="cpu"):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, max_size + 1, size=G)
    n = int(sizes.sum())
    s = rng.integers(0, score_levels, size=n).astype(np.float64) / 2.0  # many ties
    y = rng.integers(0, levels, size=n).astype(np.float64)
    g = Groups.from_sizes(torch.as_tensor(sizes), device=device)
    return (torch.tensor(s, device=device), torch.tensor(y, device=device), g,
            [list(a) for a in split(s.tolist(), sizes)], split(y.tolist(), sizes))


ragged = st.lists(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=0, max_size=9),
    min_size=1, max_size=6,
)


def from_hyp(qs, dtype=torch.float64):
    sizes = [len(q) for q in qs]
    s = [float(a) / 2 for q in qs for a, _ in q]
    y = [float(b) for q in qs for _, b in q]
    return (torch.tensor(s, dtype=dtype), torch.tensor(y, dtype=torch.float64),
            Groups.from_sizes(sizes), split(s, sizes), split(y, sizes))


def close(a, b, tol=1e-9):
    a = torch.as_tensor(a, dtype=torch.float64).cpu()
    b = torch.as_tensor(b, dtype=torch.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a, b, atol=tol, rtol=tol, equal_nan=True), (a, b)


def nanmean(v):
    v = [x for x in v if not math.isnan(x)]
    return sum(v) / len(v) if v else float("nan")
