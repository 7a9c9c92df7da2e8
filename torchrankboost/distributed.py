"""Training on several processes: ``torch.distributed`` helpers, query sharding, batches.

The model is the usual one of PyTorch: ``torchrun`` starts one process per device
(``python -m torch.distributed.run --nproc-per-node N script.py``), each process calls
``torch.distributed.init_process_group`` (``"gloo"`` on CPU, ``"nccl"`` on GPUs) and holds
a *shard* of the queries. Everything here works unchanged in one process: a disabled
context makes every collective an identity, so algorithms call them unconditionally.

**The context.** :func:`get_context` returns a :class:`DistContext` (``enabled``, ``rank``,
``world_size``, ``is_main``, ``backend``) with the collectives an algorithm needs:
``all_reduce_sum/max/min`` (in place, any dtype, moved to the backend's device and back),
``all_gather_object``, ``broadcast_object``, ``barrier``, ``check_same`` (a start-of-fit check
that a value agrees on every rank, failing on every rank with the differing ranks named)
and ``guard`` (a failure on one rank raises :class:`DistributedError` on every rank instead
of leaving the others waiting in their next collective). ``bytes_reduced`` counts the bytes
all-reduced so far (the communication volume of a fit).

**Shards.** :func:`shard_queries` assigns whole queries to ranks, one contiguous block of
queries per rank, balanced by document count; :meth:`RankingData.shard
<torchrankboost.data.RankingData.shard>` cuts data in memory, and
:func:`load_svmlight_shard` makes each rank read and parse only its own byte range of an
SVMlight/LETOR file (or its own files of a list).

**Batches for neural training.** :class:`DistributedQueryBatchSampler` deals the queries to
the ranks each epoch (a shuffle seeded by ``(seed, epoch)``, identical on every rank,
balanced by document count), packs each rank's queries into batches of at most
``max_docs`` documents, and gives every rank the same number of batches (as
``DistributedDataParallel`` requires); :func:`torchrankboost.data.take_queries` turns a
batch of query indices into a flat ``(X, labels, Groups)`` batch.

**Normalising the loss.** ``DistributedDataParallel`` averages the gradients of the ranks:
with ``W`` ranks, rank ``r`` holding the queries ``Q_r`` of a step (``Q = ∪ Q_r``) and
per-rank losses ``L_r``, the parameters get ``(1/W) Σ_r ∇L_r``. A per-rank mean
(``reduction="mean"``) is therefore not the mean over the step's queries when ranks hold
different numbers of queries. The gradient of the global mean
``(1/|Q|) Σ_{q ∈ Q} ℓ_q`` is obtained with per-rank *sums* scaled by ``W / |Q|``:

.. math::
    L_r = \\frac{W}{|Q|} \\sum_{q \\in Q_r} \\ell_q
    \\quad\\Longrightarrow\\quad
    \\frac{1}{W} \\sum_r \\nabla L_r = \\nabla \\frac{1}{|Q|} \\sum_{q \\in Q} \\ell_q,

with ``|Q| = Σ_r |Q_r|`` all-reduced once per step. :func:`global_mean_scale` returns the
factor and :func:`global_mean_loss` applies it::

    loss_fn = ExponentialPairwiseLoss(reduction="sum")
    for batch in sampler:                                   # this rank's queries
        Xb, yb, gb = take_queries(X, y, groups, batch)
        loss = global_mean_loss(loss_fn(ddp_model(Xb).squeeze(-1), yb, gb), gb.num_groups)
        opt.zero_grad(); loss.backward(); opt.step()

(In one process the same code is the plain mean over the batch's queries.) To average over
the queries that have at least one pair only, as ``reduction="mean"`` of the pairwise
losses does, pass their count (or a ``(G,)`` bool mask) as ``local_count``. Metrics
combine the same way: :func:`global_metric` all-reduces the sum of the per-query values
and the query count (NDCG over all queries = ``Σ_r Σ_{q∈r} NDCG_q / Σ_r |G_r|``).

**Failures.** Collectives must be entered by every rank in the same order. A rank that
raises before a collective leaves the others waiting in it until the process group's
timeout; :meth:`DistContext.guard` is the remedy for local work that can fail (reading a
shard, checking its labels): run it inside ``with ctx.guard():`` on every rank and every
rank leaves the block together, raising :class:`DistributedError` ("rank 1 failed:
ValueError: ...") if any rank failed. A rank that dies outright (killed, segfault) is not
caught this way: ``torchrun`` then stops the others.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Union

import numpy as np
import torch
from torch import Tensor

from .groups import Groups

__all__ = [
    "DistContext",
    "DistributedError",
    "DistributedQueryBatchSampler",
    "get_context",
    "global_mean_loss",
    "global_mean_scale",
    "global_metric",
    "load_svmlight_shard",
    "metric_parts",
    "shard_queries",
]


class DistributedError(RuntimeError):
    """A failure on one or more ranks, raised on every rank by :meth:`DistContext.guard`.

    ``failures`` maps each failing rank to its error (``"ValueError: labels contain NaN"``);
    on a failing rank the original exception is the ``__cause__``.
    """

    def __init__(self, message: str, failures: Optional[dict] = None):
        super().__init__(message)
        self.failures = dict(failures or {})


def _dist():
    import torch.distributed as dist

    return dist


def _group_ready() -> bool:
    dist = _dist()
    return bool(dist.is_available() and dist.is_initialized())


_MAX_MESSAGE = 2000


class DistContext:
    """The process group as an algorithm sees it (see :func:`get_context`).

    Attributes:
        enabled: collectives communicate; when ``False`` they are identities / no-ops.
        rank: this process's rank (0 when disabled).
        world_size: the number of processes (1 when disabled).
        is_main: ``rank == 0`` (the process that prints, logs and saves).
        backend: ``"gloo"``, ``"nccl"``, ... or ``None`` when disabled.
        bytes_reduced: bytes of the tensors passed to ``all_reduce_*`` since creation or
            :meth:`reset_counters` (communication actually done: 0 while disabled).
    """

    def __init__(self, *, enabled: bool = False, rank: int = 0, world_size: int = 1,
                 backend: Optional[str] = None):
        self.enabled = bool(enabled)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.backend = backend
        self.bytes_reduced = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def __repr__(self) -> str:
        return (f"DistContext(enabled={self.enabled}, rank={self.rank}, "
                f"world_size={self.world_size}, backend={self.backend!r})")

    def reset_counters(self) -> None:
        """Set :attr:`bytes_reduced` back to 0."""
        self.bytes_reduced = 0

    # ------------------------------------------------------------------ tensors
    @property
    def device(self) -> Optional[torch.device]:
        """Where the backend wants tensors: the CPU for gloo, the current CUDA device for
        NCCL, ``None`` (the tensor's own device) otherwise or when disabled."""
        if not self.enabled:
            return None
        if self.backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        if self.backend == "gloo":
            return torch.device("cpu")
        return None

    def _all_reduce(self, t: Tensor, op_name: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise ValueError(f"t must be a torch.Tensor, got {type(t).__name__}")
        if not self.enabled:
            return t
        dist = _dist()
        op = getattr(dist.ReduceOp, op_name)
        self.bytes_reduced += t.numel() * t.element_size()
        if (op_name == "SUM" and t.dtype == torch.float64 and t.device.type == "cpu"
                and t.is_contiguous() and self.backend == "gloo"):
            local = _local_reducer(self)
            if local is not None and local.fits(t):
                return local.sum_(t)
        dev = self.device or t.device
        is_bool = t.dtype == torch.bool
        if not is_bool and t.device == dev and t.is_contiguous():
            dist.all_reduce(t, op=op)
            return t
        work = t.to(device=dev, dtype=torch.int32 if is_bool else t.dtype,
                    memory_format=torch.contiguous_format).contiguous()
        dist.all_reduce(work, op=op)
        with torch.no_grad():
            t.copy_(work != 0 if is_bool else work)
        return t

    def all_reduce_sum(self, t: Tensor) -> Tensor:
        """Element-wise sum over the ranks, **in place** in ``t`` (returned).

        Any shape and dtype (float64 stays float64; a bool tensor gives "any rank true");
        a tensor on another device than the backend's (CPU for gloo, CUDA for NCCL) is
        copied there and back. Every rank must call it with a tensor of the same shape and
        dtype. Disabled: returns ``t`` unchanged.
        """
        return self._all_reduce(t, "SUM")

    def sum_hook(self) -> Optional[Callable[[Tensor], Tensor]]:
        """:meth:`all_reduce_sum` where the collectives communicate, ``None`` in one process:
        for callers that would otherwise prepare a sum that is an identity (compact a buffer,
        call back from C)."""
        return self.all_reduce_sum if self.enabled else None

    def all_reduce_max(self, t: Tensor) -> Tensor:
        """Element-wise maximum over the ranks, in place (see :meth:`all_reduce_sum`)."""
        return self._all_reduce(t, "MAX")

    def all_reduce_min(self, t: Tensor) -> Tensor:
        """Element-wise minimum over the ranks, in place (see :meth:`all_reduce_sum`)."""
        return self._all_reduce(t, "MIN")

    # ------------------------------------------------------------------ objects
    def all_gather_object(self, obj: Any) -> List[Any]:
        """``[obj of rank 0, obj of rank 1, ...]`` on every rank (picklable objects);
        ``[obj]`` when disabled."""
        if not self.enabled:
            return [obj]
        out: List[Any] = [None] * self.world_size
        _dist().all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (the others' ``obj`` is ignored); ``obj``
        when disabled."""
        if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < self.world_size:
            raise ValueError(f"src must be a rank in [0, {self.world_size}), got {src!r}")
        if not self.enabled:
            return obj
        box = [obj]
        _dist().broadcast_object_list(box, src=src)
        return box[0]

    def all_gather_rows(self, t: Tensor) -> Tensor:
        """Every rank's ``t`` concatenated along dim 0 in rank order (on every rank).

        The ranks' tensors may differ in their first dimension only (same trailing shape and
        dtype, else ``ValueError`` on every rank); they travel padded to the longest one
        (one ``all_gather_object`` of the shapes, one tensor ``all_gather``), on the
        backend's device, and come back on ``t``'s device. Used to agree on data-derived
        settings once per fit (e.g. the rows that place the bin edges of a boosted model).
        Disabled: ``t`` itself.
        """
        if not isinstance(t, Tensor):
            raise ValueError(f"t must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() == 0:
            raise ValueError("t must have at least one dimension (the rows to concatenate)")
        if not self.enabled:
            return t
        metas = self.all_gather_object((tuple(t.shape), str(t.dtype)))
        if len({(m[0][1:], m[1]) for m in metas}) != 1:
            shown = ", ".join(f"rank {r} has {m[0]} {m[1]}" for r, m in enumerate(metas))
            raise ValueError(f"all_gather_rows: the tensors differ beyond their first "
                             f"dimension: {shown}")
        sizes = [m[0][0] for m in metas]
        dev = self.device or t.device
        work = torch.zeros((max(sizes),) + tuple(t.shape[1:]), dtype=t.dtype, device=dev)
        work[: t.shape[0]] = t.to(dev)
        parts = [torch.empty_like(work) for _ in range(self.world_size)]
        _dist().all_gather(parts, work)
        return torch.cat([p[:k] for p, k in zip(parts, sizes)]).to(t.device)

    def gather_values(self, values) -> Tensor:
        """``(world_size, k)`` float64: row ``r`` holds rank ``r``'s ``values`` (``k``
        numbers, the same ``k`` on every rank), on every rank.

        One ``all_reduce_sum`` of a ``world_size·k`` vector in which each rank fills its own
        row (adding zeros is exact, so the rows are the ranks' values bit for bit): the
        way to combine per-rank numbers that do not simply add up (a maximum together with
        sums, log-sum-exp of per-rank log values). Disabled: ``(1, k)``.
        """
        v = torch.as_tensor(values, dtype=torch.float64).detach().reshape(-1).cpu()
        out = torch.zeros((self.world_size, v.numel()), dtype=torch.float64)
        out[self.rank] = v
        return self.all_reduce_sum(out)

    def barrier(self) -> None:
        """Wait until every rank gets here (no-op when disabled)."""
        if not self.enabled:
            return
        dist = _dist()
        if self.backend == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()

    # ------------------------------------------------------------------ checks
    def check_same(self, name: str, value: Any) -> Any:
        """Check that ``value`` is the same on every rank; returns it.

        Every rank compares its value with rank 0's (values are gathered, so they must be
        picklable: numbers, strings, dtypes, tuples, small tensors). On a mismatch *every*
        rank raises ``ValueError("<name> differs across ranks: rank 0 has 46, rank 1 has
        45")``, naming each differing rank. The usual start-of-fit checks: the feature
        count, the label dtype, a loss's settings. A collective: every rank must call it.
        """
        if not self.enabled:
            return value
        values = self.all_gather_object(value)
        ref = values[0]
        bad = [r for r, v in enumerate(values) if not _same(v, ref)]
        if bad:
            shown = ", ".join(f"rank {r} has {_show(values[r])}" for r in [0] + bad)
            raise ValueError(f"{name} differs across ranks: {shown}")
        return value

    @contextlib.contextmanager
    def guard(self):
        """Run a block on every rank; if it fails on any rank, fail on every rank.

        At the end of the block every rank all-reduces a failure flag; if some rank
        failed, the failing ranks' error messages are gathered and every rank raises
        :class:`DistributedError` naming them (``"rank 1 failed: ValueError: labels contain
        NaN"``); on a failing rank the original exception is chained as the cause. This is
        how a bad shard on one rank stops every rank instead of leaving the others waiting
        in their next collective.

        Every rank must enter the guard (it ends with collectives, which all ranks must
        run in the same order), and the block itself should hold only local work: a rank
        that fails before a collective *inside* the block leaves the others waiting in it.
        ``Exception`` and ``SystemExit`` are caught; ``KeyboardInterrupt`` passes through.
        Disabled: the block runs as is and its exceptions pass through unchanged.
        """
        if not self.enabled:
            yield self
            return
        err: Optional[BaseException] = None
        try:
            yield self
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - re-raised on every rank
            err = exc
        flag = torch.tensor([0 if err is None else 1], dtype=torch.int32)
        if int(self.all_reduce_max(flag)[0]) == 0:
            return
        mine = None if err is None else _describe(err)
        msgs = self.all_gather_object(mine)
        failures = {r: m for r, m in enumerate(msgs) if m is not None}
        text = "; ".join(f"rank {r} failed: {m}" for r, m in failures.items())
        if err is not None:
            raise DistributedError(text, failures) from err
        raise DistributedError(text, failures)


def _describe(exc: BaseException) -> str:
    msg = str(exc.code) if isinstance(exc, SystemExit) else str(exc)
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " ..."


def _same(a: Any, b: Any) -> bool:
    """Equal values (numbers by value, other types by type and ``==``; tensors and arrays
    by shape, dtype and contents); values that cannot be compared differ."""
    try:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape
                    and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()))
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        if isinstance(a, bool) or isinstance(b, bool):
            return type(a) is type(b) and a == b
        if isinstance(a, numbers.Number) and isinstance(b, numbers.Number):
            return bool(a == b)
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


_DISABLED = DistContext()


# ----------------------------------------------------------------------------- one host
class _LocalReducer:
    """Sums of float64 CPU tensors over the ranks of one host through shared memory.

    A loopback-socket all-reduce (gloo) costs about 1 ms a call whatever its size up to
    ~1 MB; a boosted tree makes one per split. When every rank of the process group runs on
    this host, rank 0 creates a shared mapping (a file in ``/dev/shm``, unlinked once every
    rank has mapped it) and each sum goes through the compiled ``trb_shm_allreduce`` of
    :mod:`torchrankboost._native`: every rank copies its tensor into its slot, waits for the
    others (spinning, then yielding), and sums the W slots **in rank order** — the same
    result on every rank, deterministic. A peer that dies or a wait beyond ``timeout_s``
    raises :class:`DistributedError` instead of hanging. Set up once per process group, by a
    collective, the first time a float64 CPU sum is asked of a gloo group; absent when the
    ranks span several hosts, when the compiled kernels are unavailable or with
    ``TORCHRANKBOOST_SHM=0`` (then gloo does every sum).
    """

    CAP_BYTES = 1 << 23  # largest tensor summed here (8 MiB, above a 136-feature histogram)
    TOTAL_BYTES = 1 << 28  # the whole mapping: 2 sets x W slots (smaller slots for many ranks)

    def __init__(self, ctx: "DistContext", lib, path: str, size: int, cap: int):
        self.lib, self.rank, self.W, self.cap = lib, ctx.rank, ctx.world_size, cap
        self.map = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        self.ctrl = self.map[: 8 * (8 + self.W)].view(torch.int64)
        self.slots = self.map[8 * (8 + self.W):].view(torch.float64)
        self.epoch = 0
        self.timeout_s = float(os.environ.get("TORCHRANKBOOST_SHM_TIMEOUT", "600"))

    def fits(self, t: Tensor) -> bool:
        return t.numel() <= self.cap

    def sum_(self, t: Tensor) -> Tensor:
        rc = self.lib.trb_shm_allreduce(self.ctrl.data_ptr(), self.slots.data_ptr(), self.cap,
                                        self.rank, self.W, t.data_ptr(), t.numel(), self.epoch,
                                        self.timeout_s)
        self.epoch += 1
        if rc != 0:
            why = {1: f"no answer from the other ranks within {self.timeout_s:g} s",
                   2: "another rank's process has died", 3: "aborted"}.get(rc, f"error {rc}")
            raise DistributedError(f"rank {self.rank}: shared-memory all-reduce failed: {why}")
        return t


_LOCAL = {}  # process group -> _LocalReducer or None (decided once per group)


def _host_id() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _local_reducer(ctx: "DistContext") -> Optional[_LocalReducer]:
    """The shared-memory reducer of the default process group (set up by a collective on
    first use; ``None`` when it does not apply)."""
    dist = _dist()
    key = id(dist.group.WORLD)
    if key in _LOCAL:
        return _LOCAL[key]
    _LOCAL[key] = None  # the collectives below must not recurse into here
    if os.environ.get("TORCHRANKBOOST_SHM", "1").strip().lower() in ("0", "no", "false", "off"):
        return None
    from . import _native

    try:
        lib = _native.load()
        ok = True
    except _native.NativeUnavailable:
        lib, ok = None, False
    hosts = ctx.all_gather_object((_host_id(), ok))
    if not all(h == hosts[0][0] and k for h, k in hosts):
        return None
    W = ctx.world_size
    cap = min(_LocalReducer.CAP_BYTES, _LocalReducer.TOTAL_BYTES // (2 * W)) // 8
    size = 8 * (8 + W) + 2 * W * cap * 8
    path = None
    if ctx.rank == 0:
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="torchrankboost-", suffix=".shm", dir=folder)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
    path = ctx.broadcast_object(path)
    try:  # e.g. a rank in another mount namespace does not see the file
        red = _LocalReducer(ctx, lib, path, size, cap)
        red.ctrl[8 + ctx.rank] = os.getpid()
        mapped = True
    except (OSError, RuntimeError):
        red, mapped = None, False
    everyone = all(ctx.all_gather_object(mapped))  # also: every rank has written its pid
    if ctx.rank == 0:
        os.unlink(path)  # the mappings stay; nothing is left behind
    if not everyone:
        return None
    _LOCAL[key] = red
    return red


def get_context(distributed: Union[None, bool, DistContext] = None) -> DistContext:
    """The :class:`DistContext` of this process.

    Args:
        distributed: ``None`` (default): enabled iff ``torch.distributed`` is available, a
            process group is initialised and it has more than one process. ``True``:
            requires an initialised process group (``ValueError`` otherwise, saying to
            launch with ``torchrun`` and call ``init_process_group``); a group of one
            process is allowed and behaves as a single process. ``False``: disabled (every
            collective an identity). A :class:`DistContext` is returned as is.

    Returns a new context each call (its :attr:`~DistContext.bytes_reduced` counter starts
    at 0), except for a context passed in.
    """
    if isinstance(distributed, DistContext):
        return distributed
    if distributed is not None and not isinstance(distributed, bool):
        raise ValueError(f"distributed must be None, True, False or a DistContext, got "
                         f"{distributed!r}")
    if distributed is False:
        return DistContext()
    ready = _group_ready()
    if distributed is True and not ready:
        raise ValueError(
            "distributed=True needs an initialised torch.distributed process group: launch "
            "the script with torchrun (python -m torch.distributed.run --nproc-per-node N "
            "script.py) and call torch.distributed.init_process_group() (backend 'gloo' on "
            "CPU, 'nccl' on GPUs) before fitting")
    if not ready:
        return DistContext()
    dist = _dist()
    world = dist.get_world_size()
    if distributed is None and world <= 1:
        return DistContext()
    return DistContext(enabled=True, rank=dist.get_rank(), world_size=world,
                       backend=str(dist.get_backend()))


def _check_world(world_size) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) \
            or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    return int(world_size)


def _check_rank(rank, world_size: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
            or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
    return int(rank)


# ====================================================================== sharding
def shard_queries(doc_counts, world_size: int) -> Tensor:
    """The rank of each query: whole queries, one contiguous block per rank, balanced by
    document count.

    With ``N`` documents in all and ``c_g`` the documents of queries ``0 .. g-1``, rank
    ``r``'s block starts at the query boundary ``g`` nearest to ``r·N/W`` (``W`` =
    ``world_size``), moved where needed so that every rank gets at least one query. Ranks
    get the queries in order, so concatenating the shards in rank order gives back the data.
    A rank's document count differs from ``N/W`` by at most about one query's size.

    Args:
        doc_counts: ``(G,)`` documents per query (a tensor, array or list; or a
            :class:`~torchrankboost.Groups`).
        world_size: the number of ranks ``W``.

    Returns:
        ``(G,)`` int64 tensor of ranks, non-decreasing (CPU). ``ValueError`` when
        ``world_size < 1``, ``doc_counts`` is not a 1-D sequence of non-negative integers, or
        there are fewer queries than ranks. Vectorised: one cumulative sum and one
        ``searchsorted``.
    """
    W = _check_world(world_size)
    if isinstance(doc_counts, Groups):
        doc_counts = doc_counts.sizes
    sizes = torch.as_tensor(doc_counts).detach().cpu()
    if sizes.dim() != 1:
        raise ValueError(f"doc_counts must be 1-D (one count per query), got shape "
                         f"{tuple(sizes.shape)}")
    if sizes.dtype.is_floating_point or sizes.dtype == torch.bool:
        if sizes.dtype == torch.bool or not bool((sizes == sizes.round()).all()):
            raise ValueError("doc_counts must be integers (documents per query)")
    sizes = sizes.long()
    if sizes.numel() and int(sizes.min()) < 0:
        raise ValueError("doc_counts must be non-negative")
    G = sizes.numel()
    if G < W:
        raise ValueError(f"cannot shard {G} queries over world_size={W} ranks: every rank "
                         f"needs at least one query")
    cum = torch.zeros(G + 1, dtype=torch.float64)
    torch.cumsum(sizes.double(), 0, out=cum[1:])
    r = torch.arange(1, W, dtype=torch.long)
    target = r.double() * (cum[-1] / W)
    # the boundary g (in 1..G-1) with cum[g] nearest the target
    hi = torch.searchsorted(cum, target).clamp(1, G - 1) if G > 1 else r * 0
    lo = (hi - 1).clamp_min(1)
    near = torch.where((target - cum[lo]).abs() <= (cum[hi] - target).abs(), lo, hi)
    # strictly increasing, every rank at least one query
    near = near.clamp_min(1)
    near = torch.cummax(near - r, 0).values + r
    near = torch.minimum(near, G - W + r)
    return torch.searchsorted(near, torch.arange(G, dtype=torch.long), right=True)


# ---------------------------------------------------------------- file shards
_BLANK = object()
_SCAN_BLOCK = 1 << 16


def _qid_token(line: bytes, path: Path, pos: int):
    """The qid of a data line (an int, or the raw token when it does not parse: the reader
    reports that line), ``_BLANK`` for a blank or comment line."""
    hash_pos = line.find(b"#")
    if hash_pos >= 0:
        line = line[:hash_pos]
    parts = line.split()
    if not parts:
        return _BLANK
    if len(parts) < 2 or not parts[1].startswith(b"qid:"):
        raise ValueError(
            f"{path}: the data line at byte {pos} has no 'qid:'; load_svmlight_shard cuts a "
            f"file at query boundaries, which it finds by qid (give every line a qid, or "
            f"split the data into one file per shard and pass the list of files)")
    try:
        return int(parts[1][4:])
    except ValueError:
        return parts[1]


def _last_data_line(fh, p: int, path: Path):
    """``(qid, end)`` of the last data line ending at or before the line start ``p``
    (``(None, 0)`` when there is none), reading backwards in growing blocks."""
    block = _SCAN_BLOCK
    while True:
        a = max(0, p - block)
        fh.seek(a)
        buf = fh.read(p - a)
        pieces = buf.split(b"\n")[:-1]  # buf ends with the newline before p
        first = 0 if a == 0 else 1  # the first piece may be a partial line
        end = p
        for line in reversed(pieces[first:]):
            start = end - len(line) - 1
            q = _qid_token(line, path, start)
            if q is not _BLANK:
                return q, end
            end = start
        if a == 0:
            return None, 0
        block *= 8


def _query_cut(path: Path, pos: int, size: int) -> int:
    """Where the shard whose nominal start is byte ``pos`` begins: right after the last
    data line before the first query that starts at or after ``pos`` (a query starts at a
    data line whose qid differs from the previous data line's). 0 or ``size`` at the ends.

    Cutting right after a data line (comment lines after it go to the next shard) is what
    scikit-learn's ``offset``/``length`` reader needs to read exactly the lines between two
    cuts."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    with open(path, "rb") as fh:
        fh.seek(pos - 1)
        if fh.read(1) == b"\n":
            p = pos
        else:
            fh.readline()
            p = fh.tell()
        prev, prev_end = _last_data_line(fh, p, path)
        fh.seek(p)
        at = p
        for line in fh:
            q = _qid_token(line, path, at)
            at += len(line)
            if q is _BLANK:
                continue
            if prev is None:
                return 0
            if q != prev:
                return prev_end
            prev_end = at
    return size


def load_svmlight_shard(path, *, rank: Optional[int] = None, world_size: Optional[int] = None,
                        n_features: Optional[int] = None, dtype: torch.dtype = torch.float32,
                        normalize: bool = False, zero_based="auto",
                        max_features: Optional[int] = None, query_file=None,
                        context: Union[None, bool, DistContext] = None):
    """This rank's queries of an SVMlight/LETOR file, reading and parsing only its part.

    **One file.** The file's ``S`` bytes are cut into ``world_size`` nominal ranges
    ``[r·S/W, (r+1)·S/W)``; each rank's part starts at the first query boundary (a data
    line whose ``qid:`` differs from the previous data line's) at or after its nominal start
    — reading a little before it to learn the previous qid — and ends where the next rank's
    part starts. So every query is read by exactly one rank, and concatenating the parts in
    rank order gives the whole file's data (:meth:`RankingData.concat
    <torchrankboost.data.RankingData.concat>`). This assumes that the lines of a query are
    contiguous, as in LETOR files (a qid that comes back later in the file would be split
    between ranks); every line must carry ``qid:`` (a file of one query, or with a
    ``.query`` size file, cannot be cut this way: split it into files). A query longer than
    ``S/W`` bytes can leave a rank with no document. Compressed files cannot be cut by
    byte: decompress them or pass a list of files.

    **A list of files** with at least ``world_size`` entries: rank ``r`` reads
    ``files[r::world_size]`` whole (their group-size files too) and gets them concatenated
    in that order.

    **Feature numbering.** ``zero_based="auto"`` (0-based iff some index is 0) and
    ``n_features=None`` (the largest index) must be decided over the whole data, not per
    part. When a process group is initialised with this ``rank`` and ``world_size``, the
    ranks agree on them (one all-reduce of the widest index and of the index-0 evidence),
    so every shard gets the whole file's columns. Without a process group, pass
    ``n_features`` and ``zero_based`` (``True``/``False``) explicitly (``ValueError``
    otherwise).

    Args:
        path: a file, or a list of files.
        rank, world_size: this shard and the number of shards; default: the process
            group's (rank 0 of 1 without one). Pass both or neither.
        n_features, dtype, normalize, zero_based, max_features: as
            :func:`torchrankboost.data.load_svmlight`.
        query_file: a group-size file; only with ``world_size=1`` (a byte range finds its
            queries by qid).
        context: the process group to agree through (:func:`get_context`'s argument).

    Returns:
        :class:`~torchrankboost.data.RankingData` of this rank's queries (``X`` with the
        agreed feature count, ``qid`` from the file; ``row`` counts the data rows of the
        part this rank read: from the start of its byte range, or of each of its files).

    Raises:
        ValueError: bad arguments, a malformed line (``"<path>:<line>: <problem>"``, the
            line numbered as in the whole file), a line without qid; with a process group
            every rank raises :class:`DistributedError` naming the rank(s) whose part failed.
    """
    from . import data as D

    ctx = get_context(context)
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank and world_size, or neither (then the process "
                         "group's are used)")
    if rank is None:
        rank, world_size = ctx.rank, ctx.world_size
    world_size = _check_world(world_size)
    rank = _check_rank(rank, world_size)
    files = _shard_file_list(path, world_size, query_file)
    c = _numbering_context(ctx, rank, world_size, n_features, zero_based)
    with c.guard():
        paths, parsed, nf, npdt, ranges, qfiles = _read_shard_part(
            D, files, rank, world_size, n_features, zero_based, dtype, query_file)
        width, has_zero = D._numbering_evidence(parsed, len(paths))
    evidence = c.all_reduce_max(torch.tensor([width, int(has_zero)], dtype=torch.int64))
    width, has_zero = int(evidence[0]), bool(evidence[1])
    with c.guard():
        zb = has_zero if zero_based == "auto" else zero_based
        if nf is None and c.enabled:
            D._widen(parsed, len(paths), width)
            nf = max(width - (0 if zb else 1), 0)
        parts = D._build_files(paths, parsed, n_features=nf, zero_based=zb, npdt=npdt,
                               dtype=dtype, query_files=qfiles, normalize=normalize,
                               max_features=max_features, ranges=ranges)
    return parts[0] if len(parts) == 1 else D.RankingData.concat(parts)


def _shard_file_list(path, world_size: int, query_file) -> list:
    """``path`` as a list of files, checked for sharding over ``world_size`` ranks (one file
    to cut by byte ranges, or at least ``world_size`` files)."""
    if isinstance(path, (str, os.PathLike)):
        files = [path]
    else:
        try:
            files = list(path)
        except TypeError:
            raise ValueError(f"path must be a file or a list of files, got {path!r}") from None
        if not files or not all(isinstance(f, (str, os.PathLike)) for f in files):
            raise ValueError("path must be a file or a non-empty list of files")
    if len(files) > 1 and len(files) < world_size:
        raise ValueError(f"a list of {len(files)} files cannot be shared by world_size="
                         f"{world_size} ranks (rank r reads files[r::world_size]): give at "
                         f"least {world_size} files, or one file to cut by byte ranges")
    if world_size > 1 and query_file is not None:
        raise ValueError("query_file: a shard finds its queries by qid (every line needs "
                         "'qid:'); split the data into files with their own .query files "
                         "instead")
    return files


def _numbering_context(ctx: DistContext, rank: int, world_size: int, n_features,
                       zero_based) -> DistContext:
    """The context the shards agree on the feature numbering through: the process group when
    it is this ``(rank, world_size)``; a disabled one when nothing needs agreeing (one shard,
    or explicit ``n_features`` and ``zero_based``), else ``ValueError``."""
    group = ctx.enabled and (ctx.rank, ctx.world_size) == (rank, world_size)
    if world_size > 1 and not group and (n_features is None or zero_based == "auto"):
        why = ("no torch.distributed process group is initialised" if not ctx.enabled else
               f"the process group is rank {ctx.rank} of {ctx.world_size}, not rank {rank} "
               f"of {world_size}")
        raise ValueError(
            f"load_svmlight_shard: {why}, so the shards cannot agree on the feature "
            f"numbering: pass n_features= and zero_based= (True or False) explicitly, the "
            f"same on every rank, or launch with torchrun and call "
            f"torch.distributed.init_process_group() first")
    return ctx if group else _DISABLED


def _read_shard_part(D, files: list, rank: int, world_size: int, n_features, zero_based,
                     dtype, query_file):
    """Parse this rank's part: its byte range of one file, or ``files[rank::world_size]``.
    Returns ``(paths, parsed, n_features, numpy dtype, ranges or None, query files)``."""
    if len(files) == 1:
        p = Path(files[0])
        D._check_paths([p])
        if world_size > 1 and p.suffix.lower() in (".gz", ".bz2"):
            raise ValueError(f"{p}: a compressed file cannot be cut into byte ranges; "
                             f"decompress it, or pass a list of files")
        size = p.stat().st_size
        start = _query_cut(p, rank * size // world_size, size)
        end = _query_cut(p, (rank + 1) * size // world_size, size)
        ranges = [(start, end)] if world_size > 1 else None
        read = [p]
        qfiles = [False] if world_size > 1 else [query_file]
    else:
        read, ranges = files[rank::world_size], None
        qfiles = [None] * len(read)
    paths, parsed, nf, npdt = D._read_files(read, n_features=n_features,
                                            zero_based=zero_based, dtype=dtype, ranges=ranges)
    if ranges is not None and parsed[2].shape[0] != parsed[0].shape[0]:
        raise ValueError(f"{paths[0]}: lines without 'qid:' in bytes {ranges[0][0]}.."
                         f"{ranges[0][1]}; load_svmlight_shard needs a qid on every line")
    return paths, parsed, nf, npdt, ranges, qfiles


# ====================================================================== batches
class DistributedQueryBatchSampler(torch.utils.data.Sampler):
    """Batches of whole queries for one rank of a ``DistributedDataParallel`` run.

    Every rank builds the sampler from the same :class:`~torchrankboost.Groups` (those of
    the whole training data) and gets its own batches of query indices:

    1. each epoch the queries are shuffled with a generator seeded by ``seed + epoch`` —
       the same permutation on every rank (no communication);
    2. the shuffled queries are dealt to the ranks as contiguous blocks of that order,
       balanced by document count (:func:`shard_queries`);
    3. each rank packs its block greedily into batches of at most ``max_docs`` documents
       (as :class:`~torchrankboost.data.QueryBatchSampler`; a larger query is a batch of its
       own);
    4. every rank gets the **same number of batches** (``DistributedDataParallel`` waits
       for every rank's gradients at each step, so a rank with one batch more would hang
       the others): with ``drop_last=False`` (default) ranks with fewer batches repeat
       their first batches (those queries count twice that epoch, as with
       ``DistributedSampler``'s padding); with ``drop_last=True`` every rank stops at the
       smallest count (the extra batches of the other ranks are skipped that epoch).

    The epoch counter starts at 0 and advances after each full pass; :meth:`set_epoch`
    sets it (call it on every rank with the same value). Use with
    :func:`torchrankboost.data.take_queries` (loader-free) or as the ``batch_sampler`` of a
    ``DataLoader`` over a :class:`~torchrankboost.data.QueryDataset` with
    :func:`~torchrankboost.data.collate_queries`.

    Args:
        groups: the :class:`Groups` of the whole data set (the same on every rank).
        max_docs: document budget of a batch on one rank.
        num_replicas, rank: the number of ranks and this one; default: the process
            group's (:func:`get_context`), 1 and 0 without one.
        shuffle: reshuffle the queries each epoch (else query order, same dealing each
            epoch).
        seed: the shuffle's base seed (the same on every rank).
        drop_last: drop batches instead of repeating them to even the ranks out.
    """

    def __init__(self, groups: Groups, *, max_docs: int, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        from .data import _check_max_docs, _group_sizes_np

        self.sizes = _group_sizes_np(groups)
        self.max_docs = _check_max_docs(max_docs)
        if num_replicas is None or rank is None:
            ctx = get_context(None)
            num_replicas = ctx.world_size if num_replicas is None else num_replicas
            rank = ctx.rank if rank is None else rank
        self.num_replicas = _check_world(num_replicas)
        self.rank = _check_rank(rank, self.num_replicas)
        if self.sizes.shape[0] < self.num_replicas:
            raise ValueError(f"groups has {self.sizes.shape[0]} queries, fewer than the "
                             f"{self.num_replicas} ranks: every rank needs at least one")
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._cache = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def plan(self, epoch: Optional[int] = None) -> List[List[np.ndarray]]:
        """Every rank's batches of ``epoch`` (default: the coming one), before evening the
        counts out: ``plan[r][b]`` is an array of query indices."""
        return self._plan(self.epoch if epoch is None else int(epoch))[0]

    def _plan(self, epoch: int):
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1], self._cache[2]
        from .data import _batch_bounds, epoch_query_order

        order = epoch_query_order(self.sizes.shape[0], shuffle=self.shuffle, seed=self.seed,
                                  epoch=epoch)
        owner = shard_queries(torch.from_numpy(self.sizes[order]), self.num_replicas).numpy()
        cuts = np.searchsorted(owner, np.arange(self.num_replicas + 1))
        per_rank = []
        for r in range(self.num_replicas):
            block = order[cuts[r]:cuts[r + 1]]
            bounds = _batch_bounds(self.sizes[block], self.max_docs)
            per_rank.append([block[bounds[b]:bounds[b + 1]] for b in range(len(bounds) - 1)])
        counts = [len(b) for b in per_rank]
        n = min(counts) if self.drop_last else max(counts)
        self._cache = (epoch, per_rank, n)
        return per_rank, n

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.epoch
        per_rank, n = self._plan(epoch)
        self.epoch = epoch + 1
        mine = per_rank[self.rank]
        for b in range(n):
            yield mine[b % len(mine)].tolist()

    def __len__(self) -> int:
        """Batches in the coming epoch (the same on every rank)."""
        return int(self._plan(self.epoch)[1])


# ====================================================================== normalisation
def _local_count(local_count) -> float:
    if isinstance(local_count, Tensor):
        if local_count.dtype == torch.bool:
            return float(local_count.sum())
        if local_count.numel() != 1:
            raise ValueError(f"local_count must be a number, a one-element tensor or a bool "
                             f"mask of the counted queries, got shape "
                             f"{tuple(local_count.shape)}")
        value = float(local_count.reshape(()))
    elif isinstance(local_count, (int, float, np.integer, np.floating)) \
            and not isinstance(local_count, bool):
        value = float(local_count)
    else:
        raise ValueError(f"local_count must be a number, a one-element tensor or a bool "
                         f"mask of the counted queries, got {local_count!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"local_count must be finite and non-negative, got {value}")
    return value


def global_mean_scale(local_count, context: Union[None, bool, DistContext] = None) -> float:
    """``W / |Q|``: the factor that turns this rank's *summed* loss into one whose
    ``DistributedDataParallel``-averaged gradient is the gradient of the mean over all
    queries of the step on all ranks (see the module docstring).

    Args:
        local_count: this rank's number of queries in the step (an int, a one-element
            tensor, or a ``(G,)`` bool mask of the counted queries, e.g. those with at least
            one pair).
        context: :func:`get_context`'s argument (default: the process group if any).

    Returns:
        a Python float, ``world_size / Σ_r local_count_r`` (one all-reduce of one float64;
        ``0.0`` when no rank has a counted query). Disabled: ``1 / local_count``.
    """
    ctx = get_context(context)
    total = ctx.all_reduce_sum(torch.tensor([_local_count(local_count)],
                                            dtype=torch.float64))
    tot = float(total[0])
    return ctx.world_size / tot if tot > 0 else 0.0


def global_mean_loss(local_sum: Tensor, local_count,
                     context: Union[None, bool, DistContext] = None, *,
                     with_mean: bool = False):
    """``local_sum · W / |Q|`` (:func:`global_mean_scale`): backpropagating it through
    ``DistributedDataParallel`` gives the gradient of the mean loss over all queries of the
    step. ``local_sum`` is this rank's loss summed over its queries (``reduction="sum"``).

    Its value is not the global mean; with ``with_mean=True`` the result is ``(loss,
    mean)``, ``mean`` being the global mean ``Σ_r local_sum_r / |Q|`` as a float (for
    logging; the same single all-reduce). In one process the loss is the plain mean over
    the batch's queries.
    """
    if not isinstance(local_sum, Tensor):
        raise ValueError(f"local_sum must be a tensor (the summed loss), got "
                         f"{type(local_sum).__name__}")
    ctx = get_context(context)
    tot = ctx.all_reduce_sum(torch.tensor([_local_count(local_count),
                                           float(local_sum.detach()) if with_mean else 0.0],
                                          dtype=torch.float64))
    count = float(tot[0])
    scale = ctx.world_size / count if count > 0 else 0.0
    loss = local_sum * scale
    if not with_mean:
        return loss
    return loss, (float(tot[1]) / count if count > 0 else 0.0)


def metric_parts(metric, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None
                 ) -> Tensor:
    """This rank's share of a metric over all ranks' queries: ``(2,)`` float64 ``[numerator,
    denominator]`` on the CPU, to be summed over the ranks (the metric is then
    ``numerator / denominator``).

    For a mean over queries: ``[Σ_q m_q, #counted queries]`` from the per-query values
    (``reduction="none"``; NaN marks a query the metric skips); for ``pair_error``: the
    misordered and the total crucial-pair weight. ``ValueError`` for a metric without
    per-query values (it cannot be combined over ranks). :func:`global_metric` is one
    all-reduce of these; an algorithm evaluating several metrics stacks them into one.
    """
    from . import metrics as M
    from .registry import metric as get_metric

    m = get_metric(metric)
    if m.fn is M.pair_error:
        kw = dict(m.kwargs)
        num = m.fn(scores, labels, groups, **{**kw, "reduction": "sum"})
        den = m.fn(torch.zeros_like(scores), labels, groups,
                   **{**kw, "ties": "error", "reduction": "sum"})
        return torch.stack([torch.as_tensor(num).double().cpu().reshape(()),
                            torch.as_tensor(den).double().cpu().reshape(())])
    try:
        per = m.fn(scores, labels, groups, reduction="none", **m.kwargs)
    except TypeError:
        raise ValueError(f"global_metric: {m.name} has no per-query values "
                         f"(reduction='none'); it cannot be combined over ranks") from None
    per = torch.as_tensor(per).double().cpu().reshape(-1)
    ok = ~torch.isnan(per)
    return torch.stack([per[ok].sum(), ok.sum().double()])


def global_metric(metric, scores: Tensor, labels: Tensor, groups: Optional[Groups] = None, *,
                  context: Union[None, bool, DistContext] = None) -> float:
    """A ranking metric over the queries of every rank, each rank holding its own shard.

    For a mean over queries (NDCG, DCG, MAP, precision, MRR, AUC, ...): the per-query values
    (``reduction="none"``; NaN marks a query the metric skips) are summed and counted on
    each rank and both are all-reduced, ``Σ_r Σ_{q∈r} m_q / Σ_r |G_r|``; ``pair_error``
    (pooled over pairs) all-reduces its misordered and total pair weights (see
    :func:`metric_parts`). In one process this is the metric itself.

    Args:
        metric: a metric name (``"ndcg@10"``, ``"map"``, ...) or a registry
            :class:`~torchrankboost.registry.Metric`.
        scores, labels, groups: this rank's shard.
        context: :func:`get_context`'s argument.

    Returns:
        the global value as a float (NaN when no rank has a counted query).
    """
    ctx = get_context(context)
    tot = ctx.all_reduce_sum(metric_parts(metric, scores, labels, groups))
    return float(tot[0] / tot[1]) if float(tot[1]) > 0 else float("nan")
