"""SVMlight/LETOR file → ready-to-train data: torchrankboost against LightGBM and scikit-learn.

* **ours**: ``load_svmlight_binned(path)`` (``torch.set_num_threads(T)``): the file read
  straight into uint8 bin codes (the seeded edge sample parsed first, then every block parsed
  and coded; no float matrix), the codes ``bin_features(load_svmlight(path).X)`` gives;
  ``--float`` also times that float path;
* **from the bin cache**: ``load_cache(path + ".trbin", values=False)`` of a cache built once
  from the same file (``build_cache``; its build time is printed): mapped, every code
  range-checked; one thread;
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

Memory: LightGBM holds the text in memory while it reads (peak ~1.4× the file), ours the
uint8 codes plus one block (670 MiB at 2M × 136; the float path ~1.8 GB).

**Parquet** (``--parquet``): a Parquet file of ``--features`` float32 columns (half
integers, half decimals), ``label`` and ``qid`` columns, in row groups of ``--row-group``
rows (default 100k), against LightGBM's supported Arrow path:

* **ours → codes**: ``load_binned(path)`` — the file streamed by row groups straight into
  uint8 bin codes (ready to train: what ``train`` does with it);
* **ours → cache**: ``build_cache(path + ".trbin", path)`` — the same, written as the bin
  cache (``torchrankboost bin``); ``train --cache`` then maps it;
* **LightGBM**: ``pyarrow.parquet.read_table(path)`` then ``lightgbm.Dataset(features
  table, label=, group=, params={"max_bin": 255, "num_threads": T}).construct()`` (its
  time with the read; the read alone printed beside it)::

    python scripts/bench_load.py --parquet --sizes 2M --threads 1,2 --repeat 1
    python scripts/bench_load.py --parquet --sizes 10M --threads 1 --repeat 1 --keep DIR
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
        lines = [("0" + "".join(parts) + "\n").encode() for parts in zip(*cols)]
        heads = np.cumsum([0] + [len(x) for x in lines[:-1]])  # where each label digit goes
        tails.append((np.frombuffer(b"".join(lines), dtype=np.uint8), heads))
    sizes = rng.integers(20, 200, size=n // 20 + 2)
    qid = np.repeat(np.arange(sizes.size), sizes)[:n]
    labels = rng.integers(0, 5, size=n).astype(np.uint8)
    with open(path, "wb") as fh:  # each block: a template with its label digits set (vectorised)
        for s in range(0, n, block):
            buf, heads = tails[(s // block) % len(tails)]
            m = min(n, s + block) - s
            out = buf[:heads[m] if m < len(heads) else buf.size].copy()
            out[heads[:m]] = labels[s:s + m] + ord("0")
            fh.write(out.tobytes())
    # LightGBM reads no qid: from LibSVM text; both read the .query side file of sizes
    np.savetxt(str(path) + ".query", np.bincount(qid), fmt="%d")


def write_parquet(path: Path, n: int, F: int, seed: int = 0, rows: int = 100_000) -> None:
    """A Parquet file of ``n`` documents: ``label`` (0-4), ``qid`` (20-200 rows a query) and
    ``F`` float32 features ``f1 ..`` (odd: integers < 5000, even: decimals), written by row
    groups of ``rows`` (never the whole table in memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    sizes = rng.integers(20, 200, size=n // 20 + 2)
    qid = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)[:n]
    scale = rng.choice([1, 100, 1000], size=F).astype(np.float32)
    names = ["label", "qid"] + [f"f{j + 1}" for j in range(F)]
    schema = pa.schema([("label", pa.float32()), ("qid", pa.int64())]
                       + [(c, pa.float32()) for c in names[2:]])
    with pq.ParquetWriter(str(path), schema) as w:
        for s in range(0, n, rows):
            m = min(n, s + rows) - s
            X = rng.random((m, F), dtype=np.float32) * scale
            X[:, ::2] = np.floor(X[:, ::2] * 5)
            cols = [pa.array(rng.integers(0, 5, size=m).astype(np.float32)),
                    pa.array(qid[s:s + m])] + [pa.array(X[:, j]) for j in range(F)]
            w.write_table(pa.Table.from_arrays(cols, schema=schema), row_group_size=rows)


def parquet_child(which: str, path: str, threads: int):
    """``(seconds, shape, extra)`` of one Parquet load (see the module docstring)."""
    if which == "pq_lightgbm":
        import lightgbm as lgb
        import pyarrow.parquet as pq
        t = time.perf_counter()
        table = pq.read_table(path)
        read = time.perf_counter() - t
        qid = table.column("qid").to_numpy()
        cut = np.flatnonzero(np.diff(qid)) + 1
        group = np.diff(np.concatenate(([0], cut, [qid.size])))
        label = table.column("label").to_numpy()
        feats = table.drop_columns(["label", "qid"])
        del table
        ds = lgb.Dataset(feats, label=label, group=group,
                         params={"max_bin": 255, "num_threads": threads, "verbose": -1})
        ds.construct()
        return time.perf_counter() - t, (ds.num_data(), ds.num_feature()), {"read_s": read}
    import torch
    torch.set_num_threads(threads)
    t = time.perf_counter()
    if which == "pq_ours":
        from torchrankboost.data.binned_read import load_binned
        b = load_binned(path, n_bins=255).binned
        return time.perf_counter() - t, tuple(b.codes.shape), {}
    if which == "pq_cache":
        from torchrankboost.data.cache import build_cache
        build_cache(path + ".trbin", path)
        return time.perf_counter() - t, (), {}
    from torchrankboost.data.cache import load_cache  # pq_mapped: train --cache's read
    c = load_cache(path + ".trbin", values=False)
    return time.perf_counter() - t, tuple(c.binned.codes.shape), {}


def child(which: str, path: str, threads: int) -> None:
    """One timed load in this process; prints ``{"s": seconds, "rss_mb": peak}``."""
    extra = {}
    if which.startswith("pq_"):
        dt, shape, extra = parquet_child(which, path, threads)
    elif which in ("ours", "float"):
        import torch

        from torchrankboost.kernels.binning import bin_features
        from torchrankboost.data import load_svmlight
        from torchrankboost.data.binned_read import load_svmlight_binned
        torch.set_num_threads(threads)
        load_svmlight(path + ".warm")  # compiles the reader once (cached) outside the timing
        t = time.perf_counter()
        if which == "ours":  # straight into bin codes
            b = load_svmlight_binned(path, n_bins=255).binned
        else:  # the float matrix first, then its codes
            b = bin_features(load_svmlight(path).X, n_bins=255)
        dt = time.perf_counter() - t
        shape = tuple(b.codes.shape)
    elif which == "build":
        from torchrankboost.data.cache import build_cache
        t = time.perf_counter()
        build_cache(path + ".trbin", path)
        dt, shape = time.perf_counter() - t, ()
    elif which == "cache":
        from torchrankboost.data.cache import load_cache
        t = time.perf_counter()
        c = load_cache(path + ".trbin", values=False)  # mapped; every code range-checked
        dt = time.perf_counter() - t
        shape = tuple(c.binned.codes.shape)
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
    print(json.dumps({"s": dt, "rss_mb": rss, "shape": list(shape), **extra}))


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
    ap.add_argument("--float", action="store_true",
                    help="also time the float path (load_svmlight, then bin_features)")
    ap.add_argument("--parquet", action="store_true",
                    help="Parquet files against LightGBM's Arrow table path instead")
    ap.add_argument("--row-group", type=int, default=100_000,
                    help="rows per Parquet row group (with --parquet)")
    ap.add_argument("--skip", default="", metavar="A,B",
                    help="with --parquet: measurements left out (codes, cache)")
    ap.add_argument("--child", nargs=3, metavar=("WHICH", "PATH", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], int(args.child[2]))
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_load_"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        rows = (_bench_parquet if args.parquet else _bench)(args, folder)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(rows))


def _bench(args, folder: Path) -> list:
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
            for which in ("ours", "lightgbm", "sklearn", "float", "cache"):
                if which in ("sklearn", "cache", "float") and th != threads[0]:
                    continue  # one thread whatever T (the cache: mapped): once per size
                if which == "sklearn" and size not in sk_sizes:
                    continue
                if which == "float" and not args.float:
                    continue
                if which == "cache" and not Path(str(path) + ".trbin").is_file():
                    built = _run("build", path, th)
                    print(f"  built {path.name}.trbin in {built['s']:.1f} s "
                          f"(peak {built['rss_mb']:,.0f} MB)", flush=True)
                runs = [_run(which, path, th) for _ in range(args.repeat)]
                res[which] = (statistics.median(r["s"] for r in runs),
                              max(r["rss_mb"] for r in runs))
            lg = res["lightgbm"][0]
            line = (f"{size:>9,} docs ({mib:,.0f} MiB) {th} thread(s): ours {res['ours'][0]:.2f} s "
                    f"(peak {res['ours'][1]:,.0f} MB), LightGBM {lg:.2f} s (peak "
                    f"{res['lightgbm'][1]:,.0f} MB), ours/LightGBM {res['ours'][0] / lg:.2f}x")
            if "float" in res:
                line += (f", ours via float X {res['float'][0]:.2f} s (peak "
                         f"{res['float'][1]:,.0f} MB)")
            if "cache" in res:
                line += (f", from the bin cache {res['cache'][0]:.3f} s "
                         f"({res['cache'][0] / lg:.3f}x, peak {res['cache'][1]:,.0f} MB)")
            if "sklearn" in res:
                line += (f", scikit-learn {res['sklearn'][0]:.2f} s ({res['sklearn'][0] / lg:.2f}x, "
                         f"peak {res['sklearn'][1]:,.0f} MB)")
            print(line, flush=True)
            rows.append({"docs": size, "threads": th, **{k: v[0] for k, v in res.items()},
                         **{f"{k}_rss_mb": v[1] for k, v in res.items()}})
    return rows


def _bench_parquet(args, folder: Path) -> list:
    threads = [int(t) for t in args.threads.split(",")]
    print(f"bench_load --parquet: {args.features} features, row groups of {args.row_group:,}, "
          f"threads {threads}, median of {args.repeat}, files in {folder}")
    rows = []
    for size in [_count(s) for s in args.sizes.split(",")]:
        path = folder / f"letor_{size}x{args.features}.parquet"
        if not path.is_file():
            t = time.perf_counter()
            write_parquet(path, size, args.features, rows=args.row_group)
            print(f"  wrote {path.name}: {path.stat().st_size / 2**20:,.0f} MiB in "
                  f"{time.perf_counter() - t:.1f} s", flush=True)
        for th in threads:
            res = {}
            skip = {f"pq_{k.strip().replace('codes', 'ours')}" for k in args.skip.split(",")}
            for which in ("pq_ours", "pq_cache", "pq_mapped", "pq_lightgbm"):
                if which in skip or (which == "pq_mapped" and "pq_cache" in skip):
                    continue
                runs = [_run(which, path, th) for _ in range(args.repeat)]
                res[which] = (statistics.median(r["s"] for r in runs),
                              max(r["rss_mb"] for r in runs), runs[0])
            lg, lg_rss = res["pq_lightgbm"][:2]
            read = res["pq_lightgbm"][2]["read_s"]
            line = (f"{size:>10,} docs {th} thread(s): LightGBM (read {read:.2f} s + Dataset) "
                    f"{lg:.2f} s, peak {lg_rss:,.0f} MB")
            for k, what in (("pq_ours", "ours -> codes"), ("pq_cache", "ours -> cache")):
                if k not in res:
                    continue
                line += (f"; {what} {res[k][0]:.2f} s ({res[k][0] / lg:.2f}x), peak "
                         f"{res[k][1]:,.0f} MB ({res[k][1] / lg_rss:.2f}x)")
            if "pq_mapped" in res:
                line += f"; cache mapped {res['pq_mapped'][0]:.3f} s"
            print(line, flush=True)
            rows.append({"docs": size, "threads": th, **{k: v[0] for k, v in res.items()},
                         **{f"{k}_rss_mb": v[1] for k, v in res.items()}})
    return rows


if __name__ == "__main__":
    main()
