"""Benchmark: prediction time of a boosted tree ensemble, ours against where it is exported.

A tree ensemble (``--trees`` rounds × ``--leaves`` leaves, exponential pairwise loss) is
fitted on ``--train-n`` synthetic LETOR documents (``make_letor``, ``--features`` features,
NaNs in some features) and then scores ``--n`` documents of the same kind (default 800k ×
136 features × 100 trees) with

* ``trb.predict``           ``Ensemble.predict`` (the compiled traversal, one tree at a time
  over a row batch of ``--batch-size`` rows; default: the method's own 262144)
* ``trb.predict[bs=B]``     the same with the row batches of ``--also-batch`` (B rows)
* ``to_torch cpu``          the ``to_torch`` module (plain tensor ops), in chunks of
  ``--torch-chunk`` rows; ``to_torch cuda`` too when CUDA is present (inputs already there)
* ``lightgbm``              ``lightgbm.Booster(model_file=to_lightgbm(...)).predict(X,
  raw_score=True)``
* ``onnxruntime``           the ``to_onnx`` graph in an ``InferenceSession``
* ``treelite gtil``         ``treelite.gtil.predict`` of ``to_treelite`` (when installed)

and, when ``model.predict(X, contrib=True)`` exists (SHAP contributions), its time beside
LightGBM's ``pred_contrib`` on the first ``--shap-n`` documents. Everything runs with
``--threads`` threads (torch intra-op, LightGBM ``num_threads``, onnxruntime intra-op,
Treelite ``nthread``); times are medians of ``--repeats`` runs, with the ratio to LightGBM.
Every method's scores are checked against ``model.predict`` first (1e-5 · (1 + max|s|)).

    python scripts/bench_predict.py                 # 800k × 136 × 100 trees, 1 thread
    python scripts/bench_predict.py --n 200000 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.export import to_lightgbm, to_onnx, to_torch
from torchrankboost.losses import ExponentialPairwiseLoss


def median_time(fn, repeats: int):
    """``(median seconds, last result)`` of ``repeats`` calls of ``fn()``."""
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def data(n: int, F: int, seed: int):
    """``(X, y, groups)``: ``n`` synthetic documents (~100 per query), 10 % NaN in the
    first three features."""
    X, y, g = make_letor(max(1, n // 100), 100, F, seed=seed, size_spread=0.0)
    X = X.clone()
    gen = torch.Generator().manual_seed(seed)
    for f in range(min(3, F)):
        X[torch.rand(X.shape[0], generator=gen) < 0.1, f] = float("nan")
    return X, y, g


def fit(args):
    X, y, g = data(args.train_n, args.features, 0)
    t = time.perf_counter()
    ens = Booster(ExponentialPairwiseLoss(),
                  RegressionTree(max_leaves=args.leaves, min_samples_leaf=20),
                  n_rounds=args.trees, learning_rate=0.1).fit(X, y, g)
    print(f"fitted {ens.n_rounds} trees × ≤{args.leaves} leaves on {X.shape[0]} docs in "
          f"{time.perf_counter() - t:.1f} s")
    return ens


def chunked(module, X, chunk: int):
    with torch.no_grad():
        return torch.cat([module(X[i:i + chunk]) for i in range(0, X.shape[0], chunk)])


def methods(ens, X, args, tmp: Path):
    """``{name: zero-argument callable returning (n,) scores}``."""
    out = {"trb.predict": lambda: ens.predict(X, batch_size=args.batch_size)}
    for bs in args.also_batch:
        out[f"trb.predict[bs={bs}]"] = lambda bs=bs: ens.predict(X, batch_size=bs)
    module = to_torch(ens)
    out["to_torch cpu"] = lambda: chunked(module, X, args.torch_chunk)
    if torch.cuda.is_available():
        mod_gpu, X_gpu = module.to("cuda"), X.to("cuda")

        def on_gpu():
            s = chunked(mod_gpu, X_gpu, args.torch_chunk * 8)
            torch.cuda.synchronize()
            return s.cpu()

        out["to_torch cuda"] = on_gpu
    Xn = X.numpy()
    try:
        import lightgbm as lgb

        to_lightgbm(ens, tmp / "m.txt")
        booster = lgb.Booster(model_file=str(tmp / "m.txt"))
        out["lightgbm"] = lambda: booster.predict(Xn, raw_score=True, num_threads=args.threads)
    except ImportError:
        print("lightgbm not installed: no LightGBM column")
    try:
        import onnxruntime as ort

        to_onnx(ens, tmp / "m.onnx")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(tmp / "m.onnx"), opts,
                                    providers=["CPUExecutionProvider"])
        out["onnxruntime"] = lambda: sess.run(["scores"], {"X": Xn})[0][:, 0]
    except ImportError:
        print("onnx / onnxruntime not installed: no ONNX column")
    try:
        import treelite

        from torchrankboost.export import to_treelite

        tl = to_treelite(ens)
        out["treelite gtil"] = lambda: treelite.gtil.predict(
            tl, Xn, nthread=args.threads, pred_margin=True).reshape(-1)
    except ImportError:
        pass
    return out


def contrib_methods(ens, X, args, tmp: Path):
    """SHAP contributions: ours (when ``predict(..., contrib=True)`` exists) and LightGBM's."""
    Xs = X[:args.shap_n]
    try:
        ens.predict(Xs[:2], contrib=True)
    except TypeError:
        print("model.predict(X, contrib=True) not available here: no SHAP row")
        return {}
    out = {"trb contrib": lambda: ens.predict(Xs, contrib=True)}
    try:
        import lightgbm as lgb

        booster = lgb.Booster(model_file=str(tmp / "m.txt"))
        Xn = Xs.numpy()
        out["lightgbm pred_contrib"] = lambda: booster.predict(
            Xn, pred_contrib=True, num_threads=args.threads)
    except ImportError:
        pass
    return out


def as_numpy(s):
    return s.detach().cpu().numpy() if isinstance(s, torch.Tensor) else np.asarray(s)


def run(table: dict, ref, repeats: int, reference: str, n: int, title: str):
    """Time every method (the reference first), printing each row as it is measured."""
    order = sorted(table, key=lambda name: name != reference)
    print(f"\n{title}")
    print(f"{'method':<24} {'median s':>10} {'ns/doc':>9} {'vs ' + reference:>16}", flush=True)
    rows = {}
    for name in order:
        fn = table[name]
        s = fn()  # warm up (lazy compiles, first-touch allocations), and check the scores
        if ref is not None:
            s = as_numpy(s).reshape(-1)
            err = float(np.abs(s - ref).max())
            assert err <= 1e-5 * (1 + float(np.abs(ref).max())), f"{name}: max error {err}"
        rows[name] = sec = median_time(fn, repeats)[0]
        base = rows.get(reference)
        ratio = f"{sec / base:.2f}x" if base else "-"
        print(f"{name:<24} {sec:>10.3f} {1e9 * sec / n:>9.1f} {ratio:>16}", flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=800_000, help="documents to score (800k)")
    p.add_argument("--features", type=int, default=136)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--leaves", type=int, default=31)
    p.add_argument("--train-n", type=int, default=20_000, help="documents to fit on")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=262144,
                   help="row batch of trb.predict (its default: 262144)")
    p.add_argument("--also-batch", type=int, nargs="*", default=[4096],
                   help="other row batches of trb.predict to time")
    p.add_argument("--torch-chunk", type=int, default=32768)
    p.add_argument("--shap-n", type=int, default=50_000, help="documents for SHAP")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    ens = fit(args)
    X = data(args.n, args.features, 1)[0]
    print(f"scoring {X.shape[0]} docs × {X.shape[1]} features, {args.threads} thread(s), "
          f"median of {args.repeats}")
    ref = ens.predict(X).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        run(methods(ens, X, args, Path(tmp)), ref, args.repeats, "lightgbm", X.shape[0],
            "prediction")
        shap = contrib_methods(ens, X, args, Path(tmp))
        if shap:
            run(shap, None, args.repeats, "lightgbm pred_contrib", min(args.shap_n, X.shape[0]),
                f"SHAP contributions ({min(args.shap_n, X.shape[0])} docs)")


if __name__ == "__main__":
    main()
