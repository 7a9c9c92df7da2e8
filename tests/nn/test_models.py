"""The ranking networks: the flat and padded entry points agree, attention stays within a
query, the configuration rebuilds the network, bad options are one-line errors."""

import pytest
import torch

from torchrankboost.groups import Groups
from torchrankboost.nn import ListwiseTransformer, MLPScorer, build_network, pad_queries, \
    unpad_scores


def _batch(sizes=(4, 1, 7, 3), F=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    groups = Groups.from_sizes(torch.tensor(sizes)).fix_sizes()
    return torch.randn(sum(sizes), F, generator=g), groups


@pytest.mark.parametrize("norm", ["global", "query", "query_zscore", "none"])
@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_flat_and_padded_entry_points_agree(arch, norm):
    torch.manual_seed(0)
    X, g = _batch()
    net = build_network(arch, n_features=5, norm=norm).eval()
    net.fit_normalisation(X)
    flat = net.score(X, g)
    Xp, mask = pad_queries(X, g)
    assert flat.shape == (15,)
    assert torch.allclose(unpad_scores(net(Xp, mask), g), flat, atol=1e-5)


def test_block_and_padded_attention_agree():
    torch.manual_seed(0)
    X, g = _batch()
    a = ListwiseTransformer(5, attention="padded").eval()
    b = ListwiseTransformer(5, attention="block").eval()
    b.load_state_dict(a.state_dict())
    assert torch.allclose(a.score(X, g), b.score(X, g), atol=1e-5)


@pytest.mark.parametrize("attention", ["padded", "block"])
def test_attention_stays_within_a_query(attention):
    """Changing one query's documents moves only that query's scores; the Transformer is
    context-aware (a query's other documents move its scores), the MLP is not."""
    torch.manual_seed(0)
    X, g = _batch()
    net = ListwiseTransformer(5, attention=attention, norm="none").eval()
    before = net.score(X, g)
    Y = X.clone()
    Y[5:12] += 3.0  # the third query
    after = net.score(Y, g)
    assert torch.equal(after[:5], before[:5]) or torch.allclose(after[:5], before[:5],
                                                                 atol=1e-6)
    assert torch.allclose(after[12:], before[12:], atol=1e-6)
    Z = X.clone()
    Z[1] += 3.0  # one document of the first query moves the others' scores
    assert not torch.allclose(net.score(Z, g)[[0, 2, 3]], before[[0, 2, 3]], atol=1e-6)
    mlp = MLPScorer(5, norm="none").eval()
    assert torch.equal(mlp.score(Z, g)[[0, 2, 3]], mlp.score(X, g)[[0, 2, 3]])


def test_transformer_ignores_document_order_within_a_query():
    torch.manual_seed(0)
    X, g = _batch(sizes=(6,))
    net = ListwiseTransformer(5).eval()
    net.fit_normalisation(X)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.allclose(net.score(X[perm], g), net.score(X, g)[perm], atol=1e-5)


def test_one_width_is_one_layer():
    assert MLPScorer(5, hidden=32).config()["hidden"] == [32]


def test_config_rebuilds_the_network():
    net = ListwiseTransformer(5, d_model=16, n_heads=4, n_layers=1, input_layers=[8])
    twin = build_network(net.architecture, **net.config())
    assert twin.config() == net.config()
    assert {k: v.shape for k, v in twin.state_dict().items()} == \
        {k: v.shape for k, v in net.state_dict().items()}


@pytest.mark.parametrize("arch, params, match", [
    ("mlp", {"hidden": [0]}, "hidden"),
    ("mlp", {"hidden": "64"}, "hidden"),
    ("mlp", {"dropout": 1.0}, "dropout"),
    ("transformer", {"attention": "dense"}, "attention"),
    ("transformer", {"n_layers": -1}, "n_layers"),
    ("transformer", {"norm": "batch"}, "norm"),
    ("transformer", {"width": 3}, "width"),
    ("cnn", {}, "unknown model"),
])
def test_bad_options(arch, params, match):
    with pytest.raises(ValueError, match=match):
        build_network(arch, n_features=5, **params)
