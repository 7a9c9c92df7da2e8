"""Starting a rank's process group (``parallel/launch.py``): a rank whose peer never joins
fails after ``--timeout`` in one line."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dist_helpers import free_port, train_command, train_env, worker_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux processes")


def test_peer_that_never_joins_fails_after_the_timeout_in_one_line(tmp_path):
    """A rank whose peer never reaches the rendezvous (it died at start-up) fails after
    ``--timeout`` seconds with one line naming itself, status 1 — not after 10 minutes."""
    env = train_env(**{k: v for k, v in worker_env(0, 2, free_port()).items()
                  if k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                           "MASTER_ADDR", "MASTER_PORT")})
    t0 = time.monotonic()
    res = subprocess.run(train_command("--data", "synthetic", "--rounds", "2", "-q", "--no-tensorboard",
                              "--timeout", "2", "-o", "m.safetensors"),
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 0: the other ranks did not join within 2 s" in lines[0], \
        res.stderr
    assert time.monotonic() - t0 < 60
