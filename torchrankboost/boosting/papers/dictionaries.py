"""Finite weak-ranker dictionaries for the RankBoost family (internal).

A *dictionary* is the finite set of candidate weak rankers of one fit, with the sums the
paper algorithms need over all candidates at once: :class:`CodesDictionary` (binary threshold
stumps ``1[code_f > t]`` over binned codes: one packed histogram per statistic),
:class:`RealDictionary` (real-valued or 0/1 columns ``H``) and :class:`PairMatrixDictionary`
(the materialised pair matrix ``M_{p,j} = h_j(hi_p) − h_j(lo_p)`` of Rudin & Schapire 2009,
Fig. 1, for small problems). The pair statistics they combine (``U``, ``L``, the bilinear
``Q``) come from :mod:`.pair_stats`.

A *source* turns the user's ``learner=`` argument and the training features into a
dictionary, a description of a candidate (feature, threshold) and the fitted weak model of a
candidate (a learners ``StumpModel`` / ``FeatureModel``, so the result is a plain
:class:`Ensemble`).

``MatrixRankers`` is the finite dictionary given by its outputs: the "features" *are* the
weak-ranker outputs, ``h_j(x) = x[:, j]`` (the 8×8 example of Rudin–Schapire).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from ...parallel import get_context
from ...parallel.checks import check_data_parallel, supports_data_parallel
from ..learners import FeatureModel, FeatureRankers, Stumps

if TYPE_CHECKING:  # pragma: no cover
    from .pair_stats import ExplicitPairStats, PairWeights

__all__ = ["CodesDictionary", "RealDictionary", "PairMatrixDictionary", "MatrixRankers",
           "make_source"]


class CodesDictionary:
    """Binary threshold rankers ``h_{f,t}(x) = 1[code_f(x) > t]`` over integer codes (n, F).

    Candidates are flattened ``c = f * T + t``; ``valid`` (F, T) masks padded thresholds.
    ``reduce``: the data-parallel hook (``reduce(t)`` sums a float64 tensor over the ranks in
    place; the codes are this rank's documents): every per-candidate sum
    (:meth:`linear_sums`, :meth:`per_feature_sums`) is then over all ranks' documents, one
    all-reduce of its ``(F, T + 1, k)`` histogram.
    """

    binary = True

    def __init__(self, codes: Tensor, valid: Tensor, reduce=None):
        self.reduce = reduce
        self.codes = codes
        self.n, self.F = codes.shape
        self.T = valid.shape[1]
        self.NB = self.T + 1
        self.valid = valid.reshape(-1)
        self.num_candidates = self.F * self.T
        cl = codes.long().clamp(0, self.T)
        self.codesT = cl.T.contiguous()  # (F, n): scatter along the document axis
        self._pair_cache: Optional[tuple] = None
        self.active: Optional[Tensor] = None
        # pack k features into one joint code (NB^k bins <= PACK_BINS): one scatter of n·F/k
        # entries gives the joint histograms, whose marginals are the per-feature histograms
        k = 1
        while self.NB ** (k + 1) <= self.PACK_BINS and k + 1 <= self.F:
            k += 1
        self.k = k
        P = -(-self.F // k)
        pad = P * k - self.F
        cp = torch.cat([self.codesT, self.codesT.new_zeros(pad, self.n)], 0).view(P, k, self.n)
        mult = self.NB ** torch.arange(k - 1, -1, -1, device=codes.device)
        self.packed = (cp * mult[None, :, None]).sum(1)  # (P, n)
        self.P = P
        self._packed_act: Optional[Tensor] = None

    PACK_BINS = 2048

    def _hist(self, v: Tensor, packed: Tensor) -> Tensor:
        """(F, NB) histogram of ``v`` over every feature's codes."""
        P, k, NB = self.P, self.k, self.NB
        h = torch.zeros(P, NB ** k, dtype=v.dtype, device=v.device).scatter_add_(
            1, packed, v[None, :].expand(P, packed.shape[1]))
        if k == 1:
            return h
        h = h.view((P,) + (NB,) * k)
        margs = []
        for j in range(k):
            dims = tuple(d + 1 for d in range(k) if d != j)
            margs.append(h.sum(dim=dims))
        return torch.stack(margs, 1).reshape(P * k, NB)[: self.F]

    def set_active(self, active: Optional[Tensor]) -> None:
        """Restrict :meth:`linear_sums` to the documents ``active`` (indices): documents in no
        crucial pair have zero pair mass, so skipping them changes nothing but the cost."""
        if active is None or active.numel() == self.n:
            self.active, self._codesT_act = None, None
            return
        self.active = active
        self._codesT_act = self.codesT[:, active].contiguous()
        self._packed_act = self.packed[:, active].contiguous()

    def _suffix(self, hist: Tensor) -> Tensor:
        # hist (F, NB, k) -> Σ_{b > t} for t < T  -> (F, T, k)
        rc = torch.flip(torch.cumsum(torch.flip(hist, [1]), 1), [1])
        return rc[:, 1:]

    def linear_sums(self, V: Tensor) -> Tensor:
        """``Σ_i V_i h_c(x_i)`` for all candidates: V (n,) -> (C,), V (n, k) -> (C, k)."""
        one = V.dim() == 1
        packed = self.packed
        if self.active is not None:
            V = V[self.active]
            packed = self._packed_act
        cols = [V] if one else list(V.unbind(1))
        hs = [self._hist(v, packed) for v in cols]
        hist = torch.stack(hs, -1)  # (F, NB, k)
        if self.reduce is not None:
            self.reduce(hist)
        out = self._suffix(hist).reshape(self.F * self.T, -1)
        return out[:, 0] if one else out

    def edges(self, stats, w: PairWeights) -> Tensor:
        """r = ε⁺ - ε⁻ = Σ_i (U_i - L_i) h_c(x_i) for every candidate."""
        return self.linear_sums(w.U - w.L)

    def per_feature_sums(self, M: Tensor, perm: Optional[Tensor]) -> Tensor:
        """``Σ_i M_{if} h_{f,t}(x_i)`` with a per-feature value matrix (n, F) given in the
        layout of ``perm`` (sorted rows per feature) or the original layout (perm None)."""
        if perm is None:
            cT = self.codesT
        else:
            if getattr(self, "_perm_key", None) is not perm:
                self._perm_codesT = torch.gather(self.codes.long().clamp(0, self.T), 0, perm).T.contiguous()
                self._perm_key = perm
            cT = self._perm_codesT
        hist = torch.zeros(self.F, self.NB, dtype=M.dtype, device=M.device).scatter_add_(1, cT, M.T)
        if self.reduce is not None:
            self.reduce(hist)
        return self._suffix(hist[..., None]).reshape(-1)

    def column(self, c: int) -> Tensor:
        f, t = divmod(int(c), self.T)
        return (self.codesT[f] > t).to(torch.float64)

    def all_stats(self, stats, w: PairWeights):
        """(ε⁺, ε⁻, ε⁰) for every candidate, each (C,)."""
        if self._pair_cache is None or self._pair_cache[0] is not stats:
            self._pair_cache = (stats, stats.prepare_codes(self.codes))
        cp = self._pair_cache[1]
        PN = self.linear_sums(torch.stack([w.U, w.L], 1))
        m = stats.q_values(w, cp)
        Q = self.per_feature_sums(m, cp["perm"])
        ep = (PN[:, 0] - Q).clamp(0, 1)
        em = (PN[:, 1] - Q).clamp(0, 1)
        e0 = (1 - ep - em).clamp(0, 1)
        return ep, em, e0


class RealDictionary:
    """Real-valued rankers ``h_j(x) = H[:, j]`` (a finite dictionary given by its outputs)."""

    def __init__(self, H: Tensor, valid: Optional[Tensor] = None):
        self.H = H.to(torch.float64)
        self.n, self.F = H.shape
        self.num_candidates = self.F
        self.valid = (torch.ones(self.F, dtype=torch.bool, device=H.device) if valid is None
                      else valid.to(torch.bool).reshape(-1))
        vals = self.H
        self.binary = bool(((vals == 0) | (vals == 1)).all())

    def linear_sums(self, V: Tensor) -> Tensor:
        return V.to(torch.float64).T @ self.H if V.dim() > 1 else self.H.T @ V.to(torch.float64)

    def column(self, c: int) -> Tensor:
        return self.H[:, int(c)]

    def edges(self, stats, w: PairWeights) -> Tensor:
        return self.linear_sums(w.U - w.L)

    def all_stats(self, stats, w: PairWeights):
        if not self.binary:
            raise ValueError("pair statistics ε± need binary {0,1} rankers")
        if stats.is_explicit:
            a, b = self.H[stats.hi], self.H[stats.lo]
            d = w.d[:, None]
            return ((d * a * (1 - b)).sum(0), (d * (1 - a) * b).sum(0),
                    (d * (a * b + (1 - a) * (1 - b))).sum(0))
        # treat binary columns as codes with one threshold
        cd = CodesDictionary(self.H.round().long(), torch.ones(self.F, 1, dtype=torch.bool,
                                                                 device=self.H.device))
        key = ("_cd", id(stats))
        if getattr(self, "_cd_key", None) != key:
            self._cd, self._cd_key = cd, key
        return self._cd.all_stats(stats, w)


class PairMatrixDictionary:
    """A finite dictionary on materialised pairs: the paper's matrix ``M_{p,j} = h_j(hi_p) -
    h_j(lo_p)`` (P, J), for small problems (Rudin–Schapire Fig. 1 verbatim). ``stats`` must
    be an :class:`ExplicitPairStats`."""

    def __init__(self, H: Tensor, stats: "ExplicitPairStats", valid: Optional[Tensor] = None):
        self.H = H.to(torch.float64)
        self.n, self.F = H.shape
        self.num_candidates = self.F
        self.valid = (torch.ones(self.F, dtype=torch.bool, device=H.device) if valid is None
                      else valid.to(torch.bool).reshape(-1))
        self.binary = bool(((self.H == 0) | (self.H == 1)).all())
        self.M = self.H[stats.hi] - self.H[stats.lo]
        self.Mp = (self.M > 0).to(torch.float64)
        self.Mm = (self.M < 0).to(torch.float64)
        self.stats = stats

    def linear_sums(self, V: Tensor) -> Tensor:
        return V.to(torch.float64).T @ self.H if V.dim() > 1 else self.H.T @ V.to(torch.float64)

    def column(self, c: int) -> Tensor:
        return self.H[:, int(c)]

    def edges(self, stats, w: PairWeights) -> Tensor:
        return w.d @ self.M

    def all_stats(self, stats, w: PairWeights):
        if not self.binary:
            raise ValueError("pair statistics ε± need binary {0,1} rankers")
        ep = w.d @ self.Mp
        em = w.d @ self.Mm
        return ep, em, (1 - ep - em).clamp_min(0)


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
    """A candidate dictionary built from a weak learner: its ``dictionary``, the weak model
    of a candidate, its description. ``supports_data_parallel``: the dictionary sums over the
    ranks and its rankers are binary (the closed-form steps need no line search across
    ranks)."""

    dictionary: Any = None  # the source's CodesDictionary or RealDictionary
    kind = ""
    supports_data_parallel = False

    def describe(self, c: int) -> dict:
        raise NotImplementedError

    def make_model(self, c: int):
        raise NotImplementedError


class _StumpSource(_Source):
    kind = "stumps"
    supports_data_parallel = True

    def __init__(self, X: Tensor, stumps: Stumps, context, rows=None):
        self.stumps = stumps
        self.prepared = p = stumps.prepare(X, context=context, rows=rows)
        b = p.binned
        codes = b.codes.long()
        codes = torch.where(codes == b.missing_code, torch.zeros_like(codes), codes)  # NaN: h = 0
        self.T = p.thresholds.shape[1]
        self.dictionary = CodesDictionary(codes, p.valid, reduce=context.all_reduce_sum)
        self.F = codes.shape[1]
        self.covers = stumps.candidate_covers(p)  # (F, T, 2): every stump's leaf covers

    def describe(self, c):
        f, t = divmod(int(c), self.T)
        return {"feature": f, "threshold": float(self.prepared.thresholds[f, t])}

    def make_model(self, c):
        f, t = divmod(int(c), self.T)
        return self.stumps.make_model(f, t, prepared=self.prepared, cover=self.covers[f, t].clone())


class _FeatureSource(_Source):
    kind = "features"

    def __init__(self, X: Tensor, rankers: FeatureRankers, context, rows=None):
        self.rankers = rankers
        self.prepared = p = rankers.prepare(X, context=context, rows=rows)
        self.dictionary = RealDictionary(p.values, valid=p.valid)
        self.F = X.shape[1]

    def describe(self, c):
        return {"feature": int(c), "threshold": None}

    def make_model(self, c):
        return self.rankers.make_model(self.prepared, int(c))


class MatrixSource(_Source):
    kind = "matrix"

    def __init__(self, H: Tensor, rankers: MatrixRankers, context, rows=None):
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


def source_class(rankers):
    """The dictionary source for ``rankers`` (``None``: ``Stumps()``): ``(class, rankers)``."""
    if rankers is None:
        rankers = Stumps()
    for kind, cls in ((MatrixRankers, MatrixSource), (Stumps, _StumpSource),
                      (FeatureRankers, _FeatureSource)):
        if isinstance(rankers, kind):
            return cls, rankers
    raise ValueError(
        f"rankers must be Stumps(...), FeatureRankers(...) or MatrixRankers(); got {rankers!r}")


def make_source(rankers, X: Tensor, context=None, rows=None) -> _Source:
    """Candidate dictionary for ``rankers`` on the training features ``X``: ``Stumps(...)``
    (binary threshold stumps), ``FeatureRankers(...)`` (real-valued scaled features),
    ``MatrixRankers()`` or ``None`` (``Stumps()``). ``context``: the fit's
    :class:`~torchrankboost.parallel.DistContext` (``None``: this process alone; over
    several processes ``X`` is this rank's shard, stumps only: the thresholds of all ranks'
    rows, sums over all ranks). ``rows``: the rows that place the thresholds or the scaling
    (those of positive weight; ``None``: all)."""
    ctx = get_context(False) if context is None else context
    cls, rankers = source_class(rankers)
    check_data_parallel(ctx, fit="RankBoost fit", learner=rankers,
                        learner_ok=cls.supports_data_parallel and supports_data_parallel(rankers),
                        needs=DATA_PARALLEL_NEEDS)
    return cls(X, rankers, ctx, rows=rows)


#: what a data-parallel fit of the RankBoost family needs of its weak rankers
DATA_PARALLEL_NEEDS = ("binary weak rankers whose sums combine over the ranks, Stumps(...) "
                       "(the closed-form steps need no line search across ranks)")
