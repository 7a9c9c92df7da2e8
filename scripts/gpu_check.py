"""GPU check: the CUDA tests, tree growth and pairwise losses on the GPU, beside CPU peers.

On a machine with a CUDA device, in this order:

1. the CUDA-marked tests (``pytest -m cuda``): exit status and pytest's summary line;
2. tree growth: ``RegressionTree(kernel="torch")`` (the pure-torch path) on CUDA tensors,
   ``--trees`` fits of ``--leaves`` leaves on the same random gradients of a synthetic
   LETOR-shaped set (``--rows`` x ``--features``), beside our CPU tree (``kernel="auto"``),
   LightGBM on the CPU, XGBoost on the CPU (``tree_method="hist"``) and XGBoost with
   ``device="cuda"`` when its build has CUDA (same leaves, 255 bins, no L2, lossguide);
   the median seconds per tree (after one warm-up tree);
3. forward + backward of the pairwise/listwise losses on ``--lists`` lists of ``--docs``
   documents (5 grades) on CUDA and on the CPU, medians of ``--repeats`` after a warm-up.

Writes ``results/gpu/gpu_check.json`` and ``results/gpu/README.md`` (device, versions, the
timings and the ratios; ``--out`` for another folder). Without a CUDA device it prints
"no CUDA device: nothing to check", writes nothing and exits 0. ``--dry-run-cpu`` runs the
same code on the CPU with tiny sizes (no pytest run), to check the script itself.

    python scripts/gpu_check.py                       # on a CUDA machine
    python scripts/gpu_check.py --no-tests --trees 10
    python scripts/gpu_check.py --dry-run-cpu --out gpu_check_dry_run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_losses import make_data, our_losses  # scripts/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
LOSSES = {"exponential": "ExponentialPairwiseLoss", "pairwise_hinge": "PairwiseHingeLoss",
          "qbrank_gd": "QBRankLoss", "listnet": "ListNetLoss", "ranknet": "RankNetLoss",
          "listmle": "ListMLELoss", "approx_ndcg": "ApproxNDCGLoss",
          "neural_ndcg": "NeuralNDCGLoss", "lambdaloss": "LambdaLoss",
          "lambdarank_exp": "LambdaRankExpLoss", "yetirank": "YetiRankLoss"}
TINY = {"rows": 2000, "features": 8, "trees": 3, "lists": 4, "docs": 50, "repeats": 2}


def median_seconds(fn, repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls after one warm-up (synchronised)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_cuda_tests() -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.strip()]
    return {"command": " ".join(cmd[1:]), "returncode": r.returncode,
            "summary": lines[-1] if lines else r.stderr.strip()[-300:]}


def tree_data(rows: int, features: int):
    from torchrankboost import make_letor

    d = make_letor(max(1, rows // 100), 100, features, seed=0, size_spread=0.0)
    g = torch.Generator().manual_seed(0)
    X = d.X.float()
    grad = torch.randn(X.shape[0], generator=g) + 0.5 * torch.nan_to_num(X[:, 0])
    hess = torch.rand(X.shape[0], generator=g) + 0.1
    return X, grad, hess


def time_our_tree(X, grad, hess, leaves, trees, device, kernel) -> float:
    from torchrankboost import RegressionTree

    tree = RegressionTree(max_leaves=leaves, min_samples_leaf=20, kernel=kernel)
    prepared = tree.prepare(X.to(device))
    target, h = (-grad / hess).to(device), hess.to(device)
    return median_seconds(lambda: tree.fit(prepared, target, h), trees, device)


def time_lightgbm(X, grad, hess, leaves, trees, threads) -> float:
    import lightgbm as lgb
    import numpy as np

    gn, hn = grad.double().numpy(), hess.double().numpy()
    params = {"num_leaves": leaves, "min_data_in_leaf": 20, "min_sum_hessian_in_leaf": 1e-3,
              "lambda_l2": 0.0, "learning_rate": 1.0, "num_threads": threads, "verbose": -1,
              "max_bin": 255, "objective": "none", "deterministic": True}
    ds = lgb.Dataset(X.numpy(), label=np.zeros(X.shape[0]), params=params, free_raw_data=False)
    booster = lgb.Booster(params=params, train_set=ds)
    return median_seconds(lambda: booster.update(fobj=lambda p, d: (gn, hn)), trees,
                          torch.device("cpu"))


def time_xgboost(X, grad, hess, leaves, trees, threads, device: str) -> float:
    import xgboost as xgb

    gn, hn = grad.double().numpy(), hess.double().numpy()
    dtrain = xgb.DMatrix(X.numpy(), nthread=threads)
    params = {"tree_method": "hist", "device": device, "max_leaves": leaves, "max_depth": 0,
              "grow_policy": "lossguide", "min_child_weight": 1e-3, "max_bin": 255,
              "eta": 1.0, "lambda": 0.0, "nthread": threads, "verbosity": 0}
    bst = xgb.Booster(params, [dtrain])
    it = iter(range(10**9))
    return median_seconds(lambda: bst.update(dtrain, next(it), fobj=lambda p, d: (gn, hn)),
                          trees, torch.device("cpu"))


def xgboost_cuda_note():
    """None when XGBoost can train on CUDA here, else why not."""
    try:
        import xgboost as xgb
    except ImportError:
        return "xgboost not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None if xgb.build_info().get("USE_CUDA") else "xgboost built without CUDA"


def check_trees(args, device) -> dict:
    X, grad, hess = tree_data(args.rows, args.features)
    ours = f"torchrankboost {device.type} (torch kernel)"
    res = {ours: time_our_tree(X, grad, hess, args.leaves, args.trees, device, "torch"),
           "torchrankboost cpu (auto kernel)":
               time_our_tree(X, grad, hess, args.leaves, args.trees, torch.device("cpu"), "auto"),
           f"lightgbm cpu ({args.threads} threads)":
               time_lightgbm(X, grad, hess, args.leaves, args.trees, args.threads),
           f"xgboost cpu hist ({args.threads} threads)":
               time_xgboost(X, grad, hess, args.leaves, args.trees, args.threads, "cpu")}
    notes = {}
    why = xgboost_cuda_note()
    if why is None:
        res["xgboost cuda hist"] = time_xgboost(X, grad, hess, args.leaves, args.trees,
                                                args.threads, "cuda")
    else:
        notes["xgboost cuda hist"] = why
    return {"rows": int(X.shape[0]), "features": int(X.shape[1]), "leaves": args.leaves,
            "trees": args.trees, "seconds_per_tree": res, "reference": ours,
            "ratio_to_reference": {k: v / res[ours] for k, v in res.items()}, "notes": notes}


def check_losses(args, device) -> dict:
    from torchrankboost import Groups

    factories = our_losses()
    s, y = make_data(args.lists, args.docs, 5)
    out = {"lists": args.lists, "docs": args.docs, "grades": 5, "repeats": args.repeats,
           "seconds": {}}
    for key, cls in LOSSES.items():
        if key not in factories:
            out["seconds"][cls] = {"note": "not exported"}
            continue
        row = {}
        for dev in dict.fromkeys([device, torch.device("cpu")]):
            loss = factories[key][0]()
            sd, yd = s.to(dev), y.to(dev)
            g = Groups.from_sizes([args.docs] * args.lists, device=dev)

            def step():
                x = sd.clone().requires_grad_()
                loss(x, yd, g).backward()

            row[dev.type] = median_seconds(step, args.repeats, dev)
        if "cuda" in row:
            row["cpu_over_cuda"] = row["cpu"] / row["cuda"]
        out["seconds"][cls] = row
    return out


def environment(device, dry_run: bool) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    return {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cpu_count": os.cpu_count(), "dry_run": dry_run,
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def markdown(r: dict) -> str:
    e, t, lo = r["environment"], r["trees"], r["losses"]
    md = [f"# GPU check ({e['date']})", "",
          f"Device **{e['device']}**, torch {e['torch']}, CUDA {e['cuda']}, "
          f"{e['cpu_count']} CPUs{' (dry run on the CPU, tiny sizes)' if e['dry_run'] else ''}.",
          "", "Written by `python scripts/gpu_check.py`.", ""]
    ts = r["tests"]
    md += [f"CUDA tests (`{ts['command']}`): {ts['summary']} (exit {ts['returncode']})"
           if "command" in ts else "CUDA tests: skipped", ""]
    md += [f"## Tree growth: {t['rows']} x {t['features']}, {t['leaves']} leaves, median of "
           f"{t['trees']} trees", "", "| implementation | ms per tree | / ours on the device |",
           "|---|---:|---:|"]
    for k, v in t["seconds_per_tree"].items():
        md.append(f"| {k} | {v * 1e3:.1f} | {t['ratio_to_reference'][k]:.2f} |")
    md += [f"| {k} | n/a ({why}) | |" for k, why in t["notes"].items()]
    md += ["", f"## Losses, forward + backward: {lo['lists']} lists x {lo['docs']} documents, "
           f"median of {lo['repeats']}", "", "| loss | cuda ms | cpu ms | cpu / cuda |",
           "|---|---:|---:|---:|"]
    for k, row in lo["seconds"].items():
        cu = f"{row['cuda'] * 1e3:.2f}" if "cuda" in row else "-"
        cpu = f"{row['cpu'] * 1e3:.2f}" if "cpu" in row else row.get("note", "-")
        ratio = f"{row['cpu_over_cuda']:.1f}" if "cpu_over_cuda" in row else "-"
        md.append(f"| {k} | {cu} | {cpu} | {ratio} |")
    return "\n".join(md) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--trees", type=int, default=20, help="trees timed (median per tree)")
    ap.add_argument("--lists", type=int, default=100)
    ap.add_argument("--docs", type=int, default=1000, help="documents per list")
    ap.add_argument("--repeats", type=int, default=9, help="loss repeats (median)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads of LightGBM / XGBoost and of torch on the CPU")
    ap.add_argument("--no-tests", action="store_true", help="skip pytest -m cuda")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu")
    ap.add_argument("--dry-run-cpu", action="store_true",
                    help="the same code on the CPU with tiny sizes, no pytest run")
    args = ap.parse_args(argv)
    if args.dry_run_cpu:
        for k, v in TINY.items():
            setattr(args, k, v)
        args.threads, device = 1, torch.device("cpu")
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    else:
        device = torch.device("cuda")
    torch.set_num_threads(args.threads)
    r = {"environment": environment(device, args.dry_run_cpu)}
    skip = args.no_tests or args.dry_run_cpu
    r["tests"] = {"summary": "skipped"} if skip else run_cuda_tests()
    print(f"tests: {r['tests']['summary']}", flush=True)
    r["trees"] = check_trees(args, device)
    r["losses"] = check_losses(args, device)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(r, indent=2) + "\n")
    (args.out / "README.md").write_text(markdown(r))
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
