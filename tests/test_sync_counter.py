"""The sync counter (tests/sync_counter.py) and the sync discipline of a boosting round.

The counter: what counts as a host synchronisation, host and device tensors told apart. The
round: the default round (exponential pairwise loss, the surrogate step, ``RegressionTree``,
an evaluation set with NDCG@10) on the pure-torch path (the path of a GPU: the compiled CPU
kernels taken out of the chooser) makes a bounded number of host synchronisations outside
the weak learner, and the learner a number bounded by the tree's depth, at two data sizes and
two leaf counts.
"""

import torch

import torchrankboost.boosting.booster as booster_mod
import torchrankboost.kernels as kernels
from sync_counter import SyncCounter
from torchrankboost import Booster
from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.kernels.torch_backend import TorchBackend
from torchrankboost.losses import ExponentialPairwiseLoss

#: the default round's host synchronisations outside the weak learner (see the test)
ROUND_BOUND = 18
#: the learner's own beyond one per batch (the target's and the weights' checks, the covers)
LEARNER_EXTRA = 4


def test_counter_counts_reads_shapes_and_copies_of_device_tensors():
    x = torch.arange(10.0)  # made before the counter: a device tensor
    with SyncCounter() as sc:
        y = x * 2
        float(y[0]), y.tolist(), bool(y.any()), int(y[1])
        y[y > 2], torch.nonzero(y), torch.unique(y)
        torch.repeat_interleave(y, torch.ones(10, dtype=torch.long))
        host = torch.zeros(3, dtype=torch.float64)
        host[0] = y.sum()  # a device value written into a host tensor
        h = y.cpu()
    assert sc.by_kind == {"__float__": 1, "tolist": 1, "__bool__": 1, "__int__": 1,
                          "__getitem__[mask]": 1, "nonzero": 1, "unique": 1,
                          "repeat_interleave": 1, "__setitem__(host <- device)": 1, "cpu": 1}
    assert sc.syncs == 10 and sc.ops > 0


def test_counter_leaves_host_tensors_and_static_shapes_alone():
    x = torch.arange(10.0)
    with SyncCounter() as sc:
        h = x.cpu()  # one copy; the host copy is then read freely
        float(h[0]), h.tolist(), h[h > 2], bool(h.any())
        host = torch.tensor([1.0, 2.0])  # made on the host
        float(host.sum()), (host * 2).tolist()
        torch.repeat_interleave(x, torch.ones(10, dtype=torch.long), output_size=10)
        torch.nonzero_static(x > 3, size=4)
        up = torch.tensor([1, 2], device=x.device)  # an upload, not a sync
        x.to(torch.device("cpu"))  # the data's own device: no copy
    assert sc.syncs == 1 and sc.by_kind == {"cpu": 1}
    assert sc.uploads == 1 and up.numel() == 2


def _round_counts(monkeypatch, docs: int, leaves: int):
    """(syncs outside the learner, learner syncs, learner depth) of round 3 of the default fit."""
    monkeypatch.setattr(kernels, "_AUTO_ORDER", (TorchBackend(),))
    fits, rounds, models = [], [], []
    fit_learner, run_round = booster_mod.fit_learner, Booster._round

    def counted_fit(*args, **kw):
        with SyncCounter() as c:
            out = fit_learner(*args, **kw)
        fits.append(c.syncs)
        models.append(out[0])
        return out

    def counted_round(self, run, rnd):
        with SyncCounter() as c:
            out = run_round(self, run, rnd)
        rounds.append(c.syncs)
        return out

    monkeypatch.setattr(booster_mod, "fit_learner", counted_fit)
    monkeypatch.setattr(Booster, "_round", counted_round)
    data = make_letor(docs, 20, 8, seed=1)
    valid = make_letor(30, 20, 8, seed=2)
    Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=leaves, min_samples_leaf=5),
            n_rounds=3, verbose=False).fit(data.X, data.labels, data.groups,
                                           eval_set=[(valid.X, valid.labels, valid.groups)],
                                           eval_metric="ndcg@10")
    assert len(rounds) == 3
    return rounds[-1] - fits[-1], fits[-1], models[-1].depth


def test_round_syncs_are_bounded_whatever_the_rows_and_leaves(monkeypatch):
    outside = {}
    for docs in (60, 240):
        for leaves in (7, 40):
            out, tree, depth = _round_counts(monkeypatch, docs, leaves)
            assert tree <= depth + 1 + LEARNER_EXTRA, (docs, leaves, tree, depth)
            outside[docs, leaves] = out
    assert max(outside.values()) <= ROUND_BOUND, outside
    assert len(set(outside.values())) == 1, outside  # the same constant everywhere
