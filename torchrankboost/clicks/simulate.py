r"""Click simulation for unbiased learning to rank (the protocol of the literature).

A logging ("production") ranker orders each query's documents by its scores; the top
``top_k`` are shown. Each simulated session picks a query uniformly at random and produces
clicks under a click model:

* relevance to click probability, with noise ``ε⁻`` (click on a non-relevant document) and
  ``ε⁺`` (click on the most relevant grade):
  :math:`\rho(y) = \varepsilon^- + (\varepsilon^+ - \varepsilon^-)\,
  \frac{2^y - 1}{2^{y_{max}} - 1}`;
* ``"pbm"`` (position-based model): the document at rank :math:`p` is examined with
  probability :math:`\theta_p = (1/p)^\eta`, independently of the others, and clicked when
  examined with probability :math:`\rho(y)`: :math:`P(c=1) = \theta_p\,\rho(y)`;
* ``"cascade"``: the user scans from the top, clicks with probability :math:`\rho(y)` and
  stops at the first click;
* ``"dcm"`` (dependent click model): as the cascade, but after a click at rank :math:`p`
  goes on with probability :math:`\lambda_p` (``continue_prob``).

Everything is vectorised over sessions (a ``(sessions, top_k)`` table of shown documents),
seeded by a :class:`torch.Generator`, and returns per-document click counts summed over the
sessions, the displayed position (1-based rank; 0 = never shown) and the sessions per query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from ..groups import Groups, as_groups
from ..contract import ArrayLike

__all__ = ["ClickLog", "simulate_clicks", "pbm_propensity", "relevance_click_prob",
           "logged_positions", "MODELS"]

MODELS = ("pbm", "cascade", "dcm")
F64 = torch.float64


@dataclass
class ClickLog:
    """Simulated clicks of ``n`` documents in ``G`` queries.

    Attributes:
        clicks: ``(n,)`` int64, clicks summed over the sessions.
        position: ``(n,)`` int64, the displayed 1-based rank (0: below the cut-off, never shown).
        sessions: ``(G,)`` int64, sessions of each query.
        groups: the :class:`~torchrankboost.Groups`.
    """

    clicks: Tensor
    position: Tensor
    sessions: Tensor
    groups: Groups

    @property
    def impressions(self) -> Tensor:
        """``(n,)`` int64: sessions in which each document was shown."""
        s = self.sessions[self.groups.group_index]
        return torch.where(self.position > 0, s, torch.zeros_like(s))

    def ctr(self) -> Tensor:
        """``(n,)`` float64 click-through rates ``clicks / impressions`` (0 when never shown)."""
        imp = self.impressions.to(F64)
        return torch.where(imp > 0, self.clicks.to(F64) / imp.clamp_min(1), torch.zeros_like(imp))


def pbm_propensity(n_positions: int, eta: float = 1.0) -> Tensor:
    r"""``(n_positions,)`` float64 examination probabilities :math:`(1/p)^\eta`, ``p = 1..K``."""
    p = torch.arange(1, int(n_positions) + 1, dtype=F64)
    return p.pow(-float(eta))


def relevance_click_prob(labels: Tensor, *, eps_minus: float = 0.1, eps_plus: float = 1.0,
                         max_label: Optional[float] = None) -> Tensor:
    r"""``(n,)`` float64 :math:`\rho(y) = \varepsilon^- + (\varepsilon^+-\varepsilon^-)
    (2^y-1)/(2^{y_{max}}-1)` (``max_label``: :math:`y_{max}`, default ``labels.max()``)."""
    y = labels.to(F64)
    ymax = float(y.max()) if max_label is None else float(max_label)
    if ymax <= 0:
        return torch.full_like(y, float(eps_minus))
    gain = (torch.exp2(y) - 1.0) / (2.0 ** ymax - 1.0)
    return float(eps_minus) + (float(eps_plus) - float(eps_minus)) * gain.clamp(0.0, 1.0)


def logged_positions(scores: Tensor, groups: Groups) -> Tensor:
    """``(n,)`` int64 1-based rank of each document in its query by descending ``scores``
    (ties by document order)."""
    gi = groups.group_index
    order = torch.argsort(-scores.to(F64), stable=True)
    order = order[torch.argsort(gi[order], stable=True)]  # by query, then by score
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=order.device)
    return rank - groups.offsets[gi] + 1


def _shown_table(position: Tensor, groups: Groups, k: int) -> Tensor:
    """``(G, k)`` int64 document index shown at rank ``r+1`` of each query (-1: none)."""
    G = groups.num_groups
    table = torch.full((G, k), -1, dtype=torch.long)
    shown = (position >= 1) & (position <= k)
    idx = torch.nonzero(shown, as_tuple=False).reshape(-1)
    table[groups.group_index[idx], position[idx] - 1] = idx
    return table


def _session_clicks(rho: Tensor, exam: Tensor, model: str, cont: Tensor,
                    gen: torch.Generator) -> Tensor:
    """``(S, k)`` bool clicks of sessions with click probabilities ``rho`` ``(S, k)`` (0 at
    empty slots) and PBM examination ``exam`` ``(k,)``."""
    u = torch.rand(rho.shape, generator=gen, dtype=F64)
    if model == "pbm":
        e = torch.rand(rho.shape, generator=gen, dtype=F64) < exam
        return e & (u < rho)
    attract = u < rho
    if model == "cascade":
        stop = attract.to(F64)
    else:  # dcm: after a click at rank r stop with probability 1 - λ_r
        leave = torch.rand(rho.shape, generator=gen, dtype=F64) >= cont
        stop = (attract & leave).to(F64)
    alive = torch.cumprod(1.0 - stop, dim=1)  # still scanning after rank r
    examined = torch.cat([torch.ones_like(alive[:, :1]), alive[:, :-1]], dim=1) > 0
    return examined & attract


def simulate_clicks(labels: ArrayLike, groups: Optional[Groups], logging_scores: ArrayLike, *,
                    n_sessions: int, model: str = "pbm",
                    eta: float = 1.0, eps_minus: float = 0.1, eps_plus: float = 1.0,
                    top_k: int = 10, max_label: Optional[float] = None,
                    continue_prob: Union[float, Sequence[float]] = 0.5,
                    generator: Optional[torch.Generator] = None, seed: int = 0,
                    chunk: int = 1 << 18) -> ClickLog:
    r"""Simulate ``n_sessions`` sessions of clicks on the logging ranker's top ``top_k``.

    Args:
        labels: ``(n,)`` true relevance grades; ``groups``: a Groups or ``(n,)`` query ids.
        logging_scores: ``(n,)`` scores of the production ranker (the displayed order).
        n_sessions: sessions in all, each on a query drawn uniformly.
        model: ``"pbm"``, ``"cascade"`` or ``"dcm"`` (see the module docstring).
        eta: PBM examination exponent: :math:`\theta_p = (1/p)^\eta`.
        eps_minus: click probability of a non-relevant document.
        eps_plus: click probability of a most relevant document.
        top_k: documents shown per session (the cut-off).
        continue_prob: DCM's :math:`\lambda_p`, a float or ``top_k`` values.
        generator: the random source (it wins over ``seed``).
        seed: seeds the random source when no ``generator`` is given.
        chunk: sessions simulated at once (memory: about ``chunk × top_k × 24`` bytes).

    Returns:
        a :class:`ClickLog` (counts, positions, sessions per query).
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if int(top_k) < 1 or int(n_sessions) < 0:
        raise ValueError(f"top_k must be >= 1 and n_sessions >= 0, got {top_k}, {n_sessions}")
    if not (0.0 <= eps_minus <= eps_plus <= 1.0):
        raise ValueError(f"need 0 <= eps_minus <= eps_plus <= 1, got {eps_minus}, {eps_plus}")
    labels = torch.as_tensor(labels).cpu()
    n, k = labels.shape[0], int(top_k)
    groups = as_groups(groups, n).to("cpu")
    gen = generator if generator is not None else torch.Generator().manual_seed(int(seed))
    position = logged_positions(torch.as_tensor(logging_scores).cpu(), groups)
    position = torch.where(position <= k, position, torch.zeros_like(position))
    rho_doc = relevance_click_prob(labels, eps_minus=eps_minus, eps_plus=eps_plus,
                                   max_label=max_label)
    table = _shown_table(position, groups, k)
    rho_tab = torch.where(table >= 0, rho_doc[table.clamp_min(0)], torch.zeros((), dtype=F64))
    exam = pbm_propensity(k, eta)
    cont = torch.as_tensor(continue_prob, dtype=F64).expand(k)
    G = groups.num_groups
    q_all = torch.randint(G, (int(n_sessions),), generator=gen)
    clicks = torch.zeros(n, dtype=torch.long)
    for lo in range(0, int(n_sessions), int(chunk)):  # bounded memory, not per session
        q = q_all[lo:lo + int(chunk)]
        c = _session_clicks(rho_tab[q], exam, model, cont, gen)
        docs = table[q][c]
        clicks.index_add_(0, docs, torch.ones_like(docs))
    sessions = torch.bincount(q_all, minlength=G)
    return ClickLog(clicks=clicks, position=position, sessions=sessions, groups=groups)
