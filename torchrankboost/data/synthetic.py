"""Synthetic LETOR-shaped ranking data (:func:`make_letor`), seeded and vectorised."""

from __future__ import annotations

import math
from typing import Dict, Tuple, Union

import torch
from torch import Tensor

from ..groups import Groups
from .dataset import RankingData
from ..contract import DeviceLike

__all__ = ["make_letor"]


def make_letor(n_queries: int, docs_per_query: float, n_features: int, n_grades: int = 5, *,
               seed: int = 0, size_spread: float = 0.5, min_docs: int = 1,
               informative: Union[int, float] = 0.25, nonlinear: float = 0.5,
               noise: float = 0.5, query_shift: float = 0.5, tie_fraction: float = 0.2,
               sparse_fraction: float = 0.2, grade_decay: float = 0.5,
               dtype: torch.dtype = torch.float32, device: DeviceLike = None,
               return_info: bool = False
               ) -> Union[RankingData, Tuple[RankingData, Dict[str, Tensor]]]:
    """A seeded synthetic LETOR-shaped data set (for scale work and smoke tests).

    Generative story (all vectorised; 800k documents × 136 features take a few seconds):

    * query sizes ``~ round(LogNormal)`` with mean ``docs_per_query`` and log-sd
      ``size_spread`` (0: all equal), at least ``min_docs``;
    * latent document vectors ``Z ~ N(0, I_F)``; ``k`` informative columns (``informative``:
      a count, or a fraction of ``F``) carry relevance, the rest are noise;
    * latent relevance ``r = Z_inf·w / ‖w‖ + nonlinear·(tanh(Z_a·Z_b) + |Z_c| − E|Z_c|)
      + noise·ε + u_q`` with a per-query offset ``u_q ~ N(0, 0.5²)`` (some queries have
      more relevant documents);
    * grades ``0..n_grades-1`` cut ``r`` at global quantiles with proportions ∝
      ``grade_decay^k`` (most documents irrelevant, as in web search data);
    * observed features ``X = Z + query_shift·s_q`` with a per-query, per-feature shift
      ``s_q ~ N(0, 1)`` (query-level effects that per-query normalisation removes); a
      ``tie_fraction`` of the columns is rounded to half-integers (many ties) and a
      ``sparse_fraction`` is clipped at 0 (about half zeros, as for count features).
      The informative columns sit at random positions.

    Returns:
        :class:`RankingData` (``qid`` = query index, ``X``/``labels`` in ``dtype`` on
        ``device``); with ``return_info=True`` also a dict with ``"informative"`` (a
        ``(F,)`` bool mask of the informative columns) and ``"relevance"`` (``r``).
    """
    _check_letor_args(n_queries, docs_per_query, n_features, n_grades, min_docs, size_spread,
                      grade_decay, tie_fraction, sparse_fraction)
    n_queries, n_features, n_grades = int(n_queries), int(n_features), int(n_grades)
    gen = torch.Generator().manual_seed(int(seed))
    F = n_features
    k = int(round(informative * F)) if isinstance(informative, float) else int(informative)
    k = max(1, min(F, k))

    groups = _letor_sizes(n_queries, docs_per_query, size_spread, min_docs, gen)
    gi = groups.group_index
    Z = torch.randn(groups.num_docs, F, generator=gen, dtype=torch.float32)
    inf_cols = torch.randperm(F, generator=gen)[:k].sort().values
    r = _letor_relevance(Z[:, inf_cols], gi, n_queries, nonlinear, noise, gen)
    labels = _letor_grades(r, n_grades, grade_decay)
    X = _letor_features(Z, gi, n_queries, query_shift, tie_fraction, sparse_fraction, gen)
    inf_mask = torch.zeros(F, dtype=torch.bool)
    inf_mask[inf_cols] = True

    n = groups.num_docs
    data = RankingData(X.to(dtype=dtype, device=device), labels.to(dtype=dtype, device=device),
                       groups.to(device if device is not None else "cpu"),
                       gi.clone().to(device), torch.arange(n, device=device))
    if return_info:
        return data, {"informative": inf_mask, "relevance": r}
    return data


def _check_letor_args(n_queries, docs_per_query, n_features, n_grades, min_docs, size_spread,
                      grade_decay, tie_fraction, sparse_fraction) -> None:
    for name, v in (("n_queries", n_queries), ("n_features", n_features), ("n_grades", n_grades),
                    ("min_docs", min_docs)):
        if isinstance(v, bool) or int(v) != v or v < (0 if name == "n_queries" else 1):
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not docs_per_query > 0:
        raise ValueError(f"docs_per_query must be positive, got {docs_per_query!r}")
    if size_spread < 0:
        raise ValueError("size_spread must be non-negative")
    if not 0 < grade_decay:
        raise ValueError("grade_decay must be positive")
    for name, v in (("tie_fraction", tie_fraction), ("sparse_fraction", sparse_fraction)):
        if not 0 <= v <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")


def _letor_sizes(n_queries: int, docs_per_query: float, size_spread: float, min_docs: int,
                 gen) -> Groups:
    """Query sizes ``~ round(LogNormal)`` with mean ``docs_per_query``, at least
    ``min_docs``."""
    if size_spread > 0:
        mu = math.log(docs_per_query) - 0.5 * size_spread ** 2
        raw = torch.exp(mu + size_spread * torch.randn(n_queries, generator=gen, dtype=torch.float64))
    else:
        raw = torch.full((n_queries,), float(docs_per_query), dtype=torch.float64)
    return Groups.from_sizes(raw.round().long().clamp_min(int(min_docs)))


def _letor_relevance(Zi: Tensor, gi: Tensor, n_queries: int, nonlinear: float, noise: float,
                     gen) -> Tensor:
    """Latent relevance from the informative latent columns ``Zi``: a random direction, a
    nonlinear term, noise and a per-query offset."""
    n, k = Zi.shape
    w = torch.randn(k, generator=gen, dtype=torch.float32)
    w = w / w.norm()
    r = Zi @ w
    if nonlinear:
        a = torch.randint(0, k, (3,), generator=gen)
        r += nonlinear * (torch.tanh(Zi[:, a[0]] * Zi[:, a[1]]) + Zi[:, a[2]].abs()
                          - math.sqrt(2 / math.pi))
    r += noise * torch.randn(n, generator=gen, dtype=torch.float32)
    r += 0.5 * torch.randn(n_queries, generator=gen, dtype=torch.float32)[gi]
    return r


def _letor_grades(r: Tensor, n_grades: int, grade_decay: float) -> Tensor:
    """Grades ``0..n_grades-1`` cutting ``r`` at global quantiles, proportions ∝ decay^g."""
    n = r.shape[0]
    p = torch.tensor([grade_decay ** g for g in range(n_grades)], dtype=torch.float64)
    cum = torch.cumsum(p / p.sum(), 0)[:-1]
    labels = torch.zeros(n, dtype=torch.float32)
    if n and n_grades > 1:
        sr = torch.sort(r).values
        cuts = sr[(cum * n).long().clamp_max(n - 1)]
        labels = torch.bucketize(r, cuts, right=True).to(torch.float32)
    return labels


def _letor_features(Z: Tensor, gi: Tensor, n_queries: int, query_shift: float,
                    tie_fraction: float, sparse_fraction: float, gen) -> Tensor:
    """Observed features (in place on ``Z``): per-query shifts, tied and sparse columns."""
    F = Z.shape[1]
    X = Z
    if query_shift:
        X += query_shift * torch.randn(n_queries, F, generator=gen, dtype=torch.float32)[gi]
    n_tie = int(round(tie_fraction * F))
    n_sparse = min(F - n_tie, int(round(sparse_fraction * F)))
    kind_perm = torch.randperm(F, generator=gen)
    tie_cols, sparse_cols = kind_perm[:n_tie], kind_perm[n_tie:n_tie + n_sparse]
    if n_tie:
        X[:, tie_cols] = torch.round(X[:, tie_cols] * 2) / 2
    if n_sparse:
        X[:, sparse_cols] = X[:, sparse_cols].clamp_min(0)
    return X
