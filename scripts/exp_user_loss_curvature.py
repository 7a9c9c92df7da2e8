"""A user's own loss in the boosting driver: exact autograd curvature vs unit curvature.

The loss is ListNet written as a plain function of ``(scores, labels, groups)`` (no
``grad_hess``), marked ``@torchrankboost.per_query``, so the driver takes its exact Hessian
diagonal by one Hessian-vector product per position of the longest query (MQ2008: 121 per
round instead of ~9,600). ``curvature="none"`` fits the negative gradient with unit weights
(Friedman's gradient boosting). Same trees, learning rate, early stopping on the validation
NDCG@10; test NDCG@10 and fit time per fold, side by side, one run::

    python scripts/exp_user_loss_curvature.py --folds 1 2 3 4 5 --threads 1

Data: MQ2008 under ``$TORCHRANKBOOST_DATA`` (default ``./data``): ``mq2008/Fold1`` ...
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torchrankboost as trb


@trb.per_query
def listnet(scores, labels, groups):
    """ListNet's top-one cross-entropy, summed over queries (a user's plain function)."""
    target = groups.segment_softmax(labels.to(scores.dtype))
    log_p = scores - groups.broadcast(groups.segment_logsumexp(scores))
    return -(target * log_p).sum()


def run(fold, curvature, args):
    tr, va, te = trb.load_letor_fold(trb.dataset_path("mq2008", f"Fold{fold}"))
    booster = trb.Booster(listnet, trb.RegressionTree(max_leaves=args.leaves),
                          n_rounds=args.rounds, learning_rate=args.lr, curvature=curvature,
                          seed=0)
    t0 = time.perf_counter()
    model = booster.fit(tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)],
                        eval_metric="ndcg@10", early_stopping_rounds=args.early)
    fit_s = time.perf_counter() - t0
    ndcg = float(trb.ndcg_at_k(model.predict(te.X), te.labels, te.groups, k=10))
    return ndcg, fit_s, len(booster.history_), booster.best_round_


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--early", type=int, default=30)
    ap.add_argument("--leaves", type=int, default=31)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = {c: [] for c in ("diag", "none")}
    for fold in args.folds:
        for curvature in rows:
            r = run(fold, curvature, args)
            rows[curvature].append(r)
            print(f"fold {fold} curvature={curvature:4s}: test NDCG@10 {r[0]:.4f}, "
                  f"fit {r[1]:.2f} s, {r[2]} rounds (best {r[3]})", flush=True)
    print("\n| curvature | mean test NDCG@10 | median fit s | median s/round |")
    print("|---|---|---|---|")
    for c, rs in rows.items():
        print(f"| {'exact (autograd, per-query probes)' if c == 'diag' else 'unit (gradient only)'}"
              f" | {statistics.mean(r[0] for r in rs):.4f} | {statistics.median(r[1] for r in rs):.2f}"
              f" | {statistics.median(r[1] / max(r[2], 1) for r in rs):.3f} |")


if __name__ == "__main__":
    main()
