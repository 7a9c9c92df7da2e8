"""The process group as an algorithm sees it (``parallel/context.py``): the context disabled
(identities) and on 2 gloo processes (collectives, global metrics), and failures that must
stop every rank (``check_same``, ``guard``)."""

import time

import pytest
import torch

from torchrankboost.parallel import DistContext, DistributedError, get_context

from dist_helpers import explain, launch


# ------------------------------------------------------------------ the context
def test_disabled_context_is_identity():
    ctx = get_context()
    assert isinstance(ctx, DistContext) and not ctx.enabled and ctx.is_main
    assert ctx.rank == 0 and ctx.world_size == 1
    assert ctx.backend is None and get_context(False).enabled is False
    assert get_context(ctx) is ctx
    t = torch.arange(3.0, dtype=torch.float64)
    for op in (ctx.all_reduce_sum, ctx.all_reduce_max, ctx.all_reduce_min):
        assert op(t) is t and t.tolist() == [0.0, 1.0, 2.0]
    assert ctx.bytes_reduced == 0
    assert ctx.all_gather_object({"a": 1}) == [{"a": 1}]
    assert ctx.broadcast_object("x") == "x"
    ctx.barrier()
    assert ctx.check_same("n_features", 46) == 46
    with pytest.raises(KeyError, match="passes through"):
        with ctx.guard():
            raise KeyError("passes through")
    with pytest.raises(ValueError, match="t must be a torch.Tensor"):
        ctx.all_reduce_sum(3.0)
    with pytest.raises(ValueError, match="src must be a rank"):
        ctx.broadcast_object("x", src=1)
    assert issubclass(DistributedError, RuntimeError)


def test_distributed_true_without_process_group_says_how_to_launch():
    with pytest.raises(ValueError, match="torchrun.*init_process_group"):
        get_context(True)
    with pytest.raises(ValueError, match="distributed must be None, True, False"):
        get_context("yes")


def test_collectives_and_global_metrics_on_two_processes():
    """all_reduce (in place; float64 stays float64; int, bool, non-contiguous), gather,
    broadcast, barrier, bytes counter, check_same on equal values; metrics over shards
    equal the metrics over the whole data; the global normalisation factor."""
    res = launch("collectives", 2, timeout=90)
    assert all(r.returncode == 0 for r in res), explain(res)
    assert all("collectives ok" in r.out for r in res)


# ------------------------------------------------------------------ failures stop every rank
def test_check_same_mismatch_raises_on_every_rank():
    res = launch("check_same_mismatch", 2, timeout=90)
    for r in res:
        assert r.returncode == 3, explain(res)
        assert ("ValueError: n_features differs across ranks: rank 0 has 46, rank 1 has 45"
                in r.out), explain(res)


def test_guard_one_rank_raises_every_rank_exits():
    t0 = time.monotonic()
    res = launch("guard_raise", 2, timeout=60)
    elapsed = time.monotonic() - t0
    for r in res:
        assert r.returncode != 0, explain(res)
        assert "DistributedError: rank 1 failed: ValueError: labels contain NaN" in r.err
        assert "guard passed" not in r.out
    assert elapsed < 45  # process start-up included; a hang would hit the 60 s timeout
