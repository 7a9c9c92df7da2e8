"""Fuzz cases run in a child process, many at a time: a case that crashes the interpreter
(a segfault, an abort in a compiled library) cannot take the test run down with it.

``run_cases("path/to/file.py:worker", cases)`` starts one child that imports the worker
and calls ``worker(case, mark)`` for every case (JSON-able dicts) in order, printing one
JSON line as each case begins, at each ``mark(stage)`` the worker makes, and with its
result. When the child dies, the case it was in is run again alone: a crash there is that
case's result (``{"crash": ..., "stage": ...}``: the last stage reached), and the batch goes
on in a fresh child after it. A worker that raises gives ``{"exception": "Type: message"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

_CHILD = r"""
import importlib, importlib.util, json, sys
where, name = sys.argv[1].rsplit(":", 1)
if where.endswith(".py"):
    spec = importlib.util.spec_from_file_location("fuzz_worker_module", where)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
else:
    module = importlib.import_module(where)
worker = getattr(module, name)
with open(sys.argv[2]) as fh:
    cases = json.load(fh)
start, stop = int(sys.argv[3]), int(sys.argv[4])
def say(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()
for i in range(start, stop):
    say(i=i, stage="begin")
    try:
        result = worker(cases[i], lambda stage, i=i: say(i=i, stage=stage))
    except BaseException as exc:  # a failure to report, not to hide
        text = str(exc).strip().splitlines()
        result = {"exception": f"{type(exc).__name__}: {text[0] if text else ''}"[:300]}
    say(i=i, result=result)
"""


def _run(worker: str, path: str, start: int, stop: int, timeout: float, env: dict):
    """``(results by index, last begun index, last stage, exit status, stderr tail)``."""
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, worker, path, str(start),
                               str(stop)], capture_output=True, text=True, timeout=timeout,
                              env=env)
        out, err, status = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, status = "timed out", "timeout"
    results: Dict[int, dict] = {}
    begun, stage = None, None
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue  # a library printing to stdout
        if not isinstance(msg, dict) or "i" not in msg:
            continue
        if "result" in msg:
            results[msg["i"]] = msg["result"]
        else:
            begun, stage = msg["i"], msg["stage"]
    return results, begun, stage, status, (err or "")[-500:]


def run_cases(worker: str, cases: List[dict], *, timeout: float = 600.0) -> List[dict]:
    """One result per case (module docstring); the children run with this interpreter and
    the test's environment."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(Path.cwd())] + sys.path if p)
    out: List[dict] = [None] * len(cases)  # type: ignore[list-item]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "cases.json")
        with open(path, "w") as fh:
            json.dump(cases, fh)
        start = 0
        while start < len(cases):
            results, begun, _, status, err = _run(worker, path, start, len(cases), timeout, env)
            for i, r in results.items():
                out[i] = r
            if status == 0 and all(out[i] is not None for i in range(start, len(cases))):
                break
            if begun is None or begun in results:
                raise RuntimeError(f"the fuzz child failed outside any case ({status}): {err}")
            _, _, stage, alone, err_alone = _run(worker, path, begun, begun + 1,
                                                 min(timeout, 120.0), env)
            out[begun] = {"crash": str(alone if alone != 0 else f"only in a batch: {status}"),
                          "stage": stage, "stderr": err_alone[-300:]}
            start = begun + 1
    return out


def damaged(clean: bytes, kind: int, rng) -> bytes:
    """``clean`` with one damage at a random position (``rng``: a numpy ``Generator``):
    ``kind % 4`` 0 flips a bit, 1 truncates, 2 inserts a random byte, 3 deletes a byte."""
    b = bytearray(clean)
    pos = int(rng.integers(len(b)))
    kind %= 4
    if kind == 0:
        b[pos] ^= 1 << int(rng.integers(8))
    elif kind == 1:
        b = b[:pos]
    elif kind == 2:
        b[pos:pos] = bytes([int(rng.integers(256))])
    else:
        del b[pos]
    return bytes(b)
