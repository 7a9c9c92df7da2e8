"""Ranking losses as ``torch.nn.Module``s (see :mod:`torchrankboost.losses.base`)."""

from .base import RankingLoss, Prepared, prepare_inputs, reduce_per_group  # noqa: F401
