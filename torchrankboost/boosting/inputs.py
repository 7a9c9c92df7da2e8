"""The one conversion of training and evaluation inputs, shared by every algorithm.

``X``: a torch tensor, a numpy array or a scipy sparse matrix, 2-D ``(n_documents,
n_features)`` (NaN = missing; ``±inf`` is refused at fit, naming the column); ``labels``: ``(n,)`` relevance labels (no NaN); ``groups``: a
:class:`~torchrankboost.groups.Groups`, a ``(n,)`` array of contiguous query ids, or ``None``
(one query). Every mistake raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups, as_vector
from ..contract import ArrayLike, DeviceLike
from ..groups import GroupsLike

__all__ = ["as_features", "check_no_inf", "as_labels", "as_query_groups", "fit_inputs", "eval_inputs",
           "count_eval_sets"]


def as_features(X, *, device=None, name: str = "X") -> Tensor:
    """Convert ``X`` (tensor, numpy array, scipy sparse matrix) to a 2-D float tensor.

    Integer/bool inputs become float32; float64 stays float64. NaN is allowed (missing).
    Raises ``ValueError`` for anything that is not 2-D.
    """
    if hasattr(X, "toarray") and not isinstance(X, Tensor):  # scipy.sparse
        X = X.toarray()
    if not isinstance(X, Tensor):
        try:
            X = torch.as_tensor(X)
        except Exception as exc:
            raise ValueError(f"{name}: cannot convert to a tensor ({exc})") from None
    if X.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n_documents, n_features), got shape "
                         f"{tuple(X.shape)}")
    if not X.dtype.is_floating_point:
        X = X.to(torch.float32)
    if device is not None:
        X = X.to(device)
    return X


_CHECK_CHUNK = 1 << 24  # elements per chunk of the infinity check


def check_no_inf(X: Tensor, name: str = "X") -> Tensor:
    """Refuse ``±inf`` features (NaN is fine: missing) with a ``ValueError`` naming the first
    column and row that hold one. Every algorithm's fit and evaluation sets go through this
    one rule: an infinite feature has no place on a threshold grid, in a min–max scaling or in
    a linear score, so it is an input error rather than something to clamp silently."""
    chunk = max(1, _CHECK_CHUNK // max(1, X.shape[1])) if X.dim() == 2 else X.shape[0]
    # an axis of stride 0 (an expanded tensor: the stand-in values of binned data, a
    # broadcast row) repeats its first entry: checking that entry is checking all of them
    V = X
    if X.dim() == 2 and X.numel() and (X.stride(0) == 0 or X.stride(1) == 0):
        V = X[:1 if X.stride(0) == 0 else None, :1 if X.stride(1) == 0 else None]
    for s in range(0, V.shape[0], chunk):  # row chunks: no (n, F) boolean copy of X
        bad = torch.isinf(V[s : s + chunk])
        if not bool(bad.any()):
            continue
        col = int(bad.any(0).nonzero()[0])
        row = s + int(bad[:, col].nonzero()[0])
        raise ValueError(f"{name} has an infinite value in column {col} (row {row}, value "
                         f"{float(X[row, col])}); features must be finite (NaN = missing): "
                         f"replace or clip it before fitting")
    return X


def as_labels(labels, n: int, *, device=None, name: str = "labels", x_name: str = "X"
              ) -> Tensor:
    """``(n,)`` label tensor on ``device`` (dtype kept; bool becomes float64); ``ValueError``
    for a wrong shape or NaN/inf values."""
    labels = as_vector(labels, name, device=device)
    if labels.shape[0] != n:
        raise ValueError(f"{name} has {labels.shape[0]} entries but {x_name} has {n} rows")
    return labels


def as_query_groups(groups, n: int, *, device=None, name: str = "groups", x_name: str = "X"
                    ) -> Groups:
    """A :class:`Groups` of ``n`` documents from a ``Groups``, a ``(n,)`` array of contiguous
    query ids, or ``None`` (one query)."""
    if groups is None:
        return Groups.single(n, device=device)
    if not isinstance(groups, Groups):
        try:
            groups = Groups.from_qid(groups, device=device)
        except (TypeError, RuntimeError, ValueError) as exc:
            raise ValueError(f"{name} must be a Groups or a 1-D array of query ids ({exc})"
                             ) from None
    if groups.num_docs != n:
        raise ValueError(f"{name} cover {groups.num_docs} documents but {x_name} has {n} rows")
    return groups.to(device) if device is not None else groups


def fit_inputs(X: ArrayLike, labels: ArrayLike, groups: GroupsLike = None, *,
               device: DeviceLike = None, labels_required: bool = True
              ) -> Tuple[Tensor, Optional[Tensor], Groups]:
    """``(X, labels, groups)`` checked and converted for a fit (``labels`` may be ``None``
    only with ``labels_required=False``, e.g. for explicit preference pairs)."""
    X = as_features(X, device=device)
    n, F = X.shape
    if n == 0:
        raise ValueError("the training set is empty (X has 0 rows)")
    if F == 0:
        raise ValueError("X has no features")
    check_no_inf(X)
    if labels is None:
        if labels_required:
            raise ValueError("labels are required")
    else:
        labels = as_labels(labels, n, device=X.device)
    return X, labels, as_query_groups(groups, n, device=X.device)


def eval_inputs(eval_set, n_features: int, *, device=None
                ) -> List[Tuple[str, Tensor, Tensor, Groups]]:
    """``[(name, X, labels, groups), ...]`` (names ``valid_0``, ``valid_1``, ...) from a list of
    ``(X, labels, groups)`` triples (or one triple); each must have ``n_features`` columns."""
    if eval_set is None:
        return []
    if isinstance(eval_set, tuple) and len(eval_set) == 3 and not isinstance(eval_set[0], tuple):
        eval_set = [eval_set]
    out = []
    for i, es in enumerate(eval_set):
        if not isinstance(es, (tuple, list)) or len(es) != 3:
            raise ValueError(f"eval_set[{i}] must be a tuple (X, labels, groups)")
        Xv = as_features(es[0], device=device, name=f"eval_set[{i}] X")
        if Xv.shape[1] != n_features:
            raise ValueError(f"eval_set[{i}] has {Xv.shape[1]} features but the training "
                             f"X has {n_features}")
        if Xv.shape[0] == 0:
            raise ValueError(f"eval_set[{i}] is empty")
        check_no_inf(Xv, f"eval_set[{i}] X")
        yv = as_labels(es[1], Xv.shape[0], device=Xv.device, name=f"eval_set[{i}] labels",
                       x_name=f"eval_set[{i}] X")
        gv = as_query_groups(es[2], Xv.shape[0], device=Xv.device,
                             name=f"eval_set[{i}] groups", x_name=f"eval_set[{i}] X")
        out.append((f"valid_{i}", Xv, yv, gv))
    return out


def count_eval_sets(eval_set) -> int:
    """The number of evaluation sets ``eval_set`` holds (as :func:`eval_inputs`
    reads it)."""
    if eval_set is None:
        return 0
    if isinstance(eval_set, tuple) and len(eval_set) == 3 and not isinstance(eval_set[0], tuple):
        return 1
    try:
        return len(eval_set)
    except TypeError:
        return -1

