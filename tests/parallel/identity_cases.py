"""The cases of the "same trees" tests: data, the default booster, whole-query permutations,
and the worker that fits every case on several gloo processes.

The default booster: :class:`~torchrankboost.losses.ExponentialPairwiseLoss`, the default
step and curvature, 20 rounds of 31-leaf :class:`~torchrankboost.RegressionTree` (or
depth-5 :class:`~torchrankboost.ObliviousTree`), early stopping on the validation NDCG@10.
Data: the five MQ2008 folds (when the data folder has them) and a synthetic set with NaN
features, exact ties and duplicated documents.

``python tests/parallel/identity_cases.py predictions OUT`` in each process (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set as :func:`dist_helpers.worker_env` sets
them) fits every case on this rank's shard of the training and validation queries; rank 0
saves the test predictions ``{(case, learner): (n,) float64}`` to ``OUT``.
``... sums OUT``: the sums a round takes outside the tree (:func:`round_sums`), over the
ranks' shards.
"""

from __future__ import annotations

import sys
from typing import Dict, List, Tuple

import torch

ROUNDS, LEAVES, DEPTH, PATIENCE = 20, 31, 5, 5
LEARNERS = ("tree", "oblivious")


def kernels_are_exact() -> bool:
    """Whether the tree kernels sum integer (fixed-point) histograms: the trees then
    depend on neither the order of the rows nor their split over processes."""
    import importlib.util

    return importlib.util.find_spec("torchrankboost.kernels.fixed_point") is not None


def _mq2008_folder(fold: int):
    from torchrankboost.data import data_root

    return data_root() / "mq2008" / f"Fold{fold}"


def mq2008(fold: int):
    """``(train, valid, test)`` of MQ2008 fold ``fold``, or ``None`` when absent."""
    from torchrankboost.data import load_letor_fold

    folder = _mq2008_folder(fold)
    if not (folder / "train.txt").exists():
        return None
    return load_letor_fold(folder)


def synthetic():
    """A LETOR-shaped set with 5% NaN features in a third of the columns, half-integer
    columns (exact ties) and one document in ten copied into the next query (equal rows
    with other labels), split by query 60/20/20."""
    from torchrankboost.data import RankingData, make_letor

    d = make_letor(150, 20, 12, seed=7, tie_fraction=0.3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(8)
    X = d.X.clone()
    nan = (torch.rand(X.shape, generator=gen) < 0.05) & (torch.arange(X.shape[1]) % 3 == 0)
    X[nan] = float("nan")
    n = X.shape[0]
    src = torch.arange(0, n, 10)  # one document in ten ...
    X[(src + n // 3) % n] = X[src]  # ... copied a third of the set further on
    d = RankingData(X, d.labels, d.groups, d.qid)
    G = d.num_queries
    return d.queries(0, int(0.6 * G)), d.queries(int(0.6 * G), int(0.8 * G)), \
        d.queries(int(0.8 * G), G)


def case_names() -> List[str]:
    """The MQ2008 folds in the data folder (``"mq2008-<k>"``), then ``"synthetic"``."""
    folds = [f for f in range(1, 6) if (_mq2008_folder(f) / "train.txt").exists()]
    return [f"mq2008-{f}" for f in folds] + ["synthetic"]


def load_case(name: str):
    """``(train, valid, test)`` of a case of :func:`case_names` (``None`` when absent)."""
    return synthetic() if name == "synthetic" else mq2008(int(name.split("-")[1]))


def learner(name: str, kernel: str = "auto"):
    from torchrankboost import ObliviousTree, RegressionTree

    if name == "tree":
        return RegressionTree(max_leaves=LEAVES, kernel=kernel)
    if name == "oblivious":
        return ObliviousTree(depth=DEPTH, kernel=kernel)
    raise ValueError(name)


def fit(name: str, train, valid, *, distributed=False, kernel: str = "auto",
        rounds: int = ROUNDS):
    """The default booster with ``learner(name, kernel)`` on ``train``, early stopping on
    ``valid`` (each a :class:`~torchrankboost.data.RankingData`; a rank's shard with
    ``distributed``)."""
    from torchrankboost import Booster
    from torchrankboost.losses import ExponentialPairwiseLoss

    b = Booster(ExponentialPairwiseLoss(), learner(name, kernel), n_rounds=rounds,
                verbose=False, distributed=distributed)
    return b.fit(train.X, train.labels, train.groups,
                 eval_set=[(valid.X, valid.labels, valid.groups)], eval_metric="ndcg@10",
                 early_stopping_rounds=PATIENCE)


def permuted(d, seed: int):
    """``d`` with its queries in a seeded random order (each query's rows in their order)."""
    from torchrankboost.data import RankingData
    from torchrankboost.groups import Groups

    G = d.num_queries
    perm = torch.randperm(G, generator=torch.Generator().manual_seed(seed))
    off = d.groups.offsets
    rows = torch.cat([torch.arange(int(off[q]), int(off[q + 1])) for q in perm.tolist()])
    return RankingData(d.X[rows], d.labels[rows], Groups.from_sizes(d.groups.sizes[perm]),
                       d.qid[rows])


def keys() -> List[Tuple[str, str]]:
    """``(case, learner)`` pairs: 31-leaf trees on every case, oblivious trees on the first
    MQ2008 fold present and the synthetic set (to keep the suite short)."""
    names = case_names()
    return [(n, "tree") for n in names] + [(n, "oblivious") for n in (names[0], names[-1])]


def predictions(*, distributed=False) -> Dict[Tuple[str, str], torch.Tensor]:
    """``{(case, learner): test predictions}`` of :func:`keys`, each fit on this rank's shard
    when ``distributed``."""
    from torchrankboost.parallel import get_context

    ctx = get_context(distributed or False)
    data, out = {}, {}
    for name, lr in keys():
        if name not in data:
            data[name] = load_case(name)
        tr, va, te = data[name]
        if distributed:
            tr, va = tr.shard(ctx.rank, ctx.world_size), va.shard(ctx.rank, ctx.world_size)
        model = fit(lr, tr, va, distributed=distributed)
        out[(name, lr)] = model.predict(te.X).double()
    return out


def _scores(d):
    """Scores that depend on each document's features only (so they follow it)."""
    x = torch.nan_to_num(d.X.double(), nan=0.5)
    return torch.sin(x @ torch.linspace(-1, 1, x.shape[1], dtype=torch.float64)) * 3


def round_sums(*, distributed=False) -> list:
    """What a round sums outside the tree, on the synthetic set (this rank's shard with
    ``distributed``), as floats: the loss value, ``Σ|h|`` and ``Σ g²``, the step's four sums,
    the line search's ``φ, φ', φ''`` at 0.3, the base score's search, and the validation
    NDCG@10, MAP and pair error through :meth:`FitComm.metrics`."""
    from torchrankboost import registry
    from torchrankboost.boosting._round_sums import gradient_stats, step_sums
    from torchrankboost.boosting.objective import FitObjective
    from torchrankboost.boosting.weights import FitWeights
    from torchrankboost.losses import ExponentialPairwiseLoss
    from torchrankboost.parallel import FitComm, get_context

    comm = FitComm(get_context(True) if distributed else None)
    tr, va, _ = synthetic()
    if distributed:
        tr, va = tr.shard(comm.rank, comm.world_size), va.shard(comm.rank, comm.world_size)
    s, off = _scores(tr), tr.groups.offsets
    f = torch.cos(s)
    obj = FitObjective(ExponentialPairwiseLoss(), curvature="diag", exact_hess_max_n=2048,
                       comm=comm)
    obj.bind(tr.labels, tr.groups, weights=FitWeights())
    value = obj.start(s)
    g, h, _ = obj.gradient()
    _, first = comm.exact_sums(lambda: ((), gradient_stats(g, h, off)[0]), exact=2)
    _, step = comm.exact_sums(lambda: ((), step_sums(g, h, f, off)), exact=4)
    line = obj.line(f, 2)(0.3)
    base = obj.constant_minimiser(len(tr), s.device, max_ratio=100.0)
    jobs = [(registry.metric(m), _scores(va), va.labels, va.groups)
            for m in ("ndcg@10", "map", "pair_error")]
    metrics = comm.metrics(jobs)
    return [value, *first.tolist(), *step.tolist(), *line, base, *metrics]


def main(what: str, path: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    out = predictions(distributed=True) if what == "predictions" else round_sums(
        distributed=True)
    if dist.get_rank() == 0:
        torch.save(out, path)
    dist.barrier()
    dist.destroy_process_group()
    print("identity done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
