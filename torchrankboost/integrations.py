r"""Our ranking losses and metrics inside LightGBM and XGBoost.

Both libraries accept a custom objective that returns, per document, the gradient and a
positive second-order weight of the loss at the current raw scores. A ranking loss needs the
query layout too, which both keep in their dataset objects: LightGBM's
``Dataset.get_group()`` (query sizes) and XGBoost's ``DMatrix.get_uint_info("group_ptr")``
(query offsets). The adapters here read it, call the loss's closed-form
``grad_hess(scores, labels, groups, hess=...)`` in float64, and hand back NumPy arrays::

    import lightgbm as lgb
    from torchrankboost import ExponentialPairwiseLoss
    from torchrankboost.integrations import lightgbm_objective, lightgbm_metric

    train = lgb.Dataset(X, y, group=sizes)
    params = {"objective": lightgbm_objective(ExponentialPairwiseLoss()), "metric": "None"}
    booster = lgb.train(params, train, 100, valid_sets=[valid],
                        feval=lightgbm_metric("ndcg@10"))

    # scikit-learn API: the same objects work as LGBMRanker(objective=...) and eval_metric=
    lgb.LGBMRanker(objective=lightgbm_objective(ExponentialPairwiseLoss()))

    import xgboost as xgb
    from torchrankboost.integrations import xgboost_objective, xgboost_metric
    dtrain = xgb.DMatrix(X, y, qid=qid)
    xgb.train({"disable_default_eval_metric": 1}, dtrain, 100,
              obj=xgboost_objective(ExponentialPairwiseLoss()),
              custom_metric=xgboost_metric("ndcg@10"), maximize=True)

(XGBoost's scikit-learn API (``XGBRanker``, ``XGBRegressor``) hands a custom objective or
metric arrays without the queries: the XGBoost adapters raise ``ValueError`` saying to use
``xgb.train`` as above.)

**Weights.** The dataset's weights reach the loss: LightGBM's ``Dataset(weight=...)``
(``get_weight()``, one per document) and ``LGBMRanker.fit(sample_weight=...)`` are document
weights; XGBoost's ``DMatrix(weight=...)`` is one weight per query for ranking (XGBoost's
convention; one per document is taken as document weights). A pair ``(i, j)`` of query
``q`` weighs ``c_q w_i w_j`` in the loss (see :mod:`torchrankboost.boosting.weights`), so a
document of weight 0 has gradient 0 and the floor curvature ``hess_floor``. (Both libraries
still bin and count such rows in ``min_data_in_leaf``: set it low to train as without them.)

The curvature handed over is the loss's exact Hessian diagonal (``hess="diag"``, default) or
its diagonal upper bound (``hess="bound"``), floored at ``hess_floor`` because both libraries
divide by it (a document in no active pair has zero curvature). A loss without
``grad_hess`` gets its gradient from autograd and unit curvature (Friedman's gradient
boosting). Neither package is a dependency of this library: import them yourself.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .boosting.objective import LossCapabilities
from .groups import Groups

__all__ = ["lightgbm_objective", "lightgbm_metric", "xgboost_objective", "xgboost_metric"]

F64 = torch.float64
HESS = ("diag", "bound", "none")


def _groups_from_sizes(sizes, n: int, where: str) -> Groups:
    if sizes is None or len(sizes) == 0:
        raise ValueError(f"{where} has no query groups: a ranking loss needs them "
                         f"(LightGBM: Dataset(..., group=sizes); XGBoost: DMatrix(..., qid=qid)"
                         f" or set_group(sizes))")
    sizes = np.asarray(sizes, dtype=np.int64)
    if int(sizes.sum()) != n:
        raise ValueError(f"{where}: the query sizes add up to {int(sizes.sum())} documents "
                         f"but there are {n} scores")
    return Groups.from_sizes(torch.from_numpy(sizes))


def _groups_from_ptr(ptr, n: int, where: str) -> Groups:
    ptr = np.asarray(ptr, dtype=np.int64)
    return _groups_from_sizes(np.diff(ptr) if ptr.size > 1 else None, n, where)


def _require_dmatrix(data, what: str) -> None:
    """XGBoost's scikit-learn API calls ``obj(y_true, y_pred)`` / ``metric(y_true, y_pred)``
    with arrays (no query layout): refuse it with the call that works."""
    if not callable(getattr(data, "get_uint_info", None)):
        raise ValueError(f"{what} works with xgb.train, not XGBoost's scikit-learn API "
                         f"(XGBRanker/XGBRegressor pass no queries to it): xgb.train(params, "
                         f"xgb.DMatrix(X, y, qid=qid), num_boost_round, obj=xgboost_objective"
                         f"(loss), custom_metric=xgboost_metric('ndcg@10'), maximize=True)")


def _as_scores(preds, n: Optional[int] = None) -> Tensor:
    s = torch.as_tensor(np.asarray(preds, dtype=np.float64))
    if s.dim() != 1:
        raise ValueError(f"ranking objectives take one score per document; got predictions "
                         f"of shape {tuple(s.shape)} (multi-class output is not a ranking)")
    if n is not None and s.shape[0] != n:
        raise ValueError(f"{s.shape[0]} predictions for {n} labels")
    return s


class _Objective:
    """Gradient and floored curvature of ``loss`` at raw scores, as NumPy arrays."""

    def __init__(self, loss: Callable, *, hess: str = "diag", hess_floor: float = 1e-16):
        if not callable(loss):
            raise ValueError("loss must be callable: loss(scores, labels, groups) -> scalar")
        if hess not in HESS:
            raise ValueError(f"hess must be one of {HESS}, got {hess!r}")
        if not hess_floor > 0:
            raise ValueError(f"hess_floor must be positive, got {hess_floor}")
        self.loss = loss
        self.hess = hess
        self.hess_floor = float(hess_floor)
        self.caps = LossCapabilities.of(loss)
        if hess == "bound" and not self.caps.grad_hess:
            raise ValueError("hess='bound' needs a loss with grad_hess(..., hess='bound')")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.loss!r}, hess={self.hess!r})"

    def grad_hess(self, scores: Tensor, labels: Tensor, groups: Groups, weights=None,
                  group_weights=None) -> Tuple[np.ndarray, np.ndarray]:
        """``(grad, hess)`` of the summed loss, float64 NumPy arrays of shape ``(n,)``;
        ``weights`` ``(n,)`` / ``group_weights`` ``(G,)``: document / query weights."""
        kw = {} if weights is None else {"weights": weights}
        if group_weights is not None and not self.caps.binds:
            raise ValueError("query weights need a loss with bind() (any RankingLoss)")
        if self.caps.grad_hess:
            kind = "diag" if self.hess == "none" else self.hess
            if group_weights is not None:
                g, h = self.loss.bind(labels, groups, **kw).with_group_weights(
                    group_weights).grad_hess(scores, hess=kind)
            else:
                g, h = self.loss.grad_hess(scores, labels, groups, hess=kind, **kw)
            g = g.detach().to(F64)
            h = torch.ones_like(g) if self.hess == "none" else h.detach().to(F64)
        else:
            x = scores.clone().requires_grad_(True)
            with torch.enable_grad():
                v = self.loss(x, labels, groups, **kw)
                (g,) = torch.autograd.grad(v.sum(), x, allow_unused=True)
            g = torch.zeros_like(scores) if g is None else g.detach()
            h = torch.ones_like(g)
        if not (bool(torch.isfinite(g).all()) and bool(torch.isfinite(h).all())):
            raise FloatingPointError("the loss's gradient or curvature is not finite at the "
                                     "current scores")
        return g.numpy(), h.clamp_min(self.hess_floor).numpy()


_LGB_SKLEARN = ("LightGBM's scikit-learn API (LGBMRanker.fit(..., group=sizes); an "
                "LGBMRegressor has no queries)")
def _weights(weight, groups: Groups, where: str, *, per_query: bool):
    """``(document weights, query weights)`` (float64 tensors or ``None``) of a dataset's
    weights: none, all 1 (the unweighted path), one per query (``per_query``: XGBoost's
    ranking convention) or one per document."""
    if weight is None or np.size(weight) == 0:
        return None, None
    w = np.asarray(weight, dtype=np.float64).reshape(-1)
    if np.all(w == 1):
        return None, None
    t = torch.from_numpy(w.copy())
    if per_query and w.shape[0] == groups.num_groups:
        return None, t
    if w.shape[0] != groups.num_docs:
        raise ValueError(f"{where}: {w.shape[0]} weights for {groups.num_docs} documents"
                         + (f" and {groups.num_groups} queries" if per_query else ""))
    return t, None


class _LightGBMObjective(_Objective):
    def __call__(self, a, b, weight=None, group=None):
        """``lgb.train``: ``(preds, dataset)``; ``LGBMRanker``: ``(y_true, y_pred, weight,
        group)``."""
        if hasattr(b, "get_group") and hasattr(b, "get_label"):  # lgb.train: (preds, Dataset)
            labels = np.asarray(b.get_label())
            s = _as_scores(a, labels.shape[0])
            groups = _groups_from_sizes(b.get_group(), labels.shape[0], "the LightGBM Dataset")
        else:  # scikit-learn API
            labels = np.asarray(a)
            s = _as_scores(b, labels.shape[0])
            groups = _groups_from_sizes(group, labels.shape[0], _LGB_SKLEARN)
        if hasattr(b, "get_weight"):
            weight = b.get_weight()
        w, c = _weights(weight, groups, "LightGBM", per_query=False)
        return self.grad_hess(s, torch.as_tensor(labels, dtype=F64), groups, w, c)


class _XGBoostObjective(_Objective):
    def __call__(self, preds, dtrain):
        _require_dmatrix(dtrain, "xgboost_objective")
        labels = np.asarray(dtrain.get_label())
        s = _as_scores(preds, labels.shape[0])
        groups = _groups_from_ptr(dtrain.get_uint_info("group_ptr"), labels.shape[0],
                                  "the XGBoost DMatrix")
        w, c = _weights(dtrain.get_weight(), groups, "XGBoost", per_query=True)
        return self.grad_hess(s, torch.as_tensor(labels, dtype=F64), groups, w, c)


def lightgbm_objective(loss: Callable, *, hess: str = "diag", hess_floor: float = 1e-16):
    """A LightGBM custom objective from a ranking loss.

    Usable as ``params["objective"]`` in ``lightgbm.train`` (called ``(preds, dataset)``;
    the query sizes come from ``dataset.get_group()``) and as
    ``LGBMRanker(objective=...)`` (called ``(y_true, y_pred, weight, group)``).

    Args:
        loss: a ranking loss ``loss(scores, labels, groups)``, ideally with ``grad_hess``.
        hess: ``"diag"`` (exact Hessian diagonal), ``"bound"`` (diagonal upper bound) or
            ``"none"`` (unit curvature).
        hess_floor: curvatures are clamped below at this value (LightGBM divides by them).

    Raises ``ValueError`` when the dataset has no query groups.
    """
    return _LightGBMObjective(loss, hess=hess, hess_floor=hess_floor)


def xgboost_objective(loss: Callable, *, hess: str = "diag", hess_floor: float = 1e-16):
    """An XGBoost custom objective (``xgboost.train(..., obj=...)``) from a ranking loss.

    The query layout comes from ``dtrain.get_uint_info("group_ptr")`` (set by
    ``DMatrix(..., qid=...)`` or ``set_group``). Same options as :func:`lightgbm_objective`.
    """
    return _XGBoostObjective(loss, hess=hess, hess_floor=hess_floor)


def _metric(name):
    from .registry import metric

    return metric(name)


class _LightGBMMetric:
    def __init__(self, name):
        self.metric = _metric(name)

    def __call__(self, a, b, weight=None, group=None):
        if hasattr(b, "get_group") and hasattr(b, "get_label"):  # lgb.train feval
            labels = np.asarray(b.get_label())
            s = _as_scores(a, labels.shape[0])
            groups = _groups_from_sizes(b.get_group(), labels.shape[0], "the LightGBM Dataset")
        else:  # LGBMRanker(eval_metric=...)
            labels = np.asarray(a)
            s = _as_scores(b, labels.shape[0])
            groups = _groups_from_sizes(group, labels.shape[0], "LGBMRanker eval set")
        value = self.metric(s, torch.as_tensor(labels, dtype=F64), groups)
        return self.metric.name, float(value), self.metric.greater_is_better


class _XGBoostMetric:
    def __init__(self, name):
        self.metric = _metric(name)
        self.greater_is_better = self.metric.greater_is_better

    def __call__(self, preds, dmat):
        _require_dmatrix(dmat, "xgboost_metric")
        labels = np.asarray(dmat.get_label())
        s = _as_scores(preds, labels.shape[0])
        groups = _groups_from_ptr(dmat.get_uint_info("group_ptr"), labels.shape[0],
                                  "the XGBoost DMatrix")
        return self.metric.name, float(self.metric(s, torch.as_tensor(labels, dtype=F64), groups))


def lightgbm_metric(name: str):
    """One of our metrics (any name :func:`torchrankboost.registry.metric` knows, e.g.
    ``"ndcg@10"``, ``"map"``, ``"pair_error"``) as a LightGBM ``feval`` /
    ``LGBMRanker.fit(eval_metric=...)``; returns ``(name, value, is_higher_better)``."""
    return _LightGBMMetric(name)


def xgboost_metric(name: str):
    """One of our metrics as XGBoost's ``custom_metric``; returns ``(name, value)``. Pass
    ``maximize=metric.greater_is_better`` to ``xgb.train`` for early stopping."""
    return _XGBoostMetric(name)
