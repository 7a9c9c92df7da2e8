"""Worker of tests/clicks/test_debias.py's two-process tests: a debiased fit on this rank's half of the
queries (gloo process group); rank 0 saves the model's predictions and learned state.
``argv``: the output file and the comma-separated methods (default all)."""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist


METHODS = ("em", "dla", "additive")


def click_data():
    from torchrankboost import Groups
    from torchrankboost.clicks import simulate_clicks

    g = torch.Generator().manual_seed(0)
    G, L = 40, 10
    groups = Groups.from_sizes(torch.full((G,), L))
    X = torch.randn(G * L, 5, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0.3).long() + (X[:, 0] + X[:, 1] > 1.5).long()
    log = simulate_clicks(y, groups, X[:, 1] + X[:, 2], n_sessions=8000, top_k=6, seed=1)
    return X, log.ctr(), groups, log.position


def fit(method, X, ctr, groups, pos, distributed):
    from torchrankboost import Booster, RegressionTree
    from torchrankboost.clicks import AdditivePositionLoss, DualLearningLoss, RegressionEMLoss
    from torchrankboost.losses import ExponentialPairwiseLoss

    loss = {"em": lambda b: RegressionEMLoss(b), "additive": lambda b: AdditivePositionLoss(b),
            "dla": lambda b: DualLearningLoss(b, warmup=1, link="learn")  # + the link's sums
            }[method](ExponentialPairwiseLoss())
    return Booster(loss, RegressionTree(max_leaves=6), n_rounds=4, learning_rate=0.3,
                   verbose=False, distributed=distributed).fit(X, ctr, groups, position=pos)


def main():
    from torchrankboost import Groups

    torch.set_num_threads(1)
    out = sys.argv[1]
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    r = dist.get_rank()
    X, ctr, groups, pos = click_data()
    G = groups.num_groups
    a, b = int(groups.offsets[r * G // 2]), int(groups.offsets[(r + 1) * G // 2])
    sub = Groups.from_sizes(groups.sizes[r * G // 2:(r + 1) * G // 2])
    res = {}
    for method in (sys.argv[2].split(",") if len(sys.argv) > 2 else METHODS):
        m = fit(method, X[a:b], ctr[a:b], sub, pos[a:b], True)
        res[method] = (m.predict(X), m.info["position_debias"])
    if r == 0:
        torch.save(res, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
