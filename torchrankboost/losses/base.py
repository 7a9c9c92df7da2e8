"""The shared contract of every ranking loss.

Every loss is a :class:`torch.nn.Module` called as::

    loss(scores, labels, groups=None, *, pairs=None, weights=None) -> Tensor

* ``scores``: ``(n,)`` float tensor, the flat scores of all documents of all queries
  (or ``(B, L)`` padded with ``mask=...``, converted to ragged form by :meth:`prepare`).
* ``labels``: ``(n,)`` relevance grades (any real dtype; may be ``None`` with
  :class:`~torchrankboost.pairs.ExplicitPairs`).
* ``groups``: a :class:`~torchrankboost.Groups` (``None`` = one query).
* ``pairs``: which pairs count (see :mod:`torchrankboost.pairs`); default graded labels.
* ``weights``: optional ``(n,)`` non-negative per-document weights; a label-induced pair
  ``(i, j)`` is weighted ``weights[i] * weights[j]`` (the product form keeps the O(n log n)
  factorisation; RankBoost's bipartite initial distribution is of this form).
  Explicit pairs carry their own weights.

``reduction`` (constructor option): ``"sum"`` over queries (default), ``"mean"`` over
queries that have at least one pair, or ``"none"`` for a ``(G,)`` tensor of per-query losses.

``grad_hess(scores, labels, groups=None, *, pairs=None, weights=None, hess="diag")``
returns the per-document gradient of the loss as reduced by ``reduction`` (``"none"`` is
treated as ``"sum"``) and a per-document curvature:
``hess="diag"`` the exact Hessian diagonal, ``hess="bound"`` a diagonal ``D`` with
``D - H`` positive semi-definite (a quadratic upper bound around the current scores).
Both ``(n,)``, closed form, no autograd.

**Bound form.** ``loss.bind(labels, groups=None, *, pairs=None, weights=None)`` validates
everything but the scores once and precomputes what does not depend on them (label levels,
``(query, level)`` buckets, pair setups, normalisers, targets), returning a
:class:`BoundLoss`: ``bound(scores)`` / ``bound.value(scores)`` is the forward,
``bound.grad_hess(scores, hess=...)`` the closed form, and
``bound.value_grad_hess(scores, hess=...)`` both in one call (sharing the kernels' work
where they can). The unbound call is the same code path: it validates, binds, and
evaluates once.

**Writing a loss.** Subclass :class:`RankingLoss` and implement

* :meth:`~RankingLoss._bind_state` (optional): the score-independent state of validated
  inputs (``inp.scores`` is ``None`` there), a :class:`BindState`;
* :meth:`~RankingLoss.per_group`: ``(G,)`` per-query losses (differentiable) and
  ``has_pairs``, reading that state through ``self._state(inp)``;
* :meth:`~RankingLoss._grad_hess`: the closed-form gradient and curvature of the summed
  loss, and optionally :meth:`~RankingLoss._per_group_grad_hess` to fuse both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn

from ..exact import exact_sum
from ..groups import Groups, as_groups
from ..params import Params
from ..pairs import Bipartite, ExplicitPairs, PairSpec, resolve_pairs

__all__ = ["RankingLoss", "BoundLoss", "BindState", "Prepared", "prepare_inputs",
           "prepare_targets", "reduce_per_group", "reduction_terms", "ValueTerms", "REDUCTIONS",
           "MAX_GAIN_LABEL", "check_gain_labels"]

REDUCTIONS = ("sum", "mean", "none")
HESS = ("diag", "bound")


@dataclass
class Prepared:
    """Validated inputs: flat scores/labels/weights, groups and resolved pairs.

    ``scores`` is ``None`` for bound inputs (:func:`prepare_targets`); ``state`` holds the
    loss's score-independent state once bound (:meth:`RankingLoss._bind_state`)."""

    scores: Optional[Tensor]
    labels: Optional[Tensor]
    groups: Groups
    pairs: object
    weights: Optional[Tensor]
    state: Any = None
    group_weights: Optional[Tensor] = None  # (G,) query weights (BoundLoss.with_group_weights)


class BindState:
    """The score-independent state of a bound loss: named attributes, plus
    :meth:`cached` for what depends on the scores' dtype (or device) only, built on first
    use."""

    if TYPE_CHECKING:  # its attributes are named by each loss's _bind_state
        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self, **attrs):
        self.__dict__.update(attrs)
        self._memo: Dict[Any, Any] = {}

    def cached(self, key, fn: Callable[[], Any]):
        """``fn()``, computed once per ``key`` (e.g. the accumulation dtype)."""
        val = self._memo.get(key)
        if val is None:
            val = self._memo[key] = fn()
        return val


def all_finite(x: Tensor) -> bool:
    """Whether every entry of ``x`` is finite: one sum (finite only when every term is;
    an overflowing sum of finite values falls back to the elementwise test)."""
    if x.numel() == 0 or bool(torch.isfinite(x.sum())):
        return True
    return bool(torch.isfinite(x).all())


#: the largest label the exponential gain ``2^l − 1`` of the metric-weighted losses takes:
#: every gain and every query's sum of gains (2^64 · up to 2^63 documents) stays finite in
#: float32 as in float64, where a label of 1e9 gives ``inf / inf = NaN``
MAX_GAIN_LABEL = 64


def check_gain_labels(labels: Tensor, name: str) -> None:
    """Refuse labels above :data:`MAX_GAIN_LABEL` (one ``ValueError`` saying the limit)
    for a loss weighted by the exponential gain ``2^l − 1``. One host sync, at bind."""
    if labels.numel() and labels.dtype != torch.bool:
        top = float(labels.max())
        if top > MAX_GAIN_LABEL:
            raise ValueError(f"{name}: label {top:g} gives the exponential gain 2^{top:g} - 1, "
                             f"which overflows: labels must be at most {MAX_GAIN_LABEL}")


def _check_finite(x: Tensor, name: str) -> None:
    if not all_finite(x):
        bad = "NaN" if bool(torch.isnan(x).any()) else "inf"
        raise ValueError(f"{name} contains {bad} values")


def check_hess(hess: str) -> None:
    if hess not in HESS:
        raise ValueError(f"hess must be 'diag' or 'bound', got {hess!r}")


def _targets(n: int, device, labels: Optional[Tensor], groups: Groups, pairs: PairSpec,
             weights: Optional[Tensor], like: str) -> Prepared:
    """Validate labels, pairs and weights for ``n`` documents in ``groups`` (already checked
    and on ``device``). ``like`` names what fixes ``n`` in the messages."""
    p = resolve_pairs(pairs)
    if labels is None:
        if not isinstance(p, ExplicitPairs):
            raise ValueError("labels are required unless pairs=ExplicitPairs(...)")
    else:
        if labels.dim() != 1 or labels.shape[0] != n:
            raise ValueError(
                f"labels must have shape ({n},) like {like}, got {tuple(labels.shape)}"
            )
        labels = labels.to(device)
        if labels.dtype.is_floating_point and not all_finite(labels):
            _check_finite(labels, "labels")
    if isinstance(p, ExplicitPairs):
        p = p.validate(groups)
    if weights is not None:
        if weights.dim() != 1 or weights.shape[0] != n:
            raise ValueError(
                f"weights must have shape ({n},) like {like}, got {tuple(weights.shape)}"
            )
        weights = weights.to(device)
        if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
            raise ValueError("weights must be finite and non-negative (no NaN or inf)")
    return Prepared(None, labels, groups, p, weights)


def prepare_targets(labels: Optional[Tensor], groups: Optional[Groups] = None, *,
                    pairs: PairSpec = None, weights: Optional[Tensor] = None) -> Prepared:
    """Validate and normalise everything but the scores (what :meth:`RankingLoss.bind`
    binds): flat ``(n,)`` labels (``n`` from the labels, else from ``groups`` when labels are
    ``None`` with explicit pairs), ``groups``, ``pairs``, ``weights``; the same
    ``ValueError`` messages as :func:`prepare_inputs`. The result lives on the labels'
    device (else the groups', else the CPU) and has ``scores=None``."""
    device = None
    for x in (labels, groups, weights):
        if isinstance(x, (Tensor, Groups)):
            device = x.device
            break
    if labels is not None and not isinstance(labels, Tensor):
        labels = torch.as_tensor(labels, device=device)
    if weights is not None and not isinstance(weights, Tensor):
        weights = torch.as_tensor(weights, device=device)
    if labels is not None:
        if labels.dim() != 1:
            raise ValueError(f"labels must be 1-D (flat, with groups), got shape "
                             f"{tuple(labels.shape)}")
        n = labels.shape[0]
    elif isinstance(groups, Groups):
        n = groups.num_docs
    else:
        raise ValueError("bind needs labels, or groups with pairs=ExplicitPairs(...) (the "
                         "number of documents)")
    groups = as_groups(groups, n, device=device)
    return _targets(n, groups.device, labels, groups, pairs, weights, "labels")


def prepare_inputs(scores: Tensor, labels: Optional[Tensor], groups: Optional[Groups] = None,
                   *, pairs: PairSpec = None, weights: Optional[Tensor] = None,
                   mask: Optional[Tensor] = None) -> Prepared:
    """Validate and normalise the common loss arguments.

    Accepts flat ``(n,)`` inputs with optional ``groups``, or padded ``(B, L)`` scores and
    labels with a ``(B, L)`` boolean ``mask`` (then ``groups`` must be ``None``). Raises
    ``ValueError`` naming the argument for: non-tensor or non-float scores, shape
    mismatches, NaN/inf scores, NaN/inf labels, negative or NaN/inf weights, groups that do not
    cover the scores, explicit pairs outside their query.
    """
    if not isinstance(scores, Tensor):
        raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if not scores.dtype.is_floating_point:
        raise ValueError(f"scores must be a floating tensor, got {scores.dtype}")
    if labels is not None and not isinstance(labels, Tensor):
        labels = torch.as_tensor(labels, device=scores.device)
    if weights is not None and not isinstance(weights, Tensor):
        weights = torch.as_tensor(weights, device=scores.device)

    if mask is not None:
        if groups is not None:
            raise ValueError("pass either groups (ragged input) or mask (padded input), not both")
        if scores.dim() != 2 or mask.shape != scores.shape:
            raise ValueError(
                f"mask must have the shape of the padded scores; got scores "
                f"{tuple(scores.shape)} and mask {tuple(mask.shape)}"
            )
        mask = mask.to(device=scores.device, dtype=torch.bool)
        groups = Groups.from_padded(mask).to(scores.device)
        if labels is not None:
            if labels.shape != scores.shape:
                raise ValueError("labels must have the shape of the padded scores")
            labels = labels[mask]
        if weights is not None:
            if weights.shape != scores.shape:
                raise ValueError("weights must have the shape of the padded scores")
            weights = weights[mask]
        scores = scores[mask]

    if scores.dim() != 1:
        raise ValueError(
            f"scores must be 1-D (flat, with groups) or 2-D with a mask; got shape "
            f"{tuple(scores.shape)}"
        )
    n = scores.shape[0]
    groups = as_groups(groups, n, device=scores.device)
    _check_finite(scores.detach(), "scores")
    inp = _targets(n, scores.device, labels, groups, pairs, weights, "scores")
    inp.scores = scores
    return inp


class ValueTerms(NamedTuple):
    """A loss value as parts to sum: the value is ``Σ terms / count / scale`` with the sum
    exact (:func:`~torchrankboost.exact.exact_sum`, or an accumulator summed over ranks).

    Attributes:
        terms: ``(G,)`` the per-query losses (query weights applied).
        count: ``None`` for ``reduction="sum"`` (no division), the counted queries (0-d)
            for ``"mean"``.
        scale: a loss's constant divisor (1.0; ``SmoothMarginLoss``: its ``scale``).
    """

    terms: Tensor
    count: Optional[Tensor] = None  # type: ignore[assignment]  # a field named as tuple.count
    scale: float = 1.0

    def value(self, total: Tensor) -> Tensor:
        """The loss from the exact sum ``total`` of the terms (dividing by 1.0 is exact)."""
        if self.count is not None:
            total = total / self.count.to(total.device)
        return total / self.scale


def reduction_terms(per_group: Tensor, reduction: str, has_pairs: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Optional[Tensor]]:
    """``(terms, count)``: ``reduce_per_group(per_group, reduction, has_pairs)`` is the
    exact sum of ``terms``, divided by ``count`` (a 0-d tensor) for ``"mean"`` (``count``
    ``None`` otherwise): what a data-parallel fit sums over the ranks (``"none"`` counts as
    ``"sum"``)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if reduction != "mean":
        return per_group, None
    if has_pairs is None:
        return per_group, per_group.new_tensor(float(max(per_group.numel(), 1)))
    return per_group, has_pairs.sum().clamp_min(1).to(per_group.dtype)


def reduce_per_group(per_group: Tensor, reduction: str, has_pairs: Optional[Tensor] = None
                     ) -> Tensor:
    """Apply ``reduction`` to a ``(G,)`` tensor of per-query losses.

    ``"sum"``: the exact sum of the per-query losses, correctly rounded
    (:func:`~torchrankboost.exact.exact_sum`: the same float for any order of the
    queries), differentiable. ``"mean"`` divides it by the number of queries where
    ``has_pairs`` is true (all queries if ``None``); with no such query it returns 0
    (never NaN).
    """
    if reduction == "none":
        return per_group
    terms, count = reduction_terms(per_group, reduction, has_pairs)
    total = exact_sum(terms)
    return total if reduction == "sum" else total / count


def _per_doc(inp: Prepared, g: Tensor, h: Tensor) -> Tuple[Tensor, Tensor]:
    """``g`` and ``h`` with each document's multiplied by its query's weight (as given
    without query weights)."""
    if inp.group_weights is None:
        return g, h
    c = inp.group_weights[inp.groups.group_index]
    return g * c.to(g.dtype), h * c.to(h.dtype)


class BoundLoss:
    """A loss with its labels bound: :meth:`RankingLoss.bind`'s result.

    Everything that does not depend on the scores (validation of labels, groups, pairs and
    weights; label levels, buckets, pair setups, normalisers, targets) was done once at bind
    time; each call only checks the scores (a floating ``(n,)`` tensor on the bound device,
    finite) and evaluates.

    * ``bound(scores)`` / ``bound.value(scores)``: the loss's forward, exactly (same
      reduction, differentiable in ``scores``, twice where the loss is);
    * ``bound.grad_hess(scores, *, hess="diag")``: the unbound ``grad_hess``, ``(g, h)``;
    * ``bound.value_grad_hess(scores, *, hess="diag")``: ``(value, g, h)`` in one call, the
      value a 0-d tensor reduced as ``grad_hess`` reduces (``"none"`` counts as ``"sum"``),
      without autograd.

    Attributes: ``loss`` (the module), ``labels`` (``(n,)`` or ``None``), ``groups``,
    ``pairs`` (resolved), ``weights``, ``n``. The bound state follows the loss's options at
    bind time: bind again after changing them.
    """

    __slots__ = ("loss", "labels", "groups", "pairs", "weights", "group_weights", "n", "_inp")

    def __init__(self, loss: "RankingLoss", inp: Prepared):
        self.loss = loss
        self._inp = inp
        self.labels = inp.labels
        self.groups = inp.groups
        self.pairs = inp.pairs
        self.weights = inp.weights
        self.group_weights = inp.group_weights
        self.n = inp.groups.num_docs

    # -- internal: scores already checked ----------------------------------------------
    def prepared_at(self, scores: Tensor) -> Prepared:
        """The bound inputs with ``scores`` (already checked) as a :class:`Prepared`."""
        b = self._inp
        return Prepared(scores, b.labels, b.groups, b.pairs, b.weights, b.state,
                        b.group_weights)

    def _value(self, scores: Tensor) -> Tensor:
        return self.loss._value(self.prepared_at(scores))

    def _grad_hess(self, scores: Tensor, hess: str) -> Tuple[Tensor, Tensor]:
        g, h = self.loss._grad_hess(self.prepared_at(scores), hess)
        return _per_doc(self._inp, g, h)

    def _value_grad_hess(self, scores: Tensor, hess: str) -> Tuple[Tensor, Tensor, Tensor]:
        return self.loss._value_grad_hess(self.prepared_at(scores), hess)

    def _check(self, scores, *, finite: bool = True) -> Tensor:
        """The scores' type, shape and device (metadata: no host synchronisation); with
        ``finite`` also their values (one read: a synchronisation on an accelerator)."""
        if not isinstance(scores, Tensor):
            raise ValueError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
        if not scores.dtype.is_floating_point:
            raise ValueError(f"scores must be a floating tensor, got {scores.dtype}")
        if scores.dim() != 1 or scores.shape[0] != self.n:
            raise ValueError(f"scores must have shape ({self.n},) like the bound labels, got "
                             f"{tuple(scores.shape)}")
        if scores.device != self.groups.device:
            raise ValueError(f"scores are on {scores.device} but the loss was bound on "
                             f"{self.groups.device}")
        if finite:
            _check_finite(scores.detach(), "scores")
        return scores

    # -- public -------------------------------------------------------------------------
    def value(self, scores: Tensor) -> Tensor:
        """The loss at ``scores`` ``(n,)``: what ``loss(scores, labels, groups, ...)``
        returns (a scalar, or ``(G,)`` with ``reduction="none"``), differentiable.

        **No host synchronisation**: the forward and its backward read no value of the
        scores on the host (no ``item``, ``bool`` of a tensor, data-dependent shape), so a
        training step on an accelerator never waits for the device. The scores' type, shape
        and device are checked (metadata); their *values* are not: non-finite scores give a
        NaN loss (``0 · Σ s`` is added, NaN exactly when some score is not finite: a kernel
        that would skip such a score cannot hide it; the unbound call, ``grad_hess`` and
        ``value_grad_hess`` refuse them with a ``ValueError``)."""
        v = self._value(self._check(scores, finite=False))
        return v + (scores.detach().sum() * 0.0).to(v.dtype)

    def __call__(self, scores: Tensor) -> Tensor:
        return self.value(scores)

    def grad_hess(self, scores: Tensor, *, hess: str = "diag") -> Tuple[Tensor, Tensor]:
        """``(grad, curvature)``, both ``(n,)``: the unbound :meth:`RankingLoss.grad_hess`."""
        check_hess(hess)
        return self._grad_hess(self._check(scores).detach(), hess)

    def value_grad_hess(self, scores: Tensor, *, hess: str = "diag"
                        ) -> Tuple[Tensor, Tensor, Tensor]:
        """``(value 0-d, grad (n,), curvature (n,))`` in one call (no autograd): the value
        of the loss reduced as the gradient is (``"none"`` summed), in the scores' dtype."""
        check_hess(hess)
        return self._value_grad_hess(self._check(scores).detach(), hess)

    def value_terms(self, scores: Tensor) -> ValueTerms:
        """The loss at ``scores`` as :class:`ValueTerms` (``"none"`` summed): the exact sum
        of the per-query terms gives :meth:`value` bit for bit; the parts a data-parallel
        fit sums over the ranks, exactly. The terms are differentiable in ``scores``."""
        inp = self.prepared_at(self._check(scores))
        per, has = self.loss._weighted_per_group(inp)
        red = "sum" if self.loss.reduction == "none" else self.loss.reduction
        return ValueTerms(*reduction_terms(per, red, has), self.loss._value_scale(inp))

    def value_terms_grad_hess(self, scores: Tensor, *, hess: str = "diag"
                              ) -> Tuple[ValueTerms, Tensor, Tensor]:
        """``(ValueTerms, grad (n,), curvature (n,))`` in one call: :meth:`value_terms`
        (detached) from :meth:`value_grad_hess`'s pass."""
        check_hess(hess)
        inp = self.prepared_at(self._check(scores).detach())
        per, has, g, h = self.loss._weighted_grad_hess(inp, hess)
        red = "sum" if self.loss.reduction == "none" else self.loss.reduction
        scale = self.loss._value_scale(inp)
        return ValueTerms(*reduction_terms(per.detach(), red, has), scale), g, h

    def with_group_weights(self, group_weights: Optional[Tensor]) -> "BoundLoss":
        r"""This bound loss with every query's terms multiplied by its weight:
        ``group_weights`` ``(G,)`` finite, ``>= 0`` (``None``: unweighted). The value is
        :math:`\sum_q c_q L_q` (reduced as the loss reduces), the gradient and the curvature
        of query ``q``'s documents are multiplied by :math:`c_q` (so a pair of query ``q``
        weighs :math:`c_q w_i w_j`); the bound state is shared, not recomputed."""
        if group_weights is None:
            return self
        gw = torch.as_tensor(group_weights, device=self.groups.device)
        if gw.shape != (self.groups.num_groups,):
            raise ValueError(f"group_weights must have shape ({self.groups.num_groups},), one "
                             f"per query, got {tuple(gw.shape)}")
        if not bool(torch.isfinite(gw).all()) or bool((gw < 0).any()):
            raise ValueError("group_weights must be finite and non-negative (no NaN or inf)")
        b = self._inp
        return BoundLoss(self.loss, Prepared(None, b.labels, b.groups, b.pairs, b.weights,
                                             b.state, gw))

    def __repr__(self) -> str:
        return f"BoundLoss({self.loss!r}, n={self.n}, num_groups={self.groups.num_groups})"


class RankingLoss(Params, nn.Module):
    """Base class: stores ``reduction`` and defines the call/``grad_hess``/``bind`` contract.

    Subclasses implement :meth:`per_group` (``(G,)`` per-query losses from
    :class:`Prepared` inputs, differentiable) and :meth:`_grad_hess` (closed-form gradient
    and curvature of the summed loss), both reading the score-independent state of
    :meth:`_bind_state` through :meth:`_state`. ``has_pairs`` (``(G,)`` bool) feeds
    ``"mean"``.
    """

    #: the loss is a sum of per-query terms (a block-diagonal Hessian by query), which the
    #: exact autograd curvature of :mod:`torchrankboost.boosting.curvature` exploits
    per_query = True
    #: labels are relevance grades (``>= 0``) unless a loss documents a meaning for negative
    #: ones (``AdaBoostLoss``: below the threshold; ``SquaredErrorLoss``: a real target)
    negative_labels = False

    def __init__(self, *, reduction: str = "sum"):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    # -- to implement -------------------------------------------------------------
    def per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        """Return ``(per_group_loss (G,), has_pairs (G,) bool or None)``."""
        raise NotImplementedError

    def _grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor]:
        raise NotImplementedError(f"{type(self).__name__} has no closed-form grad_hess")

    def _bind_state(self, inp: Prepared) -> BindState:
        """The score-independent state of validated inputs (``inp.scores`` is ``None``):
        computed once by :meth:`bind`. Raise ``ValueError`` here for inputs the loss
        refuses. Default: nothing."""
        return BindState()

    def _per_group_grad_hess(self, inp: Prepared, hess: str
                             ) -> Tuple[Tensor, Optional[Tensor], Tensor, Tensor]:
        """``(per_group, has_pairs, grad, curvature)`` at detached scores; override to
        share work between the value and the gradient. Default: both separately."""
        with torch.no_grad():
            per, has = self.per_group(inp)
        g, h = self._grad_hess(inp, hess)
        return per, has, g, h

    # -- shared -------------------------------------------------------------------
    def _state(self, inp: Prepared):
        """The bound state of ``inp`` (computed here, once, for unbound inputs)."""
        if inp.state is None:
            inp.state = self._bind_state(inp)
        return inp.state

    def _pairs(self, pairs: PairSpec) -> PairSpec:
        """The pair spec this loss evaluates for the ``pairs`` argument (default as given)."""
        return pairs

    def _check_label_sign(self, inp: Prepared) -> None:
        """Negative labels are refused (allRank pads with -1) unless the loss gives them a
        meaning (``negative_labels``) or the pairs do not read grades (``Bipartite``: below
        the threshold; explicit pairs)."""
        y = inp.labels
        if (not self.negative_labels and y is not None and y.numel()
                and not isinstance(inp.pairs, (Bipartite, ExplicitPairs))
                and float(y.min()) < 0):
            raise ValueError(
                f"{type(self).__name__} needs non-negative relevance labels, got "
                f"{float(y.min()):g}; a label of -1 usually marks padding: pass the padded "
                f"(B, L) tensors with mask=... (or drop the padded slots); real-valued grades "
                f"can be shifted to >= 0 (only their order counts)")

    def _inputs(self, scores, labels, groups, *, pairs=None, **kw) -> Prepared:
        """:func:`prepare_inputs` (pairs as :meth:`_pairs` says), then the label-sign
        rule (:meth:`_check_label_sign`)."""
        inp = prepare_inputs(scores, labels, groups, pairs=self._pairs(pairs), **kw)
        self._check_label_sign(inp)
        return inp

    def _bound(self, inp: Prepared, **options) -> BoundLoss:
        """Bind validated inputs (their scores ignored): the state, computed once."""
        base = Prepared(None, inp.labels, inp.groups.fix_sizes(), inp.pairs, inp.weights)
        base.state = self._bind_state(base, **options)
        return BoundLoss(self, base)

    def _value_scale(self, inp: Prepared) -> float:
        """The constant the reduced loss is divided by (1.0; see :class:`ValueTerms`)."""
        return 1.0

    def _weighted_per_group(self, inp: Prepared) -> Tuple[Tensor, Optional[Tensor]]:
        """:meth:`per_group` with each query's loss multiplied by its weight."""
        per_group, has_pairs = self.per_group(inp)
        if inp.group_weights is not None:
            per_group = per_group * inp.group_weights.to(per_group.dtype)
        return per_group, has_pairs

    def _weighted_grad_hess(self, inp: Prepared, hess: str):
        """:meth:`_per_group_grad_hess` with the query weights applied."""
        per, has, g, h = self._per_group_grad_hess(inp, hess)
        if inp.group_weights is not None:
            per = per * inp.group_weights.to(per.dtype)
            g, h = _per_doc(inp, g, h)
        return per, has, g, h

    def _value(self, inp: Prepared) -> Tensor:
        per_group, has_pairs = self._weighted_per_group(inp)
        return reduce_per_group(per_group, self.reduction, has_pairs).to(inp.scores.dtype)

    def _value_grad_hess(self, inp: Prepared, hess: str) -> Tuple[Tensor, Tensor, Tensor]:
        per, has, g, h = self._weighted_grad_hess(inp, hess)
        red = "sum" if self.reduction == "none" else self.reduction
        return reduce_per_group(per.detach(), red, has).to(inp.scores.dtype), g, h

    # -- public -------------------------------------------------------------------
    def bind(self, labels: Optional[Tensor], groups: Optional[Groups] = None, *,
             pairs: PairSpec = None, weights: Optional[Tensor] = None) -> BoundLoss:
        """Bind the labels once: a :class:`BoundLoss` evaluating this loss at any scores.

        Validates ``labels`` ``(n,)``, ``groups``, ``pairs`` and ``weights`` ``(n,)`` as the
        call does (the same ``ValueError`` messages) and precomputes everything that does
        not depend on the scores. ``bound(scores)`` then equals
        ``self(scores, labels, groups, pairs=pairs, weights=weights)``, and
        ``bound.grad_hess(scores, hess=h)`` equals ``self.grad_hess(scores, labels, groups,
        pairs=pairs, weights=weights, hess=h)``. The state lives on the labels' device.
        """
        inp = prepare_targets(labels, groups, pairs=self._pairs(pairs), weights=weights)
        self._check_label_sign(inp)
        return self._bound(inp)

    def forward(self, scores: Tensor, labels: Optional[Tensor] = None,
                groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                weights: Optional[Tensor] = None, mask: Optional[Tensor] = None) -> Tensor:
        inp = self._inputs(scores, labels, groups, pairs=pairs, weights=weights, mask=mask)
        return self._bound(inp)._value(inp.scores)

    def grad_hess(self, scores: Tensor, labels: Optional[Tensor] = None,
                  groups: Optional[Groups] = None, *, pairs: PairSpec = None,
                  weights: Optional[Tensor] = None, hess: str = "diag"
                  ) -> Tuple[Tensor, Tensor]:
        """Per-document gradient and curvature of the reduced loss (``"none"`` = sum).

        Args:
            hess: ``"diag"`` for the exact Hessian diagonal, ``"bound"`` for a diagonal
                that upper-bounds the Hessian (``D - H ⪰ 0``).

        Returns:
            ``(grad, curvature)``, both ``(n,)`` in the dtype of ``scores``.
        """
        check_hess(hess)
        inp = self._inputs(scores.detach(), labels, groups, pairs=pairs, weights=weights)
        return self._bound(inp)._grad_hess(inp.scores, hess)

    def round_diagnostics(self, scores: Tensor, labels: Optional[Tensor] = None,
                          groups: Optional[Groups] = None) -> Dict[str, float]:
        """Scalars a boosting driver logs each round for this loss, besides the loss itself
        (plain floats keyed by name). None by default; ``AdaBoostLoss`` gives the F-skew."""
        return {}

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
