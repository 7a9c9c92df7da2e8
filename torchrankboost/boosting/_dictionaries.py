"""Finite weak-ranker dictionaries for the RankBoost family (internal).

A *source* turns the user's ``rankers=`` argument and the training features into a
dictionary (:class:`~._pair_stats.CodesDictionary` for threshold stumps,
:class:`~._pair_stats.RealDictionary` for real-valued or matrix rankers), a description of a
candidate (feature, threshold) and the fitted weak model of a candidate (a learners
``StumpModel`` / ``FeatureModel``, so the result is a plain :class:`Ensemble`).

``MatrixRankers`` is the finite dictionary given by its outputs: the "features" *are* the
weak-ranker outputs, ``h_j(x) = x[:, j]`` (the 8×8 example of Rudin–Schapire).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._pair_stats import CodesDictionary, RealDictionary
from .learners import FeatureModel, FeatureRankers, Stumps

__all__ = ["MatrixRankers", "make_source"]


class MatrixRankers:
    """A finite dictionary given as a matrix of weak-ranker outputs.

    ``fit(H, ...)`` with ``H`` of shape ``(n, J)``: column ``j`` is ``h_j`` evaluated on the
    training documents. Binary {0, 1} columns get the closed-form steps; real-valued columns
    use line searches. The fitted model is ``Σ_j λ_j H[:, j]`` (weak models are
    ``FeatureModel(normalize=False)``, i.e. ``h_j(x) = x_j``) and predicts from any ``(m, J)``
    matrix of the same rankers' outputs.
    """

    def __repr__(self):
        return "MatrixRankers()"


class _Source:
    dictionary = None
    kind = ""

    def describe(self, c: int) -> dict:
        raise NotImplementedError

    def make_model(self, c: int):
        raise NotImplementedError


class _StumpSource(_Source):
    kind = "stumps"

    def __init__(self, X: Tensor, stumps: Stumps):
        self.stumps = stumps
        self.prepared = p = stumps.prepare(X)
        b = p.binned
        codes = b.codes.long()
        codes = torch.where(codes == b.missing_code, torch.zeros_like(codes), codes)  # NaN: h = 0
        self.T = p.thresholds.shape[1]
        self.dictionary = CodesDictionary(codes, p.valid)
        self.F = codes.shape[1]

    def describe(self, c):
        f, t = divmod(int(c), self.T)
        return {"feature": f, "threshold": float(self.prepared.thresholds[f, t])}

    def make_model(self, c):
        f, t = divmod(int(c), self.T)
        return self.stumps.make_model(f, t, prepared=self.prepared)


class _FeatureSource(_Source):
    kind = "features"

    def __init__(self, X: Tensor, rankers: FeatureRankers):
        self.rankers = rankers
        self.prepared = p = rankers.prepare(X)
        self.dictionary = RealDictionary(p.values, valid=p.valid)
        self.F = X.shape[1]

    def describe(self, c):
        return {"feature": int(c), "threshold": None}

    def make_model(self, c):
        return self.rankers.make_model(self.prepared, int(c))


class _MatrixSource(_Source):
    kind = "matrix"

    def __init__(self, H: Tensor):
        self.dictionary = RealDictionary(torch.nan_to_num(H, nan=0.0))
        self.F = H.shape[1]
        self.dtype = H.dtype if H.dtype in (torch.float32, torch.float64) else torch.float32
        self.device = H.device

    def describe(self, c):
        return {"feature": int(c), "threshold": None}

    def make_model(self, c):
        z = torch.zeros((), dtype=self.dtype, device=self.device)
        return FeatureModel(feature=int(c), lo=z, hi=z.clone(), normalize=False,
                            coef=torch.tensor([0.0, 1.0], dtype=self.dtype, device=self.device))


def make_source(rankers, X: Tensor) -> _Source:
    """Candidate dictionary for ``rankers`` on the training features ``X``: ``Stumps(...)``
    (binary threshold stumps), ``FeatureRankers(...)`` (real-valued scaled features),
    ``MatrixRankers()`` or ``None`` (``Stumps()``)."""
    if rankers is None:
        rankers = Stumps()
    if isinstance(rankers, MatrixRankers):
        return _MatrixSource(X)
    if isinstance(rankers, Stumps):
        return _StumpSource(X, rankers)
    if isinstance(rankers, FeatureRankers):
        return _FeatureSource(X, rankers)
    raise ValueError(
        f"rankers must be Stumps(...), FeatureRankers(...) or MatrixRankers(); got {rankers!r}")
