"""Benchmark: time to fit one 31-leaf histogram tree, torchrankboost vs LightGBM, same process.

Synthetic data (default 800k rows x 136 float32 features, like MSLR-WEB30K) or a LETOR fold's
training features (``--letor DIR``, e.g. MQ2008 Fold1: the small-data / per-split overhead
case), random gradients/hessians. LightGBM trains one boosting round with a custom objective
returning the same gradients/hessians (max_bin 255, same leaves and min_data_in_leaf, no
bagging / feature sampling), timed with ``num_threads`` = each value of ``--lgb-threads``; the
Dataset is constructed beforehand (binning timed apart on both sides, once). torch runs with
``--threads`` threads. Prints medians of ``--repeat`` runs and the ratios.

Also times histogram-kernel alternatives on the root node (``--kernels``).

    python scripts/bench_trees.py                         # full size
    python scripts/bench_trees.py --rows 200000           # quicker
    python scripts/bench_trees.py --letor mq2008/Fold1 --repeat 9   # under the data folder
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost.kernels.binning import bin_features
from torchrankboost.kernels.fixed_point import quantize
from torchrankboost.kernels.histogram import histogram
from torchrankboost.boosting.learners import RegressionTree


def timed(fn, repeat):
    ts = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def kernels(codes, grad, hess, repeat):
    """Root histogram (all rows) with alternative kernels; returns {name: seconds}."""
    n, F = codes.shape
    rows = torch.arange(n)
    w = hess.double()
    wt = -grad.double()
    values = torch.stack([wt, w], 1)
    fixed = quantize((wt, w), num_rows=n).q
    res = {}
    res["scatter 2x int64 fixed point + count (used)"] = timed(
        lambda: histogram(codes, rows, fixed, slots=256), repeat)[0]
    offs = torch.arange(F, dtype=torch.int64) * 256
    v32 = values.float()

    def index_add(dt):
        out = torch.zeros(F * 256, 3, dtype=dt)
        src3 = torch.cat([values, torch.ones(n, 1, dtype=torch.float64)], 1).to(dt)
        for s in range(0, n, 1 << 16):
            c = codes[s : s + (1 << 16)]
            idx = (c.to(torch.int64) + offs).reshape(-1)
            out.index_add_(0, idx, src3[s : s + (1 << 16)].unsqueeze(1).expand(-1, F, -1).reshape(-1, 3))
        return out

    def bincount():
        outs = []
        for s in range(0, n, 1 << 16):
            c = codes[s : s + (1 << 16)]
            idx = (c.to(torch.int64) + offs).reshape(-1)
            v = values[s : s + (1 << 16)]
            outs.append([torch.bincount(idx, weights=v[:, j : j + 1].expand(-1, F).reshape(-1), minlength=F * 256)
                         for j in range(2)] + [torch.bincount(idx, minlength=F * 256)])
        return outs

    res["index_add_ flat (n*F, 3) float64"] = timed(lambda: index_add(torch.float64), repeat)[0]
    res["index_add_ flat (n*F, 3) float32"] = timed(lambda: index_add(torch.float32), repeat)[0]
    res["bincount flat x3 float64"] = timed(bincount, repeat)[0]

    def scatter32():
        out = torch.zeros(2, F, 256)
        cnt = torch.zeros(F, 256)
        buf = torch.empty(F, 1 << 16, dtype=torch.int64)
        ones = torch.ones(1 << 16)
        for s in range(0, n, 1 << 16):
            c = codes[s : s + (1 << 16)]
            m = c.shape[0]
            idx = buf[:, :m]
            idx.copy_(c.t())
            for j in range(2):
                out[j].scatter_add_(1, idx, v32[s : s + m, j].unsqueeze(0).expand(F, m))
            cnt.scatter_add_(1, idx, ones[:m].unsqueeze(0).expand(F, m))
        return out

    res["scatter 2x float32 + count"] = timed(scatter32, repeat)[0]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=800_000)
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--min-data", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--lgb-threads", default="1,2", help="comma-separated LightGBM num_threads values")
    ap.add_argument("--letor", default=None,
                    help="LETOR fold directory (a path, or one under the data folder "
                         "$TORCHRANKBOOST_DATA / ./data): use its training features instead")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", action="store_true", help="also time histogram kernel alternatives")
    ap.add_argument("--no-lightgbm", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    if args.letor:
        from torchrankboost.data import load_letor_fold
        from torchrankboost.data import dataset_path

        fold = Path(args.letor) if Path(args.letor).is_dir() else dataset_path(args.letor)
        X = load_letor_fold(fold)[0].X.float()
        n, F = X.shape
    else:
        n, F = args.rows, args.features
        # mixture of continuous, low-cardinality and sparse-ish features
        X = torch.randn(n, F, generator=g)
        X[:, F // 2 :] = torch.floor(X[:, F // 2 :] * 3)
    grad = torch.randn(n, generator=g) + 0.5 * torch.nan_to_num(X[:, 0])
    hess = torch.rand(n, generator=g) + 0.1
    print(f"data {n} x {F}, {args.leaves} leaves, min_data_in_leaf {args.min_data}, "
          f"{args.threads} threads, torch {torch.__version__}")

    t0 = time.perf_counter()
    tree = RegressionTree(max_leaves=args.leaves, min_samples_leaf=args.min_data, min_child_weight=1e-3)
    prepared = tree.prepare(X)
    t_bin = time.perf_counter() - t0
    target = -grad / hess
    tree.fit(prepared, target, hess)  # warm-up
    t_ours, model = timed(lambda: tree.fit(prepared, target, hess), args.repeat)
    t_pred, _ = timed(lambda: model.predict_prepared(prepared), args.repeat)
    print(f"torchrankboost: binning {t_bin:.3f} s (once), fit tree median {t_ours * 1e3:.1f} ms "
          f"({model.num_leaves} leaves, depth {model.depth}), predict_prepared {t_pred * 1e3:.1f} ms")

    if args.kernels:
        for name, t in kernels(prepared.codes, grad, hess, max(1, args.repeat // 2)).items():
            print(f"  root histogram {name:40s} {t:.3f} s")

    if not args.no_lightgbm:
        import lightgbm as lgb

        Xn = X.numpy()
        gn, hn = grad.double().numpy(), hess.double().numpy()
        for th in [int(v) for v in args.lgb_threads.split(",")]:
            t0 = time.perf_counter()
            ds = lgb.Dataset(Xn, label=np.zeros(n), params={"max_bin": 255, "verbose": -1, "num_threads": th},
                             free_raw_data=False)
            ds.construct()
            t_lbin = time.perf_counter() - t0
            params = {"num_leaves": args.leaves, "min_data_in_leaf": args.min_data, "min_sum_hessian_in_leaf": 1e-3,
                      "lambda_l2": 0.0, "learning_rate": 1.0, "num_threads": th, "verbose": -1,
                      "max_bin": 255, "objective": "none", "deterministic": True}
            booster = lgb.Booster(params=params, train_set=ds)

            def fobj(preds, data):
                return gn, hn

            booster.update(fobj=fobj)  # warm-up; every update() grows one tree on the same gradients
            t_lgb, _ = timed(lambda: booster.update(fobj=fobj), args.repeat)
            print(f"LightGBM {lgb.__version__} num_threads={th}: Dataset {t_lbin:.3f} s (once), one round (tree) "
                  f"median {t_lgb * 1e3:.1f} ms ({booster.dump_model()['tree_info'][-1]['num_leaves']} leaves); "
                  f"ratio torchrankboost ({args.threads} thread) / LightGBM per tree {t_ours / t_lgb:.2f}x, "
                  f"binning {t_bin / t_lbin:.2f}x")


if __name__ == "__main__":
    main()
