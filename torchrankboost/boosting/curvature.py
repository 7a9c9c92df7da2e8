r"""The autograd curvature of any differentiable loss: its gradient and the exact Hessian
diagonal by Hessian-vector products (the fallback of the fit objective for a loss without
a closed-form ``grad_hess``).

A boosting round needs, besides the gradient, a per-document curvature
:math:`h_i = \partial^2 L / \partial s_i^2`, ``(n,)``. Our losses give it in closed form
(``grad_hess``); for any other loss it comes from autograd here
(:func:`autograd_grad_hess`: the gradient by one backward pass, the diagonal by
:func:`hessian_diagonal` when it needs few enough products, else unit curvature).

**Per-query losses.** A ranking loss is a sum of per-query terms, so its Hessian is block
diagonal by query. Then one Hessian-vector product serves every query at once: the probe
:math:`v^{(j)}` holds a 1 at within-query position :math:`j` of every query and 0 elsewhere,
and :math:`(H v^{(j)})_i = H_{ii}` for each document :math:`i` at position :math:`j` (the
other ones of the probe sit in other blocks). The exact diagonal costs
:math:`\max_q n_q` products (the longest query: 121 on MQ2008) instead of :math:`n`
(15,211). A loss declares itself per-query with a ``per_query = True`` attribute (all of the
library's ranking losses do) or the :func:`per_query` decorator; only then is the saving
used. Otherwise :math:`n` probes (the identity) are needed, and the Hessian must be small.

Probes are processed ``chunk`` at a time (a ``(chunk, n)`` block of products), which bounds
the memory. The products are computed by forward-over-reverse ``torch.func`` (``vmap`` of
``jvp`` of ``grad``); a loss that ``torch.func`` cannot transform falls back to batched
double backward, then to one double backward per probe. Which path runs is logged on the
``torchrankboost`` logger, and a fallback is announced with a warning naming the cause:
never a silent slowdown.
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable, Optional, Tuple

import torch
from torch import Tensor

from ..groups import Groups
from ..contract import ArrayLike
from ..groups import GroupsLike

__all__ = ["per_query", "is_per_query", "hessian_diagonal", "hvp_probes", "autograd_grad_hess",
           "scalar"]

log = logging.getLogger("torchrankboost")

# Elements of the (chunk, n) product block computed at once (doubles: 128 MiB).
DEFAULT_BLOCK_ELEMENTS = 1 << 24


def per_query(fn: Callable) -> Callable:
    """Mark ``fn(scores, labels, groups)`` as a sum of per-query terms (block-diagonal
    Hessian), so its exact curvature costs one product per position of the longest query::

        @per_query
        def listnet(scores, labels, groups):
            ...
    """
    try:
        fn.per_query = True
    except AttributeError:  # e.g. a bound method: wrap it
        def wrapped(*args, **kwargs):
            return fn(*args, **kwargs)

        wrapped.__name__ = getattr(fn, "__name__", "loss")
        wrapped.per_query = True
        return wrapped
    return fn


def is_per_query(loss) -> bool:
    """Whether ``loss`` declares a block-diagonal (per-query) Hessian with a true
    ``per_query`` attribute (every :class:`~torchrankboost.losses.RankingLoss` does: each of
    its terms lies inside one query, explicit pairs are checked to)."""
    return bool(getattr(loss, "per_query", False))


def scalar(v) -> Tensor:
    """The loss's value as a 0-d tensor (summed when the loss returned a vector)."""
    if not isinstance(v, Tensor):
        raise ValueError(f"the loss must return a tensor, got {type(v).__name__}")
    return v.sum() if v.dim() > 0 else v


def _probe_block(position: Optional[Tensor], j0: int, j1: int, n: int, like: Tensor) -> Tensor:
    """``(j1 - j0, n)`` probes: row ``r`` is 1 where the within-query position is ``j0 + r``
    (the identity's rows when ``position`` is ``None``)."""
    idx = torch.arange(j0, j1, device=like.device)
    pos = position if position is not None else torch.arange(n, device=like.device)
    return (pos.unsqueeze(0) == idx.unsqueeze(1)).to(like.dtype)


class _HVP:
    """Batched Hessian-vector products of ``fn`` at ``s`` along rows of a ``(c, n)`` block,
    by the fastest path that works for ``fn`` (chosen on the first block, then kept)."""

    PATHS = ("torch.func", "batched double backward", "double backward per probe")

    def __init__(self, fn: Callable[[Tensor], Tensor], s: Tensor):
        self.fn = fn
        self.s = s
        self.path: Optional[str] = None
        self._g = None  # (x, grad) with a graph, for the autograd paths

    def _func(self, V: Tensor) -> Tensor:
        gfn = torch.func.grad(lambda x: scalar(self.fn(x)))
        return torch.func.vmap(lambda v: torch.func.jvp(gfn, (self.s,), (v,))[1])(V)

    def _graph(self):
        if self._g is None:
            x = self.s.clone().requires_grad_(True)
            with torch.enable_grad():
                (g,) = torch.autograd.grad(scalar(self.fn(x)), x, create_graph=True)
            self._g = (x, g)
        return self._g

    def _batched(self, V: Tensor) -> Tensor:
        x, g = self._graph()
        if not g.requires_grad:  # a loss linear in the scores
            return torch.zeros_like(V)
        (HV,) = torch.autograd.grad(g, x, grad_outputs=V, is_grads_batched=True,
                                    retain_graph=True, allow_unused=True)
        return torch.zeros_like(V) if HV is None else HV.detach()

    def _loop(self, V: Tensor) -> Tensor:
        x, g = self._graph()
        if not g.requires_grad:
            return torch.zeros_like(V)
        out = torch.empty_like(V)
        for r in range(V.shape[0]):
            (row,) = torch.autograd.grad(g, x, grad_outputs=V[r], retain_graph=True,
                                         allow_unused=True)
            out[r] = 0.0 if row is None else row.detach()
        return out

    def __call__(self, V: Tensor) -> Tensor:
        if self.path is not None:
            return (self._func, self._batched, self._loop)[self.PATHS.index(self.path)](V)
        for path, method in zip(self.PATHS, (self._func, self._batched, self._loop)):
            try:
                out = method(V)
            except Exception as exc:  # noqa: BLE001 - reported, then the next path
                if path == self.PATHS[-1]:
                    raise
                warnings.warn(f"exact curvature: the {path} path failed for this loss "
                              f"({type(exc).__name__}: {exc}); trying the next, slower path",
                              RuntimeWarning, stacklevel=4)
                continue
            self.path = path
            log.info("exact curvature: Hessian-vector products by %s", path)
            return out
        raise AssertionError("unreachable")  # pragma: no cover


def hvp_probes(n: int, groups: Optional[Groups], per_query_hessian: bool) -> int:
    """How many Hessian-vector products the exact diagonal costs."""
    if per_query_hessian and groups is not None:
        return groups.max_size
    return n


def hessian_diagonal(fn: Callable[[Tensor], Tensor], scores: Tensor,
                     groups: Optional[Groups] = None, *, per_query_hessian: bool = False,
                     block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> Tensor:
    r"""Exact diagonal of :math:`\nabla^2 fn(s)`, ``(n,)`` like ``scores``.

    Args:
        fn: maps ``(n,)`` scores to a scalar (or a tensor that is summed).
        scores: ``(n,)`` float scores (detached here).
        groups: the queries; with ``per_query_hessian=True`` the Hessian is taken to be block
            diagonal by query and ``max_q n_q`` products suffice.
        per_query_hessian: ``fn`` is a sum of per-query terms (see :func:`per_query`).
        block_elements: at most this many elements of the ``(chunk, n)`` block of products
            at once (bounds the memory; at least one probe per block).

    Cost: :func:`hvp_probes` products, ``ceil(probes / chunk)`` batched calls.
    """
    s = scores.detach()
    n = s.shape[0]
    if n == 0:
        return s.clone()
    position = None
    if per_query_hessian and groups is not None:
        if groups.num_docs != n:
            raise ValueError(f"groups cover {groups.num_docs} documents, scores have {n}")
        position = groups.to(s.device).position
    probes = hvp_probes(n, groups, per_query_hessian)
    chunk = max(1, min(probes, int(block_elements) // max(n, 1)))
    hvp = _HVP(fn, s)
    diag = torch.zeros_like(s)
    for j0 in range(0, probes, chunk):
        V = _probe_block(position, j0, min(probes, j0 + chunk), n, s)
        diag += (hvp(V) * V).sum(0)
    return diag


def autograd_grad_hess(loss: Callable, scores: Tensor, labels: ArrayLike, groups: GroupsLike, *,
                       hess: str = "diag", max_exact: int = 2048) -> Tuple[Tensor, Tensor, str]:
    """Gradient by autograd and a curvature for a loss without ``grad_hess``.

    ``hess="diag"``: the exact Hessian diagonal by Hessian-vector products
    (:func:`hessian_diagonal`) when they number at most ``max_exact`` — one per position of
    the longest query for a loss that declares itself per-query (:func:`per_query`; the
    library's losses do), else one per document — and unit curvature (Friedman's gradient
    boosting) beyond. ``hess="none"``: unit curvature. Returns ``(grad, curvature, kind)``,
    ``(n,)``, ``(n,)`` and ``"autograd-diag"`` or ``"unit"``.
    """
    s = scores.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        v = scalar(loss(s, labels, groups))
        (g,) = torch.autograd.grad(v, s, allow_unused=True)
    g = torch.zeros_like(s) if g is None else g.detach()
    blocks = is_per_query(loss)
    if hess == "diag" and hvp_probes(s.shape[0], groups, blocks) <= max_exact:
        h = hessian_diagonal(lambda x: loss(x, labels, groups), scores, groups,
                             per_query_hessian=blocks)
        return g, h, "autograd-diag"
    return g, torch.ones_like(g), "unit"
