"""AdaBoost vs RankBoost (Rudin & Schapire 2009 §5: Theorems 10-12, Corollaries 11, 13) and
smooth margin ranking (§4: eq. 12, Theorem 7, the 8x8 example)."""

import math

import pytest
import torch

from torchrankboost.boosting.learners import Stumps
from torchrankboost.boosting.papers import (AdaBoost, MatrixRankers, RankBoost,
                                          SmoothMarginRanking, with_zero_skew_intercept)
from torchrankboost.boosting.papers.rankboost import smooth_margin_alpha
from torchrankboost.groups import Groups
from paper_fixtures import M88, ranking_8x8  # noqa: F401
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


def test_eq12_values_and_limits():
    """Rudin & Schapire 2009, §4, eq. (12) at r = 0.6, d₀ = 0.05: g = 0 gives RankBoost's
    step; α decreases in g."""
    r, d0 = 0.6, 0.05
    dp, dm = (1 + r - d0) / 2, (1 - r - d0) / 2
    want = [0.74404, 0.63688, 0.52745, 0.41317, 0.29077, 0.15555, 0.01679]
    for g, a in zip([0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.59], want):
        assert smooth_margin_alpha(g, dp, dm, d0) == pytest.approx(a, abs=1e-5)
    assert smooth_margin_alpha(0.0, dp, dm, d0) == pytest.approx(0.5 * math.log(dp / dm))
    # (12) solves (11): g τ = -τ'
    for g in (0.05, 0.3, 0.55):
        a = smooth_margin_alpha(g, dp, dm, d0)
        tau = dp * math.exp(-a) + dm * math.exp(a) + d0
        dtau = -dp * math.exp(-a) + dm * math.exp(a)
        assert g * tau == pytest.approx(-dtau, abs=1e-12)
    # stable form stays finite when d₋ = 0 (d₀ > 0): e^α = (1-g)d₊/(g d₀)
    assert smooth_margin_alpha(0.2, 0.7, 0.0, 0.3) == pytest.approx(math.log(0.8 * 0.7 / (0.2 * 0.3)))


def test_8x8_smooth_margin_exceeds_037_theorem7():
    H, y, g = ranking_8x8()
    sm = SmoothMarginRanking(learner=MatrixRankers(), n_rounds=2500, pairs="bipartite",
                             complement=False)
    sm.fit(H, y, g)
    h = sm.history_
    warm = [d for d in h if d["phase"] == "warmup"]
    smooth = [d for d in h if d["phase"] == "smooth"]
    assert len(warm) == 9 and warm[-1]["smooth_margin"] == pytest.approx(0.0336, abs=1e-4)
    assert sm.stop_reason_ is None
    mus = [d["margin"] for d in h]
    assert max(mus) > 0.37  # RankBoost's limit is 1/3; the LP optimum is 3/8
    assert all(m <= 3 / 8 + 1e-12 for m in mus)
    checked = 0
    for d in smooth:
        gt, gn, a, r, s1 = d["g"], d["g_next"], d["alpha"], d["r"], d["l1"]
        assert gn >= gt - 1e-12  # G̃ is monotone
        assert d["margin"] > gn  # eq. (6): G̃ < μ
        assert gn >= d["margin"] - math.log(8) / s1 - 1e-12  # μ - ln|C_p|/‖λ‖₁ ≤ G̃
        if d["theorem7_condition"]:
            checked += 1
            assert gn - gt >= 0.5 * a * (r - gt) / s1 - 1e-12  # Theorem 7
    assert checked == len(smooth)  # d₀ ≡ 0 on this matrix: the condition always holds


def test_smooth_margin_on_stumps_and_stop_rule():
    """Separable bipartite data: warm-up reaches G̃ > 0, then G̃ keeps increasing."""
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(40, 2, generator=gen)
    y = (X[:, 0] > 0.2).to(F64)
    sm = SmoothMarginRanking(learner=Stumps(max_thresholds=30), n_rounds=60, pairs="bipartite")
    sm.fit(X, y)
    h = sm.history_
    assert any(d["phase"] == "smooth" for d in h) or sm.stop_reason_ is not None
    gs = [d["g_next"] for d in h if d["phase"] == "smooth"]
    assert all(b >= a - 1e-12 for a, b in zip(gs[:-1], gs[1:]))
