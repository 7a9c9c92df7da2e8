"""Names → losses, algorithms, weak learners, metrics and debiasing methods (used by the CLI,
the estimator and the scripts).

Every entry has a kind (``"loss"``, ``"algorithm"``, ``"learner"``, ``"metric"``,
``"debias"``), a name, a one-line description and a lazily imported target::

    from torchrankboost import registry
    registry.names("loss")                       # ['adaboost', 'exponential', ...]
    loss = registry.create("loss", "pnorm_push", p=4)
    metric = registry.metric("ndcg@10")          # callable(scores, labels, groups) -> float
    print(registry.describe())                   # the table `torchrankboost list` prints
    registry.names("debias", sort=False)         # ['ipw', 'em', 'dla', 'additive']

Names are case-insensitive and ``-`` equals ``_``. An unknown name raises ``ValueError``
listing the valid choices.
"""

from __future__ import annotations

import importlib
import json
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .params import build_from_params

__all__ = ["Entry", "Metric", "KINDS", "names", "lookup", "create", "metric", "describe",
           "resolve_loss", "resolve_learner"]

KINDS = ("loss", "algorithm", "learner", "metric", "debias")
_PLURAL = {"losses": "loss", "algorithms": "algorithm", "learners": "learner",
           "metrics": "metric"}


@dataclass(frozen=True)
class Entry:
    """One registered name.

    Attributes:
        kind: ``"loss"``, ``"algorithm"``, ``"learner"``, ``"metric"`` or ``"debias"`` (a
            position-debiasing wrapper of a pairwise loss, for learning from clicks:
            ``target(loss, **params)``; see :mod:`torchrankboost.clicks`).
        name: the canonical name (lower case, ``_`` separated; metrics may contain ``@k``).
        target: ``"module:attribute"`` imported on first use.
        description: one line.
        defaults: keyword arguments applied before the user's (e.g. a learner's criterion).
        aliases: other accepted names.
    """

    kind: str
    name: str
    target: str
    description: str
    defaults: Dict[str, Any] = field(default_factory=dict)
    aliases: tuple = ()

    def resolve(self):
        """The class or function this name refers to."""
        mod, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(mod), attr)

    def create(self, **params):
        """Instantiate with ``defaults`` updated by ``params`` (keyword arguments)."""
        kwargs = dict(self.defaults)
        kwargs.update(params)
        target = self.resolve()
        _check_kwargs(target, kwargs, f"{self.kind} {self.name!r}")
        return target(**kwargs)


def parse_value(text: str):
    """A setting written as text (``--param p=4``): bool
    (true/false/yes/no/on/off), None (none/null), int, float, a JSON list or dict, a quoted
    string without its quotes, else the string itself."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except json.JSONDecodeError:
            pass
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    return t


def _check_kwargs(fn, kwargs: Dict[str, Any], what: str) -> None:
    """Raise ``ValueError`` naming the valid parameters when ``kwargs`` has unknown ones."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = [n for n, p in params.items()
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and n != "self"]
    bad = [k for k in kwargs if k not in accepted]
    if bad:
        valid = accepted
        raise ValueError(
            f"unknown parameter{'s' if len(bad) > 1 else ''} {', '.join(map(repr, bad))} for "
            f"{what}; valid parameters: {', '.join(valid) if valid else '(none)'}"
        )


# ---------------------------------------------------------------------------- entries
_L = "torchrankboost.losses"
_B = "torchrankboost.boosting"
_P = "torchrankboost.boosting.papers"
_C = "torchrankboost.clicks.debias"

_ENTRIES: List[Entry] = [
    # losses ---------------------------------------------------------------------------
    Entry("loss", "exponential", f"{_L}:ExponentialPairwiseLoss",
          "RankBoost's exponential pairwise loss: sum over preferred pairs of exp(-(s_hi - s_lo))",
          aliases=("exp", "exponential_pairwise")),
    Entry("loss", "adaboost", f"{_L}:AdaBoostLoss",
          "AdaBoost's exponential loss on +/- labels (F = F+ + F-); F-skew = F+ - F-"),
    Entry("loss", "pnorm_push", f"{_L}:PNormPushLoss",
          "p-norm push: sum over negatives of (sum over positives exp(-(s_pos - s_neg)))^p",
          aliases=("pnorm", "p_norm_push")),
    Entry("loss", "smooth_margin", f"{_L}:SmoothMarginLoss",
          "smooth ranking margin G = -ln F / ||lambda||_1 (as a loss: its negative)"),
    Entry("loss", "qbrank", f"{_L}:QBRankLoss",
          "QBRank: w/2 sum max(0, s_lo - s_hi + tau)^2 + (1-w)/2 sum (l - s)^2"),
    Entry("loss", "hinge", f"{_L}:PairwiseHingeLoss",
          "pairwise hinge (RankSVM): sum over pairs of max(0, 1 - (s_hi - s_lo))",
          aliases=("pairwise_hinge", "ranksvm")),
    Entry("loss", "squared_error", f"{_L}:SquaredErrorLoss",
          "pointwise regression: 1/2 sum (l - s)^2", aliases=("mse", "l2", "squared")),
    Entry("loss", "listnet", f"{_L}:ListNetLoss",
          "ListNet: cross-entropy of the labels' and the scores' top-one probabilities"),
    Entry("loss", "listmle", f"{_L}:ListMLELoss",
          "ListMLE: negative Plackett-Luce log-likelihood of the label order"),
    Entry("loss", "ranknet", f"{_L}:RankNetLoss",
          "RankNet: sum over preferred pairs of log(1 + exp(-sigma (s_hi - s_lo))); "
          "O(sum n_q^2) time", aliases=("pairwise_logistic",)),
    Entry("loss", "yetirank", f"{_L}:YetiRankLoss",
          "YetiRank (CatBoost): pairwise logistic loss, pair weights from randomly perturbed "
          "orderings (adjacent pairs, decay^position x |label difference|); seeded"),
    Entry("loss", "approx_ndcg", "torchrankboost.losses.approx:ApproxNDCGLoss",
          "ApproxNDCG (Qin et al. 2010): minus NDCG at sigmoid-smoothed ranks; O(sum n_q^2) "
          "time, neural rankers only (no grad_hess)", aliases=("approxndcg",)),
    Entry("loss", "neural_ndcg", "torchrankboost.losses.approx:NeuralNDCGLoss",
          "NeuralNDCG (Pobrotyn & Bialobrzeski 2021): minus NDCG under NeuralSort + Sinkhorn; "
          "O(sum n_q^2 n_iter), neural rankers only (no grad_hess)", aliases=("neuralndcg",)),
    Entry("loss", "lambdaloss", f"{_L}:LambdaLoss",
          "LambdaLoss (Wang et al. 2018, allRank lambdaLoss): metric-weighted logistic pairs "
          "(scheme ndcgLoss2++/ndcgLoss2/ndcgLoss1/lambdaRank, k); O(sum min(n_q, k)^2)",
          aliases=("lambda_loss",)),
    Entry("loss", "lambdarank_exp", f"{_L}:LambdaRankExpLoss",
          "LambdaRank |delta NDCG| weights x exp(-(s_hi - s_lo)) over all pairs, exact, "
          "O(n log n)", aliases=("lambdarank_exponential",)),
    # algorithms -------------------------------------------------------------------------
    Entry("algorithm", "boost", f"{_B}.booster:Booster",
          "generic stagewise boosting: any loss (--loss) + any weak learner (--learner)",
          aliases=("booster", "gradient_boosting")),
    Entry("algorithm", "rankboost", f"{_P}:RankBoost",
          "RankBoost (Freund et al. 2003): exponential pairwise loss, weak rankers, exact step",
          aliases=("rb",)),
    Entry("algorithm", "rankboost_plus", f"{_P}:RankBoostPlus",
          "RankBoost+ (Connamacher et al. 2019): RankBoost with ties-aware step (R2 bound)",
          aliases=("rankboost+", "rbplus")),
    Entry("algorithm", "adaboost", f"{_P}:AdaBoost",
          "AdaBoost as a bipartite ranker, with the F-skew intercept (Rudin & Schapire 2009)"),
    Entry("algorithm", "smooth_margin", f"{_P}:SmoothMarginRanking",
          "smooth margin ranking (Rudin & Schapire 2009): maximises the smooth ranking margin"),
    Entry("algorithm", "pnorm_push", f"{_P}:PNormPush",
          "p-norm push (Rudin 2009): boosting that concentrates on the top of the list",
          aliases=("pnorm",)),
    Entry("algorithm", "qbrank", f"{_P}:QBRank",
          "QBRank (Zheng et al. 2007): regression trees on pairwise-corrected targets"),
    Entry("algorithm", "gbt", f"{_P}:GBT",
          "gradient boosted regression trees on the labels (pointwise baseline)",
          aliases=("gbrt", "gbdt")),
    Entry("algorithm", "ranksvm", f"{_P}:RankSVM",
          "linear RankSVM: pairwise hinge with L2 regularisation, full-batch optimisation",
          aliases=("rank_svm", "svm")),
    # learners --------------------------------------------------------------------------
    Entry("learner", "tree", f"{_B}.learners:RegressionTree",
          "histogram regression tree (leaf-wise, max_leaves), Newton leaf values",
          aliases=("trees", "regression_tree")),
    Entry("learner", "oblivious", f"{_B}.learners:ObliviousTree",
          "oblivious (symmetric) tree of a given depth, CatBoost's weak learner",
          aliases=("oblivious_tree", "symmetric_tree")),
    Entry("learner", "stump", f"{_B}.learners:Stumps",
          "decision stump (one feature, one threshold), RankBoost's weak ranker",
          aliases=("stumps",)),
    Entry("learner", "feature", f"{_B}.learners:FeatureRankers",
          "a single (scaled) feature as the weak ranker", aliases=("features", "feature_ranker")),
    # debiasing methods (learning from clicks; in the order --debias shows them) -------
    Entry("debias", "ipw", f"{_C}:IPWLoss",
          "inverse propensity weighting of the click pairs with known propensities "
          "(--propensity, clipped)"),
    Entry("debias", "em", f"{_C}:RegressionEMLoss",
          "propensities estimated from the clicks by regression-EM between rounds "
          "(Wang et al. 2018)"),
    Entry("debias", "dla", f"{_C}:DualLearningLoss",
          "dual learning algorithm: a propensity table learned with the ranker by inverse "
          "relevance weighting (Ai et al. 2018)"),
    Entry("debias", "additive", f"{_C}:AdditivePositionLoss",
          "the clicks' loss of f(x) + g(position), g a learned position term (LightGBM's); "
          "the model predicts f"),
]


# ---------------------------------------------------------------------------- metrics
@dataclass(frozen=True)
class Metric:
    """A named ranking metric: ``metric(scores, labels, groups) -> float``.

    ``greater_is_better`` says which way is better (used by early stopping).
    """

    name: str
    fn: Callable
    kwargs: Dict[str, Any]
    greater_is_better: bool = True

    def __call__(self, scores, labels, groups=None) -> float:
        return float(self.fn(scores, labels, groups, **self.kwargs))

    def __repr__(self) -> str:
        return f"Metric({self.name!r})"


# name pattern -> (function name in torchrankboost.metrics, kwargs builder, greater, description)
_M = "torchrankboost.metrics"
_METRICS = [
    ("ndcg@k", "ndcg_at_k", lambda k: {"k": k}, True,
     "normalised DCG at cutoff k (exp gain 2^l - 1), mean over queries; 'ndcg' = whole list"),
    ("dcg@k", "dcg_at_k", lambda k: {"k": k}, True, "DCG at cutoff k, mean over queries"),
    ("map", "mean_average_precision", lambda k: {"k": k}, True,
     "mean average precision (relevant = label > 0); map@k truncates at k"),
    ("precision@k", "precision_at_k", lambda k: {"k": k}, True,
     "fraction of relevant documents in the top k (p@k)"),
    ("mrr", "reciprocal_rank", lambda k: {"k": k}, True,
     "mean reciprocal rank of the first relevant document"),
    ("auc", "auc", lambda k: {}, True,
     "area under the ROC curve per query (relevant = label > 0), ties count one half"),
    ("pair_error", "pair_error", lambda k: {"ties": "error"}, False,
     "fraction of misordered crucial pairs, ties count as errors (R1 of RankBoost+)"),
    ("pair_error_half", "pair_error", lambda k: {"ties": "half"}, False,
     "fraction of misordered crucial pairs, ties count one half (R2 of RankBoost+)"),
    ("pos_above_neg", "positives_above_first_negative", lambda k: {}, True,
     "positives scored above the highest negative (p-norm push's top-of-list measure)"),
]
_METRIC_ALIASES = {"p": "precision", "prec": "precision", "rr": "mrr", "ndcg": "ndcg",
                   "r1": "pair_error", "r2": "pair_error_half", "pairerror": "pair_error"}


def _canon(name: str) -> str:
    return str(name).strip().lower().replace("-", "_")


def _split_k(name: str):
    m = re.fullmatch(r"([a-z0-9_+]+?)(?:@(\d+))?", name)
    if not m:
        return None, None
    base, k = m.group(1), m.group(2)
    return base, (int(k) if k is not None else None)


def _loss_value(loss: Callable) -> Callable:
    def value(scores, labels, groups=None):
        v = loss(scores, labels, groups)
        return v.sum() if hasattr(v, "dim") and v.dim() > 0 else v

    return value


def metric(name, *, loss: Optional[Callable] = None) -> Metric:
    """A :class:`Metric` from a spec (the one parser of metric names in the library).

    ``name`` is one of:

    * a name such as ``"ndcg@10"``, ``"map"``, ``"auc"``, ``"pair_error"``, ``"p@5"``,
      ``"pos_above_neg"``, ``"r1"``;
    * ``"loss"``: the training objective ``loss(scores, labels, groups)`` on that set (lower
      is better); needs ``loss`` — the algorithm's objective, which every algorithm with one
      passes when it evaluates;
    * a :class:`Metric` (returned as is);
    * a ``(name, fn, greater_is_better)`` tuple;
    * a callable ``fn(scores, labels, groups) -> float`` (named by its ``__name__``; higher
      is better unless it has ``greater_is_better = False``).

    Raises ``ValueError`` listing the choices if unknown.
    """
    if isinstance(name, Metric):
        return name
    if isinstance(name, tuple) and len(name) == 3 and callable(name[1]):
        return Metric(str(name[0]), name[1], {}, bool(name[2]))
    if callable(name):
        return Metric(getattr(name, "__name__", type(name).__name__), name, {},
                      bool(getattr(name, "greater_is_better", True)))
    if not isinstance(name, str):
        raise ValueError(f"a metric must be a name, a callable or a (name, fn, "
                         f"greater_is_better) tuple, got {name!r}")
    key = _canon(name)
    if key == "loss":
        if loss is None:
            raise ValueError("metric 'loss' is the training objective: this algorithm has "
                             "none to evaluate (use a ranking metric such as ndcg@10)")
        return Metric("loss", _loss_value(loss), {}, False)
    base, k = _split_k(key)
    if base is not None:
        base = _METRIC_ALIASES.get(base, base)
    for pattern, fn_name, kw, greater, _ in _METRICS:
        pbase = pattern.split("@")[0]
        if base == pbase and (k is None or "@" in pattern or pbase in ("map", "mrr")):
            if k is not None and k < 1:
                break
            fn = getattr(importlib.import_module(_M), fn_name)
            canonical = pbase if k is None else f"{pbase}@{k}"
            return Metric(canonical, fn, kw(k), greater)
    raise ValueError(
        f"unknown metric {name!r}; valid choices: {', '.join(_metric_names())}, loss "
        f"(k is a positive integer, e.g. ndcg@10)"
    )


def _metric_names() -> List[str]:
    out = []
    for pattern, *_ in _METRICS:
        out.append(pattern)
        if pattern in ("map", "mrr"):
            out.append(f"{pattern}@k")
    return out


# ---------------------------------------------------------------------------- lookups
def _kind(kind: str) -> str:
    k = _PLURAL.get(kind, kind)
    if k not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid choices: {', '.join(KINDS)}")
    return k


def names(kind: str, *, sort: bool = True) -> List[str]:
    """Canonical names of one kind, sorted (``sort=False``: in the order they are
    registered, e.g. the debiasing methods as ``--debias`` lists them)."""
    k = _kind(kind)
    if k == "metric":
        return _metric_names()
    found = [e.name for e in _ENTRIES if e.kind == k]
    return sorted(found) if sort else found


def entries(kind: str) -> List[Entry]:
    k = _kind(kind)
    return sorted((e for e in _ENTRIES if e.kind == k), key=lambda e: e.name)


def lookup(kind: str, name: str) -> Entry:
    """The :class:`Entry` of ``kind`` called ``name`` (or one of its aliases)."""
    k = _kind(kind)
    if k == "metric":
        raise ValueError("use registry.metric(name) for metrics")
    key = _canon(name)
    for e in _ENTRIES:
        if e.kind == k and (e.name == key or key in e.aliases):
            return e
    raise ValueError(f"unknown {k} {name!r}; valid choices: {', '.join(names(k))}")


def create(kind: str, name: str, **params):
    """Instantiate the ``kind`` named ``name`` with keyword ``params``."""
    if _kind(kind) == "metric":
        if params:
            raise ValueError("metrics take their options in the name (e.g. ndcg@10)")
        return metric(name)
    return lookup(kind, name).create(**params)


def resolve_loss(loss, **params):
    """A loss object from a name (with ``params``), a description ``{"type": class name,
    "params": {...}}`` (a ``get_params`` record) or a loss object/callable as is."""
    if isinstance(loss, str):
        return create("loss", loss, **params)
    if isinstance(loss, dict) and not params:
        loss = build_from_params(loss)
    if params:
        raise ValueError("loss parameters can only be given with a loss name")
    if not callable(loss):
        raise ValueError(f"loss must be a name or a callable loss, got {type(loss).__name__}")
    return loss


def resolve_learner(learner, **params):
    """A weak learner from a name (with ``params``), a description ``{"type": class name,
    "params": {...}}`` or a learner object as is."""
    if isinstance(learner, str):
        return create("learner", learner, **params)
    if isinstance(learner, dict) and not params:
        learner = build_from_params(learner)
    if params:
        raise ValueError("learner parameters can only be given with a learner name")
    if not hasattr(learner, "fit") or not hasattr(learner, "prepare"):
        raise ValueError(
            f"learner must be a name or a weak learner (with prepare/fit), got "
            f"{type(learner).__name__}")
    return learner


def describe(kind: Optional[str] = None) -> str:
    """The table printed by ``torchrankboost list [KIND]``: name, aliases, one line each."""
    kinds = KINDS if kind is None else (_kind(kind),)
    titles = {"loss": "Losses (--loss)", "algorithm": "Algorithms (--algorithm)",
              "learner": "Weak learners (--learner)", "metric": "Metrics (--metric)",
              "debias": "Debiasing methods (--debias; learning from clicks)"}
    lines: List[str] = []
    for k in kinds:
        if lines:
            lines.append("")
        lines.append(titles[k])
        if k == "metric":
            rows = [(p, d) for p, _, _, _, d in _METRICS] + [
                ("loss", "the algorithm's training objective on that set (lower is better)")]
        else:
            rows = [(e.name, e.description + (f" [also: {', '.join(e.aliases)}]"
                                              if e.aliases else "")) for e in entries(k)]
        width = max(len(r[0]) for r in rows)
        for n, d in rows:
            lines.append(f"  {n:<{width}}  {d}")
    return "\n".join(lines)
