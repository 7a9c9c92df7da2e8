"""A scikit-learn style estimator over every algorithm of the library.

:class:`BoostedRanker` follows scikit-learn's conventions (``fit``/``predict``/``score``,
``get_params``/``set_params``, :func:`sklearn.base.clone`)::

    from torchrankboost import BoostedRanker
    ranker = BoostedRanker(loss="exponential", learner="tree", n_rounds=100, max_leaves=15)
    ranker.fit(X, y, qid=qid)                  # or group=[sizes...]; none = one query
    scores = ranker.predict(X_test)            # numpy (n,)
    ranker.score(X_test, y_test, qid=qid_test) # NDCG@10 (mean over queries)

Cross-validation by query needs the query ids on both the training and the test fold. Two
ways work with scikit-learn's own ``cross_val_score``/``GroupKFold``:

1. **qid as a column of X** (no configuration): ``BoostedRanker(qid_column=0)`` reads the
   query id from column 0 of ``X`` (and drops it from the features) in ``fit``, ``predict``
   and ``score``, so every split carries its query ids::

       Xq = np.column_stack([qid, X])
       cross_val_score(BoostedRanker(qid_column=0), Xq, y, groups=qid, cv=GroupKFold(5))

2. **metadata routing** (scikit-learn ≥ 1.4)::

       sklearn.set_config(enable_metadata_routing=True)
       est = BoostedRanker().set_fit_request(qid=True).set_score_request(qid=True)
       cross_val_score(est, X, y, cv=GroupKFold(5), params={"qid": qid, "groups": qid})

Rows of a query need not be contiguous: ``fit`` and ``score`` regroup them (a stable sort by
query id), ``predict`` is per document and keeps the input order.

A plain ``GridSearchCV(..., cv=GroupKFold(3)).fit(X, y, groups=qid, qid=qid)`` passes
``qid`` to ``fit`` only, and the CV scores would be silently wrong (each test fold scored as
one query): ``fit`` refuses it at once, naming the two ways above; ``score`` without query
information on a model fitted on several queries raises too. A ``qid_column`` transformed by
a step in front (a ``StandardScaler``) is refused as such.

scikit-learn's conventions: a data frame's column names are kept in ``feature_names_in_``
(other columns, or the same in another order, raise at predict time); ``score`` takes
``sample_weight`` (``Pipeline.score`` always routes it). LightGBM / XGBoost names
(``n_estimators``, ``num_leaves``, ``random_state``, ``eval_at``, ...) raise naming ours
(see :mod:`.compat`); ``predict(X, n_rounds=k)`` and
``staged_predict`` give the scores of the first rounds.

LightGBM / XGBoost users find the attributes they know: ``feature_importances_`` (total split
gain per feature by default, ``importance_type="split"`` for split counts; so
``SelectFromModel`` works), ``evals_result_``, ``best_iteration_``, ``best_score_``,
``n_features_in_``; ``save_model(path)`` and ``BoostedRanker().load_model(path)`` (returns
the estimator, ready to predict).

The package: :mod:`.ranker` (:class:`BoostedRanker`), :mod:`.arrays` (inputs as tensors,
queries from ids or sizes), :mod:`.compat` (scikit-learn / LightGBM / XGBoost conventions),
:mod:`.debiasing` (``debias=``: learning from clicks).
"""

from ..factory import load_model
from .ranker import BoostedRanker

__all__ = ["BoostedRanker", "load_model"]
