"""The estimator's inputs as tensors: ``X`` as a 2-D numeric array (scikit-learn's checks
and messages), the queries from per-row ids (any order: a stable regrouping permutation) or
from query sizes, and the fit's per-row / per-query weights in the regrouped row order.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor

__all__ = ["to_numpy", "features", "fit_weights", "groups_from", "is_tabular", "uses_columns",
           "table_arrays", "table_features"]


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


# ============================================================================ tables
#: the estimator's arguments that may name a table column, by role
_ARG_ROLES = (("y", "label"), ("qid", "qid"), ("sample_weight", "weight"),
              ("position", "position"), ("group_weight", "group_weight"))


def is_tabular(X) -> bool:
    """``X`` is read by column names: a path, a ``pyarrow.Table``, a Polars ``DataFrame``
    (a pandas ``DataFrame`` only when a role is given by name: :func:`uses_columns`)."""
    import os

    from ..data.arrow import is_table

    if isinstance(X, (str, os.PathLike)):
        return True
    return is_table(X) and not type(X).__module__.startswith("pandas")


def uses_columns(X, **args) -> bool:
    """Whether ``fit``/``score`` read ``X`` by column names: a path or an Arrow/Polars
    table, or a pandas frame with ``y`` missing or some role named by a string."""
    from ..data.arrow import is_table

    if is_tabular(X):
        return True
    return is_table(X) and (args.get("y", 0) is None
                            or any(isinstance(v, str) for v in args.values()))


def _columns_for(args: dict, roles: Optional[dict]):
    """The :class:`~torchrankboost.data.readers.Columns` of the estimator's arguments: a
    string names the column (required); ``None`` keeps the role's name at ``fit`` (default:
    the role's own) and reads it when present (the label: required); an array gives the
    values (no column)."""
    from ..data.readers import Columns

    names, required = {}, set()
    for arg, role in _ARG_ROLES:
        v = args.get(arg)
        if isinstance(v, str):
            names[role] = v
            required.add(role)
        elif v is None:
            names[role] = (roles or {}).get(role, role)
            if role == "label" and args.get("need_label", True):
                required.add(role)
        else:
            names[role] = None
    return Columns(**names, required=frozenset(required))


def _source(X, cols):
    import os

    from ..data.arrow import table_source
    from ..data.tables import open_source

    if isinstance(X, (str, os.PathLike)):
        from ..data.readers import reader_for

        if not reader_for(X).tabular:
            raise ValueError(f"{X}: an SVMlight/LETOR file has no column names; read it with "
                             f"torchrankboost.data.load_svmlight and pass X, y, qid")
        return open_source(X, cols)
    return table_source(X, cols)


def _in_names(X: np.ndarray, have, want, where: str) -> np.ndarray:
    """``X``'s columns in the order ``want`` (``have``: its names); other columns than
    ``want``'s are a ``ValueError`` (as scikit-learn refuses a data frame's)."""
    have, want = list(have), list(want)
    if have == want:
        return X
    if set(have) != set(want):
        missing = [c for c in want if c not in have]
        extra = [c for c in have if c not in want]
        raise ValueError(f"{where}: the feature names should match those that were passed "
                         f"during fit (missing: {missing[:8]}, unexpected: {extra[:8]})")
    return np.ascontiguousarray(X[:, [have.index(c) for c in want]])


def table_arrays(X, *, y=None, qid=None, sample_weight=None, group_weight=None,
                 position=None, roles: Optional[dict] = None, names=None,
                 need_label: bool = True) -> dict:
    """The estimator's inputs from a table (a path, a ``pyarrow.Table``, a pandas or Polars
    ``DataFrame``): ``{"X": (n, F) float32 array, "y", "qid", "sample_weight",
    "group_weight", "position" (arrays or ``None``), "names": the feature columns,
    "roles": {role: column} of the role columns read}``. Each argument may be a column
    name, ``None`` (the role's column when present) or the values; ``names``: the feature
    columns of ``fit`` (other feature columns are a ``ValueError``; their order may
    differ). Queries must be contiguous (a ``ValueError`` names the row where one comes
    back)."""
    from ..data.tables import read_source

    args = dict(y=y, qid=qid, sample_weight=sample_weight, group_weight=group_weight,
                position=position, need_label=need_label)
    cols = _columns_for(args, roles)
    with _source(X, cols) as src:
        if src.num_rows == 0:
            raise ValueError(f"{src.path}: the table has no rows")
        data = read_source(src)
        present, where = dict(src.roles), src.path
    feats = data.X.numpy()
    if names is not None:
        feats = _in_names(feats, data.feature_names, names, where)
    got = {"y": data.labels.numpy() if "label" in present else y,
           "qid": data.qid.numpy() if "qid" in present else qid,
           "sample_weight": data.weight.numpy() if "weight" in present else sample_weight,
           "group_weight": (data.group_weight.numpy() if "group_weight" in present
                            else group_weight),
           "position": data.position.numpy() if "position" in present else position}
    names = tuple(data.feature_names) if names is None else tuple(names)
    return {"X": feats, **got, "names": names, "roles": present}


def table_features(X, names, roles: dict) -> np.ndarray:
    """``(n, F)`` float32 features of a table for ``predict``: the role columns of ``fit``
    (``roles``) and their default names are left out, the others must be the feature
    columns ``names`` of ``fit`` (any order; ``ValueError`` otherwise)."""
    from ..data.readers import ROLES, Columns
    from ..data.tables import read_source

    if names is None:
        raise ValueError("this model was fitted without feature names (on arrays): pass an "
                         "array X")
    probe = Columns(**{r: (roles or {}).get(r, r) for r in ROLES}, required=frozenset())
    with _source(X, probe) as src:  # the role columns left out: the rest are features
        _in_names(np.zeros((0, src.num_features), np.float32), src.feature_names, names,
                  src.path)
    sel = Columns(label=None, qid=None, weight=None, position=None, group_weight=None,
                  features=tuple(names), required=frozenset())
    with _source(X, sel) as src:
        return read_source(src).X.numpy()
