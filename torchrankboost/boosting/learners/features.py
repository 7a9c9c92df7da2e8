"""Single features as weak rankers: the learner :class:`FeatureRankers` (registry name
``"feature"``) and its fitted model :class:`FeatureModel`, ``a + b·h_f(x)``.

Every feature is scored at once by one matrix product of the scaled features with the
weighted target; data-parallel, the scale (min/max) and the sums are those of all ranks' rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from ...kernels.binning import check_features
from .base import fit_context
from .candidates import BestCandidateLearner, OneFeatureModel, masked_score, totals
from ...parallel import DistContext
from ...contract import DeviceLike

__all__ = ["FeatureRankers", "FeatureModel", "ScaledFeatures"]

_MM_CHUNK = 1 << 18


@dataclass
class ScaledFeatures:
    """Prepared features for :class:`FeatureRankers`: ``values`` (n, F) = h_f(x_i) (NaN → 0),
    ``lo``/``hi`` (F,) training min/max, ``valid`` (F,) bool (non-constant features)."""

    values: Tensor
    lo: Tensor
    hi: Tensor
    valid: Tensor
    normalize: bool
    #: the DistContext of the fit (its collectives identities in one process)
    context: Any = field(default_factory=lambda: fit_context(None), repr=False, compare=False)

    @property
    def num_rows(self) -> int:
        return self.values.shape[0]

    @property
    def device(self) -> torch.device:
        return self.values.device


def _scale(x: Tensor, lo, hi, normalize: bool) -> Tensor:
    if normalize:
        span = hi - lo
        safe = torch.where(span > 0, span, torch.ones_like(span))
        h = torch.where(span > 0, 2.0 * (x - lo) / safe - 1.0, torch.zeros_like(x))
    else:
        h = x
    return torch.nan_to_num(h, nan=0.0) if h.dtype.is_floating_point else h


class FeatureModel(OneFeatureModel):
    """``a + b·h_f(x)`` with ``h_f(x) = 2(x − lo)/(hi − lo) − 1`` (training min/max; no clipping
    outside the training range), or ``h_f(x) = x`` without normalisation; NaN → h = 0."""

    type_name = "FeatureModel"

    def __init__(self, *, feature: int, lo: Tensor, hi: Tensor, coef: Tensor,
                 normalize: bool = True, gain: float = 0.0):
        self.feature = int(feature)
        self.lo, self.hi = lo, hi  # 0-d tensors, dtype of X
        self.coef = coef
        self.normalize = bool(normalize)
        self.gain = float(gain)

    def predict(self, X: Tensor) -> Tensor:
        check_features(X)
        x = X[:, self.feature].to(device=self.coef.device, dtype=self.lo.dtype)
        return self._out(_scale(x, self.lo, self.hi, self.normalize))

    def predict_prepared(self, prepared: ScaledFeatures) -> Tensor:
        return self._out(prepared.values[:, self.feature])

    def to(self, device: DeviceLike) -> "FeatureModel":
        return FeatureModel(feature=self.feature, lo=self.lo.to(device), hi=self.hi.to(device),
                            coef=self.coef.to(device), normalize=self.normalize, gain=self.gain)

    def state(self) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
        return ({"lo": self.lo.reshape(1), "hi": self.hi.reshape(1), "coef": self.coef},
                {"type": self.type_name, "feature": self.feature, "normalize": self.normalize, "gain": self.gain})

    @classmethod
    def from_state(cls, tensors: Dict[str, Tensor], meta: Dict[str, Any]) -> "FeatureModel":
        return cls(feature=meta["feature"], lo=tensors["lo"].reshape(()), hi=tensors["hi"].reshape(()),
                   coef=tensors["coef"], normalize=meta.get("normalize", True), gain=meta.get("gain", 0.0))

    def __repr__(self):
        a, b = self.coef.tolist()
        return f"FeatureModel({a:.4g} + {b:.4g}·h(x{self.feature}))"


class FeatureRankers(BestCandidateLearner):
    """Each feature is a weak ranker ``h_f``, min–max scaled to [−1, 1] on the training data
    (``normalize=True``; as in the p-norm push experiments) or raw; NaN → 0; constant (or
    all-NaN) features are never chosen.

    Args:
        normalize: scale to [−1, 1] with the training min/max (stored in the model).
        criterion: ``"correlation"`` (max ``|Σ w t h_f|``, output ``h_f``) or ``"least_squares"``
            (largest weighted SSE reduction of ``a + b·h_f``, output the LS fit).
    """

    def __init__(self, *, normalize: bool = True, criterion: str = "correlation"):
        self.normalize = bool(normalize)
        if criterion not in ("correlation", "least_squares"):
            raise ValueError(f"criterion: expected 'correlation' or 'least_squares', got {criterion!r}")
        self.criterion = criterion

    def __repr__(self):
        return f"FeatureRankers(normalize={self.normalize}, criterion={self.criterion!r})"

    def prepare(self, X: Tensor, *, context: Optional[DistContext] = None,
                rows: Optional[Tensor] = None) -> ScaledFeatures:
        """Scale ``X`` (n, F) once. ``context``: the
        :class:`~torchrankboost.parallel.DistContext` of the fit (``None``: one process;
        data-parallel: the min/max of all ranks' rows, and :meth:`feature_sums` sums over the
        ranks). ``rows``: the rows whose min/max scale (``None``: all)."""
        check_features(X)
        ctx = fit_context(context)
        Xr = X if rows is None else X.index_select(0, rows.to(X.device))
        nan = torch.isnan(Xr)
        # the min/max over every rank's rows (+-inf: none, a constant feature below)
        lo = ctx.all_reduce_min(torch.where(nan, torch.full_like(Xr, math.inf), Xr).amin(0)
                                if Xr.shape[0] else X.new_full((X.shape[1],), math.inf))
        hi = ctx.all_reduce_max(torch.where(nan, torch.full_like(Xr, -math.inf), Xr).amax(0)
                                if Xr.shape[0] else X.new_full((X.shape[1],), -math.inf))
        valid = torch.isfinite(lo) & torch.isfinite(hi) & (hi > lo)
        lo = torch.where(valid, lo, torch.zeros_like(lo))
        hi = torch.where(valid, hi, torch.zeros_like(hi))
        values = _scale(X, lo, hi, self.normalize)
        values = torch.where(valid.unsqueeze(0), values, torch.zeros_like(values))
        return ScaledFeatures(values=values, lo=lo, hi=hi, valid=valid, normalize=self.normalize,
                              context=ctx)

    def feature_sums(self, prepared: ScaledFeatures, v: Tensor) -> Tensor:
        """``Σ_i v[i(, j)] · h_f(x_i)`` for every feature: (F,) or (F, k), accumulated in float64
        (over every rank's rows on the prepared data of a data-parallel fit)."""
        Hm = prepared.values
        n = Hm.shape[0]
        if not isinstance(v, Tensor) or v.dim() not in (1, 2) or v.shape[0] != n:
            raise ValueError(f"v: expected shape ({n},) or ({n}, k), got "
                             f"{tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__}")
        vv = v.to(Hm.device).double().reshape(n, -1)
        out = torch.zeros((Hm.shape[1], vv.shape[1]), dtype=torch.float64, device=Hm.device)
        for s in range(0, n, _MM_CHUNK):  # chunks bound the float64 copy of the features
            out += Hm[s : s + _MM_CHUNK].double().t() @ vv[s : s + _MM_CHUNK]
        prepared.context.all_reduce_sum(out)
        out_dtype = v.dtype if v.dtype.is_floating_point else torch.float64
        out = out.to(out_dtype)
        return out[:, 0] if v.dim() == 1 else out

    def make_model(self, prepared: ScaledFeatures, feature: int,
                   coef: Tuple[float, float] = (0.0, 1.0), dtype: Optional[torch.dtype] = None
                  ) -> FeatureModel:
        """Model ``coef[0] + coef[1]·h_feature`` with the training scale of ``prepared``."""
        dt = dtype or (prepared.values.dtype if prepared.values.dtype in (torch.float32, torch.float64) else torch.float32)
        f = int(feature)
        return FeatureModel(feature=f, lo=prepared.lo[f].clone(), hi=prepared.hi[f].clone(),
                            coef=torch.tensor([float(coef[0]), float(coef[1])], dtype=dt, device=prepared.values.device),
                            normalize=prepared.normalize)

    # -- the candidates' sums for the shared fit -------------------------------------------
    _prepared_type = ScaledFeatures
    _sums = feature_sums

    def _least_squares(self, prepared: ScaledFeatures, w: Tensor, wt: Tensor):
        """SSE reduction of the weighted linear fit ``a + b·h_f`` per feature."""
        Hm = prepared.values
        n, F = Hm.shape
        S = self.feature_sums(prepared, torch.stack([wt, w], 1))
        Sht, Sh = S[:, 0], S[:, 1]
        Shh = torch.zeros(F, dtype=torch.float64, device=Hm.device)
        for s in range(0, n, _MM_CHUNK):
            hc = Hm[s : s + _MM_CHUNK].double()
            Shh += (hc * hc).t() @ w[s : s + _MM_CHUNK]
        prepared.context.all_reduce_sum(Shh)
        Y, W = totals(prepared, wt, w).unbind()
        Wc = W.clamp_min(1e-300)
        Sxx = Shh - Sh * Sh / Wc
        Sxy = Sht - Sh * Y / Wc
        ok = prepared.valid & (Sxx > 1e-12 * Shh.clamp_min(1e-300))
        red = Sxy * Sxy / torch.where(ok, Sxx, torch.ones_like(Sxx))
        return masked_score(ok, red), (Sxy, Sxx, Sh, Y, W)

    @staticmethod
    def _ls_coef(stats, f: int) -> Tensor:
        Sxy, Sxx, Sh, Y, W = stats
        b = Sxy[f] / Sxx[f]
        return torch.stack([(Y - b * Sh[f]) / W, b])

    @staticmethod
    def _model(prepared: ScaledFeatures, index, coef: Tensor, gain: float) -> FeatureModel:
        (f,) = index
        return FeatureModel(feature=f, lo=prepared.lo[f].clone(), hi=prepared.hi[f].clone(), coef=coef,
                            normalize=prepared.normalize, gain=gain)

    def _constant(self, prepared: ScaledFeatures, a: float, dtype) -> FeatureModel:
        return self.make_model(prepared, 0, coef=(a, 0.0), dtype=dtype)


