"""RankBoost+ and RB-D/RB-C: Connamacher et al. 2019 Proposition 1, Lemma 3, Ê2 identities,
Algorithm 2's pruning."""

import itertools
import math

import pytest
import torch

from torchrankboost.boosting.papers import MatrixRankers, RankBoost, RankBoostPlus
from torchrankboost.pairs import ExplicitPairs

F64 = torch.float64


def subsets_data():
    """All 8 subsets of {a,b,c}; crucial pairs x ⊊ y (the superset is preferred): 19 pairs."""
    subs = [frozenset(c) for k in range(4) for c in itertools.combinations("abc", k)]
    hi, lo = [], []
    for i, y in enumerate(subs):
        for j, x in enumerate(subs):
            if x < y:
                hi.append(i)
                lo.append(j)
    h1 = torch.tensor([1.0 if s == frozenset("ab") else 0.0 for s in subs], dtype=F64)
    on2 = {frozenset(), frozenset("ac"), frozenset("abc")}
    h2 = torch.tensor([1.0 if s in on2 else 0.0 for s in subs], dtype=F64)
    return subs, ExplicitPairs(hi, lo), h1, h2


def r1_r2(h, pairs):
    d = h[pairs.hi] - h[pairs.lo]
    return float((d <= 0).to(F64).mean()), float(((d < 0).to(F64) + 0.5 * (d == 0).to(F64)).mean())


def test_proposition1_numbers():
    _, pairs, h1, h2 = subsets_data()
    assert pairs.num_pairs == 19
    assert r1_r2(h1, pairs) == pytest.approx((16 / 19, 17 / 38))
    assert r1_r2(h2, pairs) == pytest.approx((12 / 19, 17 / 38))
    out = {}
    for name, h in (("h1", h1), ("h2", h2)):
        for variant in ("rb-d", "rb-c"):
            rb = RankBoost(variant, learner=MatrixRankers(), n_rounds=1, pairs=pairs)
            rb.fit(h[:, None], None)
            d = rb.history_[0]
            # D_1 uniform, so Z_1 = Ê1(α h); also Ê1(h) at α = 1
            out[name, variant] = d["Z"]
            out[name, "raw"] = d["eps_zero"] + d["eps_plus"] * math.exp(-1) + d["eps_minus"] * math.e
    assert out["h1", "raw"] == pytest.approx(0.990627, abs=1e-6)
    assert out["h2", "raw"] == pytest.approx(1.21929, abs=1e-5)
    assert out["h1", "rb-d"] == pytest.approx(0.971795, abs=1e-6)
    assert out["h2", "rb-d"] == pytest.approx(0.991166, abs=1e-6)
    assert out["h1", "rb-c"] == pytest.approx(0.990034, abs=1e-6)
    assert out["h2", "rb-c"] == pytest.approx(0.992386, abs=1e-6)
    # Ê1 orders h1 before h2 although R̂1(h2) < R̂1(h1)
    for k in ("raw", "rb-d", "rb-c"):
        assert out["h1", k] < out["h2", k]


def test_corollary1_e2_equal_for_equal_r2():
    """Ê2(α_h h) = 2√(R̂2(1-R̂2)) under D_1: equal for h1 and h2 (both R̂2 = 17/38)."""
    _, pairs, h1, h2 = subsets_data()
    r2 = 17 / 38
    want = math.log(2 * math.sqrt(r2 * (1 - r2)))
    for h in (h1, h2):
        rp = RankBoostPlus(learner=MatrixRankers(), n_rounds=1, pairs=pairs)
        rp.fit(h[:, None], None)
        assert rp.history_[0]["loss_e2"] == pytest.approx(want, abs=1e-12)


def lemma3_data():
    """Elements 1 > 2 > ... > 6 (15 pairs); h1 = {1,2,3,6} above {4,5}; h2 = {2} above the rest."""
    labels = torch.tensor([6.0, 5, 4, 3, 2, 1], dtype=F64)
    H = torch.zeros(6, 2, dtype=F64)
    H[[0, 1, 2, 5], 0] = 1
    H[1, 1] = 1
    return H, labels


def test_lemma3_nonnegative_alpha_stalls():
    H, labels = lemma3_data()
    rb = RankBoost("coordinate", learner=MatrixRankers(), n_rounds=10, allow_negative_alpha=False)
    rb.fit(H, labels)
    h = rb.history_
    assert len(h) == 2 and rb.stop_reason_ is not None
    assert h[0]["feature"] == 0 and h[0]["alpha"] == pytest.approx(0.5 * math.log(3))
    assert h[1]["feature"] == 1
    assert h[1]["alpha"] == pytest.approx(0.5 * math.log((2 + 2 * math.sqrt(3)) / math.sqrt(3)))
    e1 = math.exp(float(rb.stats_.log_loss(rb.scores_))) / 15
    assert e1 == pytest.approx(0.888387, abs=1e-6)
    # signed α (the reference code's rule) goes on to the true minimum .88703...
    rs = RankBoost("coordinate", learner=MatrixRankers(), n_rounds=300)
    rs.fit(H, labels)
    e1s = math.exp(float(rs.stats_.log_loss(rs.scores_))) / 15
    assert e1s == pytest.approx(0.88703, abs=1e-5) and e1s < e1


def _random_dictionary(seed, n=24, J=10):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=gen).to(F64)
    H = (torch.rand(n, J, generator=gen) < 0.4).to(F64)
    return H, labels


@pytest.mark.parametrize("seed", range(3))
def test_rankboost_plus_e2_identities(seed):
    H, labels = _random_dictionary(seed)
    rp = RankBoostPlus(learner=MatrixRankers(), n_rounds=40)
    rp.fit(H, labels)
    h = rp.history_
    prev = 0.0  # ln Ê2 at η = 0
    for d in h:
        assert d["alpha"] == pytest.approx(math.atanh(-d["delta"]))
        # Z_t = √(1 - δ²) (proof of Thm 2): ln Ê2 drops by ½ ln(1 - δ²)
        assert d["loss_e2"] == pytest.approx(prev + 0.5 * math.log(1 - d["delta"] ** 2), abs=1e-10)
        assert d["loss_e2"] <= prev + 1e-12
        prev = d["loss_e2"]
    # Theorem 3: coordinate descent on F_2 -> stationary: all |δ_s| small at the end
    assert abs(h[-1]["delta"]) < 0.05


def test_rankboost_plus_prunes_on_first_dependent_choice():
    H, labels = _random_dictionary(7, n=30, J=4)
    H[:, 1] = H[:, 0] * (1 - H[:, 2])  # make column 3 = column 1 + column 2 dependent in pair space
    H[:, 3] = H[:, 1] + H[:, 2]
    H = H.clamp(0, 1)
    rp = RankBoostPlus(learner=MatrixRankers(), n_rounds=60, seed=3)
    model = rp.fit(H, labels)
    h = rp.history_
    assert any(not d["greedy"] for d in h)  # the first dependent pick switched S to static
    losses = [d["loss_e2"] for d in h]
    assert all(b <= a + 1e-12 for a, b in zip(losses[:-1], losses[1:]))
    assert len(rp.basis_) <= 3  # the pair-space rank of the dictionary
    # the ensemble predicts Σ η_s h_s
    pred = model.predict(H)
    want = sum(e * H[:, c] for e, c in zip(rp.eta_, rp.basis_))
    assert torch.allclose(pred, want, atol=1e-10)


def test_rankboost_plus_perfect_ranker_policy():
    labels = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=F64)
    H = torch.tensor([[1.0], [1.0], [0.0], [0.0]], dtype=F64)
    rp = RankBoostPlus(learner=MatrixRankers(), n_rounds=5)
    model = rp.fit(H, labels)
    assert len(model) == 0 and "perfect" in rp.stop_reason_
    rp = RankBoostPlus(learner=MatrixRankers(), n_rounds=5, on_unbounded="cap", alpha_cap=10.0)
    model = rp.fit(H, labels)
    assert len(model) == 1 and model.weights[0] == pytest.approx(10.0)
