r"""The stagewise boosting driver (Zheng et al.'s Algorithm 1 with Friedman's shrinkage).

For a loss :math:`L(s)` of the document scores (any callable ``loss(scores, labels, groups)``
returning a differentiable scalar), each round

1. takes the gradient :math:`g = \nabla L(s)` and a per-document curvature :math:`h`
   (exact Hessian diagonal, a diagonal upper bound of the Hessian, or 1);
2. fits the weak learner by weighted least squares to :math:`r = -g/h` with weights
   :math:`h` — this minimises the quadratic model
   :math:`L(s) + g^\top f + \tfrac12 f^\top \mathrm{diag}(h) f` over the learner's class
   (with ``curvature="none"``: to :math:`-g` with unit weights, Friedman's boosting);
3. picks a step :math:`\alpha` (by default the minimiser of the quadratic model along
   :math:`f`, :math:`\alpha = -g^\top f / f^\top \mathrm{diag}(h) f`, which is 1 — the
   per-leaf Newton values — for a least-squares tree; or the exact line search of
   :math:`\varphi(\alpha) = L(s+\alpha f)`, one Newton step on :math:`\alpha`, or
   :math:`\alpha=1`);
4. updates :math:`s \leftarrow s + \nu\,\alpha f` with shrinkage (learning rate) :math:`\nu`.

With ``curvature="bound"`` (a valid diagonal upper bound of the Hessian, e.g. QBRank's
:math:`\mathrm{diag}(2,2)` per pair) and ``step="fixed"``, ``ν ≤ 1``, every round decreases
the loss (Zheng et al., Eq. 6: the fitted tree minimises an upper bound that equals the loss
at :math:`f=0`). With ``"line_search"`` every step decreases the loss for any convex loss;
``"surrogate"`` halves its step until the loss does not increase.

Everything the driver asks of the loss goes through the fit's
:class:`~.objective.FitObjective`: the loss is bound to the training labels once per fit
(``loss.bind(labels, groups)``, see :class:`torchrankboost.losses.BoundLoss`), and the
``"surrogate"`` and ``"fixed"`` steps evaluate the loss, its gradient and its curvature at the
new scores in one pass (``value_grad_hess``), which the next round reuses. The step rules are
the objects of :mod:`~.step_rules`; a rule that fails raises one ``StepFailed``, turned here
into the fit's error or stop. This module is the round loop.

Scores, gradients and curvatures are kept in float64.

**Data-parallel** (``distributed``, :mod:`torchrankboost.parallel`): each rank holds whole
queries (a query is never split, so every ranking loss is a sum of per-rank terms) and
computes the gradient and curvature of its own queries with the bound loss. What the ranks
agree on, so that every rank takes the same decisions and builds the same model:

* at the start: the feature count, the label dtype and the number of evaluation sets
  (``check_same``); the document and query counts; the bin edges (the learner's
  ``prepare(X, context=...)``: the seeded binning sample of all ranks' rows, gathered once —
  the single-process edges of the concatenated data); the base score (``"auto"``: its line
  search on the summed loss);
* each round, one small all-reduce before the learner (``Σ|h|`` and the document count
  for the ``hess_floor`` mean, ``Σ g²`` and each rank's ``max|g|``), the learner's own sums
  (a tree: every node histogram it builds), one all-reduce after it (``Σ g f``, ``Σ h f²``,
  the curvature's sums and the subsample's row count), one per loss evaluation of the step rule (the surrogate's halving tests, the line
  search's ``φ``, ``φ'``, ``φ''``), and the monitor's metrics and closing flag;
* the query subsample: the single-process draw over the global query numbering (the shards
  in rank order, as :meth:`~torchrankboost.data.RankingData.shard` and
  :func:`~torchrankboost.data.load_svmlight_shard` cut them), each rank keeping its
  own queries of it.

Every collective carries a failure flag (:class:`~torchrankboost.parallel.FitComm`; its
operations are identities in one process, so the fit calls them unconditionally): a rank
that fails in local work (a bad shard, a NaN gradient, a raising callback) makes every rank
raise the same :class:`~torchrankboost.parallel.DistributedError` naming it, at the next
collective instead of a hang. Rank 0 alone runs the callbacks (progress, TensorBoard, yours);
the model is the same on every rank (save it on rank 0). It is the single-process model of
the whole data, bit for bit, for any split of the queries over the ranks and any order of
them: every sum that feeds it is exact (the learner's integer histograms; the round's sums,
the loss values and the metrics summed per query in row order, then exactly over the
queries and the ranks, :mod:`torchrankboost.exact`).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..contract import (ArrayLike, DeviceLike, EvalSets, FitInfo, MetricSpec, NumericalError,
                        PathLike, RoundRecord, UnboundedDirectionError)
from ..groups import Groups, GroupsLike
from .._threads import check_threads
from .progress import ProgressCallback
from .callbacks import PrintCallback
from .ensemble import Ensemble, weak_summary
from ..parallel import DistContext, FitComm, get_context, supports_data_parallel
from .evaluation import FitMonitor, FitState
from .checkpoint import Start, booster_resume, open_start
from .inputs import count_eval_sets, fit_inputs
from .objective import FitObjective, LossCapabilities
from .options import base_score_option, check_options
from .step_rules import StepFailed, StepProblem, StepResult, step_rule
from ..params import describe, from_params
from ._round_sums import all_finite, gradient_stats, moved, step_sums
from .weak_fit import QuerySubsample, fit_learner, learner_targets
from .weights import FitWeights, fit_weights, prepare_learner, split_init_score

_log = logging.getLogger("torchrankboost")

__all__ = ["Booster", "UnboundedDirectionError"]

F64 = torch.float64


@dataclass
class _Run:
    """The state of one fit (the loop's working set; where the loss stands — the scores, the
    loss value, the pending gradient — is the objective's)."""

    X: Tensor
    groups: Groups
    prepared: Any
    objective: FitObjective
    rule: Callable[[StepProblem], StepResult]
    ensemble: Ensemble
    monitor: FitMonitor
    subsample: QuerySubsample  # the rows the learner sees each round
    sync: Callable[[], None]
    t_fit: float
    comm: FitComm  # its operations are identities in one process
    weights: FitWeights  # document / query weights
    n_total: int = 0  # documents on all ranks
    q_total: int = 0  # queries on all ranks
    rounds: range = range(0)  # the rounds this fit runs (checkpoint.Start: continued)


# ----------------------------------------------------------------------------- booster
class Booster(FitState):
    r"""Stagewise boosting of a weak learner on any differentiable ranking loss.

    Args:
        loss: a callable ``loss(scores, labels, groups) -> scalar`` differentiable in
            ``scores``, e.g. any :class:`~torchrankboost.losses.RankingLoss`. When it has
            ``grad_hess(scores, labels, groups, hess=...)`` the closed-form gradient and
            curvature are used; otherwise the gradient comes from autograd and the curvature
            from the autograd fallback (see ``curvature``). What else the driver uses of a
            loss (``bind``, ``preferred_step``, ``resample``, ``round_diagnostics``, ...) is
            listed by :class:`~torchrankboost.boosting.objective.LossCapabilities`.
        learner: an unfitted weak learner (``prepare(X, *, context)``, ``fit(prepared,
            target, weight, *, rows, generator)``; e.g. ``RegressionTree``, ``Stumps``,
            ``FeatureRankers``); a data-parallel fit needs ``supports_data_parallel = True``.
        n_rounds: maximum number of boosting rounds ``T``.
        learning_rate: shrinkage ``ν`` applied after the step (``s += ν α f``).
        step: the step rule (:mod:`~torchrankboost.boosting.step_rules`):

            * ``"auto"`` (default): the loss's ``preferred_step``, ``"fixed"`` for the
              LambdaRank losses, else ``"surrogate"``;
            * ``"surrogate"``: the minimiser of the quadratic model along the weak model's
              output, ``α = −⟨g, f⟩ / Σ h f²``, which is ``α = 1`` — LightGBM's and XGBoost's
              per-leaf Newton values — for a least-squares learner without L2; halved while
              ``L(s + ν α f) > L(s)``, at most 30 times; one loss evaluation per round, fused
              with the next round's gradient when the loss has ``grad_hess``;
            * ``"line_search"``: :func:`~torchrankboost.boosting.steps.line_search` of
              ``L(s + α f)``;
            * ``"newton"``: ``α = −φ'(0)/φ''(0)``, the exact ``φ''(0) = fᵀ∇²L f`` by double
              backward; halved until ``L(s + ν α f) ≤ L(s)``, at most 30 times;
            * ``"fixed"``: ``α = 1`` (the loss at the new scores fused with the next round's
              gradient, as for ``"surrogate"``).
        curvature: the per-document curvature ``h`` the learner is fitted with:

            * ``"diag"`` (Newton / Zheng Alg. 1): the exact Hessian diagonal from
              ``grad_hess(hess="diag")``, or the autograd fallback: the exact diagonal by
              Hessian-vector products — as many as the longest query has documents for a
              loss marked :func:`~torchrankboost.boosting.curvature.per_query`, else ``n`` —
              when they number at most ``exact_hess_max_n``, else unit curvature with a
              warning;
            * ``"bound"``: a diagonal upper bound of the Hessian from
              ``grad_hess(hess="bound")`` (needs a loss that has one);
            * ``"none"``: fit ``−g`` with unit weights (Friedman's gradient boosting).
        subsample: fraction of **queries** the learner sees each round (seeded draw without
            replacement; gradients are still computed on all documents).
        seed: fixes every random choice (query subsampling, the learner's generator).
        callbacks: objects with ``on_fit_start`` / ``on_round_end`` / ``on_fit_end`` (see
            :mod:`torchrankboost.boosting.callbacks`), called on every fit.
            :meth:`fit` takes more for one fit.
        device: where to train (default: the device of ``X``).
        verbose: ``"auto"`` (default: a progress bar on stderr when it is a terminal and no
            progress callback was given, nothing in a log file, a pipe or CI), ``False``
            (nothing), ``True`` (print a line every 10 rounds) or an int period.
        n_threads: torch intra-op threads while ``fit`` runs (default 1, restored
            afterwards; ``None`` keeps torch's setting). Boosting runs many small tensor
            operations, which stall badly with more threads on a busy machine (see
            :mod:`torchrankboost._threads` and the command-line guide of the docs).
        hess_floor: curvatures are clamped below at ``hess_floor × mean(|h|)`` (relative;
            so documents with zero curvature — e.g. inactive pairs under the exact diagonal —
            get a target ``−g/floor`` with a negligible weight instead of ``0/0``; negative
            curvatures of non-convex losses are clamped too). When every curvature is 0 the
            round falls back to unit curvature.
        exact_hess_max_n: most Hessian-vector products per round for the autograd
            exact-diagonal fallback (see ``curvature``).
        on_unbounded: (``step="line_search"``) what to do when the line search finds that
            the loss decreases without bound along the weak model (``φ'`` still negative at
            ``max_step_ratio`` Newton steps — e.g. separable data under an exponential
            loss):

            * ``"stop"`` (default): warn and stop before that round;
            * ``"raise"``: :class:`~torchrankboost.contract.UnboundedDirectionError`,
              carrying the model so far;
            * ``"cap"``: take the capped step and go on.
        max_step_ratio: the line search's cap on ``α`` in units of its first trial step.
        base_score: ``"auto"`` (the loss-minimising constant score, by a line search along
            the all-ones direction; 0 for translation-invariant pairwise losses, the mean
            label for the squared error) or a float.
        eval_train: also evaluate ``eval_metric`` on the training set each round.
        line_search_tol: relative tolerance on ``α`` of the line search (``xtol``; the
            shrinkage makes high accuracy pointless).
        line_search_order: 2 (default): safeguarded Newton steps with ``φ''`` by double
            backward; 1: secant/bisection on ``φ'`` alone (no second derivative: cheaper
            evaluations, and fewer of them where ``φ''`` jumps at kinks, as for QBRank at a
            tight tolerance; the smooth losses need more evaluations with it).
        distributed: data-parallel training over a ``torch.distributed`` process group (see
            the module docstring): ``None`` (default: when a process group of more than one
            process is initialised), ``True`` (requires one), ``False`` (this process
            alone) or a :class:`~torchrankboost.parallel.DistContext`. Each rank passes
            its own shard of whole queries (and of each evaluation set); the loss must be a
            sum over queries (``reduction="sum"``, the default of our losses; a plain
            function: a sum of per-query terms), the learner one whose ``prepare`` takes
            ``context=`` (``RegressionTree``, ``Stumps``, ``FeatureRankers``). Callbacks run
            on rank 0 only.

    After :meth:`fit` (the ranker contract, :mod:`torchrankboost.contract`): ``model_`` (the
    :class:`Ensemble`, also returned), ``history_`` (one
    :class:`~torchrankboost.contract.RoundRecord` per round), ``evals_result_``,
    ``best_round_``, ``best_score_``, ``stop_reason_`` (``None`` or a message),
    ``n_rounds_`` (rounds kept); during and after the fit ``scores_`` holds the current
    training scores (float64, ``(n,)``; callbacks read it, e.g. for score histograms).

    Example::

        >>> from torchrankboost import Booster, RegressionTree
        >>> from torchrankboost.losses import ExponentialPairwiseLoss
        >>> model = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=31),
        ...                 n_rounds=100, learning_rate=0.1).fit(
        ...     X, y, groups, eval_set=[(Xv, yv, gv)], early_stopping_rounds=20)
        >>> scores = model.predict(Xt)
    """

    _algorithm = "boost"  # the registry name callbacks see (QBRank/GBT pass their own)
    can_continue = True  # init_model / resume (see torchrankboost.boosting.checkpoint)

    def __init__(self, loss: Callable, learner: Any, *, n_rounds: int = 100,
                 learning_rate: float = 0.1, step: str = "auto",
                 curvature: str = "diag", subsample: float = 1.0, seed: int = 0,
                 callbacks: Sequence[Any] = (), device: DeviceLike = None,
                 verbose: Union[bool, int, str] = "auto", n_threads: Optional[int] = 1,
                 hess_floor: float = 1e-6, exact_hess_max_n: int = 2048,
                 on_unbounded: str = "stop", max_step_ratio: float = 100.0,
                 base_score: Union[str, float] = "auto", eval_train: bool = False,
                 line_search_tol: float = 1e-3, line_search_order: int = 2,
                 distributed: Union[None, bool, DistContext] = None):
        loss, learner = from_params(loss), from_params(learner)
        caps = LossCapabilities.of(loss)
        step = caps.preferred_step if step == "auto" else step
        check_options(loss, learner, dict(
            n_rounds=n_rounds, learning_rate=learning_rate, step=step, curvature=curvature,
            subsample=subsample, on_unbounded=on_unbounded, hess_floor=hess_floor,
            verbose=verbose, line_search_tol=line_search_tol,
            line_search_order=line_search_order, distributed=distributed))
        base_score = base_score_option(base_score)
        if curvature == "bound" and not caps.grad_hess:
            raise ValueError("curvature='bound' needs a loss with grad_hess(..., hess='bound') "
                             "(a diagonal Hessian upper bound cannot be derived by autograd); "
                             "use curvature='diag' or 'none'")
        self.loss, self.learner = loss, learner
        self.n_rounds = int(n_rounds)
        self.learning_rate = float(learning_rate)
        self.step, self.curvature = step, curvature
        self.subsample, self.seed = float(subsample), int(seed)
        self.callbacks = list(callbacks)
        self.device, self.verbose = device, verbose
        self.n_threads = check_threads(n_threads)
        self.hess_floor = float(hess_floor)
        self.exact_hess_max_n = int(exact_hess_max_n)
        self.on_unbounded = on_unbounded
        self.max_step_ratio = float(max_step_ratio)
        self.base_score = base_score
        self.eval_train = bool(eval_train)
        self.line_search_tol = float(line_search_tol)
        self.line_search_order = int(line_search_order)
        self.distributed = distributed
        self._owner, self._owner_algorithm = None, None  # type: Optional[FitState], Optional[str]
        self._reset_fit_state()
        self.n_rounds_: Optional[int] = None

    def __repr__(self) -> str:
        return (f"Booster(loss={self.loss!r}, learner={self.learner!r}, n_rounds={self.n_rounds}, "
                f"learning_rate={self.learning_rate}, step={self.step!r}, "
                f"curvature={self.curvature!r}, subsample={self.subsample}, seed={self.seed})")

    @property
    def ensemble_(self) -> Optional[Ensemble]:
        """The fitted :class:`Ensemble` (the same object as ``model_``)."""
        return self.model_

    def on_behalf_of(self, ranker: FitState, *, algorithm: str) -> "Booster":
        """Run the fits of this driver for ``ranker``, an algorithm built on it (QBRank,
        GBT): its callbacks see ``ranker``, whose ``model_``, ``history_``,
        ``evals_result_``, ``best_round_``, ``best_score_`` and ``stop_reason_`` the fit
        sets, whose ``init_model`` / ``resume`` support decides, and ``algorithm`` is the
        fit's name in :class:`~torchrankboost.contract.FitInfo`. Returns this booster."""
        self._owner, self._owner_algorithm = ranker, str(algorithm)
        return self

    # ------------------------------------------------------------------ fit
    def fit(self, X: ArrayLike, labels: ArrayLike, groups: GroupsLike = None, *,
            eval_set: EvalSets = None, eval_metric: MetricSpec = "ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence[Any] = (),
            init_score: Union[float, ArrayLike, None] = None,
            sample_weight: Optional[ArrayLike] = None, group_weight: Optional[ArrayLike] = None,
            eval_init_score: Optional[Sequence[Any]] = None, init_model: Any = None,
            resume: Optional[PathLike] = None, position: Optional[ArrayLike] = None) -> Ensemble:
        """Boost for up to ``n_rounds`` rounds and return the :class:`Ensemble`.

        Args:
            X: ``(n, F)`` features (tensor / numpy / scipy sparse; NaN = missing).
            labels: ``(n,)`` relevance labels (no NaN).
            groups: :class:`~torchrankboost.Groups`, a ``(n,)`` array of contiguous query ids,
                or ``None`` (one query).
            eval_set: ``[(X_v, labels_v, groups_v)]`` evaluated every round (``valid_0``, ...).
            eval_metric: a name (``"ndcg@10"``, ``"map"``, ``"auc"``, ``"pos_above_neg"``,
                ``"loss"`` = this booster's loss on that set, ... see
                :func:`torchrankboost.registry.metric`), a callable ``f(scores, labels,
                groups)``, a ``(name, fn, greater_is_better)`` tuple, or a list of them; the
                first one drives early stopping.
            early_stopping_rounds: stop when the first metric on the first eval set has not
                improved for this many rounds, and keep the best round's model (the
                ensemble is cut back to ``best_round_`` rounds).
            callbacks: more callbacks for this fit (after the constructor's).
            init_score: a constant initial score (overrides ``base_score``) or ``(n,)``
                per-document offsets (not part of the model; see
                :mod:`~torchrankboost.boosting.weights`).
            sample_weight: ``(n,)`` document weights (finite, ``>= 0``).
            group_weight: ``(Q,)`` query weights (finite, ``>= 0``).
            eval_init_score: one offset per evaluation set (``None``, a float or ``(n_v,)``).
            init_model: continue an :class:`Ensemble` (or its path, or a fitted algorithm)
                by ``n_rounds`` rounds (:mod:`~torchrankboost.boosting.checkpoint`).
            resume: a checkpoint of this fit (its path), resumed exactly (``n_rounds``: the total).
            position: ``(n,)`` displayed ranks of click labels (1-based, 0 = not shown), with a
                debiasing loss of :mod:`torchrankboost.clicks.debias` (state kept in ``info``).

        Raises:
            ValueError: lengths of ``X``/``labels``/``groups`` disagree, NaN labels, an empty
                training set, an eval set with a different number of features.
            NumericalError: the loss, its gradient or the weak model's output became
                NaN/inf, or the step is undefined (``round`` and ``model``, the last good
                ensemble, are set); :class:`UnboundedDirectionError` with
                ``on_unbounded="raise"``.
            DistributedError: (data-parallel) some rank failed in its local work (a bad
                shard, a NaN gradient of its queries, a callback on rank 0): raised on every
                rank, naming the failing ranks and their errors (on a failing rank the
                original exception is the ``__cause__``). Settings that differ between the
                ranks (feature count, label dtype, number of evaluation sets) raise
                ``ValueError`` on every rank.
        """
        start = open_start(self._owner or self, init_model, resume, init_score=init_score)
        run = self._begin(X, labels, groups, start, eval_set=eval_set, eval_metric=eval_metric,
                          early_stopping_rounds=early_stopping_rounds, callbacks=callbacks,
                          init_score=init_score, sample_weight=sample_weight,
                          group_weight=group_weight, eval_init_score=eval_init_score,
                          position=position)
        for rnd in run.rounds:
            if not self._round(run, rnd):
                break
        model = run.monitor.finish(lambda n: self._final_model(run, n))
        self.n_rounds_ = model.n_rounds
        if run.monitor.ranker is not self:  # an algorithm built on the driver (QBRank, GBT)
            for name in ("model_", "history_", "evals_result_", "best_round_", "best_score_",
                         "stop_reason_"):
                setattr(self, name, getattr(run.monitor.ranker, name))
        return model

    def _begin(self, X, labels, groups, start: Optional[Start], *, eval_set, eval_metric,
               early_stopping_rounds, callbacks, init_score, sample_weight, group_weight,
               eval_init_score, position) -> _Run:
        """Input checks, the bound loss, evaluation sets, base score, the initial loss,
        ``on_fit_start``, the continued or resumed state."""
        t_fit = time.perf_counter()
        comm = FitComm(get_context(self.distributed))
        objective = FitObjective(self.loss, curvature=self.curvature,
                                 exact_hess_max_n=self.exact_hess_max_n, comm=comm)
        dev = torch.device(self.device) if self.device is not None else None
        with comm.local():  # a bad shard on one rank: DistributedError on every rank
            X, labels, groups = fit_inputs(X, labels, groups, device=dev)
            fw = fit_weights(sample_weight, group_weight, groups, context=comm.ctx)
            init_score, offsets = split_init_score(init_score, X.shape[0], device=X.device)
            self._check_distributable(comm, objective)
            objective.bind(labels, groups, weights=fw, position=position,
                           continued=start.ensemble.info if start else None)
        comm.check()
        dev, (n, F) = X.device, X.shape
        n_total, q_total, q_offset = self._agree(comm, objective, X, labels, groups, eval_set)
        cbs = self._fit_callbacks(callbacks)
        base = start.base_score if start else self._base_score(
            0.0 if offsets is not None else init_score, objective, n, dev)
        # the ranker callbacks see and whose attributes the fit sets (see on_behalf_of)
        with comm.local():
            monitor = FitMonitor(self._owner or self, n_features=F, device=dev,
                                 eval_set=eval_set, eval_metric=eval_metric,
                                 early_stopping_rounds=early_stopping_rounds, callbacks=cbs,
                                 loss=self.loss, base_score=base,
                                 train=(labels, groups) if self.eval_train else None,
                                 comm=comm, eval_init_score=eval_init_score)
        comm.check()
        s = start.scores(X) if start else torch.full((n,), base, dtype=F64, device=dev)
        self.scores_ = s = s if offsets is None else s + offsets
        loss0 = objective.start(s)  # ValueError: a pairwise loss without pairs
        if not math.isfinite(loss0):
            raise NumericalError(f"the loss is {loss0} at the initial scores (base score "
                                 f"{base})", round=None, model=None)
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        rule = step_rule(self.step, line_search_order=self.line_search_order,
                         line_search_tol=self.line_search_tol, max_step_ratio=self.max_step_ratio)
        subsample = QuerySubsample(self.subsample, seed=self.seed, q_total=q_total,
                                   q_offset=q_offset)
        ensemble = start.ensemble if start else Ensemble([], [], base_score=base, num_features=F)
        run = _Run(X=X, groups=groups,
                   prepared=prepare_learner(self.learner, X, comm.ctx, fw.rows),
                   objective=objective, rule=rule, ensemble=ensemble, monitor=monitor,
                   subsample=subsample, sync=sync, t_fit=t_fit, comm=comm, weights=fw,
                   n_total=n_total, q_total=q_total)
        self._announce(run, base, str(dev), loss0)
        run.rounds = booster_resume(
            start, n_rounds=self.n_rounds, monitor=monitor, ensemble=run.ensemble,
            objective=objective, generator=run.subsample.generator, X=X,
            facts=dict(algorithm=type(monitor.ranker).__name__, n_docs=run.n_total,
                       n_queries=run.q_total, seed=self.seed, subsample=self.subsample))
        return run

    def _fit_callbacks(self, callbacks: Sequence) -> list:
        """The constructor's callbacks, the fit's, and the progress display of ``verbose``."""
        cbs = list(self.callbacks) + list(callbacks)
        if self.verbose == "auto":
            if not any(isinstance(cb, (ProgressCallback, PrintCallback)) for cb in cbs):
                bar = ProgressCallback()
                if bar.is_tty():  # a terminal: a bar; a log file, a pipe, CI: nothing
                    cbs.append(bar)
        elif self.verbose:
            cbs.append(PrintCallback(10 if self.verbose is True else int(self.verbose)))
        return cbs

    def _announce(self, run: _Run, base: float, device: str, loss0: float) -> None:
        """The fit's parameters and :class:`FitInfo` to ``on_fit_start`` (and the log)."""
        params = dict(loss=describe(self.loss), learner=describe(self.learner), step=self.step,
                      curvature=self.curvature, learning_rate=self.learning_rate,
                      subsample=self.subsample, seed=self.seed, device=device,
                      base_score=base)
        resolve = getattr(self.learner, "resolve_kernel", None)
        if callable(resolve):  # which tree kernels run (compiled or torch), said once per fit
            params["kernel"] = resolve(run.prepared)
            _log.info("Booster: %s trees on the %s kernels", type(self.learner).__name__,
                      params["kernel"])
        params.update(run.comm.describe())
        algorithm = self._owner_algorithm if self._owner is not None else self._algorithm
        run.monitor.start(FitInfo(algorithm=algorithm, n_docs=run.n_total,
                                  n_queries=run.q_total, n_features=run.X.shape[1],
                                  n_rounds=self.n_rounds, params=params, initial_loss=loss0),
                          build=lambda k: self._final_model(run, k))

    # ------------------------------------------------------------------ data-parallel
    def _check_distributable(self, comm: FitComm, objective: FitObjective) -> None:
        """What a data-parallel fit needs of the loss and the learner (``ValueError``; the
        checks apply on several ranks only)."""
        comm.require(objective.caps.reduction != "mean",
                     "loss: reduction='mean' averages over this rank's queries only; a "
                     "data-parallel fit needs a loss summed over queries (reduction='sum')")
        comm.require(supports_data_parallel(self.learner),
                     f"learner: {type(self.learner).__name__} does not declare "
                     f"supports_data_parallel, so its sums would stay per rank; a "
                     f"data-parallel fit needs a learner that combines them (RegressionTree, "
                     f"Stumps, FeatureRankers)")

    def _agree(self, comm: FitComm, objective: FitObjective, X, labels, groups,
               eval_set) -> Tuple[int, int, int]:
        """Start-of-fit agreement of the ranks: what must be the same, the global sizes
        ``(documents, queries, this rank's first query)`` (this process's own in one
        process) and the autograd curvature's probe count."""
        ctx = comm.ctx
        ctx.check_same("the number of features", int(X.shape[1]))
        ctx.check_same("the label dtype", str(labels.dtype))
        ctx.check_same("the number of eval sets", count_eval_sets(eval_set))
        probes = objective.local_probes(X.shape[0], groups)
        rows = comm.gather([X.shape[0], groups.num_groups, probes], size=3)  # (W, 3)
        objective.agree_probes(rows[:, 2])
        return (int(rows[:, 0].sum()), int(rows[:, 1].sum()),
                int(rows[: comm.rank, 1].sum()))

    def _base_score(self, init_score, objective: FitObjective, n: int, dev) -> float:
        """The initial constant score: ``init_score``, the float ``base_score``, or (for
        ``"auto"``) the loss-minimising constant over every rank."""
        if init_score is not None:  # checked finite by split_init_score
            return float(init_score)
        if isinstance(self.base_score, float):
            return self.base_score
        return objective.constant_minimiser(n, dev, max_ratio=self.max_step_ratio)

    # ------------------------------------------------------------------ one round
    def _round(self, run: _Run, rnd: int) -> bool:
        """One boosting round; ``False`` when training stops. The sums that decide the round
        go through the fit's :class:`~torchrankboost.parallel.FitComm`: all-reduced (each
        carrying the failure flag) in a data-parallel fit, the local values in one process."""
        comm, W, t0, obj = run.comm, run.comm.world_size, time.perf_counter(), run.objective
        obj.begin_round(rnd)  # per-round draws (YetiRank), a debiasing loss's update (clicks)
        run.ensemble.info.update(obj.model_info())
        g = h = ckind = rows = None
        with comm.local():
            g, h, ckind = self._grad_curv(run, rnd)
            rows = run.weights.subset(run.subsample.rows(run.groups, run.X.device))

        spare, offsets = [], run.groups.offsets  # spare: the stats' (n,) scratch, then the target

        def first():  # n, each rank's max |g| in its own slot; Σ|h|, Σ g² exactly
            out = torch.zeros(1 + W, dtype=F64)
            out[0] = run.weights.count(g.numel())
            acc, gmax, buf = gradient_stats(g, h, offsets)
            if g.numel():
                out[1 + comm.rank], spare[:] = gmax, [buf]
            return out, acc

        st, ex = comm.exact_sums(first, plain=1 + W, exact=2)  # ex: Σ|h|, Σ g²
        mean_h = float(ex[0]) / float(st[0]) if float(st[0]) > 0 else 0.0
        target, weight, hc, ckind = learner_targets(
            g, h, ckind, curvature=self.curvature, hess_floor=self.hess_floor, mean_h=mean_h,
            work=spare[0] if spare else None)
        target, weight, hc = run.weights.mask(target, weight, hc)
        run.sync()
        t1 = time.perf_counter()
        model, f = fit_learner(self.learner, run.prepared, target, weight, rows=rows,
                               seed=self.seed, rnd=rnd, device=run.X.device)
        with comm.local():
            f = self._check_output(run, rnd, f, target)
        run.sync()
        t2 = time.perf_counter()
        n_rows = run.X.shape[0] if rows is None else int(rows.numel())
        n_sum, sums = comm.exact_sums(lambda: ([n_rows], step_sums(g, hc, f, offsets)),
                                      plain=1, exact=4)
        step = self._take_step(run, rnd, f, float(sums[0]), float(sums[1]))
        if step is None:
            return False
        loss_before, w_round = obj.value, self.learning_rate * step.alpha
        self._apply(run, rnd, step, w_round, model, f)
        run.sync()
        combined = {"grad_norm": math.sqrt(float(ex[1])), "grad_max": float(st[1:].max()),
                    "curvature_norm": math.sqrt(float(sums[2])),
                    "curvature_mean": float(sums[3]) / max(float(st[0]), 1.0),
                    "n_rows": int(n_sum[0])}
        record = self._record(run, rnd, step, w_round, loss_before, ckind, model,
                              (t0, t1, t2, time.perf_counter()), combined)
        run.monitor.add([(model, w_round)])
        return not run.monitor.end_round(record, train_scores=obj.scores)

    def _failure(self, run: _Run, rnd: int, message: str) -> NumericalError:
        """A :class:`NumericalError` for round ``rnd`` carrying the last good model."""
        model = run.ensemble.truncate(run.ensemble.n_rounds)
        return NumericalError(f"round {rnd}: {message}", round=rnd, model=model)

    def _grad_curv(self, run: _Run, rnd: int):
        """The loss gradient and curvature at the current scores, checked finite."""
        g, h, kind = run.objective.gradient()
        checks = [(g, "gradient")] + ([(h, "curvature")] if self.curvature != "none" else [])
        if g.numel() and all_finite(torch.stack([x.sum() for x, _ in checks]).to(F64)):
            return g, h, kind  # finite sums: every entry finite (one host read)
        for x, name in checks:
            if not all_finite(x):
                raise self._failure(run, rnd, f"the loss {name} has NaN/inf entries")
        return g, h, kind

    def _check_output(self, run: _Run, rnd: int, f: Tensor, target: Tensor) -> Tensor:
        """The weak model's output as ``(n,)`` float64, checked (local work)."""
        n = run.X.shape[0]
        f = f.to(F64)
        if f.shape != (n,):
            raise ValueError(f"round {rnd}: the weak model's predict_prepared returned shape "
                             f"{tuple(f.shape)}, expected ({n},)")
        if not all_finite(f):
            raise self._failure(run, rnd, f"the weak model predicts NaN/inf (targets had "
                                          f"range [{float(target.min()):.3g}, "
                                          f"{float(target.max()):.3g}])")
        return f

    def _take_step(self, run: _Run, rnd: int, f: Tensor, gf: float, hff: float
                   ) -> Optional[StepResult]:
        """The step rule's step along ``f`` (``Σ g f``, ``Σ h f²`` over every rank), or
        ``None``: stop before this round (a converged fit, an unbounded direction's stop)."""
        try:
            step = run.rule(StepProblem(run.objective, f, gf, hff, self.learning_rate, rnd))
        except StepFailed as exc:  # the one place a rule's failure becomes the fit's
            step = self._step_failed(run, rnd, exc)
            if step is None:
                return None
        if not math.isfinite(step.alpha):
            raise self._failure(run, rnd, f"the step size is {step.alpha}")
        if step.alpha == 0.0 and self.subsample >= 1.0:
            run.monitor.stop(f"round {rnd}: no step along the weak model decreases the loss "
                             f"({step.info.get('status')}); converged")
            return None
        return step

    def _step_failed(self, run: _Run, rnd: int, exc: StepFailed) -> Optional[StepResult]:
        """A numerical failure: :class:`NumericalError`. An unbounded direction: the
        ``on_unbounded`` policy (raise, warn and stop: ``None``, or the capped step)."""
        if not exc.unbounded:
            raise self._failure(run, rnd, exc.message) from None
        msg = f"round {rnd}: {exc.message}"
        if self.on_unbounded == "raise":
            raise UnboundedDirectionError(msg, round=rnd,
                                          model=run.ensemble.truncate(run.ensemble.n_rounds)
                                          ) from None
        if self.on_unbounded == "stop":
            warnings.warn(msg + "; stopping before this round", stacklevel=6)  # fit's caller
            run.monitor.stop(msg)
            return None
        return exc.capped

    def _apply(self, run: _Run, rnd: int, step: StepResult, w_round: float, model, f) -> None:
        """``s ← s + ν α f``, the new loss, the ensemble's new round."""
        obj = run.objective
        s_new = step.scores if step.scores is not None else moved(obj.scores, w_round, f)
        loss_new = step.value if step.value is not None else obj.evaluate(s_new).value
        if not math.isfinite(loss_new):
            raise self._failure(run, rnd, f"the loss is {loss_new} after the update (step "
                                          f"{step.alpha:.4g}, weight {w_round:.4g}); the loss "
                                          f"or the weak learner produced non-finite values")
        obj.move_to(s_new, loss_new, step.pending)
        self.scores_ = s_new  # current training scores, for callbacks (score histograms)
        run.ensemble.append(model, w_round)

    def _record(self, run: _Run, rnd: int, step: StepResult, w_round: float,
                loss_before: float, ckind: str, model, times, combined: dict) -> RoundRecord:
        """The round's :class:`RoundRecord` (the driver's diagnostics in ``extra``, from the
        round's ``combined`` sums: over every rank of a data-parallel fit, where the loss's
        own ``round_diagnostics`` are left out: they are not sums over queries)."""
        t0, t1, t2, t3 = times
        extra = {"loss_before": loss_before, "learning_rate": self.learning_rate,
                 **combined, "curvature_kind": ckind, "line_search": step.info,
                 "seconds_grad": t1 - t0, "seconds_learner": t2 - t1, "seconds_step": t3 - t2,
                 "learner": weak_summary(model)}
        extra.update(run.comm.describe())
        for k, v in run.objective.round_diagnostics().items():  # e.g. AdaBoostLoss's F-skew
            extra.setdefault(k, v)
        return RoundRecord(round=rnd, loss=run.objective.value, step=step.alpha,
                           weight=w_round, extra=extra)

    def _final_model(self, run: _Run, n_rounds: int) -> Ensemble:
        ens = run.ensemble.truncate(n_rounds)
        ens.info.update({
            "loss": describe(self.loss), "learner": describe(self.learner), "step": self.step,
            "curvature": self.curvature, "learning_rate": self.learning_rate,
            "seed": self.seed, "fit_seconds": time.perf_counter() - run.t_fit,
        })
        return ens
