"""Benchmark: training data ready from the bin cache vs from the SVMlight text, beside LightGBM.

On one synthetic LETOR-shaped SVMlight file (``--docs`` documents × 136 dense features, 100
documents per query in a LightGBM ``.query`` side file, which both readers take; written once
into ``--workdir``), each measured in a fresh process
(1 thread; wall time and the process's peak RSS during the work: ``VmHWM`` reset after
the imports, Linux):

* ``text``     ``load_file`` + the tree learner's ``prepare`` (binning): what ``train`` does
               from the file before the first tree
* ``bin``      ``torchrankboost bin``: read, bin and write the cache (once)
* ``cache``    ``load_cache`` + ``prepare`` (memory-mapped; the stored bins are used as
               they are) — what ``train --cache`` does before the first tree
* ``cache_values`` the same with the (n, F) representatives of the bins as values (what
               ``load_cache`` gives the Python API by default)
* ``lightgbm`` ``lightgbm.Dataset(path, max_bin=255).construct()`` (its text read + binning)

``--repeat`` runs of each (``text`` and ``bin`` once unless ``--repeat-text``); medians are
printed and written to ``--json``. Example::

    python scripts/bench_cache.py --docs 200000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

F = 136


def write_file(path: Path, n: int, seed: int = 0) -> None:
    """``n`` documents × 136 features with up to 100 000 distinct values per feature
    (scikit-learn's compiled writer), 100 documents per query in ``path.query``."""
    import numpy as np
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(seed)
    X = rng.integers(1, 100_000, size=(n, F)) / 1000.0
    y = rng.integers(0, 5, size=n)
    tmp = path.with_suffix(".tmp")
    dump_svmlight_file(X, y, str(tmp), zero_based=False)
    sizes = [100] * (n // 100) + ([n % 100] if n % 100 else [])
    Path(str(path) + ".query").write_text("\n".join(map(str, sizes)) + "\n")
    os.replace(tmp, path)


def child(mode: str, data: str, cache: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from torchrankboost.boosting.learners import RegressionTree

    import lightgbm

    from torchrankboost.data import load_file
    from torchrankboost.data.cache import build_cache, load_cache

    base = _rss_now()
    _reset_peak()
    t0 = time.perf_counter()  # (imports excluded: they are the same for every run)
    if mode == "text":
        d = load_file(data)
        RegressionTree().prepare(d.X)
    elif mode == "cache":  # as train --cache: the fit's stand-in features (no values)
        c = load_cache(cache, values=False)
        RegressionTree().prepare(c.data.X)
    elif mode == "cache_values":  # with the (n, F) representatives, as the Python API gives
        c = load_cache(cache)
        RegressionTree().prepare(c.data.X)
    elif mode == "bin":
        build_cache(cache, data)
    else:
        lightgbm.Dataset(data, params={"max_bin": 255, "num_threads": 1, "verbose": -1}
                         ).construct()
    seconds = time.perf_counter() - t0
    rss = _peak_since_reset()
    return {"seconds": seconds, "peak_rss_mib": rss, "above_imports_mib": rss - base}


def _reset_peak() -> None:
    """Linux: the process's peak RSS (VmHWM) restarts from its current RSS, so the peak
    measured is that of the work, not of the imports."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _peak_since_reset() -> float:
    with open("/proc/self/status") as fh:
        line = next(x for x in fh if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _rss_now() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(mode: str, data: Path, cache: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, __file__, "--child", mode, str(data), str(cache)],
                       capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--repeat-text", type=int, default=1)
    ap.add_argument("--workdir", default=None,
                    help="folder for the generated files (default: trb_bench_cache in the "
                         "system's temporary folder; kept between runs)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--modes", nargs="+", default=["bin", "text", "cache", "cache_values",
                                                   "lightgbm"])
    ap.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    wd = Path(a.workdir) if a.workdir else Path(tempfile.gettempdir()) / "trb_bench_cache"
    wd.mkdir(parents=True, exist_ok=True)
    data, cache = wd / f"letor_{a.docs}.txt", wd / f"letor_{a.docs}.trbin"
    if not data.exists():
        write_file(data, a.docs)
    print(f"{data}: {data.stat().st_size / 2**20:.0f} MiB, {a.docs} documents x {F} features")
    reps = {"bin": 1, "text": a.repeat_text}
    plan = [(m, reps.get(m, a.repeat)) for m in a.modes]
    out = {}
    for mode, k in plan:
        runs = [run(mode, data, cache) for _ in range(k)]
        out[mode] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        out[mode]["runs"] = runs
        print(f"{mode:9s} median {out[mode]['seconds']:8.3f} s   peak RSS "
              f"{out[mode]['peak_rss_mib']:8.0f} MiB ({out[mode]['above_imports_mib']:6.0f} MiB "
              f"above the imports)   ({k} runs)", flush=True)
    for ref in ("lightgbm", "text"):
        for m in ("cache", "cache_values"):
            if ref in out and m in out:
                print(f"{m} / {ref}: {out[m]['seconds'] / out[ref]['seconds']:.3f}x")
    print(f"cache file {cache.stat().st_size / 2**20:.0f} MiB")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
