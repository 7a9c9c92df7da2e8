"""Experiment 2: RankBoost+ vs RB-C vs RB-D (Connamacher et al., MLJ 2019, §5).

Two parts, both with binary threshold stumps (``Stumps(max_thresholds=255)``):

``mq2008``
    LETOR 4.0 MQ2008 (QueryLevelNorm), the five official folds (3 train / 1 vali / 1 test
    parts). Each algorithm runs ``--rounds`` rounds; every metric is evaluated on vali and
    test after every round. R̂1 and R̂2 are read at the round with the best *validation*
    value of that same metric; NDCG@3/5/7 at the round with the best validation MAP (the
    paper's Table 4 protocol). Output: the layout of Table 4 beside the paper's numbers,
    ranks by fold (Table 2 layout, MQ2008 only), per-fold CSV and a convergence plot.

``movielens``
    MovieLens 100k per-user tasks (users with >= 100 ratings). For target user u: documents =
    the movies u rated, label = u's rating (1-5), features = the other users' ratings of those
    movies, a feature (user) dropped when it misses more than 50% of u's movies, a missing
    rating set below every observed one (0). 5-fold cross validation over u's movies (seeded):
    fold i is test, fold i+1 vali, the other three train; crucial pairs = movies of one part
    with different ratings. Each metric (R̂1, R̂2, NDCG@3/5/7) is read at its own
    validation-best round, averaged over the 5 folds; algorithms are ranked per task (1 =
    best), ranks averaged (Table 1) with the median selected round in parentheses; raw means
    (Table 3); Friedman test + Nemenyi critical difference.

Run (from the repository root, venv active)::

    python scripts/exp_rankboost_plus.py                 # everything, writes results/rankboost_plus/
    python scripts/exp_rankboost_plus.py --quick         # 2 folds, 30 rounds, 12 users ($TMPDIR)
    python scripts/exp_rankboost_plus.py --part mq2008   # one part; --part report rebuilds
                                                         # the Markdown/plots from the CSVs

Data: the data folder, ``$TORCHRANKBOOST_DATA`` (default ``./data``), with ``mq2008/`` and
``movielens_100k/ml-100k/``. MovieLens files are never copied into the repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost import metrics as M
from torchrankboost.boosting import Stumps
from torchrankboost.boosting.papers import RankBoost, RankBoostPlus
from torchrankboost.data import load_letor_fold
from torchrankboost.data import data_root
from torchrankboost.groups import Groups
from _results_io import read_csv, write_csv  # noqa: E402,F401 (scripts/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DATA = data_root()  # $TORCHRANKBOOST_DATA, else ./data
OUT = ROOT / "results" / "rankboost_plus"

ALGOS = ("RankBoost+", "RB-C", "RB-D")
METRICS = ("R1", "R2", "NDCG@3", "NDCG@5", "NDCG@7")
# MovieLens also: NDCG with linear gain (gain = rating), the paper does not give its gain
ML_EXTRA = ("linNDCG@3", "linNDCG@5", "linNDCG@7")

# Connamacher et al. 2019, Table 4 (MQ2008 rows) and Tables 1/3 (MovieLens rows)
PAPER_T4_MQ2008 = {
    "R1": (0.2082, 0.2153, 0.2190), "R2": (0.2027, 0.2161, 0.2192),
    "NDCG@3": (0.4190, 0.4250, 0.4185), "NDCG@5": (0.4684, 0.4702, 0.4582),
    "NDCG@7": (0.4887, 0.4899, 0.4819),
}
PAPER_T1_ML = {  # average rank (median stopping iteration)
    "R1": ((1.314, 32), (1.938, 31), (2.748, 26)), "R2": ((1.356, 25), (1.952, 21), (2.692, 18)),
    "NDCG@3": ((1.696, 4), (2.125, 2), (2.179, 3)), "NDCG@5": ((1.559, 7), (2.211, 2), (2.230, 4)),
    "NDCG@7": ((1.476, 11), (2.268, 2), (2.256, 4)),
}
PAPER_T3_ML = {
    "R1": (0.3100, 0.3218, 0.3394), "R2": (0.3114, 0.3218, 0.3376),
    "NDCG@3": (0.7920, 0.7642, 0.7620), "NDCG@5": (0.8019, 0.7684, 0.7675),
    "NDCG@7": (0.8104, 0.7744, 0.7749),
}
PAPER_T2_LETOR = {  # ranks by fold over MQ2007 + MQ2008 (10 folds); NDCG@7 row uncertain
    "R1": (1.3, 1.9, 2.8), "R2": (1.1, 2.1, 2.8), "NDCG@3": (1.9, 1.8, 2.3),
    "NDCG@5": (1.7, 1.6, 2.7), "NDCG@7": (1.7, 1.5, 2.8),
}
Q05_K3 = 2.343  # Nemenyi q_0.05 for k = 3 (Demšar 2006)


# ----------------------------------------------------------------------------- fitting
def make_algo(name, rounds, seed):
    st = Stumps(max_thresholds=255, seed=seed)
    if name == "RankBoost+":
        # MQ2008 folds: ~52k training pairs x ~5.3k stump columns (2.2 GB of float64), above
        # the library's default guard of 5e7 entries
        return RankBoostPlus(learner=st, n_rounds=rounds, seed=seed, max_pair_entries=400_000_000)
    # RB-D as in Connamacher et al. (eq. 13 with signed α, as their reference code: the ranker
    # with the largest |ε⁺ - ε⁻|, α = ½ ln(ε⁺/ε⁻), halt before a step with ε⁻ = 0) is the
    # library's variant="coordinate"; its variant="rb-d" picks the exact Z-minimiser
    # ε⁰ + 2√(ε⁺ε⁻) instead (Rudin-Schapire rule (5)), a different algorithm.
    return RankBoost({"RB-C": "rb-c", "RB-D": "coordinate"}[name], learner=st, n_rounds=rounds)


def curves(model, T, parts, *, ndcg_empty, with_map):
    """Per-round metrics ``{part: {metric: np.array(T)}}``; rounds after an early stop keep
    the final model's values (the ensemble no longer changes)."""
    out = {}
    for pname, (X, y, g) in parts.items():
        rows = []
        stages = list(model.staged_predict(X)) if model.n_rounds else []
        if not stages:
            stages = [torch.zeros(X.shape[0], dtype=torch.float64)]
        for s in stages:
            r = {"R1": float(M.pair_error(s, y, g, ties="error")),
                 "R2": float(M.pair_error(s, y, g, ties="half"))}
            for k in (3, 5, 7):
                r[f"NDCG@{k}"] = float(M.ndcg_at_k(s, y, g, k=k, empty=ndcg_empty))
            if with_map:
                r["MAP"] = float(M.mean_average_precision(s, y, g, empty=ndcg_empty))
            rows.append(r)
        while len(rows) < T:
            rows.append(rows[-1])
        out[pname] = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return out


def curves_single(model, T, parts, *, check=True):
    """:func:`curves` for one-query data (MovieLens), vectorised over rounds: R̂1/R̂2 from the
    materialised pairs, NDCG@k (gain 2^l - 1, stable sort = ties keep input order, as
    ``metrics.ndcg_at_k``). The last round is checked against the library's metrics."""
    out = {}
    for pname, (X, y, g) in parts.items():
        S = torch.stack(list(model.staged_predict(X))) if model.n_rounds else \
            torch.zeros(1, X.shape[0], dtype=torch.float64)
        S = S.numpy()
        yy = y.numpy()
        hi, lo = np.nonzero(yy[:, None] > yy[None, :])
        d = S[:, hi] - S[:, lo]
        r = {"R1": (d <= 0).mean(1), "R2": ((d < 0) + 0.5 * (d == 0)).mean(1)}
        order = np.argsort(-S, axis=1, kind="stable")
        gain = 2.0 ** yy - 1.0
        ideal = np.sort(gain)[::-1]
        for pre, gn in (("", gain), ("lin", yy)):
            ideal = np.sort(gn)[::-1]
            for k in (3, 5, 7):
                disc = 1.0 / np.log2(np.arange(2, min(k, len(yy)) + 2))
                dcg = (gn[order[:, :len(disc)]] * disc).sum(1)
                idcg = (ideal[:len(disc)] * disc).sum()
                r[f"{pre}NDCG@{k}"] = dcg / idcg if idcg > 0 else np.zeros_like(dcg)
        if check:
            s = torch.from_numpy(S[-1])
            ref = {"R1": M.pair_error(s, y, g, ties="error"), "R2": M.pair_error(s, y, g, ties="half"),
                   **{f"NDCG@{k}": M.ndcg_at_k(s, y, g, k=k, empty=0.0) for k in (3, 5, 7)},
                   **{f"linNDCG@{k}": M.ndcg_at_k(s, y, g, k=k, gain="linear", empty=0.0)
                      for k in (3, 5, 7)}}
            for key, v in ref.items():
                assert abs(float(v) - r[key][-1]) < 1e-9, (key, float(v), r[key][-1])
        out[pname] = {k: np.concatenate([v, np.full(max(0, T - len(v)), v[-1])]) for k, v in r.items()}
    return out


def select(cv, ct, metric, by=None):
    """Test value of ``metric`` at the validation-best round of ``by`` (default ``metric``);
    errors are minimised, NDCG/MAP maximised; the earliest best round wins ties."""
    by = by or metric
    v = cv[by]
    i = int(np.argmin(v)) if by.startswith("R") else int(np.argmax(v))
    return float(ct[metric][i]), i + 1


# ----------------------------------------------------------------------------- MQ2008
def run_mq2008(args):
    folds = range(1, 3) if args.quick else range(1, 6)
    T = args.rounds or (30 if args.quick else 100)
    rows, curve_rows = [], []
    for f in folds:
        tr, va, te = load_letor_fold(DATA / "mq2008" / f"Fold{f}", dtype=torch.float64)
        for name in ALGOS:
            t0 = time.perf_counter()
            algo = make_algo(name, T, seed=f)
            model = algo.fit(tr.X, tr.labels, tr.groups)
            fit_s = time.perf_counter() - t0
            c = curves(model, T, {"vali": tuple(va), "test": tuple(te)}, ndcg_empty=0.0,
                       with_map=True)
            row = {"fold": f, "algo": name, "rounds_run": len(algo.history_),
                   "stop_reason": algo.stop_reason_ or "", "fit_s": round(fit_s, 2)}
            for m in ("R1", "R2"):
                row[m], row[f"{m}_round"] = select(c["vali"], c["test"], m)
            for k in (3, 5, 7):
                row[f"NDCG@{k}"], row[f"NDCG@{k}_round"] = select(c["vali"], c["test"],
                                                                  f"NDCG@{k}", by="MAP")
            row["MAP"], row["MAP_round"] = select(c["vali"], c["test"], "MAP")
            rows.append(row)
            for t in range(T):
                curve_rows.append({"fold": f, "algo": name, "round": t + 1,
                                   **{f"{p}_{k}": round(float(c[p][k][t]), 6)
                                      for p in ("vali", "test") for k in ("R2", "NDCG@5", "MAP")}})
            print(f"[mq2008] fold {f} {name:10s} {fit_s:7.1f}s rounds={row['rounds_run']} "
                  + " ".join(f"{m}={row[m]:.4f}" for m in METRICS), flush=True)
    write_csv(OUT / "mq2008_folds.csv", rows)
    write_csv(OUT / "mq2008_curves.csv", curve_rows)
    (OUT / "mq2008_config.json").write_text(json.dumps(
        {"rounds": T, "folds": list(folds), "quick": args.quick}, indent=1) + "\n")


# ----------------------------------------------------------------------------- MovieLens
def movielens_tasks(min_ratings=100):
    d = np.loadtxt(DATA / "movielens_100k" / "ml-100k" / "u.data", dtype=np.int64)
    users, items, r = d[:, 0] - 1, d[:, 1] - 1, d[:, 2]
    R = np.zeros((users.max() + 1, items.max() + 1), dtype=np.int64)  # 0 = missing
    R[users, items] = r
    counts = (R > 0).sum(1)
    return R, np.flatnonzero(counts >= min_ratings)


def movielens_task(R, u):
    mv = np.flatnonzero(R[u] > 0)
    y = R[u, mv].astype(np.float64)
    others = np.delete(np.arange(R.shape[0]), u)
    F = R[np.ix_(others, mv)]  # (users, movies)
    keep = (F > 0).mean(1) >= 0.5  # drop users missing > 50% of u's movies
    X = F[keep].T.astype(np.float64)  # missing = 0, below every rating 1..5
    return X, y


def run_movielens(args):
    R, users = movielens_tasks()
    n_ge100 = len(users)
    # a user none of whose peers rated >= 50% of their movies has no feature at all: no
    # weak ranker exists, the task is dropped (4 users: 181, 405, 655, 782)
    users = np.array([u for u in users if movielens_task(R, u)[0].shape[1] > 0])
    n_all = len(users)
    rng = np.random.default_rng(0)
    if args.quick:
        users = np.sort(rng.choice(users, size=12, replace=False))
    elif args.users is not None and args.users < n_all:
        users = np.sort(rng.choice(users, size=args.users, replace=False))
    T = args.ml_rounds or (30 if args.quick else 50)
    rows = []
    t_start = time.perf_counter()
    for ti, u in enumerate(users):
        X, y = movielens_task(R, u)
        n = len(y)
        perm = np.random.default_rng(int(u)).permutation(n)
        fold_of = np.empty(n, dtype=np.int64)
        fold_of[perm] = np.arange(n) % 5
        per = {a: {m: [] for m in METRICS + ML_EXTRA} for a in ALGOS}
        rnd = {a: {m: [] for m in METRICS + ML_EXTRA} for a in ALGOS}
        t0 = time.perf_counter()
        for f in range(5):
            te_m, va_m = fold_of == f, fold_of == (f + 1) % 5
            tr_m = ~(te_m | va_m)
            parts = {}
            for pn, msk in (("train", tr_m), ("vali", va_m), ("test", te_m)):
                Xp = torch.from_numpy(X[msk])
                parts[pn] = (Xp, torch.from_numpy(y[msk]), Groups.single(Xp.shape[0]))
            for name in ALGOS:
                algo = make_algo(name, T, seed=f)
                Xt, yt, gt = parts["train"]
                model = algo.fit(Xt, yt, gt)
                c = curves_single(model, T, {"vali": parts["vali"], "test": parts["test"]})
                for m in METRICS + ML_EXTRA:
                    v, i = select(c["vali"], c["test"], m)
                    per[name][m].append(v)
                    rnd[name][m].append(i)
        for name in ALGOS:
            rows.append({"user": int(u) + 1, "n_movies": n, "n_features": X.shape[1],
                         "algo": name,
                         **{m: float(np.mean(per[name][m])) for m in METRICS + ML_EXTRA},
                         **{f"{m}_round": float(np.median(rnd[name][m])) for m in METRICS + ML_EXTRA}})
        el = time.perf_counter() - t_start
        print(f"[movielens] {ti + 1}/{len(users)} user {u + 1}: {n} movies, {X.shape[1]} features, "
              f"{time.perf_counter() - t0:.1f}s (total {el:.0f}s) "
              + " ".join(f"{a}:R2={np.mean(per[a]['R2']):.4f}" for a in ALGOS), flush=True)
    write_csv(OUT / "movielens_tasks.csv", rows)
    (OUT / "movielens_config.json").write_text(json.dumps(
        {"rounds": T, "users_run": len(users), "users_eligible": n_all,
         "users_with_100_ratings": n_ge100, "quick": args.quick},
        indent=1) + "\n")


# ----------------------------------------------------------------------------- report




def rank_rows(values, lower_better):
    """Average ranks (1 = best) per row of ``values`` (N, k), ties get the mean rank."""
    from scipy.stats import rankdata

    v = np.asarray(values, dtype=np.float64)
    return np.vstack([rankdata(row if lower_better else -row) for row in v])


def friedman_nemenyi(values, lower_better):
    from scipy.stats import friedmanchisquare

    N, k = values.shape
    ranks = rank_rows(values, lower_better)
    try:
        stat, p = friedmanchisquare(*values.T)
    except ValueError:
        stat, p = float("nan"), float("nan")
    cd = Q05_K3 * math.sqrt(k * (k + 1) / (6.0 * N)) if k == 3 else float("nan")
    return ranks.mean(0), float(stat), float(p), cd


def report():
    md = []
    if (OUT / "mq2008_folds.csv").exists():
        rows = read_csv(OUT / "mq2008_folds.csv")
        cfg = json.loads((OUT / "mq2008_config.json").read_text())
        folds = sorted({int(r["fold"]) for r in rows})
        md.append(f"### MQ2008 (folds {folds}, {cfg['rounds']} rounds)\n")
        md.append("Table 4 layout, mean ± std over folds (ours) beside the paper's mean; "
                  "R̂ at its own validation-best round, NDCG at the validation-MAP-best round.\n")
        md.append("| metric | RankBoost+ (ours) | RB-C (ours) | RB-D (ours) | RankBoost+ (paper) | RB-C (paper) | RB-D (paper) | best ours / paper |")
        md.append("|---|---|---|---|---|---|---|---|")
        val = {a: {m: np.array([float(r[m]) for r in rows if r["algo"] == a]) for m in METRICS + ("MAP",)}
               for a in ALGOS}
        for m in METRICS:
            ours = [val[a][m] for a in ALGOS]
            cells = [f"{x.mean():.4f} ± {x.std(ddof=1) if len(x) > 1 else 0:.4f}" for x in ours]
            pap = PAPER_T4_MQ2008[m]
            lb = m.startswith("R")
            bo = ALGOS[int(np.argmin([x.mean() for x in ours]) if lb else np.argmax([x.mean() for x in ours]))]
            bp = ALGOS[int(np.argmin(pap) if lb else np.argmax(pap))]
            md.append(f"| {m.replace('R1', 'R̂1').replace('R2', 'R̂2')} | " + " | ".join(cells) + " | "
                      + " | ".join(f"{p:.4f}" for p in pap) + f" | {bo} / {bp} |")
        x = [val[a]["MAP"] for a in ALGOS]
        md.append("| MAP (test, at vali-MAP round) | " + " | ".join(
            f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0:.4f}" for v in x) + " | – | – | – | |")
        md.append("")
        md.append("Ranks by fold (Table 2 layout; the paper's ranks pool MQ2007 and MQ2008, 10 folds, CD 1.048):\n")
        md.append("| metric | RankBoost+ | RB-C | RB-D | paper (MQ2007+MQ2008) | Friedman p | CD (N = folds) |")
        md.append("|---|---|---|---|---|---|---|")
        for m in METRICS:
            vals = np.stack([val[a][m] for a in ALGOS], 1)
            ar, stat, p, cd = friedman_nemenyi(vals, m.startswith("R"))
            md.append(f"| {m} | " + " | ".join(f"{v:.2f}" for v in ar) + " | "
                      + " / ".join(f"{v:.1f}" for v in PAPER_T2_LETOR[m]) + f" | {p:.3f} | {cd:.3f} |")
        md.append("")
        md.append("Fit time per fold (s, median over folds; 2 shared cores): "
                  + ", ".join(f"{a} {statistics.median(float(r['fit_s']) for r in rows if r['algo'] == a):.1f}"
                              for a in ALGOS)
                  + "; rounds actually run (per fold): "
                  + ", ".join(f"{a} {[int(r['rounds_run']) for r in rows if r['algo'] == a]}" for a in ALGOS)
                  + ".\n")
        plot_mq2008()
    if (OUT / "movielens_tasks.csv").exists():
        rows = read_csv(OUT / "movielens_tasks.csv")
        cfg = json.loads((OUT / "movielens_config.json").read_text())
        users = sorted({int(r["user"]) for r in rows})
        N = len(users)
        md.append(f"### MovieLens 100k ({N} of {cfg['users_eligible']} eligible users, "
                  f"{cfg['rounds']} rounds)\n")
        md.append("Average rank over tasks (1 = best; median selected round in parentheses), "
                  "ours beside the paper's Table 1; Friedman test and Nemenyi CD for our N.\n")
        md.append("| metric | RankBoost+ | RB-C | RB-D | paper RankBoost+ | paper RB-C | paper RB-D | Friedman p | CD ours (paper) |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        by = {(int(r["user"]), r["algo"]): r for r in rows}
        extra = [m for m in ML_EXTRA if m in rows[0]]
        for m in METRICS + tuple(extra):
            vals = np.array([[float(by[(u, a)][m]) for a in ALGOS] for u in users])
            med = [statistics.median(float(by[(u, a)][f"{m}_round"]) for u in users) for a in ALGOS]
            ar, stat, p, cd = friedman_nemenyi(vals, m.startswith("R"))
            best = int(np.argmin(ar))
            sig = sorted(ar)[1] - ar[best] >= cd
            cells = [f"{'**' if (i == best and sig) else ''}{ar[i]:.3f}{'**' if (i == best and sig) else ''} ({med[i]:g})"
                     for i in range(3)]
            pap = PAPER_T1_ML.get(m.replace("lin", ""))
            md.append(f"| {m} | " + " | ".join(cells) + " | "
                      + " | ".join(f"{r_:.3f} ({it})" for r_, it in pap)
                      + f" | {p:.2g} | {cd:.3f} (0.1754) |")
        md.append("")
        md.append("Raw means over tasks (Table 3 layout):\n")
        md.append("| metric | RankBoost+ | RB-C | RB-D | paper RankBoost+ | paper RB-C | paper RB-D |")
        md.append("|---|---|---|---|---|---|---|")
        for m in METRICS + tuple(extra):
            vals = np.array([[float(by[(u, a)][m]) for a in ALGOS] for u in users])
            md.append(f"| {m} | " + " | ".join(f"{v:.4f}" for v in vals.mean(0)) + " | "
                      + " | ".join(f"{v:.4f}" for v in PAPER_T3_ML[m.replace("lin", "")]) + " |")
        md.append("")
        nf = [int(by[(u, ALGOS[0])]["n_features"]) for u in users]
        nm = [int(by[(u, ALGOS[0])]["n_movies"]) for u in users]
        md.append(f"Tasks: {min(nm)}–{max(nm)} movies (median {statistics.median(nm):g}), "
                  f"{min(nf)}–{max(nf)} feature users after the 50% filter (median {statistics.median(nf):g}).\n")
        plot_cd(users, by)
    (OUT / "tables.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


def plot_mq2008():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    rows = read_csv(OUT / "mq2008_curves.csv")
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    for a in ALGOS:
        rr = [r for r in rows if r["algo"] == a]
        T = max(int(r["round"]) for r in rr)
        for j, key in enumerate(("test_R2", "test_NDCG@5", "vali_MAP")):
            y = np.mean([[float(r[key]) for r in rr if int(r["round"]) == t] for t in range(1, T + 1)], 1)
            ax[j].plot(range(1, T + 1), y, label=a)
            ax[j].set_title(key.replace("_", " ") + " (mean over folds)")
            ax[j].set_xlabel("round")
    ax[0].legend()
    fig.tight_layout()
    fig.savefig(OUT / "mq2008_curves.png", dpi=80)
    plt.close(fig)


def plot_cd(users, by):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(6, 1.1 * len(METRICS) + 0.4))
    for ax, m in zip(axes, METRICS):
        vals = np.array([[float(by[(u, a)][m]) for a in ALGOS] for u in users])
        ar, _, p, cd = friedman_nemenyi(vals, m.startswith("R"))
        ax.set_xlim(1, 3)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        for i, a in enumerate(ALGOS):
            ax.plot([ar[i]], [0.5], "o")
            ax.annotate(a, (ar[i], 0.55), ha="center", fontsize=8)
        b = float(np.min(ar))
        ax.plot([b, b + cd], [0.2, 0.2], "k-", lw=3)
        ax.set_title(f"{m}: average ranks, bar = Nemenyi CD {cd:.3f} (Friedman p={p:.1g})", fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "movielens_cd.png", dpi=80)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("all", "mq2008", "movielens", "report"), default="all")
    ap.add_argument("--quick", action="store_true", help="2 folds, 30 rounds, 12 MovieLens users")
    ap.add_argument("--rounds", type=int, default=None, help="MQ2008 rounds (default 100)")
    ap.add_argument("--ml-rounds", type=int, default=None, help="MovieLens rounds (default 50)")
    ap.add_argument("--users", type=int, default=0,
                    help="MovieLens: a seeded random subset of this many eligible users "
                         "(default 0 = all 360 tasks)")
    ap.add_argument("--out", default=None, help="output folder (default results/rankboost_plus)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.users == 0:
        args.users = None
    global OUT
    if args.out:
        OUT = Path(args.out)
    elif args.quick:  # never overwrite the committed results with a quick run
        OUT = Path(tempfile.gettempdir()) / "torchrankboost_exp_rankboost_plus_quick"
    torch.set_num_threads(args.threads)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.part in ("all", "mq2008"):
        run_mq2008(args)
    if args.part in ("all", "movielens"):
        run_movielens(args)
    report()
    print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
