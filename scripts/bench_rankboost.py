"""RankBoost (RB-C, threshold stumps, 300 rounds) on MQ2008, side by side with RankLib's numbers.

RankLib is not installed here; its figures were measured on this machine by the project lead:
4.3 s per fold for 300 rounds with 10 thresholds per feature (``-tc 10``, its default), mean
test NDCG@10 0.7810 with empty queries scoring 1 (0.5003 with 0), and 289 s on Fold1 with every
threshold (``-tc -1``).

For each fold: load train/test (LETOR QueryLevelNorm), fit ``RankBoost("rb-c",
learner=Stumps(max_thresholds=T), n_rounds=300)`` on train (the timing includes the binning),
score test, NDCG@10 with ``empty=1`` and ``empty=0``. Prints per fold, then medians (time) and
means (NDCG) and the ratio to RankLib. Note our stumps use quantile thresholds (RankLib: evenly
spaced between min and max) and the same ``1[x > θ]`` rankers.

Usage::

    python scripts/bench_rankboost.py [--folds 1 2 3 4 5] [--thresholds 10 255 all]
                                      [--rounds 300] [--threads 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchrankboost.boosting.learners import Stumps  # noqa: E402
from torchrankboost.boosting.papers import RankBoost  # noqa: E402
from torchrankboost.data import load_letor_fold  # noqa: E402
from torchrankboost.data import dataset_path  # noqa: E402
from torchrankboost.metrics import ndcg_at_k  # noqa: E402

RANKLIB = {"10": {"seconds": 4.3, "ndcg_empty1": 0.7810, "ndcg_empty0": 0.5003},
           "all": {"seconds": 289.0}}  # "all": Fold1 only


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(dataset_path("mq2008")),
                    help="MQ2008 folder with Fold1..Fold5 (default: mq2008 under the data folder, "
                         "$TORCHRANKBOOST_DATA or ./data)")
    ap.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--thresholds", nargs="+", default=["10", "255"])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--variant", default="rb-c")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: no OpenMP stalls on a loaded machine)")
    ap.add_argument("--repeats", type=int, default=1, help="fits per fold (median time)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = Path(args.data)
    if not data.is_dir():
        print(f"data not found: {data}")
        return 1
    rows = {t: [] for t in args.thresholds}
    for fold in args.folds:
        tr, _, te = load_letor_fold(data / f"Fold{fold}")
        for t in args.thresholds:
            T = 32765 if t == "all" else int(t)
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                rb = RankBoost(args.variant, learner=Stumps(max_thresholds=T), n_rounds=args.rounds)
                model = rb.fit(tr.X, tr.labels, tr.groups)
                times.append(time.perf_counter() - t0)
            p = model.predict(te.X)
            n1 = float(ndcg_at_k(p, te.labels, te.groups, k=10, empty=1.0))
            n0 = float(ndcg_at_k(p, te.labels, te.groups, k=10, empty=0.0))
            sec = statistics.median(times)
            rows[t].append((fold, sec, n1, n0, len(model), rb.stop_reason_))
            print(f"Fold{fold} thresholds={t:>4} rounds={len(model)} time={sec:7.3f}s "
                  f"NDCG@10 empty=1 {n1:.4f} empty=0 {n0:.4f}"
                  + (f"  stop: {rb.stop_reason_}" if rb.stop_reason_ else ""), flush=True)
    print()
    print(f"{'thresholds':>10} {'median s/fold':>14} {'mean NDCG@10 (e=1)':>19} {'(e=0)':>7} "
          f"{'RankLib s':>10} {'speed-up':>9} {'RankLib NDCG (e=1, e=0)':>24}")
    for t, r in rows.items():
        if not r:
            continue
        med = statistics.median(x[1] for x in r)
        m1 = statistics.mean(x[2] for x in r)
        m0 = statistics.mean(x[3] for x in r)
        ref = RANKLIB.get(t, {})
        rs = ref.get("seconds")
        sp = f"{rs / med:8.1f}x" if rs else "       -"
        rn = (f"{ref['ndcg_empty1']:.4f}, {ref['ndcg_empty0']:.4f}" if "ndcg_empty1" in ref else "-")
        print(f"{t:>10} {med:14.3f} {m1:19.4f} {m0:7.4f} {rs if rs else '-':>10} {sp:>9} {rn:>24}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
