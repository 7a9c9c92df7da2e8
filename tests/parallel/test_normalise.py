"""The global loss normalisation of a data-parallel run (``parallel/normalise.py``), neural
side: DistributedDataParallel with the distributed query batch sampler and the global
normalisation equals one process on the union of the ranks' batches;
scripts/train_neural.py under torchrun."""

import sys

import pytest
import torch

from torchrankboost.data import take_queries
from torchrankboost.parallel import global_mean_loss, global_mean_scale
from torchrankboost.data import DistributedQueryBatchSampler

import dist_helpers as H

STEPS = 3


def test_take_queries_gathers_whole_queries_in_order():
    from torchrankboost.data import make_letor

    d = make_letor(9, 5, 3, seed=1)
    Xb, yb, gb = take_queries(d.X, d.labels, d.groups, [4, 0, 7])
    off = d.groups.offsets
    idx = torch.cat([torch.arange(int(off[q]), int(off[q + 1])) for q in (4, 0, 7)])
    assert torch.equal(Xb, d.X[idx]) and torch.equal(yb, d.labels[idx])
    assert gb.sizes.tolist() == d.groups.sizes[[4, 0, 7]].tolist()
    Xe, ye, ge = take_queries(d.X, d.labels, d.groups, [])
    assert Xe.shape == (0, 3) and ge.num_groups == 0
    with pytest.raises(ValueError, match=r"query indices in \[0, 9\)"):
        take_queries(d.X, d.labels, d.groups, [9])


def test_global_normalisation_in_one_process_is_the_batch_mean():
    s = torch.tensor(6.0, requires_grad=True)
    assert global_mean_scale(4) == 0.25 and global_mean_scale(torch.tensor([True, False])) == 1
    assert global_mean_scale(0) == 0.0
    loss, mean = global_mean_loss(s, 4, with_mean=True)
    assert float(loss.detach()) == 1.5 and mean == 1.5
    for bad in (-1, float("nan"), "3", torch.ones(2)):
        with pytest.raises(ValueError, match="local_count"):
            global_mean_scale(bad)


def test_ddp_with_the_sampler_equals_one_process_on_the_union(tmp_path):
    """Every loss of the registry, summed per rank and scaled by W / (all-reduced query
    count): after STEPS SGD steps of a float64 MLP under DDP (2 gloo processes) the
    parameters equal those of one process stepping on the union of the two ranks' batches
    with the mean over the union's queries, to 1e-6 (here ~1e-15)."""
    out = tmp_path / "params.pt"
    res = H.launch("ddp_equivalence", 2, [out, STEPS], timeout=120)
    assert all(r.returncode == 0 for r in res), H.explain(res)
    ddp = torch.load(out, weights_only=True)

    data = H.equivalence_data()
    plans = [DistributedQueryBatchSampler(data.groups, max_docs=H.MAX_DOCS, num_replicas=2,
                                          rank=r, seed=H.SEED) for r in range(2)]
    steps = [list(p) for p in plans]
    assert len(steps[0]) == len(steps[1]) >= STEPS
    for name in H.loss_names():
        model = H.equivalence_model(data.num_features)
        opt = torch.optim.SGD(model.parameters(), lr=H.LR)
        loss_fn = H.make_loss(name)
        for k in range(STEPS):
            union = steps[0][k] + steps[1][k]
            Xb, yb, gb = take_queries(data.X, data.labels, data.groups, union)
            loss = loss_fn(model(Xb).squeeze(-1), yb, gb) / gb.num_groups
            opt.zero_grad()
            loss.backward()
            opt.step()
        start = H.equivalence_model(data.num_features)
        moved = max(float((p - q).detach().abs().max()) for p, q in zip(model.parameters(),
                                                                start.parameters()))
        assert moved > 1e-6, (name, moved)  # the steps did something
        for p, q in zip(model.parameters(), ddp[name]):
            assert torch.allclose(p.detach(), q, rtol=0, atol=1e-6), (name, p, q)
            assert float((p.detach() - q).abs().max()) < 1e-12, name


def test_train_neural_under_torchrun_two_processes(tmp_path):
    port = H.free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           "scripts/train_neural.py", "--data", "synthetic", "--synthetic-queries", "40",
           "--epochs", "1", "--max-docs", "200", "--loss", "listnet", "--quiet",
           "--logdir", str(tmp_path / "run")]
    env = {k: v for k, v in H.worker_env(0, 1, port).items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                        "MASTER_ADDR", "MASTER_PORT")}
    [res] = H.run_processes([cmd], [env], timeout=120)
    assert res.returncode == 0, H.explain([res])
    lines = [ln for ln in res.out.splitlines() if ln.startswith("loss listnet: test NDCG@10")]
    assert len(lines) == 1, res.out  # rank 0 alone prints
    assert "2 processes" in lines[0] and "after" in lines[0]
    from torchrankboost.tensorboard.experiment import EXPERIMENT_FILE

    events = [p.name for p in (tmp_path / "run").glob("events.out.tfevents.*")
              if p.name != EXPERIMENT_FILE]  # the HParams definition sits beside the run's
    assert len(events) == 1, events  # rank 0 alone
