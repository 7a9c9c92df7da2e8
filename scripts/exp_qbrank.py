"""Experiment 3: QBRank vs GBT vs RankSVM (Zheng et al., NIPS 2007, §5) on MQ2008.

The paper's Yahoo! data is not public; LETOR 4.0 MQ2008 (QueryLevelNorm, grades 0/1/2) stands
in. As in the paper there is one train/test split: ``Fold<k>/train.txt`` plays L2/P2 and
``Fold<k>/test.txt`` plays L3/P3 (default fold 1; ``--folds 1,2,3,4,5`` for all five).

Methods (paper settings: τ = grade difference, w = 0.5, shrinkage η = 0.05, a single
20-leaf regression tree per round, line search then shrinkage, h_0 = 0):

* ``QBRank``      :class:`QBRank` ``w=0.5`` — preferences P2 (pairs of different grades)
  *and* the labels of the training documents (the regression part covers every document).
* ``QBRank-P``    :class:`QBRank` ``w=1`` — preferences only (the paper's "QBRank on P2"
  read literally: no labelled set L).
* ``GBT``         :class:`GBT` — least-squares gradient boosting on the grades (L2),
  η = 0.05, 20 leaves, line search, h_0 = mean grade.
* ``RankSVM``     :class:`RankSVM` (linear, squared hinge, standardised features), ``C``
  chosen from {0.01, 0.1, 1} on the fold's validation NDCG@5.

Evaluation on the test part after every tree (1..``--rounds``, default 400): DCG@5
(unnormalised, gain 2^l - 1, mean over queries) and NDCG@5 (LETOR convention: a query
without a relevant document scores 0); precision at K% (K = 10..100; pairs pooled over
queries, sorted by |h(x) - h(y)|, a tie h(x) = h(y) counts as contradicting) at every 25th
tree and at the last. Output: ``results/qbrank/``.

Run::

    python scripts/exp_qbrank.py            # fold 1, 400 trees
    python scripts/exp_qbrank.py --quick    # fold 1, 60 trees, no QBRank-P (writes to $TMPDIR)
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost import metrics as M
from torchrankboost.boosting import RegressionTree
from torchrankboost.boosting.papers import GBT, QBRank, RankSVM
from torchrankboost.data import load_letor_fold
from torchrankboost.data import data_root
from _results_io import read_csv, write_csv  # noqa: E402,F401 (scripts/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()  # $TORCHRANKBOOST_DATA, else ./data
OUT = ROOT / "results" / "qbrank"
KS = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]

# Zheng et al. 2007, Table 1 (column order of GBT/RankSVM from the text extraction, unverified)
PAPER_T1 = {"QBRank": [0.9446, 0.903, 0.8611, 0.8246, 0.7938, 0.7673, 0.7435, 0.7218, 0.7015, 0.6834],
            "GBT": [0.8524, 0.8152, 0.7839, 0.7578, 0.7357, 0.7151, 0.6957, 0.6779, 0.6615, 0.6465],
            "RankSVM": [0.9328, 0.8939, 0.8557, 0.8199, 0.7899, 0.7637, 0.7399, 0.7176, 0.6977, 0.6803]}


def tree():
    return RegressionTree(max_leaves=20)


def evaluate_list(s, te):
    return {"DCG@5": float(M.dcg_at_k(s, te.labels, te.groups, k=5)),
            "NDCG@5": float(M.ndcg_at_k(s, te.labels, te.groups, k=5, empty=0.0))}


def prec(s, te):
    return [float(v) for v in M.precision_at_percent(s, te.labels, te.groups, percent=KS)]


def run(args):
    T = args.rounds or (60 if args.quick else 400)
    methods = ["QBRank", "GBT", "RankSVM"] + ([] if args.quick or args.no_pairs_only else ["QBRank-P"])
    curves, final, info = [], [], {}
    for f in args.folds:
        tr, va, te = load_letor_fold(DATA / "mq2008" / f"Fold{f}", dtype=torch.float64)
        for name in methods:
            t0 = time.perf_counter()
            if name == "RankSVM":
                best = None
                for C in (0.01, 0.1, 1.0):
                    m = RankSVM(C=C).fit(tr.X, tr.labels, tr.groups)
                    v = float(M.ndcg_at_k(m.predict(va.X), va.labels, va.groups, k=5, empty=0.0))
                    if best is None or v > best[0]:
                        best = (v, C, m)
                model = best[2]
                fit_s = time.perf_counter() - t0
                s = model.predict(te.X)
                ev = evaluate_list(s, te)
                p = prec(s, te)
                for t in range(1, T + 1):  # a fixed model: flat curve
                    curves.append({"fold": f, "method": name, "round": t, **ev})
                final.append({"fold": f, "method": name, "round": T, "fit_s": round(fit_s, 1),
                              "note": f"C={best[1]}", **ev,
                              **{f"P@{k}%": v for k, v in zip(KS, p)}})
            else:
                if name == "GBT":
                    algo = GBT(learning_rate=0.05, learner=tree(), n_rounds=T)
                else:
                    algo = QBRank(w=0.5 if name == "QBRank" else 1.0, tau="grade_difference",
                                  learning_rate=0.05, learner=tree(), n_rounds=T)
                model = algo.fit(tr.X, tr.labels, tr.groups)
                fit_s = time.perf_counter() - t0
                for t, s in enumerate(model.staged_predict(te.X), start=1):
                    ev = evaluate_list(s, te)
                    curves.append({"fold": f, "method": name, "round": t, **ev})
                    if t % 25 == 0 or t == model.n_rounds:
                        p = prec(s, te)
                        final.append({"fold": f, "method": name, "round": t,
                                      "fit_s": round(fit_s, 1), "note": "", **ev,
                                      **{f"P@{k}%": v for k, v in zip(KS, p)}})
            last = final[-1]
            print(f"[fold {f}] {name:8s} fit {fit_s:7.1f}s  DCG@5={last['DCG@5']:.4f} "
                  f"NDCG@5={last['NDCG@5']:.4f} P@10%={last['P@10%']:.4f} P@100%={last['P@100%']:.4f}",
                  flush=True)
    write_csv(OUT / "curves.csv", curves)
    write_csv(OUT / "precision.csv", final)
    (OUT / "config.json").write_text(json.dumps({"rounds": T, "folds": args.folds,
                                                 "methods": methods, "quick": args.quick},
                                                indent=1) + "\n")






def report():
    cfg = json.loads((OUT / "config.json").read_text())
    T, methods = cfg["rounds"], cfg["methods"]
    fin = read_csv(OUT / "precision.csv")
    cur = read_csv(OUT / "curves.csv")
    md = [f"### Precision at K% on the test part after {T} trees (mean over folds {cfg['folds']})\n",
          "| K | " + " | ".join(f"{m} (ours)" for m in methods) + " | QBRank (paper) | GBT (paper) | RankSVM (paper) |",
          "|---|" + "---|" * (len(methods) + 3)]

    def at(method, round_):
        return [r for r in fin if r["method"] == method and int(r["round"]) == round_]

    for i, k in enumerate(KS):
        cells = [np.mean([float(r[f"P@{k}%"]) for r in at(m, T)]) for m in methods]
        md.append(f"| {k}% | " + " | ".join(f"{c:.4f}" for c in cells) + " | "
                  + " | ".join(f"{PAPER_T1[p][i]:.4f}" for p in ("QBRank", "GBT", "RankSVM")) + " |")
    md.append("")
    md.append("### DCG@5 / NDCG@5 on the test part by number of trees (mean over folds)\n")
    checkpoints = [r for r in (25, 50, 100, 150, 200, 300, 400) if r <= T]
    if T not in checkpoints:
        checkpoints.append(T)
    md.append("| trees | " + " | ".join(f"{m} DCG@5 / NDCG@5" for m in methods) + " |")
    md.append("|---|" + "---|" * len(methods))
    for t in checkpoints:
        cells = []
        for m in methods:
            rr = [r for r in cur if r["method"] == m and int(r["round"]) == t]
            cells.append(f"{np.mean([float(r['DCG@5']) for r in rr]):.4f} / "
                         f"{np.mean([float(r['NDCG@5']) for r in rr]):.4f}")
        md.append(f"| {t} | " + " | ".join(cells) + " |")
    md.append("")
    times = {m: [float(r["fit_s"]) for r in at(m, T)] for m in methods}
    md.append("Fit time (s, per fold; 2 shared, loaded cores, 1 torch thread): "
              + ", ".join(f"{m} {np.mean(v):.0f}" for m, v in times.items()) + ". "
              + "RankSVM: " + ", ".join(r["note"] for r in at("RankSVM", T)) + ".\n")
    md += supplementary(fin, cur, methods)
    (OUT / "tables.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for m in methods:
        rr = [r for r in cur if r["method"] == m]
        xs = sorted({int(r["round"]) for r in rr})
        for j, key in enumerate(("DCG@5", "NDCG@5")):
            ys = [np.mean([float(r[key]) for r in rr if int(r["round"]) == t]) for t in xs]
            ax[j].plot(xs, ys, label=m)
            ax[j].set_xlabel("iterations (trees)")
            ax[j].set_title(f"{key} v. iterations, MQ2008 test")
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(OUT / "dcg5_vs_iterations.png", dpi=80)
    plt.close(fig)


def supplementary(fin, cur, methods, t=200):
    """Five folds at ``t`` trees: this run's folds plus any ``OUT/folds_*`` sub-runs
    (``--folds 2,3 --rounds 200 --no-pairs-only --out results/qbrank/folds_23_200``)."""
    subs = sorted(p for p in OUT.glob("folds_*") if (p / "precision.csv").exists())
    if not subs:
        return []
    for p in subs:
        fin = fin + read_csv(p / "precision.csv")
        cur = cur + read_csv(p / "curves.csv")
    ms = [m for m in methods if m != "QBRank-P"]
    at = {m: [r for r in fin if r["method"] == m and (int(r["round"]) == t or m == "RankSVM")]
          for m in ms}  # RankSVM is one fixed model per fold (its row carries the run's T)
    folds = sorted({int(r["fold"]) for r in at[ms[0]]})
    md = ["", f"### Supplementary: folds {folds} at {t} trees (mean ± std over folds)\n",
          "| metric | " + " | ".join(ms) + " |", "|---|" + "---|" * len(ms)]
    for key in [f"P@{k}%" for k in (10, 30, 50, 70, 90, 100)] + ["DCG@5", "NDCG@5"]:
        cells = []
        for m in ms:
            v = np.array([float(r[key]) for r in at[m]])
            cells.append(f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0:.4f}")
        md.append(f"| {key} | " + " | ".join(cells) + " |")
    # best NDCG@5 over the first t trees (an oracle round, for orientation only)
    cells = []
    for m in ms:
        best = [max(float(r["NDCG@5"]) for r in cur if r["method"] == m and int(r["fold"]) == f
                    and int(r["round"]) <= t) for f in folds]
        cells.append(f"{np.mean(best):.4f}")
    md.append("| NDCG@5 at each fold's best round ≤ %d (test-oracle, orientation only) | " % t
              + " | ".join(cells) + " |")
    qb = {int(r["fold"]): float(r["P@100%"]) for r in at["QBRank"]}
    wins = {m: sum(qb[int(r["fold"])] > float(r["P@100%"]) for r in at[m])
            for m in ms if m != "QBRank"}
    md.append("")
    md.append("QBRank's precision at 100% is above " + ", ".join(
        f"{m}'s on {w} of {len(folds)} folds" for m, w in wins.items()) + ".\n")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60 trees, no QBRank-P")
    ap.add_argument("--rounds", type=int, default=None, help="trees (default 400)")
    ap.add_argument("--folds", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    ap.add_argument("--no-pairs-only", action="store_true", help="skip the w=1 QBRank-P run")
    ap.add_argument("--report", action="store_true", help="only rebuild tables/plot from the CSVs")
    ap.add_argument("--out", default=None, help="output folder (default results/qbrank)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    global OUT
    if args.out:
        OUT = Path(args.out)
    elif args.quick:  # never overwrite the committed results with a quick run
        OUT = Path(tempfile.gettempdir()) / "torchrankboost_exp_qbrank_quick"
    torch.set_num_threads(args.threads)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not args.report:
        run(args)
    report()
    print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
