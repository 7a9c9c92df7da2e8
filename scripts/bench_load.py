"""SVMlight/LETOR file → ready-to-train data: torchrankboost against LightGBM and scikit-learn.

* **ours**: ``load_svmlight(path)`` (the compiled reader, ``torch.set_num_threads(T)``) and
  the binning a tree booster does first (``bin_features(X, n_bins=255)``: uint8 codes);
* **LightGBM**: ``lightgbm.Dataset(path, params={"max_bin": 255, "num_threads": T}).construct()``,
  which reads and bins;
* **scikit-learn**: ``load_svmlight_file(path)`` (reading only, one thread; run
  at the sizes of ``--sklearn-sizes``: its sparse arrays take ~12 bytes a value).

Synthetic LETOR files (``--features`` features, every one on every line as in MSLR-WEB:
half of them integers, half decimals with 6 digits; ~20-200 documents a query, given by a
``.query`` side file of query sizes since LightGBM reads no ``qid:`` from text) are written
once into a temporary folder (``--keep DIR`` keeps them there). Each measurement runs in a
fresh process (the time of the call alone; the peak RSS of that process beside it); medians
of ``--repeat`` runs, ratios to LightGBM at the same thread count, all in one run::

    python scripts/bench_load.py                       # 200k and 2M documents, 1 and 2 threads
    python scripts/bench_load.py --sizes 200k,1M --repeat 3

Memory: LightGBM holds the text in memory while it reads (peak ~1.7× the file), ours the
dense float32 matrix plus one block (~1.3 GB at 1M × 136).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _count(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(s[-1], 1)
    return int(float(s[:-1] if s[-1] in "km" else s) * mult)


def write_letor(path: Path, n: int, F: int, seed: int = 0, block: int = 5000) -> None:
    """A LETOR file of ``n`` documents (labels 0-4, ``F`` features) and its ``.query`` file."""
    rng = np.random.default_rng(seed)
    # a few distinct blocks of formatted feature text, reused with fresh labels and qids
    tails = []
    for _ in range(4):
        ints = rng.integers(0, 5000, size=(block, F // 2))
        decs = rng.random((block, F - F // 2)) * rng.choice([1, 100, 1000], size=(1, F - F // 2))
        cols = [None] * F
        for j in range(F):
            v = ints[:, j // 2] if j % 2 == 0 else decs[:, j // 2]
            cols[j] = [f" {j + 1}:{x}" for x in v.tolist()] if j % 2 == 0 else \
                      [f" {j + 1}:{x:.6f}" for x in v.tolist()]
        tails.append([("".join(parts) + "\n").encode() for parts in zip(*cols)])
    sizes = rng.integers(20, 200, size=n // 20 + 2)
    qid = np.repeat(np.arange(sizes.size), sizes)[:n]
    labels = rng.integers(0, 5, size=n)
    with open(path, "wb") as fh:
        for s in range(0, n, block):
            t = tails[(s // block) % len(tails)]
            fh.write(b"".join(str(labels[i]).encode() + t[i - s]
                              for i in range(s, min(n, s + block))))
    # LightGBM reads no qid: from LibSVM text; both read the .query side file of sizes
    np.savetxt(str(path) + ".query", np.bincount(qid), fmt="%d")


def child(which: str, path: str, threads: int) -> None:
    """One timed load in this process; prints ``{"s": seconds, "rss_mb": peak}``."""
    if which == "ours":
        import torch

        from torchrankboost.boosting.binning import bin_features
        from torchrankboost.data import load_svmlight
        torch.set_num_threads(threads)
        load_svmlight(path + ".warm")  # compiles the reader once (cached) outside the timing
        t = time.perf_counter()
        data = load_svmlight(path)
        b = bin_features(data.X, n_bins=255)
        dt = time.perf_counter() - t
        shape = tuple(b.codes.shape)
    elif which == "lightgbm":
        import lightgbm as lgb
        t = time.perf_counter()
        ds = lgb.Dataset(path, params={"max_bin": 255, "num_threads": threads, "verbose": -1})
        ds.construct()
        dt = time.perf_counter() - t
        shape = (ds.num_data(), ds.num_feature())
    else:
        from sklearn.datasets import load_svmlight_file
        t = time.perf_counter()
        X, _ = load_svmlight_file(path, dtype=np.float32)
        dt = time.perf_counter() - t
        shape = X.shape
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": dt, "rss_mb": rss, "shape": list(shape)}))


def _run(which: str, path: Path, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--child", which, str(path), str(threads)],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{which} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200k,2M", help="documents per file, comma-separated")
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sklearn-sizes", default="200k", help="sizes scikit-learn reads at")
    ap.add_argument("--keep", default=None, help="folder for the generated files (kept)")
    ap.add_argument("--child", nargs=3, metavar=("WHICH", "PATH", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_load_"))
    folder.mkdir(parents=True, exist_ok=True)
    sk_sizes = {_count(s) for s in args.sklearn_sizes.split(",") if s}
    threads = [int(t) for t in args.threads.split(",")]
    print(f"bench_load: {args.features} features, threads {threads}, median of {args.repeat}, "
          f"files in {folder}")
    rows = []
    for size in [_count(s) for s in args.sizes.split(",")]:
        path = folder / f"letor_{size}x{args.features}.txt"
        if not path.is_file():
            t = time.perf_counter()
            write_letor(path, size, args.features)
            print(f"  wrote {path.name}: {path.stat().st_size / 2**20:.0f} MiB in "
                  f"{time.perf_counter() - t:.1f} s")
        warm = Path(str(path) + ".warm")
        if not warm.is_file():
            write_letor(warm, 50, args.features, block=50)
        mib = path.stat().st_size / 2**20
        for th in threads:
            res = {}
            for which in ("ours", "lightgbm", "sklearn"):
                if which == "sklearn" and (size not in sk_sizes or th != threads[0]):
                    continue  # one thread whatever T: read once per size
                runs = [_run(which, path, th) for _ in range(args.repeat)]
                res[which] = (statistics.median(r["s"] for r in runs),
                              max(r["rss_mb"] for r in runs))
            lg = res["lightgbm"][0]
            line = (f"{size:>9,} docs ({mib:,.0f} MiB) {th} thread(s): ours {res['ours'][0]:.2f} s "
                    f"(peak {res['ours'][1]:,.0f} MB), LightGBM {lg:.2f} s (peak "
                    f"{res['lightgbm'][1]:,.0f} MB), ours/LightGBM {res['ours'][0] / lg:.2f}x")
            if "sklearn" in res:
                line += (f", scikit-learn {res['sklearn'][0]:.2f} s ({res['sklearn'][0] / lg:.2f}x, "
                         f"peak {res['sklearn'][1]:,.0f} MB)")
            print(line, flush=True)
            rows.append({"docs": size, "threads": th, **{k: v[0] for k, v in res.items()},
                         **{f"{k}_rss_mb": v[1] for k, v in res.items()}})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
