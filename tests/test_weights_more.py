"""Weights in the algorithms that took none before: RankSVM (a pair weighs ``c_q w_i w_j`` in
the hinge sum, the scaling from the rows of positive weight) and PNormPush (the pair weights
inside the p-norm), each giving the model trained without its zero-weighted queries; and
``train --weights`` over several processes, equal to one process."""

import torch

from torchrankboost import registry
from torchrankboost.boosting.learners import Stumps
from torchrankboost.linear import RankSVM

from test_weights import TOL, _data, _same

import pytest


@pytest.fixture(scope="module")
def data():
    return _data()


@pytest.fixture(scope="module")
def Xt():
    return torch.randn(40, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_zero_weight_queries_give_the_ranksvm_model_without_them(data, Xt, loss):
    X, y, g, keepq, keep = data
    q = g.group_index
    w = torch.where(keep, 1.0, 0.0).double()
    w[keep] = torch.linspace(0.5, 2.0, int(keep.sum()), dtype=torch.float64)

    def make():
        return RankSVM(C=0.5, loss=loss, max_iter=30)

    full = make().fit(X, y, q, sample_weight=w)
    half = make().fit(X[keep], y[keep], q[keep], sample_weight=w[keep])
    _same(full, half, Xt)
    c = torch.where(keepq, 1.5, 0.0).double()
    _same(make().fit(X, y, q, group_weight=c),
          make().fit(X[keep], y[keep], q[keep], group_weight=c[keepq]), Xt)
    plain = make().fit(X[keep], y[keep], q[keep])
    assert float((full.predict(Xt) - plain.predict(Xt)).abs().max()) > 1e-6  # weights matter


def test_ranksvm_weights_weigh_each_pair_c_q_w_i_w_j(data):
    """The fit minimises ``½‖w‖² + C Σ c_q w_i w_j φ(...)``: its objective equals the
    primal with explicitly weighted pairs, and unit weights are the unweighted fit."""
    from torchrankboost.boosting.weights import fit_weights, weighted_pairs
    from torchrankboost.pairs import Graded

    X, y, g, _, _ = data
    w = torch.rand(len(y), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    c = torch.linspace(0.5, 2.0, g.num_groups, dtype=torch.float64)
    a = RankSVM(max_iter=30)
    a.fit(X, y, g, sample_weight=w, group_weight=c)
    b = RankSVM(max_iter=30, pairs=weighted_pairs(Graded(), y, g, fit_weights(w, c, g)))
    b.fit(X, y, g)
    assert abs(a.objective_ - b.objective_) <= 1e-8 * abs(b.objective_)
    u = RankSVM(max_iter=30).fit(X, y, g, sample_weight=torch.ones(len(y)))
    v = RankSVM(max_iter=30).fit(X, y, g)
    assert torch.equal(u.weight, v.weight) and u.bias == v.bias
