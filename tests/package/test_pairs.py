"""Pair specifications (``pairs.py``): explicit pair weights and the bipartite threshold are
checked when they are made."""

import math

import pytest

from torchrankboost import AdaBoostLoss, Bipartite, ExplicitPairs


def test_pair_weights_must_be_finite():
    for w in ([1.0, math.inf], [1.0, -math.inf], [math.nan, 1.0], [1.0, -1.0]):
        with pytest.raises(ValueError, match="weight must be finite and non-negative"):
            ExplicitPairs([0, 1], [1, 0], w)
    assert ExplicitPairs([0], [1], [2.5]).weight.tolist() == [2.5]


def test_bipartite_threshold_must_be_finite():
    for t in (math.nan, math.inf, "x", None, True):
        with pytest.raises(ValueError, match="threshold must be a finite number"):
            Bipartite(t)
        with pytest.raises(ValueError, match="threshold must be a finite number"):
            AdaBoostLoss(threshold=t)
    assert Bipartite(0.5).threshold == 0.5
