"""The neural rankers' layers: padding round trips, per-query and global normalisation."""

import pytest
import torch

from torchrankboost.groups import Groups
from torchrankboost.nn import GlobalNorm, QueryNorm, pad_queries, unpad_scores
from torchrankboost.nn.layers import make_norm


def _batch(seed=0, sizes=(3, 1, 5, 2), F=4):
    g = torch.Generator().manual_seed(seed)
    groups = Groups.from_sizes(torch.tensor(sizes)).fix_sizes()
    return torch.randn(sum(sizes), F, generator=g, dtype=torch.float32), groups


def test_pad_unpad_round_trip():
    X, g = _batch()
    Xp, mask = pad_queries(X, g)
    assert Xp.shape == (4, 5, 4) and mask.shape == (4, 5)
    assert mask.sum(1).tolist() == [3, 1, 5, 2]
    assert torch.equal(Xp[mask], X)
    assert torch.equal(unpad_scores(Xp[..., 0], g), X[:, 0])


def test_query_norm_minmax_and_zscore_per_query():
    X, g = _batch()
    Xp, mask = pad_queries(X, g)
    out = QueryNorm("minmax")(Xp, mask)
    q = X[3:4]  # the one-document query: constant features give 0
    assert torch.equal(unpad_scores(out[..., 0], g)[3:4], torch.zeros(1))
    q = X[4:9]  # the third query, alone
    want = (q - q.min(0).values) / (q.max(0).values - q.min(0).values)
    assert torch.allclose(out[2, :5], want, atol=1e-6)
    z = QueryNorm("zscore")(Xp, mask)[2, :5]
    assert torch.allclose(z.mean(0), torch.zeros(4), atol=1e-5)


def test_global_norm_uses_training_statistics_and_nan_to_zero():
    X, _ = _batch()
    X[:, 1] = 7.0  # constant: sigma 1, values centred
    norm = GlobalNorm(4).fit(X)
    out = norm(X)
    assert torch.allclose(out[:, 0].mean(), torch.tensor(0.0), atol=1e-5)
    assert torch.equal(out[:, 1], torch.zeros(11))
    Y = X.clone()
    Y[0, 2] = float("nan")
    assert norm(Y)[0, 2] == 0 and torch.isfinite(norm(Y)).all()
    assert set(norm.state_dict()) == {"mean", "std"}  # stored in the model


def test_make_norm_names():
    assert make_norm("none", 3) is None
    with pytest.raises(ValueError, match="norm"):
        make_norm("batch", 3)
