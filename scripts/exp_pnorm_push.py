"""Reproduce the experiments of Rudin, "Ranking with a P-Norm Push" (TR2005-874, §5–§6).

Settings (the paper's §5–§6):

=================  =======================  ==========  ==================================
setting            data                     train/test  weak rankers
=================  =======================  ==========  ==================================
pima               pima-indians-diabetes    300 / 468   the 8 real features, min–max → [−1, 1]
pima_thresholds    pima-indians-diabetes    300 / 468   32 binary ``1[x_f > θ]`` (paper's θ)
wdbc               wdbc, columns 3–8        369 / 200   6 real features, min–max → [−1, 1]
wdbc_benign        the same, positive = benign (the paper does not say which class is "+")
tictactoe          tic-tac-toe              500 / 458   9 squares o=0, x=1, b=2 → [−1, 1]
housing            Boston housing, y = CHAS 300 / 206   the other 13 columns → [−1, 1]
housing_chas0      the same, positive = CHAS 0 (the paper does not say which value is "+")
pima50             pima-indians-diabetes     50 / 718   the 8 real features (§6 caution)
=================  =======================  ==========  ==================================

For each setting and ``p ∈ {1, 2, 4, 8, 16, 64}`` the p-norm push (``PNormPush``, coordinate
descent with an exact line search, 200 rounds, λ = 0 start) is trained on one random split
("primary", seed 0, used for the ROC figures) and on ``--splits`` random splits in total (seeds
0..N-1, for the spread the paper does not report). Measured: the paper's §5 "R_max" = number
of positives strictly above the highest-scoring negative (``positives_above_first_negative``),
TP at the 5th/10th false positive, AUC (ties ½), and the first crossover of the p = 64 and
p = 1 ROC curves.

Usage::

    python scripts/exp_pnorm_push.py --out results/pnorm_push            # full run
    python scripts/exp_pnorm_push.py --out pp_quick --splits 2 --settings pima   # quick look

Writes ``runs.csv`` (one row per setting × split × p), ``summary.md`` (tables), ROC figures
``roc_<setting>.png`` (counts; full and zoomed, train and test, primary split) and
``rmax_vs_p.png``. Needs matplotlib for the figures (``pip install matplotlib``); without
it the tables are still written.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost.boosting import FeatureRankers
from torchrankboost.boosting.papers import MatrixRankers, PNormPush
from torchrankboost.data import data_root
from torchrankboost.metrics import auc, positives_above_first_negative

P_VALUES = (1, 2, 4, 8, 16, 64)
N_ROUNDS = 200
SETTINGS = ("pima", "pima_thresholds", "wdbc", "wdbc_benign", "tictactoe", "housing", "housing_chas0",
            "pima50")
PIMA_THRESHOLDS = [  # paper §5, verbatim
    (2, 3, 6, 7), (100, 130, 150, 160), (60, 65, 72, 90), (1, 10, 20, 30),
    (30, 50, 80, 100), (30, 32, 35, 37), (0.1, 0.2, 0.3, 0.5), (30, 33, 36, 40)]
N_TRAIN = {"pima": 300, "pima_thresholds": 300, "wdbc": 369, "wdbc_benign": 369, "tictactoe": 500,
           "housing": 300, "housing_chas0": 300, "pima50": 50}
TITLES = {"pima": "pima, 8 real features (paper Fig. 2)",
          "pima_thresholds": "pima, 32 threshold features (paper Fig. 3)",
          "wdbc": "wdbc, first 6 features (paper Fig. 4)",
          "wdbc_benign": "wdbc, positive = benign (alternative reading)",
          "tictactoe": "tic-tac-toe (paper Fig. 5)",
          "housing": "housing, label CHAS (paper Fig. 6)",
          "housing_chas0": "housing, positive = CHAS 0 (alternative reading)",
          "pima50": "pima, 50 training examples (paper Fig. 7)"}


# ----------------------------------------------------------------------------- data
def load_setting(name: str, data: Path):
    """(X float64 (n, F), y in {0,1} (n,), kind) with kind 'real' or 'thresholds'."""
    if name in ("pima", "pima50", "pima_thresholds"):
        d = np.loadtxt(data / "uci_pima_indians_diabetes" / "pima-indians-diabetes.csv", delimiter=",")
        X, y = d[:, :8], d[:, 8]  # positive = class 1 ("tested positive for diabetes")
        if name == "pima_thresholds":
            cols = [(X[:, f] > th).astype(np.float64) for f in range(8) for th in PIMA_THRESHOLDS[f]]
            return np.stack(cols, 1), y, "thresholds"
        return X, y, "real"
    if name in ("wdbc", "wdbc_benign"):
        path = data / "uci_wdbc" / "wdbc.data"
        rows = [line.strip().split(",") for line in path.read_text().splitlines() if line.strip()]
        X = np.array([[float(v) for v in r[2:8]] for r in rows])  # file columns 3–8
        y = np.array([1.0 if r[1] == "M" else 0.0 for r in rows])  # positive = malignant
        if name == "wdbc_benign":  # the paper does not say which class is "+"
            y = 1.0 - y
        return X, y, "real"
    if name == "tictactoe":
        enc = {"o": 0.0, "x": 1.0, "b": 2.0}  # paper's encoding
        rows = [line.strip().split(",") for line in
                (data / "uci_tic_tac_toe" / "tic-tac-toe.data").read_text().splitlines() if line.strip()]
        X = np.array([[enc[v] for v in r[:9]] for r in rows])
        y = np.array([1.0 if r[9] == "positive" else 0.0 for r in rows])  # positive = x wins
        return X, y, "real"
    if name in ("housing", "housing_chas0"):
        d = np.loadtxt(data / "uci_housing" / "housing.data")
        y = d[:, 3]  # CHAS: positive = 1 (bounds the river), 35 of 506
        if name == "housing_chas0":  # the paper does not say which CHAS value is "+"
            y = 1.0 - y
        X = np.delete(d, 3, axis=1)  # the other 13 columns (MEDV included)
        return X, y, "real"
    raise ValueError(f"unknown setting {name!r}")


def split(n: int, n_train: int, seed: int):
    perm = np.random.default_rng(seed).permutation(n)
    return perm[:n_train], perm[n_train:]


# ----------------------------------------------------------------------------- metrics
def tp_at_fp(s: np.ndarray, y: np.ndarray, k: int) -> int:
    """#positives strictly above the k-th highest negative (TP at the k-th false positive;
    k = 1 is the paper's §5 R_max)."""
    neg = np.sort(s[y == 0])[::-1]
    if k > len(neg):
        return int((y == 1).sum())
    return int((s[y == 1] > neg[k - 1]).sum())


def roc_counts(s: np.ndarray, y: np.ndarray):
    """ROC curve in counts (FP, TP) with diagonal segments for tied blocks."""
    order = np.argsort(-s, kind="stable")
    ss, yy = s[order], y[order]
    tp, fp = np.cumsum(yy == 1), np.cumsum(yy == 0)
    last = np.r_[ss[1:] != ss[:-1], True]
    return np.r_[0, fp[last]], np.r_[0, tp[last]]


def first_crossover(s_hi, s_lo, y, kmax=None):
    """Smallest k ≥ 1 with TP@k(s_hi) < TP@k(s_lo) after a k where TP@k(s_hi) > TP@k(s_lo)
    (the first point where the high-p curve falls below the low-p curve having been above);
    None if it never does."""
    nneg = int((y == 0).sum())
    kmax = kmax or nneg
    was_above = False
    for k in range(1, kmax + 1):
        a, b = tp_at_fp(s_hi, y, k), tp_at_fp(s_lo, y, k)
        if a > b:
            was_above = True
        elif a < b and was_above:
            return k
    return None


# ----------------------------------------------------------------------------- runs
def fit_scores(kind, Xtr, ytr, Xte, p):
    rankers = MatrixRankers() if kind == "thresholds" else FeatureRankers(normalize=True)
    algo = PNormPush(p, learner=rankers, n_rounds=N_ROUNDS)
    model = algo.fit(torch.tensor(Xtr), torch.tensor(ytr))
    s_tr = model.predict(torch.tensor(Xtr)).double().numpy()
    s_te = model.predict(torch.tensor(Xte)).double().numpy()
    return s_tr, s_te, len(algo.history_), algo.stop_reason_ or ""


def run_setting(name, data, n_splits, log):
    X, y, kind = load_setting(name, data)
    rows, primary = [], {}
    for seed in range(n_splits):
        tr, te = split(len(y), N_TRAIN[name], seed)
        for p in P_VALUES:
            t0 = time.perf_counter()
            s_tr, s_te, rounds, stop = fit_scores(kind, X[tr], y[tr], X[te], p)
            dt = time.perf_counter() - t0
            row = {"setting": name, "split": seed, "p": p, "rounds": rounds, "stop_reason": stop,
                   "n_train": len(tr), "n_test": len(te),
                   "pos_train": int(y[tr].sum()), "pos_test": int(y[te].sum()), "seconds": round(dt, 3)}
            for part, s, yy in (("train", s_tr, y[tr]), ("test", s_te, y[te])):
                row[f"rmax_{part}"] = int(positives_above_first_negative(torch.tensor(s), torch.tensor(yy)))
                assert row[f"rmax_{part}"] == tp_at_fp(s, yy, 1)
                row[f"tp5_{part}"] = tp_at_fp(s, yy, 5)
                row[f"tp10_{part}"] = tp_at_fp(s, yy, 10)
                row[f"auc_{part}"] = round(float(auc(torch.tensor(s), torch.tensor(yy))), 5)
            rows.append(row)
            if seed == 0:
                primary[p] = (s_tr, s_te, y[tr], y[te])
        log(f"  {name} split {seed}: R_max train/test by p = "
            + " ".join(f"{r['p']}:{r['rmax_train']}/{r['rmax_test']}" for r in rows[-len(P_VALUES):]))
    return rows, primary


# ----------------------------------------------------------------------------- reporting
def is_nondecreasing(v):
    return all(b >= a for a, b in zip(v, v[1:]))


def summary_tables(all_rows, primaries, n_splits):
    out = []
    out.append(f"# p-norm push: results (generated by scripts/exp_pnorm_push.py, {N_ROUNDS} rounds)\n")
    out.append("R_max = positives strictly above the highest-scoring negative (paper §5; "
               "maximise). TP@k = positives above the k-th highest negative. AUC counts ties ½.\n")
    out.append("## Primary split (seed 0), the one drawn in the ROC figures\n")
    for name, primary in primaries.items():
        rows = [r for r in all_rows if r["setting"] == name and r["split"] == 0]
        out.append(f"### {TITLES[name]}\n")
        r0 = rows[0]
        out.append(f"train {r0['n_train']} ({r0['pos_train']} pos), test {r0['n_test']} ({r0['pos_test']} pos)\n")
        out.append("| p | rounds | R_max train | R_max test | TP@5 train | TP@5 test | TP@10 train | TP@10 test | AUC train | AUC test |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            out.append(f"| {r['p']} | {r['rounds']}{'*' if r['stop_reason'] else ''} | {r['rmax_train']} | {r['rmax_test']} | "
                       f"{r['tp5_train']} | {r['tp5_test']} | {r['tp10_train']} | {r['tp10_test']} | "
                       f"{r['auc_train']:.4f} | {r['auc_test']:.4f} |")
        cross = {}
        for part, idx in (("train", (0, 2)), ("test", (1, 3))):
            s64, s1, yy = primary[64][idx[0]], primary[1][idx[0]], primary[64][idx[1]]
            cross[part] = first_crossover(s64, s1, yy)
        out.append("")
        out.append(f"First crossover of the p = 64 curve below the p = 1 curve (false-positive count): "
                   f"train {cross['train']}, test {cross['test']}.  "
                   f"R_max non-decreasing in p: train {is_nondecreasing([r['rmax_train'] for r in rows])}, "
                   f"test {is_nondecreasing([r['rmax_test'] for r in rows])}.\n")
        stops = {r["stop_reason"] for r in rows if r["stop_reason"]}
        if stops:
            out.append("`*` stopped before 200 rounds: " + "; ".join(sorted(stops)) + "\n")
    out.append(f"## Spread over {n_splits} random splits (seeds 0..{n_splits - 1})\n")
    out.append("Median [min, max] of R_max; 'mono' = fraction of splits where R_max is non-decreasing in p; "
               "'64>1' = fraction where R_max(p=64) > R_max(p=1), '64<1' where it is smaller.\n")
    for name in primaries:
        rows = [r for r in all_rows if r["setting"] == name]
        out.append(f"### {TITLES[name]}\n")
        out.append("| p | R_max train | R_max test | TP@10 test | AUC train (median) | AUC test (median) |")
        out.append("|---:|---|---|---|---:|---:|")
        for p in P_VALUES:
            rp = [r for r in rows if r["p"] == p]
            def mm(key):
                v = np.array([r[key] for r in rp])
                return f"{np.median(v):g} [{v.min()}, {v.max()}]"
            out.append(f"| {p} | {mm('rmax_train')} | {mm('rmax_test')} | {mm('tp10_test')} | "
                       f"{np.median([r['auc_train'] for r in rp]):.4f} | {np.median([r['auc_test'] for r in rp]):.4f} |")
        stats = []
        for part in ("train", "test"):
            per = {sd: [r[f"rmax_{part}"] for r in sorted([r for r in rows if r["split"] == sd], key=lambda r: r["p"])]
                   for sd in range(n_splits)}
            mono = np.mean([is_nondecreasing(v) for v in per.values()])
            up = np.mean([v[-1] > v[0] for v in per.values()])
            down = np.mean([v[-1] < v[0] for v in per.values()])
            stats.append(f"{part}: mono {mono:.2f}, 64>1 {up:.2f}, 64<1 {down:.2f}")
        out.append("")
        out.append("; ".join(stats) + "\n")
    return "\n".join(out) + "\n"


def plot_roc(name, primary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9, 7.5))
    cmap = plt.get_cmap("viridis")
    for col, (part, si, yi) in enumerate((("train", 0, 2), ("test", 1, 3))):
        nneg = int((primary[1][yi] == 0).sum())
        zoom = max(10, min(30, nneg // 8))
        for p_i, p in enumerate(P_VALUES):
            fp, tp = roc_counts(primary[p][si], primary[p][yi])
            kw = dict(color=cmap(p_i / (len(P_VALUES) - 1)), lw=1.2, label=f"p = {p}")
            axes[0, col].plot(fp, tp, **kw)
            m = fp <= zoom + 1
            axes[1, col].plot(fp[m], tp[m], drawstyle="default", **kw)
        axes[0, col].set_title(f"{part}: full ROC (counts)")
        axes[1, col].set_title(f"{part}: zoom, first {zoom} false positives")
        axes[1, col].set_xlim(0, zoom)
        for r in (0, 1):
            axes[r, col].set_xlabel("false positives")
            axes[r, col].set_ylabel("true positives")
            axes[r, col].grid(alpha=0.3)
    axes[0, 0].legend(loc="lower right", fontsize=8)
    fig.suptitle(TITLES[name] + ", split seed 0")
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def plot_rmax(all_rows, settings, n_splits, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(14, 6.5))
    for ax, name in zip(axes.flat, settings):
        rows = [r for r in all_rows if r["setting"] == name]
        for part, c in (("train", "tab:blue"), ("test", "tab:orange")):
            med, lo, hi, prim = [], [], [], []
            for p in P_VALUES:
                v = np.array([r[f"rmax_{part}"] for r in rows if r["p"] == p])
                med.append(np.median(v)); lo.append(np.percentile(v, 25)); hi.append(np.percentile(v, 75))
                prim.append([r[f"rmax_{part}"] for r in rows if r["p"] == p and r["split"] == 0][0])
            x = np.arange(len(P_VALUES))
            ax.plot(x, prim, "o-", color=c, label=f"{part}, split 0")
            ax.plot(x, med, "--", color=c, alpha=0.7, label=f"{part}, median of {n_splits}")
            ax.fill_between(x, lo, hi, color=c, alpha=0.15)
        ax.set_xticks(np.arange(len(P_VALUES)), [str(p) for p in P_VALUES])
        ax.set_xlabel("p")
        ax.set_ylabel("positives above first negative")
        ax.set_title(TITLES[name], fontsize=9)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(settings):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/pnorm_push"))
    ap.add_argument("--data", type=Path, default=None,
                    help="data folder with the UCI sets (default: $TORCHRANKBOOST_DATA, else ./data)")
    ap.add_argument("--splits", type=int, default=20, help="random splits per setting (seed 0 is the primary)")
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = args.data or data_root()
    args.out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()

    def log(msg):
        print(msg, flush=True)

    all_rows, primaries = [], {}
    for name in args.settings:
        t0 = time.perf_counter()
        rows, primary = run_setting(name, data, args.splits, log)
        all_rows += rows
        primaries[name] = primary
        log(f"{name}: {time.perf_counter() - t0:.1f} s")
    with open(args.out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        w.writeheader()
        w.writerows(all_rows)
    (args.out / "summary.md").write_text(summary_tables(all_rows, primaries, args.splits))
    try:
        for name, primary in primaries.items():
            plot_roc(name, primary, args.out / f"roc_{name}.png")
        plot_rmax(all_rows, list(primaries), args.splits, args.out / "rmax_vs_p.png")
    except ImportError:
        log("matplotlib not installed: figures skipped")
    log(f"total {time.perf_counter() - t_all:.1f} s; wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
