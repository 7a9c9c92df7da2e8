"""Debiased fits on 2 gloo processes (EM and DLA propensities and the position table are
per-position sums all-reduced) equal the one-process fit (to 1e-9: the sums' order differs).

Two process start-ups cost ~6 s of CPU: the default run checks DLA alone (its per-position
and learned link's sums are the newest); all three methods (~25 s on a loaded
machine) run when ``TORCHRANKBOOST_TEST_CLICKS_DIST=1`` is set.
"""

import os
import sys
from pathlib import Path

import pytest
import torch

import dist_clicks_scenario as S
from dist_helpers import explain, free_port, run_processes, worker_env


def _run(tmp_path, methods):
    out = tmp_path / "res.pt"
    port = free_port()
    script = str(Path(__file__).resolve().parent / "dist_clicks_scenario.py")
    cmds = [[sys.executable, script, str(out), ",".join(methods)] for _ in range(2)]
    res = run_processes(cmds, [worker_env(r, 2, port) for r in range(2)], 120.0)
    assert all(r.returncode == 0 for r in res), explain(res)
    got = torch.load(out, weights_only=True)
    X, ctr, groups, pos = S.click_data()
    for method in methods:
        m = S.fit(method, X, ctr, groups, pos, False)
        pred, state = got[method]
        assert float((pred - m.predict(X)).abs().max()) < 1e-9, method
        for key, vals in state.items():
            if key == "method":
                continue
            one = [float.fromhex(x) for x in m.info["position_debias"][key]]
            two = [float.fromhex(x) for x in vals]
            assert max(abs(u - v) for u, v in zip(one, two)) < 1e-9, (method, key)


@pytest.mark.slow
def test_dla_two_processes_equal_one(tmp_path):
    _run(tmp_path, ["dla"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TORCHRANKBOOST_TEST_CLICKS_DIST") != "1",
                    reason="set TORCHRANKBOOST_TEST_CLICKS_DIST=1 (two processes, ~25 s)")
def test_debias_two_processes_equal_one(tmp_path):
    _run(tmp_path, S.METHODS)
