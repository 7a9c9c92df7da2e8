"""The ``--nproc`` parent (``parallel/parent.py``), faults injected for real: a signal to
the real ``train --nproc`` command stops every rank before it returns; bad input is one line
from the parent before any rank starts, or from rank 0 when only the ranks can see it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from dist_helpers import train_command, train_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux processes")


def _processes_with(token: str):
    """The pids of live processes whose environment holds ``token`` (ours only)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as fh:
                    if token.encode() in fh.read():
                        found.append(int(d))
            except OSError:
                pass
    return found


def test_sigterm_to_train_nproc_stops_every_rank_before_the_command_returns(tmp_path):
    """SIGTERM from a process that does not own a terminal (kill, timeout, CI) to ``train
    --nproc 2``, then a SIGINT while the ranks finish: every rank stops, rank 0 keeps the
    last good round in a partial file undisturbed by the second signal, the command says
    "interrupted" once and returns 143 only when no rank is left, and nothing writes ``-o``
    afterwards."""
    token = uuid.uuid4().hex
    out = tmp_path / "model.safetensors"
    proc = subprocess.Popen(train_command("--nproc", "2", "--data", "synthetic", "--rounds", "100000",
                                 "--early-stopping", "0", "--no-tensorboard", "-o", str(out)),
                            cwd=tmp_path, env=train_env(TRB_FAULT_TOKEN=token),
                            stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(150, proc.kill)
    watchdog.start()
    try:
        first = proc.stderr.readline()  # rank 0's start line: every rank is in the fit
        assert "training" in first, first
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # ignored: the ranks are already stopping
        err = first + proc.stderr.read()
        rc = proc.wait()
    finally:
        watchdog.cancel()
        for pid in _processes_with(token):  # only on failure: leave nothing running
            os.kill(pid, signal.SIGKILL)
    assert rc == 128 + signal.SIGTERM, err
    assert err.count("torchrankboost: interrupted\n") == 1, err
    assert "Traceback" not in err, err
    assert _processes_with(token) == [], "a rank outlived the command"
    time.sleep(0.5)
    assert not out.exists(), "a rank wrote -o after the command returned"


@pytest.mark.parametrize("args,message", [
    (["-a", "adaboost"], "--nproc 2: algorithm 'adaboost' has no data-parallel fit; use one "
                         "of boost, qbrank, gbt, rankboost"),
    (["--data", "missing.txt"], "data not found: 'missing.txt'"),
    (["--valid", "missing.txt"], "--valid missing.txt: file not found"),
    (["--timeout", "0"], "--timeout must be a positive number of seconds"),
    (["-p", "nonsense=1"], "nonsense"),
])
def test_input_errors_under_nproc_are_one_line_from_the_parent_before_any_rank(
        tmp_path, monkeypatch, capsys, args, message):
    from torchrankboost import cli
    from torchrankboost.parallel import launch as L

    def no_ranks(*a, **k):
        raise AssertionError("ranks were started for an input error")

    monkeypatch.chdir(tmp_path)
    for k in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(L, "run_ranks", no_ranks)
    rc = cli.main(["train", "--nproc", "2", "--rounds", "2", "-q", "--no-tensorboard", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("torchrankboost: error: "), err
    assert message in err, err


def test_bad_data_under_nproc_is_one_line_from_rank_0_with_status_2(tmp_path):
    """What only the ranks can see (a malformed value in a shard) is one line, from one
    process, status 2 — no per-rank copies, no launcher traceback."""
    (tmp_path / "bad.txt").write_text("".join(
        f"{q % 2} qid:{q // 2} 1:0.{q} 2:{'x' if q == 5 else '0.5'}\n" for q in range(12)))
    res = subprocess.run(train_command("--nproc", "2", "--data", "bad.txt", "--rounds", "2", "-q",
                              "--no-tensorboard", "-o", "m.safetensors"),
                         cwd=tmp_path, env=train_env(), capture_output=True, text=True, timeout=150)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "bad.txt:6" in lines[0] and lines[0].startswith("torchrankboost: error: rank"), lines
