"""LambdaRankExpLoss at scale: forward + backward on one query of 10^6 documents (1 thread).

The exact |ΔNDCG|-weighted exponential pair loss (every pair, no truncation) by dominance
sums: O(n log n) time, O(n) memory. Prints the median wall time and process CPU time of
``--repeats`` runs (the CPU time is the better figure on a shared machine), the peak of
the float64 working set is O(n). The MQ2008 5-fold comparison with LightGBM lambdarank is
``python scripts/bench_boost.py --only mq2008 --methods trb-lambdarank-exp,lgb-lambdarank
--threads 1``.

    python scripts/exp_lambdarank.py --docs 1000000 --grades 5 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from torchrankboost import Groups, LambdaRankExpLoss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--grades", type=int, default=5)
    ap.add_argument("--queries", type=int, default=1, help="split the documents evenly")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    n, G = args.docs, args.queries
    sizes = [n // G + (1 if i < n % G else 0) for i in range(G)]
    groups = Groups.from_sizes(sizes)
    dt = getattr(torch, args.dtype)
    y = torch.randint(0, args.grades, (n,), generator=gen).to(dt)
    s0 = (torch.randn(n, generator=gen, dtype=torch.float64) + 0.5 * y).to(dt)
    bound = LambdaRankExpLoss().bind(y, groups)
    wall, cpu = [], []
    for _ in range(args.repeats + 1):
        s = s0.clone().requires_grad_()
        t0, c0 = time.perf_counter(), time.process_time()
        bound(s).backward()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    wall, cpu = wall[1:], cpu[1:]  # the first run warms up
    print(f"LambdaRankExpLoss forward+backward, {G} quer{'y' if G == 1 else 'ies'} of "
          f"{n:,} documents in all, {args.grades} grades, {args.dtype}, {args.threads} "
          f"thread(s): median wall {statistics.median(wall):.3f} s, median CPU "
          f"{statistics.median(cpu):.3f} s (min wall {min(wall):.3f} s; "
          f"{args.repeats} runs)")
    return statistics.median(wall)


if __name__ == "__main__":
    main()
