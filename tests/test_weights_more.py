"""Weights in the algorithms that took none before: RankSVM (a pair weighs ``c_q w_i w_j`` in
the hinge sum, the scaling from the rows of positive weight) and PNormPush (the pair weights
inside the p-norm), each giving the model trained without its zero-weighted queries; and
``train --weights`` over several processes, equal to one process."""

import pytest
import torch

from torchrankboost import registry
from torchrankboost.boosting.learners import Stumps
from torchrankboost.boosting.papers import RankSVM

from test_weights import TOL, _data, _same


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def Xt():
    return torch.randn(40, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


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
    gen = torch.Generator().manual_seed(0)
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

    from test_weights import _write

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
    root = Path(__file__).resolve().parents[1]
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


def test_native_tree_on_no_rows_counts_no_rows():
    """A fit on an empty ``rows`` (a rank whose rows all weigh 0) grows the torch kernels'
    tree: the compiled kernel must not read an empty row list as "every row"."""
    from torchrankboost.boosting import RegressionTree
    from torchrankboost.boosting.kernels import native_backend

    if native_backend.NativeBackend().unavailable(device=torch.device("cpu"),
                                                  data_dtype=torch.uint8, num_rows=10):
        pytest.skip("no compiled kernels")
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(50, 3, generator=gen)
    t = torch.randn(50, generator=gen, dtype=torch.float64)
    w = torch.rand(50, generator=gen, dtype=torch.float64)
    none = torch.empty(0, dtype=torch.int64)
    fits = []
    for kernel in ("native", "torch"):
        tree = RegressionTree(max_leaves=4, min_samples_leaf=2, kernel=kernel)
        fits.append(tree.fit(tree.prepare(X), t, w, rows=none))
    a, b = fits
    assert a.split_feature.numel() == b.split_feature.numel() == 0
    assert torch.equal(a.leaf_value, b.leaf_value)


def test_train_nproc_refuses_weights_for_rankboost_before_any_rank(tmp_path, monkeypatch, capsys):
    """RankBoost lists its weighted pairs per process: ``--nproc 2`` with a ``.weight`` side
    file is one line from the parent, before any rank starts."""
    import numpy as np

    from torchrankboost import cli
    from torchrankboost.data import make_letor
    from torchrankboost.parallel import launch as L

    from test_weights import _write

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
