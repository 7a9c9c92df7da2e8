"""The same trees on 2 and 3 processes as on one: the default booster (exponential pairs,
31-leaf trees or depth-5 oblivious trees, early stopping on the validation NDCG@10) on
every MQ2008 fold and on a synthetic set with NaN features and exact ties gives bit-identical
test predictions whether its queries sit in one process or are split over ``--nproc 2`` or
``3`` (each rank a shard of the training and validation queries).

This holds by construction once every sum that feeds the model is exact: the histograms
(integer fixed point, ``kernels/fixed_point.py``) and every other float reduction (the
order-free sums of :mod:`torchrankboost.exact`). Without the integer histograms the float
histogram sums of the ranks differ in their last bits and so, sometimes, do the trees: the
tests are then expected to fail (``xfail``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import identity_cases as C
from dist_helpers import explain, free_port, run_processes, worker_env

SCRIPT = str(Path(__file__).resolve().parent / "identity_cases.py")
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
    cmds = [[sys.executable, SCRIPT, "predictions", str(out)] for _ in range(W)]
    res = run_processes(cmds, [worker_env(r, W, port) for r in range(W)], timeout=600)
    assert all(r.returncode == 0 for r in res), explain(res)
    return torch.load(out, weights_only=True)


@pytest.mark.parametrize("key", KEYS, ids=[f"{n}-{lr}" for n, lr in KEYS])
def test_several_processes_give_the_one_process_predictions(one_process, several, key):
    a, b = one_process[key], several[key]
    assert torch.equal(a, b), (key, float((a - b).abs().max()))
