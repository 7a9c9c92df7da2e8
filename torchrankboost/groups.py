"""Ragged query structure: CSR offsets over a flat document axis, and segment ops.

A batch of queries is one flat 1-D tensor of per-document values plus a :class:`Groups`
object that says where each query starts and ends (like the ``indptr`` of a CSR matrix)::

    scores  = [s0 s1 s2 | s3 s4 | s5 s6 s7 s8]
    offsets = [0, 3, 5, 9]          sizes = [3, 2, 4]      group_index = [0 0 0 1 1 2 2 2 2]

Every operation here is a handful of vectorised torch ops on whatever device the offsets
live on; nothing loops over groups in Python. Empty groups (size 0) are allowed: they
reduce to the neutral value of the reduction (0 for sums, ``-inf`` for max/logsumexp,
unless ``empty`` is given).

Non-contiguous query ids: :meth:`Groups.from_qid` requires each query's documents to be
contiguous (as in LETOR/SVMlight files) and raises a ``ValueError`` otherwise;
:meth:`Groups.from_unsorted_qid` accepts any order and returns the groups together with the
stable permutation that makes the documents contiguous (``x[perm]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ._pair_engine.segment import seg_lse, seg_scan_lse
from .contract import DeviceLike

if TYPE_CHECKING:
    import numpy

__all__ = ["Groups", "as_groups", "GroupsLike"]

ArrayLike = Union[Tensor, Sequence[int], "numpy.ndarray"]  # noqa: F821
#: the query structure as the public functions take it: :class:`Groups`, a ``(n,)`` array of
#: contiguous query ids, or ``None`` (one query)
GroupsLike = Union["Groups", ArrayLike, None]


def as_vector(x, name: str, *, device=None, hint: str = "") -> Tensor:
    """``x`` as a detached 1-D real tensor on ``device`` (booleans become float64): the one
    check of per-document values (scores, labels) shared by the metrics and the algorithms'
    inputs. ``ValueError`` naming ``name`` for a value that is not 1-D (``hint`` is added to
    that message), complex, or NaN/inf."""
    if not isinstance(x, Tensor):
        try:
            x = torch.as_tensor(x)
        except Exception as exc:
            raise ValueError(f"{name}: cannot convert to a tensor ({exc})") from None
    if device is not None:
        x = x.to(device)
    x = x.detach()
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}{hint}")
    if x.dtype == torch.bool:
        x = x.to(torch.float64)
    if x.dtype.is_complex:
        raise ValueError(f"{name} must be real, got {x.dtype}")
    if x.dtype.is_floating_point and x.numel() and not bool(torch.isfinite(x).all()):
        what = "NaN" if bool(torch.isnan(x).any()) else "inf"
        raise ValueError(f"{name} contain {what} values; every value must be finite")
    return x


def _as_long_tensor(x, name: str, device=None) -> Tensor:
    if isinstance(x, Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x)
        except Exception as exc:  # pragma: no cover - depends on the input type
            raise ValueError(f"{name}: cannot convert to a tensor ({exc})") from None
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        if t.dtype.is_floating_point and t.numel() and not torch.equal(t, t.round()):
            raise ValueError(f"{name} must hold integers, got non-integral values")
        if t.dtype == torch.bool:
            raise ValueError(f"{name} must hold integers, got booleans")
    t = t.to(dtype=torch.long, device=device if device is not None else t.device)
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t


class Groups:
    """Query groups over a flat document axis (CSR ``offsets``).

    Args:
        offsets: 1-D integer tensor of length ``num_groups + 1`` with ``offsets[0] == 0`` and
            non-decreasing entries; group ``g`` holds documents ``offsets[g]:offsets[g+1]``.

    Attributes:
        offsets: ``(G + 1,)`` int64.
        sizes: ``(G,)`` int64, documents per group.
        num_groups: ``G``.
        num_docs: ``n = offsets[-1]``.
        group_index: ``(n,)`` int64, the group of each document.
        position: ``(n,)`` int64, each document's index inside its group.
        max_size: the largest group size (a Python int).

    Use the constructors :meth:`from_sizes`, :meth:`from_qid`, :meth:`from_unsorted_qid`,
    :meth:`from_padded` and :meth:`single` rather than building offsets by hand.
    """

    __slots__ = ("offsets", "_cache")

    def __init__(self, offsets: ArrayLike):
        off = _as_long_tensor(offsets, "offsets")
        if off.numel() < 1:
            raise ValueError("offsets must have at least one entry (offsets[0] == 0)")
        if int(off[0]) != 0:
            raise ValueError(f"offsets[0] must be 0, got {int(off[0])}")
        if off.numel() > 1 and bool((off[1:] < off[:-1]).any()):
            raise ValueError("offsets must be non-decreasing")
        self.offsets = off
        self._cache = {}

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_sizes(cls, sizes: ArrayLike, *, device: DeviceLike = None) -> "Groups":
        """Groups of the given sizes, in order. ``sizes`` must be non-negative integers."""
        s = _as_long_tensor(sizes, "sizes", device)
        if s.numel() and bool((s < 0).any()):
            raise ValueError("sizes must be non-negative")
        off = torch.zeros(s.numel() + 1, dtype=torch.long, device=s.device)
        torch.cumsum(s, 0, out=off[1:])
        return cls(off)

    @classmethod
    def from_qid(cls, qid: ArrayLike, *, device: DeviceLike = None) -> "Groups":
        """Groups from a per-document query id whose runs are contiguous.

        Consecutive equal ids form a group, in file order. A query id that appears in two
        separate runs raises ``ValueError`` (use :meth:`from_unsorted_qid` for such data).
        """
        q = _as_long_tensor(qid, "qid", device)
        n = q.numel()
        if n == 0:
            return cls(torch.zeros(1, dtype=torch.long, device=q.device))
        starts = torch.ones(n, dtype=torch.bool, device=q.device)
        starts[1:] = q[1:] != q[:-1]
        run_ids = q[starts]
        if torch.unique(run_ids).numel() != run_ids.numel():
            raise ValueError(
                "qid: documents of a query are not contiguous (a query id appears in more "
                "than one run); sort them first or use Groups.from_unsorted_qid(qid), which "
                "returns the groups and the permutation to apply to the data"
            )
        start_idx = torch.nonzero(starts).flatten()
        off = torch.cat([start_idx, torch.tensor([n], device=q.device)])
        return cls(off)

    @classmethod
    def from_unsorted_qid(cls, qid: ArrayLike, *, device: DeviceLike = None
                          ) -> Tuple["Groups", Tensor]:
        """Groups from query ids in any order.

        Returns ``(groups, perm)`` where ``perm`` is the stable permutation that brings each
        query's documents together (queries in order of first appearance, documents in their
        original relative order): apply it as ``X[perm]``, ``labels[perm]``.
        """
        q = _as_long_tensor(qid, "qid", device)
        n = q.numel()
        if n == 0:
            return cls(torch.zeros(1, dtype=torch.long, device=q.device)), q.clone()
        uniq, inverse = torch.unique(q, return_inverse=True)
        # order queries by first appearance
        first = torch.full((uniq.numel(),), n, dtype=torch.long, device=q.device)
        first.scatter_reduce_(0, inverse, torch.arange(n, device=q.device), "amin")
        rank_of_query = torch.empty_like(first)
        rank_of_query[torch.argsort(first)] = torch.arange(uniq.numel(), device=q.device)
        key = rank_of_query[inverse]
        perm = torch.argsort(key, stable=True)
        sizes = torch.bincount(key, minlength=uniq.numel())
        return cls.from_sizes(sizes), perm

    @classmethod
    def from_padded(cls, mask: Tensor) -> "Groups":
        """Groups from a ``(B, L)`` boolean mask of valid entries (row ``b`` = query ``b``).

        The flat document order is row-major over valid entries, i.e. ``values[mask]``; see
        :meth:`unpad`.
        """
        if not isinstance(mask, Tensor) or mask.dim() != 2:
            raise ValueError("mask must be a 2-D (B, L) tensor")
        return cls.from_sizes(mask.to(torch.bool).sum(1))

    @classmethod
    def single(cls, n: int, *, device: DeviceLike = None) -> "Groups":
        """One group holding all ``n`` documents."""
        return cls(torch.tensor([0, int(n)], dtype=torch.long, device=device))

    # ------------------------------------------------------------------ properties
    def _cached(self, key, fn):
        val = self._cache.get(key)
        if val is None:
            val = fn()
            self._cache[key] = val
        return val

    @property
    def device(self) -> torch.device:
        return self.offsets.device

    @property
    def num_groups(self) -> int:
        return self.offsets.numel() - 1

    def __len__(self) -> int:
        return self.num_groups

    @property
    def num_docs(self) -> int:
        return self._cached("num_docs", lambda: int(self.offsets[-1]))

    @property
    def sizes(self) -> Tensor:
        return self._cached("sizes", lambda: self.offsets[1:] - self.offsets[:-1])

    @property
    def max_size(self) -> int:
        return self._cached(
            "max_size", lambda: int(self.sizes.max()) if self.num_groups else 0
        )

    @property
    def group_index(self) -> Tensor:
        return self._cached(
            "group_index",
            lambda: torch.repeat_interleave(
                torch.arange(self.num_groups, device=self.device), self.sizes,
                output_size=self.num_docs,
            ),
        )

    @property
    def position(self) -> Tensor:
        return self._cached(
            "position",
            lambda: torch.arange(self.num_docs, device=self.device) - self.doc_start,
        )

    @property
    def doc_start(self) -> Tensor:
        """``(n,)`` int64: the offset of the first document of each document's group."""
        return self._cached("doc_start", lambda: self.offsets.index_select(0, self.group_index))

    @property
    def doc_end(self) -> Tensor:
        """``(n,)`` int64: one past the offset of the last document of each document's group."""
        return self._cached("doc_end",
                            lambda: self.offsets.index_select(0, self.group_index + 1))

    def to(self, device: DeviceLike) -> "Groups":
        """The same groups with offsets on ``device`` (the host-side sizes already read,
        :meth:`fix_sizes`, come along: no check and no read of the copy)."""
        device = torch.device(device)
        if device == self.device:
            return self
        known = {k: self._cache[k] for k in ("num_docs", "max_size") if k in self._cache}
        if len(known) == 2:
            return self._derived(self.offsets.to(device), known["num_docs"], known["max_size"])
        return Groups(self.offsets.to(device))

    def __eq__(self, other) -> bool:
        return isinstance(other, Groups) and torch.equal(
            self.offsets.cpu(), other.offsets.cpu()
        )

    def __hash__(self):  # pragma: no cover - Groups are not meant as dict keys
        return id(self)

    def __repr__(self) -> str:
        return f"Groups(num_groups={self.num_groups}, num_docs={self.num_docs}, device={self.device})"

    # ------------------------------------------------------------------ checks
    def check(self, x: Tensor, name: str = "scores") -> None:
        """Raise ``ValueError`` unless ``x``'s first axis has exactly ``num_docs`` entries."""
        if x.dim() < 1 or x.shape[0] != self.num_docs:
            got = x.shape[0] if x.dim() else "a scalar"
            raise ValueError(
                f"groups cover {self.num_docs} documents but {name} has {got}"
            )

    # ------------------------------------------------------------------ segment reductions
    def segment_sum(self, x: Tensor) -> Tensor:
        """Per-group sum: ``(n, *rest) -> (G, *rest)``; empty groups give 0. Differentiable."""
        self.check(x, "x")
        out = x.new_zeros((self.num_groups,) + tuple(x.shape[1:]))
        return out.index_add(0, self.group_index.to(x.device), x)

    def segment_mean(self, x: Tensor, *, empty: float = 0.0) -> Tensor:
        """Per-group mean; empty groups give ``empty``."""
        s = self.segment_sum(x)
        sizes = self.sizes.to(x.device).view((-1,) + (1,) * (x.dim() - 1))
        return torch.where(sizes > 0, s / sizes.clamp_min(1).to(s.dtype), s.new_tensor(empty))

    def segment_max(self, x: Tensor, *, empty: Optional[float] = None) -> Tensor:
        """Per-group maximum ``(n, *rest) -> (G, *rest)``; empty groups give ``empty``
        (default ``-inf`` for floating tensors, the dtype's minimum for integers)."""
        return self._segment_extreme(x, "amax", empty, lowest=True)

    def segment_min(self, x: Tensor, *, empty: Optional[float] = None) -> Tensor:
        """Per-group minimum; empty groups give ``empty`` (default ``+inf`` / dtype max)."""
        return self._segment_extreme(x, "amin", empty, lowest=False)

    def _segment_extreme(self, x, reduce, empty, *, lowest):
        self.check(x, "x")
        if empty is None:
            if x.dtype.is_floating_point:
                empty = float("-inf") if lowest else float("inf")
            elif x.dtype == torch.bool:
                empty = not lowest
            else:
                info = torch.iinfo(x.dtype)
                empty = info.min if lowest else info.max
        out = torch.full(
            (self.num_groups,) + tuple(x.shape[1:]), empty, dtype=x.dtype, device=x.device
        )
        idx = self.group_index.to(x.device)
        if x.dim() > 1:
            idx = idx.view((-1,) + (1,) * (x.dim() - 1)).expand_as(x)
        return out.scatter_reduce(0, idx, x, reduce, include_self=False)

    def segment_logsumexp(self, x: Tensor) -> Tensor:
        """Per-group ``log Σ exp(x)`` along dim 0, stable (max-shifted); empty groups give
        ``-inf``.

        Differentiable: the gradient is the per-group softmax (0 in groups whose values are
        all ``-inf``, never NaN). This is the pair engine's segment log-sum-exp.
        """
        return seg_lse(x, self.group_index.to(x.device), self.num_groups)

    def segment_softmax(self, x: Tensor) -> Tensor:
        """Softmax of ``x`` within each group (flat, same shape as ``x``)."""
        lse = self.segment_logsumexp(x)
        return torch.exp(x - lse[self.group_index.to(x.device)])

    def broadcast(self, per_group: Tensor) -> Tensor:
        """Per-group values ``(G, *rest)`` to per-document ``(n, *rest)``."""
        if per_group.shape[0] != self.num_groups:
            raise ValueError(
                f"expected {self.num_groups} per-group values, got {per_group.shape[0]}"
            )
        return per_group[self.group_index.to(per_group.device)]

    # ------------------------------------------------------------------ scans
    def segment_cumsum(self, x: Tensor, *, exclusive: bool = False, reverse: bool = False,
                       accumulate_dtype: Optional[torch.dtype] = torch.float64) -> Tensor:
        """Prefix sums restarting at each group start (1-D ``x``), segment-local.

        ``exclusive=True`` excludes the element itself; ``reverse=True`` sums from the end
        of each group (suffix sums). Accumulated in ``accumulate_dtype`` (float64 by
        default) and cast back to ``x``'s dtype. Each group's sums depend on that group's
        values and order only, never on the other groups (no global prefix differenced at
        the group starts): a Hillis-Steele scan in the flat order, ``ceil(log2(max_size))``
        steps that each add the value ``2^t`` places back when it lies in the same group,
        so every sum is the same tree of additions wherever the group sits. Differentiable.
        """
        self.check(x, "x")
        if x.dim() != 1:
            raise ValueError("segment_cumsum expects a 1-D tensor")
        orig = x.dtype
        if x.dtype.is_floating_point and accumulate_dtype is not None:
            x = x.to(accumulate_dtype)
        out = self._scan(x, exclusive=exclusive, reverse=reverse)
        return out.to(orig) if orig.is_floating_point else out

    def _scan(self, x: Tensor, *, exclusive: bool, reverse: bool) -> Tensor:
        """The segment-local inclusive (or exclusive) scan of :meth:`segment_cumsum`:
        in place in three buffers without autograd, out of place with it."""
        n = x.numel()
        if n == 0:
            return x.clone()
        pos = self.position.to(x.device)
        if reverse:  # the distance to the group's end instead of its start
            pos = self._cached("to_end", lambda: self.doc_end - 1 - torch.arange(
                self.num_docs, device=self.device)).to(x.device)
        grad = torch.is_grad_enabled() and x.requires_grad
        zero = x.new_zeros(())
        y, step = (x if grad else x.clone()), 1
        tmp = None if grad else x.new_empty(n - 1)
        mask = None if grad else torch.empty(n - 1, dtype=torch.bool, device=x.device)
        while step < self.max_size:
            k = n - step
            src, dst = (y[step:], y[:k]) if reverse else (y[:k], y[step:])
            m = torch.ge(pos[:k] if reverse else pos[step:], step,
                         out=None if grad else mask[:k])
            back = torch.where(m, src, zero, out=None if grad else tmp[:k])
            if grad:
                pad = x.new_zeros(step)
                y = y + (torch.cat([back, pad]) if reverse else torch.cat([pad, back]))
            else:
                dst.add_(back)
            step *= 2
        if not exclusive:
            return y
        keep = pos[:-1] > 0 if reverse else pos[1:] > 0
        moved = torch.where(keep, y[1:] if reverse else y[:-1], zero)
        return torch.cat([moved, zero.reshape(1)] if reverse else [zero.reshape(1), moved])

    def prefix_table(self, x: Tensor) -> Tensor:
        """Exclusive prefix sums of each group with its total: ``(n + G,)`` where entry
        ``offsets[g] + g + k`` is the sum of group ``g``'s first ``k`` values (``k = 0 ..
        size``), in the group's order from 0, segment-local (:meth:`segment_cumsum` of the
        values with a 0 before each group). A sum over the documents ``[lo, hi)`` of group
        ``g`` (flat positions) is ``table[hi + g] - table[lo + g]``. 1-D float ``x``."""
        self.check(x, "x")
        G = self.num_groups
        wider = self._cached("with_starts", lambda: self._derived(
            self.offsets + torch.arange(G + 1, device=self.device), self.num_docs + G,
            self.max_size + 1 if G else 0))
        at = self._cached("table_slots", lambda: torch.arange(
            self.num_docs, device=self.device) + self.group_index + 1).to(x.device)
        xs = torch.index_copy(x.new_zeros(self.num_docs + self.num_groups), 0, at, x)
        return wider._scan(xs, exclusive=False, reverse=False)

    def segment_logcumsumexp(self, x: Tensor, *, exclusive: bool = False,
                             reverse: bool = False) -> Tensor:
        """``log Σ_{j ≤ i in i's group} exp(x_j)``, restarting at each group (1-D ``x``).

        Exact in log space (no subtraction of global prefixes): a Hillis–Steele scan with
        ``ceil(log2(max_size))`` vectorised log-add-exp steps, O(n log L) work (the pair
        engine's :func:`~torchrankboost._pair_engine.segment.seg_scan_lse`). With
        ``exclusive=True`` the first element of each group gets ``-inf``; ``reverse=True``
        scans from the end of each group. Differentiable to any order, never NaN.
        """
        self.check(x, "x")
        if x.dim() != 1:
            raise ValueError("segment_logcumsumexp expects a 1-D tensor")
        return seg_scan_lse(x, self, reverse=reverse, exclusive=exclusive)

    def reversed(self) -> "Groups":
        """The groups of the flipped document axis (``x.flip(0)``). Built from this one's
        offsets without a host read once :meth:`fix_sizes` has run (its sizes known)."""
        off = self.offsets
        return self._cached("reversed", lambda: self._derived(
            off[-1] - off.flip(0), self.num_docs, self.max_size))

    @staticmethod
    def _derived(offsets: Tensor, num_docs: int, max_size: int) -> "Groups":
        """Groups of offsets derived from valid ones (no check, no host read), their
        sizes given."""
        out = Groups.__new__(Groups)
        out.offsets = offsets
        out._cache = {"num_docs": int(num_docs), "max_size": int(max_size)}
        return out

    def fix_sizes(self) -> "Groups":
        """Read the host-side sizes now (:attr:`num_docs`, :attr:`max_size`, once): every
        later use of these groups then reads nothing from the device, so a loss bound to
        them never synchronises on them (bind time is the place to call this). Returns
        ``self``."""
        self.num_docs, self.max_size  # noqa: B018 - cached by the properties
        return self

    # ------------------------------------------------------------------ sorting
    def argsort(self, key: Tensor, *, descending: bool = False, check_nan: bool = True
                ) -> Tensor:
        """Permutation sorting documents by (group, key), stably; groups stay in place.

        ``x[perm]`` lists group 0's documents in key order, then group 1's, and so on; equal
        keys keep their original order. For keys of at most 32 bits (float16/bfloat16/
        float32, int8/16/32, bool) this is a single ``argsort`` of an int64 composite key
        ``group << 32 | order-preserving bits(key)``; 64-bit keys use two stable sorts.
        NaN keys are not allowed: ``ValueError``, unless ``check_nan=False`` (no read of the
        keys on the host, so no synchronisation on an accelerator; NaN keys then sort in an
        unspecified place, for callers whose result is NaN anyway).
        """
        self.check(key, "key")
        if key.dim() != 1:
            raise ValueError("argsort expects a 1-D key")
        gi = self.group_index.to(key.device)
        if key.dtype in (torch.float64, torch.int64):
            if check_nan and key.dtype.is_floating_point and bool(torch.isnan(key).any()):
                raise ValueError("argsort: key contains NaN")
            p1 = torch.argsort(key, descending=descending, stable=True)
            p2 = torch.argsort(gi[p1], stable=True)
            return p1[p2]
        bits = sortable_bits32(key, check_nan=check_nan)
        if descending:
            bits = ((1 << 32) - 1) - bits  # order-reversing bijection of [0, 2^32)
        composite = (gi << 32) + bits
        return torch.argsort(composite, stable=True)

    def rank_within(self, key: Tensor, *, descending: bool = True) -> Tensor:
        """0-based rank of each document inside its group by ``key`` (stable ties)."""
        perm = self.argsort(key, descending=descending)
        ranks = torch.empty_like(perm)
        ranks[perm] = self.position.to(key.device)
        return ranks

    # ------------------------------------------------------------------ padding
    def pad(self, x: Tensor, *, fill: float = 0.0, length: Optional[int] = None
            ) -> Tuple[Tensor, Tensor]:
        """Flat ``(n, *rest)`` to padded ``(G, L, *rest)`` plus its ``(G, L)`` bool mask.

        ``L`` is ``max_size`` unless ``length`` (≥ ``max_size``) is given. Differentiable.
        """
        self.check(x, "x")
        L = self.max_size if length is None else int(length)
        if L < self.max_size:
            raise ValueError(f"length {L} is shorter than the largest group ({self.max_size})")
        out = x.new_full((self.num_groups, L) + tuple(x.shape[1:]), fill)
        gi = self.group_index.to(x.device)
        pos = self.position.to(x.device)
        out = out.index_put((gi, pos), x)
        mask = torch.zeros(self.num_groups, L, dtype=torch.bool, device=x.device)
        mask[gi, pos] = True
        return out, mask

    def unpad(self, padded: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Padded ``(G, L, *rest)`` back to flat ``(n, *rest)``.

        Without ``mask`` each row's first ``sizes[g]`` entries are taken (the layout
        :meth:`pad` produces); with ``mask`` (as given to :meth:`from_padded`) the valid
        entries are taken in row-major order.
        """
        if padded.dim() < 2 or padded.shape[0] != self.num_groups:
            raise ValueError(
                f"padded must have shape (num_groups={self.num_groups}, L, ...), "
                f"got {tuple(padded.shape)}"
            )
        if mask is not None:
            mask = mask.to(torch.bool)
            if mask.shape != padded.shape[:2]:
                raise ValueError("mask shape must equal padded.shape[:2]")
            if not torch.equal(mask.sum(1).cpu(), self.sizes.cpu()):
                raise ValueError("mask row counts do not match the group sizes")
            return padded[mask]
        if padded.shape[1] < self.max_size:
            raise ValueError("padded is shorter than the largest group")
        gi = self.group_index.to(padded.device)
        pos = self.position.to(padded.device)
        return padded[gi, pos]


def sortable_bits32(key: Tensor, *, check_nan: bool = True) -> Tensor:
    """Map a ≤32-bit key to int64 values in ``[0, 2^32)`` with the same order (NaN keys: a
    ``ValueError``, unchecked with ``check_nan=False``)."""
    if key.dtype == torch.bool:
        return key.to(torch.int64)
    if key.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return key.to(torch.int64) + (1 << 31)
    if not key.dtype.is_floating_point:
        raise ValueError(f"unsupported key dtype {key.dtype}")
    k = key.to(torch.float32)
    if check_nan and bool(torch.isnan(k).any()):
        raise ValueError("argsort: key contains NaN")
    k = k + 0.0  # -0.0 -> +0.0 so that the two zeros tie
    b = k.view(torch.int32).to(torch.int64)
    b = torch.where(b < 0, b ^ 0x7FFFFFFF, b)  # negative floats: reverse magnitude order
    return b + (1 << 31)


def as_groups(groups: Optional[Groups], n: int, *, device: DeviceLike = None,
              name: str = "groups") -> Groups:
    """Normalise a ``groups`` argument: ``None`` means one group of all ``n`` documents.

    Raises ``ValueError`` when ``groups`` does not cover exactly ``n`` documents, and
    ``TypeError`` for anything that is not a :class:`Groups`.
    """
    if groups is None:
        return Groups.single(n, device=device)
    if not isinstance(groups, Groups):
        raise TypeError(
            f"{name} must be a torchrankboost.Groups (build one with Groups.from_qid / "
            f"from_sizes), got {type(groups).__name__}"
        )
    if groups.num_docs != n:
        raise ValueError(f"{name} cover {groups.num_docs} documents but there are {n}")
    if device is not None:
        groups = groups.to(device)
    return groups
