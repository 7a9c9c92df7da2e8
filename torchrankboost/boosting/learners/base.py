"""The weak-learner contract and what the learners share (argument checks, the fit's context).

An unfitted *learner* holds only hyper-parameters (keyword-only); ``learner.prepare(X, *,
context)`` bins / scales the features once per fit; ``learner.fit(prepared, target, weight,
rows=..., generator=...)`` returns a fitted *weak model* with ``predict(X)``,
``predict_prepared(prepared)``, ``feature_gain``, ``feature_count``, ``to``, ``state`` /
``from_state``.

Weighted least squares in Newton form: the driver passes ``target = -g/h`` and ``weight =
h``. With ``G = Σ w·target`` (= -Σg) and ``H = Σ w`` (= Σh) over a set of rows, the best
constant is ``G / (H + λ)`` and fitting it reduces the weighted squared error by
``G² / (H + λ)``.

Data-parallel fits: ``prepare(X, context=ctx)`` with the
:class:`~torchrankboost.parallel.DistContext` of the fit (``X`` this rank's shard of whole
queries; in one process a context whose collectives are identities) agrees on the feature
transform with the other ranks and keeps ``ctx`` on the prepared data; every ``fit`` then sums
what it decides from over the ranks through it, so every rank fits the same weak model on its
own rows.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Protocol, Tuple, Union, runtime_checkable

import torch
from torch import Tensor

from ...parallel import DistContext, get_context
from .._round_sums import all_finite

__all__ = ["WeakLearner", "WeakModel", "fit_context"]


@runtime_checkable
class WeakModel(Protocol):
    """A fitted weak model ``h``: ``predict(X) -> (n,)``, ``predict_prepared(prepared)``, the
    per-feature ``feature_gain(F)`` / ``feature_count(F)``, ``to(device)``, ``state()`` ->
    ``(tensors, meta)`` and the class method ``from_state(tensors, meta)``."""

    type_name: str

    def predict(self, X: Tensor) -> Tensor: ...

    def predict_prepared(self, prepared: Any) -> Tensor: ...

    def feature_gain(self, num_features: int) -> Tensor: ...

    def feature_count(self, num_features: int) -> Tensor: ...

    def to(self, device: Union[str, torch.device]) -> "WeakModel": ...

    def state(self) -> Tuple[Dict[str, Tensor], Dict[str, Any]]: ...


@runtime_checkable
class WeakLearner(Protocol):
    """A weak learner the boosting driver and the papers' algorithms call.

    Attributes:
        supports_data_parallel: ``prepare(X, context=ctx)`` with an enabled context (``X``
            one rank's rows) and the fits on it give every rank the weak model of the
            whole data.

    ``fit_predict(prepared, target, weight, *, rows, generator) -> (model, f)`` is optional:
    the model and its output ``f`` (n,) on every prepared row, cheaper than ``fit`` then
    ``predict_prepared`` where the learner knows the rows' leaves.
    """

    supports_data_parallel: bool

    def prepare(self, X: Tensor, *, context: Optional[DistContext] = None) -> Any: ...

    def fit(self, prepared: Any, target: Tensor, weight: Optional[Tensor] = None, *,
            rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None
            ) -> WeakModel: ...


def fit_context(context: Optional[DistContext]) -> DistContext:
    """The context a ``prepare`` works with: ``context``, or the one-process context (its
    collectives identities) for ``None``."""
    return get_context(False) if context is None else context


def check_int(value, name, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: expected an int {rng}, got {value!r}")
    return value


def check_float(value, name, lo=0.0, hi=None, lo_open=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number, got {value!r}") from None
    bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo) or (hi is not None and v > hi)
    if bad:
        raise ValueError(f"{name}: out of range, got {value!r}")
    return v


def _check_vector(t, name: str, n: int) -> None:
    if not isinstance(t, Tensor) or t.dim() != 1 or t.shape[0] != n:
        shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name}: expected a 1-D tensor of length {n}, got {shape}")


def check_fit_inputs(n: int, device, target, weight, rows):
    """``(target, weight, rows)`` on ``device``: ``target`` (n,) finite float, ``weight``
    (n,) finite >= 0 (ones for ``None``), ``rows`` (m,) int64 indices in [0, n) or ``None``."""
    _check_vector(target, "target", n)
    if not target.dtype.is_floating_point:
        raise ValueError(f"target: expected a floating-point tensor, got {target.dtype}")
    if not all_finite(target):  # one sum first: no (n,) temporary at millions of rows
        raise ValueError("target: contains NaN or inf")
    target = target.to(device)
    if weight is None:
        weight = torch.ones(n, dtype=target.dtype, device=device)
    else:
        if not isinstance(weight, Tensor) or weight.shape != target.shape:
            shape = tuple(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__
            raise ValueError(f"weight: expected shape {tuple(target.shape)}, got {shape}")
        weight = weight.to(device)
        if not all_finite(weight):
            raise ValueError("weight: contains NaN or inf")
        if weight.numel() and bool(weight.min() < 0):
            raise ValueError("weight: negative weights are not allowed")
    if rows is not None:
        if not isinstance(rows, Tensor) or rows.dim() != 1 or rows.dtype not in (torch.int64, torch.int32):
            raise ValueError("rows: expected a 1-D int64 tensor of row indices")
        rows = rows.to(device=device, dtype=torch.int64)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n):
            raise ValueError(f"rows: indices must lie in [0, {n})")
    return target, weight, rows


def out_dtype(target: Tensor):
    """The dtype of a weak model's output for ``target``: its own when float32/64."""
    return target.dtype if target.dtype in (torch.float64, torch.float32) else torch.float32
