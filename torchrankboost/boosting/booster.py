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
at :math:`f=0`). With ``"line_search"`` every step decreases the loss for any convex loss; ``"surrogate"``
halves its step until the loss does not increase.

The loss is bound to the training labels once per fit (``loss.bind(labels, groups)``, see
:class:`torchrankboost.losses.BoundLoss`): the label structure is computed once, and the
``"surrogate"`` step evaluates the loss, its gradient and its curvature at the new scores in
one pass (``value_grad_hess``), which the next round reuses.

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
* each round, one small all-reduce before the learner (``Σ|h|`` and the document count for
  the ``hess_floor`` mean, ``Σ g²`` and each rank's ``max|g|`` for the record), the
  learner's own sums (a tree: every node histogram it builds and the leaf sums), one
  all-reduce after it (``Σ g f``, ``Σ h f²``, the curvature's sums and the subsample's row
  count), one per loss evaluation of the step rule (the surrogate's halving tests, the line
  search's ``φ``, ``φ'``, ``φ''``), and the monitor's metrics and closing flag;
* the query subsample: the single-process draw over the global query numbering (the shards
  in rank order, as :meth:`~torchrankboost.data.RankingData.shard` and
  :func:`~torchrankboost.data.load_svmlight_shard` cut them), each rank keeping its
  own queries of it.

Every collective carries a failure flag (:class:`~torchrankboost.parallel.FitComm`; its
operations are identities in one process, so the fit calls them unconditionally): a rank
that fails in local work (a bad shard, a NaN gradient, a raising callback) makes every rank
raise the same :class:`~torchrankboost.parallel.DistributedError` naming it, at the next
collective instead of a hang. Rank 0 alone runs the callbacks (progress, TensorBoard, yours); the model
is the same on every rank (save it on rank 0). With the shards of a data set in rank order
the model is the single-process model of the whole data up to floating-point summation
order (the same trees, leaf values equal to about 1e-12).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..contract import FitInfo, NumericalError, RoundRecord, UnboundedDirectionError
from ..groups import Groups
from .._threads import check_threads
from ..progress import ProgressCallback
from .callbacks import PrintCallback
from .ensemble import Ensemble, weak_summary
from ..parallel import DistContext, FitComm, get_context, supports_data_parallel
from .evaluation import FitMonitor, FitState
from .checkpoint import booster_resume, open_start
from .debias import between_rounds, bind_position
from .inputs import count_eval_sets as _count_sets, fit_inputs
from .objective import autograd_grad_hess, bind, initial_loss, scalar
from .stochastic import refresh_round
from .fixed_step import fixed_update
from ..params import describe, from_params
from .steps import decreases, line_search, newton_from_values, shift_minimiser, summed_evaluate
from ._round_sums import all_finite, gradient_stats, moved, newton_target, step_sums
from .weights import FitWeights, fit_weights, prepare_learner, split_init_score
from ..curvature import hessian_diagonal, hvp_probes, is_per_query

_log = logging.getLogger("torchrankboost")

__all__ = ["Booster", "UnboundedDirectionError", "hessian_diagonal", "autograd_grad_hess"]

F64 = torch.float64
STEPS = ("surrogate", "line_search", "newton", "fixed")
CURVATURES = ("diag", "bound", "none")
UNBOUNDED = ("stop", "raise", "cap")


def _seed_for(seed: int, rnd: int) -> int:
    return (int(seed) * 1_000_003 + 7919 * int(rnd) + 17) % (2 ** 63 - 1)


@dataclass
class _Run:
    """The state of one fit (the loop's working set)."""

    X: Tensor
    labels: Tensor
    groups: Groups
    prepared: Any
    scores: Tensor
    loss: float
    ensemble: Ensemble
    monitor: FitMonitor
    sub_gen: torch.Generator
    sync: Callable[[], None]
    t_fit: float
    bound: Any = None  # the loss bound to (labels, groups): value / grad_hess at any scores
    pending: Optional[tuple] = None  # (scores, g, h, kind) computed with the last loss value
    comm: Any = None  # the FitComm (its operations are identities in one process)
    n_total: int = 0  # documents on all ranks
    q_total: int = 0  # queries on all ranks
    q_offset: int = 0  # this rank's first query in the global numbering (shards in rank order)
    probes: int = 0  # Hessian-vector products of the autograd curvature, over all ranks
    rounds: range = range(0)  # the rounds this fit runs (checkpoint.Start: continued)
    weights: FitWeights = field(default_factory=FitWeights)  # document / query weights


@dataclass
class _Step:
    """The step rule's answer: ``alpha`` (``None``: stop before this round), the loss at the
    updated scores when the rule computed it, the line search's diagnostics."""

    alpha: Optional[float]
    new_loss: Optional[float] = None
    info: dict = field(default_factory=dict)
    scores: Optional[Tensor] = None  # s + ν α f when the rule computed it (with new_loss)


# ----------------------------------------------------------------------------- booster
class Booster(FitState):
    r"""Stagewise boosting of a weak learner on any differentiable ranking loss.

    Args:
        loss: a callable ``loss(scores, labels, groups) -> scalar`` differentiable in
            ``scores``, e.g. any :class:`~torchrankboost.losses.RankingLoss`. When it has
            ``grad_hess(scores, labels, groups, hess=...)`` the closed-form gradient and
            curvature are used; otherwise the gradient comes from autograd and the curvature
            from the autograd fallback (see ``curvature``).
        learner: an unfitted weak learner (``prepare(X, *, context)``, ``fit(prepared,
            target, weight, *, rows, generator)``; e.g. ``RegressionTree``, ``Stumps``,
            ``FeatureRankers``); a data-parallel fit needs ``supports_data_parallel = True``.
        n_rounds: maximum number of boosting rounds ``T``.
        learning_rate: shrinkage ``ν`` applied after the step (``s += ν α f``).
        step: ``"auto"`` (default: the loss's ``preferred_step``, ``"fixed"`` for the LambdaRank
            losses, else ``"surrogate"``), ``"surrogate"`` (the minimiser of the quadratic model
            along the weak model's output, ``α = −⟨g, f⟩ / Σ h f²``, ``α = 1`` — LightGBM's and
            XGBoost's per-leaf Newton values — for a least-squares learner without L2; halved
            while ``L(s + ν α f) > L(s)``, at most 30 times; one loss evaluation per round, fused
            with the next round's gradient when the loss has ``bind``), ``"line_search"``
            (:func:`~torchrankboost.boosting.steps.line_search` of ``L(s + α f)``), ``"newton"``
            (``α = −φ'(0)/φ''(0)``, the exact ``φ''(0) = fᵀ∇²L f`` by double backward; halved
            until ``L(s + ν α f) ≤ L(s)``, at most 30 times) or ``"fixed"`` (``α = 1``).
        curvature: ``"diag"`` (Newton / Zheng Alg. 1: the exact Hessian diagonal from
            ``grad_hess(hess="diag")``, or the autograd fallback: the exact diagonal by
            Hessian-vector products — as many as the longest query has documents for a
            loss marked :func:`~torchrankboost.curvature.per_query`, else ``n`` — when they
            number at most ``exact_hess_max_n``, else unit curvature with a warning), ``"bound"`` (a diagonal upper bound of the Hessian from
            ``grad_hess(hess="bound")``; needs a loss that has one) or ``"none"`` (fit
            ``−g`` with unit weights: Friedman's gradient boosting).
        subsample: fraction of **queries** the learner sees each round (seeded draw without
            replacement; gradients are still computed on all documents).
        seed: fixes every random choice (query subsampling, the learner's generator).
        callbacks: objects with ``on_fit_start`` / ``on_round_end`` / ``on_fit_end`` (see
            :mod:`torchrankboost.boosting.callbacks`), called on every fit (``fit`` takes
            more).
        device: where to train (default: the device of ``X``).
        verbose: ``"auto"`` (default: a progress bar on stderr when it is a terminal and no
            progress callback was given, nothing in a log file, a pipe or CI), ``False``
            (nothing), ``True`` (print a line every 10 rounds) or an int period.
        n_threads: torch intra-op threads while ``fit`` runs (default 1, restored
            afterwards; ``None`` keeps torch's setting). Boosting runs many small tensor
            operations, which stall badly with more threads on a busy machine (see
            :mod:`torchrankboost._threads` and the README).
        hess_floor: curvatures are clamped below at ``hess_floor × mean(|h|)`` (relative;
            so documents with zero curvature — e.g. inactive pairs under the exact diagonal —
            get a target ``−g/floor`` with a negligible weight instead of ``0/0``; negative
            curvatures of non-convex losses are clamped too). When every curvature is 0 the
            round falls back to unit curvature.
        exact_hess_max_n: most Hessian-vector products per round for the autograd
            exact-diagonal fallback (see ``curvature``).
        on_unbounded: (``step="line_search"``) what to do when the line search finds that
            the loss decreases without bound along the weak model (``φ'`` still negative at ``max_step_ratio`` Newton
            steps — e.g. separable data under an exponential loss): ``"stop"`` (warn and
            stop before that round; default), ``"raise"``
            (:class:`~torchrankboost.contract.UnboundedDirectionError`, carrying the model so
            far) or ``"cap"`` (take the capped step and go on).
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
        distributed: data-parallel training (see the module docstring): ``None`` (default:
            when a process group of several processes is initialised), ``True``, ``False``
            or a :class:`~torchrankboost.parallel.DistContext`; each rank passes its shard
            of whole queries, the loss is a sum over queries (``reduction="sum"``).

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
    _continues = True  # init_model / resume (see torchrankboost.boosting.checkpoint)

    def __init__(self, loss: Callable, learner, *, n_rounds: int = 100,
                 learning_rate: float = 0.1, step: str = "auto",
                 curvature: str = "diag", subsample: float = 1.0, seed: int = 0,
                 callbacks: Sequence = (), device=None,
                 verbose: Union[bool, int, str] = "auto", n_threads: Optional[int] = 1,
                 hess_floor: float = 1e-6, exact_hess_max_n: int = 2048,
                 on_unbounded: str = "stop", max_step_ratio: float = 100.0,
                 base_score: Union[str, float] = "auto", eval_train: bool = False,
                 line_search_tol: float = 1e-3, line_search_order: int = 2,
                 distributed: Union[None, bool, DistContext] = None):
        loss, learner = from_params(loss), from_params(learner)
        if not callable(loss):
            raise ValueError("loss must be callable: loss(scores, labels, groups) -> scalar")
        for meth in ("prepare", "fit"):
            if not callable(getattr(learner, meth, None)):
                raise ValueError(f"learner must have a {meth}() method (a weak learner: "
                                 f"prepare(X, *, context), fit(prepared, target, weight, "
                                 f"*, rows, generator))")
        if int(n_rounds) != n_rounds or n_rounds < 0:
            raise ValueError(f"n_rounds must be a non-negative integer, got {n_rounds}")
        if not (learning_rate > 0 and math.isfinite(learning_rate)):
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        step = getattr(loss, "preferred_step", "surrogate") if step == "auto" else step
        if step not in STEPS:
            raise ValueError(f"step must be one of {STEPS + ('auto',)}, got {step!r}")
        if curvature not in CURVATURES:
            raise ValueError(f"curvature must be one of {CURVATURES}, got {curvature!r}")
        if not (0.0 < subsample <= 1.0):
            raise ValueError(f"subsample must be in (0, 1], got {subsample}")
        if on_unbounded not in UNBOUNDED:
            raise ValueError(f"on_unbounded must be one of {UNBOUNDED}, got {on_unbounded!r}")
        if not (hess_floor > 0):
            raise ValueError(f"hess_floor must be positive, got {hess_floor}")
        if not (isinstance(base_score, str) and base_score == "auto"):
            try:
                base_score = float(base_score)
            except (TypeError, ValueError):
                raise ValueError(f"base_score must be 'auto' or a float, got {base_score!r}"
                                 ) from None
        has_gh = callable(getattr(loss, "grad_hess", None))
        if curvature == "bound" and not has_gh:
            raise ValueError("curvature='bound' needs a loss with grad_hess(..., hess='bound') "
                             "(a diagonal Hessian upper bound cannot be derived by autograd); "
                             "use curvature='diag' or 'none'")
        self.loss = loss
        self.learner = learner
        self.n_rounds = int(n_rounds)
        self.learning_rate = float(learning_rate)
        self.step = step
        self.curvature = curvature
        self.subsample = float(subsample)
        self.seed = int(seed)
        self.callbacks = list(callbacks)
        self.device = device
        if verbose != "auto" and not isinstance(verbose, (bool, int)):
            raise ValueError(f"verbose must be 'auto', a bool or an int, got {verbose!r}")
        self.verbose = verbose
        self.n_threads = check_threads(n_threads)
        self.hess_floor = float(hess_floor)
        self.exact_hess_max_n = int(exact_hess_max_n)
        self.on_unbounded = on_unbounded
        self.max_step_ratio = float(max_step_ratio)
        self.base_score = base_score
        self.eval_train = bool(eval_train)
        if not (0 < line_search_tol < 1):
            raise ValueError(f"line_search_tol must be in (0, 1), got {line_search_tol}")
        self.line_search_tol = float(line_search_tol)
        if line_search_order not in (1, 2) or isinstance(line_search_order, bool):
            raise ValueError(f"line_search_order must be 1 or 2, got {line_search_order!r}")
        self.line_search_order = int(line_search_order)
        if not (distributed is None or isinstance(distributed, (bool, DistContext))):
            raise ValueError(f"distributed must be None, True, False or a DistContext, got "
                             f"{distributed!r}")
        self.distributed = distributed
        self._has_gh = has_gh
        self._owner = None
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

    # ------------------------------------------------------------------ fit
    def fit(self, X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
            early_stopping_rounds: Optional[int] = None, callbacks: Sequence = (),
            init_score=None, sample_weight=None, group_weight=None, eval_init_score=None,
            init_model=None, resume=None, position=None) -> Ensemble:
        """Boost for up to ``n_rounds`` rounds and return the :class:`Ensemble`.

        Args:
            X, labels, groups: ``(n, F)`` features (tensor / numpy / scipy sparse; NaN =
                missing), ``(n,)`` labels, a :class:`~torchrankboost.Groups`, ``(n,)``
                contiguous query ids or ``None`` (one query).
            eval_set, eval_metric, early_stopping_rounds: ``(X_v, labels_v, groups_v)``
                sets (``valid_0``, ...) evaluated after every round, the metrics (a name
                such as ``"ndcg@10"``, ``"loss"`` = this booster's loss, a callable, a
                ``(name, fn, greater_is_better)`` tuple, or a list: see
                :func:`torchrankboost.registry.metric`), the first of which on the first
                set stops after that many rounds without improvement (cut back to
                ``best_round_``).
            callbacks: more callbacks for this fit (after the constructor's).
            init_score, sample_weight, group_weight, eval_init_score: a constant initial
                score (overrides ``base_score``) or ``(n,)`` offsets, ``(n,)`` / ``(Q,)``
                weights, the eval sets' offsets (:mod:`~torchrankboost.boosting.weights`).
            init_model, resume: continue an :class:`Ensemble` (or its path) by ``n_rounds``
                rounds / resume a checkpoint exactly (:mod:`~.checkpoint`).
            position: ``(n,)`` displayed ranks of click labels (a debiasing loss: :mod:`~.debias`).

        Raises:
            ValueError: lengths of ``X``/``labels``/``groups`` disagree, NaN labels, an empty
                training set, an eval set with a different number of features.
            NumericalError: the loss, its gradient or the weak model's output became
                NaN/inf, or the step is undefined (``round`` and ``model``, the last good
                ensemble, are set); :class:`UnboundedDirectionError` with
                ``on_unbounded="raise"``.
            DistributedError: (data-parallel) some rank failed in its local work: raised on
                every rank, naming the failing ranks (see the module docstring).
        """
        start = open_start(self._owner or self, init_model, resume, init_score=init_score)
        run = self._begin(X, labels, groups, eval_set, eval_metric, early_stopping_rounds,
                          callbacks, init_score, (sample_weight, group_weight, eval_init_score, position), start)
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

    def _begin(self, X, labels, groups, eval_set, eval_metric, early_stopping_rounds,
               callbacks, init_score, more=(None,) * 4, start=None) -> _Run:
        """Input checks, evaluation sets, base score, the initial loss, ``on_fit_start``."""
        t_fit = time.perf_counter()
        self._warned_unit = False
        comm = FitComm(get_context(self.distributed))
        dev = torch.device(self.device) if self.device is not None else None
        with comm.local():  # a bad shard on one rank: DistributedError on every rank
            X, labels, groups = fit_inputs(X, labels, groups, device=dev)
            fw = fit_weights(more[0], more[1], groups, context=comm.ctx)
            init_score, offsets = split_init_score(init_score, X.shape[0], device=X.device)
            self._check_distributable(comm)
            bound = bind_position(fw, bind, self.loss, labels, groups, more[3], comm, start)
        comm.check()
        dev = X.device
        n, F = X.shape
        sizes = self._agree(comm, X, labels, groups, eval_set)
        cbs = list(self.callbacks) + list(callbacks)
        if self.verbose == "auto":
            if not any(isinstance(cb, (ProgressCallback, PrintCallback)) for cb in cbs):
                bar = ProgressCallback()
                if bar._is_tty():  # a terminal: a bar; a log file, a pipe, CI: nothing
                    cbs.append(bar)
        elif self.verbose:
            cbs.append(PrintCallback(10 if self.verbose is True else int(self.verbose)))
        base = start.base_score if start else self._base_score(
            0.0 if offsets is not None else init_score, n, labels, groups, dev, comm,
            bound if fw.weighted or more[3] is not None else None)
        # the ranker callbacks see and whose attributes the fit sets (``_owner``: QBRank, GBT)
        with comm.local():
            monitor = FitMonitor(self._owner or self, n_features=F, device=dev,
                                 eval_set=eval_set, eval_metric=eval_metric,
                                 early_stopping_rounds=early_stopping_rounds, callbacks=cbs,
                                 loss=self.loss, base_score=base,
                                 train=(labels, groups) if self.eval_train else None,
                                 comm=comm, eval_init_score=more[2])
        comm.check()
        s = start.scores(X) if start else torch.full((n,), base, dtype=F64, device=dev)
        self.scores_ = s = s if offsets is None else s + offsets
        loss0 = initial_loss(comm, bound, s)  # ValueError: a pairwise loss without pairs
        if not math.isfinite(loss0):
            raise NumericalError(f"the loss is {loss0} at the initial scores (base score "
                                 f"{base})", round=None, model=None)
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        run = _Run(X=X, labels=labels, groups=groups,
                   prepared=prepare_learner(self.learner, X, comm.ctx, fw.rows), weights=fw,
                   scores=s, loss=loss0,
                   ensemble=start.ensemble if start else Ensemble([], [], base_score=base,
                                                                  num_features=F),
                   monitor=monitor, sub_gen=torch.Generator().manual_seed(self.seed),
                   sync=sync, t_fit=t_fit, bound=bound, comm=comm, **sizes)
        params = dict(loss=describe(self.loss), learner=describe(self.learner), step=self.step,
                      curvature=self.curvature, learning_rate=self.learning_rate,
                      subsample=self.subsample, seed=self.seed, device=str(dev),
                      base_score=base)
        resolve = getattr(self.learner, "resolve_kernel", None)
        if callable(resolve):  # which tree kernels run (compiled or torch), said once per fit
            params["kernel"] = resolve(run.prepared)
            _log.info("Booster: %s trees on the %s kernels", type(self.learner).__name__,
                      params["kernel"])
        params.update(comm.describe())
        monitor.start(FitInfo(algorithm=(self._owner or self)._algorithm,
                              n_docs=sizes["n_total"], n_queries=sizes["q_total"],
                              n_features=F, n_rounds=self.n_rounds, params=params,
                              initial_loss=loss0),
                      build=lambda k: self._final_model(run, k))
        booster_resume(self, run, start)
        return run

    # ------------------------------------------------------------------ data-parallel
    def _check_distributable(self, comm: FitComm) -> None:
        """What a data-parallel fit needs of the loss and the learner (``ValueError``; the
        checks apply on several ranks only)."""
        comm.require(getattr(self.loss, "reduction", "sum") != "mean",
                     "loss: reduction='mean' averages over this rank's queries only; a "
                     "data-parallel fit needs a loss summed over queries (reduction='sum')")
        comm.require(supports_data_parallel(self.learner),
                     f"learner: {type(self.learner).__name__} does not declare "
                     f"supports_data_parallel, so its sums would stay per rank; a "
                     f"data-parallel fit needs a learner that combines them (RegressionTree, "
                     f"Stumps, FeatureRankers)")

    def _agree(self, comm: FitComm, X, labels, groups, eval_set) -> dict:
        """Start-of-fit agreement of the ranks: what must be the same, the global sizes
        (this process's own in one process)."""
        ctx = comm.ctx
        ctx.check_same("the number of features", int(X.shape[1]))
        ctx.check_same("the label dtype", str(labels.dtype))
        ctx.check_same("the number of eval sets", _count_sets(eval_set))
        per_query = is_per_query(self.loss)
        probes = (hvp_probes(X.shape[0], groups, per_query)
                  if not self._has_gh and self.curvature == "diag" else 0)
        rows = comm.gather([X.shape[0], groups.num_groups, probes], size=3)  # (W, 3)
        return dict(n_total=int(rows[:, 0].sum()), q_total=int(rows[:, 1].sum()),
                    q_offset=int(rows[: comm.rank, 1].sum()),
                    probes=int(rows[:, 2].max() if per_query else rows[:, 2].sum()))

    @staticmethod
    def _loss_value(comm: FitComm, bound, s: Tensor) -> float:
        """``L(s)`` summed over the ranks (this rank's in one process)."""
        return float(comm.sum(lambda: [float(scalar(bound.value(s)).detach())], size=1)[0])

    def _base_score(self, init_score, n, labels, groups, dev, comm: FitComm, bound=None
                    ) -> float:
        if init_score is not None:  # checked finite by split_init_score
            return float(init_score)
        if isinstance(self.base_score, float):
            return self.base_score
        fn = bound.value if bound is not None else (lambda x: scalar(self.loss(x, labels, groups)))
        return shift_minimiser(comm, fn, n, dev, max_ratio=self.max_step_ratio)

    def _round(self, run: _Run, rnd: int) -> bool:
        """One boosting round; ``False`` when training stops. The sums that decide the round
        go through the fit's :class:`~torchrankboost.parallel.FitComm`: all-reduced (each
        carrying the failure flag) in a data-parallel fit, the local values in one process."""
        comm, W, t0 = run.comm, run.comm.world_size, time.perf_counter()
        refresh_round(self, run, rnd)  # a loss with per-round random state (YetiRank)
        between_rounds(self, run, rnd)  # a debiasing loss's update (clicks)
        g = h = ckind = rows = None
        with comm.local():
            g, h, ckind = self._grad_curv(run, rnd)
            rows = run.weights.subset(self._subsample(run))

        spare = []  # the stats' (n,) scratch, then the learner's target
        def first():  # Σ|h|, n, Σ g², each rank's max |g| in its own slot
            out = torch.zeros(3 + W, dtype=F64)
            if g.numel():
                spare[:] = [gradient_stats(g, h, out, 3 + comm.rank)]
            out[1] = run.weights.count(g.numel())
            return out

        st = comm.sum(first, size=3 + W)
        mean_h = float(st[0]) / float(st[1]) if float(st[1]) > 0 else 0.0
        target, weight, hc, ckind = self._targets(g, h, ckind, mean_h, *spare)
        target, weight, hc = run.weights.mask(target, weight, hc)
        run.sync()
        t1 = time.perf_counter()
        model, f = self._learn(run, rnd, target, weight, rows)
        with comm.local():
            f = self._check_output(run, rnd, f, target)
        run.sync()
        t2 = time.perf_counter()
        n_rows = run.X.shape[0] if rows is None else int(rows.numel())
        sums = comm.sum(lambda: step_sums(g, hc, f, n_rows), size=5)
        step = self._step(run, rnd, g, hc, f, sums=(float(sums[0]), float(sums[1])))
        if step.alpha is None:
            return False
        loss_before, w_round = run.loss, self.learning_rate * step.alpha
        self._apply(run, rnd, step, w_round, model, f)
        run.sync()
        combined = {"grad_norm": math.sqrt(float(st[2])), "grad_max": float(st[3:].max()),
                    "curvature_norm": math.sqrt(float(sums[2])),
                    "curvature_mean": float(sums[3]) / max(float(st[1]), 1.0),
                    "n_rows": int(sums[4])}
        record = self._record(run, rnd, step, w_round, loss_before, ckind, model,
                              (t0, t1, t2, time.perf_counter()), combined)
        run.monitor.add([(model, w_round)])
        return not run.monitor.end_round(record, train_scores=run.scores)

    # ------------------------------------------------------------------ round pieces
    def _curv_kind(self) -> str:
        """The ``hess=`` asked of a loss with ``grad_hess``."""
        return "bound" if self.curvature == "bound" else "diag"

    def _failure(self, run: _Run, rnd: int, message: str) -> NumericalError:
        """A :class:`NumericalError` for round ``rnd`` carrying the last good model."""
        model = run.ensemble.truncate(run.ensemble.n_rounds)
        return NumericalError(f"round {rnd}: {message}", round=rnd, model=model)

    def _grad_curv(self, run: _Run, rnd: int) -> Tuple[Tensor, Tensor, str]:
        """The loss gradient and curvature at the current scores (closed form or autograd)."""
        s, labels, groups = run.scores, run.labels, run.groups
        pending, run.pending = run.pending, None
        if self._has_gh and pending is not None and pending[0] is s:
            _, g, h, kind = pending  # computed with the loss at these scores (last step)
        elif self._has_gh:
            kind = self._curv_kind()
            g, h = run.bound.grad_hess(s, hess=kind)
        else:
            want = "diag" if self.curvature == "diag" else "none"
            probes = run.probes  # decided on every rank's sizes
            if want == "diag" and probes > self.exact_hess_max_n and not self._warned_unit:
                hint = ("" if is_per_query(self.loss) else "; a loss that is a sum of "
                        "per-query terms can say so with @torchrankboost.per_query (then "
                        "the longest query's length is the count)")
                warnings.warn(
                    f"curvature='diag': the loss has no grad_hess and its exact Hessian "
                    f"diagonal needs {probes} Hessian-vector products > exact_hess_max_n = "
                    f"{self.exact_hess_max_n}; using unit curvature (Friedman gradient "
                    f"boosting){hint}", stacklevel=5)  # + FitState's fit wrapper
                self._warned_unit = True
            if want == "diag" and probes > self.exact_hess_max_n:
                want = "none"  # unit curvature (this rank alone may be under the limit)
            g, h, kind = autograd_grad_hess(self.loss, s, labels, groups, hess=want,
                                            max_exact=self.exact_hess_max_n)
        g, h = g.to(F64), h.to(F64)
        if self.curvature == "none":
            kind = "none"
        if not all_finite(g):
            raise self._failure(run, rnd, "the loss gradient has NaN/inf entries")
        if self.curvature != "none" and not all_finite(h):
            raise self._failure(run, rnd, "the loss curvature has NaN/inf entries")
        return g, h, kind

    def _targets(self, g: Tensor, h: Tensor, kind: str, mean_h=None, work=None):
        """``(target, weight, curvature used, kind)`` for the learner's least-squares fit;
        ``mean_h``: the mean of ``|h|`` over every rank's documents (data-parallel)."""
        if self.curvature == "none":
            return -g, None, torch.ones_like(g), kind
        if mean_h is None:
            mean_h = float(h.abs().mean()) if h.numel() else 0.0
        if not mean_h > 0:
            return -g, None, torch.ones_like(g), "unit"
        target, hc = newton_target(g, h, self.hess_floor * mean_h, work)
        return target, hc, hc, kind

    def _subsample(self, run: _Run) -> Optional[Tensor]:
        """The rows of a seeded draw of ``subsample × n_queries`` whole queries (or ``None``)."""
        if self.subsample >= 1.0:
            return None
        G, dev = run.groups.num_groups, run.X.device
        # the draw over the global query numbering (the shards in rank order); this rank's
        # part of it (all of it in one process)
        k = max(1, int(round(self.subsample * run.q_total)))
        pick = torch.randperm(run.q_total, generator=run.sub_gen)[:k]
        off = run.q_offset
        pick = (pick[(pick >= off) & (pick < off + G)] - off).to(dev)
        qmask = torch.zeros(G, dtype=torch.bool, device=dev)
        qmask[pick] = True
        return torch.nonzero(qmask[run.groups.group_index], as_tuple=False).reshape(-1)

    def _learn(self, run: _Run, rnd: int, target, weight, rows):
        """The learner's fit and its output (the collectives of a data-parallel fit)."""
        gen = torch.Generator(device=run.X.device).manual_seed(_seed_for(self.seed, rnd))
        fit_predict = getattr(self.learner, "fit_predict", None)  # optional: output for free
        if fit_predict is not None:
            model, f = fit_predict(run.prepared, target, weight, rows=rows, generator=gen)
        else:
            model = self.learner.fit(run.prepared, target, weight, rows=rows, generator=gen)
            f = model.predict_prepared(run.prepared)
        return model, f

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

    def _step(self, run: _Run, rnd: int, g: Tensor, hc: Tensor, f: Tensor,
              sums: Optional[Tuple[float, float]] = None) -> _Step:
        """The step rule: ``α`` along ``f`` (``alpha=None``: stop before this round).
        ``sums``: ``(Σ g f, Σ h f²)`` over every rank (data-parallel; the loss values are
        then summed over the ranks too)."""
        s, dev = run.scores, run.X.device

        def phi(a):
            return scalar(run.bound.value(s + a.to(dev) * f))

        if self.step == "fixed":  # α = 1; L(s + ν f) fused with its gradient (fixed_step)
            return _Step(1.0, *fixed_update(self, run, f))
        if self.step == "surrogate":
            gf, hff = sums if sums is not None else (float((g * f).sum()),
                                                     float((hc * f * f).sum()))
            step = self._surrogate(run, gf, hff, f)
        elif self.step == "newton":
            hff = sums[1] if sums is not None else float((hc * f * f).sum())
            step = self._newton(run.comm, phi, hff)
        else:
            gf, hff = sums if sums is not None else (float((g * f).sum()),
                                                     float((hc * f * f).sum()))
            step = self._line_search(run, rnd, phi, gf, hff)
        if step.alpha is None:
            return step
        if not math.isfinite(step.alpha):
            raise self._failure(run, rnd, f"the step size is {step.alpha}")
        if step.alpha == 0.0 and self.subsample >= 1.0:
            run.monitor.stop(f"round {rnd}: no step along the weak model decreases the loss "
                             f"({step.info.get('status')}); converged")
            return _Step(None)
        return step

    def _surrogate(self, run: _Run, gf: float, hff: float, f: Tensor) -> _Step:
        """``α = −⟨g, f⟩ / Σ h f²`` (the quadratic model's minimiser along ``f``; negative when
        ``f`` points uphill, e.g. a correlation-selected ranker), halved while
        ``L(s + ν α f) > L(s)`` (30 times at most, then ``α = 0``). The loss at the accepted
        point comes with its gradient and curvature (kept for the next round)."""
        v0 = run.loss
        if not (hff > 0 and gf != 0.0 and math.isfinite(gf) and math.isfinite(hff)):
            return _Step(0.0, None, {"status": "no_descent", "n_evals": 0, "deriv0": gf,
                                     "value0": v0})
        alpha = -gf / hff
        fused = self._has_gh
        kind = self._curv_kind()
        for tries in range(31):
            s_new = moved(run.scores, self.learning_rate * alpha, f)
            v, g, h = self._value_at(run, s_new, fused, kind)
            if decreases(v, v0, self.learning_rate * alpha, run.ensemble.n_rounds + 1):
                if fused:
                    run.pending = (s_new, g, h, kind)
                return _Step(alpha, v, {"status": "surrogate", "n_evals": tries + 1,
                                        "deriv0": gf, "curv0": hff, "value0": v0,
                                        "backtracks": tries}, scores=s_new)
            alpha *= 0.5
        return _Step(0.0, None, {"status": "no_decrease", "n_evals": 31, "deriv0": gf,
                                 "value0": v0, "backtracks": 31})

    @staticmethod
    def _value_at(run: _Run, s_new: Tensor, fused: bool, kind: str):
        """``(L(s_new), g, h)`` (``g, h`` with ``fused``, else ``None``); the loss summed
        over the ranks when data-parallel (the gradient stays this rank's)."""
        comm = run.comm
        out = [0.0, None, None]
        with comm.local():
            if fused:
                v, out[1], out[2] = run.bound.value_grad_hess(s_new, hess=kind)
                out[0] = float(v)
            else:
                out[0] = float(scalar(run.bound.value(s_new)).detach())
        return float(comm.sum(lambda: [out[0]], size=1)[0]), out[1], out[2]

    def _newton(self, comm: FitComm, phi, fallback_curvature: float) -> _Step:
        """One Newton step on ``α`` (``φ``, ``φ'``, ``φ''`` summed over the ranks), halved
        until ``L(s + ν α f) ≤ L(s)`` (30 times at most)."""
        evaluate = summed_evaluate(comm, phi, 2)
        alpha, v0, d0, h0 = newton_from_values(*evaluate(0.0), fallback_curvature)
        tries, new = 0, None
        while alpha != 0.0 and tries < 30:
            a = torch.tensor(self.learning_rate * alpha, dtype=F64)
            v = float(comm.sum(lambda: [float(phi(a).detach())], size=1)[0])
            if decreases(v, v0, float(a)):
                new = v
                break
            alpha *= 0.5
            tries += 1
        else:
            if tries >= 30:
                alpha = 0.0
        return _Step(alpha, new, {"status": "newton", "n_evals": 1 + tries + 1, "deriv0": d0,
                                  "curv0": h0, "value0": v0, "backtracks": tries})

    def _line_search(self, run: _Run, rnd: int, phi, gf: float, hff: float) -> _Step:
        """Exact line search of ``L(s + α f)`` from the quadratic model's minimiser along
        ``f``, ``-⟨g, f⟩ / Σ h f²`` (exact for a quadratic loss; a guaranteed decrease under a
        valid curvature bound); ``φ(0)`` and ``φ'(0) = ⟨g, f⟩`` are known. Applies the
        ``on_unbounded`` policy."""
        a0 = abs(gf) / hff if (hff > 0 and gf != 0.0) else 1.0
        try:
            evaluate = summed_evaluate(run.comm, phi, self.line_search_order)
            res = line_search(evaluate=evaluate,
                              max_ratio=self.max_step_ratio, order=self.line_search_order,
                              xtol=self.line_search_tol, value0=run.loss, deriv0=gf,
                              alpha0=a0 if math.isfinite(a0) and a0 > 0 else 1.0)
        except (ValueError, NumericalError) as exc:  # bad φ(0), a NaN φ at a trial step
            raise self._failure(run, rnd, f"line search failed: {exc}") from None
        known = res.value if (self.learning_rate == 1.0 and res.status != "unbounded") else None
        step = _Step(res.alpha, known, {"status": res.status, "n_evals": res.n_evals,
                                        "deriv0": res.deriv0, "value0": res.value0})
        if not res.unbounded:
            return step
        msg = (f"round {rnd}: the loss decreases without bound along the weak learner's "
               f"output (line search reached alpha = {res.alpha:.4g}, "
               f"{self.max_step_ratio:g} times its first trial step, with the loss still "
               f"falling: {res.value0:.6g} -> {res.value:.6g}); e.g. the training data are "
               f"separated by the ensemble plus this weak model")
        if self.on_unbounded == "raise":
            raise UnboundedDirectionError(msg, round=rnd,
                                          model=run.ensemble.truncate(run.ensemble.n_rounds))
        if self.on_unbounded == "stop":
            warnings.warn(msg + "; stopping before this round", stacklevel=6)
            run.monitor.stop(msg)
            return _Step(None)
        return step

    def _apply(self, run: _Run, rnd: int, step: _Step, w_round: float, model, f) -> None:
        """``s ← s + ν α f``, the new loss, the ensemble's new round."""
        s_new = step.scores if step.scores is not None else moved(run.scores, w_round, f)
        loss_new = (step.new_loss if step.new_loss is not None
                    else self._loss_value(run.comm, run.bound, s_new))
        if not math.isfinite(loss_new):
            raise self._failure(run, rnd, f"the loss is {loss_new} after the update (step "
                                          f"{step.alpha:.4g}, weight {w_round:.4g}); the loss "
                                          f"or the weak learner produced non-finite values")
        run.scores = s_new
        self.scores_ = s_new  # current training scores, for callbacks (score histograms)
        run.loss = loss_new
        run.ensemble.append(model, w_round)

    def _record(self, run: _Run, rnd: int, step: _Step, w_round: float, loss_before: float,
                ckind: str, model, times, combined: dict) -> RoundRecord:
        """The round's :class:`RoundRecord` (the driver's diagnostics in ``extra``, from the
        round's ``combined`` sums: over every rank of a data-parallel fit, where the loss's
        own ``round_diagnostics`` are left out: they are not sums over queries)."""
        t0, t1, t2, t3 = times
        extra = {"loss_before": loss_before, "learning_rate": self.learning_rate,
                 **combined, "curvature_kind": ckind, "line_search": step.info,
                 "seconds_grad": t1 - t0, "seconds_learner": t2 - t1, "seconds_step": t3 - t2,
                 "learner": weak_summary(model)}
        extra.update(run.comm.describe())
        more = getattr(self.loss, "round_diagnostics", None)
        if callable(more):  # e.g. AdaBoostLoss: F₊, F₋ and the F-skew (one process only)
            local = run.comm.per_rank(lambda: more(run.scores, run.labels, run.groups))
            for k, v in local.items():
                extra.setdefault(k, v)
        return RoundRecord(round=rnd, loss=run.loss, step=step.alpha, weight=w_round,
                           extra=extra)

    def _final_model(self, run: _Run, n_rounds: int) -> Ensemble:
        ens = run.ensemble.truncate(n_rounds)
        ens.info.update({
            "loss": describe(self.loss), "learner": describe(self.learner), "step": self.step,
            "curvature": self.curvature, "learning_rate": self.learning_rate,
            "seed": self.seed, "fit_seconds": time.perf_counter() - run.t_fit,
        })
        return ens
