"""The estimator's inputs as tensors: ``X`` as a 2-D numeric array (scikit-learn's checks
and messages), the queries from per-row ids (any order: a stable regrouping permutation) or
from query sizes, and the fit's per-row / per-query weights in the regrouped row order.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["to_numpy", "features", "fit_weights", "groups_from"]


def to_numpy(a, name: str) -> np.ndarray:
    if isinstance(a, Tensor):
        return a.detach().cpu().numpy()
    if hasattr(a, "toarray"):
        a = a.toarray()
    try:
        return np.asarray(a)
    except Exception as exc:  # pragma: no cover
        raise ValueError(f"{name}: cannot convert to an array ({exc})") from None


def features(X) -> np.ndarray:
    """``X`` as a 2-D numeric numpy array (scipy sparse densified; NaN kept for missing
    values), with scikit-learn's own messages for 1-D, empty, complex and non-numeric
    input."""
    from sklearn.utils.validation import check_array

    try:
        arr = check_array(X, accept_sparse="csr", dtype="numeric",
                          ensure_all_finite="allow-nan", ensure_min_features=1,
                          ensure_min_samples=1)
    except TypeError as exc:
        if "ensure_all_finite" not in str(exc):
            raise
        arr = check_array(X, accept_sparse="csr", dtype="numeric",  # scikit-learn < 1.6
                          force_all_finite="allow-nan")
    return arr.toarray() if hasattr(arr, "toarray") else arr


def fit_weights(sample_weight, group_weight, qid, group, n: int) -> dict:
    """The fit's ``sample_weight`` in the rows' order after :func:`groups_from` (rows
    grouped by query; queries stay in first-appearance order, as ``group_weight`` is);
    only the ones given (an algorithm without weights is then never handed ``None``s)."""
    out = {}
    _, perm = groups_from(n, qid, group)
    if sample_weight is not None:
        w = torch.as_tensor(to_numpy(sample_weight, "sample_weight").reshape(-1))
        if w.shape[0] != n:
            raise ValueError(f"sample_weight has {w.shape[0]} entries but X has {n} rows")
        out["sample_weight"] = w if perm is None else w[perm]
    if group_weight is not None:
        out["group_weight"] = torch.as_tensor(to_numpy(group_weight, "group_weight")
                                              ).reshape(-1)
    return out


def groups_from(n: int, qid=None, group=None):
    """``(Groups, perm or None)``: from per-row query ids (any order) or query sizes."""
    from ..groups import Groups

    if qid is not None and group is not None:
        raise ValueError("pass either qid (a query id per row) or group (query sizes), not both")
    if qid is not None:
        q = to_numpy(qid, "qid").reshape(-1)
        if q.shape[0] != n:
            raise ValueError(f"qid has {q.shape[0]} entries but X has {n} rows")
        if q.dtype.kind == "f":
            if not np.isfinite(q).all() or not np.equal(q, np.round(q)).all():
                raise ValueError("qid must hold integer query ids")
        elif q.dtype.kind not in "iub":
            _, q = np.unique(q, return_inverse=True)  # strings etc.
        q = torch.as_tensor(q.astype(np.int64))
        starts = torch.ones(n, dtype=torch.bool)
        if n:
            starts[1:] = q[1:] != q[:-1]
        runs = q[starts]
        if torch.unique(runs).numel() == runs.numel():
            return Groups.from_qid(q), None
        g, perm = Groups.from_unsorted_qid(q)
        return g, perm
    if group is not None:
        sizes = to_numpy(group, "group").reshape(-1).astype(np.int64)
        if sizes.sum() != n:
            raise ValueError(f"group sizes add up to {int(sizes.sum())} but X has {n} rows")
        return Groups.from_sizes(torch.as_tensor(sizes)), None
    return Groups.single(n), None
