"""QBRank and GBT (Zheng et al. 2007, Algorithm 2) as driver configurations."""

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.boosting.papers import GBT, QBRank
from torchrankboost.boosting.papers.qbrank import QBRankProxyLoss
from torchrankboost.data import make_letor
from torchrankboost.losses import QBRankLoss

F64 = torch.float64


class Record:
    def __init__(self):
        self.rounds = []

    def on_round_end(self, ranker, record):
        self.rounds.append(record)


def _data(seed=0):
    X, y, g = make_letor(30, 12, 6, n_grades=4, seed=seed)
    return X, y, g


@pytest.mark.parametrize("curvature", ["qbrank", "bound", "diag"])
def test_objective_never_increases(curvature):
    X, y, g = _data()
    rec = Record()
    q = QBRank(n_rounds=25, curvature=curvature, learning_rate=0.3, callbacks=[rec],
               learner=RegressionTree(max_leaves=8, min_samples_leaf=3))
    model = q.fit(X, y, g)
    losses = [d["loss_before"] for d in rec.rounds] + [rec.rounds[-1]["loss"]]
    assert all(b <= a + 1e-9 * abs(a) for a, b in zip(losses[:-1], losses[1:]))
    assert losses[-1] < losses[0]
    r0 = float(q.objective(torch.zeros(len(y), dtype=F64), y, g))
    assert losses[0] == pytest.approx(r0)  # h_0 = 0
    assert float(q.objective(model.predict(X), y, g)) == pytest.approx(losses[-1], rel=1e-9)
    for d in rec.rounds:  # Algorithm 2 order: line search s_m, then shrinkage η
        assert d["weight"] == pytest.approx(0.3 * d["step"])


def test_curvature_proxy_is_the_row_weighting():
    """Zheng et al. 2007: Algorithm 2's rows (w per pair occurrence, 1-w per label) collapse per
    document to target -g/c_d with weight c_d = w·n_d + (1-w)."""
    X, y, g = _data(1)
    w = 0.5
    loss = QBRankLoss(w=w, tau="grade_difference")
    proxy = QBRankProxyLoss(loss)
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(len(y), generator=gen, dtype=F64)
    grad, c = proxy.grad_hess(s, y, g)
    n = len(y)
    num = torch.zeros(n, dtype=F64)
    den = torch.zeros(n, dtype=F64)
    off = g.offsets.tolist()
    for q in range(g.num_groups):
        for i in range(off[q], off[q + 1]):
            for j in range(off[q], off[q + 1]):
                if y[i] > y[j]:  # x_i ≻ y_j, τ = grade difference
                    v = max(0.0, float(s[j] - s[i] + (y[i] - y[j])))
                    num[i] += w * v
                    den[i] += w
                    num[j] += w * (-v)
                    den[j] += w
        for i in range(off[q], off[q + 1]):
            num[i] += (1 - w) * float(y[i] - s[i])
            den[i] += 1 - w
    assert torch.allclose(c.to(F64), den, atol=1e-12)
    assert torch.allclose((-grad / c).to(F64), num / den, atol=1e-9)


def test_gbt_is_least_squares_boosting():
    X, y, g = _data(2)
    rec = Record()
    m = GBT(n_rounds=20, learning_rate=0.5, callbacks=[rec],
            learner=RegressionTree(max_leaves=8, min_samples_leaf=3)).fit(X, y, g)
    losses = [d["loss"] for d in rec.rounds]
    assert all(b <= a + 1e-12 for a, b in zip(losses[:-1], losses[1:]))
    s = m.predict(X)
    assert losses[-1] == pytest.approx(float(0.5 * ((y.to(F64) - s) ** 2).sum()), rel=1e-9)
    for d in rec.rounds:
        assert d["curvature_mean"] == pytest.approx(1.0)


def test_shrinkage_is_no_longer_a_keyword():
    """``shrinkage=`` (the old name of ``learning_rate``) is an unknown keyword now."""
    with pytest.raises(TypeError, match="shrinkage"):
        QBRank(shrinkage=0.2)
    with pytest.raises(TypeError, match="shrinkage"):
        GBT(shrinkage=0.3)
    assert GBT().learning_rate == 0.05 and QBRank(learning_rate=0.1).learning_rate == 0.1
    assert not hasattr(QBRank(), "shrinkage")


def test_bad_curvature():
    with pytest.raises(ValueError, match="curvature"):
        QBRank(curvature="newton")
