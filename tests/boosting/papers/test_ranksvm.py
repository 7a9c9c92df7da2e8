"""RankSVM (pairwise hinge, L-BFGS) and the LinearRanker model."""

import pytest
import torch

from torchrankboost.data import make_letor
from torchrankboost.groups import Groups
from torchrankboost.boosting.papers import LinearRanker, RankSVM

F64 = torch.float64


def _pairs(y, g):
    out = []
    off = g.offsets.tolist()
    for q in range(g.num_groups):
        for i in range(off[q], off[q + 1]):
            for j in range(off[q], off[q + 1]):
                if y[i] > y[j]:
                    out.append((i, j))
    return torch.tensor(out)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_ranksvm_matches_dense_primal(loss):
    X, y, g = make_letor(12, 8, 5, n_grades=3, seed=1, dtype=F64)
    svm = RankSVM(C=0.5, loss=loss, standardize=False, max_iter=500)
    model = svm.fit(X, y, g)
    P = _pairs(y, g)
    w = model.weight

    def primal(w):
        m = 1 - (X[P[:, 0]] - X[P[:, 1]]) @ w
        phi = m.clamp_min(0) ** 2 if loss == "squared_hinge" else m.clamp_min(0)
        return 0.5 * (w * w).sum() + 0.5 * phi.sum()

    assert float(primal(w)) == pytest.approx(svm.objective_, rel=1e-9)
    assert svm.objective_ < float(primal(torch.zeros_like(w)))
    if loss == "squared_hinge":  # smooth and strongly convex: the gradient vanishes
        x = w.clone().requires_grad_(True)
        (gr,) = torch.autograd.grad(primal(x), x)
        assert float(gr.norm()) < 1e-5


def test_ranksvm_separable_and_standardize():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=gen, dtype=F64) * torch.tensor([1.0, 100.0, 0.01], dtype=F64)
    y = (X[:, 0] > 0).to(F64) + (X[:, 0] > 1).to(F64)
    g = Groups.from_sizes([20, 20])
    model = RankSVM(C=10.0).fit(X, y, g)
    s = model.predict(X)
    P = _pairs(y, g)
    assert bool((s[P[:, 0]] > s[P[:, 1]]).all())
    assert torch.isfinite(model.weight).all()


def test_linear_ranker_roundtrip(tmp_path):
    m = LinearRanker(torch.tensor([0.5, -1.0, 2.0], dtype=F64), bias=0.25, info={"C": 1.0})
    X = torch.tensor([[1.0, 2.0, float("nan")], [0.0, 1.0, 1.0]])
    assert torch.allclose(m.predict(X), torch.tensor([0.5 - 2.0 + 0.25, -1.0 + 2.0 + 0.25], dtype=F64))
    p = tmp_path / "lin.safetensors"
    m.save(p)
    m2 = LinearRanker.load(p)
    assert torch.equal(m2.weight, m.weight) and m2.bias == m.bias and m2.info == {"C": 1.0}
    with pytest.raises(ValueError, match="shape"):
        m.predict(torch.zeros(2, 4))


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="C must"):
        RankSVM(C=0)
    with pytest.raises(ValueError, match="loss"):
        RankSVM(loss="logistic")
    p = tmp_path / "x.safetensors"
    from safetensors.torch import save_file
    save_file({"a": torch.zeros(1)}, str(p))
    with pytest.raises(ValueError, match="not a torchrankboost LinearRanker"):
        LinearRanker.load(p)


def test_linear_predict_refuses_infinite_features():
    """``±inf`` features are refused (naming the column) instead of turning into ±1.8e308."""
    lin = LinearRanker(torch.tensor([1.0, -2.0]), 0.5)
    with pytest.raises(ValueError, match="infinite value in column 1"):
        lin.predict(torch.tensor([[0.0, 1.0], [1.0, float("inf")]]))
    X = torch.tensor([[1.0, float("nan")]])
    assert torch.equal(lin.predict(X), torch.tensor([1.5], dtype=torch.float64))
