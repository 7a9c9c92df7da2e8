"""Benchmark: data-parallel boosting on one machine — 2 processes × 1 thread against
1 process × 1 and × 2 threads, beside LightGBM's own data-parallel mode.

Data: ``make_letor(n_docs // 100, 100, 136, seed=0)`` (800k documents by default: 8000
queries of ~100 documents, 136 features). Every configuration runs in fresh processes (one
per rank) that build the data, take their shard of whole queries (``RankingData.shard``) and
fit ``--rounds`` trees:

* ``trb``: ``Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=31))`` (the
  default surrogate step, compiled tree kernels, learning rate 0.1), 1 × 1, 1 × 2 and 2 × 1
  (processes × threads; 2 processes: a gloo process group on 127.0.0.1, ``distributed=``
  the booster's own context, whose ``bytes_reduced`` counts the bytes all-reduced);
* ``lgb``: LightGBM ``objective="lambdarank"``, 31 leaves, 255 bins, min 20 documents per
  leaf, learning rate 0.1, 1 × 1, 1 × 2 and 2 × 1 with ``tree_learner="data"``,
  ``num_machines=2``, ``pre_partition=True`` on two local ports (skipped with a message if
  LightGBM is missing or its network does not start).

Reported: seconds per tree (the median over the rounds after the first: round time from one
round's end to the next, gradient + tree + step + bookkeeping), the speed-up against the
same library's 1 process × 1 thread, and for ``trb`` 2 × 1 the bytes all-reduced per tree.
Then the communication volume per tree: the tree all-reduces the root's histogram and, per
split, the smaller child's (the larger child's is the parent's minus it), each at most
``F · S · 3`` float64 (``S = 256`` slots: 255 value bins + missing; channels Σ w·t, Σ w,
count), plus the ``2L`` leaf sums: ``V ≈ L · F · S · 3 · 8 + 16 L`` bytes for ``L`` leaves
(a learner that reduced both children would send ``2(L − 1) + 1`` histograms). A histogram
travels compacted to the slots that can hold rows (``Σ_f num_bins[f]`` plus the missing
slots of features with NaNs), so the measured volume is that fraction of ``V``. With a ring
all-reduce over ``W`` ranks each rank sends and receives about ``2 (W − 1) / W · V`` per
tree.

Examples::

    python scripts/bench_distributed.py                       # 800k documents, 20 rounds
    python scripts/bench_distributed.py --sizes 40k --rounds 5 --no-lightgbm
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

F_DEFAULT = 136
SLOTS = 256
DOCS_PER_QUERY = 100


def parse_size(text: str) -> int:
    t = text.strip().lower()
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    n = int(float(t) * mult)
    if n < 2 * DOCS_PER_QUERY:
        raise argparse.ArgumentTypeError(f"a size must be at least {2 * DOCS_PER_QUERY} "
                                         f"documents, got {text!r}")
    return n


def free_ports(k: int):
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(k)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def make_data(n_docs: int):
    import torch

    from torchrankboost.data import make_letor

    return make_letor(n_docs // DOCS_PER_QUERY, DOCS_PER_QUERY, F_DEFAULT, seed=0,
                      dtype=torch.float32)


# ============================================================================ workers
def worker_trb(args) -> dict:
    """One rank of a torchrankboost fit; rank 0 returns the per-round times and bytes."""
    import torch

    from torchrankboost import Booster, RegressionTree
    from torchrankboost.parallel import get_context
    from torchrankboost.losses import ExponentialPairwiseLoss

    torch.set_num_threads(args.threads)
    if args.world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    ctx = get_context(args.world > 1)
    data = make_data(args.size)
    mine = data.shard(ctx.rank, ctx.world_size) if ctx.enabled else data
    del data
    marks, nbytes, leaves, comm = [], [], [], []
    in_comm = [0.0]
    if ctx.enabled:  # time spent in the all-reduces (transfer + waiting for the other rank)
        reduce = ctx.all_reduce_sum

        def timed(t):
            t0 = time.perf_counter()
            out = reduce(t)
            in_comm[0] += time.perf_counter() - t0
            return out

        ctx.all_reduce_sum = timed

    class Clock:
        def on_round_end(self, ranker, record):
            marks.append(time.perf_counter())
            nbytes.append(ctx.bytes_reduced)
            comm.append(in_comm[0])
            leaves.append(len(record["learner"].get("leaf_value", [])) or None)
            ctx.reset_counters()
            in_comm[0] = 0.0

    booster = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=31),
                      n_rounds=args.rounds, learning_rate=0.1, verbose=False,
                      n_threads=args.threads, distributed=ctx)
    ctx.reset_counters()
    t0 = time.perf_counter()
    booster.fit(mine.X, mine.labels, mine.groups, callbacks=[Clock()])
    fit_s = time.perf_counter() - t0
    out = {"marks": [m - t0 for m in marks], "bytes": nbytes, "leaves": leaves, "comm": comm,
           "fit_s": fit_s, "n_docs": len(mine), "kernel": booster.learner.kernel_}
    if ctx.enabled:  # the histogram slots that can hold rows (what a histogram sends)
        p = booster.learner.prepare(mine.X, context=ctx)
        out["used_slots"] = int(p.num_bins.sum() + p.has_missing.sum())
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return out


def worker_lgb(args) -> dict:
    """One machine of a LightGBM fit (data-parallel with ``--world 2``)."""
    import lightgbm as lgb
    import numpy as np

    data = make_data(args.size)
    mine = data.shard(args.rank, args.world) if args.world > 1 else data
    X = mine.X.numpy().astype(np.float32)
    y = mine.labels.numpy().astype(np.int32)
    sizes = mine.groups.sizes.numpy()
    params = dict(objective="lambdarank", num_leaves=31, learning_rate=0.1,
                  min_data_in_leaf=20, max_bin=255, num_threads=args.threads, verbose=-1,
                  deterministic=True, force_row_wise=True)
    if args.world > 1:
        ports = [int(p) for p in args.ports.split(",")]
        params.update(tree_learner="data", num_machines=args.world, pre_partition=True,
                      machines=",".join(f"127.0.0.1:{p}" for p in ports),
                      local_listen_port=ports[args.rank], time_out=2)
    marks = []
    t0 = time.perf_counter()
    ds = lgb.Dataset(X, y, group=sizes, params={"max_bin": 255})
    lgb.train(params, ds, num_boost_round=args.rounds,
              callbacks=[lambda env: marks.append(time.perf_counter())])
    return {"marks": [m - t0 for m in marks], "fit_s": time.perf_counter() - t0,
            "n_docs": len(mine)}


# ============================================================================ driver
def run_config(lib: str, size: int, world: int, threads: int, rounds: int,
               timeout: float) -> dict:
    """Run one configuration in ``world`` fresh processes; rank 0's result (or
    ``{"error": ...}``)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_dist_"))
    ports = free_ports(world + 1)
    procs = []
    for r in range(world):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), RANK=str(r),
                   LOCAL_RANK=str(r), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[-1]))
        if world == 1:
            for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
                env.pop(k)
        cmd = [sys.executable, __file__, "--worker", lib, "--rank", str(r), "--world",
               str(world), "--threads", str(threads), "--size", str(size), "--rounds",
               str(rounds), "--ports", ",".join(map(str, ports[:world])),
               "--out", str(tmp / f"rank{r}.json")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    errs = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            errs.append(err)
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                p.kill()
        return {"error": f"timed out after {timeout:.0f} s"}
    if any(p.returncode != 0 for p in procs):
        tail = next((e for p, e in zip(procs, errs) if p.returncode != 0), "")
        return {"error": (tail.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads((tmp / "rank0.json").read_text())


def per_tree(res: dict) -> float:
    """The median round time after the first round."""
    m = res["marks"]
    d = [b - a for a, b in zip(m[:-1], m[1:])]
    return statistics.median(d) if d else float("nan")


def volume_bytes(leaves: float, n_features: int) -> float:
    return leaves * n_features * SLOTS * 3 * 8 + 2 * leaves * 8


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="800k",
                    help="comma-separated training sizes in documents (default 800k)")
    ap.add_argument("--rounds", type=int, default=20, help="trees per fit (default 20)")
    ap.add_argument("--no-lightgbm", action="store_true", help="skip the LightGBM rows")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per configuration")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the results")
    # worker mode (internal)
    ap.add_argument("--worker", choices=("trb", "lgb"), help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ports", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (the first round is not timed)")
    if args.worker:
        res = (worker_trb if args.worker == "trb" else worker_lgb)(args)
        if args.rank == 0:
            Path(args.out).write_text(json.dumps(res))
        return 0

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    configs = [("trb", 1, 1), ("trb", 1, 2), ("trb", 2, 1)]
    if not args.no_lightgbm:
        try:
            import lightgbm  # noqa: F401

            configs += [("lgb", 1, 1), ("lgb", 1, 2), ("lgb", 2, 1)]
        except ImportError:
            print("LightGBM is not installed: its rows are skipped")
    results = {}
    for size in sizes:
        print(f"\n{size:,} documents ({size // DOCS_PER_QUERY} queries x ~{DOCS_PER_QUERY}, "
              f"{F_DEFAULT} features), {args.rounds} trees of 31 leaves; seconds per tree = "
              f"median round time after the first", flush=True)
        rows = {}
        for lib, world, threads in configs:
            t0 = time.perf_counter()
            res = run_config(lib, size, world, threads, args.rounds, args.timeout)
            rows[(lib, world, threads)] = res
            note = res.get("error") or f"{per_tree(res):.3f} s/tree"
            print(f"  ran {lib} {world}x{threads}: {note} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
        results[size] = rows
        print_table(size, rows)
    print_volume(results)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {str(s): {f"{l}-{w}x{t}": r for (l, w, t), r in rows.items()}
             for s, rows in results.items()}, indent=1))
    return 0


def print_table(size: int, rows: dict) -> None:
    head = (f"{'method':<34} {'procs x threads':>15} {'s/tree':>8} {'speed-up':>9} "
            f"{'MB reduced/tree':>16} {'s in all-reduce':>16}")
    print("\n" + head + "\n" + "-" * len(head))
    names = {"trb": "trb Booster(exp, RegressionTree)", "lgb": "LightGBM lambdarank"}
    for (lib, world, threads), res in rows.items():
        label = names[lib] + (" data-parallel" if lib == "lgb" and world > 1 else "")
        pt = f"{world} x {threads}"
        if "error" in res:
            print(f"{label:<34} {pt:>15}  skipped: {res['error']}")
            continue
        base = rows.get((lib, 1, 1), {})
        t = per_tree(res)
        sp = (per_tree(base) / t) if base and "error" not in base else float("nan")
        mb = cs = ""
        if lib == "trb" and world > 1:
            b, c = res["bytes"][1:], res["comm"][1:]
            mb = f"{statistics.median(b) / 1e6:.2f}" if b else ""
            cs = f"{statistics.median(c):.3f}" if c else ""
        print(f"{label:<34} {pt:>15} {t:>8.3f} {sp:>8.2f}x {mb:>16} {cs:>16}")


def print_volume(results: dict) -> None:
    print("\nCommunication per tree (all-reduce, float64): the root's histogram and one "
          "smaller child's per split, F·S·3 values each (S = 256 slots), plus the 2L leaf "
          "sums:\n  V = L·F·S·3·8 + 16·L bytes  (a learner reducing both children: "
          "2(L-1)+1 histograms); sent compacted to the U slots that can hold rows: "
          "V' = L·U·3·8 + 16·L")
    for size, rows in results.items():
        res = rows.get(("trb", 2, 1))
        if not res or "error" in res:
            continue
        leaves = [x for x in res["leaves"][1:] if x]
        L = statistics.mean(leaves) if leaves else 31
        v = volume_bytes(L, F_DEFAULT)
        U = res.get("used_slots", F_DEFAULT * SLOTS)
        vc = L * U * 3 * 8 + 16 * L
        meas = statistics.median(res["bytes"][1:])
        print(f"  {size:,} documents: L = {L:.1f} leaves on average, F = {F_DEFAULT}: "
              f"V = {v / 1e6:.2f} MB per tree; U = {U} of {F_DEFAULT * SLOTS} slots: "
              f"V' = {vc / 1e6:.2f} MB; measured {meas / 1e6:.2f} MB (bytes_reduced, with the "
              f"few small per-round vectors)")
        for W in (2, 8, 64):
            per_rank = 2 * (W - 1) / W * vc
            print(f"    W = {W:>2} ranks, ring all-reduce: each rank sends and receives "
                  f"~{per_rank / 1e6:.1f} MB per tree (2(W-1)/W·V', "
                  f"{2 * (W - 1) / W * v / 1e6:.1f} MB uncompacted); at 10 Gbit/s "
                  f"~{per_rank * 8 / 10e9 * 1e3:.0f} ms, at 100 Gbit/s "
                  f"~{per_rank * 8 / 100e9 * 1e3:.1f} ms")
        break


if __name__ == "__main__":
    sys.exit(main())
