"""The label side of a metric (gains, ideal DCG), computed once per fit.

A boosting fit evaluates the same validation labels every round; what depends only on the
labels, the queries and the metric's options is computed once. The memo is opt-in and owned
by whoever opens it (:func:`remembering_label_side`: the booster's evaluation, for the
length of a fit), so a user's own metric calls always recompute, whatever they did to their
arrays in between (a NumPy array changed in place shares memory without a version counter).
Inside a memo, entries are keyed by the labels' memory (data pointer, shape, strides, dtype,
device: the metrics see a fresh detached view each call) and version counter (shared with
every view: an in-place torch change recomputes), and the identity of the
:class:`~torchrankboost.groups.Groups`; an entry holds both, so neither the memory nor the
identity can be reused while it lives, and the memo dies with its owner.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import OrderedDict
from typing import Any, Callable, Hashable, Iterator, Optional

from torch import Tensor

_SIZE = 8
_active: contextvars.ContextVar[Optional["OrderedDict[tuple, tuple]"]] = \
    contextvars.ContextVar("torchrankboost_label_memo", default=None)


def new_label_memo() -> "OrderedDict[tuple, tuple]":
    """An empty memo for :func:`remembering_label_side` (keep it for the length of a fit)."""
    return OrderedDict()


@contextlib.contextmanager
def remembering_label_side(memo: "OrderedDict[tuple, tuple]") -> Iterator[None]:
    """Metrics called inside reuse the label side kept in ``memo`` (its last ``_SIZE`` keys)."""
    token = _active.set(memo)
    try:
        yield
    finally:
        _active.reset(token)


def label_side(labels: Tensor, groups: Any, options: Hashable, fn: Callable[[], Any]) -> Any:
    """``fn()`` for ``(labels, groups, options)``: from the open memo when it has the entry,
    else computed (and kept there when a memo is open). Tensors that track gradients are
    not cached."""
    memo = _active.get()
    if memo is None or labels.requires_grad:
        return fn()
    key = (labels.data_ptr(), tuple(labels.shape), labels.stride(), labels.dtype,
           labels.device, labels._version, id(groups), options)
    hit = memo.get(key)
    if hit is not None and hit[1] is groups:
        memo.move_to_end(key)
        return hit[2]
    value = fn()
    memo[key] = (labels, groups, value)
    while len(memo) > _SIZE:
        memo.popitem(last=False)
    return value
