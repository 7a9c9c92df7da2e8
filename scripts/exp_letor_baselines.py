"""Experiment 5: the library's losses and algorithms on MQ2008 beside LightGBM and
XGBoost.

LETOR 4.0 MQ2008 (QueryLevelNorm), the five official folds. For each fold: train on
``train.txt``, choose the number of rounds on ``vali.txt`` (early stopping on validation
NDCG@10, patience ``--patience``; the model is truncated to its best round), report
NDCG@1/3/5/10 and MAP on ``test.txt``; mean ± std over folds.

Methods (trees: 31 leaves, at least 20 documents per leaf, 255 bins, learning rate 0.1, at
most ``--rounds`` rounds, for ours and the peers alike):

* ``boost/<loss>``: :class:`Booster` with a :class:`RegressionTree`, line search, for every
  loss of the library that applies to graded queries: ``exponential`` (RankBoost's loss),
  ``pnorm_push`` (p = 4, graded extension), ``qbrank`` (w = 0.5, τ = grade difference,
  global diagonal bound), ``hinge`` (pairwise hinge, curvature bound), ``squared_hinge``,
  ``squared_error`` (GBT) and ``adaboost`` (labels > 0 as positives). (``SmoothMarginLoss``
  needs the model's ‖λ‖₁ as its scale, so it is not a tree-boosting loss; the smooth margin
  algorithm is for stumps, see ``results/README``.)
* ``QBRank``: :class:`QBRank` (Zheng's Algorithm 2 row weights, same tree, shrinkage 0.1).
* ``RB-C``: :class:`RankBoost` ``"rb-c"`` with stumps (≤ 255 thresholds), ``--rb-rounds``
  rounds, test read at the validation-best NDCG@10 round. (RB-D and RankBoost+ on the same
  folds: ``results/rankboost_plus/``; ``--with-rb`` adds them here, slow.)
* ``RankSVM``: :class:`RankSVM` (linear, squared hinge), C = 0.1.
* ``lightgbm/lambdarank``: LightGBM ``objective="lambdarank"``; ``xgboost/rank:pairwise``:
  XGBoost ``tree_method="hist"``, ``grow_policy="lossguide"``; both with 2 threads and
  early stopping on validation NDCG@10.

Evaluator for every method: :mod:`torchrankboost.metrics` with the LETOR tool convention (a
query without a relevant document scores 0 in NDCG and AP; gain 2^l - 1; score ties keep the
file order). The ``empty = 1`` convention of LightGBM/XGBoost is in the CSV too.

Run::

    python scripts/exp_letor_baselines.py            # 5 folds → results/letor_baselines/
    python scripts/exp_letor_baselines.py --quick    # fold 1, 30 rounds (writes to $TMPDIR)
    python scripts/exp_letor_baselines.py --folds 1,2 ; ... --folds 3,4,5 ; ... --report
                                                     # split over processes, then merge
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost import metrics as M
from torchrankboost import losses as L
from torchrankboost.boosting import Booster, RegressionTree, Stumps
from torchrankboost.boosting.papers import QBRank, RankBoost, RankBoostPlus, RankSVM
from torchrankboost.data import load_letor_fold
from torchrankboost.data import data_root
from torchrankboost.losses.pointwise import SquaredErrorLoss
from _results_io import read_csv, write_csv  # noqa: E402,F401 (scripts/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()  # $TORCHRANKBOOST_DATA, else ./data
OUT = ROOT / "results" / "letor_baselines"
COLS = ("NDCG@1", "NDCG@3", "NDCG@5", "NDCG@10", "MAP")
LEAVES, LR, MIN_LEAF = 31, 0.1, 20


def evaluate(s, d, empty):
    s = torch.as_tensor(np.asarray(s), dtype=torch.float64)
    y = d.labels.to(torch.float64)
    out = {f"NDCG@{k}": float(M.ndcg_at_k(s, y, d.groups, k=k, empty=empty)) for k in (1, 3, 5, 10)}
    out["MAP"] = float(M.mean_average_precision(s, y, d.groups, empty=empty))
    return out


def tree():
    return RegressionTree(max_leaves=LEAVES, min_samples_leaf=MIN_LEAF, n_bins=255)


BOOST_LOSSES = {
    "exponential": (lambda: L.ExponentialPairwiseLoss(), "diag"),
    "pnorm_push": (lambda: L.PNormPushLoss(p=4.0), "diag"),
    "qbrank": (lambda: L.QBRankLoss(w=0.5, tau="grade_difference"), "bound"),
    "hinge": (lambda: L.PairwiseHingeLoss(), "bound"),
    "squared_hinge": (lambda: L.PairwiseHingeLoss(squared=True), "diag"),
    "squared_error": (lambda: SquaredErrorLoss(), "diag"),
    "adaboost": (lambda: L.AdaBoostLoss(), "diag"),
}


def run_boost(name, tr, va, args):
    make, curv = BOOST_LOSSES[name]
    b = Booster(make(), tree(), n_rounds=args.rounds, learning_rate=LR, step="line_search",
                curvature=curv, seed=0)
    ens = b.fit(tr.X, tr.labels, tr.groups, eval_set=[tuple(va)], eval_metric="ndcg@10",
                early_stopping_rounds=args.patience)
    return ens.predict, ens.n_rounds


def run_qbrank(tr, va, args):
    b = QBRank(w=0.5, tau="grade_difference", learning_rate=LR, learner=tree(), n_rounds=args.rounds)
    ens = b.fit(tr.X, tr.labels, tr.groups, eval_set=[tuple(va)], eval_metric="ndcg@10",
                early_stopping_rounds=args.patience)
    return ens.predict, ens.n_rounds


def run_rb(variant, tr, va, args):
    st = Stumps(max_thresholds=255, seed=0)
    algo = (RankBoostPlus(learner=st, n_rounds=args.rb_rounds, seed=0,
                          max_pair_entries=400_000_000) if variant == "rb+"
            else RankBoost(variant, learner=st, n_rounds=args.rb_rounds))
    model = algo.fit(tr.X, tr.labels, tr.groups)
    best, best_t = -1.0, 0
    for t, s in enumerate(model.staged_predict(va.X), start=1):
        v = float(M.ndcg_at_k(s, va.labels, va.groups, k=10))
        if v > best:
            best, best_t = v, t
    return (lambda X: model.predict(X, n_rounds=best_t)), best_t


def run_ranksvm(tr, va, args):
    m = RankSVM(C=0.1).fit(tr.X, tr.labels, tr.groups)
    return m.predict, 0


def run_lgb(tr, va, args):
    import lightgbm as lgb

    dtr = lgb.Dataset(tr.X.numpy(), tr.labels.numpy(), group=tr.groups.sizes.numpy(),
                      params={"max_bin": 255, "verbose": -1}, free_raw_data=False)
    dva = lgb.Dataset(va.X.numpy(), va.labels.numpy(), group=va.groups.sizes.numpy(),
                      reference=dtr, free_raw_data=False)
    params = dict(objective="lambdarank", metric="ndcg", eval_at=[10], num_leaves=LEAVES,
                  learning_rate=LR, min_data_in_leaf=MIN_LEAF, min_sum_hessian_in_leaf=1e-3,
                  max_bin=255, num_threads=2, verbose=-1, seed=0, deterministic=True,
                  force_row_wise=True)
    bst = lgb.train(params, dtr, num_boost_round=args.rounds, valid_sets=[dva],
                    callbacks=[lgb.early_stopping(args.patience, verbose=False)])
    best = bst.best_iteration if bst.best_iteration > 0 else bst.current_iteration()
    return (lambda X: bst.predict(X.numpy(), num_iteration=best)), best


def run_xgb(tr, va, args):
    import xgboost as xgb

    dtr = xgb.DMatrix(tr.X.numpy(), label=tr.labels.numpy(), qid=tr.groups.group_index.numpy(),
                      nthread=2)
    dva = xgb.DMatrix(va.X.numpy(), label=va.labels.numpy(), qid=va.groups.group_index.numpy(),
                      nthread=2)
    params = {"objective": "rank:pairwise", "tree_method": "hist", "nthread": 2, "eta": LR,
              "max_leaves": LEAVES, "grow_policy": "lossguide", "max_depth": 0,
              "min_child_weight": 1e-3, "max_bin": 255, "eval_metric": "ndcg@10", "seed": 0}
    bst = xgb.train(params, dtr, num_boost_round=args.rounds, evals=[(dva, "vali")],
                    early_stopping_rounds=args.patience, verbose_eval=False)
    best = bst.best_iteration + 1
    return (lambda X: bst.predict(xgb.DMatrix(X.numpy(), nthread=2),
                                  iteration_range=(0, best))), best


def methods(args):
    m = {f"boost/{k}": (lambda tr, va, a, k=k: run_boost(k, tr, va, a)) for k in BOOST_LOSSES}
    m["QBRank"] = run_qbrank
    m["RB-C (stumps)"] = lambda tr, va, a: run_rb("rb-c", tr, va, a)
    if args.with_rb:
        m["RB-D (stumps)"] = lambda tr, va, a: run_rb("rb-d", tr, va, a)
        m["RankBoost+ (stumps)"] = lambda tr, va, a: run_rb("rb+", tr, va, a)
    m["RankSVM (linear)"] = run_ranksvm
    m["lightgbm/lambdarank"] = run_lgb
    m["xgboost/rank:pairwise"] = run_xgb
    return m


def run(args):
    todo = methods(args)
    if args.methods:
        todo = {k: v for k, v in todo.items() if k in args.methods.split(",")}
    for f in args.folds:
        tr, va, te = load_letor_fold(DATA / "mq2008" / f"Fold{f}", dtype=torch.float32)
        rows = []
        for name, fn in todo.items():
            t0 = time.perf_counter()
            try:
                predict, rounds = fn(tr, va, args)
                err = ""
            except Exception as e:  # a method that cannot run on this data is reported, not fatal
                predict, rounds, err = None, 0, f"{type(e).__name__}: {e}"[:200]
            fit_s = time.perf_counter() - t0
            row = {"fold": f, "method": name, "rounds": rounds, "fit_s": round(fit_s, 1),
                   "error": err}
            if predict is not None:
                s = predict(te.X)
                row.update(evaluate(s, te, 0.0))
                row.update({f"{k} (empty=1)": v for k, v in evaluate(s, te, 1.0).items()})
            rows.append(row)
            write_csv(OUT / "folds" / f"fold{f}.csv", rows)  # after every method (partial runs)
            print(f"[fold {f}] {name:24s} {fit_s:7.1f}s rounds={rounds} "
                  + (err or " ".join(f"{c}={row[c]:.4f}" for c in COLS)), flush=True)
    (OUT / "config.json").write_text(json.dumps(
        {"rounds": args.rounds, "rb_rounds": args.rb_rounds, "patience": args.patience,
         "leaves": LEAVES, "learning_rate": LR, "min_data_in_leaf": MIN_LEAF}, indent=1) + "\n")




def report():
    rows = []
    for p in sorted((OUT / "folds").glob("fold*.csv")):
        with open(p) as fh:
            rows += list(csv.DictReader(fh))
    names = list(dict.fromkeys(r["method"] for r in rows))
    folds = sorted({int(r["fold"]) for r in rows})
    md = [f"### MQ2008, test metrics, mean ± std over folds {folds} (LETOR convention: a query "
          "without a relevant document scores 0)\n",
          "| method | " + " | ".join(COLS) + " | rounds (per fold) | fit s (median) |",
          "|---|" + "---|" * (len(COLS) + 2)]
    for n in names:
        rr = [r for r in rows if r["method"] == n and not r.get("error")]
        if not rr:
            errs = {r["error"] for r in rows if r["method"] == n}
            md.append(f"| {n} | " + " | ".join("–" for _ in COLS) + f" | failed: {'; '.join(errs)} | |")
            continue
        cells = []
        for c in COLS:
            v = np.array([float(r[c]) for r in rr])
            cells.append(f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0:.4f}")
        md.append(f"| {n} | " + " | ".join(cells) + " | "
                  + ",".join(r["rounds"] for r in rr) + f" | {np.median([float(r['fit_s']) for r in rr]):.0f} |")
    md.append("")
    md.append("Same runs, LightGBM/XGBoost convention (a query without a relevant document scores 1):\n")
    md.append("| method | " + " | ".join(COLS) + " |")
    md.append("|---|" + "---|" * len(COLS))
    for n in names:
        rr = [r for r in rows if r["method"] == n and not r.get("error")]
        if rr:
            md.append(f"| {n} | " + " | ".join(
                f"{np.mean([float(r[c + ' (empty=1)']) for r in rr]):.4f}" for c in COLS) + " |")
    (OUT / "tables.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fold 1, 30 rounds, RB-C 30 rounds")
    ap.add_argument("--folds", type=lambda s: [int(x) for x in s.split(",")], default=None)
    ap.add_argument("--rounds", type=int, default=None, help="max trees (default 100)")
    ap.add_argument("--rb-rounds", type=int, default=None, help="RankBoost rounds (default 100)")
    ap.add_argument("--patience", type=int, default=20)
    ap.add_argument("--methods", default="", help="comma-separated subset of method names")
    ap.add_argument("--with-rb", action="store_true", help="add RB-D and RankBoost+ (slow)")
    ap.add_argument("--report", action="store_true", help="only rebuild tables.md from the CSVs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="output folder (default results/letor_baselines)")
    args = ap.parse_args()
    global OUT
    if args.out:
        OUT = Path(args.out)
    elif args.quick:  # never overwrite the committed results with a quick run
        OUT = Path(tempfile.gettempdir()) / "torchrankboost_exp_letor_baselines_quick"
    args.folds = args.folds or ([1] if args.quick else [1, 2, 3, 4, 5])
    args.rounds = args.rounds or (30 if args.quick else 100)
    args.rb_rounds = args.rb_rounds or (30 if args.quick else 100)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    if not args.report:
        run(args)
    report()
    print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
