"""Assemble the RankBoost-family results into a plain :class:`~.ensemble.Ensemble`."""

from __future__ import annotations

from .ensemble import Ensemble


class StumpEnsembleBuilder:
    """Collects ``(candidate, α)`` rounds and intercept shifts; builds an :class:`Ensemble`
    ``F(x) = b + Σ_t α_t h_{c_t}(x)`` whose weak models come from the dictionary source."""

    def __init__(self, source, info=None):
        self.source = source
        self.rounds = []
        self.intercept = 0.0
        self.info = dict(info or {})
        self._models = {}

    def add(self, c: int, alpha: float) -> None:
        self.rounds.append((int(c), float(alpha)))

    def add_intercept(self, b: float) -> None:
        self.intercept += float(b)

    def build(self) -> Ensemble:
        models, weights = [], []
        for c, a in self.rounds:
            if c not in self._models:
                self._models[c] = self.source.make_model(c)
            models.append(self._models[c])
            weights.append(a)
        return Ensemble(models, weights, base_score=self.intercept,
                        num_features=self.source.F, info=self.info)
