"""Document and query weights and per-document initial scores (``boosting/weights.py`` and
every algorithm that takes them): zero weights on some queries give the model trained
without them, unit weights are the unweighted fit; in RankSVM a pair weighs ``c_q w_i w_j``
in the hinge sum (the scaling from the rows of positive weight), in PNormPush the pair
weights go inside the p-norm; the adapters hand the datasets' weights to the loss, the
command line reads ``--weights`` and ``.weight`` side files, ``train --weights`` over several
processes equals one process."""

import numpy as np
import pytest
import torch

from torchrankboost import registry
from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.boosting.learners import FeatureRankers, Stumps
from torchrankboost.boosting.papers import RankSVM
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss, QBRankLoss

TOL = 1e-9


def _data(seed=0):
    X, y, g = make_letor(10, 9, 5, n_grades=3, seed=seed, noise=1.5)
    X = X.double()
    keepq = torch.tensor([i % 3 != 1 for i in range(g.num_groups)])
    keep = keepq[g.group_index]
    X[~keep] *= 7.0  # the left-out rows would move the bin edges and the scaling
    X[~keep & (torch.arange(len(y)) % 5 == 0), 2] = float("nan")
    return X, y, g, keepq, keep


def _qid(g):
    return g.group_index


def _same(m1, m2, Xt):
    d = float((m1.predict(Xt) - m2.predict(Xt)).abs().max())
    assert d <= TOL, d


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def Xt():
    return torch.randn(40, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


def _booster(learner):
    return Booster(ExponentialPairwiseLoss(), learner, n_rounds=6, verbose=False)


@pytest.mark.parametrize("learner", [RegressionTree(max_leaves=4, min_samples_leaf=3),
                                     Stumps(max_thresholds=6), FeatureRankers()])
def test_zero_weight_queries_give_the_booster_model_without_them(data, Xt, learner):
    X, y, g, keepq, keep = data
    q = _qid(g)
    w = torch.where(keep, 2.0, 0.0).double()
    full = _booster(learner).fit(X, y, q, sample_weight=w)
    half = _booster(learner).fit(X[keep], y[keep], q[keep], sample_weight=w[keep])
    _same(full, half, Xt)
    full_q = _booster(learner).fit(X, y, q, group_weight=keepq.double())
    half_q = _booster(learner).fit(X[keep], y[keep], q[keep])
    _same(full_q, half_q, Xt)


def test_unit_weights_are_the_unweighted_fit_bit_for_bit(data, Xt):
    X, y, g, _, _ = data
    tree = RegressionTree(max_leaves=4, min_samples_leaf=3)
    a = _booster(tree).fit(X, y, g, sample_weight=np.ones(len(y)),
                           group_weight=[1.0] * g.num_groups)
    b = _booster(tree).fit(X, y, g)
    assert torch.equal(a.predict(Xt), b.predict(Xt))


def test_weights_keep_the_closed_form_curvature_and_change_the_fit(data, Xt):
    X, y, g, _, _ = data
    w = torch.rand(len(y), generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    c = torch.linspace(0.5, 2.0, g.num_groups, dtype=torch.float64)
    b = _booster(RegressionTree(max_leaves=4, min_samples_leaf=3))
    m = b.fit(X, y, g, sample_weight=w, group_weight=c)
    assert {r.extra["curvature_kind"] for r in b.history_} == {"diag"}
    assert float((m.predict(Xt) - _booster(RegressionTree(max_leaves=4, min_samples_leaf=3))
                  .fit(X, y, g).predict(Xt)).abs().max()) > 1e-3
    # a query weight multiplies every term of its query: value, gradient and curvature
    loss, s = ExponentialPairwiseLoss(), torch.randn(len(y), dtype=torch.float64)
    bound = loss.bind(y.double(), g, weights=w).with_group_weights(c)
    per = ExponentialPairwiseLoss(reduction="none")(s, y.double(), g, weights=w)
    _close(bound.value(s), (c * per).sum())
    g0, h0 = loss.grad_hess(s, y.double(), g, weights=w)
    g1, h1 = bound.grad_hess(s)
    ci = c[g.group_index]
    _close(g1, g0 * ci)
    _close(h1, h0 * ci)


def _close(a, b, rtol=1e-12):
    assert float((a - b).abs().max()) <= rtol * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize("cls_kw", [("qbrank", {}), ("qbrank", {"curvature": "bound"}),
                                    ("gbt", {})])
def test_zero_weight_queries_give_the_qbrank_gbt_model_without_them(data, Xt, cls_kw):
    name, kw = cls_kw
    X, y, g, keepq, keep = data
    q = _qid(g)

    def make():
        return registry.create("algorithm", name, n_rounds=4, learning_rate=0.3,
                               learner=RegressionTree(max_leaves=4, min_samples_leaf=3), **kw)

    c = torch.where(keepq, 1.5, 0.0).double()
    _same(make().fit(X, y, q, group_weight=c),
          make().fit(X[keep], y[keep], q[keep], group_weight=c[keepq]), Xt)


@pytest.mark.parametrize("name", ["rankboost", "rankboost_plus", "adaboost",
                                  "smooth_margin"])
def test_zero_weight_queries_give_the_rankboost_family_model_without_them(data, Xt, name):
    X, y, g, keepq, keep = data
    q = _qid(g)
    w = torch.where(keep, 1.0, 0.0).double()
    w[keep] = torch.linspace(0.5, 2.0, int(keep.sum()), dtype=torch.float64)

    def make():
        return registry.create("algorithm", name, n_rounds=6,
                               learner=Stumps(max_thresholds=6))

    full = make().fit(X, y, q, sample_weight=w)
    _same(full, make().fit(X[keep], y[keep], q[keep], sample_weight=w[keep]), Xt)
    assert float((full.predict(Xt) - make().fit(X[keep], y[keep], q[keep]).predict(Xt))
                 .abs().max()) > 1e-6  # the weights matter


def test_every_algorithm_takes_the_weight_keywords():
    import inspect

    for name in registry.names("algorithm"):
        cls = registry.lookup("algorithm", name).resolve()
        params = inspect.signature(cls.fit).parameters
        assert {"sample_weight", "group_weight"} <= set(params), name


def test_bad_weights_are_clear_errors(data):
    X, y, g, _, _ = data
    b = _booster(RegressionTree(max_leaves=4))
    with pytest.raises(ValueError, match="sample_weight has 3 entries"):
        b.fit(X, y, g, sample_weight=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="group_weight must be non-negative"):
        b.fit(X, y, g, group_weight=-torch.ones(g.num_groups))
    with pytest.raises(ValueError, match="every weight is zero"):
        b.fit(X, y, g, sample_weight=torch.zeros(len(y)))
    with pytest.raises(ValueError, match="init_score has 2 entries"):
        b.fit(X, y, g, init_score=[0.0, 1.0])


def test_per_document_init_score_continues_a_fit(data, Xt):
    """A fit started from another model's scores (``init_score`` per document) adds the
    rounds that model would have run next; ``eval_init_score`` offsets the eval sets."""
    X, y, g, _, _ = data
    tree = RegressionTree(max_leaves=4, min_samples_leaf=3)

    def make(n):
        return Booster(ExponentialPairwiseLoss(), tree, n_rounds=n, verbose=False)

    six = make(6).fit(X, y, g)
    first = make(3).fit(X, y, g)
    s0 = first.predict(X)
    b = make(3)
    rest = b.fit(X, y, g, init_score=s0, eval_set=[(X, y, g)], eval_metric="loss",
                 eval_init_score=[s0])
    assert rest.base_score == 0.0  # an offset, not part of the model
    d = float((first.predict(Xt) + rest.predict(Xt) - six.predict(Xt)).abs().max())
    assert d <= TOL, d
    full = first.predict(X) + rest.predict(X)
    loss = float(ExponentialPairwiseLoss()(full.double(), y.double(), g))
    assert abs(b.evals_result_["valid_0"]["loss"][-1] - loss) <= 1e-9 * max(1.0, loss)
    c = make(2).fit(X, y, g, init_score=torch.tensor([0.5]))  # one element: a constant
    assert c.base_score == 0.5


def test_estimator_passes_weights_in_its_row_order():
    from torchrankboost.estimator import BoostedRanker

    rng = np.random.default_rng(0)
    X, y, qid = rng.normal(size=(60, 4)), rng.integers(0, 3, 60), rng.integers(0, 5, 60)
    keep = qid != 2
    a = BoostedRanker(n_rounds=4).fit(X, y, qid=qid, sample_weight=keep.astype(float))
    b = BoostedRanker(n_rounds=4).fit(X[keep], y[keep], qid=qid[keep])
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=0, atol=TOL)
    order = list(dict.fromkeys(qid.tolist()))  # queries in first-appearance order
    c = BoostedRanker(n_rounds=4).fit(X, y, qid=qid,
                                      group_weight=[float(o != 2) for o in order])
    np.testing.assert_allclose(c.predict(X), b.predict(X), rtol=0, atol=TOL)


def _letor_np():
    d = make_letor(24, 12, 5, seed=3)
    return d.X.numpy().astype(np.float64), d.labels.numpy(), d.groups.sizes.numpy()


def test_lightgbm_objective_hands_the_dataset_weights_to_the_loss():
    lgb = pytest.importorskip("lightgbm")
    from torchrankboost.integrations import lightgbm_objective

    X, y, sizes = _letor_np()
    keepq = np.arange(len(sizes)) % 2 == 0
    keep = np.repeat(keepq, sizes)
    w = keep.astype(float)
    loss, obj = ExponentialPairwiseLoss(), lightgbm_objective(ExponentialPairwiseLoss())
    ds = lgb.Dataset(X, y, group=sizes, weight=w, free_raw_data=False).construct()
    s = np.random.default_rng(0).normal(size=len(y))
    g, h = obj(s, ds)
    gr, hr = loss.grad_hess(torch.as_tensor(s), torch.as_tensor(y, dtype=torch.float64),
                            _groups(sizes), weights=torch.as_tensor(w))
    np.testing.assert_allclose(g, gr.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(h, hr.clamp_min(1e-16).numpy(), rtol=1e-12, atol=1e-15)
    assert np.all(g[~keep] == 0)
    g2, _ = obj(y, s, w, sizes)  # LGBMRanker.fit(sample_weight=...)
    np.testing.assert_array_equal(g, g2)
    # LightGBM itself still bins and counts the weight-0 rows (with few rows per leaf allowed
    # and a bin per value, they change nothing here; on other data the trees can drift apart
    # after the first by LightGBM's row counts); and not the unweighted model
    P = dict(objective=obj, num_leaves=7, min_data_in_leaf=1, min_sum_hessian_in_leaf=1e-10,
             max_bin=4095, min_data_in_bin=1, verbose=-1, seed=0, deterministic=True,
             force_row_wise=True, num_threads=1, metric="None")
    full = lgb.train(P, lgb.Dataset(X, y, group=sizes, weight=w), 3)
    half = lgb.train(P, lgb.Dataset(X[keep], y[keep], group=sizes[keepq]), 3)
    plain = lgb.train(P, lgb.Dataset(X, y, group=sizes), 3)
    np.testing.assert_allclose(full.predict(X[keep]), half.predict(X[keep]), rtol=0, atol=1e-9)
    assert np.abs(plain.predict(X[keep]) - half.predict(X[keep])).max() > 1e-6


def test_xgboost_zero_weighted_half_equals_training_on_the_other_half():
    xgb = pytest.importorskip("xgboost")
    from torchrankboost.integrations import xgboost_objective

    X, y, sizes = _letor_np()
    keepq = np.arange(len(sizes)) % 2 == 0
    keep = np.repeat(keepq, sizes)
    qid = np.repeat(np.arange(len(sizes)), sizes)
    P = {"disable_default_eval_metric": 1, "max_depth": 3, "eta": 0.1, "min_child_weight": 0,
         "nthread": 1, "tree_method": "exact", "base_score": 0.0}
    obj = xgboost_objective(ExponentialPairwiseLoss())
    preds = []
    for dm in (xgb.DMatrix(X, y, qid=qid, weight=keepq.astype(float)),  # one per query
               xgb.DMatrix(X[keep], y[keep], qid=qid[keep])):
        preds.append(xgb.train(P, dm, 8, obj=obj).predict(xgb.DMatrix(X[keep])))
    np.testing.assert_allclose(preds[0], preds[1], rtol=0, atol=1e-6)  # float32 predictions


def _groups(sizes):
    from torchrankboost.groups import Groups

    return Groups.from_sizes(torch.as_tensor(sizes))


def _write(path, X, y, qid):
    with open(path, "w") as fh:
        for xi, yi, qi in zip(X, y, qid):
            fh.write(f"{int(yi)} qid:{int(qi)} "
                     + " ".join(f"{j + 1}:{v:.5f}" for j, v in enumerate(xi)) + "\n")


def test_train_reads_weights_and_the_weight_side_file(tmp_path):
    from torchrankboost import load_model
    from torchrankboost.cli import main

    X, y, g = make_letor(8, 8, 4, n_grades=3, seed=2)
    qid = g.group_index.numpy()
    keep = qid % 2 == 0
    _write(tmp_path / "train.txt", X.numpy(), y.numpy(), qid)
    _write(tmp_path / "half.txt", X.numpy()[keep], y.numpy()[keep], qid[keep])
    np.savetxt(tmp_path / "w.txt", keep.astype(float))
    common = ["--rounds", "4", "--max-leaves", "4", "--no-tensorboard", "--quiet"]
    runs = {"opt": ["--data", str(tmp_path / "train.txt"), "--weights", str(tmp_path / "w.txt")],
            "half": ["--data", str(tmp_path / "half.txt")]}
    for name, argv in runs.items():
        assert main(["train", *argv, *common, "-o", str(tmp_path / f"{name}.safetensors")]) == 0
    (tmp_path / "train.txt.weight").write_text((tmp_path / "w.txt").read_text())
    assert main(["train", "--data", str(tmp_path / "train.txt"), *common,
                 "-o", str(tmp_path / "side.safetensors")]) == 0
    Xh = X[torch.as_tensor(keep)]
    ref = load_model(tmp_path / "half.safetensors").predict(Xh)
    for name in ("opt", "side"):
        d = float((load_model(tmp_path / f"{name}.safetensors").predict(Xh) - ref).abs().max())
        assert d <= 1e-6, (name, d)  # the files hold 5 decimals; the models agree
    (tmp_path / "bad.txt").write_text("1\n")
    assert main(["train", "--data", str(tmp_path / "train.txt"), "--weights",
                 str(tmp_path / "bad.txt"), *common]) == 2


def test_weight_side_file_is_found_beside_a_data_name_under_the_data_root(tmp_path,
                                                                          monkeypatch):
    """``--data name`` found only under ``$TORCHRANKBOOST_DATA`` takes its ``.weight`` side
    file from there too (the loader and the side file resolve the name alike)."""
    from torchrankboost import load_model
    from torchrankboost.cli import main

    X, y, g = make_letor(8, 8, 4, n_grades=3, seed=2)
    qid = g.group_index.numpy()
    keep = qid % 2 == 0
    root = tmp_path / "root"
    (root / "set").mkdir(parents=True)
    _write(root / "set" / "train.txt", X.numpy(), y.numpy(), qid)
    np.savetxt(root / "set" / "train.txt.weight", keep.astype(float))
    _write(tmp_path / "half.txt", X.numpy()[keep], y.numpy()[keep], qid[keep])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TORCHRANKBOOST_DATA", str(root))
    common = ["--rounds", "4", "--max-leaves", "4", "--no-tensorboard", "--quiet"]
    assert main(["train", "--data", "set/train.txt", *common, "-o", "side.safetensors"]) == 0
    assert main(["train", "--data", str(tmp_path / "half.txt"), *common,
                 "-o", "half.safetensors"]) == 0
    Xh = X[torch.as_tensor(keep)]
    d = load_model("side.safetensors").predict(Xh) - load_model("half.safetensors").predict(Xh)
    assert float(d.abs().max()) <= 1e-6


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_zero_weight_queries_give_the_ranksvm_model_without_them(data, Xt, loss):
    X, y, g, keepq, keep = data
    q = g.group_index
    w = torch.where(keep, 1.0, 0.0).double()
    w[keep] = torch.linspace(0.5, 2.0, int(keep.sum()), dtype=torch.float64)

    def make():
        return RankSVM(C=0.5, loss=loss, max_iter=30)

    full = make().fit(X, y, q, sample_weight=w)
    half = make().fit(X[keep], y[keep], q[keep], sample_weight=w[keep])
    _same(full, half, Xt)
    c = torch.where(keepq, 1.5, 0.0).double()
    _same(make().fit(X, y, q, group_weight=c),
          make().fit(X[keep], y[keep], q[keep], group_weight=c[keepq]), Xt)
    plain = make().fit(X[keep], y[keep], q[keep])
    assert float((full.predict(Xt) - plain.predict(Xt)).abs().max()) > 1e-6  # weights matter


def test_ranksvm_weights_weigh_each_pair_c_q_w_i_w_j(data):
    """The fit minimises ``½‖w‖² + C Σ c_q w_i w_j φ(...)``: its objective equals the
    primal with explicitly weighted pairs, and unit weights are the unweighted fit."""
    from torchrankboost.boosting.weights import fit_weights, weighted_pairs
    from torchrankboost.pairs import Graded

    X, y, g, _, _ = data
    w = torch.rand(len(y), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    c = torch.linspace(0.5, 2.0, g.num_groups, dtype=torch.float64)
    a = RankSVM(max_iter=30)
    a.fit(X, y, g, sample_weight=w, group_weight=c)
    b = RankSVM(max_iter=30, pairs=weighted_pairs(Graded(), y, g, fit_weights(w, c, g)))
    b.fit(X, y, g)
    assert abs(a.objective_ - b.objective_) <= 1e-8 * abs(b.objective_)
    u = RankSVM(max_iter=30).fit(X, y, g, sample_weight=torch.ones(len(y)))
    v = RankSVM(max_iter=30).fit(X, y, g)
    assert torch.equal(u.weight, v.weight) and u.bias == v.bias


@pytest.mark.parametrize("p", [1.0, 4.0])
def test_zero_weight_queries_give_the_pnorm_push_model_without_them(data, Xt, p):
    X, y, g, keepq, keep = data
    q = g.group_index
    w = torch.where(keep, 1.0, 0.0).double()
    w[keep] = torch.linspace(0.5, 2.0, int(keep.sum()), dtype=torch.float64)
    c = torch.where(keepq, torch.linspace(0.5, 1.5, g.num_groups, dtype=torch.float64), 0.0)

    def make():
        return registry.create("algorithm", "pnorm_push", p=p, n_rounds=6, pairs="graded",
                               learner=Stumps(max_thresholds=6))

    full = make().fit(X, y, q, sample_weight=w, group_weight=c)
    _same(full, make().fit(X[keep], y[keep], q[keep], sample_weight=w[keep],
                           group_weight=c[keepq]), Xt)
    assert float((full.predict(Xt) - make().fit(X[keep], y[keep], q[keep]).predict(Xt))
                 .abs().max()) > 1e-6  # the weights matter


@pytest.mark.parametrize("p", [1.0, 3.0])
def test_pnorm_push_weighted_objective_is_the_bound_pnorm_loss(data, p):
    """PNormPush's weighted ``ln F_p`` is ``ln Σ_q c_q F_{p,q}`` with ``PNormPushLoss``'s
    document weights (a pair ``w_i w_k`` inside the p-norm): the Booster's weighted loss."""
    from torchrankboost.losses import PNormPushLoss

    X, y, g, _, _ = data
    w = torch.rand(len(y), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    c = torch.linspace(0.5, 2.0, g.num_groups, dtype=torch.float64)
    m = registry.create("algorithm", "pnorm_push", p=p, n_rounds=2, pairs="graded",
                        learner=Stumps(max_thresholds=4))
    m.fit(X, y, g, sample_weight=w, group_weight=c)
    s = torch.randn(len(y), generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    per_q = PNormPushLoss(p, log=True, reduction="none")(s, y.double(), g, weights=w)
    has = per_q != 0  # queries without pairs give 0
    ref = torch.logsumexp((per_q + c.log())[has], 0)
    got = m.objective_.log_loss(s)
    assert abs(float(got - ref)) <= 1e-12 * max(1.0, abs(float(ref)))
    _, grad = m.objective_.grad(s)
    F = PNormPushLoss(p, reduction="none").bind(y.double(), g, weights=w).with_group_weights(c)
    gr, _ = F.grad_hess(s)
    torch.testing.assert_close(-grad, gr / F(s).sum(), rtol=1e-10, atol=1e-14)


def test_pnorm_push_closed_form_step_takes_the_weights():
    """One bipartite query left with positive weight: the closed-form step (C12) with the
    weighted π and ν, as the fit on that query alone."""
    gen = torch.Generator().manual_seed(2)  # data whose first four steps are bounded
    X = torch.randn(60, 4, generator=gen, dtype=torch.float64)
    y = (torch.rand(60, generator=gen) < 0.4).double()
    q = torch.arange(60) // 20
    keep = q == 1
    w = torch.linspace(0.5, 2.0, len(y), dtype=torch.float64)

    def make():
        return registry.create("algorithm", "pnorm_push", p=2.0, n_rounds=4,
                               learner=Stumps(max_thresholds=5))

    a = make()
    full = a.fit(X, y, q, sample_weight=w, group_weight=[0.0, 2.0, 0.0])
    assert len(a.history_) == 4 and all(r.extra["closed_form"] for r in a.history_)
    half = make().fit(X[keep], y[keep], q[keep], sample_weight=w[keep])
    _same(full, half, X)
    assert float((half.predict(X) - make().fit(X[keep], y[keep], q[keep]).predict(X))
                 .abs().max()) > 1e-6


def test_train_nproc_2_with_weights_is_the_one_process_run(tmp_path):
    """``train --nproc 2`` cuts the file into byte ranges: each rank takes the weights of its
    own rows (here from the ``.weight`` side file; one rank's rows all weigh 0), and the
    model is the one-process model trained with ``--weights`` on the same file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np

    from torchrankboost import load_model
    from torchrankboost.cli import main
    from torchrankboost.data import make_letor


    X, y, g = make_letor(12, 8, 4, n_grades=3, seed=4)
    qid = g.group_index.numpy()
    _write(tmp_path / "train.txt", X.numpy(), y.numpy(), qid)
    # rank 1 reads queries 7-11 (the byte ranges of this file): all of weight 0 there
    w = np.where((qid % 3 == 1) | (qid >= 7), 0.0, 0.25 + (np.arange(len(y)) % 7) / 4.0)
    np.savetxt(tmp_path / "w.txt", w)
    common = ["--rounds", "3", "--max-leaves", "4", "--no-tensorboard", "-q"]
    assert main(["train", "--data", str(tmp_path / "train.txt"), "--weights",
                 str(tmp_path / "w.txt"), *common, "-o", str(tmp_path / "one.safetensors")]) == 0
    assert main(["train", "--data", str(tmp_path / "train.txt"), *common,
                 "-o", str(tmp_path / "plain.safetensors")]) == 0
    (tmp_path / "train.txt.weight").write_text((tmp_path / "w.txt").read_text())
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    env.pop("WORLD_SIZE", None)
    res = subprocess.run([sys.executable, "-m", "torchrankboost", "train", "--nproc", "2",
                          "--data", "train.txt", *common, "-o", "two.safetensors"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    one, two = (load_model(tmp_path / f"{k}.safetensors") for k in ("one", "two"))
    assert two.info["world_size"] == 2
    # as every --nproc run: the same model up to the all-reduce's summation order
    assert float((one.predict(X) - two.predict(X)).abs().max()) <= TOL
    plain = load_model(tmp_path / "plain.safetensors").predict(X)
    assert float((two.predict(X) - plain).abs().max()) > 1e-6  # the weights were used


def test_train_nproc_refuses_weights_for_rankboost_before_any_rank(tmp_path, monkeypatch, capsys):
    """RankBoost lists its weighted pairs per process: ``--nproc 2`` with a ``.weight`` side
    file is one line from the parent, before any rank starts."""
    import numpy as np

    from torchrankboost import cli
    from torchrankboost.data import make_letor
    from torchrankboost.parallel import launch as L


    def no_ranks(*a, **k):
        raise AssertionError("ranks were started for an input error")

    X, y, g = make_letor(4, 6, 3, seed=1)
    _write(tmp_path / "train.txt", X.numpy(), y.numpy(), g.group_index.numpy())
    np.savetxt(tmp_path / "train.txt.weight", np.ones(len(y)))
    monkeypatch.chdir(tmp_path)
    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(L, "run_ranks", no_ranks)
    rc = cli.main(["train", "--nproc", "2", "-a", "rankboost", "--data", "train.txt",
                   "--rounds", "2", "-q", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert rc == 2 and "'rankboost' takes no document weights" in err, err
