r"""Linear rankers: RankSVM (Herbrich, Graepel & Obermayer 2000; Joachims 2002; the SVM
ranking of Mohri, Rostamizadeh & Talwalkar, *Foundations of Machine Learning*, ch. 10) and
the :class:`LinearRanker` model it returns.

RankSVM's primal without offset (``b`` cancels in pair differences)::

    min_w  ½‖w‖² + C Σ_{(i,j) ∈ P} φ(1 - w·(x_i - x_j))

with ``φ(z) = max(0, z)`` (hinge, the textbook SVM) or ``max(0, z)²`` (``loss="squared_hinge"``,
the L2-SVM: differentiable, so L-BFGS converges cleanly; the default). The pair sum is the
O(n log n) sorted-prefix-sum kernel of :class:`~torchrankboost.losses.PairwiseHingeLoss` (no
pair materialisation for label-induced pairs); the minimisation is full-batch L-BFGS with a
strong-Wolfe line search in float64. With the plain hinge, L-BFGS runs on a non-smooth
objective and stops at an approximate minimiser (documented, use it only as a baseline).

Features are standardised with the training mean and standard deviation (``standardize=True``)
so that one ``C`` suits all features; the model folds the scaling back into ``w``.

Weights: ``sample_weight`` ``(n,)`` and ``group_weight`` ``(Q,)`` make a pair ``(i, j)`` of
query ``q`` weigh ``c_q w_i w_j`` in the pair sum (``C Σ c_q w_i w_j φ(1 - w·(x_i - x_j))``);
the standardisation statistics come from the rows of positive weight only, so weights of 0
on some queries give the model trained without those queries.

:class:`RankSVM` follows the ranker contract (:mod:`torchrankboost.contract`): a *round* is
one L-BFGS iteration (the record's ``loss`` is the primal objective after it, ``step`` the
line search's step), the evaluation sets are scored with the current ``w`` after each
iteration, and early stopping keeps the best iteration's ``w``.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ..evaluation import FitMonitor, FitState
from ..inputs import as_features, check_no_inf, fit_inputs
from ..objective import require_pairs
from ..weights import fit_weights
from ...contract import FitInfo, NumericalError, RoundRecord
from ...losses import PairwiseHingeLoss
from ...params import from_params
from ...contract import ArrayLike, DeviceLike, EvalSets, MetricSpec, PathLike
from ...groups import GroupsLike
from ...pairs import PairSpec

__all__ = ["LinearRanker", "RankSVM"]

FORMAT = "torchrankboost.LinearRanker"
FORMAT_VERSION = 2  # 2: the file carries a SHA-256 (older files load with a warning)


class LinearRanker:
    """``score(x) = w·x + b`` (NaN features count as 0). ``weight`` (F,) float64, ``bias``.

    Saves as safetensors with a JSON description (no pickle); :meth:`predict` returns float64
    scores on ``X``'s device.
    """

    def __init__(self, weight: Tensor, bias: float = 0.0, *, info: Optional[dict] = None):
        weight = torch.as_tensor(weight, dtype=torch.float64)
        if weight.dim() != 1:
            raise ValueError(f"weight must be 1-D, got shape {tuple(weight.shape)}")
        self.weight = weight
        self.bias = float(bias)
        self.info = dict(info or {})

    @property
    def num_features(self) -> int:
        return self.weight.numel()

    def feature_importance(self, kind: str = "gain") -> Tensor:
        """``(F,)`` importance: ``"gain"`` the weights' magnitudes ``|w|`` (float64),
        ``"count"`` 1 for each feature with a non-zero weight (int64)."""
        if kind == "gain":
            return self.weight.abs()
        if kind == "count":
            return (self.weight != 0).to(torch.int64)
        raise ValueError(f"kind must be 'gain' or 'count', got {kind!r}")

    def predict(self, X: ArrayLike) -> Tensor:
        """``(n,)`` float64 scores ``X·w + b`` (NaN features count as 0; ``±inf`` features are
        refused with a ``ValueError`` naming the column, as at fit)."""
        X = as_features(X)
        if X.shape[1] != self.num_features:
            raise ValueError(f"X must have shape (n, {self.num_features}), got {tuple(X.shape)}")
        check_no_inf(X)
        Xd = torch.nan_to_num(X.to(torch.float64), nan=0.0)
        return Xd @ self.weight.to(Xd.device) + self.bias

    def save(self, path: PathLike) -> None:
        """Write a ``.safetensors`` file (``weight``; JSON in the ``"linear"`` metadata, with
        the file's SHA-256), atomically."""
        from ..._modelfile import write_model_file

        meta = {"format": FORMAT, "version": FORMAT_VERSION, "bias": self.bias.hex(),
                "info": self.info}
        write_model_file(path, {"weight": self.weight}, "linear", meta, what="LinearRanker")

    @classmethod
    def load(cls, path: PathLike, *, device: DeviceLike = None, max_features: Optional[int] = None
            ) -> "LinearRanker":
        """Read a file written by :meth:`save`: its SHA-256, the JSON types and dtypes as
        written, at most ``max_features`` weights (default 100,000), finite weights and bias
        whose scores cannot overflow are verified; a corrupt file raises ``ValueError``
        naming it."""
        from ..._modelfile import guarded

        with guarded(path):
            return cls._load(path, device, max_features)

    @classmethod
    def _load(cls, path, device, max_features) -> "LinearRanker":
        from ..._modelfile import (ModelFileError, check_format, check_linear, check_linear_state,
                                 hex_float, read_model_file)

        meta, t = read_model_file(path, "linear", "LinearRanker", device=device)
        check_format(path, meta, FORMAT, FORMAT_VERSION, default_version=1)
        check_linear_state(path, meta, t, max_features=max_features)
        try:
            model = cls(t["weight"], hex_float(meta["bias"], "bias"), info=meta.get("info"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{path}: invalid model file: {exc}") from None
        check_linear(path, model)
        return model

    def __repr__(self):
        return f"LinearRanker(num_features={self.num_features}, bias={self.bias:.4g})"


class RankSVM(FitState):
    r"""Linear RankSVM trained by L-BFGS on the primal.

    Args:
        C: weight of the pair-loss sum (``> 0``).
        loss: ``"squared_hinge"`` (default, smooth) or ``"hinge"``.
        pairs: ``"graded"`` (default), ``"bipartite"`` or ``ExplicitPairs``.
        standardize: z-score features with training statistics first.
        max_iter: L-BFGS iterations (the rounds); ``tol``: gradient tolerance.
        callbacks: called on every fit (see :mod:`torchrankboost.boosting.callbacks`).

    ``fit(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
    early_stopping_rounds=None, callbacks=())`` returns a :class:`LinearRanker`;
    ``objective_`` holds the final primal value and ``n_iter_`` the objective evaluations
    used. The ``"loss"`` metric of an evaluation set is its data term
    ``C Σ φ(1 - (s_i - s_j))`` (the regulariser does not depend on the set).
    """

    _algorithm = "ranksvm"

    def __init__(self, C: float = 1.0, *, loss: str = "squared_hinge", pairs: PairSpec = None,
                 standardize: bool = True, max_iter: int = 200, tol: float = 1e-9,
                 callbacks: Sequence[Any] = ()):
        if not (isinstance(C, (int, float)) and C > 0):
            raise ValueError(f"C must be a positive number, got {C!r}")
        if loss not in ("squared_hinge", "hinge"):
            raise ValueError(f"loss must be 'squared_hinge' or 'hinge', got {loss!r}")
        self.C = float(C)
        self.loss = loss
        self.pairs = from_params(pairs)
        self.standardize = bool(standardize)
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.callbacks = list(callbacks)
        self._reset_fit_state()

    def _pair_loss(self, scores: Tensor, labels, groups) -> Tensor:
        lf = PairwiseHingeLoss(margin=1.0, squared=self.loss == "squared_hinge")
        return self.C * lf(scores, labels, groups, pairs=self.pairs)

    def objective(self, w: Tensor, Z: Tensor, labels: ArrayLike, groups: GroupsLike) -> Tensor:
        """The primal ``½‖w‖² + C Σ φ(1 - w·(z_i - z_j))`` on standardised features ``Z``."""
        return 0.5 * (w * w).sum() + self._pair_loss(Z @ w, labels, groups)

    def fit(self, X: ArrayLike, labels: ArrayLike, groups: GroupsLike = None, *,
            eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            sample_weight: Optional[ArrayLike] = None, group_weight: Optional[ArrayLike] = None
           ) -> LinearRanker:
        """The ranker contract's ``fit``; ``sample_weight`` ``(n,)`` / ``group_weight``
        ``(Q,)``: a pair of query ``q`` weighs ``c_q w_i w_j`` in the hinge sum."""
        X, labels, groups = fit_inputs(X, labels, groups)
        require_pairs(PairwiseHingeLoss(), labels, groups, pairs=self.pairs)
        fw = fit_weights(sample_weight, group_weight, groups)
        term = self._data_term(labels, groups, fw)
        n, F = X.shape
        monitor = FitMonitor(self, n_features=F, device=X.device, eval_set=eval_set,
                             eval_metric=eval_metric,
                             early_stopping_rounds=early_stopping_rounds,
                             callbacks=list(self.callbacks) + list(callbacks),
                             loss=self._pair_loss)
        Z, mu, sd = self._standardize(X, fw.rows)

        def primal(wz: Tensor) -> Tensor:  # the objective with the fit's weights
            return 0.5 * (wz * wz).sum() + term(Z @ wz)
        w = torch.zeros(F, dtype=torch.float64, device=X.device, requires_grad=True)
        # one iteration a call (a round); max_eval leaves the strong-Wolfe search its 25 trials
        opt = torch.optim.LBFGS([w], lr=1.0, max_iter=1, max_eval=26, tolerance_grad=self.tol,
                                tolerance_change=1e-12, history_size=20,
                                line_search_fn="strong_wolfe")
        evals = [0]

        def closure():
            opt.zero_grad()
            v = primal(w)
            v.backward()
            evals[0] += 1
            return v

        def model_of(wz: Tensor) -> LinearRanker:
            wd = wz.detach() / sd
            return LinearRanker(wd, -float((wd * mu).sum()),
                                info={"C": self.C, "loss": self.loss})

        with torch.no_grad():
            value = float(primal(w))
        monitor.start(FitInfo(algorithm=self._algorithm, n_docs=n,
                              n_queries=groups.num_groups, n_features=F,
                              n_rounds=self.max_iter, initial_loss=value,
                              params={"C": self.C, "loss": self.loss,
                                      "standardize": self.standardize}),
                      build=lambda k: model_of(iterates[k]))
        iterates = [w.detach().clone()]
        for rnd in range(1, self.max_iter + 1):
            value, done = self._iteration(opt, closure, w, value, iterates)
            if not math.isfinite(value):
                raise NumericalError(f"round {rnd}: the RankSVM objective is {value}",
                                     round=rnd, model=model_of(iterates[-2]))
            monitor.set_scores(lambda Xv: model_of(w).predict(Xv))
            record = RoundRecord(round=rnd, loss=value, step=float(opt.state[w].get("t", 0.0)),
                                 extra={"grad_max": float(w.grad.abs().max()),
                                        "n_evals": evals[0]})
            record.weight = record.step
            if monitor.end_round(record) or done:
                break
        self.n_iter_ = evals[0]
        model = monitor.finish(lambda k: model_of(iterates[k]))
        with torch.no_grad():
            self.objective_ = float(primal(iterates[monitor.kept_rounds()]))
        model.info["objective"] = self.objective_
        return model

    def _data_term(self, labels, groups, fw):
        """``scores ↦ C Σ c_q w_i w_j φ(1 - (s_i - s_j))``: the pair sum with the fit's
        weights bound (unweighted: :meth:`_pair_loss`, the same numbers as before)."""
        if not fw.weighted:
            return lambda scores: self._pair_loss(scores, labels, groups)
        bound = PairwiseHingeLoss(margin=1.0, squared=self.loss == "squared_hinge").bind(
            labels, groups, pairs=self.pairs, weights=fw.sample).with_group_weights(fw.group)
        return lambda scores: self.C * bound(scores)

    def _standardize(self, X: Tensor, rows: Optional[Tensor] = None):
        """``(Z, mu, sd)``: the statistics from ``rows`` (the rows of positive weight;
        ``None``: all)."""
        Xd = torch.nan_to_num(X.to(torch.float64), nan=0.0)
        F = X.shape[1]
        if self.standardize:
            Xs = Xd if rows is None else Xd[rows]
            mu = Xs.mean(0)
            sd = Xs.std(0, unbiased=False)
            sd = torch.where(sd > 0, sd, torch.ones_like(sd))
        else:
            mu = torch.zeros(F, dtype=torch.float64, device=X.device)
            sd = torch.ones(F, dtype=torch.float64, device=X.device)
        return (Xd - mu) / sd, mu, sd

    def _iteration(self, opt, closure, w: Tensor, before: float, iterates):
        """One L-BFGS iteration; ``(objective after it, converged)`` (L-BFGS's own tests:
        gradient below ``tol``, or no change in the objective or in ``w``)."""
        opt.step(closure)
        value = float(closure().detach())  # the objective and its gradient at the new w
        prev = iterates[-1]
        iterates.append(w.detach().clone())
        done = (float(w.grad.abs().max()) <= self.tol or abs(value - before) < 1e-12
                or float((w.detach() - prev).abs().max()) <= 1e-12)
        return value, done
