"""Benchmark: torchrankboost.metrics NDCG@10 and MAP against a per-query numpy loop.

10^6 documents in 10^4 queries of random sizes (1..199, mean ~100), random float32 scores,
graded labels 0..4. Each implementation runs ``--repeats`` times; medians and the ratio
(loop / vectorised) are printed side by side, after checking that both agree. The two
implementations alternate (the machine may be shared), and ``--threads`` sets torch's
intra-op threads (the loop is single-threaded numpy).

    python scripts/bench_metrics.py [--docs 1000000] [--queries 10000] [--repeats 5] [--device cpu]
"""

import argparse
import statistics
import time

import numpy as np
import torch

from torchrankboost import Groups
from torchrankboost.metrics import mean_average_precision, ndcg_at_k


def loop_ndcg(s, y, offsets, k=10):
    out = np.empty(len(offsets) - 1)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    for q in range(len(offsets) - 1):
        a, b = offsets[q], offsets[q + 1]
        sq, yq = s[a:b], y[a:b]
        order = np.argsort(-sq, kind="stable")
        gains = 2.0 ** yq - 1.0
        kk = min(k, b - a)
        dcg = float(np.dot(gains[order[:kk]], disc[:kk]))
        ideal = np.sort(gains)[::-1][:kk]
        idcg = float(np.dot(ideal, disc[:kk]))
        out[q] = dcg / idcg if idcg > 0 else 1.0
    return out.mean()


def loop_map(s, y, offsets):
    out = np.empty(len(offsets) - 1)
    for q in range(len(offsets) - 1):
        a, b = offsets[q], offsets[q + 1]
        order = np.argsort(-s[a:b], kind="stable")
        rel = (y[a:b][order] > 0).astype(np.float64)
        R = rel.sum()
        if R == 0:
            out[q] = 1.0
            continue
        prec = np.cumsum(rel) / np.arange(1, b - a + 1)
        out[q] = float((prec * rel).sum() / R)
    return out.mean()


def timeit_pair(ours, ref, repeats, sync=None):
    """Alternate the two implementations (the machine is shared: interleaving exposes both
    to the same load); return the median times and the last values."""
    t_o, t_r, v_o, v_r = [], [], None, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        v_o = ours()
        if sync is not None:
            sync()
        t_o.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        v_r = ref()
        t_r.append(time.perf_counter() - t0)
    return statistics.median(t_o), statistics.median(t_r), float(v_o), float(v_r)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    mean = args.docs / args.queries
    sizes = rng.integers(1, int(2 * mean), size=args.queries)
    sizes[-1] += args.docs - sizes.sum()  # exact total
    if sizes[-1] < 1:
        raise SystemExit("bad size draw; change --seed")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    s = rng.random(args.docs).astype(np.float32)
    y = rng.integers(0, 5, size=args.docs).astype(np.float32)

    dev = torch.device(args.device)
    st = torch.from_numpy(s).to(dev)
    yt = torch.from_numpy(y).to(dev)
    g = Groups.from_sizes(torch.from_numpy(sizes), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    s64, y64 = s.astype(np.float64), y.astype(np.float64)

    print(f"{args.docs} documents, {args.queries} queries (sizes {sizes.min()}..{sizes.max()}), "
          f"device {dev}, torch threads {torch.get_num_threads()}, {args.repeats} repeats, medians")
    print(f"{'metric':<10} {'torchrankboost':>15} {'numpy loop':>12} {'ratio':>8}   values")
    rows = [
        ("NDCG@10", lambda: ndcg_at_k(st, yt, g, k=10), lambda: loop_ndcg(s64, y64, offsets, 10)),
        ("MAP", lambda: mean_average_precision(st, yt, g), lambda: loop_map(s64, y64, offsets)),
    ]
    for name, ours, ref in rows:
        ours()  # warm-up (group_index/position caches are per Groups object, built here)
        t_ours, t_ref, v_ours, v_ref = timeit_pair(ours, ref, args.repeats, sync)
        assert abs(v_ours - v_ref) < 1e-9, (name, v_ours, v_ref)
        print(f"{name:<10} {t_ours * 1e3:>12.1f} ms {t_ref * 1e3:>9.1f} ms {t_ref / t_ours:>7.1f}x"
              f"   {v_ours:.6f} / {v_ref:.6f}")


if __name__ == "__main__":
    main()
