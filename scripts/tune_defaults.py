"""Choose the defaults of ``BoostedRanker()`` / ``torchrankboost train`` by cross-validation.

A small grid over what matters for a gradient-boosted ranker (loss, learning rate, tree size,
leaf regularisation, query bagging, early-stopping patience, leaf-wise against oblivious
trees), each setting fitted on every validation fold of the shared collections:

* MQ2008 (LETOR 4.0): its five folds (train / vali / test);
* the MSLR-WEB10K sample: five validation folds of its training queries, the test file;
* LightGBM's lambdarank example: five validation folds of its training queries, ``rank.test``.

Every fit stops early on validation NDCG@10 (the setting's patience, at most ``--rounds``
rounds) and keeps its best round. A setting's **score** is the mean over the collections
(each weighted equally) of its mean *validation* NDCG@10 over the folds (a query without a
relevant document counts 1, as in LightGBM). Test NDCG@10 and the fit time (1 thread) are
recorded beside it but never used to choose. ``--refs`` adds LightGBM lambdarank and
CatBoost YetiRank / PairLogit under the same protocol (their fit time is the yardstick).

The results go to ``results/defaults/`` (``grid.json``: every fold of every setting;
``README.md`` is written by hand from ``--table``)::

    python scripts/tune_defaults.py --grid coarse --refs        # ~30 settings
    python scripts/tune_defaults.py --grid fine                 # around the coarse winner
    python scripts/tune_defaults.py --table                     # the table of grid.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_boost as B  # noqa: E402

from torchrankboost import registry  # noqa: E402
from torchrankboost.boosting import ObliviousTree, RegressionTree  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "results" / "defaults"
COLLECTIONS = {"mq2008": B.mq2008_folds, "mslr": B.mslr_folds, "lgb-example": B.lgb_example_folds}

# the defaults before this search (the bench's ``trb-exp``)
BASE = dict(loss="exponential", lr=0.1, learner="tree", leaves=31, depth=6, msl=20, mcw=1e-3,
            l2=0.0, subsample=1.0, patience=30)


def setting(**kw):
    """A grid point: ``BASE`` updated by ``kw``; its name lists what differs from ``BASE``."""
    cfg = dict(BASE, **kw)
    diff = [f"{k}={v}" for k, v in cfg.items() if BASE.get(k) != v and k != "depth"]
    if cfg["learner"] == "oblivious":
        diff.append(f"depth={cfg['depth']}")
    cfg["name"] = ",".join(diff) or "base"
    return cfg


def grids():
    coarse = [setting()]
    coarse += [setting(lr=v) for v in (0.05, 0.2)]
    coarse += [setting(leaves=15), setting(leaves=63)]
    coarse += [setting(msl=v) for v in (5, 50)]
    coarse += [setting(mcw=1.0)]
    coarse += [setting(l2=v) for v in (1.0, 10.0)]
    coarse += [setting(subsample=v) for v in (0.5, 0.7)]
    coarse += [setting(patience=v) for v in (15, 60)]
    for loss in ("lambdarank_exp", "yetirank", "ranknet"):
        coarse += [setting(loss=loss), setting(loss=loss, lr=0.05, patience=60)]
    coarse += [setting(learner="oblivious", l2=10.0, lr=0.05),
               setting(learner="oblivious", l2=10.0, lr=0.05, patience=60),
               setting(learner="oblivious", l2=3.0, lr=0.1, patience=60),
               setting(learner="oblivious", loss="lambdarank_exp", l2=10.0, lr=0.05, patience=60),
               setting(learner="oblivious", loss="yetirank", l2=3.0, lr=0.1, patience=60)]
    coarse += [setting(lr=0.05, patience=60), setting(lr=0.05, patience=60, subsample=0.7),
               setting(leaves=15, l2=1.0, patience=60)]
    # around the coarse grid's leaders (smaller leaves, fewer documents per leaf, bagging)
    fine = [setting(leaves=15, l2=1.0), setting(msl=5, leaves=15),
            setting(leaves=15, l2=1.0, msl=5), setting(leaves=15, subsample=0.7),
            setting(msl=5, subsample=0.7), setting(leaves=15, l2=1.0, subsample=0.7),
            setting(msl=10), setting(msl=10, leaves=15), setting(loss="yetirank", leaves=15)]
    return {"coarse": coarse, "fine": fine}


def make_learner(cfg):
    if cfg["learner"] == "oblivious":
        return ObliviousTree(depth=cfg["depth"], l2=cfg["l2"], min_samples_leaf=1,
                             min_child_weight=cfg["mcw"], n_bins=255)
    return RegressionTree(max_leaves=cfg["leaves"], min_samples_leaf=cfg["msl"],
                          min_child_weight=cfg["mcw"], l2=cfg["l2"], n_bins=255)


def fit_ours(cfg, tr, va, args):
    loss = registry.resolve_loss(cfg["loss"])
    step = getattr(loss, "preferred_step", "surrogate")
    return B.run_trb(loss, step, "diag", tr, va, args, args.rounds, cfg["patience"],
                     subsample=cfg["subsample"], learner=make_learner(cfg), lr=cfg["lr"])


def refs(args):
    out = {"ref:lgb-lambdarank": lambda tr, va: B.run_lgb(tr, va, args, args.rounds, 30)}
    try:
        import catboost  # noqa: F401
    except ImportError:
        return out
    out["ref:cb-yetirank"] = lambda tr, va: B.run_cb("YetiRank", tr, va, args, args.rounds, 30)
    out["ref:cb-pairlogit"] = lambda tr, va: B.run_cb("PairLogit", tr, va, args, args.rounds, 30)
    return out


def score_folds(fit, data):
    """Fit on every fold of every collection: per collection, the folds' validation and
    test NDCG@10, fit seconds and kept rounds."""
    res = {}
    for coll, folds in data.items():
        rows = []
        for k, tr, va, te in folds:
            predict, fit_s, n_trees, best, _ = fit(tr, va)
            rows.append({"fold": k, "val": B.evaluate(predict(va[0]), va[1], va[2], 1.0)["ndcg@10"],
                         "test": B.evaluate(predict(te[0]), te[1], te[2], 1.0)["ndcg@10"],
                         "fit_s": fit_s, "trees": n_trees, "best": best})
        res[coll] = rows
    return res


def summary(res):
    """Means per collection and the score (mean over collections of the validation mean)."""
    per = {c: {k: statistics.mean(r[k] for r in rows) for k in ("val", "test", "fit_s", "best")}
           | {"min_best": min(r["best"] for r in rows)} for c, rows in res.items()}
    return {"score": statistics.mean(p["val"] for p in per.values()),
            "test_mean": statistics.mean(p["test"] for p in per.values()), "per": per}


def paired(results, name, ref="base"):
    """Mean fold-wise difference of the validation NDCG@10 from ``ref`` (all folds of all
    collections, each collection weighted equally) and its standard error."""
    if ref not in results:
        return float("nan"), float("nan")
    diffs = []
    for c, rows in results[name]["folds"].items():
        base = {r["fold"]: r["val"] for r in results[ref]["folds"][c]}
        diffs += [r["val"] - base[r["fold"]] for r in rows]
    return statistics.mean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5


def table(results):
    names = list(results)
    ref_fit = results.get("ref:lgb-lambdarank", {}).get("summary", {}).get("per")
    cols = list(next(iter(results.values()))["summary"]["per"])
    head = ("| setting | score (val) | val - base (SE) | " + " | ".join(f"{c} val / test" for c in cols)
            + " | fit s (" + ", ".join(cols) + ") | x LightGBM | best rounds (min) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for n in sorted(names, key=lambda n: -results[n]["summary"]["score"]):
        s = results[n]["summary"]
        per = s["per"]
        ratio = (statistics.mean(per[c]["fit_s"] / ref_fit[c]["fit_s"] for c in cols)
                 if ref_fit else float("nan"))
        d, se = paired(results, n)
        lines.append(f"| {n} | {s['score']:.4f} | {d:+.4f} ({se:.4f}) | "
                     + " | ".join(f"{per[c]['val']:.4f} / {per[c]['test']:.4f}" for c in cols)
                     + " | " + ", ".join(f"{per[c]['fit_s']:.2f}" for c in cols)
                     + f" | {ratio:.2f} | "
                     + ", ".join(f"{per[c]['best']:.0f} ({per[c]['min_best']})" for c in cols)
                     + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", default="coarse", choices=sorted(grids()))
    ap.add_argument("--only", default=None, help="comma list of setting names to run")
    ap.add_argument("--refs", action="store_true", help="also LightGBM and CatBoost")
    ap.add_argument("--rounds", type=int, default=300, help="at most this many rounds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=str(OUT / "grid.json"))
    ap.add_argument("--redo", action="store_true", help="refit settings already in --json")
    ap.add_argument("--table", action="store_true", help="print the table of --json and stop")
    args = ap.parse_args(argv)
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    if args.table:
        print(table(results))
        return
    torch.set_num_threads(args.threads)
    bargs = SimpleNamespace(threads=args.threads, lr=0.1, leaves=31, rounds=args.rounds)
    folds = [1, 2, 3, 4, 5]
    data = {c: list(f(folds)) for c, f in COLLECTIONS.items()}
    todo = [(c["name"], c, (lambda tr, va, c=c: fit_ours(c, tr, va, bargs)))
            for c in grids()[args.grid]]
    if args.refs:
        todo += [(n, {"name": n}, fn) for n, fn in refs(bargs).items()]
    if args.only:
        keep = set(args.only.split(";"))
        todo = [t for t in todo if t[0] in keep]
    print(f"{len(todo)} settings; load average {os.getloadavg()[0]:.1f}", flush=True)
    for name, cfg, fit in todo:
        if name in results and not args.redo:
            continue
        t0 = time.perf_counter()
        res = score_folds(fit, data)
        results[name] = {"config": cfg, "folds": res, "summary": summary(res),
                         "load": os.getloadavg()[0]}
        s = results[name]["summary"]
        print(f"{name:50s} score {s['score']:.4f} test {s['test_mean']:.4f} "
              + " ".join(f"{c}:{p['val']:.4f}/{p['test']:.4f}/{p['fit_s']:.2f}s/b{p['min_best']}"
                         for c, p in s["per"].items())
              + f"  [{time.perf_counter() - t0:.0f}s, load {os.getloadavg()[0]:.1f}]",
              flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
