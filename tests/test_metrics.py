"""Tests for torchrankboost.metrics: plain per-query Python references (float64), sklearn and
LightGBM parity on real data, bad-input errors, CPU/CUDA."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import require_data
from torchrankboost import metrics as M
from torchrankboost.metrics import _common as metrics_common, _sorting as metrics_sorting
from torchrankboost.groups import Groups
from torchrankboost.pairs import Bipartite, ExplicitPairs

# ----------------------------------------------------------------------------- references
# Every reference works on one query at a time: lists of Python floats.


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


# ----------------------------------------------------------------------------- data
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


# ----------------------------------------------------------------------------- list metrics
@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged, st.sampled_from([1, 2, 3, 5, None]), st.sampled_from(["exp", "linear", (0.0, 1.0, 3.0, 7.5)]))
def test_dcg_ndcg_vs_reference(qs, k, gain):
    s, y, g, S, Y = from_hyp(qs)
    close(M.dcg_at_k(s, y, g, k=k, gain=gain, reduction="none"),
          [ref_dcg(a, b, k, gain) for a, b in zip(S, Y)])
    for empty in (1.0, 0.0):
        per = [ref_ndcg(a, b, k, gain, empty) for a, b in zip(S, Y)]
        close(M.ndcg_at_k(s, y, g, k=k, gain=gain, empty=empty, reduction="none"), per)
        close(M.ndcg_at_k(s, y, g, k=k, gain=gain, empty=empty), sum(per) / len(per))


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged, st.sampled_from([1, 3, None]), st.sampled_from(["min_k", "relevant"]), st.sampled_from([0.0, 1.0]))
def test_map_vs_reference(qs, k, denominator, threshold):
    s, y, g, S, Y = from_hyp(qs)
    for empty in (1.0, 0.0):
        per = [ref_ap(a, b, k, threshold, denominator, empty) for a, b in zip(S, Y)]
        close(M.mean_average_precision(s, y, g, k=k, threshold=threshold, denominator=denominator,
                                       empty=empty, reduction="none"), per)
        close(M.mean_average_precision(s, y, g, k=k, threshold=threshold, denominator=denominator,
                                       empty=empty), sum(per) / len(per))


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged, st.sampled_from([1, 2, 4, None]))
def test_precision_rr_vs_reference(qs, k):
    s, y, g, S, Y = from_hyp(qs)
    for den in ("k", "min_k"):
        close(M.precision_at_k(s, y, g, k=k, denominator=den, reduction="none"),
              [ref_prec(a, b, k, 0.0, den) for a, b in zip(S, Y)])
    close(M.reciprocal_rank(s, y, g, k=k, reduction="none"),
          [ref_rr(a, b, k) for a, b in zip(S, Y)])
    close(M.reciprocal_rank(s, y, g, k=k, threshold=1.0, empty=-1.0, reduction="none"),
          [ref_rr(a, b, k, 1.0, -1.0) for a, b in zip(S, Y)])


# ----------------------------------------------------------------------------- pairwise metrics
@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged, st.sampled_from([0.0, 1.0]))
def test_auc_vs_reference(qs, threshold):
    s, y, g, S, Y = from_hyp(qs)
    for ties, w in (("half", 0.5), ("error", 0.0), ("correct", 1.0)):
        per = [ref_auc(a, b, threshold, w) for a, b in zip(S, Y)]
        close(M.auc(s, y, g, threshold=threshold, ties=ties, reduction="none"), per)
        close(M.auc(s, y, g, threshold=threshold, ties=ties), nanmean(per))
        # global AUC
        close(M.auc(s, y, threshold=threshold, ties=ties),
              ref_auc(sum(S, []), sum(Y, []), threshold, w))


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged)
def test_pair_error_vs_reference(qs):
    s, y, g, S, Y = from_hyp(qs)
    for ties, t in (("error", 1.0), ("half", 0.5)):
        for kind in ("graded", "bipartite"):
            c = [ref_pair_counts(a, b, t, kind) for a, b in zip(S, Y)]
            E = sum(e for e, _ in c)
            P = sum(p for _, p in c)
            per = [e / p if p else float("nan") for e, p in c]
            close(M.pair_error(s, y, g, pairs=kind, ties=ties), E / P if P else float("nan"))
            close(M.pair_error(s, y, g, pairs=kind, ties=ties, reduction="sum"), E)
            close(M.pair_error(s, y, g, pairs=kind, ties=ties, reduction="none"), per)
            close(M.pair_error(s, y, g, pairs=kind, ties=ties, reduction="mean"), nanmean(per))


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged)
def test_merge_counting_paths_vs_reference(qs):
    """Force the many-levels paths (merge counting, running max) on small ragged data."""
    s, y, g, S, Y = from_hyp(qs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics_common, "_MANY_LEVELS", 0)
        for ties, t in (("error", 1.0), ("half", 0.5)):
            c = [ref_pair_counts(a, b, t) for a, b in zip(S, Y)]
            close(M.pair_error(s, y, g, ties=ties, reduction="none"),
                  [e / p if p else float("nan") for e, p in c])
        close(M.ranking_margin(s, y, g, reduction="none"), [ref_margin(a, b) for a, b in zip(S, Y)])


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged)
def test_pair_error_explicit_matches_label_induced(qs):
    s, y, g, S, Y = from_hyp(qs)
    offs = g.offsets.tolist()
    hi, lo = [], []
    for q, b in enumerate(Y):
        for i, j in ref_pairs(b):
            hi.append(offs[q] + i)
            lo.append(offs[q] + j)
    ep = ExplicitPairs(torch.tensor(hi, dtype=torch.long), torch.tensor(lo, dtype=torch.long))
    for ties in ("error", "half"):
        for red in ("pooled", "none", "mean", "sum"):
            close(M.pair_error(s, y, g, pairs=ep, ties=ties, reduction=red),
                  M.pair_error(s, y, g, ties=ties, reduction=red))
    close(M.ranking_margin(s, y, g, pairs=ep, reduction="none"),
          M.ranking_margin(s, y, g, reduction="none"))


def test_pair_error_weighted_explicit():
    s = torch.tensor([1.0, 2.0, 3.0, 3.0])
    y = torch.zeros(4)
    ep = ExplicitPairs([0, 2, 3], [1, 3, 1], [2.0, 1.0, 1.0])  # wrong (w2), tie (w1), right
    close(M.pair_error(s, y, pairs=ep, ties="error"), 3.0 / 4.0)
    close(M.pair_error(s, y, pairs=ep, ties="half"), 2.5 / 4.0)


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged)
def test_top_of_list_and_margin_vs_reference(qs):
    s, y, g, S, Y = from_hyp(qs)
    above = [ref_above_first_negative(a, b) for a, b in zip(S, Y)]
    npos = [sum(1 for l in b if l > 0) for b in Y]
    close(M.positives_above_first_negative(s, y, g, reduction="none"), above)
    close(M.positives_above_first_negative(s, y, g), sum(above) / len(above))
    close(M.positives_below_top_negative(s, y, g, reduction="none"),
          [p - a for p, a in zip(npos, above)])
    close(M.positives_above_first_negative(s, y, g, normalize=True, reduction="none"),
          [a / p if p else 0.0 for a, p in zip(above, npos)])
    mg = [ref_margin(a, b) for a, b in zip(S, Y)]
    close(M.ranking_margin(s, y, g, reduction="none"), mg)
    close(M.ranking_margin(s, y, g), min(mg))
    close(M.ranking_margin(s, y, g, scale=2.0, reduction="none"), [m / 2 for m in mg])
    fin = [m for m in mg if math.isfinite(m)]
    close(M.ranking_margin(s, y, g, reduction="mean"), sum(fin) / len(fin) if fin else float("nan"))


def test_positives_above_first_negative_tie_case():
    # top negative tied with a positive: the tied positive does not count
    s = torch.tensor([5.0, 4.0, 4.0, 3.0, 1.0])
    y = torch.tensor([1, 1, 0, 1, 0])
    assert float(M.positives_above_first_negative(s, y)) == 1.0
    assert float(M.positives_below_top_negative(s, y)) == 2.0


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged, st.sampled_from([5.0, 10.0, 33.3, 50.0, 100.0]))
def test_precision_at_percent_vs_reference(qs, p):
    s, y, g, S, Y = from_hyp(qs)
    for ties, t in (("error", 0.0), ("half", 0.5)):
        d = [a[i] - a[j] for a, b in zip(S, Y) for i, j in ref_pairs(b)]
        close(M.precision_at_percent(s, y, g, percent=p, ties=ties), ref_precision_at_percent(d, p, t))
    if d:  # at 100% it is the pairwise accuracy 1 - R1
        close(M.precision_at_percent(s, y, g, percent=100.0), 1 - float(M.pair_error(s, y, g)))


def test_precision_at_percent_sequence_and_chunks():
    s, y, g, S, Y = random_ragged(3, G=40, max_size=30, score_levels=1000)
    d = [a[i] - a[j] for a, b in zip(S, Y) for i, j in ref_pairs(b)]
    ps = [10, 20, 50, 90, 100]
    out = M.precision_at_percent(s, y, g, percent=ps)
    close(out, [ref_precision_at_percent(d, p) for p in ps])
    # chunked generation gives the same diffs
    a = M._label_pair_diffs(s, y, g, 10**9, chunk=17).sort().values
    b = M._label_pair_diffs(s, y, g, 10**9).sort().values
    assert torch.equal(a, b) and a.numel() == len(d)
    with pytest.raises(ValueError, match="max_pairs"):
        M.precision_at_percent(s, y, g, percent=10, max_pairs=10)


# ----------------------------------------------------------------------------- device, dtypes
def test_all_metrics_on_device(device):
    s, y, g, S, Y = random_ragged(0, G=50, device=device)
    assert s.device.type == device.type
    close(M.ndcg_at_k(s, y, g, k=5, reduction="none"), [ref_ndcg(a, b, 5) for a, b in zip(S, Y)])
    close(M.mean_average_precision(s, y, g, reduction="none"), [ref_ap(a, b) for a, b in zip(S, Y)])
    close(M.auc(s, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])
    c = [ref_pair_counts(a, b, 1.0) for a, b in zip(S, Y)]
    close(M.pair_error(s, y, g), sum(e for e, _ in c) / sum(p for _, p in c))
    close(M.ranking_margin(s, y, g, reduction="none"), [ref_margin(a, b) for a, b in zip(S, Y)])
    out = M.precision_at_k(s, y, g, k=3, reduction="none")
    assert out.device.type == device.type
    fpr, tpr, thr = M.roc_curve(s, y)
    assert fpr.device.type == device.type


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_score_dtypes(dtype):
    s, y, g, S, Y = random_ragged(1, G=20)
    sd = (s * 2).to(dtype)  # small integers: exact in every dtype
    S = split(sd.double().tolist(), g.sizes.tolist())
    close(M.ndcg_at_k(sd, y, g, reduction="none"), [ref_ndcg(a, b, 10) for a, b in zip(S, Y)])
    close(M.auc(sd, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])


def test_larger_groups_reference():
    s, y, g, S, Y = random_ragged(7, G=25, max_size=60, levels=5, score_levels=40)
    close(M.ndcg_at_k(s, y, g, k=10, reduction="none"), [ref_ndcg(a, b, 10) for a, b in zip(S, Y)])
    close(M.auc(s, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])
    c = [ref_pair_counts(a, b, 0.5) for a, b in zip(S, Y)]
    close(M.pair_error(s, y, g, ties="half"), sum(e for e, _ in c) / sum(p for _, p in c))


@pytest.mark.parametrize("padded", [True, False])
def test_sort_kernels_agree(monkeypatch, padded):
    """The padded (topk / row sort) and the global segmented-sort kernels give the same
    orders; many label values take the sorting IDCG path."""
    if not padded:
        monkeypatch.setattr(metrics_sorting, "_PAD_FACTOR", 0)
        monkeypatch.setattr(metrics_sorting, "_PAD_MIN", 0)
    for levels in (5, 100):
        s, y, g, S, Y = random_ragged(11, G=30, max_size=40, levels=levels, score_levels=15)
        for k in (1, 3, 10, None):
            close(M.ndcg_at_k(s, y, g, k=k, reduction="none"), [ref_ndcg(a, b, k) for a, b in zip(S, Y)])
            close(M.ndcg_at_k(s.float(), y, g, k=k, reduction="none"), [ref_ndcg(a, b, k) for a, b in zip(S, Y)])
            close(M.mean_average_precision(s.float(), y, g, k=k, reduction="none"),
                  [ref_ap(a, b, k) for a, b in zip(S, Y)])
            close(M.reciprocal_rank(s.float(), y, g, k=k, reduction="none"),
                  [ref_rr(a, b, k) for a, b in zip(S, Y)])
        close(M.auc(s, y, g, threshold=2.0, reduction="none"), [ref_auc(a, b, 2.0) for a, b in zip(S, Y)])


@pytest.mark.parametrize("seed", [0, 1])
def test_many_label_levels_merge_counting(monkeypatch, seed):
    """Real-valued labels (more than _MANY_LEVELS distinct values) take the merge-counting
    and running-max paths; they agree with the references and the level loop."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 70, size=12)
    n = int(sizes.sum())
    s = torch.tensor(rng.integers(0, 12, size=n) / 3.0)
    y = torch.tensor(np.round(rng.normal(size=n), 1) + 10.0)  # graded labels are >= 0
    g = Groups.from_sizes(sizes)
    S, Y = split(s.tolist(), sizes), split(y.tolist(), sizes)
    assert torch.unique(y).numel() > metrics_common._MANY_LEVELS
    for ties, t in (("error", 1.0), ("half", 0.5)):
        c = [ref_pair_counts(a, b, t) for a, b in zip(S, Y)]
        close(M.pair_error(s, y, g, ties=ties, reduction="none"),
              [e / p if p else float("nan") for e, p in c])
    close(M.ranking_margin(s, y, g, reduction="none"), [ref_margin(a, b) for a, b in zip(S, Y)])
    d = [a[i] - a[j] for a, b in zip(S, Y) for i, j in ref_pairs(b)]
    close(M.precision_at_percent(s, y, g, percent=25), ref_precision_at_percent(d, 25))
    many = M.pair_error(s, y, g, ties="half", reduction="none")
    monkeypatch.setattr(metrics_common, "_MANY_LEVELS", 10**9)
    close(M.pair_error(s, y, g, ties="half", reduction="none"), many)


def test_labels_continuous_and_int_inputs():
    s = [0.3, 0.1, 0.2, 0.2]
    y = [0.5, 1.25, 0.0, 3.0]
    assert M.pair_error(s, y).shape == ()
    close(M.pair_error(s, y), ref_pair_counts(s, y, 1.0)[0] / 6)
    close(M.ndcg_at_k(np.array(s), np.array(y), k=None, gain="linear"), ref_ndcg(s, y, None, "linear"))


# ----------------------------------------------------------------------------- sklearn parity
def test_auc_and_roc_vs_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    for n, levels in ((50, 3), (400, 30), (1000, 1000)):
        s = rng.integers(0, levels, size=n) / 7.0
        y = rng.integers(0, 2, size=n)
        close(M.auc(torch.tensor(s), torch.tensor(y)), sk.roc_auc_score(y, s))
        fpr, tpr, thr = M.roc_curve(torch.tensor(s), torch.tensor(y))
        f2, t2, th2 = sk.roc_curve(y, s, drop_intermediate=False)
        close(fpr, f2)
        close(tpr, t2)
        close(thr, th2)
    # graded labels with a threshold
    y3 = rng.integers(0, 4, size=300)
    s3 = rng.normal(size=300)
    close(M.auc(torch.tensor(s3), torch.tensor(y3), threshold=1.5), sk.roc_auc_score(y3 > 1.5, s3))


def test_roc_diagonal_segment():
    fpr, tpr, thr = M.roc_curve(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1, 0, 0]))
    close(fpr, [0.0, 0.5, 1.0])
    close(tpr, [0.0, 1.0, 1.0])


# ----------------------------------------------------------------------------- LightGBM parity
def _lgb_eval(lgb, X, y, sizes, valid=(), rounds=8, eval_at=(1, 3, 5, 10)):
    train = lgb.Dataset(X, y, group=sizes, free_raw_data=False)
    vsets = [train] + [lgb.Dataset(Xv, yv, group=gv, reference=train) for Xv, yv, gv in valid]
    names = ["train"] + [f"v{i}" for i in range(len(valid))]
    res = {}
    params = dict(objective="lambdarank", metric=["ndcg", "map"], eval_at=list(eval_at),
                  num_leaves=15, learning_rate=0.1, min_data_in_leaf=20, num_threads=1,
                  verbose=-1, seed=0, deterministic=True)
    bst = lgb.train(params, train, num_boost_round=rounds, valid_sets=vsets, valid_names=names,
                    callbacks=[lgb.record_evaluation(res)])
    return bst, res, names


def _check_lgb(bst, res, name, X, y, sizes, eval_at=(1, 3, 5, 10)):
    pred = torch.tensor(bst.predict(X), dtype=torch.float64)
    yt = torch.tensor(y, dtype=torch.float64)
    g = Groups.from_sizes(sizes)
    for k in eval_at:
        ours = float(M.ndcg_at_k(pred, yt, g, k=k))
        assert abs(ours - res[name][f"ndcg@{k}"][-1]) < 1e-6, (name, k, ours, res[name][f"ndcg@{k}"][-1])
        ours = float(M.mean_average_precision(pred, yt, g, k=k))
        assert abs(ours - res[name][f"map@{k}"][-1]) < 1e-6, (name, k, "map", ours)
    # the LightGBM scores must contain ties, otherwise the tie convention is not exercised
    return int(pred.numel() - torch.unique(pred).numel())


def test_ndcg_map_vs_lightgbm_lambdarank_example():
    lgb = pytest.importorskip("lightgbm")
    from sklearn.datasets import load_svmlight_file

    d = require_data("lightgbm_lambdarank")
    X, y = load_svmlight_file(str(d / "rank.train"))
    sizes = np.loadtxt(d / "rank.train.query", dtype=np.int64)
    Xt, yt = load_svmlight_file(str(d / "rank.test"), n_features=X.shape[1])
    st_ = np.loadtxt(d / "rank.test.query", dtype=np.int64)
    bst, res, names = _lgb_eval(lgb, X, y, sizes, valid=[(Xt, yt, st_)])
    ties = _check_lgb(bst, res, "train", X, y, sizes)
    ties += _check_lgb(bst, res, "v0", Xt, yt, st_)
    assert ties > 0


def test_ndcg_map_vs_lightgbm_mq2008():
    lgb = pytest.importorskip("lightgbm")
    from sklearn.datasets import load_svmlight_file

    d = require_data("mq2008", "Fold1")
    parts = {}
    for split_name in ("train", "vali", "test"):
        X, y, qid = load_svmlight_file(str(d / f"{split_name}.txt"), query_id=True, n_features=46)
        sizes = torch.unique_consecutive(torch.as_tensor(qid), return_counts=True)[1].numpy()
        parts[split_name] = (X, y, sizes)
    X, y, sizes = parts["train"]
    bst, res, names = _lgb_eval(lgb, X, y, sizes, valid=[parts["vali"], parts["test"]], rounds=5)
    _check_lgb(bst, res, "train", X, y, sizes)
    _check_lgb(bst, res, "v0", *parts["vali"])
    _check_lgb(bst, res, "v1", *parts["test"])
    # the tie convention matters here: breaking score ties pessimistically (relevant last)
    # instead of in document order moves NDCG@10 far beyond the tolerance
    pred = torch.tensor(bst.predict(X), dtype=torch.float64)
    yt = torch.tensor(y, dtype=torch.float64)
    pess = float(M.ndcg_at_k(pred - 1e-9 * yt, yt, Groups.from_sizes(sizes), k=10))
    assert abs(pess - res["train"]["ndcg@10"][-1]) > 1e-4


# ----------------------------------------------------------------------------- bad input
ALL = [M.auc, M.pair_error, M.dcg_at_k, M.ndcg_at_k, M.mean_average_precision, M.precision_at_k,
       M.reciprocal_rank, M.positives_above_first_negative, M.positives_below_top_negative,
       M.precision_at_percent, M.ranking_margin]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
def test_bad_inputs(fn):
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="disagree in length"):
        fn(s, y[:2])
    with pytest.raises(ValueError, match="cover"):
        fn(s, y, Groups.from_sizes([1, 1]))
    with pytest.raises(ValueError, match="scores contain NaN"):
        fn(torch.tensor([0.1, float("nan"), 0.3]), y)
    with pytest.raises(ValueError, match="labels contain NaN"):
        fn(s, torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(ValueError, match="scores contain inf"):
        fn(torch.tensor([0.1, float("inf"), 0.3]), y)
    with pytest.raises(ValueError, match="1-D"):
        fn(s[None], y[None])


@pytest.mark.parametrize("fn", [M.dcg_at_k, M.ndcg_at_k, M.mean_average_precision,
                                M.precision_at_k, M.reciprocal_rank])
def test_bad_k(fn):
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must"):
            fn(s, y, k=k)
    with pytest.raises(ValueError, match="reduction"):
        fn(s, y, reduction="sum")


def test_bad_options():
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="ties"):
        M.auc(s, y, ties="random")
    with pytest.raises(ValueError, match="ties"):
        M.pair_error(s, y, ties="correct")
    with pytest.raises(ValueError, match="gain"):
        M.ndcg_at_k(s, y, gain="cubic")
    with pytest.raises(ValueError, match="gain table"):
        M.ndcg_at_k(s, y, gain=[0.0, 1.0])  # label 2 out of range
    with pytest.raises(ValueError, match="integers"):
        M.ndcg_at_k(s, torch.tensor([0.0, 0.5, 1.0]), gain=[0.0, 1.0])
    with pytest.raises(ValueError, match="percent"):
        M.precision_at_percent(s, y, percent=0)
    with pytest.raises(ValueError, match="percent"):
        M.precision_at_percent(s, y, percent=[50, 120])
    with pytest.raises(ValueError, match="scale"):
        M.ranking_margin(s, y, scale=0.0)
    with pytest.raises(ValueError, match="denominator"):
        M.mean_average_precision(s, y, denominator="all")
    with pytest.raises(ValueError, match="pairs"):
        M.pair_error(s, y, pairs="listwise")
    with pytest.raises(ValueError, match="spans two"):
        M.pair_error(s, y, Groups.from_sizes([2, 1]), pairs=ExplicitPairs([0], [2]))
    with pytest.raises(ValueError, match="reduction"):
        M.pair_error(s, y, reduction="max")


def test_edge_cases():
    # no pairs / single class: NaN where undefined, never an exception
    s = torch.tensor([0.1, 0.2])
    y = torch.zeros(2)
    assert math.isnan(float(M.auc(s, y)))
    assert math.isnan(float(M.pair_error(s, y)))
    assert math.isnan(float(M.precision_at_percent(s, y, percent=50)))
    assert float(M.ranking_margin(s, y)) == math.inf
    assert float(M.ndcg_at_k(s, y)) == 1.0 and float(M.ndcg_at_k(s, y, empty=0.0)) == 0.0
    # empty inputs
    e = torch.zeros(0)
    assert float(M.ndcg_at_k(e, e)) == 1.0
    assert math.isnan(float(M.auc(e, e)))
    # groups with empty queries
    g = Groups.from_sizes([0, 2, 0])
    out = M.ndcg_at_k(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), g, reduction="none")
    assert out.shape == (3,)
    close(out[1], 1.0 / math.log2(3))
    # bipartite threshold object
    close(M.pair_error(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 1.0, 0.0]), pairs=Bipartite(1.5)),
          1.0)
