r"""The stagewise boosting driver (Zheng et al.'s Algorithm 1 with Friedman's shrinkage).

For a loss :math:`L(s)` of the document scores (any callable ``loss(scores, labels, groups)``
returning a differentiable scalar), each round

1. takes the gradient :math:`g = \nabla L(s)` and a per-document curvature :math:`h`
   (exact Hessian diagonal, a diagonal upper bound of the Hessian, or 1);
2. fits the weak learner by weighted least squares to :math:`r = -g/h` with weights
   :math:`h` — this minimises the quadratic model
   :math:`L(s) + g^\top f + \tfrac12 f^\top \mathrm{diag}(h) f` over the learner's class
   (with ``curvature="none"``: to :math:`-g` with unit weights, Friedman's gradient
   boosting);
3. picks a step :math:`\alpha` (exact line search of :math:`\varphi(\alpha) = L(s+\alpha f)`,
   one Newton step on :math:`\alpha`, or :math:`\alpha=1`);
4. updates :math:`s \leftarrow s + \nu\,\alpha f` with shrinkage (learning rate) :math:`\nu`.

With ``curvature="bound"`` (a valid diagonal upper bound of the Hessian, e.g. QBRank's
:math:`\mathrm{diag}(2,2)` per pair) and ``step="fixed"``, ``ν ≤ 1``, every round decreases
the loss (Zheng et al., Eq. 6: the fitted tree minimises an upper bound that equals the loss
at :math:`f=0`). With ``"line_search"`` every step decreases the loss for any convex loss.

Scores, gradients and curvatures are kept in float64.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..groups import Groups
from .callbacks import PrintCallback
from .ensemble import Ensemble, as_features
from .steps import line_search, newton_step

__all__ = ["Booster", "UnboundedDirectionError", "hessian_diagonal", "autograd_grad_hess",
           "resolve_metric"]

F64 = torch.float64
STEPS = ("line_search", "newton", "fixed")
CURVATURES = ("diag", "bound", "none")
UNBOUNDED = ("stop", "raise", "cap")


class UnboundedDirectionError(ValueError):
    """The loss decreases without bound along a weak learner's output (``on_unbounded="raise"``).

    Attributes: ``round`` (1-based), ``ensemble`` (the model before that round).
    """

    def __init__(self, message: str, *, round: int, ensemble: Optional[Ensemble] = None):
        super().__init__(message)
        self.round = round
        self.ensemble = ensemble


# ----------------------------------------------------------------------------- autograd
def _scalar(v) -> Tensor:
    if not isinstance(v, Tensor):
        raise ValueError(f"the loss must return a tensor, got {type(v).__name__}")
    return v.sum() if v.dim() > 0 else v


def hessian_diagonal(fn: Callable[[Tensor], Tensor], scores: Tensor) -> Tensor:
    r"""Exact diagonal of :math:`\nabla^2 fn(s)` by ``n`` Hessian-vector products.

    ``fn`` maps ``(n,)`` scores to a scalar. Tries, in order: forward-over-reverse
    (``torch.func.vmap`` of ``torch.func.jvp`` of ``torch.func.grad``), batched double
    backward (``torch.autograd.grad(..., is_grads_batched=True)``), and a plain loop of ``n``
    double-backward products. Cost ``O(n)`` loss-gradient evaluations and an ``(n, n)``
    intermediate: meant for small ``n`` (the booster uses it up to ``exact_hess_max_n``).
    """
    s = scores.detach()
    n = s.shape[0]
    eye = torch.eye(n, dtype=s.dtype, device=s.device)
    try:
        gfn = torch.func.grad(lambda x: _scalar(fn(x)))

        def hvp(v):
            return torch.func.jvp(gfn, (s,), (v,))[1]

        H = torch.func.vmap(hvp)(eye)
        return torch.diagonal(H).clone()
    except Exception:  # noqa: BLE001 - fall through to the autograd variants
        pass
    x = s.clone().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(_scalar(fn(x)), x, create_graph=True)
    if not g.requires_grad:  # linear loss
        return torch.zeros_like(s)
    try:
        (H,) = torch.autograd.grad(g, x, grad_outputs=eye, is_grads_batched=True,
                                   retain_graph=True, allow_unused=True)
        if H is None:
            return torch.zeros_like(s)
        return torch.diagonal(H).detach().clone()
    except Exception:  # noqa: BLE001
        pass
    out = torch.empty_like(s)
    for i in range(n):
        (row,) = torch.autograd.grad(g[i], x, retain_graph=True, allow_unused=True)
        out[i] = 0.0 if row is None else row[i].detach()
    return out


def autograd_grad_hess(loss: Callable, scores: Tensor, labels, groups, *, hess: str = "diag",
                       max_exact: int = 2048) -> Tuple[Tensor, Tensor, str]:
    """Gradient by autograd and a curvature for a loss without ``grad_hess``.

    ``hess="diag"``: the exact Hessian diagonal (:func:`hessian_diagonal`) when
    ``n <= max_exact``, else unit curvature (Friedman's gradient boosting). ``hess="none"``:
    unit curvature. Returns ``(grad, curvature, kind)`` with ``kind`` ``"autograd-diag"`` or
    ``"unit"``.
    """
    s = scores.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        v = _scalar(loss(s, labels, groups))
        (g,) = torch.autograd.grad(v, s, allow_unused=True)
    g = torch.zeros_like(s) if g is None else g.detach()
    n = s.shape[0]
    if hess == "diag" and n <= max_exact:
        h = hessian_diagonal(lambda x: loss(x, labels, groups), scores)
        return g, h, "autograd-diag"
    return g, torch.ones_like(g), "unit"


# ----------------------------------------------------------------------------- metrics
_HIGHER = {"ndcg": True, "dcg": True, "map": True, "auc": True, "precision": True,
           "mrr": True, "loss": False, "pair_error": False}


def resolve_metric(spec, loss: Optional[Callable] = None):
    """``(name, fn(scores, labels, groups) -> float, greater_is_better)`` for a metric spec.

    Names: ``"ndcg"``/``"ndcg@k"``, ``"dcg@k"``, ``"map"``/``"map@k"``, ``"auc"``,
    ``"p@k"``/``"precision@k"``, ``"mrr"``, ``"pair_error"`` (from
    :mod:`torchrankboost.metrics`, defaults there: exp gain, LightGBM tie/empty conventions)
    and ``"loss"`` (the training loss on that set; lower is better). A callable is used as
    is (higher is better unless it has ``greater_is_better = False``); its name is its
    ``__name__``. A tuple ``(name, fn, greater_is_better)`` is accepted too.
    """
    if isinstance(spec, tuple) and len(spec) == 3:
        name, fn, gib = spec
        return str(name), fn, bool(gib)
    if callable(spec):
        name = getattr(spec, "__name__", type(spec).__name__)
        return name, spec, bool(getattr(spec, "greater_is_better", True))
    if not isinstance(spec, str):
        raise ValueError(f"eval_metric entries must be names or callables, got {spec!r}")
    name = spec.strip().lower()
    base, _, kpart = name.partition("@")
    k = None
    if kpart:
        try:
            k = int(kpart)
        except ValueError:
            raise ValueError(f"eval_metric {spec!r}: the cutoff after '@' must be an integer"
                             ) from None
        if k < 1:
            raise ValueError(f"eval_metric {spec!r}: cutoff must be >= 1")
    if base == "loss":
        if loss is None:
            raise ValueError("eval_metric 'loss' needs the booster's loss")
        return name, (lambda s, y, g: float(_scalar(loss(s, y, g)))), False
    from .. import metrics as M

    if base == "ndcg":
        fn = lambda s, y, g: float(M.ndcg_at_k(s, y, g, k=k))  # noqa: E731
    elif base == "dcg":
        fn = lambda s, y, g: float(M.dcg_at_k(s, y, g, k=k))  # noqa: E731
    elif base == "map":
        fn = lambda s, y, g: float(M.mean_average_precision(s, y, g, k=k))  # noqa: E731
    elif base == "auc":
        if k is not None:
            raise ValueError("eval_metric 'auc' takes no cutoff")
        fn = lambda s, y, g: float(M.auc(s, y, g))  # noqa: E731
    elif base in ("p", "precision"):
        fn = lambda s, y, g: float(M.precision_at_k(s, y, g, k=k if k else 10))  # noqa: E731
        base = "precision"
    elif base in ("mrr", "rr"):
        fn = lambda s, y, g: float(M.reciprocal_rank(s, y, g))  # noqa: E731
        base = "mrr"
    elif base == "pair_error":
        fn = lambda s, y, g: float(M.pair_error(s, y, g))  # noqa: E731
    else:
        raise ValueError(f"unknown eval_metric {spec!r}; use ndcg@k, dcg@k, map, map@k, auc, "
                         f"p@k, mrr, pair_error, loss or a callable")
    return name, fn, _HIGHER[base]


# ----------------------------------------------------------------------------- inputs
def _as_labels(labels, n: int, device, name: str = "labels") -> Tensor:
    if not isinstance(labels, Tensor):
        try:
            labels = torch.as_tensor(labels)
        except Exception as exc:
            raise ValueError(f"{name}: cannot convert to a tensor ({exc})") from None
    labels = labels.to(device)
    if labels.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(labels.shape)}")
    if labels.shape[0] != n:
        raise ValueError(f"{name} has {labels.shape[0]} entries but X has {n} rows")
    if labels.dtype == torch.bool:
        labels = labels.to(torch.float64)
    if labels.dtype.is_floating_point and not bool(torch.isfinite(labels).all()):
        raise ValueError(f"{name} contain NaN or inf values")
    return labels


def _as_groups(groups, n: int, device, name: str = "groups") -> Groups:
    if groups is None:
        return Groups.single(n, device=device)
    if not isinstance(groups, Groups):
        try:
            groups = Groups.from_qid(groups, device=device)
        except (TypeError, RuntimeError) as exc:
            raise ValueError(f"{name} must be a Groups or a 1-D array of query ids ({exc})"
                             ) from None
    if groups.num_docs != n:
        raise ValueError(f"{name} cover {groups.num_docs} documents but X has {n} rows")
    return groups.to(device)


def _summary(model) -> dict:
    if hasattr(model, "summary"):
        try:
            return dict(model.summary())
        except Exception:  # noqa: BLE001 - a summary must never break a fit
            pass
    try:
        tensors, meta = model.state()
    except Exception:  # noqa: BLE001
        return {"type": type(model).__name__}
    out = {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}
    for k, v in tensors.items():
        if v.numel() <= 64:
            out[k] = v.detach().cpu().tolist()
    return out


def _seed_for(seed: int, rnd: int) -> int:
    return (int(seed) * 1_000_003 + 7919 * int(rnd) + 17) % (2 ** 63 - 1)


# ----------------------------------------------------------------------------- booster
class Booster:
    r"""Stagewise boosting of a weak learner on any differentiable ranking loss.

    Args:
        loss: a callable ``loss(scores, labels, groups) -> scalar`` differentiable in
            ``scores``, e.g. any :class:`~torchrankboost.losses.RankingLoss`. When it has
            ``grad_hess(scores, labels, groups, hess=...)`` the closed-form gradient and
            curvature are used; otherwise the gradient comes from autograd and the curvature
            from the autograd fallback (see ``curvature``).
        learner: an unfitted weak learner (``prepare(X)``, ``fit(prepared, target, weight, *,
            rows, generator)``; e.g. ``RegressionTree``, ``Stumps``, ``FeatureRankers``).
        n_rounds: maximum number of boosting rounds ``T``.
        learning_rate: shrinkage ``ν`` applied after the step (``s += ν α f``).
        step: ``"line_search"`` (exact line search of ``L(s + α f)``, see
            :func:`~torchrankboost.boosting.steps.line_search`), ``"newton"`` (one Newton
            step ``α = −φ'(0)/φ''(0)`` with the exact ``φ''(0) = fᵀ∇²L f`` by double
            backward; halved until ``L(s + ν α f) ≤ L(s)``, at most 30 times) or
            ``"fixed"`` (``α = 1``).
        curvature: ``"diag"`` (Newton / Zheng Alg. 1: the exact Hessian diagonal from
            ``grad_hess(hess="diag")``, or the autograd fallback: exact diagonal by ``n``
            Hessian-vector products when ``n <= exact_hess_max_n``, else unit curvature with
            a warning), ``"bound"`` (a diagonal upper bound of the Hessian from
            ``grad_hess(hess="bound")``; needs a loss that has one) or ``"none"`` (fit
            ``−g`` with unit weights: Friedman's gradient boosting).
        subsample: fraction of **queries** the learner sees each round (seeded draw without
            replacement; gradients are still computed on all documents).
        seed: fixes every random choice (query subsampling, the learner's generator).
        callbacks: objects with ``on_fit_start`` / ``on_round_end`` / ``on_fit_end`` (see
            :mod:`torchrankboost.boosting.callbacks`).
        device: where to train (default: the device of ``X``).
        verbose: ``False``, ``True`` (print every 10 rounds) or an int period.
        hess_floor: curvatures are clamped below at ``hess_floor × mean(|h|)`` (relative;
            so documents with zero curvature — e.g. inactive pairs under the exact diagonal —
            get a target ``−g/floor`` with a negligible weight instead of ``0/0``; negative
            curvatures of non-convex losses are clamped too). When every curvature is 0 the
            round falls back to unit curvature.
        exact_hess_max_n: largest ``n`` for the autograd exact-diagonal fallback.
        on_unbounded: what to do when the line search finds that the loss decreases without
            bound along the weak model (``φ'`` still negative at ``max_step_ratio`` Newton
            steps — e.g. separable data under an exponential loss): ``"stop"`` (warn and
            stop before that round; default), ``"raise"`` (:class:`UnboundedDirectionError`,
            carrying the model so far) or ``"cap"`` (take the capped step and go on).
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

    After :meth:`fit`: ``ensemble_``, ``best_round_``, ``best_score_``, ``evals_result_``,
    ``stop_reason_`` (``None`` or a message), ``n_rounds_`` (rounds kept); during and after
    the fit ``scores_`` holds the current training scores (float64, ``(n,)``; callbacks read
    it, e.g. for score histograms).

    Example::

        >>> from torchrankboost import Booster, RegressionTree
        >>> from torchrankboost.losses import ExponentialPairwiseLoss
        >>> model = Booster(ExponentialPairwiseLoss(), RegressionTree(num_leaves=31),
        ...                 n_rounds=100, learning_rate=0.1).fit(
        ...     X, y, groups, eval_set=[(Xv, yv, gv)], early_stopping_rounds=20)
        >>> scores = model.predict(Xt)
    """

    def __init__(self, loss: Callable, learner, *, n_rounds: int = 100,
                 learning_rate: float = 0.1, step: str = "line_search",
                 curvature: str = "diag", subsample: float = 1.0, seed: int = 0,
                 callbacks: Sequence = (), device=None, verbose: Union[bool, int] = False,
                 hess_floor: float = 1e-6, exact_hess_max_n: int = 2048,
                 on_unbounded: str = "stop", max_step_ratio: float = 100.0,
                 base_score: Union[str, float] = "auto", eval_train: bool = False,
                 line_search_tol: float = 1e-3, line_search_order: int = 2):
        if not callable(loss):
            raise ValueError("loss must be callable: loss(scores, labels, groups) -> scalar")
        for meth in ("prepare", "fit"):
            if not callable(getattr(learner, meth, None)):
                raise ValueError(f"learner must have a {meth}() method (see BOOSTING_API.md)")
        if int(n_rounds) != n_rounds or n_rounds < 0:
            raise ValueError(f"n_rounds must be a non-negative integer, got {n_rounds}")
        if not (learning_rate > 0 and math.isfinite(learning_rate)):
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        if step not in STEPS:
            raise ValueError(f"step must be one of {STEPS}, got {step!r}")
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
        self.verbose = verbose
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
        self._has_gh = has_gh
        self.ensemble_: Optional[Ensemble] = None
        self.best_round_: Optional[int] = None
        self.best_score_: Optional[float] = None
        self.evals_result_: Dict[str, Dict[str, List[float]]] = {}
        self.stop_reason_: Optional[str] = None

    def __repr__(self) -> str:
        return (f"Booster(loss={self.loss!r}, learner={self.learner!r}, n_rounds={self.n_rounds}, "
                f"learning_rate={self.learning_rate}, step={self.step!r}, "
                f"curvature={self.curvature!r}, subsample={self.subsample}, seed={self.seed})")

    # ------------------------------------------------------------------ loss pieces
    def _value(self, s: Tensor, labels, groups) -> Tensor:
        return _scalar(self.loss(s, labels, groups))

    def _grad_curv(self, s: Tensor, labels, groups, rnd: int) -> Tuple[Tensor, Tensor, str]:
        if self._has_gh:
            kind = "bound" if self.curvature == "bound" else "diag"
            g, h = self.loss.grad_hess(s, labels, groups, hess=kind)
            g = g.to(F64)
            h = h.to(F64)
            kind = kind if self.curvature != "none" else "none"
        else:
            want = "diag" if self.curvature == "diag" else "none"
            if want == "diag" and s.shape[0] > self.exact_hess_max_n and not self._warned_unit:
                warnings.warn(
                    f"curvature='diag': the loss has no grad_hess and n = {s.shape[0]} > "
                    f"exact_hess_max_n = {self.exact_hess_max_n}; using unit curvature "
                    f"(Friedman gradient boosting)", stacklevel=3)
                self._warned_unit = True
            g, h, kind = autograd_grad_hess(self.loss, s, labels, groups, hess=want,
                                            max_exact=self.exact_hess_max_n)
            g = g.to(F64)
            h = h.to(F64)
            if self.curvature == "none":
                kind = "none"
        if not bool(torch.isfinite(g).all()):
            raise ValueError(f"round {rnd}: the loss gradient has NaN/inf entries")
        if self.curvature != "none" and not bool(torch.isfinite(h).all()):
            raise ValueError(f"round {rnd}: the loss curvature has NaN/inf entries")
        return g, h, kind

    def _targets(self, g: Tensor, h: Tensor, kind: str):
        if self.curvature == "none":
            return -g, None, torch.ones_like(g), kind
        mean_h = float(h.abs().mean()) if h.numel() else 0.0
        if not mean_h > 0:
            return -g, None, torch.ones_like(g), "unit"
        hc = h.clamp_min(self.hess_floor * mean_h)
        return -g / hc, hc, hc, kind

    # ------------------------------------------------------------------ fit
    def fit(self, X, labels, groups=None, *, eval_set=None,
            early_stopping_rounds: Optional[int] = None, eval_metric="ndcg@10",
            init_score: Optional[float] = None) -> Ensemble:
        """Boost for up to ``n_rounds`` rounds and return the :class:`Ensemble`.

        Args:
            X: ``(n, F)`` features (tensor / numpy / scipy sparse; NaN = missing).
            labels: ``(n,)`` relevance labels (no NaN).
            groups: :class:`~torchrankboost.Groups`, a ``(n,)`` array of contiguous query ids,
                or ``None`` (one query).
            eval_set: list of ``(X_v, labels_v, groups_v)`` evaluated after every round
                (names ``valid_0``, ``valid_1``, ...).
            early_stopping_rounds: stop when the first metric on the first eval set has not
                improved for this many rounds, and keep the best round's model (the
                ensemble is truncated to ``best_round_`` rounds).
            eval_metric: a name (``"ndcg@10"``, ``"map"``, ``"auc"``, ``"loss"``, ... see
                :func:`resolve_metric`), a callable ``f(scores, labels, groups)``, or a list
                of them; the first one drives early stopping.
            init_score: constant initial score (overrides ``base_score``).

        Raises:
            ValueError: lengths of ``X``/``labels``/``groups`` disagree, NaN labels, an empty
                training set, an eval set with a different number of features, a NaN loss or
                gradient (the message gives the round).
        """
        t_fit = time.perf_counter()
        self._warned_unit = False
        self.stop_reason_ = None
        dev = torch.device(self.device) if self.device is not None else None
        X = as_features(X, device=dev)
        dev = X.device
        n, F = X.shape
        if n == 0:
            raise ValueError("the training set is empty (X has 0 rows)")
        if F == 0:
            raise ValueError("X has no features")
        labels = _as_labels(labels, n, dev)
        groups = _as_groups(groups, n, dev)

        # ---- eval sets and metrics
        if eval_set is None:
            eval_set = []
        if isinstance(eval_set, tuple) and len(eval_set) == 3 and not isinstance(eval_set[0], tuple):
            eval_set = [eval_set]
        evals = []
        for i, es in enumerate(eval_set):
            if not isinstance(es, (tuple, list)) or len(es) != 3:
                raise ValueError(f"eval_set[{i}] must be a tuple (X, labels, groups)")
            Xv = as_features(es[0], device=dev, name=f"eval_set[{i}] X")
            if Xv.shape[1] != F:
                raise ValueError(f"eval_set[{i}] has {Xv.shape[1]} features but the training "
                                 f"X has {F}")
            if Xv.shape[0] == 0:
                raise ValueError(f"eval_set[{i}] is empty")
            yv = _as_labels(es[1], Xv.shape[0], dev, name=f"eval_set[{i}] labels")
            gv = _as_groups(es[2], Xv.shape[0], dev, name=f"eval_set[{i}] groups")
            evals.append((f"valid_{i}", Xv, yv, gv))
        mspecs = eval_metric if isinstance(eval_metric, (list, tuple)) and not (
            isinstance(eval_metric, tuple) and len(eval_metric) == 3 and callable(eval_metric[1])
        ) else [eval_metric]
        metrics = [resolve_metric(m, self.loss) for m in mspecs] if (evals or self.eval_train) else []
        if early_stopping_rounds is not None:
            if int(early_stopping_rounds) < 1:
                raise ValueError(f"early_stopping_rounds must be >= 1, got {early_stopping_rounds}")
            if not evals:
                raise ValueError("early_stopping_rounds needs an eval_set")
            if not metrics:
                raise ValueError("early_stopping_rounds needs an eval_metric")

        callbacks = list(self.callbacks)
        if self.verbose:
            callbacks.append(PrintCallback(10 if self.verbose is True else int(self.verbose)))

        # ---- base score
        if init_score is not None:
            base = float(init_score)
            if not math.isfinite(base):
                raise ValueError(f"init_score must be finite, got {init_score}")
        elif isinstance(self.base_score, float):
            base = self.base_score
        else:
            base = self._auto_base(n, labels, groups, dev)
        s = torch.full((n,), base, dtype=F64, device=dev)
        self.scores_ = s
        loss_now = float(self._value(s, labels, groups))
        if not math.isfinite(loss_now):
            raise ValueError(f"the loss is {loss_now} at the initial scores (base score {base})")

        prepared = self.learner.prepare(X)
        ensemble = Ensemble([], [], base_score=base, num_features=F)
        eval_scores = [torch.full((e[1].shape[0],), base, dtype=F64, device=dev) for e in evals]
        self.evals_result_ = {"train": {"loss": []}}
        if self.eval_train:
            for name, _, _ in metrics:
                self.evals_result_["train"].setdefault(name, [])
        for ename, *_ in evals:
            self.evals_result_[ename] = {name: [] for name, _, _ in metrics}
        self.best_round_, self.best_score_ = None, None
        best_key = None
        if evals and metrics:
            best_key = (evals[0][0], metrics[0][0], metrics[0][2])

        info = dict(n_docs=n, n_queries=groups.num_groups, n_features=F,
                    n_rounds=self.n_rounds, loss=repr(self.loss), learner=repr(self.learner),
                    step=self.step, curvature=self.curvature, learning_rate=self.learning_rate,
                    subsample=self.subsample, seed=self.seed, device=str(dev),
                    base_score=base, eval_names=[e[0] for e in evals],
                    metric_names=[m[0] for m in metrics], initial_loss=loss_now)
        for cb in callbacks:
            if hasattr(cb, "on_fit_start"):
                cb.on_fit_start(self, info)

        sub_gen = torch.Generator().manual_seed(self.seed)
        G = groups.num_groups
        sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
        nu = self.learning_rate

        for rnd in range(1, self.n_rounds + 1):
            t0 = time.perf_counter()
            g, h, ckind = self._grad_curv(s, labels, groups, rnd)
            target, weight, hc, ckind = self._targets(g, h, ckind)
            rows = None
            if self.subsample < 1.0:
                k = max(1, int(round(self.subsample * G)))
                pick = torch.randperm(G, generator=sub_gen)[:k].to(dev)
                qmask = torch.zeros(G, dtype=torch.bool, device=dev)
                qmask[pick] = True
                rows = torch.nonzero(qmask[groups.group_index], as_tuple=False).reshape(-1)
            sync()
            t1 = time.perf_counter()
            gen = torch.Generator(device=dev).manual_seed(_seed_for(self.seed, rnd))
            model = self.learner.fit(prepared, target, weight, rows=rows, generator=gen)
            f = model.predict_prepared(prepared).to(F64)
            if f.shape != (n,):
                raise ValueError(f"round {rnd}: the weak model's predict_prepared returned shape "
                                 f"{tuple(f.shape)}, expected ({n},)")
            if not bool(torch.isfinite(f).all()):
                raise ValueError(f"round {rnd}: the weak model predicts NaN/inf (targets had "
                                 f"range [{float(target.min()):.3g}, {float(target.max()):.3g}])")
            sync()
            t2 = time.perf_counter()

            # ---- step
            ls_info: dict = {}

            def phi(a, s=s, f=f):
                return self._value(s + a.to(dev) * f, labels, groups)

            stop_msg = None
            known_new = None  # the loss at the updated scores when the step rule computed it
            if self.step == "fixed":
                alpha = 1.0
            elif self.step == "newton":
                fb = float((hc * f * f).sum())
                alpha, v0, d0, h0 = newton_step(phi, fallback_curvature=fb)
                tries = 0
                while alpha != 0.0 and tries < 30:
                    v = float(phi(torch.tensor(nu * alpha, dtype=F64)).detach())
                    if math.isfinite(v) and v <= v0:
                        known_new = v
                        break
                    alpha *= 0.5
                    tries += 1
                else:
                    if tries >= 30:
                        alpha = 0.0
                ls_info = {"status": "newton", "n_evals": 1 + tries + 1, "deriv0": d0,
                           "curv0": h0, "value0": v0, "backtracks": tries}
            else:
                # φ(0) and φ'(0) are known (current loss, ⟨g, f⟩); the first trial is the
                # quadratic model's minimiser along f, -⟨g, f⟩ / Σ h f² (exact for a
                # quadratic loss; a guaranteed decrease under a valid curvature bound).
                gf = float((g * f).sum())
                hff = float((hc * f * f).sum())
                a0 = abs(gf) / hff if (hff > 0 and gf != 0.0) else 1.0
                try:
                    res = line_search(phi, max_ratio=self.max_step_ratio,
                                      order=self.line_search_order,
                                      xtol=self.line_search_tol, value0=loss_now,
                                      deriv0=gf, alpha0=a0 if math.isfinite(a0) and a0 > 0
                                      else 1.0)
                except ValueError as exc:
                    raise ValueError(f"round {rnd}: line search failed: {exc}") from None
                alpha = res.alpha
                if nu == 1.0 and res.status != "unbounded":
                    known_new = res.value
                ls_info = {"status": res.status, "n_evals": res.n_evals, "deriv0": res.deriv0,
                           "value0": res.value0}
                if res.unbounded:
                    stop_msg = (
                        f"round {rnd}: the loss decreases without bound along the weak "
                        f"learner's output (line search reached alpha = {res.alpha:.4g}, "
                        f"{self.max_step_ratio:g} times its first trial step, with the loss "
                        f"still falling: "
                        f"{res.value0:.6g} -> {res.value:.6g}); e.g. the training data are "
                        f"separated by the ensemble plus this weak model")
                    if self.on_unbounded == "raise":
                        raise UnboundedDirectionError(stop_msg, round=rnd, ensemble=ensemble)
                    if self.on_unbounded == "stop":
                        warnings.warn(stop_msg + "; stopping before this round", stacklevel=2)
                        self.stop_reason_ = stop_msg
                        break
            if not math.isfinite(alpha):
                raise ValueError(f"round {rnd}: the step size is {alpha}")
            if alpha == 0.0 and self.step != "fixed":
                if self.subsample >= 1.0:
                    self.stop_reason_ = (f"round {rnd}: no step along the weak model decreases "
                                         f"the loss ({ls_info.get('status')}); converged")
                    break
            w_round = nu * alpha
            s_new = s + w_round * f
            loss_new = (known_new if known_new is not None
                        else float(self._value(s_new, labels, groups)))
            if not math.isfinite(loss_new):
                raise ValueError(f"round {rnd}: the loss is {loss_new} after the update "
                                 f"(step {alpha:.4g}, weight {w_round:.4g}); the loss or the "
                                 f"weak learner produced non-finite values")
            sync()
            t3 = time.perf_counter()
            s = s_new
            self.scores_ = s  # current training scores, for callbacks (score histograms)
            loss_before, loss_now = loss_now, loss_new
            ensemble.append(model, w_round)

            # ---- evaluation
            mvals: Dict[str, Dict[str, float]] = {"train": {"loss": loss_now}}
            self.evals_result_["train"]["loss"].append(loss_now)
            if self.eval_train:
                for name, fn, _ in metrics:
                    v = float(fn(s, labels, groups)) if name != "loss" else loss_now
                    mvals["train"][name] = v
                    if name != "loss":
                        self.evals_result_["train"][name].append(v)
            for j, (ename, Xv, yv, gv) in enumerate(evals):
                eval_scores[j] = eval_scores[j] + w_round * model.predict(Xv).to(F64)
                mvals[ename] = {}
                for name, fn, _ in metrics:
                    v = float(fn(eval_scores[j], yv, gv))
                    mvals[ename][name] = v
                    self.evals_result_[ename][name].append(v)
            if best_key is not None:
                cur = mvals[best_key[0]][best_key[1]]
                better = (self.best_score_ is None
                          or (cur > self.best_score_ if best_key[2] else cur < self.best_score_))
                if better:
                    self.best_round_, self.best_score_ = rnd, cur
            sync()
            t4 = time.perf_counter()
            diag = {
                "round": rnd, "loss": loss_now, "loss_before": loss_before, "step": alpha,
                "learning_rate": nu, "weight": w_round,
                "grad_norm": float(torch.linalg.vector_norm(g)),
                "grad_max": float(g.abs().max()),
                "curvature_norm": float(torch.linalg.vector_norm(hc)),
                "curvature_mean": float(hc.mean()), "curvature_kind": ckind,
                "line_search": ls_info, "metrics": mvals,
                "seconds": t4 - t0, "seconds_grad": t1 - t0, "seconds_learner": t2 - t1,
                "seconds_step": t3 - t2, "seconds_eval": t4 - t3,
                "n_rows": n if rows is None else int(rows.numel()),
                "learner": _summary(model),
            }
            if best_key is not None:
                diag["best_round"], diag["best_score"] = self.best_round_, self.best_score_
            extra = getattr(self.loss, "round_diagnostics", None)
            if callable(extra):  # e.g. AdaBoostLoss: F₊, F₋ and the F-skew
                for k, v in extra(s, labels, groups).items():
                    diag.setdefault(k, v)
            want_stop = False
            for cb in callbacks:
                if hasattr(cb, "on_round_end") and cb.on_round_end(self, rnd, diag):
                    want_stop = True
            if want_stop:
                self.stop_reason_ = f"round {rnd}: a callback requested a stop"
                break
            if (early_stopping_rounds is not None and self.best_round_ is not None
                    and rnd - self.best_round_ >= int(early_stopping_rounds)):
                self.stop_reason_ = (f"round {rnd}: early stopping, {best_key[0]} {best_key[1]} "
                                     f"has not improved for {early_stopping_rounds} rounds "
                                     f"(best round {self.best_round_}: {self.best_score_:.6g})")
                break

        if early_stopping_rounds is not None and self.best_round_ is not None:
            ensemble = ensemble.truncate(self.best_round_)
        ensemble.info.update({
            "loss": repr(self.loss), "learner": repr(self.learner), "step": self.step,
            "curvature": self.curvature, "learning_rate": self.learning_rate,
            "seed": self.seed, "best_round": self.best_round_, "best_score": self.best_score_,
            "evals_result": self.evals_result_, "stop_reason": self.stop_reason_,
            "fit_seconds": time.perf_counter() - t_fit,
        })
        self.ensemble_ = ensemble
        self.n_rounds_ = ensemble.n_rounds
        for cb in callbacks:
            if hasattr(cb, "on_fit_end"):
                cb.on_fit_end(self, ensemble)
        return ensemble

    def _auto_base(self, n, labels, groups, dev) -> float:
        """The loss-minimising constant score (0 when the loss ignores a common shift)."""
        ones = torch.ones(n, dtype=F64, device=dev)
        zero = torch.zeros(n, dtype=F64, device=dev)
        x = zero.clone().requires_grad_(True)
        with torch.enable_grad():
            v = self._value(x, labels, groups)
            if not v.requires_grad:
                return 0.0
            (g,) = torch.autograd.grad(v, x, allow_unused=True)
        if g is None:
            return 0.0
        tot = float(g.sum())
        if abs(tot) <= 1e-9 * float(g.abs().sum()) or tot == 0.0:
            return 0.0
        res = line_search(lambda a: self._value(zero + a.to(dev) * ones, labels, groups),
                          max_ratio=self.max_step_ratio)
        if res.status in ("converged", "max_iter"):
            return float(res.alpha)
        return 0.0

    # ------------------------------------------------------------------ predict
    def predict(self, X, **kwargs) -> Tensor:
        """Scores of the fitted ensemble (see :meth:`Ensemble.predict`)."""
        if self.ensemble_ is None:
            raise ValueError("the booster is not fitted yet; call fit() first")
        return self.ensemble_.predict(X, **kwargs)
