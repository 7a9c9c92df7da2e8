"""Outside the tree a round's sums are the same floats on 2 and 3 processes as on one: the
loss value, the curvature floor's ``Σ|h|``, the step's sums, the line search's ``φ, φ', φ''``,
the base score's search and the validation metrics (the cases of ``identity_cases.py``;
every sum per query in row order, then exact over the queries and the ranks). On any tree
kernels: no histogram is involved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import identity_cases as C
from dist_helpers import explain, free_port, run_processes, worker_env

SCRIPT = str(Path(__file__).resolve().parent / "identity_cases.py")


@pytest.mark.parametrize("W", [2, 3])
def test_round_sums_on_several_processes_are_the_one_process_floats(tmp_path, W):
    out = tmp_path / "sums.pt"
    port = free_port()
    cmds = [[sys.executable, SCRIPT, "sums", str(out)] for _ in range(W)]
    res = run_processes(cmds, [worker_env(r, W, port) for r in range(W)], timeout=180)
    assert all(r.returncode == 0 for r in res), explain(res)
    many, one = torch.load(out, weights_only=True), C.round_sums()
    assert many[:-1] == one[:-1]  # pair_error: each rank's exact sum, then their float sum
    assert abs(many[-1] - one[-1]) <= 1e-15
