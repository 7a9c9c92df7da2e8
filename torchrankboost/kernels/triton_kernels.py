"""The Triton kernels of :class:`~.triton_backend.TritonBackend`: int64 node histograms, row
routing, bin coding, tree traversal and prediction, each equal bit for bit to the torch
reference (integer sums, or the same float operations in the same order).

The kernels are decorated with ``triton.jit`` when this module is imported: under
``TRITON_INTERPRET=1`` they are Triton's interpreter (NumPy on the CPU, for CPU tensors and
the tests), otherwise compiled for the GPU. :data:`INTERPRETED` says which (Triton's own
library, ``tl.sort``, was decorated when ``triton`` was imported: :data:`CONSISTENT` says
whether it agrees). Every pointer offset is computed in int64. Grids and blocks
(``BLOCK_N`` rows, ``BLOCK_F`` features; the backend launches 128 x 16 tiles and 512-row
blocks):

* :func:`hist_atomic_kernel`, grid ``(⌈n/BLOCK_N⌉, ⌈F/BLOCK_F⌉)``: a program reads its rows'
  ``slot`` (4 B), ``q`` (16 B) and a ``(BLOCK_N, BLOCK_F)`` tile of codes, and adds
  ``(q_wt, q_w, 1)`` to ``out[slot, :, f, code]`` with three relaxed global int64
  ``atomic_add`` per (row, feature) (integer sums: exact, any order gives the same bits).
  Per row, at F = 136 and ``BLOCK_F`` 16: 136 code bytes and 9 x 20 B of slot and q (read
  once from memory, the other feature blocks from L2), and 408 atomics (8 B each) into L2;
  rows without a slot read 4 B. The atomics bound it, and a bin that many rows share
  serialises them (an L2 slice adds to one address at a time).
* :func:`hist_sorted_kernel`, same grid: the block's ``(slot, code)`` keys of each feature are
  sorted (``tl.sort`` of ``key · BLOCK_N + lane``), the three channels summed per run of equal
  keys by a segmented ``tl.associative_scan``, and one atomic per channel is issued per
  distinct key of the block (a block-private pre-aggregation: a bin that most rows share costs
  one atomic per block instead of one per row). The same reads, plus the block's q gathered
  again in sorted order (L1); a ``BLOCK_N log² BLOCK_N`` bitonic sort per feature instead of
  most atomics. (Triton has no shared-memory atomics, the usual privatised histogram; this
  is its sort-based equivalent. Which of the two is faster depends on the GPU and the
  codes' repetition: ``scripts/gpu_check.py`` times both.)
* :func:`route_kernel`, grid ``(⌈n/BLOCK_N⌉,)``: per row its leaf id (4 B read, 4 B written),
  four gathers from the ``(L,)`` split tables and one code byte.
* :func:`bins_kernel`, grid ``(⌈n/BLOCK_N⌉, ⌈F/BLOCK_F⌉)``: ``torch.searchsorted``'s lower
  bound (``lo = mid + 1`` while ``!(edge[mid] >= x)``), ``bit_length(B)`` steps, NaN → missing.
* :func:`walk_kernel`, grid ``(⌈n/BLOCK_N⌉,)``: one tree, ``depth`` vectorised steps per row
  (codes or raw features).
* :func:`predict_kernel`, grid ``(⌈n/BLOCK_N⌉,)``: every tree of a row block in round order,
  ``acc = acc + w_t · value`` in float64 (launched with ``enable_fp_fusion=False``: no FMA,
  the reference's two roundings).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["hist_atomic_kernel", "hist_sorted_kernel", "route_kernel", "bins_kernel",
           "walk_kernel", "predict_kernel", "INTERPRETED", "CONSISTENT"]


@triton.jit
def hist_atomic_kernel(codes_ptr, q_ptr, slot_ptr, out_ptr, n, F, S, num_slots,
                       BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr):
    """``out (num_slots, 3, F, S) int64 += (q_wt, q_w, 1)`` at ``[slot, :, f, code]`` of every
    row with ``0 <= slot < num_slots``: three global int64 atomics per (row, feature)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    slot = tl.load(slot_ptr + rows, mask=rows < n, other=-1).to(tl.int64)
    active = (rows < n) & (slot >= 0) & (slot < num_slots)
    g = tl.load(q_ptr + 2 * rows, mask=active, other=0)
    h = tl.load(q_ptr + 2 * rows + 1, mask=active, other=0)
    m = active[:, None] & (feats < F)[None, :]
    code = tl.load(codes_ptr + rows[:, None] * F + feats[None, :], mask=m, other=0).to(tl.int64)
    at = out_ptr + (slot[:, None] * 3 * F + feats[None, :]) * S + code  # channel 0
    zero = tl.zeros((BLOCK_N, BLOCK_F), tl.int64)
    tl.atomic_add(at, g[:, None] + zero, mask=m, sem="relaxed")
    tl.atomic_add(at + F * S, h[:, None] + zero, mask=m, sem="relaxed")
    tl.atomic_add(at + 2 * F * S, zero + 1, mask=m, sem="relaxed")


@triton.jit
def _run_sum(k1, g1, h1, c1, k2, g2, h2, c2):
    """Segmented sum over runs of equal keys (associative on sorted keys): the right
    operand's key, its sums plus the left one's when the keys are equal."""
    same = k1 == k2
    return k2, tl.where(same, g1 + g2, g2), tl.where(same, h1 + h2, h2), tl.where(same, c1 + c2, c2)


@triton.jit
def hist_sorted_kernel(codes_ptr, q_ptr, slot_ptr, out_ptr, n, F, S, num_slots,
                       BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr, LOG_N: tl.constexpr):
    """:func:`hist_atomic_kernel`'s sums, pre-aggregated in the block: per feature, the rows'
    keys ``slot · S + code`` sorted, the channels summed per run of equal keys, one atomic per
    channel and distinct key (the last element of each run). ``BLOCK_N = 2^LOG_N``."""
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_N
    lane = tl.arange(0, BLOCK_N)
    rows = row0 + lane
    feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    slot = tl.load(slot_ptr + rows, mask=rows < n, other=-1).to(tl.int64)
    active = (rows < n) & (slot >= 0) & (slot < num_slots)
    m = (feats < F)[:, None] & active[None, :]  # (BLOCK_F, BLOCK_N): sorted along the rows
    code = tl.load(codes_ptr + rows[None, :] * F + feats[:, None], mask=m, other=0).to(tl.int64)
    none = S.to(tl.int64) * num_slots  # an inactive row's key: sorted last, never added
    key = tl.where(m, slot[None, :] * S + code, none)
    packed = tl.sort((key << LOG_N) + lane[None, :], dim=1)
    key = packed >> LOG_N
    src = row0 + (packed & (BLOCK_N - 1))
    real = key < none
    g = tl.load(q_ptr + 2 * src, mask=real, other=0)
    h = tl.load(q_ptr + 2 * src + 1, mask=real, other=0)
    one = tl.full((BLOCK_F, BLOCK_N), 1, tl.int64)
    key, g, h, c = tl.associative_scan((key, g, h, one), 1, _run_sum)
    nxt = tl.gather(key, tl.broadcast_to(tl.minimum(lane + 1, BLOCK_N - 1)[None, :],
                                         (BLOCK_F, BLOCK_N)), 1)
    last = real & ((key != nxt) | (lane == BLOCK_N - 1)[None, :])
    s = key // S
    at = out_ptr + (s * 3 * F + feats[:, None]) * S + (key - s * S)
    tl.atomic_add(at, g, mask=last, sem="relaxed")
    tl.atomic_add(at + F * S, h, mask=last, sem="relaxed")
    tl.atomic_add(at + 2 * F * S, c, mask=last, sem="relaxed")


@triton.jit
def route_kernel(codes_ptr, leaf_ptr, feat_ptr, bin_ptr, dleft_ptr, right_ptr, out_ptr,
                 n, F, L, missing, BLOCK_N: tl.constexpr):
    """``out[i] = right_id[l]`` when leaf ``l = leaf[i]`` is split (``right_id[l] >= 0``) and
    the row goes right (not ``code <= bin[l]``, not (missing and ``default_left[l]``)); else
    ``leaf[i]`` (rows of leaves outside ``[0, L)`` too)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = rows < n
    leaf = tl.load(leaf_ptr + rows, mask=inside, other=-1)
    known = inside & (leaf >= 0) & (leaf < L)
    right = tl.load(right_ptr + leaf, mask=known, other=-1)
    split = known & (right >= 0)
    f = tl.load(feat_ptr + leaf, mask=split, other=0)
    b = tl.load(bin_ptr + leaf, mask=split, other=0)
    dl = tl.load(dleft_ptr + leaf, mask=split, other=0)
    code = tl.load(codes_ptr + rows * F + f, mask=split, other=0).to(tl.int64)
    left = (code <= b) | ((code == missing) & (dl != 0))
    tl.store(out_ptr + rows, tl.where(split & (~left), right, leaf), mask=inside)


@triton.jit
def bins_kernel(x_ptr, edges_ptr, out_ptr, n, F, B, steps, missing,
                BLOCK_N: tl.constexpr, BLOCK_F: tl.constexpr):
    """``out[i, f]`` = the lower bound of ``x[i, f]`` in ``edges[f, :B]`` (the binary search of
    ``torch.searchsorted(side="left")``, step for step), NaN → ``missing``."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    feats = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    m = (rows < n)[:, None] & (feats < F)[None, :]
    x = tl.load(x_ptr + rows[:, None] * F + feats[None, :], mask=m, other=0)
    erow = edges_ptr + feats[None, :].to(tl.int64) * B
    lo = tl.zeros((BLOCK_N, BLOCK_F), tl.int64)
    hi = tl.zeros((BLOCK_N, BLOCK_F), tl.int64) + B
    for _ in range(steps):
        act = lo < hi
        mid = lo + ((hi - lo) >> 1)
        e = tl.load(erow + mid, mask=m & act, other=0)
        up = ~(e >= x)
        lo = tl.where(act & up, mid + 1, lo)
        hi = tl.where(act & (~up), mid, hi)
    code = tl.where(x != x, missing, lo)
    tl.store(out_ptr + rows[:, None] * F + feats[None, :],
             code.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def walk_kernel(x_ptr, n, F, sf_ptr, thr_ptr, dleft_ptr, lc_ptr, rc_ptr, depth, missing,
                out_ptr, RAW: tl.constexpr, BLOCK_N: tl.constexpr):
    """``out[i]`` (int64) = the leaf of row ``i`` in one tree of at least one internal node:
    ``depth`` steps of ``node = go_left ? left : right`` (raw: NaN → default side, else
    ``x <= threshold``; codes: the missing code → default side, else ``code <= bin``)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = rows < n
    node = tl.zeros((BLOCK_N,), tl.int64)
    for _ in range(depth):
        act = inside & (node >= 0)
        k = tl.maximum(node, 0)
        f = tl.load(sf_ptr + k, mask=act, other=0)
        t = tl.load(thr_ptr + k, mask=act, other=0)
        dl = tl.load(dleft_ptr + k, mask=act, other=0) != 0
        x = tl.load(x_ptr + rows * F + f, mask=act, other=0)
        if RAW:
            go = tl.where(x != x, dl, x <= t)
        else:
            c = x.to(tl.int64)
            go = tl.where(c == missing, dl, c <= t)
        lc = tl.load(lc_ptr + k, mask=act, other=0)
        rc = tl.load(rc_ptr + k, mask=act, other=0)
        node = tl.where(act, tl.where(go, lc, rc), node)
    tl.store(out_ptr + rows, ~node, mask=inside)


@triton.jit
def predict_kernel(x_ptr, n, F, T, node_off_ptr, leaf_off_ptr, depth_ptr, f32_ptr, sf_ptr,
                   thr_ptr, dleft_ptr, lc_ptr, rc_ptr, value_ptr, w_ptr, out_ptr,
                   BLOCK_N: tl.constexpr):
    """``out[i] = (…(out[i] + w_0·v_0(i)) + w_1·v_1(i)…) + w_{T-1}·v_{T-1}(i)`` in float64,
    ``v_t(i)`` the leaf value of row ``i`` in tree ``t`` (raw features compared in the tree's
    threshold dtype: rounded to float32 first for a float32 tree)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = rows < n
    acc = tl.load(out_ptr + rows, mask=inside, other=0.0)
    for t in range(T):
        o = tl.load(node_off_ptr + t)
        has = tl.load(node_off_ptr + t + 1) > o
        f32 = tl.load(f32_ptr + t) != 0
        node = tl.zeros((BLOCK_N,), tl.int64) - tl.where(has, 0, 1)  # no internal node: leaf 0
        for _ in range(tl.load(depth_ptr + t)):
            act = inside & (node >= 0)
            k = o + tl.maximum(node, 0)
            f = tl.load(sf_ptr + k, mask=act, other=0)
            x = tl.load(x_ptr + rows * F + f, mask=act, other=0).to(tl.float64)
            x = tl.where(f32, x.to(tl.float32).to(tl.float64), x)
            dl = tl.load(dleft_ptr + k, mask=act, other=0) != 0
            go = tl.where(x != x, dl, x <= tl.load(thr_ptr + k, mask=act, other=0.0))
            lc = tl.load(lc_ptr + k, mask=act, other=0)
            rc = tl.load(rc_ptr + k, mask=act, other=0)
            node = tl.where(act, tl.where(go, lc, rc), node)
        v = tl.load(value_ptr + tl.load(leaf_off_ptr + t) + (~node), mask=inside, other=0.0)
        term = tl.load(w_ptr + t) * v
        acc = acc + term
    tl.store(out_ptr + rows, acc, mask=inside)


def _interpreted(fn) -> bool:
    return not isinstance(fn, triton.runtime.jit.JITFunction)


#: whether the kernels above are Triton's interpreter (``TRITON_INTERPRET=1`` at import)
INTERPRETED = _interpreted(hist_atomic_kernel)
#: whether Triton's own library (``tl.sort``, decorated when ``triton`` was imported) runs in
#: the same mode: both interpreted or both compiled
CONSISTENT = INTERPRETED == _interpreted(tl.standard.sort)
