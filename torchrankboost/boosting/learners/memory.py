r"""The memory a tree learner's histograms need, checked before a fit starts.

Both tree kernels keep one histogram per leaf of the tree being grown (plus one being
built): ``(max_leaves + 1) × F × S × 3`` float64 numbers, with ``F`` the feature count
(the width of ``X``: the largest feature index of the data) and ``S`` slots per feature
(the value bins and the missing-value code: 256 for uint8 codes, ``n_bins + 1`` for the
int16 codes of ``n_bins > 255``). One
stray feature index of 99,999 in an SVMlight file therefore asks ``32 × 100000 × 256 × 24``
bytes ≈ 19.7 GB of the default 31-leaf tree. :func:`check_histogram_memory` refuses such a
fit before anything is allocated, in one ``ValueError`` naming the options that shrink it.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

__all__ = ["HISTOGRAM_SLOTS", "histogram_bytes", "available_memory", "check_histogram_memory"]

#: slots per feature in a histogram: 255 value bins + the missing-value code (uint8 codes)
HISTOGRAM_SLOTS = 256


def histogram_bytes(num_features: int, max_leaves: int, slots: int = HISTOGRAM_SLOTS) -> int:
    """Bytes of the histograms of one tree growth: ``(max_leaves + 1)·F·slots·3·8``
    (gradient, hessian and count sums in float64, one histogram per leaf and one spare)."""
    return (int(max_leaves) + 1) * int(num_features) * int(slots) * 3 * 8


def available_memory(device) -> Optional[int]:
    """Bytes that a new allocation on ``device`` can get: ``MemAvailable`` of
    ``/proc/meminfo`` on CPU (else the free physical pages), the free memory of a CUDA
    device; ``None`` when unknown (no check is made then)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AssertionError):
            return None
    if dev.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def check_histogram_memory(num_features: int, max_leaves: int, device,
                           slots: int = HISTOGRAM_SLOTS) -> None:
    """Raise a one-line ``ValueError`` when the histograms of one tree growth
    (:func:`histogram_bytes`, ``slots`` per feature) would not fit in the memory available on
    ``device`` (:func:`available_memory`); nothing when they fit or the memory is unknown."""
    need = histogram_bytes(num_features, max_leaves, slots)
    have = available_memory(device)
    if have is None or need <= have:
        return
    raise ValueError(
        f"the tree learner needs about {_gb(need)} for its histograms on {num_features} "
        f"features ((max_leaves + 1) x features x {slots} bins x 24 bytes, "
        f"max_leaves = {max_leaves}) but only {_gb(have)} of memory is available; lower "
        "max_leaves (--max-leaves)" + (", n_bins" if slots > HISTOGRAM_SLOTS else "")
        + ", or the number of features (it is the largest feature "
        "index in the data: look for a stray index; --max-features caps it), or use "
        "another learner (--learner stump)")
