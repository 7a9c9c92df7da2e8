"""What :class:`~.stumps.Stumps` and :class:`~.features.FeatureRankers` share: weak rankers
``h`` of one feature, scored all at once, the best one kept; and the model ``a + b·h``."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ...params import Params
from .base import check_fit_inputs, out_dtype

__all__ = ["OneFeatureModel", "BestCandidateLearner", "totals", "masked_score"]


class OneFeatureModel:
    """The output ``a + b·h`` of one feature's weak ranker ``h`` (``coef = (a, b)``), and the
    gain / count of that feature."""

    feature: int
    coef: Tensor
    gain: float

    def _out(self, h: Tensor) -> Tensor:
        return self.coef[0] + self.coef[1] * h.to(self.coef.dtype)

    def feature_gain(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.float64, device=self.coef.device)
        out[self.feature] = self.gain
        return out

    def feature_count(self, num_features: int) -> Tensor:
        out = torch.zeros(num_features, dtype=torch.int64, device=self.coef.device)
        out[self.feature] = 1
        return out


def _rows_vector(rows, v: Tensor) -> Tensor:
    """v restricted to rows (duplicates add up), zero elsewhere."""
    if rows is None:
        return v
    out = torch.zeros_like(v)
    return out.index_add_(0, rows, v.index_select(0, rows))


def _weighted_channels(n, dev, target, weight, rows):
    """Validated fit inputs as ``(out_dtype, w, w·target)``: float64 ``(n,)`` channels restricted
    to ``rows`` (zero elsewhere, duplicates add up)."""
    target, weight, rows = check_fit_inputs(n, dev, target, weight, rows)
    w = weight.double()
    return out_dtype(target), _rows_vector(rows, w), _rows_vector(rows, w * target.double())


def totals(prepared, *vs: Tensor) -> Tensor:
    """``[Σ v for v in vs]`` as a float64 tensor, summed over the ranks of ``prepared``'s
    context (an identity in one process)."""
    return prepared.context.all_reduce_sum(torch.stack([v.sum().double() for v in vs]))


def masked_score(ok: Tensor, score: Tensor) -> Tensor:
    """``score`` where ``ok``, ``-1`` (below every real score) elsewhere."""
    return torch.where(ok, score, torch.full_like(score, -1.0))


class BestCandidateLearner(Params):
    """Score every candidate weak ranker ``h`` (a (feature, threshold) pair, or a feature) at
    once, keep the best.

    ``"correlation"`` scores ``|Σ w·t·h|`` and outputs ``h``; ``"least_squares"`` scores the
    weighted SSE reduction of ``a + b·h`` and outputs that fit. Without a valid candidate the
    model is the constant 0 (least squares: the weighted mean of the target, from
    ``_totals``, :func:`totals` unless a subclass sums otherwise).

    A subclass gives ``_prepared_type`` (with ``num_rows``, ``device``, ``valid``,
    ``context``), ``_sums(prepared, v)`` (the candidates' ``Σ v·h``, invalid ones 0),
    ``_least_squares(prepared, w, wt)`` (the scores and the statistics that
    ``_ls_coef(stats, *index)`` turns into ``(a, b)``), ``_model(prepared, index, coef,
    gain)`` and ``_constant(prepared, a, dtype)``.
    """

    criterion: str
    supports_data_parallel = True

    def fit(self, prepared, target: Tensor, weight: Optional[Tensor] = None, *,
            rows: Optional[Tensor] = None, generator: Optional[torch.Generator] = None):
        """Fit the best candidate to ``target`` (n,) with weights ``weight`` on ``rows``
        (or all rows; ``generator`` is unused)."""
        if not isinstance(prepared, self._prepared_type):
            raise ValueError(f"prepared: expected the output of {type(self).__name__}.prepare(X)")
        dev = prepared.device
        dtype, w, wt = _weighted_channels(prepared.num_rows, dev, target, weight, rows)
        if self.criterion == "correlation":
            score = masked_score(prepared.valid, self._sums(prepared, wt).abs())
        else:
            score, stats = self._least_squares(prepared, w, wt)
        flat = int(torch.argmax(score.reshape(-1)).item())
        index = divmod(flat, score.shape[1]) if score.dim() == 2 else (flat,)
        best = float(score[index].item())
        if best < 0:  # no valid candidate: h ≡ 0 (and the weighted mean for least squares)
            a = 0.0
            if self.criterion == "least_squares":
                Y, W = (float(v) for v in self._totals(prepared, wt, w))
                a = Y / W if W > 0 else 0.0
            return self._constant(prepared, a, dtype)
        if self.criterion == "correlation":
            coef = torch.tensor([0.0, 1.0], dtype=dtype, device=dev)
        else:
            coef = self._ls_coef(stats, *index).to(dtype)
        return self.fit_cover(prepared, self._model(prepared, index, coef, best), rows)

    def _totals(self, prepared, *vs: Tensor) -> Tensor:
        """``[Σ v for v in vs]`` over the ranks (:func:`totals`)."""
        return totals(prepared, *vs)

    def fit_cover(self, prepared, model, rows):
        """``model`` with the node covers of the fit's ``rows`` recorded (none here)."""
        return model
