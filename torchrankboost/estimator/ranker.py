"""The scikit-learn estimator :class:`BoostedRanker`: ``fit`` / ``predict`` / ``score`` /
``staged_predict`` / ``apply``, ``get_params`` / ``set_params``, ``save_model`` /
``load_model``, over every algorithm of the library (built by name with
:func:`~torchrankboost.factory.make_ranker`). Its usage, the cross-validation ways and the
conventions it follows: :mod:`torchrankboost.estimator`.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from .. import registry
from .._threads import limit_threads, resolve_n_jobs
from ..boosting.checkpoint import warm_start_init
from ..factory import load_model, make_ranker, resolve_device, rounds_kept
from . import compat
from .arrays import (features, fit_weights, groups_from, is_tabular, table_arrays,
                     table_features, to_numpy, uses_columns)
from .debiasing import debias_fit_args
from ..contract import ArrayLike, EvalSets, PathLike

#: more documents than this with no query ids (no ``qid``, ``group`` or ``qid_column``):
#: ``fit`` warns that they are one query, ``score`` refuses to score them as one
ONE_QUERY_DOCS = 1000

try:  # scikit-learn is a dependency; keep the import local to this module
    from sklearn.base import BaseEstimator
except ImportError:  # pragma: no cover
    BaseEstimator = object

__all__ = ["BoostedRanker"]

_IMPORTANCE = {"gain": "gain", "split": "count"}


def _importances(model, importance_type: str) -> np.ndarray:
    """Per-feature importance of a fitted model (see ``feature_importances_``)."""
    return model.feature_importance(_IMPORTANCE[importance_type]).to(
        "cpu", torch.float64).numpy()


class BoostedRanker(compat.TheirNames, BaseEstimator):
    """Boosted learning-to-rank model with scikit-learn's estimator API.

    Args:
        algorithm: ``"boost"`` (the generic driver: ``loss`` + ``learner``) or a paper's
            algorithm (``"rankboost"``, ``"pnorm_push"``, ... — ``torchrankboost list``).
        loss: loss name (``"exponential"``, ``"pnorm_push"``, ``"hinge"``, ...) or a loss
            object (callable ``loss(scores, labels, groups)``); for ``algorithm="boost"``
            (``None``: ``"exponential"``).
        learner: weak learner name (``"tree"``, ``"stump"``, ``"feature"``) or object
            (``None``: ``"tree"`` for the driver, the algorithm's own default otherwise).
        n_rounds: boosting rounds (the maximum, with early stopping; ``None``: the
            algorithm's default, 100 for ``"boost"``; RankSVM has ``max_iter`` in ``params``
            instead).
        learning_rate: shrinkage (``None``: the algorithm's default; the algorithms with
            exact steps, such as RankBoost, have none).
        max_leaves: leaves per tree (tree learner).
        loss_params: a dict of extra options for the loss.
        learner_params: a dict of extra options for the learner.
        params: a dict of extra options for the driver/algorithm.
        early_stopping_rounds: patience on the first ``eval_set`` (``fit(eval_set=...)``).
        eval_metric: metric name watched on the ``eval_set`` (default ``"ndcg@10"``).
        score_metric: metric of :meth:`score` (default ``"ndcg@10"``, higher is better).
        qid_column: the column of ``X`` that holds the query ids, removed from the
            features (the way to cross-validate with plain ``cross_val_score``): its index,
            or its name when ``X`` is a data frame (``qid_column="qid"``; its ids may then
            be strings).
        device: torch device for training and prediction (default CPU).
        seed: random seed of the algorithm (``None``: its default; not every algorithm has
            one).
        n_jobs: CPU threads of torch while fitting and predicting (``None``: 1, the
            default that does not stall on a busy machine, see the command-line guide of the
            docs, threads; ``-1``: every core).
        importance_type: ``feature_importances_`` as ``"gain"`` (total split gain per
            feature, LightGBM's ``importance_type="gain"``) or ``"split"`` (number of splits
            using the feature). A linear model (RankSVM) reports ``|weight|``.
        verbose: show a progress bar (or lines, off a terminal) while fitting.
        warm_start: a second ``fit`` continues the fitted model up to ``n_rounds`` rounds in
            all (scikit-learn's convention; the algorithms that take ``init_model``).
        debias: learning from clicks (labels = clicks, ``fit(..., position=...)``):
            ``"none"`` or a debiasing method of the registry (``torchrankboost list debias``;
            :mod:`torchrankboost.clicks`; the ``"boost"`` driver).
        propensity: the known examination probabilities of positions ``1..K`` (for
            ``debias="ipw"``).

    Attributes after ``fit``: ``ranker_`` (the fitted algorithm, see
    :mod:`torchrankboost.contract`), ``model_`` (the fitted model, e.g. an ``Ensemble``),
    ``n_features_in_``, ``best_round_``, ``best_score_``, ``evals_result_`` (``{set name:
    {metric: [value per round]}}``), ``history_`` (one ``RoundRecord`` per round),
    ``stop_reason_``, ``n_rounds_`` (the rounds in ``model_``), ``n_queries_`` (training
    queries), ``feature_importances_`` and ``best_iteration_`` (LightGBM's name of
    ``best_round_``: the 1-based best round, ``None`` without an ``eval_set``).
    """

    def __init__(self, *, algorithm: str = "boost", loss: Any = None, learner: Any = None,
                 n_rounds: Optional[int] = None, learning_rate: Optional[float] = None,
                 max_leaves: Optional[int] = None, loss_params: Optional[dict] = None,
                 learner_params: Optional[dict] = None, params: Optional[dict] = None,
                 early_stopping_rounds: Optional[int] = None, eval_metric: str = "ndcg@10",
                 score_metric: str = "ndcg@10",
                 qid_column: Optional[Union[int, str]] = None,
                 device: Optional[str] = None, seed: Optional[int] = None,
                 n_jobs: Optional[int] = None, importance_type: str = "gain",
                 verbose: bool = False, warm_start: bool = False, debias: str = "none",
                 propensity: Optional[Sequence[float]] = None):
        self.algorithm = algorithm
        self.loss = loss
        self.learner = learner
        self.n_rounds = n_rounds
        self.learning_rate = learning_rate
        self.max_leaves = max_leaves
        self.loss_params = loss_params
        self.learner_params = learner_params
        self.params = params
        self.early_stopping_rounds = early_stopping_rounds
        self.eval_metric = eval_metric
        self.score_metric = score_metric
        self.qid_column = qid_column
        self.device = device
        self.seed = seed
        self.n_jobs = n_jobs
        self.importance_type = importance_type
        self.verbose = verbose
        self.warm_start = warm_start
        self.debias, self.propensity = debias, propensity  # clicks (fit's position=)

    # ------------------------------------------------------------------ helpers
    def _device(self):
        """The torch device; an unavailable one is the CLI's one-line error."""
        return torch.device("cpu") if self.device is None else resolve_device(self.device)

    def _split_X(self, X, qid):
        """(features tensor on device, qid or None) — the qid column removed if configured."""
        if isinstance(self.qid_column, str):
            X, qid = self._named_qid(X, qid)
        if isinstance(X, Tensor):
            Xt = X.detach()
            if not Xt.dtype.is_floating_point:
                Xt = Xt.to(torch.float32)
        else:
            arr = features(X)
            Xt = torch.as_tensor(arr.astype(np.float64 if arr.dtype == np.float64
                                            else np.float32))
        if Xt.dim() != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features), got shape "
                             f"{tuple(Xt.shape)}")
        if self.qid_column is not None and not isinstance(self.qid_column, str):
            c = int(self.qid_column)
            if not -Xt.shape[1] <= c < Xt.shape[1]:
                raise ValueError(f"qid_column={c} but X has {Xt.shape[1]} columns")
            c %= Xt.shape[1]
            if qid is not None:
                raise ValueError("qid given both as qid_column and as the qid argument")
            qid = Xt[:, c].cpu().numpy()
            if not (np.isfinite(qid) & (qid == np.round(qid))).all():
                raise ValueError(compat.qid_column_message(c, qid))
            Xt = torch.cat([Xt[:, :c], Xt[:, c + 1:]], 1)
        return Xt.to(self._device()), qid

    def _named_qid(self, X, qid):
        """``(X without the column, its values)`` for a ``qid_column`` given by name: ``X``
        must be a data frame holding that column (its ids may be any values: strings,
        integers)."""
        name = self.qid_column
        columns = getattr(X, "columns", None)
        if columns is None or not hasattr(X, "drop"):
            raise ValueError(f"qid_column={name!r} names a column, so X must be a data frame "
                             f"with that column (got {type(X).__name__}); for an array, give "
                             f"the column's index")
        if name not in list(columns):
            raise ValueError(f"qid_column={name!r}: X has no column {name!r} (columns: "
                             f"{', '.join(map(str, list(columns)[:10]))}"
                             f"{', ...' if len(columns) > 10 else ''})")
        if qid is not None:
            raise ValueError("qid given both as qid_column and as the qid argument")
        return X.drop(columns=[name]), np.asarray(X[name])

    def _qid_position(self) -> Optional[int]:
        """The index of the ``qid_column`` among the ``n_features_in_`` input columns."""
        if self.qid_column is None:
            return None
        if isinstance(self.qid_column, str):
            names = list(getattr(self, "feature_names_in_", []))
            return names.index(self.qid_column) if self.qid_column in names else None
        return int(self.qid_column) % self.n_features_in_

    def _labels(self, y, n):
        yt = torch.as_tensor(to_numpy(y, "y").astype(np.float64)).reshape(-1)
        if yt.shape[0] != n:
            raise ValueError(f"y has {yt.shape[0]} entries but X has {n} rows")
        if not bool(torch.isfinite(yt).all()):
            raise ValueError("y contains NaN or inf")
        return yt.to(torch.float32).to(self._device())

    def _prepare(self, X, y, qid, group):
        Xt, qid = self._split_X(X, qid)
        n = Xt.shape[0]
        yt = self._labels(y, n)
        groups, perm = groups_from(n, qid, group)
        if perm is not None:
            perm = perm.to(Xt.device)
            Xt, yt = Xt[perm], yt[perm]
        return Xt, yt, groups.to(Xt.device)

    # ------------------------------------------------------------------ API
    @compat.refusing_their_names(compat.THEIR_FIT, "BoostedRanker.fit")
    def fit(self, X: ArrayLike, y: Optional[ArrayLike] = None, *, qid: Optional[ArrayLike] = None,
            group: Optional[ArrayLike] = None, eval_set: EvalSets = None,
            eval_qid: Optional[Sequence[Any]] = None, eval_group: Optional[Sequence[Any]] = None,
            callbacks: Optional[Sequence[Any]] = None, sample_weight: Optional[ArrayLike] = None,
            group_weight: Optional[ArrayLike] = None, position: Optional[ArrayLike] = None
            ) -> "BoostedRanker":
        """Fit on ``X (n, F)`` and relevance labels ``y (n,)``.

        Queries: ``qid`` (a query id per row, rows in any order), ``group`` (sizes of
        consecutive queries, LightGBM style), ``qid_column`` (constructor), or none of these
        (one query: bipartite ranking). ``eval_set``: a list of ``(X_v, y_v)`` pairs with
        their query ids in ``eval_qid`` / ``eval_group`` (lists), or ``(X_v, y_v, qid_v)``
        triples; the first drives ``early_stopping_rounds`` (ignored without an ``eval_set``).
        ``callbacks``: callbacks of the contract (e.g. a
        :class:`~torchrankboost.tensorboard.TensorBoardLogger`). ``sample_weight`` ``(n,)``
        (per row) and ``group_weight`` (per query, in the order the queries first appear):
        see :mod:`torchrankboost.boosting.weights`. ``position`` ``(n,)``: displayed ranks of
        click labels ``y``, with ``debias`` (:mod:`torchrankboost.clicks`).

        **Tables.** ``X`` may be a ``pyarrow.Table``, a Polars or pandas ``DataFrame`` or a
        path (Parquet, Feather/Arrow, CSV/TSV) read by column names: ``y``, ``qid``,
        ``sample_weight``, ``position`` and ``group_weight`` may each name a column
        (``fit(table, qid="qid")``; left ``None``, the columns ``label``, ``qid``,
        ``weight``, ``position`` and ``group_weight`` are used when present, the label
        required), the features are the other numeric columns, kept in
        ``feature_names_in_`` (and in a saved model); a table's query ids must be
        contiguous. ``eval_set`` entries may be such tables too (alone, or ``(X_v, y_v,
        qid_v)`` with names); ``predict`` and ``score`` then take tables with the same
        feature columns (in any order; the role columns are left out).

        A data frame's column names are kept in ``feature_names_in_``. Inside scikit-learn's
        cross-validation without metadata routing, ``qid``/``group`` are refused at once
        (they would never reach ``score``; the message shows the two ways that work).
        """
        if (qid is not None or group is not None) and compat.cv_scores_without_qid():
            raise ValueError(compat.FIT_IN_CV)
        table = self._table_inputs(X, y=y, qid=qid, sample_weight=sample_weight,
                                   group_weight=group_weight, position=position)
        if table is not None:
            X, y, qid = table["X"], table["y"], table["qid"]
            sample_weight, group_weight = table["sample_weight"], table["group_weight"]
            position = table["position"]
        if y is None:
            raise ValueError("fit needs the labels y (or X as a table with a label column)")
        compat.check_feature_names(self, X, reset=True)
        Xt, yt, groups = self._prepare(X, y, qid, group)
        self._warn_one_query(qid, group, Xt.shape[0])
        weights = fit_weights(sample_weight, group_weight, qid, group, Xt.shape[0])
        if Xt.shape[0] == 0:
            raise ValueError("X has no rows")
        evals = self._eval_sets(eval_set, eval_qid, eval_group, Xt.shape[1], table)
        registry.metric(self.score_metric)  # validate early
        if self.importance_type not in _IMPORTANCE:
            raise ValueError(f"importance_type must be one of {tuple(_IMPORTANCE)}, got "
                             f"{self.importance_type!r}")
        params = dict(self.params or {})
        if registry.lookup("algorithm", self.algorithm).name == "boost":
            # the driver alone shows a bar by default ("auto"); the estimator's is its own
            params.setdefault("verbose", False)
        ranker = make_ranker(
            self.algorithm, loss=self.loss, learner=self.learner, n_rounds=self.n_rounds,
            learning_rate=self.learning_rate, max_leaves=self.max_leaves,
            loss_params=self.loss_params, learner_params=self.learner_params,
            params=params, seed=self.seed, n_threads=resolve_n_jobs(self.n_jobs))
        weights.update(debias_fit_args(self, ranker, self._split_X(X, qid)[1], group, position,
                                       Xt.shape[0]))
        init = warm_start_init(ranker, getattr(self, "model_", None) if self.warm_start else None)
        init = {} if init is None else {"init_model": init}
        stopping = self.early_stopping_rounds if evals else None
        cbs = list(callbacks or ())
        if self.verbose:
            from ..boosting.progress import ProgressCallback

            cbs.append(ProgressCallback())
        model = ranker.fit(Xt, yt, groups, eval_set=evals or None, eval_metric=self.eval_metric,
                           early_stopping_rounds=stopping, callbacks=cbs, **init, **weights)
        self._fitted(ranker, model, groups, Xt, stopping, table)
        return self

    def _table_inputs(self, X, **args):
        """``fit``'s inputs from a table (:func:`~.arrays.table_arrays`), or ``None`` for
        arrays (and a pandas frame with no role named)."""
        if not uses_columns(X, **args):
            return None
        if self.qid_column is not None:
            raise ValueError("qid_column indexes a column of an array X; with a table, name "
                             "the query id column: fit(table, qid='qid')")
        return table_arrays(X, **args)

    def _eval_sets(self, eval_set, eval_qid, eval_group, F: int, table) -> list:
        """``fit``'s ``eval_set`` as ``(X, y, groups)`` tensors: arrays, data frames, or
        tables read with the training table's column roles and feature names."""
        evals = []
        for j, ev in enumerate(eval_set or ()):
            if not isinstance(ev, (tuple, list)):
                ev = (ev,) if uses_columns(ev, y=None) else ev
            if not isinstance(ev, (tuple, list)) or len(ev) not in (1, 2, 3) or (
                    len(ev) == 1 and table is None):
                raise ValueError("eval_set entries must be (X, y) or (X, y, qid) tuples (or "
                                 "tables, after a fit on a table)")
            q = ev[2] if len(ev) == 3 else (eval_qid[j] if eval_qid is not None else None)
            y = ev[1] if len(ev) > 1 else None
            if table is not None and uses_columns(ev[0], y=y, qid=q):
                got = table_arrays(ev[0], y=y, qid=q, roles=table["roles"],
                                   names=table["names"])
                Xe, y, q = got["X"], got["y"], got["qid"]
            else:
                Xe = ev[0]
                compat.check_feature_names(self, Xe, reset=False)
            gsz = eval_group[j] if eval_group is not None else None
            Xv, yv, gv = self._prepare(Xe, y, q, gsz)
            if Xv.shape[1] != F:
                raise ValueError(f"eval_set[{j}] has {Xv.shape[1]} features, X has {F}")
            evals.append((Xv, yv, gv))
        return evals

    def _fitted(self, ranker, model, groups, Xt, stopping, table) -> None:
        """The fitted attributes (``table``: the column roles and feature names of a fit
        on a table)."""
        self.ranker_ = ranker
        self.n_queries_ = int(groups.num_groups)
        self.model_ = model
        self.n_features_in_ = int(Xt.shape[1]) + (1 if self.qid_column is not None else 0)
        self.best_round_ = ranker.best_round_
        self.best_score_ = ranker.best_score_
        self.evals_result_ = ranker.evals_result_
        self.history_ = ranker.history_
        self.stop_reason_ = ranker.stop_reason_
        self.n_rounds_ = rounds_kept(ranker, stopping)
        self.best_iteration_ = self.best_round_
        if table is not None:
            self.feature_names_in_ = np.asarray(table["names"], dtype=object)
            self.table_roles_ = dict(table["roles"])
        else:
            self.__dict__.pop("table_roles_", None)

    @property
    def feature_importances_(self) -> np.ndarray:
        """``(n_features_in_,)`` importance of each feature (``importance_type``): the total
        split gain (``"gain"``) or the number of splits (``"split"``) over the ensemble's
        weak models; ``|weight|`` for a linear model. The ``qid_column`` gets 0."""
        self._check_fitted()
        imp = _importances(self.model_, self.importance_type)
        c = self._qid_position()
        if c is not None:
            imp = np.insert(imp, c, 0.0)
        return imp

    def load_model(self, path: PathLike) -> "BoostedRanker":
        """Load a model saved by :meth:`save_model` (or ``torchrankboost train``) into this
        estimator and return it, ready to ``predict`` and ``score`` (its training history is
        not in the file: ``evals_result_`` is empty, ``best_iteration_`` ``None``)."""
        model = load_model(path, device=self._device())
        self.model_ = model
        self.ranker_ = None
        self.n_features_in_ = int(model.num_features) + (1 if self.qid_column is not None
                                                         else 0)
        info = model.info
        self.best_round_ = self.best_iteration_ = info.get("best_round")
        self.best_score_ = info.get("best_score")
        self.evals_result_ = info.get("evals_result") or {}
        self.history_ = []
        self.stop_reason_ = info.get("stop_reason")
        self.n_rounds_ = getattr(model, "n_rounds", None)
        self.n_queries_ = None  # unknown: score() then trusts the caller
        names = info.get("feature_names")  # a model fitted on a table or data frame
        self.__dict__.pop("table_roles_", None)
        if names is not None and self.qid_column is None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
            self.table_roles_ = {}  # tables (and data frames) are read by column names
        else:
            self.__dict__.pop("feature_names_in_", None)
        return self

    def _check_fitted(self):
        if not hasattr(self, "model_"):
            try:
                from sklearn.exceptions import NotFittedError
            except ImportError:  # pragma: no cover
                NotFittedError = ValueError
            raise NotFittedError("this BoostedRanker is not fitted yet; call fit first")

    @compat.refusing_their_names(compat.THEIR_PREDICT, "BoostedRanker.predict")
    def predict(self, X: ArrayLike, *, n_rounds: Optional[int] = None, contrib: bool = False
               ) -> np.ndarray:
        """Scores ``(n,)`` (numpy float64), higher = more relevant; input row order kept.

        ``n_rounds``: score with the first ``n_rounds`` rounds of the ensemble only
        (``None``: all of ``model_``, which early stopping already cut at the best round;
        LightGBM's ``num_iteration``). A data frame's columns must be those of ``fit``, in
        the same order. ``contrib=True``: the TreeSHAP contributions ``(n, F + 1)`` instead
        (``F`` features without a ``qid_column``, expected value last; rows sum to the
        scores; :meth:`Ensemble.predict <torchrankboost.boosting.Ensemble.predict>`)."""
        Xt = self._predict_input(X)
        kw = {}
        if n_rounds is not None:
            self._check_ensemble("n_rounds")
            kw["n_rounds"] = n_rounds
        if contrib:
            self._check_ensemble("contrib")
            kw["contrib"] = True
        with torch.no_grad(), limit_threads(resolve_n_jobs(self.n_jobs)):
            s = self.model_.predict(Xt, **kw)
        return s.detach().to("cpu", torch.float64).numpy()

    def apply(self, X: ArrayLike, *, n_rounds: Optional[int] = None) -> np.ndarray:
        """``(n, n_rounds)`` int64 leaf index of every row in each round (LightGBM's
        ``pred_leaf``; :meth:`Ensemble.apply <torchrankboost.boosting.Ensemble.apply>`)."""
        Xt = self._predict_input(X)
        self._check_ensemble("apply")
        with torch.no_grad(), limit_threads(resolve_n_jobs(self.n_jobs)):
            leaves = self.model_.apply(Xt, n_rounds=n_rounds)
        return leaves.to("cpu").numpy()

    def staged_predict(self, X: ArrayLike) -> Iterator[np.ndarray]:
        """Yield the scores ``(n,)`` (numpy float64) after each round ``1..n_rounds_`` (as
        scikit-learn's gradient boosting; the last equals ``predict(X)``)."""
        Xt = self._predict_input(X)
        self._check_ensemble("staged_predict")
        with torch.no_grad(), limit_threads(resolve_n_jobs(self.n_jobs)):
            for s in self.model_.staged_predict(Xt):
                yield s.detach().to("cpu", torch.float64).numpy()

    def _predict_input(self, X):
        self._check_fitted()
        if self._reads_table(X):
            X = table_features(X, getattr(self, "feature_names_in_", None),
                               getattr(self, "table_roles_", None))
        else:
            compat.check_feature_names(self, X, reset=False)
        Xt, _ = self._split_X(X, None)
        self._check_nfeatures(Xt)
        return Xt

    def _reads_table(self, X) -> bool:
        """``X`` is read by column names: a path or an Arrow/Polars table, or any data
        frame after a fit on a table."""
        from ..data.arrow import is_table

        return is_tabular(X) or (is_table(X) and hasattr(self, "table_roles_"))

    def _check_ensemble(self, what: str) -> None:
        if not callable(getattr(self.model_, "staged_predict", None)):
            raise ValueError(f"{what} needs a model of boosting rounds; this one is a "
                             f"{type(self.model_).__name__}")

    def _check_nfeatures(self, Xt) -> None:
        n = int(Xt.shape[1]) + (1 if self.qid_column is not None else 0)
        if n != self.n_features_in_:
            raise ValueError(f"X has {n} features, but BoostedRanker is expecting "
                             f"{self.n_features_in_} features as input.")

    def _no_query_ids(self, qid: Any, group: Any) -> bool:
        return qid is None and group is None and self.qid_column is None

    def _warn_one_query(self, qid: Any, group: Any, n: int) -> None:
        if self._no_query_ids(qid, group) and n > ONE_QUERY_DOCS:
            warnings.warn(f"BoostedRanker.fit got {n:,} documents and no query ids (qid=, "
                          f"group= or qid_column): they are fitted as ONE query (bipartite "
                          f"ranking); pass qid= (or group=) for per-query ranking",
                          UserWarning, stacklevel=3)

    def score(self, X: ArrayLike, y: Optional[ArrayLike] = None,
              sample_weight: Optional[ArrayLike] = None, *, qid: Optional[ArrayLike] = None,
              group: Optional[ArrayLike] = None) -> float:
        """``score_metric`` (default NDCG@10, mean over queries) of the predictions.

        ``sample_weight`` ``(n,)``: a query then weighs the mean weight of its documents
        (LightGBM's query weights): ``Σ_q w̄_q m_q / Σ_q w̄_q`` (queries of weight 0 do not
        count); scikit-learn's ``Pipeline.score`` passes it (``None`` by default). ``X`` may
        be a table, as in :meth:`fit` (``y``, ``qid``, ``sample_weight`` then name columns
        or are read from the columns of the fit's roles).

        Without query ids, more than :data:`ONE_QUERY_DOCS` documents are refused (they
        would be scored as one query, silently); ``group=[len(X)]`` scores them as one."""
        self._check_fitted()
        if self._reads_table(X) or uses_columns(X, y=y, qid=qid, sample_weight=sample_weight):
            got = table_arrays(X, y=y, qid=qid, sample_weight=sample_weight,
                               roles=getattr(self, "table_roles_", None),
                               names=getattr(self, "feature_names_in_", None))
            return self._score_arrays(got["X"], got["y"], got["sample_weight"], got["qid"],
                                      group)
        if y is None:
            raise ValueError("score needs the labels y (or X as a table with a label column)")
        if qid is None and group is None and self.qid_column is None and \
                (getattr(self, "n_queries_", None) or 0) > 1:
            raise ValueError(
                f"score() got no query ids, but the model was fitted on {self.n_queries_} "
                f"queries: the whole X would be scored as one query (a wrong "
                f"{self.score_metric}). Pass qid=... (or group=...). "
                + compat.SCORE_WITHOUT_QID[0].upper() + compat.SCORE_WITHOUT_QID[1:] + ".")
        compat.check_feature_names(self, X, reset=False)
        return self._score_arrays(X, y, sample_weight, qid, group)

    def _score_arrays(self, X, y, sample_weight, qid, group) -> float:
        """:meth:`score` of arrays (the feature names checked)."""
        Xt, q = self._split_X(X, qid)
        if self._no_query_ids(qid, group) and Xt.shape[0] > ONE_QUERY_DOCS:
            raise ValueError(
                f"score() got {Xt.shape[0]:,} documents and no query ids: the whole X would be "
                f"scored as one query. Pass qid=... (or group=...); group=[len(X)] scores "
                f"one query deliberately")
        self._check_nfeatures(Xt)
        yt = self._labels(y, Xt.shape[0])
        w = None if sample_weight is None else compat.document_weights(sample_weight,
                                                                       Xt.shape[0])
        groups, perm = groups_from(Xt.shape[0], q, group)
        if perm is not None:
            Xt, yt = Xt[perm.to(Xt.device)], yt[perm.to(Xt.device)]
            w = None if w is None else w[perm]
        groups = groups.to(Xt.device)
        with torch.no_grad(), limit_threads(resolve_n_jobs(self.n_jobs)):
            s = self.model_.predict(Xt)
        metric = registry.metric(self.score_metric)
        if w is None:
            return float(metric(s, yt, groups))
        return compat.weighted_score(metric, s, yt, groups, w)

    def save_model(self, path: PathLike) -> None:
        """Save the fitted model (safetensors + JSON; load with ``load_model``), with the
        feature names of a fit on a data frame or table."""
        self._check_fitted()
        names = getattr(self, "feature_names_in_", None)
        if names is not None and self.qid_column is None:
            self.model_.info["feature_names"] = [str(c) for c in names]
        self.model_.save(path)

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        try:
            tags.input_tags.allow_nan = True  # NaN = a missing value (trees route it)
            tags.input_tags.sparse = True  # scipy sparse X is densified
        except AttributeError:  # pragma: no cover
            pass
        return tags

    def _more_tags(self):  # scikit-learn < 1.6
        return {"allow_nan": True}
