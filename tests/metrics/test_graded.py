"""Graded list metrics (``metrics/graded.py``: DCG, NDCG, MAP, precision at k, reciprocal
rank) against the per-query references and LightGBM on real data; ``ties="average"``, the
expectation over the orders of tied documents (McSherry & Najork, 2008), against averaging
the ``"stable"`` metric over every input order."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import require_data
from torchrankboost import metrics as M
from torchrankboost.groups import Groups
from torchrankboost.metrics import (dcg_at_k, mean_average_precision, ndcg_at_k,
                                    precision_at_k, reciprocal_rank)

from metric_refs import (close, from_hyp, ragged, random_ragged, ref_ap, ref_auc, ref_dcg,
                         ref_ndcg, ref_pair_counts, ref_prec, ref_rr)


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


def test_larger_groups_reference():
    s, y, g, S, Y = random_ragged(7, G=25, max_size=60, levels=5, score_levels=40)
    close(M.ndcg_at_k(s, y, g, k=10, reduction="none"), [ref_ndcg(a, b, 10) for a, b in zip(S, Y)])
    close(M.auc(s, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])
    c = [ref_pair_counts(a, b, 0.5) for a, b in zip(S, Y)]
    close(M.pair_error(s, y, g, ties="half"), sum(e for e, _ in c) / sum(p for _, p in c))


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


# ----------------------------------------------------------------------------- ties="average"


METRICS = {
    "dcg@3": lambda s, y, g, ties: dcg_at_k(s, y, g, k=3, ties=ties, reduction="none"),
    "ndcg": lambda s, y, g, ties: ndcg_at_k(s, y, g, k=None, ties=ties, reduction="none"),
    "ndcg@2": lambda s, y, g, ties: ndcg_at_k(s, y, g, k=2, ties=ties, reduction="none"),
    "map": lambda s, y, g, ties: mean_average_precision(s, y, g, ties=ties, reduction="none"),
    "map@3": lambda s, y, g, ties: mean_average_precision(s, y, g, k=3, ties=ties,
                                                          reduction="none"),
    "p@2": lambda s, y, g, ties: precision_at_k(s, y, g, k=2, ties=ties, reduction="none"),
    "rr": lambda s, y, g, ties: reciprocal_rank(s, y, g, ties=ties, reduction="none"),
    "rr@2": lambda s, y, g, ties: reciprocal_rank(s, y, g, k=2, ties=ties, reduction="none"),
}


def average_over_orders(fn, s, y):
    """The stable metric of one query averaged over every permutation of its documents
    (each order of the tied documents appears equally often)."""
    vals = [fn(s[list(p)], y[list(p)], None, "stable")[0]
            for p in itertools.permutations(range(len(s)))]
    return torch.stack(vals).mean()


@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("seed", range(6))
def test_average_equals_the_mean_over_tie_orders(name, seed):
    gen = torch.Generator().manual_seed(seed)
    n = 5
    s = torch.randint(0, 3, (n,), generator=gen).to(torch.float64)  # many ties
    y = torch.randint(0, 3, (n,), generator=gen).to(torch.float64)
    fn = METRICS[name]
    got = fn(s, y, None, "average")[0]
    torch.testing.assert_close(got, average_over_orders(fn, s, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_all_equal_scores_do_not_depend_on_the_input_order(name):
    g = Groups.from_sizes([6, 4, 1])
    y = torch.tensor([2.0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1], dtype=torch.float64)
    s = torch.zeros(11, dtype=torch.float64)
    fn = METRICS[name]
    base = fn(s, y, g, "average")
    for seed in range(4):
        perm = g.argsort(torch.rand(11, generator=torch.Generator().manual_seed(seed)))
        torch.testing.assert_close(fn(s, y[perm], g, "average"), base, rtol=1e-12, atol=1e-12)


def test_without_ties_average_equals_stable():
    g = Groups.from_sizes([7, 5, 3])
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(15, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (15,), generator=gen).to(torch.float64)
    for fn in METRICS.values():
        torch.testing.assert_close(fn(s, y, g, "average"), fn(s, y, g, "stable"))


def test_bad_ties_value():
    with pytest.raises(ValueError, match="ties"):
        ndcg_at_k(torch.zeros(3), torch.ones(3), ties="random")


def test_dcg_exp_gain_is_finite_up_to_label_1023():
    s = torch.tensor([1.0, 0.0])
    for top in (513.0, 800.0, 1023.0):
        v = float(dcg_at_k(s, torch.tensor([top, 0.0]), k=None))
        assert v == pytest.approx(2.0 ** top - 1.0, rel=1e-12)
    with pytest.raises(ValueError, match=r"2\^1024 - 1, which overflows float64 \(finite up "
                                         r"to label 1023\)"):
        dcg_at_k(s, torch.tensor([1024.0, 0.0]))
    with pytest.raises(ValueError, match="DCG is beyond float64: the discounted sum"):
        dcg_at_k(torch.tensor([2.0, 1.0, 0.0]), torch.tensor([1023.0] * 3))
    assert float(ndcg_at_k(s, torch.tensor([1023.0, 1023.0]))) == pytest.approx(1.0)


def test_ndcg_with_labels_above_1023_is_finite_and_scale_free():
    s = torch.tensor([.3, .2, .1, 0.])
    assert float(ndcg_at_k(s, torch.tensor([2000., 1000, 1, 0]), None, k=3)) == 1.0
    rev = torch.tensor([.1, .2, .3, 0.])
    v = float(ndcg_at_k(rev, torch.tensor([2000., 1000, 1, 0]), None, k=3))
    assert math.isfinite(v) and v == pytest.approx(0.5, abs=1e-12)
    small = ndcg_at_k(rev, torch.tensor([2., 1, 1, 0]), None, k=3)
    assert float(small) == pytest.approx(float(ndcg_at_k(
        rev, torch.tensor([2., 1, 1, 0]) + 0, None, k=3)))


def test_dcg_overflow_is_an_error_never_nan():
    with pytest.raises(ValueError, match="overflow"):
        dcg_at_k(torch.tensor([.3, .2, .1, 0.]), torch.tensor([2000., 1000, 1, 0]), None, k=3)
