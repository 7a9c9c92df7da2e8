"""What :class:`~torchrankboost.estimator.BoostedRanker` needs to meet the conventions of
scikit-learn, LightGBM and XGBoost: their parameter names refused with ours, the column
names of a data frame, the query-id traps of cross-validation, and a weighted ``score``.

* **Their names.** ``BoostedRanker(n_estimators=100)``, ``set_params(num_leaves=31)``,
  ``fit(..., eval_at=[5])`` or ``predict(X, num_iteration=10)`` raise with the name to use
  here (``THEIR_INIT`` / ``THEIR_FIT`` / ``THEIR_PREDICT``): one name for each option, so a
  grid or a ``repr`` never holds two spellings of the same thing.
* **Cross-validation that loses the query ids.** Without metadata routing,
  ``GridSearchCV(...).fit(X, y, groups=qid, qid=qid)`` hands ``qid`` to ``fit`` but never to
  ``score``, so every fold would be scored as one query; :func:`cv_scores_without_qid`
  detects that call (scikit-learn's ``_fit_and_score`` scoring by ``estimator.score``) so
  that ``fit`` refuses it at once, before any training.
* **Weighted score.** :func:`weighted_score`: a query weighs the mean weight of its
  documents (LightGBM's query weights), ``Σ_q w̄_q m_q / Σ_q w̄_q``.
"""

from __future__ import annotations

import functools
import inspect
import sys

import numpy as np
import torch

# LightGBM / XGBoost (and scikit-learn ensemble) names -> what to write here
_LEARNER = "learner_params={{'{}': ...}} (tree learner)"
THEIR_INIT = {
    "n_estimators": "n_rounds",
    "num_boost_round": "n_rounds",
    "num_iterations": "n_rounds",
    "num_leaves": "max_leaves",
    "random_state": "seed",
    "eval_at": "eval_metric='ndcg@5' (one cutoff)",
    "objective": "loss (with algorithm='boost') or algorithm",
    "max_depth": _LEARNER.format("max_depth"),
    "min_child_samples": _LEARNER.format("min_samples_leaf"),
    "min_data_in_leaf": _LEARNER.format("min_samples_leaf"),
    "min_child_weight": _LEARNER.format("min_child_weight"),
    "min_sum_hessian_in_leaf": _LEARNER.format("min_child_weight"),
    "reg_lambda": _LEARNER.format("l2"),
    "lambda_l2": _LEARNER.format("l2"),
    "min_split_gain": _LEARNER.format("min_split_gain"),
    "gamma": _LEARNER.format("min_split_gain"),
    "max_bin": _LEARNER.format("n_bins"),
    "colsample_bytree": _LEARNER.format("feature_fraction"),
    "feature_fraction": _LEARNER.format("feature_fraction"),
    "subsample": "params={'subsample': ...} (a fraction of whole queries, algorithm='boost')",
    "bagging_fraction": "params={'subsample': ...} (a fraction of whole queries, "
                        "algorithm='boost')",
}
_OF_INIT = "BoostedRanker({}=...)"
THEIR_FIT = {
    "eval_at": "BoostedRanker(eval_metric='ndcg@5') (one cutoff)",
    "early_stopping_rounds": _OF_INIT.format("early_stopping_rounds"),
    "eval_metric": _OF_INIT.format("eval_metric"),
    "verbose": _OF_INIT.format("verbose"),
}
THEIR_PREDICT = {
    "num_iteration": "n_rounds=k (the first k rounds)",
    "iteration_range": "n_rounds=k (the first k rounds)",
}


def refuse_their_names(names, table: dict, where: str, error=TypeError, own=()) -> None:
    """Raise ``error`` for the first name of ``names`` in ``table`` (and not in ``own``),
    naming ours."""
    for name in names:
        if name in table and name not in own:
            raise error(f"{where} has no parameter {name!r} (LightGBM/XGBoost's name): use "
                        f"{table[name]}")


class TheirNames:
    """Mixin of a scikit-learn estimator: LightGBM / XGBoost names in the constructor
    (``TypeError``) and in ``set_params`` (``ValueError``, as scikit-learn's own) name ours.
    (``__new__`` lives here, in a base class, so ``inspect.signature`` of the estimator
    stays its ``__init__``'s.)"""

    def __new__(cls, *args, **kwargs):
        refuse_their_names(kwargs, THEIR_INIT, f"{cls.__name__}()",
                           own=cls._get_param_names())
        return super().__new__(cls)

    def set_params(self, **params):
        """scikit-learn's ``set_params``; ``n_estimators`` and the like raise naming ours."""
        refuse_their_names(params, THEIR_INIT, type(self).__name__, error=ValueError,
                           own=self._get_param_names())
        return super().set_params(**params)


def refusing_their_names(table: dict, where: str):
    """Decorator of a method: keyword arguments named in ``table`` raise ``TypeError`` naming
    ours (the signature scikit-learn's metadata routing sees is the method's own)."""
    def decorate(method):
        own = tuple(inspect.signature(method).parameters)  # a name of ours wins

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            refuse_their_names(kwargs, table, where, own=own)
            return method(self, *args, **kwargs)
        return wrapper
    return decorate


def check_feature_names(estimator, X, *, reset: bool) -> None:
    """scikit-learn's own ``feature_names_in_`` handling: stored from a data frame's columns
    at ``reset``, else compared (other names, or the same in another order, raise
    ``ValueError``; names against none and the reverse warn)."""
    try:
        from sklearn.utils.validation import _check_feature_names  # scikit-learn >= 1.6
    except ImportError:  # pragma: no cover
        estimator._check_feature_names(X, reset=reset)
        return
    _check_feature_names(estimator, X, reset=reset)


# ------------------------------------------------------------------ cross-validation
_TWO_WAYS = ("the query ids reach score() one of two ways: 1. a query-id column in X: "
             "BoostedRanker(qid_column=0) with X = np.column_stack([qid, X]), "
             "GridSearchCV(...).fit(X, y, groups=qid); 2. metadata routing: "
             "sklearn.set_config(enable_metadata_routing=True); "
             "BoostedRanker().set_fit_request(qid=True).set_score_request(qid=True), then "
             "fit(X, y, groups=qid, qid=qid) / params={'qid': qid, 'groups': qid}")
SCORE_WITHOUT_QID = ("in cross-validation (GridSearchCV, cross_val_score with GroupKFold) "
                     + _TWO_WAYS)
FIT_IN_CV = ("BoostedRanker.fit got qid/group inside scikit-learn's cross-validation without "
             "metadata routing: the folds' score() would get no query ids and score each test "
             "fold as one query; " + _TWO_WAYS + ".")


def _routing_enabled() -> bool:
    try:
        import sklearn

        return bool(sklearn.get_config().get("enable_metadata_routing", False))
    except Exception:  # pragma: no cover
        return False


def cv_scores_without_qid() -> bool:
    """True when the caller runs inside scikit-learn's ``_fit_and_score`` (``GridSearchCV``,
    ``cross_val_score``, ``cross_validate``, ...) with metadata routing off and the default
    scoring (``estimator.score``): query ids given to ``fit`` there never reach ``score``.
    A custom ``scoring=`` may know the queries, so it is let through."""
    if _routing_enabled():
        return False
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_fit_and_score" and \
                frame.f_globals.get("__name__") == "sklearn.model_selection._validation":
            return _scores_by_estimator(frame.f_locals.get("scorer"))
        frame = frame.f_back
    return False


def _scores_by_estimator(scorer) -> bool:
    """Whether ``scorer`` (scikit-learn's, maybe several in a ``_MultimetricScorer``) calls
    ``estimator.score``."""
    inner = getattr(scorer, "_scorers", None)
    scorers = inner.values() if isinstance(inner, dict) else [scorer]
    return any(type(s).__name__ == "_PassthroughScorer" for s in scorers)


def qid_column_message(c: int, values: np.ndarray) -> str:
    """The message for a ``qid_column`` that does not hold integer query ids."""
    bad = values[~(np.isfinite(values) & (values == np.round(values)))]
    return (f"qid_column={c}: column {c} of X holds non-integer values (e.g. "
            f"{float(bad[0]):g}), not query ids: the column was transformed (a StandardScaler "
            f"or another step before BoostedRanker in a Pipeline?); keep it out of the "
            f"preprocessing, e.g. "
            f"ColumnTransformer([('qid', 'passthrough', [{c}])], remainder=StandardScaler()) "
            f"keeps it first, or pass qid= with metadata routing")


# ------------------------------------------------------------------ weighted score
def document_weights(sample_weight, n: int) -> torch.Tensor:
    """``sample_weight`` as a float64 ``(n,)`` tensor: finite, ``>= 0``, not all zero."""
    w = np.asarray(sample_weight.detach().cpu() if isinstance(sample_weight, torch.Tensor)
                   else sample_weight, dtype=np.float64).reshape(-1)
    if w.shape[0] != n:
        raise ValueError(f"sample_weight has {w.shape[0]} entries but X has {n} rows")
    if not np.isfinite(w).all() or (w < 0).any() or not w.any():
        raise ValueError("sample_weight must be finite and >= 0, and not all 0")
    return torch.as_tensor(w)


def weighted_score(metric, scores, labels, groups, weights) -> float:
    """``Σ_q w̄_q m_q / Σ_q w̄_q`` over the queries that have a value, ``m_q`` the metric of
    query ``q`` and ``w̄_q`` the mean weight of its documents (``weights`` ``(n,)``, in the
    rows' order of ``groups``). The metric needs per-query values (``reduction="none"``, as
    every named metric has)."""
    try:
        per_query = metric.fn(scores, labels, groups, reduction="none", **metric.kwargs)
    except TypeError:
        raise ValueError(f"score(sample_weight=...) needs per-query values of the metric "
                         f"(reduction='none'); {metric.name!r} has none") from None
    per_query = torch.as_tensor(per_query, dtype=torch.float64).cpu().reshape(-1)
    g = groups.to("cpu")
    wq = g.segment_sum(weights.to(torch.float64)) / g.sizes.to(torch.float64)
    ok = ~torch.isnan(per_query) & (wq > 0)
    if not bool(ok.any()):
        return float("nan")
    return float((wq[ok] * per_query[ok]).sum() / wq[ok].sum())
