"""Clicks through the estimator: ``BoostedRanker(debias=...)`` with ``fit(..., position=...)``,
rows in any order, and the one-line errors."""

import numpy as np
import pytest
import torch

from torchrankboost import BoostedRanker, Groups
from torchrankboost.clicks import simulate_clicks


def _log(G=30, L=8):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(G * L, 4))
    y = (X[:, 0] > 0.3).astype(int) + (X[:, 0] > 1.2).astype(int)
    log = simulate_clicks(torch.tensor(y), Groups.from_sizes([L] * G), torch.tensor(X[:, 1]),
                          n_sessions=4000, top_k=5, seed=0)
    return X, y, np.repeat(np.arange(G), L), log


def test_estimator_debias_rows_in_any_order():
    X, y, qid, log = _log()
    within = np.arange(len(qid)) % 8
    perm = np.lexsort((qid, within))  # rows interleaved: the fit's stable sort undoes it
    pos, ctr = log.position.numpy(), log.ctr().numpy()
    a = BoostedRanker(n_rounds=4, debias="em").fit(X, ctr, qid=qid, position=pos)
    b = BoostedRanker(n_rounds=4, debias="em").fit(X[perm], ctr[perm], qid=qid[perm],
                                                   position=pos[perm])
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert a.model_.info["position_debias"]["method"] == "em"
    with pytest.raises(ValueError, match="needs fit"):
        BoostedRanker(n_rounds=2, debias="additive").fit(X, ctr, qid=qid)
    with pytest.raises(ValueError, match="debias="):
        BoostedRanker(n_rounds=2).fit(X, ctr, qid=qid, position=pos)
