"""AdaBoost vs RankBoost (Rudin & Schapire 2009 §5: Theorems 10-12, Corollaries 11, 13):
AdaBoost with the constant weak classifier, the F-skew and the zero-skew intercept."""

import math

import pytest
import torch

from torchrankboost.boosting.learners import Stumps
from torchrankboost.boosting.papers import AdaBoost, RankBoost, with_zero_skew_intercept

from paper_fixtures import discrete_fixture as _discrete_fixture

F64 = torch.float64


INF_F = 85.98641713612714  # inf F = 2 Σ_v sqrt(n⁺_v n⁻_v) (Rudin & Schapire 2009, §5)
INF_FT = 1848.415982977015  # inf F̃ = (Σ_v sqrt(n⁺_v n⁻_v))²


def _F_parts(s, y):
    pos = y > 0
    return float(torch.exp(-s[pos]).sum()), float(torch.exp(s[~pos]).sum())


def test_adaboost_with_constant_minimises_both_losses():
    X, y = _discrete_fixture()
    ada = AdaBoost(learner=Stumps(max_thresholds=16), n_rounds=1000)
    model = ada.fit(X, y)
    h = ada.history_
    assert h[-1]["F"] == pytest.approx(INF_F, rel=1e-9)
    assert abs(h[-1]["relative_f_skew"]) < 1e-9  # Corollary 11: F-skew -> 0
    fp, fm = _F_parts(ada.scores_, y)
    assert fp * fm == pytest.approx(INF_FT, rel=1e-8)  # Theorem 10: F̃ minimised too
    assert (fp + fm) ** 2 - (fp - fm) ** 2 == pytest.approx(4 * fp * fm)  # T2
    assert any(d["constant"] for d in h)  # the constant weak classifier is used
    assert torch.allclose(model.predict(X), ada.scores_, atol=1e-10)
    # Theorem 12 (tie-robust form): the same pair margins as RankBoost
    rb = RankBoost("rb-d", learner=Stumps(max_thresholds=16), n_rounds=1000, pairs="bipartite")
    rb.fit(X, y)
    d = ada.scores_ - rb.scores_
    assert float((d - d.mean()).abs().max()) < 1e-5


def test_adaboost_without_constant_keeps_skew():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=gen)
    y = (X[:, 0] + 0.8 * torch.randn(60, generator=gen) > 0.7).to(F64)
    a0 = AdaBoost(learner=Stumps(max_thresholds=8), n_rounds=30, include_constant=False)
    a0.fit(X, y)
    assert not any(d["constant"] for d in a0.history_)
    for d in a0.history_:
        assert d["alpha"] == pytest.approx(math.atanh(d["r"]))


@pytest.mark.parametrize("variant", ["rb-c", "rb-d", "coordinate"])
@pytest.mark.parametrize("T", [1, 7, 40])
def test_corollary13_intercept_on_any_rankboost_model(variant, T):
    """T7: after any number of RankBoost rounds, b = ½ ln(F₊/F₋) gives F = 2√F̃, skew 0."""
    gen = torch.Generator().manual_seed(T)
    X = torch.randn(50, 4, generator=gen)
    y = (X[:, 1] + torch.randn(50, generator=gen) > 0).to(F64)
    rb = RankBoost(variant, learner=Stumps(max_thresholds=10), n_rounds=T, pairs="bipartite")
    model = rb.fit(X, y)
    s0 = model.predict(X)
    fp0, fm0 = _F_parts(s0, y)
    fixed, b = with_zero_skew_intercept(model, X, y)
    s1 = fixed.predict(X)
    fp, fm = _F_parts(s1, y)
    assert b == pytest.approx(0.5 * math.log(fp0 / fm0))
    assert fp - fm == pytest.approx(0.0, abs=1e-12 * (fp + fm))
    assert fp + fm == pytest.approx(2 * math.sqrt(fp0 * fm0), rel=1e-12)
    assert fp * fm == pytest.approx(fp0 * fm0, rel=1e-12)  # F̃ unchanged
    assert torch.allclose(s1 - s0, torch.full_like(s0, b))
