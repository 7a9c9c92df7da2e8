"""Data-parallel boosting on 2 gloo processes (the fit's collectives, ``parallel/fit.py``)
equals one process on the whole data.

The workers (``dist_boost_scenarios.py`` beside this file) fit each configuration on their
shard of a query split (``RankingData.shard``) of a small LETOR-shaped set, with a sharded
evaluation set and early stopping; the tests fit the same configurations in this process on
all of it and compare round by round: the same split features and thresholds (exactly),
leaf values, weights, predictions and evaluation metrics to 1e-9, the same best round. Then
the failures (a bad shard on one rank stops every rank within seconds, naming it) and the
CLI under ``torch.distributed.run``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import dist_boost_scenarios as S
from dist_helpers import ROOT, explain, free_port, run_processes, worker_env
import identity_cases as C
from dist_helpers import explain, free_port, run_processes, worker_env

TOL = 1e-9
SCRIPT = str(Path(__file__).resolve().parent / "dist_boost_scenarios.py")


def launch(scenario, *args, timeout=120.0):
    port = free_port()
    cmds = [[sys.executable, SCRIPT, scenario, *map(str, args)] for _ in range(2)]
    return run_processes(cmds, [worker_env(r, 2, port) for r in range(2)], timeout)


@pytest.fixture(scope="module")
def two_process(tmp_path_factory):
    """Every configuration fitted on 2 processes (one launch), as rank 0 saved them."""
    out = tmp_path_factory.mktemp("dist") / "boosters.pt"
    res = launch("boosters", out)
    assert all(r.returncode == 0 for r in res), explain(res)
    return torch.load(out, weights_only=True)


def assert_same_fit(one: dict, two: dict):
    assert len(one["models"]) == len(two["models"]) > 0
    assert one["rounds_run"] == two["rounds_run"]
    assert one["best_round"] == two["best_round"]
    for (t1, m1), (t2, m2) in zip(one["models"], two["models"]):
        assert m1 == m2 or {k: v for k, v in m1.items() if k != "gain"} == \
            {k: v for k, v in m2.items() if k != "gain"}
        assert t1.keys() == t2.keys()
        for k in t1:
            a, b = t1[k], t2[k]
            assert a.shape == b.shape and a.dtype == b.dtype, k
            if a.dtype.is_floating_point and k not in ("threshold",):
                assert torch.allclose(a.double(), b.double(), rtol=TOL, atol=TOL), (k, a, b)
            else:  # split features, threshold bins and raw thresholds, children: exactly
                assert torch.equal(a, b), (k, a, b)
    assert all(abs(a - b) <= TOL * max(1.0, abs(a)) for a, b in zip(one["weights"],
                                                                     two["weights"]))
    assert abs(one["base_score"] - two["base_score"]) <= TOL
    assert torch.allclose(one["pred"], two["pred"], rtol=0, atol=TOL)
    assert one["evals"].keys() == two["evals"].keys()
    for split, metrics in one["evals"].items():
        for name, values in metrics.items():
            other = two["evals"][split][name]
            assert len(values) == len(other)
            assert all(abs(a - b) <= TOL * max(1.0, abs(a)) for a, b in zip(values, other)), \
                (split, name, values, other)


@pytest.mark.parametrize("name", S.BOOSTER_CONFIGS)
def test_booster_on_two_processes_equals_one_process(two_process, name):
    """ExponentialPairwiseLoss (compiled and torch tree kernels), QBRankLoss (bound
    curvature, 'auto' base score), a plain-function loss (autograd curvature), the query
    subsample with the line search, Newton steps, stumps, single features and oblivious
    trees."""
    assert_same_fit(S.fit_config(name, shard=False), two_process[name])


def test_early_stopping_and_subsample_agree(two_process):
    """Early stopping on the combined NDCG picks the one-process round and stops there;
    the subsample's rows per round are the one-process draw."""
    one, two = S.fit_config("exp", shard=False), two_process["exp"]
    assert two["rounds_run"] < S.N_ROUNDS and two["best_round"] < two["rounds_run"]
    assert two["stop_reason"] == one["stop_reason"] and "early stopping" in two["stop_reason"]
    sub1, sub2 = S.fit_config("exp-subsample-ls", shard=False), two_process["exp-subsample-ls"]
    assert sub1["n_rows"] == sub2["n_rows"] and len(set(sub2["n_rows"])) > 1


@pytest.mark.parametrize("variant", S.RANKBOOST_CONFIGS)
def test_rankboost_on_two_processes_equals_one_process(two_process, variant):
    """RankBoost with stumps: the same stump and step every round, the same ln F̃ and
    margin, the same predictions and evaluation."""
    one, two = S.fit_rankboost(variant, shard=False), two_process["rankboost"][variant]
    assert [e["candidate"] for e in one["extra"]] == [e["candidate"] for e in two["extra"]]
    for e1, e2 in zip(one["extra"], two["extra"]):
        for k in ("alpha", "r", "eps_plus", "eps_minus", "loss", "margin"):
            if e1[k] is not None:
                assert abs(e1[k] - e2[k]) <= TOL, (k, e1[k], e2[k])
    assert_same_fit(one, two)


def test_communication_volume_per_tree(two_process):
    """Bytes all-reduced per round: whole float64 histograms (the root's and one smaller
    child per split, except splits whose children can never be split, e.g. the one making
    the last leaf), compacted to the slots that can hold rows (3 channels each), plus the
    leaf sums and a few small vectors: the order-free sums among them travel as ``WIDTH``
    float64 digits each (``Σ|h|``, ``Σ g²``, the step's four sums, each loss evaluation of
    the surrogate step)."""
    from torchrankboost.exact import WIDTH
    from torchrankboost.kernels.binning import bin_features

    vol = two_process["volume"]
    b = bin_features(S.train_data().X)  # the edges every rank agreed on
    slots = int(b.num_bins.sum() + b.has_missing.sum())
    assert slots < vol["n_features"] * 256
    assert len(vol["rounds"]) == 3
    for nbytes, learner in vol["rounds"]:
        leaves = len(learner["leaf_value"])
        n_hist = (nbytes - 2 * leaves * 8) // (slots * 3 * 8)
        assert 1 <= n_hist <= leaves
        hist = n_hist * slots * 3 * 8 + 2 * leaves * 8
        assert hist <= nbytes <= hist + 512 + 12 * WIDTH * 8, (nbytes, hist)


@pytest.mark.parametrize("kind,message", [
    ("nan_labels", "rank 1 failed: ValueError: labels contain NaN"),
    ("features", "the number of features differs across ranks: rank 0 has 8, rank 1 has 7"),
    ("nan_gradient", "rank 1 failed: NumericalError: round 2"),
])
def test_bad_shard_stops_every_rank(kind, message):
    """A bad shard on rank 1 (NaN labels, a feature fewer, a loss turning NaN in round 2):
    every rank exits non-zero within seconds with the same message naming the rank."""
    t0 = time.monotonic()
    res = launch("bad_shard", kind, timeout=90.0)
    # well before the launch timeout: no rank waits on a peer that has given up (the margin
    # is for process start-up on a loaded 2-core machine, where it has reached 33 s)
    assert time.monotonic() - t0 < 60
    for r in res:
        assert r.returncode == 3, explain(res)
        assert message in r.err, explain(res)


def _cli(args, *, torchrun=False, cwd):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("WORLD_SIZE", None)
    pre = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", "2", "-m", "torchrankboost"] if torchrun
           else [sys.executable, "-m", "torchrankboost"])
    return subprocess.run(pre + args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("algorithm", ["boost", "rankboost"])
def test_cli_under_torchrun_trains_the_one_process_model(tmp_path, algorithm):
    """``python -m torch.distributed.run --nproc-per-node 2 -m torchrankboost train`` on
    built-in data (sharded validation set, early stopping) saves the model of one process;
    rank 0 alone prints the final table and writes the model."""
    from torchrankboost.data import load_builtin
    from torchrankboost.factory import load_model

    common = ["train", "--data", "synthetic", "-a", algorithm, "--rounds", "12",
              "--no-tensorboard", "-q", "--early-stopping", "4"]
    one = _cli(common + ["-o", "one.safetensors"], cwd=tmp_path)
    two = _cli(common + ["-o", "two.safetensors"], torchrun=True, cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stdout + two.stderr
    assert two.stdout.count("model saved to") == 1
    m1, m2 = load_model(tmp_path / "one.safetensors"), load_model(tmp_path / "two.safetensors")
    assert m1.n_rounds == m2.n_rounds and m2.info["world_size"] == 2
    _, _, test = load_builtin("synthetic")
    assert torch.allclose(m1.predict(test.X), m2.predict(test.X), rtol=0, atol=1e-9)
    table1 = one.stdout[one.stdout.index("split"):one.stdout.index("model saved")]
    table2 = two.stdout[two.stdout.index("split"):two.stdout.index("model saved")]
    assert table1 == table2


def test_cli_rejects_an_algorithm_without_a_data_parallel_fit(tmp_path):
    res = _cli(["train", "--data", "synthetic", "-a", "adaboost", "--rounds", "2", "-q",
                "--no-tensorboard"], torchrun=True, cwd=tmp_path)
    assert res.returncode != 0
    assert "'adaboost' has no data-parallel fit" in res.stderr


def test_single_process_context_changes_nothing():
    """``distributed=False`` and no process group: the fit is the usual one (the same
    ensemble bit for bit)."""
    from torchrankboost import Booster, RegressionTree
    from torchrankboost.losses import ExponentialPairwiseLoss

    d = S.train_data()
    fits = []
    for distributed in (None, False):
        b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=8), n_rounds=4,
                    verbose=False, distributed=distributed)
        fits.append(b.fit(d.X, d.labels, d.groups).predict(d.X))
    assert torch.equal(fits[0], fits[1])
    with pytest.raises(ValueError, match="distributed=True needs an initialised"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), n_rounds=1, verbose=False,
                distributed=True).fit(d.X, d.labels, d.groups)
    with pytest.raises(ValueError, match="distributed must be"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), distributed="yes")
    assert math.isfinite(float(fits[0].sum()))


# ------------------------------------------------------------------------------------------
# Outside the tree a round's sums are the same floats on 2 and 3 processes as on one: the
# loss value, the curvature floor's ``Σ|h|``, the step's sums, the line search's ``φ, φ', φ''``,
# the base score's search and the validation metrics (the cases of ``identity_cases.py``;
# every sum per query in row order, then exact over the queries and the ranks). On any tree
# kernels: no histogram is involved.


IDENTITY_SCRIPT = str(Path(__file__).resolve().parent / "identity_cases.py")


@pytest.mark.parametrize("W", [2, 3])
def test_round_sums_on_several_processes_are_the_one_process_floats(tmp_path, W):
    out = tmp_path / "sums.pt"
    port = free_port()
    cmds = [[sys.executable, IDENTITY_SCRIPT, "sums", str(out)] for _ in range(W)]
    res = run_processes(cmds, [worker_env(r, W, port) for r in range(W)], timeout=180)
    assert all(r.returncode == 0 for r in res), explain(res)
    many, one = torch.load(out, weights_only=True), C.round_sums()
    assert many[:-1] == one[:-1]  # pair_error: each rank's exact sum, then their float sum
    assert abs(many[-1] - one[-1]) <= 1e-15


# ------------------------------------------------------------------------------------------
# The same trees on 2 and 3 processes as on one: the default booster (exponential pairs,
# 31-leaf trees or depth-5 oblivious trees, early stopping on the validation NDCG@10) on
# every MQ2008 fold and on a synthetic set with NaN features and exact ties gives bit-identical
# test predictions whether its queries sit in one process or are split over ``--nproc 2`` or
# ``3`` (each rank a shard of the training and validation queries).
#
# This holds by construction once every sum that feeds the model is exact: the histograms
# (integer fixed point, ``kernels/fixed_point.py``) and every other float reduction (the
# order-free sums of :mod:`torchrankboost.exact`). Without the integer histograms the float
# histogram sums of the ranks differ in their last bits and so, sometimes, do the trees: the
# tests are then expected to fail (``xfail``).


KEYS = C.keys()

# without the integer histograms the trees may differ: expected to fail, and not run (the
# launches take minutes)
pytestmark = [pytest.mark.slow,
              pytest.mark.xfail(not C.kernels_are_exact(), run=False,
                                reason="float histograms: their sums depend on the split")]


@pytest.fixture(scope="module")
def one_process():
    return C.predictions()


@pytest.fixture(scope="module", params=[2, 3], ids=["nproc2", "nproc3"])
def several(request, tmp_path_factory):
    W = request.param
    out = tmp_path_factory.mktemp(f"identity{W}") / "pred.pt"
    port = free_port()
    cmds = [[sys.executable, IDENTITY_SCRIPT, "predictions", str(out)] for _ in range(W)]
    res = run_processes(cmds, [worker_env(r, W, port) for r in range(W)], timeout=600)
    assert all(r.returncode == 0 for r in res), explain(res)
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("key", KEYS, ids=[f"{n}-{lr}" for n, lr in KEYS])
def test_several_processes_give_the_one_process_predictions(one_process, several, key):
    a, b = one_process[key], several[key]
    assert torch.equal(a, b), (key, float((a - b).abs().max()))
