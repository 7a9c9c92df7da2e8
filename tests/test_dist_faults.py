"""Faults of a data-parallel run, injected for real: a signal to the real ``train --nproc``
command, a real small ``/dev/shm`` (a tmpfs in a user namespace; a simulated allocation
failure where none can be mounted), a stopped and a killed peer, a peer that never joins,
bad input under ``--nproc``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from dist_helpers import ROOT, explain, free_port, launch, worker_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux processes and tmpfs")


def _env(**extra):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(extra)
    return env


def _cmd(*args):
    return [sys.executable, "-m", "torchrankboost", "train", *args]


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
    proc = subprocess.Popen(_cmd("--nproc", "2", "--data", "synthetic", "--rounds", "100000",
                                 "--early-stopping", "0", "--no-tensorboard", "-o", str(out)),
                            cwd=tmp_path, env=_env(TRB_FAULT_TOKEN=token),
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


def _small_shm_prefix():
    """A command prefix giving a real 4 MB /dev/shm (a tmpfs in a user and mount namespace),
    or None where this system does not allow one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
              'mount -t tmpfs -o size=4m tmpfs /dev/shm && exec "$@"', "sh"]
    probe = subprocess.run(prefix + ["true"], capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None


def test_small_dev_shm_falls_back_to_gloo_with_one_warning_not_sigbus(tmp_path, monkeypatch):
    """A /dev/shm too small for the shared-memory sum (Docker's default with several ranks):
    the space is reserved up front, so the ranks sum through gloo and the run succeeds with
    one warning line, where the unreserved mapping killed every rank with SIGBUS."""
    prefix = _small_shm_prefix()
    if prefix is None:  # no tmpfs can be mounted here: the allocation fails as on a full one
        res = launch("shm_no_room", 2, timeout=90)
        assert all(r.returncode == 0 and "sums ok" in r.out for r in res), explain(res)
        warned = [line for r in res for line in r.out.splitlines() if "no room" in line]
        assert len(warned) == 1 and "rank" not in warned[0], explain(res)
        return
    res = subprocess.run(prefix + _cmd("--nproc", "2", "--data", "synthetic", "--rounds", "3",
                                       "-q", "--no-tensorboard", "-o", "m.safetensors"),
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "no room for the shared-memory sum" in lines[0], res.stderr
    assert lines[0].startswith("torchrankboost: warning: ")
    assert (tmp_path / "m.safetensors").exists()


def test_stopped_peer_costs_no_cpu_times_out_and_a_dead_gloo_peer_is_named(monkeypatch):
    """Rank 1 stops (SIGSTOP) before a sum: rank 0 sleeps instead of spinning (≪ 1 CPU
    second over the wait), fails after the timeout naming rank 1; once rank 1 is killed, a
    gloo collective fails with DistributedError naming rank 1 (not a raw RuntimeError)."""
    monkeypatch.setenv("TORCHRANKBOOST_TIMEOUT", "1")
    res = launch("stopped_then_dead_peer", 2, timeout=90)
    out = res[0].out
    assert res[0].returncode == 0, explain(res)
    line = next(x for x in out.splitlines() if x.startswith("waited"))
    waited, cpu = float(line.split()[1]), float(line.split()[4])
    assert 0.9 < waited < 10 and cpu < 0.3 * waited, line
    assert "rank 1 did not answer within 1 s" in line, line
    assert "gloo: DistributedError: rank 1 died" in out, out


def test_peer_that_never_joins_fails_after_the_timeout_in_one_line(tmp_path):
    """A rank whose peer never reaches the rendezvous (it died at start-up) fails after
    ``--timeout`` seconds with one line naming itself, status 1 — not after 10 minutes."""
    env = _env(**{k: v for k, v in worker_env(0, 2, free_port()).items()
                  if k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                           "MASTER_ADDR", "MASTER_PORT")})
    t0 = time.monotonic()
    res = subprocess.run(_cmd("--data", "synthetic", "--rounds", "2", "-q", "--no-tensorboard",
                              "--timeout", "2", "-o", "m.safetensors"),
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 0: the other ranks did not join within 2 s" in lines[0], \
        res.stderr
    assert time.monotonic() - t0 < 60


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
    res = subprocess.run(_cmd("--nproc", "2", "--data", "bad.txt", "--rounds", "2", "-q",
                              "--no-tensorboard", "-o", "m.safetensors"),
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=150)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "bad.txt:6" in lines[0] and lines[0].startswith("torchrankboost: error: rank"), lines
