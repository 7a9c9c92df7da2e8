"""The weak-model registry (boosting/learners/__init__.py): every fitted weak model rebuilt
from its ``state()`` predicts bit for bit alike; an unknown type is refused."""

import json

import pytest
import torch

from learner_data import make_data
from torchrankboost.boosting.learners import (FeatureRankers, RegressionTree, Stumps,
                                              weak_model_from_state)


def test_state_round_trip_bit_identical(tmp_path):
    X, y, w = make_data(n=800, seed=8)
    for learner in (RegressionTree(max_leaves=9), Stumps(criterion="least_squares"),
                    FeatureRankers(criterion="least_squares"), Stumps(), FeatureRankers()):
        p = learner.prepare(X)
        m = learner.fit(p, y, w)
        tensors, meta = m.state()
        path = tmp_path / "m.pt"
        torch.save(tensors, path)
        meta2 = json.loads(json.dumps(meta))
        m2 = weak_model_from_state(torch.load(path, weights_only=True), meta2)
        assert torch.equal(m.predict(X), m2.predict(X))
        assert torch.equal(m.predict_prepared(p), m2.predict_prepared(p))
        assert torch.equal(m.feature_gain(4), m2.feature_gain(4))
        assert torch.equal(m.feature_count(4), m2.feature_count(4))
    with pytest.raises(ValueError, match="type"):
        weak_model_from_state({}, {"type": "Nope"})
