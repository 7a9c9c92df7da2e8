"""Decision stumps: the learner :class:`Stumps` (registry name ``"stump"``) and its fitted
model :class:`StumpModel`, ``a + b·1[x_f > θ]``.

Every (feature, threshold) candidate is scored at once from one histogram of the bin codes
(:func:`~torchrankboost.kernels.histogram.histogram`) and prefix sums over the bins, in the
arithmetic of the tree learners (:mod:`torchrankboost.kernels.fixed_point`): the channels in
int64 fixed point, the histogram and its prefix sums exact integer sums, converted to float64
once; data-parallel, the histogram is summed over the ranks (exact), so a stump is the same
for any number of processes and any row order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor

from ...kernels.binning import BinnedFeatures, bin_features, check_features
from ...kernels.fixed_point import quantize_fit
from ...kernels.histogram import histogram
from .base import check_int, fit_context
from .candidates import BestCandidateLearner, OneFeatureModel, masked_score
from ...parallel import DistContext
from ...contract import DeviceLike

__all__ = ["Stumps", "StumpModel", "StumpFeatures"]


@dataclass
class StumpFeatures:
    """Prepared features for :class:`Stumps`: bins plus candidate thresholds.

    ``thresholds`` (F, T): candidate θ_ft (the bin upper edges; ``h = 1[x > θ]``),
    ``valid`` (F, T) bool: real candidates (padding is False).
    """

    binned: BinnedFeatures
    thresholds: Tensor
    valid: Tensor

    @property
    def codes(self) -> Tensor:
        return self.binned.codes

    @property
    def context(self) -> Any:
        return self.binned.context

    @property
    def num_rows(self) -> int:
        return self.binned.codes.shape[0]

    @property
    def device(self) -> torch.device:
        return self.binned.codes.device


class StumpModel(OneFeatureModel):
    """``a + b·1[x_f > θ]`` (NaN → 0). ``threshold_index`` is the bin index of θ (``code > t``).
    ``cover`` (2,) float64 or ``None``: the fit's rows with ``h = 0`` (``x <= θ`` or NaN) and
    with ``h = 1``, over all ranks (the stump's leaf covers for TreeSHAP)."""

    type_name = "StumpModel"

    def __init__(self, *, feature: int, threshold: Tensor, threshold_index: int, coef: Tensor,
                 gain: float = 0.0, missing_code: int = 255, cover: Optional[Tensor] = None):
        self.feature = int(feature)
        self.threshold = threshold  # 0-d tensor, dtype of X
        self.threshold_index = int(threshold_index)
        self.coef = coef  # (2,) = (a, b), output dtype
        self.gain = float(gain)
        self.missing_code = int(missing_code)
        self.cover = cover

    def predict_prepared(self, prepared: StumpFeatures) -> Tensor:
        c = prepared.codes[:, self.feature].to(torch.int64)
        return self._out((c > self.threshold_index) & (c != self.missing_code))

    def predict(self, X: Tensor) -> Tensor:
        check_features(X)
        x = X[:, self.feature].to(device=self.coef.device, dtype=self.threshold.dtype)
        return self._out(x > self.threshold)

    def to(self, device: DeviceLike) -> "StumpModel":
        return StumpModel(feature=self.feature, threshold=self.threshold.to(device),
                          threshold_index=self.threshold_index, coef=self.coef.to(device),
                          gain=self.gain, missing_code=self.missing_code,
                          cover=None if self.cover is None else self.cover.to(device))

    def state(self) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
        tensors = {"threshold": self.threshold.reshape(1), "coef": self.coef}
        if self.cover is not None:
            tensors["cover"] = self.cover
        return (tensors,
                {"type": self.type_name, "feature": self.feature, "threshold_index": self.threshold_index,
                 "gain": self.gain, "missing_code": self.missing_code})

    @classmethod
    def from_state(cls, tensors: Dict[str, Tensor], meta: Dict[str, Any]) -> "StumpModel":
        return cls(feature=meta["feature"], threshold=tensors["threshold"].reshape(()),
                   threshold_index=meta["threshold_index"], coef=tensors["coef"], gain=meta.get("gain", 0.0),
                   missing_code=meta.get("missing_code", 255), cover=tensors.get("cover"))

    def __repr__(self):
        a, b = self.coef.tolist()
        return f"StumpModel({a:.4g} + {b:.4g}·1[x{self.feature} > {float(self.threshold):.6g}])"


class Stumps(BestCandidateLearner):
    """Binary weak rankers ``h(x) = 1[x_f > θ]``, the best one over all features and thresholds.

    Candidate thresholds per feature are the midpoints between consecutive distinct values when
    there are at most ``max_thresholds + 1`` of them; above that, the quantile bin edges of
    :mod:`..binning` (``max_thresholds + 1`` quantile bins from a seeded row sample of at most
    ``bin_sample_count`` rows). NaN is below every threshold (``h = 0``).

    Args:
        max_thresholds: cap on candidate thresholds per feature (>= 1).
        criterion: ``"correlation"`` — choose max ``|Σ_i w_i t_i h(x_i)|`` and output ``h`` itself
            (0/1; the driver scales it); ``"least_squares"`` — choose the largest weighted SSE
            reduction of ``a + b·h`` and output the weighted LS fit.
        seed: seed of the binning row sample.
    """

    def __init__(self, *, max_thresholds: int = 255, criterion: str = "correlation", seed: int = 0,
                 bin_sample_count: int = 200_000):
        self.max_thresholds = check_int(max_thresholds, "max_thresholds", 1, 32765)
        if criterion not in ("correlation", "least_squares"):
            raise ValueError(f"criterion: expected 'correlation' or 'least_squares', got {criterion!r}")
        self.criterion = criterion
        self.seed = check_int(seed, "seed", 0)
        self.bin_sample_count = check_int(bin_sample_count, "bin_sample_count", 2)
        self._last_prepared: Optional[StumpFeatures] = None

    def __repr__(self):
        return f"Stumps(max_thresholds={self.max_thresholds}, criterion={self.criterion!r})"

    def prepare(self, X: Tensor, *, context: Optional[DistContext] = None,
                rows: Optional[Tensor] = None) -> StumpFeatures:
        """Bin ``X`` (n, F) and list the candidate thresholds. ``context``: the
        :class:`~torchrankboost.parallel.DistContext` of the fit (``None``: one process;
        data-parallel: the edges of all ranks' rows, and :meth:`threshold_sums` sums over the
        ranks). ``rows``: the rows that place the thresholds (``None``: all)."""
        b = bin_features(X, n_bins=self.max_thresholds + 1, sample_count=self.bin_sample_count,
                         seed=self.seed, max_bins=32766, context=fit_context(context),
                         rows=rows)
        nb = b.num_bins
        T = max(1, int(nb.max().item()) - 1) if nb.numel() else 1
        edges = b.edges
        if edges.shape[1] < T:
            edges = torch.nn.functional.pad(edges, (0, T - edges.shape[1]), value=float("inf"))
        thresholds = edges[:, :T]
        valid = torch.arange(T, device=nb.device).unsqueeze(0) < (nb - 1).unsqueeze(1)
        p = StumpFeatures(binned=b, thresholds=thresholds, valid=valid)
        self._last_prepared = p
        return p

    def threshold_sums(self, prepared: StumpFeatures, v: Tensor) -> Tensor:
        """``S[f, t(, j)] = Σ_i v[i(, j)] · 1[x_if > θ_ft]`` for every candidate, by prefix sums.

        Args:
            prepared: from :meth:`prepare`.
            v: (n,) or (n, k) float.

        Returns:
            (F, T) or (F, T, k) in v's dtype: exact integer sums of ``v`` in fixed point
            (:mod:`~torchrankboost.kernels.fixed_point`, a scale per column), converted once;
            padded candidates are 0. Summed over every rank's rows on the prepared data of a
            data-parallel fit (one all-reduce of the ``(k, F, bins)`` int64 histogram, and one
            of the columns' maxima).
        """
        codes = prepared.codes
        n, F = codes.shape
        if not isinstance(v, Tensor) or v.dim() not in (1, 2) or v.shape[0] != n:
            raise ValueError(f"v: expected shape ({n},) or ({n}, k), got "
                             f"{tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__}")
        squeeze = v.dim() == 1
        right, _, fixed = self._fixed_sums(prepared, v.to(codes.device).double().reshape(n, -1))
        S = fixed.to_float(right).to(v.dtype if v.dtype.is_floating_point else torch.float64)
        return S[..., 0] if squeeze else S

    def _fixed_sums(self, prepared: StumpFeatures, x: Tensor):
        """``(right, total, fixed)``: the integer sums of the fixed point ``fixed`` of ``x``
        (n, k) over the rows with ``h = 1`` of every candidate, ``right`` (F, T, k) int64 (0
        for padding), and over every row, ``total`` (k,) int64 (over the ranks)."""
        codes = prepared.codes
        T = prepared.thresholds.shape[1]
        miss = prepared.binned.missing_code
        fixed = quantize_fit(prepared.binned, x)
        hist = histogram(codes, None, fixed.q, slots=miss + 1, count=None)  # (k, F, S)
        hist = prepared.context.all_reduce_sum(hist)
        total = hist[:, 0, :].sum(-1) if codes.shape[1] else hist.new_zeros(hist.shape[0])
        vals = hist[:, :, :miss].permute(1, 2, 0)  # (F, V, k) value bins (missing: h = 0)
        csum = torch.cumsum(vals, 1)
        right = csum[:, -1:, :] - csum[:, :T, :]  # Σ over bins > t
        right = torch.where(prepared.valid.unsqueeze(-1), right, torch.zeros_like(right))
        return right, total, fixed

    def make_model(self, feature: int, threshold_index: Optional[int] = None, *,
                   threshold: Optional[float] = None, prepared: Optional[StumpFeatures] = None,
                   coef: Tuple[float, float] = (0.0, 1.0), dtype: Optional[torch.dtype] = None,
                   cover: Optional[Tensor] = None) -> StumpModel:
        """Stump ``coef[0] + coef[1]·1[x_feature > θ]`` for a chosen candidate.

        Give either ``threshold_index`` (into ``prepared.thresholds``; ``prepared`` defaults to
        the last one this learner prepared) or a raw ``threshold`` value. ``cover``: the
        stump's (2,) leaf row counts (see :class:`StumpModel`), if known.
        """
        p = prepared if prepared is not None else self._last_prepared
        if threshold_index is not None:
            if p is None:
                raise ValueError("prepared: needed to resolve threshold_index (call prepare first)")
            thr = p.thresholds[int(feature), int(threshold_index)]
            t_idx = int(threshold_index)
            if not bool(p.valid[int(feature), t_idx]):
                raise ValueError(f"threshold_index: {t_idx} is not a valid candidate of feature {feature}")
        elif threshold is not None:
            ref = p.thresholds if p is not None else torch.empty(0)
            thr = torch.tensor(float(threshold), dtype=ref.dtype, device=ref.device)
            if p is not None:
                t_idx = int(torch.searchsorted(p.binned.edges[int(feature)].contiguous(), thr.reshape(1)).item())
            else:
                t_idx = -1
        else:
            raise ValueError("threshold_index / threshold: give one of them")
        dev = thr.device
        dt = dtype or (thr.dtype if thr.dtype in (torch.float32, torch.float64) else torch.float32)
        miss = p.binned.missing_code if p is not None else 255
        return StumpModel(feature=int(feature), threshold=thr, threshold_index=t_idx,
                          coef=torch.tensor([float(coef[0]), float(coef[1])], dtype=dt, device=dev),
                          missing_code=miss, cover=cover)

    def candidate_covers(self, prepared: StumpFeatures) -> Tensor:
        """``(F, T, 2)`` float64 covers of every candidate on all of ``prepared``'s rows
        (over all ranks): rows with ``h = 0`` and with ``h = 1``."""
        ones = torch.ones(prepared.num_rows, dtype=torch.float64, device=prepared.device)
        right = self.threshold_sums(prepared, ones)
        total = prepared.context.all_reduce_sum(
            torch.tensor([float(prepared.num_rows)], dtype=torch.float64, device=prepared.device))
        return torch.stack([total - right, right], -1)

    def fit_cover(self, prepared: StumpFeatures, model: StumpModel, rows: Optional[Tensor]
                  ) -> StumpModel:
        """``model`` with its cover on the fit's ``rows`` (``None``: all; over all ranks)."""
        c = prepared.codes[:, model.feature]
        if rows is not None:
            c = c.index_select(0, rows.to(c.device))
        c = c.to(torch.int64)
        h1 = ((c > model.threshold_index) & (c != prepared.binned.missing_code)).sum()
        cover = torch.stack([torch.tensor(float(c.numel()), device=c.device) - h1, h1.double()])
        model.cover = prepared.context.all_reduce_sum(cover.to(torch.float64))
        return model

    # -- the candidates' sums for the shared fit -------------------------------------------
    _prepared_type = StumpFeatures
    _sums = threshold_sums

    def _totals(self, prepared: StumpFeatures, *vs: Tensor) -> Tensor:
        """``[Σ v for v in vs]`` over every rank's rows, exact integer sums in fixed point."""
        _, total, fixed = self._fixed_sums(prepared, torch.stack(vs, 1))
        return fixed.to_float(total)

    def _least_squares(self, prepared: StumpFeatures, w: Tensor, wt: Tensor):
        """SSE reduction of the two-level fit (mean of each side of θ) per (feature, threshold):
        both sides' sums exact integers (the right side's and the total's difference)."""
        right, total, fixed = self._fixed_sums(prepared, torch.stack([wt, w], 1))
        Y1, W1 = fixed.to_float(right).unbind(-1)
        Y0, W0 = fixed.to_float(total - right).unbind(-1)
        Y, W = fixed.to_float(total).unbind()
        ok = prepared.valid & (W1 > 0) & (W0 > 0)
        one = torch.ones_like(W1)
        red = Y1 * Y1 / torch.where(ok, W1, one) + Y0 * Y0 / torch.where(ok, W0, one) - Y * Y / W.clamp_min(1e-300)
        return masked_score(ok, red), (Y0, W0, Y1, W1)

    @staticmethod
    def _ls_coef(stats, f: int, t: int) -> Tensor:
        Y0, W0, Y1, W1 = stats
        a = Y0[f, t] / W0[f, t]
        return torch.stack([a, Y1[f, t] / W1[f, t] - a])

    @staticmethod
    def _model(prepared: StumpFeatures, index, coef: Tensor, gain: float) -> StumpModel:
        f, t = index
        return StumpModel(feature=f, threshold=prepared.thresholds[f, t].clone(), threshold_index=t,
                          coef=coef, gain=gain, missing_code=prepared.binned.missing_code)

    @staticmethod
    def _constant(prepared: StumpFeatures, a: float, dtype) -> StumpModel:
        miss = prepared.binned.missing_code
        dev = prepared.codes.device
        thr = torch.tensor(float("inf"), dtype=prepared.thresholds.dtype, device=dev)
        return StumpModel(feature=0, threshold=thr, threshold_index=miss, missing_code=miss,
                          coef=torch.tensor([a, 0.0], dtype=dtype, device=dev), gain=0.0)
