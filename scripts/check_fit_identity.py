"""Save, then compare, the fitted models of several booster configurations on MQ2008 Fold1:
a speed change of the fit must leave them identical bit for bit.

    # before the change (e.g. on the base commit), then after it:
    PYTHONPATH=. python scripts/check_fit_identity.py save ref.pt
    PYTHONPATH=. python scripts/check_fit_identity.py check ref.pt [config ...]

Compared per configuration: the test and validation predictions, the final training scores,
the rounds kept, every round's loss and step, the evaluation history. Configurations: the
default booster of ``bench_boost.py`` (exponential pairs, 31-leaf trees, early stopping on
validation NDCG@10) and variants (query subsample, feature fraction, the bound curvature,
stumps, oblivious trees on both kernels, QBRank's loss, the line search, YetiRank, no
evaluation set, the fixed step with several losses).
"""

import argparse
import sys
import time

import torch

import torchrankboost.losses as L
from torchrankboost.boosting import Booster, ObliviousTree, RegressionTree, Stumps
from torchrankboost.data import data_root, load_letor_fold


def tree(**kw):
    return RegressionTree(max_leaves=31, min_samples_leaf=20, min_child_weight=1e-3,
                          n_bins=255, **kw)


def configs(tr, va):
    def boost(loss, learner, step="surrogate", curv="diag", R=300, lr=0.1, eval_set=True,
              **kw):
        b = Booster(loss, learner, n_rounds=R, learning_rate=lr, step=step, curvature=curv,
                    seed=0, n_threads=1, verbose=False, **kw)
        fit_kw = dict(eval_set=[va], eval_metric="ndcg@10", early_stopping_rounds=30)
        return b.fit(*tr, **(fit_kw if eval_set else {})), b

    exp = L.ExponentialPairwiseLoss
    obl = dict(step="fixed", lr=0.05)
    return {
        "default": lambda: boost(exp(), tree()),
        "subsample": lambda: boost(exp(), tree(), subsample=0.5),
        "feature_fraction": lambda: boost(exp(), tree(feature_fraction=0.5, seed=3)),
        "bound": lambda: boost(exp(), tree(), curv="bound"),
        "stumps": lambda: boost(exp(), Stumps(), R=60),
        "oblivious": lambda: boost(L.LambdaRankExpLoss(), ObliviousTree(depth=6, l2=10.0),
                                   R=120, **obl),
        "oblivious-torch": lambda: boost(L.LambdaRankExpLoss(),
                                         ObliviousTree(depth=6, l2=10.0, kernel="torch"),
                                         R=40, **obl),
        "qbrank-loss": lambda: boost(L.QBRankLoss(), tree(), curv="bound"),
        "line_search": lambda: boost(exp(), tree(), step="line_search", R=40),
        "yetirank": lambda: boost(L.YetiRankLoss(), tree(), R=60),
        "no-eval": lambda: boost(exp(), tree(), R=30, eval_set=False),
        "fixed-lambdaloss": lambda: boost(L.LambdaLoss(), tree(), step="fixed", R=40),
        "fixed-listnet": lambda: boost(L.ListNetLoss(), tree(), step="fixed", R=40),
        "fixed-ranknet": lambda: boost(L.RankNetLoss(), tree(), step="fixed", R=40),
        "fixed-exp-bound": lambda: boost(exp(), tree(), step="fixed", curv="bound", R=40),
        "fixed-yetirank": lambda: boost(L.YetiRankLoss(), tree(), step="fixed", R=30),
    }


def run(names, tr, va, te):
    out, table = {}, configs(tr, va)
    for k in names:
        t = time.perf_counter()
        ens, b = table[k]()
        out[k] = dict(pred_te=ens.predict(te[0]), pred_va=ens.predict(va[0]),
                      scores=b.scores_.clone(), n=ens.n_rounds,
                      hist=[(r.loss, r.step) for r in b.history_],
                      evals={s: dict(v) for s, v in (b.evals_result_ or {}).items()})
        print(f"{k}: {ens.n_rounds} rounds kept, {time.perf_counter() - t:.2f}s", flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["save", "check"])
    ap.add_argument("path")
    ap.add_argument("configs", nargs="*")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    folds = load_letor_fold(data_root() / "mq2008" / "Fold1")
    tr, va, te = [(d.X.float(), d.labels.double(), d.groups) for d in folds]
    names = args.configs or None
    if args.mode == "save":
        names = names or list(configs(tr, va))
        torch.save(run(names, tr, va, te), args.path)
        return
    ref = torch.load(args.path, weights_only=True)  # plain tensors, numbers, lists, dicts
    names = names or list(ref)
    new, bad = run(names, tr, va, te), 0
    for k in names:
        for key in ("pred_te", "pred_va", "scores"):
            if not torch.equal(ref[k][key], new[k][key]):
                print(f"DIFFERENT {k} {key}: max |diff| "
                      f"{float((ref[k][key] - new[k][key]).abs().max()):.3g}")
                bad += 1
        for key in ("n", "hist", "evals"):
            if ref[k][key] != new[k][key]:
                print(f"DIFFERENT {k} {key}")
                bad += 1
    print("all identical" if not bad else f"{bad} differences")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
