"""The parent of ``torchrankboost train --nproc N``: it starts the ranks, forwards signals to
them, waits for every one of them and reports once.

The parent hosts the rendezvous (a ``TCPStore`` on a port the system chose, so two runs
never race for one) and starts ``N`` copies of the command, each in its own session with
the variables of ``torchrun`` (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``; ``TORCHELASTIC_USE_AGENT_STORE=True``: every rank is a client of the
parent's store). A rank asks the kernel to kill it if the parent dies (:func:`worker_setup`),
so a parent killed outright leaves no rank behind.

**Signals.** SIGINT or SIGTERM to the parent (Ctrl-C, ``kill``, ``timeout``, systemd, Slurm)
reaches every rank as one SIGINT: rank 0 saves the model of the last good round to
``*.partial.safetensors`` and says so. The parent waits for every rank (at most
:data:`GRACE_S`, then it kills them) and only then returns, with status 130 (SIGINT) or 143
(SIGTERM): no rank is left to write ``-o`` after the command has returned. Later signals are
ignored while the ranks finish (a second Ctrl-C does not interrupt the partial save).

**Failures.** A rank does not print its final error line: it hands it to the parent
(:func:`report_to_parent`, a key in the parent's store), and the parent prints one line for
the run — the line every rank gave, else the lowest rank's first-hand failure (not a
"rank 1 died" seen from another rank). Once a rank has failed, the others have
:data:`FAIL_GRACE_S` to notice and leave, then they are killed. The status is rank 0's (1
for a failed run, 2 for an input error), else the first failing rank's; a rank killed by a
signal gets one line from the parent when no rank said anything, status 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import List, Optional, Sequence

__all__ = ["FAIL_GRACE_S", "GRACE_S", "report_to_parent", "run_ranks", "worker_setup"]

#: after an interrupt: how long the ranks have to save the partial model and exit
GRACE_S = 30.0
#: after a rank failed: how long the others have to notice and exit
FAIL_GRACE_S = 5.0
_POLL_S = 0.05
_PARENT = "TORCHRANKBOOST_PARENT_PID"
_REPORT = "torchrankboost/report/"
#: what a rank says about another rank's failure (the parent prefers a first-hand line)
_SECONDHAND = (" died", "lost contact", "did not answer", "did not join")


def report_to_parent(line: str) -> bool:
    """In a rank started by :func:`run_ranks`: hand ``line`` (this rank's final error) to the
    parent, which prints one line for every rank; ``False`` elsewhere, or when the parent
    cannot be reached (the caller prints it then)."""
    if not os.environ.get(_PARENT):
        return False
    try:
        import torch.distributed as dist

        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              is_master=False, timeout=timedelta(seconds=5))
        store.set(_REPORT + os.environ.get("RANK", "0"), line)
    except (RuntimeError, ValueError, KeyError, OSError):
        return False
    return True


def _reports(store, nproc: int) -> dict:
    out = {}
    for r in range(nproc):
        if store.check([_REPORT + str(r)]):
            out[r] = store.get(_REPORT + str(r)).decode("utf-8", "replace")
    return out


def _one_line(lines: dict) -> Optional[str]:
    """The line the parent prints for the ranks' ``{rank: line}``."""
    if not lines:
        return None
    ordered = [lines[r] for r in sorted(lines)]
    first_hand = [t for t in ordered if not any(w in t for w in _SECONDHAND)]
    return (first_hand or ordered)[0]


def _rank_env(rank: int, nproc: int, port: int) -> dict:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
               LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0", ROLE_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               TORCHELASTIC_USE_AGENT_STORE="True", **{_PARENT: str(os.getpid())})
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def worker_setup() -> None:
    """In a rank started by :func:`run_ranks`: die with the parent (Linux
    ``PR_SET_PDEATHSIG``), and exit at once when the parent is already gone."""
    parent = os.environ.get(_PARENT)
    if not parent:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's own kill is the safeguard
        pass
    if str(os.getppid()) != parent:
        os._exit(1)


def _signal_all(procs, sig) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)  # the rank and whatever it started (a compiler)
            except (ProcessLookupError, PermissionError):
                pass


class _Supervisor:
    """The ranks' processes, the signals received and the deadlines of one run."""

    def __init__(self):
        self.procs: List[subprocess.Popen] = []
        self.received: List[int] = []
        self.told = 0  # the ranks (the first ``told``) that the first signal was forwarded to

    def on_signal(self, signum, frame) -> None:
        self.received.append(signum)
        if len(self.received) == 1:
            self.told = len(self.procs)
            _signal_all(self.procs, signal.SIGINT)

    def wait(self) -> None:
        """Until every rank has exited; kills them after a grace period once a signal came
        or a rank failed."""
        deadline: Optional[float] = None
        while any(p.poll() is None for p in self.procs):
            now = time.monotonic()
            if deadline is None and self.received:
                deadline = now + GRACE_S
            if deadline is None and any(p.returncode not in (None, 0) for p in self.procs):
                deadline = now + FAIL_GRACE_S
            if deadline is not None and now > deadline:
                _signal_all(self.procs, signal.SIGKILL)
                deadline = float("inf")
            time.sleep(_POLL_S)

    def status(self, prog: str, lines: dict) -> int:
        """The command's exit status (see the module docstring), after its one line."""
        codes = [p.returncode for p in self.procs]
        if self.received:
            print(f"{prog}: interrupted", file=sys.stderr)
            return 128 + self.received[0]
        line = _one_line(lines)
        if line is not None:
            print(line, file=sys.stderr)
        for code in codes:
            if code is not None and code > 0:
                return code
        for r, code in enumerate(codes):
            if code is not None and code < 0:
                if line is None:
                    name = (signal.Signals(-code).name if -code in signal.valid_signals()
                            else -code)
                    print(f"{prog}: error: rank {r} was killed by signal {name}",
                          file=sys.stderr)
                return 1
        return 0


def run_ranks(cmd: Sequence[str], nproc: int, *, timeout_s: float,
              prog: str = "torchrankboost") -> int:
    """Run ``cmd`` on ``nproc`` ranks of one host (see the module docstring); returns the
    command's exit status. ``timeout_s``: how long the rendezvous store waits."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s))
    sup = _Supervisor()
    handlers = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            handlers[s] = signal.signal(s, sup.on_signal)
    except ValueError:  # not the main thread: no forwarding, the ranks still die with us
        pass
    try:
        for r in range(nproc):
            if sup.received:
                break
            sup.procs.append(subprocess.Popen(list(cmd), env=_rank_env(r, nproc, store.port),
                                              start_new_session=True))
        if sup.received:  # ranks started while the first signal was being forwarded
            _signal_all(sup.procs[sup.told:], signal.SIGINT)
        sup.wait()
    finally:
        _signal_all(sup.procs, signal.SIGKILL)
        for p in sup.procs:
            p.wait()
        for s, h in handlers.items():
            signal.signal(s, h)
    lines = _reports(store, nproc)
    del store
    return sup.status(prog, lines)
