"""The label side of a metric (gains, ideal DCG), kept for the last few label tensors.

A boosting fit evaluates the same validation labels every round; what depends only on the
labels, the queries and the metric's options is computed once. Entries are keyed by the
labels' memory (data pointer, shape, strides, dtype, device: the metrics see a fresh
detached view each call) and version counter (shared with every view: an in-place change
recomputes), and the identity of the :class:`~torchrankboost.groups.Groups`; they hold
both, so neither the memory nor the identity can be reused while the entry lives.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable

from torch import Tensor

_SIZE = 8
_entries: "OrderedDict[tuple, tuple]" = OrderedDict()


def label_side(labels: Tensor, groups: Any, options: Hashable, fn: Callable[[], Any]) -> Any:
    """``fn()`` for ``(labels, groups, options)``, computed once while the entry lives (the
    last ``_SIZE`` keys). Tensors that track gradients are not cached."""
    if labels.requires_grad:
        return fn()
    key = (labels.data_ptr(), tuple(labels.shape), labels.stride(), labels.dtype,
           labels.device, labels._version, id(groups), options)
    hit = _entries.get(key)
    if hit is not None and hit[1] is groups:
        _entries.move_to_end(key)
        return hit[2]
    value = fn()
    _entries[key] = (labels, groups, value)
    while len(_entries) > _SIZE:
        _entries.popitem(last=False)
    return value
