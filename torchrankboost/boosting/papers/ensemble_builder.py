"""Assemble the RankBoost-family results into a plain :class:`~torchrankboost.boosting.Ensemble`."""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..ensemble import Ensemble


class StumpEnsembleBuilder:
    """Collects the rounds — ``(candidate, α)`` terms and intercept shifts — and builds an
    :class:`Ensemble` ``F(x) = b + Σ_t α_t h_{c_t}(x)`` of the first ``n`` rounds whose weak
    models come from the dictionary source."""

    def __init__(self, source, info=None, prefix: Optional[Ensemble] = None):
        self.source = source
        self.prefix = prefix  # a continued model: its weak models are rounds 1..k
        self.info = dict(info or {})
        self._rounds: List[Tuple[list, float]] = []  # closed rounds: (terms, intercept)
        self._terms: list = []  # the open round
        self._intercept = 0.0
        self._models = {}

    def add(self, c: int, alpha: float) -> None:
        self._terms.append((int(c), float(alpha)))

    def add_intercept(self, b: float) -> None:
        self._intercept += float(b)

    def model(self, c: int):
        """The weak model of candidate ``c`` (built once)."""
        if c not in self._models:
            self._models[c] = self.source.make_model(c)
        return self._models[c]

    def end_round(self):
        """Close the round; its ``([(weak model, weight)], intercept)``."""
        terms, b = self._terms, self._intercept
        self._rounds.append((terms, b))
        self._terms, self._intercept = [], 0.0
        return [(self.model(c), a) for c, a in terms], b

    @property
    def n_rounds(self) -> int:
        return len(self._rounds) + (self.prefix.n_rounds if self.prefix is not None else 0)

    def build(self, n_rounds: Optional[int] = None) -> Ensemble:
        """The model of the first ``n_rounds`` closed rounds (default all; a continued
        model's weak models count as its first rounds)."""
        n = self.n_rounds if n_rounds is None else int(n_rounds)
        models, weights, base = [], [], 0.0
        if self.prefix is not None:
            k = min(n, self.prefix.n_rounds)
            models, weights = list(self.prefix.models[:k]), list(self.prefix.weights[:k])
            base, n = self.prefix.base_score, n - k
        rounds = self._rounds[:n]
        for terms, b in rounds:
            base += b
            for c, a in terms:
                models.append(self.model(c))
                weights.append(a)
        return Ensemble(models, weights, base_score=base, num_features=self.source.F,
                        info=dict(self.info))
