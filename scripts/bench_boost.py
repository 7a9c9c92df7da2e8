"""Benchmark: torchrankboost's Booster vs LightGBM and XGBoost, side by side in one process.

(a) MQ2008 (LETOR 4.0, QueryLevelNorm, 5 folds; early stopping on vali NDCG@10): test
    NDCG@1,3,5,10 and MAP, mean over folds, for

    * ``trb-exp``     Booster(ExponentialPairwiseLoss, RegressionTree) — the default step
      (``"surrogate"``: per-leaf Newton values, one fused loss evaluation), diag curvature
    * ``trb-exp-q8``, ``trb-exp-q16``  ``trb-exp`` in the quantized speed mode
      (``RegressionTree(quantized_bits=8 / 16)``: seeded stochastic rounding of ``w·t`` and
      ``w`` to 8 / 16 bits, packed histogram lanes)
    * ``trb-exp-bound``  the same with the diagonal Hessian bound
    * ``trb-exp-ls``, ``trb-qbrank-ls``  the exact line search instead
    * ``trb-qbrank``  Booster(QBRankLoss, ..., curvature="bound") — the default step
    * ``trb-lambdarank-exp``  Booster(LambdaRankExpLoss, ...): LambdaRank's |ΔNDCG| weights
      over all pairs (no truncation) times the exponential pair loss, diag curvature,
      ``step="fixed"`` (LambdaMART: Newton leaf values, no loss check — the weights move
      with the ranks, so the loss is not a fixed function to descend)
    * ``lgb-lambdarank``  LightGBM ``objective="lambdarank"``
    * ``lgb-exp-custom``  LightGBM with ``objective=callable`` fed by our exponential loss's
      closed-form gradient and Hessian diagonal (same trees, LightGBM's fixed step)
    * ``xgb-pairwise``    XGBoost ``rank:pairwise``, ``tree_method="hist"``
    * ``trb-lrexp-oblivious``  LambdaRankExpLoss on ObliviousTree(depth=6, l2=10), lr 0.05
    * ``trb-yetirank``    Booster(YetiRankLoss) — CatBoost's YetiRank pair weights (10
      perturbations, redrawn every round), the default step and curvature
    * ``trb-cv-best``     the best setting by validation in ``scripts/tune_defaults.py``:
      15 leaves, L2 1 on leaves, early-stopping patience 60
    * ``trb-cv-second``   the second: min 5 documents per leaf, 70 % of the queries per round
    * ``trb-exp-qbag``    ``trb-exp`` with query bagging: half of the queries per round
      (``subsample=0.5``, LightGBM's ``bagging_by_query``)
    * ``cb-yetirank``, ``cb-pairlogit``  CatBoost ``YetiRank`` / ``PairLogit`` as CatBoost
      users run them: its own trees (symmetric, depth 6), 255 borders, the same learning
      rate, rounds and early stopping (on ``NDCG:top=10;type=Exp``, the best iteration kept);
      the fit time includes its ``Pool`` construction and quantisation

    All others: 31 leaves, learning rate 0.1, min 20 documents per leaf, 255 bins, at most
    ``--mq-rounds`` rounds, early stopping after 30 rounds without vali NDCG@10 gain, and
    the same evaluator (torchrankboost.metrics: exp gain, stable ties, a query without a
    relevant document counts 1 as in LightGBM — see ``--empty``).

(b) Synthetic LETOR-shaped data (``make_letor``: 136 features, ~100 documents per query),
    80k, 800k and/or 4M training documents (``--sizes``; 4M is the size of the largest public
    LETOR set) plus a 20k-document test set: 100 trees × 31 leaves, learning rate 0.1, no
    early stopping; wall time (fit only, data binning included for everyone), seconds per
    tree, NDCG@10 on the test set. With ``--isolate`` (always from 2M documents) each method
    runs in its own process and its peak RSS during the fit is reported (the peak is reset
    after the data are built) beside LightGBM's.

Everything runs with ``--threads`` threads (torch intra-op, LightGBM ``num_threads``,
XGBoost ``nthread``). Examples::

    python scripts/bench_boost.py --only mq2008
    python scripts/bench_boost.py --only lgb-example --rounds 100
    python scripts/bench_boost.py --only synthetic --sizes 80k
    python scripts/bench_boost.py --only synthetic --sizes 800k --methods trb-exp-newton,lgb-lambdarank
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from torchrankboost import metrics as M
from torchrankboost.boosting import Booster, HistoryCallback, ObliviousTree, RegressionTree
from torchrankboost.data import data_root
import torchrankboost.losses as L

DATA = data_root()  # $TORCHRANKBOOST_DATA, else ./data


# ----------------------------------------------------------------------------- evaluation
def evaluate(scores, labels, groups, empty):
    s = torch.as_tensor(np.asarray(scores), dtype=torch.float64)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.float64)
    out = {f"ndcg@{k}": float(M.ndcg_at_k(s, y, groups, k=k, empty=empty)) for k in (1, 3, 5, 10)}
    out["map"] = float(M.mean_average_precision(s, y, groups, empty=empty))
    return out


# ----------------------------------------------------------------------------- methods
def tree(args, **extra):
    return RegressionTree(max_leaves=args.leaves, min_samples_leaf=20, min_child_weight=1e-3,
                          n_bins=255, **extra)


def run_trb(loss, step, curvature, tr, va, args, rounds, early, subsample=1.0, learner=None,
            lr=None):
    X, y, g = tr
    hist = HistoryCallback()
    b = Booster(loss, learner or tree(args), n_rounds=rounds,
                learning_rate=args.lr if lr is None else lr, step=step,
                curvature=curvature, seed=0, n_threads=args.threads, subsample=subsample)
    t0 = time.perf_counter()
    kw = {"callbacks": [hist]}
    if va is not None:
        kw.update(eval_set=[va], eval_metric="ndcg@10", early_stopping_rounds=early)
    ens = b.fit(X, y, g, **kw)
    fit_s = time.perf_counter() - t0
    n_trees = len(hist.rounds)
    parts = {k: sum(hist[k]) / max(n_trees, 1) for k in
             ("seconds_grad", "seconds_learner", "seconds_step", "seconds_eval")}
    evals = [d["line_search"].get("n_evals", 0) for d in hist.rounds]
    round_s = sum(hist["seconds"]) / max(n_trees, 1)  # per round, binning excluded
    return ens.predict, fit_s, n_trees, ens.n_rounds, dict(
        parts, ls_evals=statistics.mean(evals) if evals else 0, round_s=round_s,
        bin_s=fit_s - sum(hist["seconds"]))


def lgb_datasets(tr, va, args):
    import lightgbm as lgb

    X, y, g = tr
    dtr = lgb.Dataset(X.numpy(), y.numpy(), group=g.sizes.numpy(),
                      params={"max_bin": 255, "verbose": -1}, free_raw_data=False)
    dva = None
    if va is not None:
        dva = lgb.Dataset(va[0].numpy(), va[1].numpy(), group=va[2].sizes.numpy(),
                          reference=dtr, free_raw_data=False)
    return dtr, dva


def lgb_params(args, **extra):
    p = dict(num_leaves=args.leaves, learning_rate=args.lr, min_data_in_leaf=20,
             min_sum_hessian_in_leaf=1e-3, max_bin=255, num_threads=args.threads,
             verbose=-1, seed=0, deterministic=True, force_row_wise=True, lambda_l2=0.0)
    p.update(extra)
    return p


def run_lgb(tr, va, args, rounds, early, custom_loss=None):
    import lightgbm as lgb

    dtr, dva = lgb_datasets(tr, va, args)
    tb = time.perf_counter()
    dtr.construct()  # binning timed apart, as ours (``bin_s``)
    if dva is not None:
        dva.construct()
    bin_s = time.perf_counter() - tb
    g = tr[2]
    y = tr[1]
    if custom_loss is None:
        params = lgb_params(args, objective="lambdarank", metric="ndcg", eval_at=[10])
    else:
        def fobj(preds, dataset):
            s = torch.as_tensor(preds, dtype=torch.float64)
            grad, hess = custom_loss.grad_hess(s, y, g, hess="diag")
            return grad.numpy(), hess.clamp_min(1e-16).numpy()

        def feval(preds, dataset):
            s = torch.as_tensor(preds, dtype=torch.float64)
            return "ndcg@10", float(M.ndcg_at_k(s, dataset.get_label_t, dataset.groups_t,
                                                k=10)), True
        params = lgb_params(args, objective=fobj, metric="None")
    callbacks = []
    valid_sets = []
    feval_fn = None
    record: dict = {}
    if dva is not None:
        valid_sets = [dva]
        callbacks.append(lgb.early_stopping(early, first_metric_only=True, verbose=False))
        callbacks.append(lgb.record_evaluation(record))
        if custom_loss is not None:
            dva.get_label_t = torch.as_tensor(va[1].numpy(), dtype=torch.float64)
            dva.groups_t = va[2]
            feval_fn = feval
    t0 = time.perf_counter()
    bst = lgb.train(params, dtr, num_boost_round=rounds, valid_sets=valid_sets,
                    callbacks=callbacks, feval=feval_fn)
    fit_s = time.perf_counter() - t0
    n_trees = bst.current_iteration()  # lgb.train keeps only the best iteration's trees
    best = bst.best_iteration if (dva is not None and bst.best_iteration > 0) else n_trees
    if record:  # rounds actually trained (best + patience)
        n_trees = max(len(v) for d in record.values() for v in d.values())

    def predict(X):
        return bst.predict(X.numpy(), num_iteration=best)
    return predict, fit_s + bin_s, n_trees, best, {"bin_s": bin_s,
                                                   "round_s": fit_s / max(n_trees, 1)}


def run_xgb(tr, va, args, rounds, early):
    import xgboost as xgb

    X, y, g = tr
    qid = g.group_index.numpy()
    dtr = xgb.DMatrix(X.numpy(), label=y.numpy(), qid=qid, nthread=args.threads)
    evals = []
    if va is not None:
        dva = xgb.DMatrix(va[0].numpy(), label=va[1].numpy(), qid=va[2].group_index.numpy(),
                          nthread=args.threads)
        evals = [(dva, "vali")]
    params = {"objective": "rank:pairwise", "tree_method": "hist", "nthread": args.threads,
              "eta": args.lr, "max_leaves": args.leaves, "grow_policy": "lossguide",
              "max_depth": 0, "min_child_weight": 1e-3, "max_bin": 255,
              "eval_metric": "ndcg@10", "seed": 0}
    t0 = time.perf_counter()
    bst = xgb.train(params, dtr, num_boost_round=rounds, evals=evals,
                    early_stopping_rounds=early if evals else None, verbose_eval=False)
    fit_s = time.perf_counter() - t0
    n_trees = bst.num_boosted_rounds()
    best = (bst.best_iteration + 1) if evals else n_trees

    def predict(Xt):
        return bst.predict(xgb.DMatrix(Xt.numpy(), nthread=args.threads),
                           iteration_range=(0, best))
    return predict, fit_s, n_trees, best, {}


def run_cb(loss_function, tr, va, args, rounds, early):
    """CatBoost (``loss_function`` "YetiRank" or "PairLogit") with its default trees."""
    from catboost import CatBoost, Pool

    X, y, g = tr
    params = {"loss_function": loss_function, "iterations": rounds, "learning_rate": args.lr,
              "depth": 6, "border_count": 255, "thread_count": args.threads,
              "random_seed": 0, "verbose": 0, "allow_writing_files": False}
    t0 = time.perf_counter()
    pool = Pool(X.numpy(), y.numpy(), group_id=g.group_index.numpy())
    kw = {}
    if va is not None:
        params.update(eval_metric="NDCG:top=10;type=Exp", od_type="Iter", od_wait=early,
                      use_best_model=True)
        kw["eval_set"] = Pool(va[0].numpy(), va[1].numpy(), group_id=va[2].group_index.numpy())
    model = CatBoost(params)
    model.fit(pool, **kw)
    fit_s = time.perf_counter() - t0
    n_trees = max([len(v) for d in model.get_evals_result().values() for v in d.values()]
                  or [model.tree_count_])  # rounds trained (best + patience)
    best = model.tree_count_  # use_best_model keeps the best iteration's trees

    def predict(Xt):
        return model.predict(Xt.numpy())
    return predict, fit_s, n_trees, best, {}


def methods(args):
    avail = {
        "trb-exp": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "surrogate",
                                                "diag", tr, va, args, R, E),
        # the quantized speed mode: w·t and w in 8 (16) bits, seeded stochastic rounding
        "trb-exp-q8": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "surrogate",
                                                   "diag", tr, va, args, R, E,
                                                   learner=tree(args, quantized_bits=8)),
        "trb-exp-q16": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "surrogate",
                                                    "diag", tr, va, args, R, E,
                                                    learner=tree(args, quantized_bits=16)),
        "trb-exp-bound": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(),
                                                      "surrogate", "bound", tr, va, args, R, E),
        "trb-exp-ls": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "line_search",
                                                   "diag", tr, va, args, R, E),
        "trb-exp-newton": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "newton",
                                                       "diag", tr, va, args, R, E),
        "trb-qbrank": lambda tr, va, R, E: run_trb(L.QBRankLoss(), "surrogate", "bound", tr,
                                                   va, args, R, E),
        "trb-qbrank-ls": lambda tr, va, R, E: run_trb(L.QBRankLoss(), "line_search", "bound",
                                                      tr, va, args, R, E),
        "trb-lambdarank-exp": lambda tr, va, R, E: run_trb(L.LambdaRankExpLoss(), "fixed",
                                                           "diag", tr, va, args, R, E),
        # LambdaRank-weighted exponential pairs on CatBoost-style symmetric trees (depth 6,
        # L2 10), learning rate 0.05: the candidate that matched CatBoost's YetiRank on MQ2008
        "trb-lrexp-oblivious": lambda tr, va, R, E: run_trb(
            L.LambdaRankExpLoss(), "fixed", "diag", tr, va, args, R, E,
            learner=ObliviousTree(depth=6, l2=10.0), lr=0.05),
        # the two best settings by validation NDCG@10 in scripts/tune_defaults.py
        "trb-cv-best": lambda tr, va, R, E: run_trb(
            L.ExponentialPairwiseLoss(), "surrogate", "diag", tr, va, args, R, 60,
            learner=RegressionTree(max_leaves=15, l2=1.0, min_samples_leaf=20,
                                   min_child_weight=1e-3, n_bins=255)),
        "trb-cv-second": lambda tr, va, R, E: run_trb(
            L.ExponentialPairwiseLoss(), "surrogate", "diag", tr, va, args, R, E, subsample=0.7,
            learner=RegressionTree(max_leaves=args.leaves, min_samples_leaf=5,
                                   min_child_weight=1e-3, n_bins=255)),
        "lgb-lambdarank": lambda tr, va, R, E: run_lgb(tr, va, args, R, E),
        "lgb-exp-custom": lambda tr, va, R, E: run_lgb(tr, va, args, R, E,
                                                       custom_loss=L.ExponentialPairwiseLoss()),
        "xgb-pairwise": lambda tr, va, R, E: run_xgb(tr, va, args, R, E),
        "trb-yetirank": lambda tr, va, R, E: run_trb(L.YetiRankLoss(), "surrogate", "diag",
                                                     tr, va, args, R, E),
        "trb-exp-qbag": lambda tr, va, R, E: run_trb(L.ExponentialPairwiseLoss(), "surrogate",
                                                     "diag", tr, va, args, R, E,
                                                     subsample=0.5),
    }
    try:  # an optional peer (the bench extra)
        import catboost  # noqa: F401
        avail["cb-yetirank"] = lambda tr, va, R, E: run_cb("YetiRank", tr, va, args, R, E)
        avail["cb-pairlogit"] = lambda tr, va, R, E: run_cb("PairLogit", tr, va, args, R, E)
    except ImportError:
        pass
    return avail


# ----------------------------------------------------------------------------- parts
def load_fold(k):
    from torchrankboost.data import load_letor_fold

    tr, va, te = load_letor_fold(DATA / "mq2008" / f"Fold{k}")
    return [(d.X.float(), d.labels.double(), d.groups) for d in (tr, va, te)]


def query_folds(train, test, folds, seed=0):
    """Five validation folds of one training file's queries: fold ``k`` validates on the k-th
    fifth of the training queries (a seeded draw) and trains on the rest; every fold tests
    on ``test``. Yields ``(k, train, valid, test)``, each part ``(X, labels, groups)``."""
    from torchrankboost.data import take_queries

    Q = train.groups.num_groups
    perm = torch.randperm(Q, generator=torch.Generator().manual_seed(seed))
    te = (test.X.float(), test.labels.double(), test.groups)
    for k in folds:
        va_q = perm[(k - 1) * Q // 5: k * Q // 5].sort().values
        keep = torch.ones(Q, dtype=torch.bool)
        keep[va_q] = False
        parts = []
        for q in (keep.nonzero().squeeze(1), va_q):
            X, y, g = take_queries(train.X, train.labels, train.groups, q)
            parts.append((X.float(), y.double(), g))
        yield k, parts[0], parts[1], te


def mslr_folds(folds):
    """The MSLR-WEB10K sample (one training and one test file of 5k lines) in five
    validation folds of its training queries (:func:`query_folds`)."""
    from torchrankboost.data import load_svmlight_files

    base = DATA / "mslr_web10k_rankeval_5k"
    tr, te = load_svmlight_files([base / "msn1.fold1.train.5k.txt", base / "msn1.fold1.test.5k.txt"])
    yield from query_folds(tr, te, folds)


def lgb_example_folds(folds):
    """LightGBM's lambdarank example (``rank.train`` / ``rank.test``) in five validation
    folds of its training queries (:func:`query_folds`)."""
    from torchrankboost.data import load_svmlight_files

    folder = DATA / "lightgbm_lambdarank"
    tr, te = load_svmlight_files([folder / "rank.train", folder / "rank.test"])
    yield from query_folds(tr, te, folds)


def mq2008_folds(folds):
    """MQ2008's own folds: ``(k, train, valid, test)``."""
    for k in folds:
        yield (k, *load_fold(k))


def part_mq2008(args, chosen, name="MQ2008"):
    folds = [int(f) for f in args.folds.split(",")]
    rows = {m: [] for m in chosen}
    info = {m: [] for m in chosen}
    splits = mslr_folds(folds) if name != "MQ2008" else mq2008_folds(folds)
    for k, tr, va, te in splits:
        for m in chosen:
            predict, fit_s, n_trees, best, extra = methods(args)[m](tr, va, args.mq_rounds, 30)
            res = evaluate(predict(te[0]), te[1], te[2], args.empty)
            rows[m].append(res)
            info[m].append((fit_s, n_trees, best, extra))
            print(f"  fold {k} {m:16s} ndcg@10 {res['ndcg@10']:.4f} map {res['map']:.4f} "
                  f"trees {n_trees} (best {best}) fit {fit_s:.2f}s {fmt_extra(extra)}",
                  flush=True)
    print(f"\n{name}, mean over folds {folds} (test set; {args.threads} threads; "
          f"empty-query NDCG/AP = {args.empty})")
    keys = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]
    print(f"{'method':18s} " + " ".join(f"{k:>8s}" for k in keys) + "   best-trees  fit-s")
    summary = {}
    for m in chosen:
        mean = {k: statistics.mean(r[k] for r in rows[m]) for k in keys}
        summary[m] = mean
        bt = statistics.mean(i[2] for i in info[m])
        fs = statistics.mean(i[0] for i in info[m])
        print(f"{m:18s} " + " ".join(f"{mean[k]:8.4f}" for k in keys) + f"   {bt:8.1f}  {fs:6.2f}")
    if "lgb-lambdarank" in summary:
        ref = summary["lgb-lambdarank"]["ndcg@10"]
        for m in chosen:
            print(f"  {m:18s} NDCG@10 - lambdarank = {summary[m]['ndcg@10'] - ref:+.4f}")
    return summary


def part_lgb_example(args, chosen):
    """LightGBM's own lambdarank example (a Yahoo! LTR sample: 201 training queries, sparse
    features up to index 300, labels 0-4; ``rank.train`` / ``rank.test`` with ``.query``
    files): a LETOR collection of another shape. ``--rounds`` trees, no early stopping; fit
    time, time per tree after binning and test NDCG@10."""
    from torchrankboost.data import load_svmlight_files

    folder = DATA / "lightgbm_lambdarank"
    if not (folder / "rank.train").exists():
        print(f"\nLightGBM's lambdarank example not found under {folder}: skipped")
        return {}
    tr, te = load_svmlight_files([folder / "rank.train", folder / "rank.test"])
    train = (tr.X.float(), tr.labels.double(), tr.groups)
    print(f"\nLightGBM lambdarank example: {tr.X.shape[0]} train docs, {tr.groups.num_groups} "
          f"queries, {tr.X.shape[1]} features; {args.rounds} trees x {args.leaves} leaves, "
          f"{args.threads} threads", flush=True)
    out = {}
    for m in chosen:
        predict, fit_s, n_trees, _, extra = methods(args)[m](train, None, args.rounds, None)
        nd = evaluate(predict(te.X.float()), te.labels.double(), te.groups, args.empty)["ndcg@10"]
        out[m] = (fit_s, n_trees, nd, extra)
        print(f"  {m:16s} fit {fit_s:7.2f}s  {extra.get('round_s', 0) * 1e3:7.2f} ms/tree after "
              f"binning  test ndcg@10 {nd:.4f}", flush=True)
    if "lgb-lambdarank" in out:
        ref_fit, _, _, ref_ex = out["lgb-lambdarank"]
        for m, (fs, nt, nd, ex) in out.items():
            print(f"  {m:16s} fit time ratio to lgb-lambdarank {fs / ref_fit:5.2f}x, per tree after "
                  f"binning {ex.get('round_s', 0) / max(ref_ex.get('round_s', 1e-12), 1e-12):5.2f}x")
    return out


def fmt_extra(extra):
    if not extra:
        return ""
    if "seconds_grad" not in extra:
        if "bin_s" not in extra or "round_s" not in extra:  # XGBoost, CatBoost: the fit only
            return ""
        return "[binning {bin_s:.2f}s, {round_s:.3f}s/tree after it]".format(**extra)
    return ("[binning+setup {bin_s:.2f}s; {round_s:.3f}s/round after it] ""[per tree: grad {seconds_grad:.3f}s learner {seconds_learner:.3f}s step "
            "{seconds_step:.3f}s eval {seconds_eval:.3f}s; line-search evals {ls_evals:.1f}]"
            ).format(**extra)


def parse_size(size: str) -> int:
    return int(float(size.lower().replace("k", "e3").replace("m", "e6")))


def synthetic_data(n):
    from torchrankboost.data import make_letor

    d = make_letor(max(1, n // 100), 100, 136, seed=0)
    return (d.X, d.labels.double(), d.groups)


def _rss_kib(field: str) -> int:
    """VmHWM (peak) or VmRSS (current) of this process, KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def run_synthetic_method(m, size, args):
    """One method on the synthetic set of ``size`` documents: fit time, trees, test NDCG@10,
    the extra timings, and memory: the process's peak RSS during the fit (the peak is reset
    just before it, with the data already in memory) and its RSS before the fit."""
    import gc

    from torchrankboost.data import make_letor

    test = make_letor(200, 100, 136, seed=1234)
    te = (test.X, test.labels.double(), test.groups)
    tr = synthetic_data(parse_size(size))
    gc.collect()
    try:  # reset the peak RSS to the current RSS (Linux: clear_refs 5)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    base = _rss_kib("VmRSS")
    predict, fit_s, n_trees, best, extra = methods(args)[m](tr, None, args.rounds, None)
    peak = _rss_kib("VmHWM")
    nd = float(M.ndcg_at_k(torch.as_tensor(np.asarray(predict(te[0])), dtype=torch.float64),
                           te[1], te[2], k=10))
    extra = dict(extra, rss_before_mib=base / 1024, peak_rss_mib=peak / 1024)
    return fit_s, n_trees, nd, extra, tr[0].shape[0]


def _in_subprocess(m, size, args):
    """``run_synthetic_method`` in a fresh interpreter (for a clean peak-RSS reading)."""
    import subprocess

    cmd = [sys.executable, __file__, "--worker", m, "--sizes", size, "--threads",
           str(args.threads), "--rounds", str(args.rounds), "--lr", str(args.lr),
           "--leaves", str(args.leaves)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{m} at {size} failed:\n{out.stderr[-3000:]}")
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def part_synthetic(args, chosen):
    sizes = [s.strip() for s in args.sizes.split(",")]
    out = {}
    for size in sizes:
        n = parse_size(size)
        if args.istella or n >= 5_000_000:  # Istella-like, made in chunks: _bench_chunked.py
            import _bench_chunked

            out[size] = _bench_chunked.run(size, n, args)
            continue
        isolate = args.isolate or n >= 2_000_000
        print(f"\nsynthetic {size}: ~{n} train docs, 136 features; test ~20k docs; "
              f"{args.rounds} trees x {args.leaves} leaves, {args.threads} threads"
              + ("; each method in its own process (peak RSS)" if isolate else ""), flush=True)
        res = {}
        for m in chosen:
            if isolate:
                fit_s, n_trees, nd, extra, n_docs = _in_subprocess(m, size, args)
            else:
                fit_s, n_trees, nd, extra, n_docs = run_synthetic_method(m, size, args)
            res[m] = (fit_s, n_trees, nd, extra)
            mem = (f"  peak RSS {extra['peak_rss_mib']:7.0f} MiB (before fit "
                   f"{extra['rss_before_mib']:.0f})" if "peak_rss_mib" in extra else "")
            print(f"  {m:16s} fit {fit_s:8.2f}s  {fit_s / max(n_trees, 1) * 1e3:8.1f} ms/tree  "
                  f"ndcg@10 {nd:.4f}{mem}  {fmt_extra(extra)}", flush=True)
        if "lgb-lambdarank" in res:
            ref_fs, ref_nt, _, ref_ex = res["lgb-lambdarank"]
            ref = ref_fs / max(ref_nt, 1)
            ref_r = ref_ex.get("round_s")
            for m, (fs, nt, nd, ex) in res.items():
                extra = ""
                if ref_r and ex.get("round_s"):
                    extra = f"; per tree after binning: {ex['round_s'] / ref_r:6.2f}x"
                if ex.get("peak_rss_mib") and ref_ex.get("peak_rss_mib"):
                    extra += (f"; peak RSS {ex['peak_rss_mib'] / ref_ex['peak_rss_mib']:5.2f}x, "
                              f"RSS added by the fit "
                              f"{(ex['peak_rss_mib'] - ex['rss_before_mib']) / max(1.0, ref_ex['peak_rss_mib'] - ref_ex['rss_before_mib']):5.2f}x")
                print(f"  {m:16s} time/tree ratio to lgb-lambdarank (fit incl. binning): "
                      f"{fs / max(nt, 1) / ref:6.2f}x{extra}")
        out[size] = res
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["mq2008", "mslr", "synthetic", "lgb-example"], default=None)
    ap.add_argument("--sizes", default="80k,800k")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--methods", default=None,
                    help="comma list (default: all available for the part)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--rounds", type=int, default=100, help="trees in the synthetic part")
    ap.add_argument("--mq-rounds", type=int, default=300)
    ap.add_argument("--empty", type=float, default=1.0,
                    help="NDCG/AP of a query without relevant documents (1: LightGBM, 0: LETOR)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--isolate", action="store_true",
                    help="run each synthetic method in its own process and report its peak RSS "
                         "(always on from 2M documents)")
    ap.add_argument("--istella", action="store_true",
                    help="the Istella-like synthetic data made in chunks (always from 5M "
                         "documents): 220 features, ~300 documents a query")
    ap.add_argument("--no-nproc2", dest="nproc2", action="store_false",
                    help="(--istella) skip the 2-process run on the bin cache")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--chunked-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cache-path", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.chunked_worker:
        import _bench_chunked

        return _bench_chunked.worker_main(args.chunked_worker, args.sizes, args)
    if args.worker:  # one synthetic method in this process: print its result as JSON
        print(json.dumps(run_synthetic_method(args.worker, args.sizes, args)))
        return
    avail = methods(args)
    if args.methods:
        chosen = [m.strip() for m in args.methods.split(",")]
        bad = [m for m in chosen if m not in avail]
        if bad:
            sys.exit(f"unknown methods {bad}; available: {sorted(avail)}")
    else:
        chosen = None
    print(f"torch {torch.__version__} threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = {}
    if args.only in (None, "mq2008"):
        ch = chosen or [m for m in ("trb-exp", "trb-exp-q8", "trb-exp-bound", "trb-qbrank",
                                    "trb-yetirank", "trb-exp-qbag", "lgb-lambdarank", "lgb-exp-custom",
                                    "xgb-pairwise", "cb-yetirank", "cb-pairlogit") if m in avail]
        results["mq2008"] = part_mq2008(args, ch)
    if args.only == "mslr":  # the MSLR-WEB10K sample, five validation folds of its queries
        ch = chosen or [m for m in ("trb-exp", "trb-exp-q8", "trb-lambdarank-exp",
                                    "trb-lrexp-oblivious", "lgb-lambdarank", "cb-yetirank",
                                    "cb-pairlogit") if m in avail]
        results["mslr"] = part_mq2008(args, ch, name="MSLR-WEB10K sample")
    if args.only in (None, "lgb-example"):
        ch = chosen or [m for m in ("trb-exp", "trb-qbrank", "lgb-lambdarank", "xgb-pairwise")
                        if m in avail]
        results["lgb-example"] = {m: {"fit_s": v[0], "trees": v[1], "ndcg@10": v[2]}
                                  for m, v in part_lgb_example(args, ch).items()}
    if args.only in (None, "synthetic"):
        ch = chosen or [m for m in ("trb-exp", "trb-exp-q8", "trb-qbrank", "lgb-lambdarank",
                                    "lgb-exp-custom", "xgb-pairwise") if m in avail]
        results["synthetic"] = {k: r if "make_s" in r else
                                {m: {"fit_s": v[0], "trees": v[1], "ndcg@10": v[2]}
                                 for m, v in r.items()}
                                for k, r in part_synthetic(args, ch).items()}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
