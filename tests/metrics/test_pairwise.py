"""Pairwise metrics (``metrics/pairwise.py``: AUC, ROC, pair error, precision at percent)
against the per-query references and scikit-learn, their merge-counting paths for many label
levels, explicit pairs."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchrankboost import metrics as M
from torchrankboost.metrics import _common as metrics_common
from torchrankboost.metrics.pairwise import label_pair_diffs
from torchrankboost.groups import Groups
from torchrankboost.pairs import ExplicitPairs

from metric_refs import (close, from_hyp, nanmean, ragged, random_ragged, ref_auc, ref_margin,
                         ref_pair_counts, ref_pairs, ref_precision_at_percent, split)


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
    a = label_pair_diffs(s, y, g, 10**9, chunk=17).sort().values
    b = label_pair_diffs(s, y, g, 10**9).sort().values
    assert torch.equal(a, b) and a.numel() == len(d)
    with pytest.raises(ValueError, match="max_pairs"):
        M.precision_at_percent(s, y, g, percent=10, max_pairs=10)


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
