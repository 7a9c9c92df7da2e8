"""ties="average": the expectation over the orders of tied documents (McSherry & Najork,
2008), checked against averaging the "stable" metric over every input order."""

import itertools

import pytest
import torch

from torchrankboost import Groups
from torchrankboost.metrics import (dcg_at_k, mean_average_precision, ndcg_at_k,
                                    precision_at_k, reciprocal_rank)

METRICS = {
    "dcg@3": lambda s, y, g, ties: dcg_at_k(s, y, g, k=3, ties=ties, reduction="none"),
    "ndcg": lambda s, y, g, ties: ndcg_at_k(s, y, g, k=None, ties=ties, reduction="none"),
    "ndcg@2": lambda s, y, g, ties: ndcg_at_k(s, y, g, k=2, ties=ties, reduction="none"),
    "map": lambda s, y, g, ties: mean_average_precision(s, y, g, ties=ties, reduction="none"),
    "map@3": lambda s, y, g, ties: mean_average_precision(s, y, g, k=3, ties=ties,
                                                          reduction="none"),
    "p@2": lambda s, y, g, ties: precision_at_k(s, y, g, k=2, ties=ties, reduction="none"),
    "rr": lambda s, y, g, ties: reciprocal_rank(s, y, g, ties=ties, reduction="none"),
    "rr@2": lambda s, y, g, ties: reciprocal_rank(s, y, g, k=2, ties=ties, reduction="none"),
}


def average_over_orders(fn, s, y):
    """The stable metric of one query averaged over every permutation of its documents
    (each order of the tied documents appears equally often)."""
    vals = [fn(s[list(p)], y[list(p)], None, "stable")[0]
            for p in itertools.permutations(range(len(s)))]
    return torch.stack(vals).mean()


@pytest.mark.parametrize("name", sorted(METRICS))
@pytest.mark.parametrize("seed", range(6))
def test_average_equals_the_mean_over_tie_orders(name, seed):
    gen = torch.Generator().manual_seed(seed)
    n = 5
    s = torch.randint(0, 3, (n,), generator=gen).to(torch.float64)  # many ties
    y = torch.randint(0, 3, (n,), generator=gen).to(torch.float64)
    fn = METRICS[name]
    got = fn(s, y, None, "average")[0]
    torch.testing.assert_close(got, average_over_orders(fn, s, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_all_equal_scores_do_not_depend_on_the_input_order(name):
    g = Groups.from_sizes([6, 4, 1])
    y = torch.tensor([2.0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1], dtype=torch.float64)
    s = torch.zeros(11, dtype=torch.float64)
    fn = METRICS[name]
    base = fn(s, y, g, "average")
    for seed in range(4):
        perm = g.argsort(torch.rand(11, generator=torch.Generator().manual_seed(seed)))
        torch.testing.assert_close(fn(s, y[perm], g, "average"), base, rtol=1e-12, atol=1e-12)


def test_without_ties_average_equals_stable():
    g = Groups.from_sizes([7, 5, 3])
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(15, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 4, (15,), generator=gen).to(torch.float64)
    for fn in METRICS.values():
        torch.testing.assert_close(fn(s, y, g, "average"), fn(s, y, g, "stable"))


def test_bad_ties_value():
    with pytest.raises(ValueError, match="ties"):
        ndcg_at_k(torch.zeros(3), torch.ones(3), ties="random")


# ----------------------------------------------------------------------------- padded input
import torchrankboost.metrics as M  # noqa: E402

PADDED = [
    ("auc", {}), ("pair_error", {"reduction": "mean"}), ("dcg_at_k", {"k": 3}),
    ("ndcg_at_k", {"k": 5}), ("mean_average_precision", {}), ("precision_at_k", {"k": 2}),
    ("reciprocal_rank", {}), ("positives_above_first_negative", {}),
    ("positives_below_top_negative", {}), ("precision_at_percent", {"percent": 50.0}),
    ("ranking_margin", {"reduction": "mean"}),
]


@pytest.mark.parametrize("name,kw", PADDED)
def test_padded_with_mask_equals_flat(name, kw):
    g = Groups.from_sizes([4, 0, 6, 3])
    gen = torch.Generator().manual_seed(1)
    s = torch.randn(13, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (13,), generator=gen).to(torch.float64)
    S, mask = g.pad(s, fill=-7.0)
    Y, _ = g.pad(y, fill=-1.0)  # allRank-style padding labels, masked out
    fn = getattr(M, name)
    torch.testing.assert_close(fn(S, Y, mask=mask, **kw), fn(s, y, g, **kw), equal_nan=True)


def test_padding_labels_without_a_mask_are_refused():
    s = torch.tensor([0.3, 0.2, 0.1, 0.0], dtype=torch.float64)
    y = torch.tensor([2.0, 1.0, -1.0, -1.0], dtype=torch.float64)  # padded slots flattened
    with pytest.raises(ValueError, match="mask="):
        ndcg_at_k(s, y)
    with pytest.raises(ValueError, match="mask="):
        M.pair_error(s, y)
    with pytest.raises(ValueError, match="mask="):
        ndcg_at_k(s.reshape(2, 2), y.reshape(2, 2))  # padded without a mask
    # threshold metrics read negative labels as non-relevant (+1/-1 labels work)
    assert float(M.auc(s, torch.tensor([1.0, -1, 1, -1]))) == pytest.approx(0.75)
