"""Learning to rank from simulated clicks (MQ2008, MSLR sample): debiasing vs LightGBM, XGBoost.

The protocol of the unbiased learning-to-rank literature: a production ranker trained on 1 %
of the training queries (true labels) orders every training query; its top 10 are shown in
``--sessions`` sessions (a query drawn uniformly per session) and clicked under the
position-based model (examination ``(1/p)^eta``, click probability ``eps- + (eps+ - eps-)
(2^y - 1) / (2^ymax - 1)`` with ``eps- = 0.1``, ``eps+ = 1``). Every method learns from the
aggregated clicks (click-through rates of each shown document and its position) and is
evaluated by NDCG@10 on the test queries' **true** labels (mean over queries).

Methods (our booster: exponential pairwise loss, 31-leaf trees, ``--rounds`` rounds,
learning rate 0.1):

* ``skyline``  the same booster on the true labels;
* ``naive``    click pairs without correction (:class:`IPWLoss` with propensity 1);
* ``ipw``      click pairs with the true propensities (known, clipped at 0.01);
* ``em``       propensities by regression-EM between rounds (:class:`RegressionEMLoss`);
* ``dla``      the dual learning algorithm's propensity table (:class:`DualLearningLoss`);
* ``additive`` ``f(x) + g(position)`` (:class:`AdditivePositionLoss`);
* ``lightgbm_position``  LightGBM lambdarank with its position term
  (``lgb.Dataset(..., position=...)``; labels: the click-through rate in 11 levels,
  ``round(10 ctr)``, linear gains), 31 leaves, same rounds and learning rate;
* ``xgboost_unbiased``  XGBoost ``rank:ndcg`` with ``lambdarank_unbiased=True`` (rows of a
  query in displayed order, which is what XGBoost reads as the position), the same labels
  with ``ndcg_exp_gain=False``.

``--quick``: fold 1, eta = 1, 10^5 sessions, seeds 0 and 1 (mean and std over the seeds);
writes ``results/clicks/quick.json`` (``{method: {"ndcg@10", "std", "fit_s"}}``). Without
``--quick``: ``--folds`` (default ``1-5``) x ``--etas`` (default ``0.5,1,2``) x ``--seeds``
(default ``0``), ``results/clicks/<--name>.json`` (default ``full``; ``{eta: {method:
{...}}}``, std over folds x seeds) and ``<--name>_runs.json`` (every run's figures, for
paired comparisons). ``--dataset mslr``: the MSLR-WEB10K sample of the data folder (one
training and one test file: a single "fold"; the production ranker on 2 of its queries).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from torchrankboost import Booster, RegressionTree
from torchrankboost import metrics as M
from torchrankboost.clicks import IPWLoss, make_debias, pbm_propensity, simulate_clicks
from torchrankboost.clicks.neural import NAIVE, NEURAL_DEBIAS
from torchrankboost.data import dataset_path, load_files, load_letor_fold
from torchrankboost.groups import Groups
from torchrankboost.losses import ExponentialPairwiseLoss

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "clicks"
K = 10
F64 = torch.float64


def sub_queries(data, frac: float, seed: int):
    """``(X, y, groups)`` of a seeded ``frac`` of ``data``'s queries (at least 2)."""
    G = data.groups.num_groups
    pick = torch.randperm(G, generator=torch.Generator().manual_seed(seed))
    pick = torch.sort(pick[:max(2, int(round(frac * G)))]).values
    off = data.groups.offsets
    rows = torch.cat([torch.arange(int(off[q]), int(off[q + 1])) for q in pick.tolist()])
    sizes = (off[pick + 1] - off[pick])
    return data.X[rows], data.labels[rows], Groups.from_sizes(sizes)


def booster(loss, args, seed):
    return Booster(loss, RegressionTree(max_leaves=31), n_rounds=args.rounds,
                   learning_rate=0.1, seed=seed, verbose=False)


def ndcg(scores, te) -> float:
    return float(M.ndcg_at_k(torch.as_tensor(scores, dtype=F64), te.labels, te.groups, k=10,
                             empty=0.0))  # LETOR: a query without a relevant document scores 0


def fit_ours(name, tr, ctr, pos, te, args, eta, seed):
    base = ExponentialPairwiseLoss()
    if name == NAIVE:  # click pairs without correction
        loss = IPWLoss(base, [1.0] * K)
    else:  # a registered method (ipw: the true propensities, clipped at 0.01 by default)
        loss = make_debias(name, base, propensity=pbm_propensity(K, eta))
    t0 = time.perf_counter()
    model = booster(loss, args, seed).fit(tr.X, ctr, tr.groups, position=pos)
    return ndcg(model.predict(te.X), te), time.perf_counter() - t0, model.info


def fit_skyline(tr, te, args, seed):
    t0 = time.perf_counter()
    model = booster(ExponentialPairwiseLoss(), args, seed).fit(tr.X, tr.labels, tr.groups)
    return ndcg(model.predict(te.X), te), time.perf_counter() - t0, {}


def _levels(ctr) -> np.ndarray:
    return np.rint(10 * ctr.numpy()).astype(np.int32)


def fit_lightgbm(tr, ctr, pos, te, args, seed):
    import lightgbm as lgb

    sizes = (tr.groups.offsets[1:] - tr.groups.offsets[:-1]).numpy()
    p = pos.numpy().copy()
    ds = lgb.Dataset(tr.X.numpy(), _levels(ctr), group=sizes, position=p)
    params = dict(objective="lambdarank", num_leaves=31, learning_rate=0.1, verbose=-1,
                  label_gain=list(range(11)), num_threads=1, seed=seed, min_data_in_leaf=20)
    t0 = time.perf_counter()
    b = lgb.train(params, ds, num_boost_round=args.rounds)
    return ndcg(b.predict(te.X.numpy()), te), time.perf_counter() - t0, {}


def fit_xgboost(tr, ctr, pos, te, args, seed):
    import xgboost as xgb

    gi = tr.groups.group_index
    key = torch.where(pos > 0, pos, torch.full_like(pos, 10 ** 6))  # unshown last
    order = torch.argsort(key, stable=True)
    order = order[torch.argsort(gi[order], stable=True)]  # by query, then displayed order
    d = xgb.DMatrix(tr.X[order].numpy(), label=_levels(ctr[order]), qid=gi[order].numpy())
    params = {"objective": "rank:ndcg", "lambdarank_unbiased": True, "ndcg_exp_gain": False,
              "eta": 0.1, "max_leaves": 31, "grow_policy": "lossguide", "tree_method": "hist",
              "nthread": 1, "seed": seed, "eval_metric": "ndcg@10"}
    t0 = time.perf_counter()
    b = xgb.train(params, d, num_boost_round=args.rounds)
    return ndcg(b.predict(xgb.DMatrix(te.X.numpy())), te), time.perf_counter() - t0, {}


OURS = NEURAL_DEBIAS  # naive, then the registry's debiasing methods
METHODS = ("skyline",) + OURS + ("lightgbm_position", "xgboost_unbiased")
_CACHE = {}


def load_split(dataset: str, fold: int):
    """``(train, test)`` of MQ2008 fold ``fold`` or of the MSLR-WEB10K sample (cached)."""
    key = (dataset, fold)
    if key not in _CACHE:
        if dataset == "mslr":
            base = dataset_path("mslr_web10k_rankeval_5k")
            parts = load_files([base / "msn1.fold1.train.5k.txt", base / "msn1.fold1.test.5k.txt"])
            _CACHE[key] = tuple(SimpleNamespace(X=d.X.double(), labels=d.labels.double(),
                                                groups=d.groups) for d in parts)
        else:
            tr, _, te = load_letor_fold(dataset_path("mq2008", f"Fold{fold}"),
                                        dtype=torch.float64)
            _CACHE[key] = (tr, te)
    return _CACHE[key]


def one_run(fold: int, eta: float, seed: int, args) -> dict:
    tr, te = load_split(args.dataset, fold)
    Xp, yp, gp = sub_queries(tr, 0.01, seed)
    prod = booster(ExponentialPairwiseLoss(), args, seed).fit(Xp, yp, gp)
    log = simulate_clicks(tr.labels, tr.groups, prod.predict(tr.X), n_sessions=args.sessions,
                          eta=eta, eps_minus=0.1, eps_plus=1.0, top_k=K, seed=seed)
    ctr, pos = log.ctr(), log.position
    out = {"production": (ndcg(prod.predict(te.X), te), 0.0, {})}
    for name in args.methods:
        if name == "skyline":
            out[name] = fit_skyline(tr, te, args, seed)
        elif name == "lightgbm_position":
            out[name] = fit_lightgbm(tr, ctr, pos, te, args, seed)
        elif name == "xgboost_unbiased":
            out[name] = fit_xgboost(tr, ctr, pos, te, args, seed)
        else:
            out[name] = fit_ours(name, tr, ctr, pos, te, args, eta, seed)
    for k, (v, s, info) in out.items():
        state = info.get("position_debias", {})
        key = "position_bias" if "position_bias" in state else "propensity"
        prop = "" if not state else f" {key} " + " ".join(
            f"{float.fromhex(x):.3f}" for x in state[key])
        print(f"{args.dataset} fold {fold} eta {eta} seed {seed} {k:18s} ndcg@10 {v:.4f} "
              f"fit {s:6.2f}s{prop}",
              flush=True)
    return {k: (v, s) for k, (v, s, _) in out.items()}


def summarise(runs) -> dict:
    keys = runs[0].keys()
    return {k: {"ndcg@10": float(np.mean([r[k][0] for r in runs])),
                "std": float(np.std([r[k][0] for r in runs])),
                "fit_s": float(np.mean([r[k][1] for r in runs]))} for k in keys}


def table(res: dict) -> str:
    sky, nai = res.get("skyline", {}).get("ndcg@10"), res.get("naive", {}).get("ndcg@10")
    gap = None if sky is None or nai is None or sky == nai else sky - nai
    rows = ["| method | NDCG@10 | std | fit (s) | gap closed |", "|---|---|---|---|---|"]
    rows += [f"| {k} | {v['ndcg@10']:.4f} | {v['std']:.4f} | {v['fit_s']:.2f} | "
             + ("" if gap is None or k in ("skyline", "production")
                else f"{100 * (v['ndcg@10'] - nai) / gap:.0f} %") + " |"
             for k, v in res.items()]
    return "\n".join(rows)


def paired(runs, a: str, b: str) -> str:
    """Mean and standard error of the per-run difference ``a - b`` (same clicks)."""
    if not runs or a not in runs[0] or b not in runs[0]:
        return ""
    d = np.array([r[a][0] - r[b][0] for r in runs])
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{a} - {b}: {d.mean():+.4f} (s.e. {se:.4f}, {int((d > 0).sum())}/{len(d)} runs > 0)"


def int_list(text: str):
    """``"1-5"`` or ``"1,3,4"`` -> list of ints."""
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dataset", choices=["mq2008", "mslr"], default="mq2008")
    ap.add_argument("--folds", default="1-5", help="e.g. 1-5 or 1,3 (mslr: one fold)")
    ap.add_argument("--etas", default="0.5,1,2")
    ap.add_argument("--seeds", default=None, help="e.g. 0-1; default: 0,1 with --quick, else 0")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--name", default="full", help="output file stem without --quick")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    args.methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        ap.error(f"unknown methods {bad}")
    where = (dataset_path("mslr_web10k_rankeval_5k") if args.dataset == "mslr"
             else dataset_path("mq2008", "Fold1"))
    if not where.is_dir():
        print(f"{args.dataset} not found under {where}", file=sys.stderr)
        return 2
    seeds = int_list(args.seeds or ("0,1" if args.quick else "0"))
    folds = [1] if args.dataset == "mslr" else int_list(args.folds)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.quick:
        res = summarise([one_run(1, 1.0, s, args) for s in seeds])
        (OUT / "quick.json").write_text(json.dumps(res, indent=1) + "\n")
        print(table(res))
    else:
        res, raw = {}, {}
        for eta in [float(e) for e in args.etas.split(",")]:
            runs = []
            for f in folds:
                for s in seeds:
                    runs.append(one_run(f, eta, s, args))
                    raw.setdefault(str(eta), []).append({"fold": f, "seed": s, **runs[-1]})
                    (OUT / f"{args.name}_runs.json").write_text(json.dumps(raw) + "\n")
            res[str(eta)] = summarise(runs)
            print(f"eta {eta} ({len(runs)} runs)\n{table(res[str(eta)])}", flush=True)
            for a in OURS[1:]:
                for b in ("naive", "lightgbm_position", "xgboost_unbiased"):
                    line = paired(runs, a, b)
                    if line:
                        print(line)
        (OUT / f"{args.name}.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"total {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
