r"""The ranker contract: what every training algorithm of the library promises.

Every algorithm — the stagewise :class:`~torchrankboost.boosting.Booster` and the papers'
algorithms (``RankBoost``, ``RankBoostPlus``, ``AdaBoost``, ``SmoothMarginRanking``,
``PNormPush``, ``QBRank``, ``GBT``, ``RankSVM``) — is a :class:`Ranker`::

    model = ranker.fit(X, labels, groups=None, *, eval_set=None, eval_metric="ndcg@10",
                       early_stopping_rounds=None, callbacks=(), sample_weight=None,
                       group_weight=None)
    scores = model.predict(X_test)
    model.save("model.safetensors"); same = type(model).load("model.safetensors")

and after ``fit`` exposes ``model_`` (the fitted :class:`RankingModel`, also returned),
``history_`` (one :class:`RoundRecord` per round run), ``evals_result_``
(``{set name: {metric name: [value per round]}}``, with ``"train": {"loss": [...]}``),
``best_round_`` / ``best_score_`` (``None`` without an evaluation set) and ``stop_reason_``
(``None`` or a message). Before ``fit`` these are set too (``None`` / empty).

Inputs: ``X`` a tensor, numpy array or scipy sparse matrix ``(n, F)`` (NaN = missing);
``labels`` ``(n,)``; ``groups`` a :class:`~torchrankboost.groups.Groups`, a ``(n,)`` array of
contiguous query ids, or ``None`` (one query); ``eval_set`` a list of ``(X, labels, groups)``
(named ``valid_0``, ``valid_1``, ...). ``eval_metric``: anything
:func:`torchrankboost.registry.metric` parses — a name (``"ndcg@10"``, ``"map"``,
``"pos_above_neg"``, ...; ``"loss"`` is the algorithm's training objective on that set,
lower is better), a callable, a ``(name, fn, greater_is_better)`` tuple — or a list of them.
The first metric on the first evaluation set gives the best round; with
``early_stopping_rounds`` the fit stops after that many rounds without improvement (a NaN is
never an improvement) and the model is cut back to the best round. An algorithm may take
extra keyword-only fit inputs (``pairs=``, ``init_scores=``, ``init_score=``).

Weights: ``sample_weight`` ``(n,)`` per document and ``group_weight`` ``(Q,)`` per query,
finite and ``>= 0`` (all ones: the unweighted fit). A pair ``(i, j)`` of query ``q`` weighs
``c_q w_i w_j``; rows of weight 0 contribute nothing, so zero weights on some queries give the
model trained without them (see :mod:`torchrankboost.boosting.weights`). An algorithm whose
objective has no weighted form refuses weights with a ``ValueError``. ``init_score`` (where
a starting score makes sense: the boosting driver and the algorithms built on it, RankBoost)
is a float or ``(n,)`` per-document offsets, with ``eval_init_score=[...]`` for the
evaluation sets.

One vocabulary: ``learner`` (the weak learner / weak-ranker dictionary), ``learning_rate``
(the shrinkage), ``on_unbounded`` (``"stop"``, ``"raise"``, ``"cap"``, and ``"smooth"`` for
RankBoost).

Callbacks see the same things from every algorithm: ``on_fit_start(ranker, info)`` with a
:class:`FitInfo`, ``on_round_end(ranker, record)`` with a :class:`RoundRecord` (return
``True`` to stop), and ``on_fit_end(ranker, model)``.

Runtime numerical failures (a NaN gradient, a step that is undefined or unbounded) raise
:class:`NumericalError`; bad arguments and bad data raise ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Protocol, Sequence, \
    Tuple, Union, runtime_checkable

import torch
from torch import Tensor

if TYPE_CHECKING:
    import os

    import numpy
    import scipy.sparse

__all__ = [
    "ArrayLike",
    "DeviceLike",
    "PathLike",
    "EvalSets",
    "MetricSpec",
    "NumericalError",
    "UnboundedDirectionError",
    "FitInfo",
    "RoundRecord",
    "Callback",
    "RankingModel",
    "Ranker",
]


#: a matrix ``(n, F)`` or a vector ``(n,)`` of numbers, as the public functions take it: a
#: tensor, a numpy array, a scipy sparse matrix (feature matrices) or nested sequences
ArrayLike = Union[Tensor, "numpy.ndarray", "scipy.sparse.spmatrix", Sequence[Any]]
#: a torch device or its name (``"cpu"``, ``"cuda:1"``); ``None``: where the data are
DeviceLike = Union[str, torch.device, None]
#: a file path
PathLike = Union[str, "os.PathLike[str]"]
#: ``eval_set``: evaluation sets ``[(X, labels, groups), ...]`` (named ``valid_0``, ...)
EvalSets = Optional[Sequence[Sequence[Any]]]
#: ``eval_metric``: a metric name (``"ndcg@10"``), a callable, a ``(name, fn,
#: greater_is_better)`` tuple, or a list of them (see :func:`torchrankboost.registry.metric`)
MetricSpec = Union[str, Callable[..., Any], Tuple[str, Callable[..., Any], bool], Sequence[Any]]


class NumericalError(ArithmeticError):
    """A training run met a numerical failure it cannot continue from.

    Examples: the loss or its gradient became NaN/inf, the step along a weak learner is
    undefined (RankBoost's RB-D with no misordered pair) or unbounded (separable data under an
    exponential loss, with ``on_unbounded="raise"``).

    Attributes:
        round: the 1-based round where it happened (``None`` before the first round).
        model: the model of the last good round, when there is one (``None`` otherwise).
    """

    def __init__(self, message: str, *, round: Optional[int] = None, model: Any = None):
        super().__init__(message)
        self.round = round
        self.model = model


class UnboundedDirectionError(NumericalError):
    """The loss decreases without bound along the chosen weak learner
    (``on_unbounded="raise"``)."""


class _Lookup:
    """Read a dataclass's fields and the entries of its open-ended dict (``_more``) by name:
    ``obj["key"]``, ``obj.get("key")``, ``"key" in obj``, ``obj.to_dict()``."""

    _more = ""
    __dataclass_fields__: ClassVar[Dict[str, Any]]

    def _bag(self) -> Dict[str, Any]:
        return getattr(self, self._more)

    def to_dict(self) -> Dict[str, Any]:
        """The fields and the open-ended entries in one flat dict (entries do not override
        fields)."""
        out = dict(self._bag())
        out.update({k: getattr(self, k) for k in self.__dataclass_fields__ if k != self._more})
        return out

    def get(self, key: str, default: Any = None) -> Any:
        """A field or an entry by name (``record.get("grad_norm")``)."""
        if key in self.__dataclass_fields__:
            return getattr(self, key)
        return self._bag().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in self.__dataclass_fields__:
            return getattr(self, key)
        return self._bag()[key]

    def __contains__(self, key: str) -> bool:
        return key in self.__dataclass_fields__ or key in self._bag()


@dataclass
class FitInfo(_Lookup):
    """What a run is about, given to ``on_fit_start``.

    ``algorithm`` is the name the user chose (e.g. ``"rankboost"``, ``"boost"``);
    ``params`` the hyperparameters a person tunes (plain JSON-able values); ``info["key"]``
    and ``info.get("key")`` read a field or a ``params`` entry.
    """

    _more = "params"

    algorithm: str
    n_docs: int
    n_queries: int
    n_features: int
    n_rounds: int
    eval_names: List[str] = field(default_factory=list)
    metric_names: List[str] = field(default_factory=list)
    params: Dict[str, Any] = field(default_factory=dict)
    initial_loss: Optional[float] = None


@dataclass
class RoundRecord(_Lookup):
    """One round of any algorithm, given to ``on_round_end`` and kept in ``history_``.

    Fields:
        round: 1-based round number.
        loss: the training objective after the round (the algorithm's own objective; ``None``
            when it has none).
        step: the step size chosen this round (α of the line search / closed form).
        weight: the round's weight in the model (``learning_rate × step`` for the driver).
        metrics: ``{set name: {metric name: value}}``, e.g.
            ``{"train": {"loss": 1.2}, "valid_0": {"ndcg@10": 0.77}}``.
        seconds: wall time of the round.
        best_round, best_score: the best evaluation so far (``None`` without an eval set).
        extra: algorithm-specific diagnostics (plain numbers, strings, lists, dicts), e.g.
            the line search's status, curvature norms, the weak model's summary, AdaBoost's
            F-skew. ``record["key"]`` and ``record.get("key")`` read a field or an ``extra``
            entry; ``record.to_dict()`` is the flat dict of both.
    """

    _more = "extra"

    round: int
    loss: Optional[float] = None
    step: float = 0.0
    weight: float = 0.0
    metrics: Dict[str, Dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    best_round: Optional[int] = None
    best_score: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Callback(Protocol):
    """Hooks called by every algorithm (a callback may define any subset; subclass
    :class:`~torchrankboost.boosting.callbacks.Callback` for no-op defaults)."""

    def on_fit_start(self, ranker: Any, info: FitInfo) -> None: ...

    def on_round_end(self, ranker: Any, record: RoundRecord) -> Optional[bool]: ...

    def on_fit_end(self, ranker: Any, model: Any) -> None: ...


@runtime_checkable
class RankingModel(Protocol):
    """A fitted model: scores for feature rows, saved as tensors + JSON (no pickle).

    ``info`` is a JSON-able dict about the run that made it (best round, stop reason, the
    feature numbering of its files...); ``feature_importance(kind)`` gives ``(F,)``
    importances, ``kind`` ``"gain"`` or ``"count"``."""

    num_features: int
    info: Dict[str, Any]

    def predict(self, X: Any) -> Tensor: ...

    def feature_importance(self, kind: str = "gain") -> Tensor: ...

    def save(self, path: Any) -> None: ...

    @classmethod
    def load(cls, path: Any, *, device: Any = None) -> "RankingModel": ...


@runtime_checkable
class Ranker(Protocol):
    """A training algorithm (see the module docstring for the whole contract)."""

    model_: Optional[RankingModel]
    history_: List[RoundRecord]
    evals_result_: Dict[str, Dict[str, List[float]]]
    best_round_: Optional[int]
    best_score_: Optional[float]
    stop_reason_: Optional[str]

    def fit(self, X: Any, labels: Any, groups: Any = None, *,
            eval_set: Optional[Sequence] = None, eval_metric: Any = "ndcg@10",
            early_stopping_rounds: Optional[int] = None,
            callbacks: Sequence[Any] = (), sample_weight: Any = None,
            group_weight: Any = None) -> RankingModel: ...

    def predict(self, X: Any) -> Tensor: ...
