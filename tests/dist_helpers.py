"""Run a scenario on several gloo processes for the distributed tests.

``launch(scenario, world_size, args)`` starts ``world_size`` Python processes running this
file (``RANK``/``WORLD_SIZE``/``MASTER_ADDR=127.0.0.1``/``MASTER_PORT`` = a free port in the
environment, one torch thread each), waits for all of them under a timeout (a hang kills
them and fails the test instead of blocking the suite) and returns one :class:`Result` per
rank. Each process initialises a gloo process group and runs ``SCENARIOS[scenario](*args)``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    rank: int
    returncode: int
    out: str
    err: str


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, world_size: int, port: int) -> dict:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
               LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"),
                                           env.get("PYTHONPATH", "")]))
    return env


def run_processes(cmds: List[List[str]], envs: List[dict], timeout: float) -> List[Result]:
    """Start the commands, wait for all under one deadline; on timeout kill them (only
    these processes) and raise ``AssertionError``."""
    procs = [subprocess.Popen(c, env=e, cwd=str(ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c, e in zip(cmds, envs)]
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(deadline - time.monotonic(), 0.1)))
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                p.kill()
        msgs = []
        for r, p in enumerate(procs):
            o, e = p.communicate()
            msgs.append(f"--- rank {r} (rc {p.returncode})\n{o[-2000:]}\n{e[-3000:]}")
        raise AssertionError(f"processes did not finish within {timeout} s (a hang?)\n"
                             + "\n".join(msgs)) from None
    return [Result(r, p.returncode, o, e) for r, (p, (o, e)) in enumerate(zip(procs, outs))]


def launch(scenario: str, world_size: int = 2, args=(), *, timeout: float = 90.0
           ) -> List[Result]:
    port = free_port()
    cmds = [[sys.executable, str(Path(__file__)), scenario, *map(str, args)]
            for _ in range(world_size)]
    envs = [worker_env(r, world_size, port) for r in range(world_size)]
    return run_processes(cmds, envs, timeout)


def explain(results: List[Result]) -> str:
    return "\n".join(f"--- rank {r.rank} (rc {r.returncode})\n{r.out[-2000:]}\n"
                     f"{r.err[-4000:]}" for r in results)


# ============================================================== the equivalence case
LR, MAX_DOCS, SEED = 0.002, 60, 3


def loss_names():
    """Every registered loss but the stochastic ones (YetiRank: each rank draws the noise of
    its own documents, a valid fit but not the one-process draw)."""
    from torchrankboost import registry

    return [n for n in registry.names("loss")
            if not getattr(registry.lookup("loss", n).resolve(), "stochastic", False)]


def make_loss(name):
    """Our loss ``name`` summed over queries (what the global normalisation scales)."""
    from torchrankboost import registry

    extra = {"scale": 1.0} if name == "smooth_margin" else {}
    return registry.lookup("loss", name).create(reduction="sum", **extra)


def equivalence_data():
    import torch

    from torchrankboost.data import make_letor

    return make_letor(60, 12, 10, seed=5, dtype=torch.float64)


def equivalence_model(n_features: int):
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(n_features, 8), nn.Tanh(), nn.Linear(8, 1)).double()


# ============================================================== scenarios (in the workers)
def _ctx():
    from torchrankboost.parallel import get_context

    return get_context(True)


def scenario_collectives():
    import torch

    from torchrankboost.parallel import get_context

    ctx = get_context()
    assert ctx.enabled and ctx.world_size == 2 and ctx.backend == "gloo", ctx
    assert ctx.is_main == (ctx.rank == 0)
    r = ctx.rank
    t = torch.tensor([1.0 + r, 1e-17], dtype=torch.float64)
    out = ctx.all_reduce_sum(t)
    assert out is t and out.dtype == torch.float64 and out.tolist() == [3.0, 2e-17], out
    assert ctx.bytes_reduced == 16, ctx.bytes_reduced
    i = torch.tensor([[r, 10 - r]], dtype=torch.int64)
    assert ctx.all_reduce_max(i.clone()).tolist() == [[1, 10]]
    assert ctx.all_reduce_min(i.clone()).tolist() == [[0, 9]]
    b = torch.tensor([r == 1, False, True])
    assert ctx.all_reduce_max(b.clone()).tolist() == [True, False, True]
    assert ctx.all_reduce_min(b.clone()).tolist() == [False, False, True]
    nc = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()  # not contiguous
    assert ctx.all_reduce_sum(nc).tolist() == (2 * torch.arange(6.0).reshape(2, 3).t()).tolist()
    assert ctx.bytes_reduced == 16 + 16 * 2 + 3 * 2 + 24
    ctx.reset_counters()
    assert ctx.bytes_reduced == 0
    assert ctx.all_gather_object({"rank": r}) == [{"rank": 0}, {"rank": 1}]
    assert ctx.broadcast_object(f"from {r}", src=1) == "from 1"
    ctx.barrier()
    assert ctx.check_same("label dtype", torch.float32) == torch.float32
    ctx.check_same("n_features", 46)
    with ctx.guard():
        pass
    off = get_context(False)
    t = torch.ones(2)
    assert off.all_reduce_sum(t) is t and t.tolist() == [1.0, 1.0] and off.bytes_reduced == 0

    # metrics over shards: all-reduced sums of per-query values over all-reduced counts
    from torchrankboost import registry
    from torchrankboost.data import make_letor
    from torchrankboost.parallel import global_mean_loss, global_mean_scale, global_metric

    data = make_letor(41, 9, 5, seed=2, dtype=torch.float64)
    scores = torch.randn(len(data), generator=torch.Generator().manual_seed(1),
                         dtype=torch.float64)
    shard = data.shard(r, 2)
    start = 0 if r == 0 else len(data.shard(0, 2))
    mine = scores[start:start + len(shard)]
    for name in ("ndcg@10", "map", "ndcg@5", "auc", "pair_error", "mrr", "p@5"):
        got = global_metric(name, mine, shard.labels, shard.groups)
        want = registry.metric(name)(scores, data.labels, data.groups)
        assert abs(got - want) < 1e-12, (name, got, want)
    # the global normalisation: W / all-reduced count
    assert global_mean_scale(shard.num_queries) == 2 / data.num_queries
    x = torch.tensor(3.0 + r, dtype=torch.float64, requires_grad=True)
    loss, mean = global_mean_loss(x, shard.num_queries, with_mean=True)
    assert abs(mean - 7.0 / data.num_queries) < 1e-15
    assert abs(float(loss.detach()) - (3.0 + r) * 2 / data.num_queries) < 1e-15
    mask = torch.arange(shard.num_queries) % 2 == 0
    assert global_mean_scale(mask) == 2 / float(ctx.all_reduce_sum(mask.sum().double()))
    print("collectives ok")


def scenario_check_same_mismatch():
    ctx = _ctx()
    try:
        ctx.check_same("n_features", 46 if ctx.rank == 0 else 45)
    except ValueError as exc:
        print(f"ValueError: {exc}")
        sys.exit(3)
    print("no error")


def scenario_guard_raise():
    ctx = _ctx()
    with ctx.guard():
        if ctx.rank == 1:
            raise ValueError("labels contain NaN")
    print("guard passed")  # never reached


def scenario_load_shard(path, out):
    import torch

    from torchrankboost.data import load_svmlight_shard

    ctx = _ctx()
    d = load_svmlight_shard(path)
    torch.save({"X": d.X, "labels": d.labels, "qid": d.qid, "sizes": d.groups.sizes,
                "zero_based": d.zero_based}, f"{out}.{ctx.rank}")
    print(f"rank {ctx.rank}: {len(d)} documents, {d.num_features} features")


def scenario_ddp_equivalence(out, steps):
    """Per loss: DDP (float64 MLP, SGD) through the distributed sampler and the global
    normalisation for ``steps`` steps; rank 0 saves the parameters."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from torchrankboost.data import take_queries
    from torchrankboost.parallel import global_mean_loss
    from torchrankboost.data import DistributedQueryBatchSampler

    ctx = _ctx()
    data = equivalence_data()
    result = {}
    for name in loss_names():
        model = equivalence_model(data.num_features)
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        sampler = DistributedQueryBatchSampler(data.groups, max_docs=MAX_DOCS, seed=SEED)
        loss_fn = make_loss(name)
        batches = iter(sampler)
        for _ in range(int(steps)):
            Xb, yb, gb = take_queries(data.X, data.labels, data.groups, next(batches))
            loss = global_mean_loss(loss_fn(ddp(Xb).squeeze(-1), yb, gb), gb.num_groups)
            opt.zero_grad()
            loss.backward()
            opt.step()
        result[name] = [p.detach().clone() for p in model.parameters()]
        del ddp, opt, loss  # the DDP reducer goes before the process group
    if ctx.is_main:
        torch.save(result, out)
    print("ddp done")


def scenario_local_sums():
    """float64 and int64 sums through the shared mapping equal gloo's (the same result on
    every rank, rank-ordered; int64 exact, wrapping as torch's); other dtypes and sizes above
    the slot go through gloo."""
    import torch

    from torchrankboost.parallel import shm as D

    ctx = _ctx()
    gen = torch.Generator().manual_seed(100 + ctx.rank)
    for n in (1, 7, 5000, 200_003):
        for t in (torch.randn(n, dtype=torch.float64, generator=gen),
                  torch.randint(-2 ** 62, 2 ** 62, (n,), dtype=torch.int64, generator=gen)):
            mine = t.clone()
            assert D.host_transport(ctx).accepts(t, "SUM")
            local = ctx.all_reduce_sum(t)
            parts = ctx.all_gather_object(mine)
            expect = parts[0].clone()
            for q in parts[1:]:
                expect += q
            assert torch.equal(local, expect), (n, t.dtype)
    big = torch.ones(D.host_transport(ctx).cap + 1, dtype=torch.float64)
    assert float(ctx.all_reduce_sum(big)[0]) == ctx.world_size  # through gloo
    ints = torch.full((3,), ctx.rank + 1, dtype=torch.int32)
    assert not D.host_transport(ctx).accepts(ints, "SUM")
    assert ctx.all_reduce_sum(ints).tolist() == [3, 3, 3]  # through gloo
    print("local sums ok", flush=True)


def scenario_local_peer_dies():
    """Rank 1 dies (no exception, no teardown) while rank 0 waits in a shared-memory sum:
    rank 0 raises DistributedError within seconds."""
    import os
    import time

    import torch

    from torchrankboost.parallel import DistributedError

    ctx = _ctx()
    t = torch.ones(10, dtype=torch.float64)
    ctx.all_reduce_sum(t)  # sets the mapping up
    if ctx.rank == 1:
        os._exit(9)
    t0 = time.monotonic()
    try:
        ctx.all_reduce_sum(t)
    except DistributedError as exc:
        print(f"peer death seen after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
        os._exit(0)
    os._exit(1)


def scenario_stopped_then_dead_peer():
    """Rank 1 stops itself (SIGSTOP) before a shared-memory sum: rank 0 waits asleep (its
    CPU time over the wait is printed), times out after TORCHRANKBOOST_TIMEOUT naming rank
    1, kills it, and its next sum (int64: through gloo) fails naming rank 1 as dead."""
    import os
    import resource
    import signal
    import time

    import torch

    from torchrankboost.parallel import DistributedError

    ctx = _ctx()
    t = torch.ones(10, dtype=torch.float64)
    ctx.all_reduce_sum(t)  # sets the mapping up (and records the ranks' processes)
    pids = ctx.all_gather_object(os.getpid())
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(5)  # not reached: rank 0 kills this process
    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    try:
        ctx.all_reduce_sum(t)
        print("no timeout", flush=True)
        os._exit(1)
    except DistributedError as exc:
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        print(f"waited {time.monotonic() - t0:.2f} s using {cpu:.2f} s of CPU: {exc}",
              flush=True)
    os.kill(pids[1], signal.SIGKILL)
    time.sleep(0.2)
    try:
        ctx.all_reduce_sum(torch.ones(3, dtype=torch.int64))
        print("no error after the peer died", flush=True)
    except DistributedError as exc:
        print(f"gloo: {type(exc).__name__}: {exc}", flush=True)
    except RuntimeError as exc:
        print(f"gloo raw: {type(exc).__name__}: {exc}", flush=True)
    os._exit(0)


def scenario_shm_no_room():
    """posix_fallocate fails as on a full /dev/shm (ENOSPC): the sums go through gloo,
    exact, with one warning on rank 0 and no SIGBUS."""
    import errno
    import os
    import warnings

    import torch

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    os.posix_fallocate = full
    ctx = _ctx()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = torch.full((5,), 1.0 + ctx.rank, dtype=torch.float64)
        assert ctx.all_reduce_sum(t).tolist() == [3.0] * 5
        assert ctx.all_reduce_sum(t).tolist() == [6.0] * 5
    for w in seen:
        print(f"warning: {w.message}", flush=True)
    from torchrankboost.parallel import shm

    assert shm.host_transport(ctx) is None
    print("sums ok", flush=True)


def scenario_load_data(source, valid, out):
    """This rank's splits of ``load_data(source, valid=...)`` saved to ``out.<rank>``."""
    import torch

    from torchrankboost.data import load_data

    ctx = _ctx()
    splits = load_data(source, valid=valid or None, context=ctx)
    saved = {"name": splits[3]}
    for key, d in zip(("train", "valid", "test"), splits[:3]):
        saved[key] = None if d is None else {
            "X": d.X, "labels": d.labels, "qid": d.qid, "sizes": d.groups.sizes,
            "zero_based": d.zero_based}
    torch.save(saved, f"{out}.{ctx.rank}")
    print(f"rank {ctx.rank}: {len(splits[0])} training documents")


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items()
             if name.startswith("scenario_")}


def _main() -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    name, args = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        SCENARIOS[name](*args)
    except BaseException:
        # leave through the process group's teardown: a process that exits with live gloo
        # connections can abort (SIGABRT) instead of exiting with its own status
        dist.destroy_process_group()
        raise
    import gc

    gc.collect()  # DDP wrappers (reference cycles) go before the process group
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _main()


def train_env(**extra):
    """The environment of a ``train`` command started by a test: one thread, this checkout
    first on the path, no rank variables of an outer run; ``extra`` added."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(extra)
    return env


def train_command(*args):
    """``python -m torchrankboost train *args``."""
    return [sys.executable, "-m", "torchrankboost", "train", *args]
