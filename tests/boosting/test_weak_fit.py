"""The weak learner's side of a round: the query subsample (whole queries, seeded, the same
draw split over shards), the Newton targets and weights, the seeded learner fit."""

import torch

from torchrankboost import Groups
from torchrankboost.boosting import RegressionTree
from torchrankboost.boosting.weak_fit import QuerySubsample, fit_learner, learner_targets

F64 = torch.float64


def test_subsample_rows_are_whole_queries_and_seeded():
    g = Groups.from_sizes([3, 5, 2, 4, 6, 1, 3, 2])
    assert QuerySubsample(1.0, seed=0, q_total=8).rows(g, "cpu") is None
    a = QuerySubsample(0.5, seed=4, q_total=8)
    rows = a.rows(g, "cpu")
    queries = set(g.group_index[rows].tolist())
    assert len(queries) == 4
    assert sorted(rows.tolist()) == [i for i in range(g.num_docs)
                                     if int(g.group_index[i]) in queries]
    assert torch.equal(rows, QuerySubsample(0.5, seed=4, q_total=8).rows(g, "cpu"))


def test_subsample_of_shards_is_the_single_process_draw():
    sizes = [3, 5, 2, 4, 6, 1, 3, 2]
    whole = Groups.from_sizes(sizes)
    one = QuerySubsample(0.5, seed=9, q_total=8).rows(whole, "cpu")
    left, right = Groups.from_sizes(sizes[:3]), Groups.from_sizes(sizes[3:])
    r0 = QuerySubsample(0.5, seed=9, q_total=8, q_offset=0).rows(left, "cpu")
    r1 = QuerySubsample(0.5, seed=9, q_total=8, q_offset=3).rows(right, "cpu")
    assert torch.equal(one, torch.cat([r0, r1 + left.num_docs]))


def test_learner_targets():
    g = torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=F64)
    h = torch.tensor([2.0, 0.0, 1.0, 4.0], dtype=F64)
    t, w, hc, kind = learner_targets(g, h, "diag", curvature="diag", hess_floor=0.1)
    floor = 0.1 * float(h.abs().mean())
    assert torch.equal(hc, h.clamp_min(floor)) and w is hc and kind == "diag"
    assert torch.equal(t, -g / hc)
    t, w, hc, kind = learner_targets(g, h, "diag", curvature="none", hess_floor=0.1)
    assert torch.equal(t, -g) and w is None and bool((hc == 1).all()) and kind == "diag"
    t, w, _, kind = learner_targets(g, torch.zeros(4, dtype=F64), "diag", curvature="diag",
                                    hess_floor=0.1)
    assert kind == "unit" and w is None and torch.equal(t, -g)


def test_fit_learner_is_seeded_by_the_round():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(60, 4, generator=gen)
    target = X[:, 0] + 0.1 * torch.randn(60, generator=gen, dtype=torch.float32)
    tree = RegressionTree(max_leaves=4, feature_fraction=0.5)
    prepared = tree.prepare(X, context=None)
    m1, f1 = fit_learner(tree, prepared, target.to(F64), None, rows=None, seed=1, rnd=3,
                         device="cpu")
    m2, f2 = fit_learner(tree, prepared, target.to(F64), None, rows=None, seed=1, rnd=3,
                         device="cpu")
    assert torch.equal(f1, f2) and f1.shape == (60,)
    assert torch.equal(f1.to(F64), m1.predict_prepared(prepared).to(F64))
