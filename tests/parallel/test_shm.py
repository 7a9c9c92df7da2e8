"""The shared-memory sum of one host's ranks (``parallel/shm.py``, injected faults for
real): float64 and int64 sums through the shared mapping, a dead or stopped peer noticed and named, a
``/dev/shm`` too small falls back to gloo with one warning (a real small tmpfs in a user
namespace; a simulated allocation failure where none can be mounted)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from dist_helpers import explain, launch, train_command, train_env

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="Linux processes and tmpfs")


def test_same_host_sums_go_through_shared_memory():
    """Ranks of one host sum float64 and int64 tensors (the fixed-point histograms) through
    the shared mapping: the rank-ordered sum on every rank, int64 exact; other dtypes and
    larger tensors through gloo."""
    res = launch("local_sums", 2, timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    assert all("local sums ok" in r.out for r in res)


def test_shared_memory_sum_notices_a_dead_peer():
    res = launch("local_peer_dies", 2, timeout=60)
    assert res[0].returncode == 0, explain(res)
    assert "rank 1 died" in res[0].out


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


@linux_only
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
    res = subprocess.run(prefix + train_command("--nproc", "2", "--data", "synthetic", "--rounds", "3",
                                       "-q", "--no-tensorboard", "-o", "m.safetensors"),
                         cwd=tmp_path, env=train_env(), capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "no room for the shared-memory sum" in lines[0], res.stderr
    assert lines[0].startswith("torchrankboost: warning: ")
    assert (tmp_path / "m.safetensors").exists()


@linux_only
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
