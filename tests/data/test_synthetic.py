"""Synthetic LETOR data (``data/synthetic.py``: ``make_letor``)."""

import pytest
import torch

from torchrankboost.data import make_letor


def test_make_letor_shapes_and_determinism():
    a = make_letor(50, 20, 12, seed=3)
    b = make_letor(50, 20, 12, seed=3)
    c = make_letor(50, 20, 12, seed=4)
    assert torch.equal(a.X, b.X) and torch.equal(a.labels, b.labels) and a.groups == b.groups
    assert not torch.equal(a.labels, c.labels) or a.groups != c.groups
    assert a.X.shape == (a.groups.num_docs, 12) and a.num_queries == 50
    assert a.groups.sizes.min() >= 1 and a.groups.sizes.float().std() > 0  # variable sizes
    assert 0.5 * 50 * 20 < a.groups.num_docs < 1.5 * 50 * 20
    assert set(a.labels.unique().tolist()) == {0, 1, 2, 3, 4}
    assert torch.equal(a.qid, a.groups.group_index)
    assert torch.isfinite(a.X).all()
    # grades skewed: grade 0 is the most common
    counts = torch.bincount(a.labels.long())
    assert int(counts.argmax()) == 0
    # ties in some features
    n_unique = torch.tensor([a.X[:, j].unique().numel() for j in range(12)])
    assert int(n_unique.min()) < a.groups.num_docs // 4
    # equal sizes without spread, other grade counts
    e = make_letor(10, 7, 3, n_grades=2, size_spread=0.0, seed=1)
    assert e.groups.sizes.tolist() == [7] * 10 and set(e.labels.unique().tolist()) == {0, 1}
    with pytest.raises(ValueError, match="n_features"):
        make_letor(10, 7, 0)


def test_make_letor_informative_features_carry_signal():
    d, info = make_letor(200, 30, 20, seed=0, return_info=True, noise=0.3, query_shift=0.0)
    inf = info["informative"]
    assert inf.sum() == 5
    y = d.labels - d.labels.mean()
    Xc = d.X - d.X.mean(0)
    corr = (Xc * y[:, None]).sum(0) / (Xc.norm(dim=0) * y.norm())
    assert corr[inf].abs().max() > 0.2
    assert corr[~inf].abs().max() < 0.1
