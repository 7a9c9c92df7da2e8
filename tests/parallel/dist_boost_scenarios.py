"""Data-parallel boosting scenarios run on several gloo processes (see
``tests/parallel/test_fit.py``).

``python tests/parallel/dist_boost_scenarios.py SCENARIO ARGS...`` in each process (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` in the environment, as
:func:`dist_helpers.worker_env` sets them): initialises a gloo process group with a short
timeout and runs the scenario. The same configurations run in one process in the test
(:func:`fit_config` with ``shard=False``), so both sides build their models from one place.
"""

from __future__ import annotations

import sys

import torch

N_ROUNDS = 10


def train_data():
    from torchrankboost.data import make_letor

    return make_letor(60, 20, 8, seed=0, dtype=torch.float64)


def eval_data():
    from torchrankboost.data import make_letor

    return make_letor(30, 20, 8, seed=1, dtype=torch.float64)


def listnet_plain(scores, labels, groups):
    """A user-defined loss as a plain function (autograd curvature): ListNet's cross
    entropy, summed over queries."""
    target = groups.segment_softmax(labels.to(scores.dtype))
    logp = scores - groups.broadcast(groups.segment_logsumexp(scores))
    return -(target * logp).sum()


listnet_plain.per_query = True  # one Hessian-vector product per position of a query


def make_booster(name: str):
    """The Booster of a named configuration (the same on every side)."""
    from torchrankboost import Booster, RegressionTree
    from torchrankboost.boosting.learners import FeatureRankers, Stumps
    from torchrankboost.losses import ExponentialPairwiseLoss, QBRankLoss

    tree = dict(max_leaves=8, min_samples_leaf=5)
    common = dict(n_rounds=N_ROUNDS, learning_rate=0.3, verbose=False)
    if name == "exp":
        return Booster(ExponentialPairwiseLoss(), RegressionTree(**tree), **common)
    if name == "exp-torch":  # the pure-torch grower's reduce hook
        return Booster(ExponentialPairwiseLoss(), RegressionTree(kernel="torch", **tree),
                       **common)
    if name == "exp-q8":  # the quantized speed mode: maxima over the ranks, seeded rounding
        return Booster(ExponentialPairwiseLoss(), RegressionTree(quantized_bits=8, **tree),
                       **common)
    if name == "qbrank":
        return Booster(QBRankLoss(), RegressionTree(**tree), curvature="bound", **common)
    if name == "plain":
        return Booster(listnet_plain, RegressionTree(**tree), **common)
    if name == "exp-subsample-ls":  # the global query draw, the line search's φ sums
        return Booster(ExponentialPairwiseLoss(), RegressionTree(**tree), subsample=0.6,
                       step="line_search", seed=3, **common)
    if name == "squared-newton-auto-base":  # a non-zero 'auto' base score, Newton steps
        from torchrankboost.losses import SquaredErrorLoss

        return Booster(SquaredErrorLoss(), RegressionTree(**tree), step="newton", **common)
    if name == "stumps":
        return Booster(ExponentialPairwiseLoss(), Stumps(criterion="least_squares"), **common)
    if name == "oblivious":  # the level histograms and leaf sums of symmetric trees
        from torchrankboost import ObliviousTree

        return Booster(ExponentialPairwiseLoss(), ObliviousTree(depth=3, min_samples_leaf=2),
                       **common)
    if name == "features":
        return Booster(ExponentialPairwiseLoss(), FeatureRankers(criterion="least_squares"),
                       **common)
    raise ValueError(name)


BOOSTER_CONFIGS = ("exp", "exp-torch", "exp-q8", "qbrank", "plain", "exp-subsample-ls",
                   "squared-newton-auto-base", "stumps", "features", "oblivious")


def summary(ranker, model, data) -> dict:
    """What the tests compare: each round's weak model, weights, predictions, evaluation."""
    models = []
    for m in model.models:
        tensors, meta = m.state()
        models.append(({k: v.clone() for k, v in tensors.items()}, dict(meta)))
    return {"models": models, "weights": list(model.weights),
            "base_score": float(model.base_score),
            "pred": model.predict(data.X).double(),
            "evals": ranker.evals_result_, "best_round": ranker.best_round_,
            "losses": [r.loss for r in ranker.history_], "stop_reason": ranker.stop_reason_,
            "rounds_run": len(ranker.history_),
            "n_rows": [r.extra.get("n_rows") for r in ranker.history_]}


def fit_config(name: str, *, shard: bool) -> dict:
    """Fit configuration ``name`` on the training data (this rank's shard with
    ``shard=True``), watching the evaluation data with early stopping."""
    from torchrankboost.parallel import get_context

    ctx = get_context()
    tr, va = train_data(), eval_data()
    if shard:
        tr, va = tr.shard(ctx.rank, ctx.world_size), va.shard(ctx.rank, ctx.world_size)
    booster = make_booster(name)
    # "exp": early stopping on NDCG (it stops before the last round); else on the loss
    metrics = ["ndcg@5", "map", "loss"] if name == "exp" else ["loss", "ndcg@5", "map"]
    model = booster.fit(tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)],
                        eval_metric=metrics, early_stopping_rounds=3)
    return summary(booster, model, train_data())


def make_rankboost(name: str):
    from torchrankboost.boosting.learners import Stumps
    from torchrankboost.boosting.papers import RankBoost

    variant = {"rb-c": "rb-c", "rb-d": "rb-d", "coordinate": "coordinate"}[name]
    return RankBoost(variant, learner=Stumps(max_thresholds=31), n_rounds=12,
                     track_margin=True)


RANKBOOST_CONFIGS = ("rb-c", "rb-d", "coordinate")


def fit_rankboost(name: str, *, shard: bool) -> dict:
    from torchrankboost.parallel import get_context

    ctx = get_context()
    tr, va = train_data(), eval_data()
    if shard:
        tr, va = tr.shard(ctx.rank, ctx.world_size), va.shard(ctx.rank, ctx.world_size)
    rb = make_rankboost(name)
    model = rb.fit(tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)],
                   eval_metric=["ndcg@5", "loss"])
    out = summary(rb, model, train_data())
    out["extra"] = [{k: r.extra.get(k) for k in ("candidate", "alpha", "r", "eps_plus",
                                                  "eps_minus", "loss", "margin")}
                    for r in rb.history_]
    return out


def volume(ctx) -> dict:
    """Bytes all-reduced by a tree fit: after ``prepare`` and per round (the booster's own
    context counts them)."""
    from torchrankboost import Booster, RegressionTree
    from torchrankboost.losses import ExponentialPairwiseLoss

    tr = train_data().shard(ctx.rank, ctx.world_size)
    out = {"rounds": []}
    ctx.reset_counters()

    class Count:
        def on_round_end(self, ranker, record):
            out["rounds"].append((ctx.bytes_reduced, record["learner"]))
            ctx.reset_counters()

    b = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=8, min_samples_leaf=5),
                n_rounds=3, verbose=False, distributed=ctx)
    b.fit(tr.X, tr.labels, tr.groups, callbacks=[Count()])
    out["n_features"] = tr.num_features
    return out


# ============================================================== scenarios (in the workers)
def scenario_boosters(out):
    from torchrankboost.parallel import get_context

    ctx = get_context()
    res = {name: fit_config(name, shard=True) for name in BOOSTER_CONFIGS}
    if RANKBOOST_CONFIGS:
        res["rankboost"] = {name: fit_rankboost(name, shard=True) for name in RANKBOOST_CONFIGS}
    res["volume"] = volume(ctx)
    if ctx.is_main:
        torch.save(res, out)
    print("boosters done")


def scenario_bad_shard(kind):
    """Rank 1 gets a bad shard (``nan_labels``, ``features``: one feature fewer,
    ``nan_gradient``: a loss whose gradient turns NaN on rank 1 in round 3); every rank
    must exit with an error naming rank 1."""
    from torchrankboost import Booster, RegressionTree
    from torchrankboost.parallel import DistributedError, get_context
    from torchrankboost.losses import ExponentialPairwiseLoss

    ctx = get_context()
    tr = train_data().shard(ctx.rank, ctx.world_size)
    X, y = tr.X, tr.labels.clone()
    loss = ExponentialPairwiseLoss()
    if ctx.rank == 1 and kind == "nan_labels":
        y[3] = float("nan")
    if ctx.rank == 1 and kind == "features":
        X = X[:, :-1]
    if kind == "nan_gradient":
        calls = {"n": 0}

        def loss(scores, labels, groups):  # noqa: F811 - the scenario's loss
            calls["n"] += 1
            v = listnet_plain(scores, labels, groups)
            return v * float("nan") if ctx.rank == 1 and calls["n"] > 6 else v
    booster = Booster(loss, RegressionTree(max_leaves=4), n_rounds=6, verbose=False)
    message = None
    try:
        booster.fit(X, y, tr.groups)
    except (DistributedError, ValueError) as exc:
        message = f"{type(exc).__name__}: {exc}"
    if message is None:
        print("no error")
        return
    print(message, file=sys.stderr)
    _exit_after_failure(3)


def _exit_after_failure(code: int) -> None:
    """Exit after a failed fit: the failure's frames (tensors, autograd graphs) go first,
    then the process group, so that nothing of them is left for interpreter shutdown."""
    import gc

    import torch.distributed as dist

    gc.collect()
    dist.destroy_process_group()
    sys.exit(code)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def _main() -> None:
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    name, args = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    SCENARIOS[name](*args)  # a failing scenario exits here (the group goes with the process)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _main()
