"""RankBoost (RB-D, RB-C, coordinate descent): the papers' numbers, halting policies, model
round trip; smooth margin ranking (Rudin & Schapire 2009 §4: eq. 12, Theorem 7, the 8x8
example). The pair statistics under them: ``test_pair_stats.py``."""

import math

import pytest
import torch

from torchrankboost.boosting.learners import FeatureRankers, Stumps
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.boosting.papers import (AdaBoost, MatrixRankers, PNormPush, RankBoost,
                                          SmoothMarginRanking)
from torchrankboost.boosting.papers.rankboost import smooth_margin_alpha
from torchrankboost.contract import NumericalError, UnboundedDirectionError
from torchrankboost.pairs import ExplicitPairs

from paper_fixtures import discrete_fixture as _discrete_fixture
from paper_fixtures import random_ragged, ranking_8x8

F64 = torch.float64


def test_8x8_rankboost_margin_tends_to_one_third():
    H, y, g = ranking_8x8()
    rb = RankBoost("rb-d", learner=MatrixRankers(), n_rounds=10_000, pairs="bipartite",
                   track_margin=True)
    rb.fit(H, y, g)
    mus = [d["margin"] for d in rb.history_]
    assert len(mus) == 10_000 and rb.stop_reason_ is None
    assert max(mus) <= 1 / 3 + 1e-9  # stays at or below 1/3 ...
    # Rudin, Daubechies & Schapire (2004)'s 8x8 example: 0.32482 / 0.33248 / 0.33325 at
    # T = 100 / 1000 / 10000
    assert mus[99] == pytest.approx(0.32482, abs=5e-6)
    assert mus[999] == pytest.approx(0.33248, abs=5e-6)
    assert mus[-1] == pytest.approx(0.33325, abs=5e-6)  # ... and tends to it
    # F̃ underflows in float64 long before (2e-104 at T = 1000); the log-space loss goes on
    assert rb.history_[999]["loss"] < -230 and rb.history_[-1]["loss"] < -2000


def test_rules_differ_coordinate_vs_rankboost():
    """A worked example, A = (.5, .3, .2), B = (.2, .02, .78) as (ε⁺, ε⁻, ε⁰): coordinate
    descent picks A (larger edge), RankBoost's rule (5) (Rudin & Schapire 2009) picks B
    (smaller Z)."""
    P = 100
    hi = torch.arange(P) * 2
    lo = hi + 1
    H = torch.zeros(2 * P, 2, dtype=F64)
    # ranker A: 50 correct, 30 reversed, 20 tied; ranker B: 20 correct, 2 reversed, 78 tied
    H[hi[:50], 0] = 1
    H[lo[50:80], 0] = 1
    H[hi[:20], 1] = 1
    H[lo[20:22], 1] = 1
    pairs = ExplicitPairs(hi, lo)
    cd = RankBoost("coordinate", learner=MatrixRankers(), n_rounds=1, pairs=pairs)
    cd.fit(H, None)
    rd = RankBoost("rb-d", learner=MatrixRankers(), n_rounds=1, pairs=pairs)
    rd.fit(H, None)
    assert cd.history_[0]["feature"] == 0 and rd.history_[0]["feature"] == 1
    a, b = cd.history_[0], rd.history_[0]
    assert (a["eps_plus"], a["eps_minus"], a["eps_zero"]) == pytest.approx((0.5, 0.3, 0.2))
    assert b["Z"] == pytest.approx(0.90649, abs=1e-5)
    assert a["Z"] == pytest.approx(0.97460, abs=1e-5)


def test_rankboost_reaches_closed_form_minimum_T5():
    X, y = _discrete_fixture()
    rb = RankBoost("rb-d", learner=Stumps(max_thresholds=16), n_rounds=1000, pairs="bipartite")
    model = rb.fit(X, y)
    lz = float(rb.stats_.log_loss(rb.scores_))
    assert lz == pytest.approx(math.log(1848.415982977015), abs=1e-9)
    s_star = torch.tensor([-0.804719, -0.549306, -0.168236, -0.346574, 0.346574, 0.0,
                           0.549306, 0.895880], dtype=F64)
    sv = model.predict(torch.arange(8, dtype=torch.float32)[:, None])
    d = sv - s_star
    assert float((d - d.mean()).abs().max()) < 1e-5  # scores match s* up to a constant
    # training scores of the model equal the booster's accumulated scores
    assert torch.allclose(model.predict(X), rb.scores_, atol=1e-12)


@pytest.mark.parametrize("variant", ["rb-d", "coordinate"])
def test_loss_recursion_T11(variant):
    """ln F̃(λ_{t+1}) = ln F̃(λ_t) + ln Z_t with Z_t = ε⁰ + ε⁺e^{-α} + ε⁻e^{α}."""
    g, labels, _, _ = random_ragged(5)
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(g.num_docs, 4, generator=gen)
    rb = RankBoost(variant, learner=Stumps(max_thresholds=8), n_rounds=15)
    rb.fit(X, labels, g)
    h = rb.history_
    for a, b in zip(h[:-1], h[1:]):
        assert b["loss_before"] == pytest.approx(a["loss_before"] + math.log(a["Z"]), abs=1e-10)
        assert a["loss"] == pytest.approx(b["loss_before"], abs=1e-10)
        assert a["Z"] == pytest.approx(1 - (math.sqrt(a["eps_plus"]) - math.sqrt(a["eps_minus"])) ** 2, abs=1e-12)


def test_rbc_alpha_and_real_valued_rankers():
    g, labels, _, _ = random_ragged(2)
    gen = torch.Generator().manual_seed(1)
    X = torch.randn(g.num_docs, 5, generator=gen, dtype=F64)
    rb = RankBoost("rb-c", learner=Stumps(max_thresholds=6), n_rounds=10)
    rb.fit(X, labels, g)
    for d in rb.history_:
        assert d["alpha"] == pytest.approx(math.atanh(d["r"]))
        assert d["r"] == pytest.approx(d["eps_plus"] - d["eps_minus"])
    # coordinate descent with real-valued rankers: exact line search => derivative 0 after step
    rc = RankBoost("coordinate", learner=FeatureRankers(), n_rounds=6)
    rc.fit(X, labels, g)
    losses = [d["loss"] for d in rc.history_]
    assert all(b <= a + 1e-12 for a, b in zip(losses[:-1], losses[1:]))
    with pytest.raises(ValueError, match="binary"):
        RankBoost("rb-d", learner=FeatureRankers(), n_rounds=2).fit(X, labels, g)


def _lemma1_data(n):
    """Connamacher et al. Lemma 1: red a_1..a_{n+1} above blue b_1..b_{n+1}; h1 gets n² pairs
    right, 1 reversed, 2n tied; h2 n+1 right, none reversed."""
    m = n + 1
    a = torch.arange(m)
    X = torch.zeros(2 * m, 2, dtype=F64)
    X[a[:n], 0] = 1  # h1: a_1..a_n up, plus b_{n+1}
    X[m + n, 0] = 1
    X[n, 1] = 1  # h2: a_{n+1} up only
    y = torch.tensor([1.0] * m + [0.0] * m, dtype=F64)
    return X, y


@pytest.mark.parametrize("policy", ["stop", "cap", "smooth", "raise"])
def test_rbd_undefined_step_policies(policy):
    X, y = _lemma1_data(4)
    rb = RankBoost("coordinate", learner=MatrixRankers(), n_rounds=5, pairs="bipartite",
                   on_unbounded=policy, alpha_cap=20.0)
    if policy == "raise":
        with pytest.raises(UnboundedDirectionError, match="eps_minus = 0") as ei:
            rb.fit(X, y)
        # a NumericalError (an ArithmeticError) with the round and the model before it
        assert isinstance(ei.value, NumericalError) and isinstance(ei.value, ArithmeticError)
        assert ei.value.round == 2 and len(ei.value.model) == 1
        return
    model = rb.fit(X, y)
    h = rb.history_
    assert h[0]["feature"] == 0 and h[0]["alpha"] == pytest.approx(math.log(4))
    if policy == "stop":  # Remedy 1: halt before appending h2
        assert len(model) == 1 and "eps_minus = 0" in rb.stop_reason_
    elif policy == "cap":  # finite "infinity", then stop
        assert len(model) == 2 and model.weights[1] == pytest.approx(20.0)
        assert rb.stop_reason_ is not None
    else:  # smoothing: finite steps, keeps going
        assert len(model) >= 2 and all(math.isfinite(w) for w in model.weights)


def test_model_roundtrip_and_callbacks(tmp_path):
    g, labels, _, _ = random_ragged(4)
    gen = torch.Generator().manual_seed(3)
    X = torch.randn(g.num_docs, 3, generator=gen)

    class CB:
        def __init__(self):
            self.events = []

        def on_fit_start(self, b, info):
            self.events.append(("start", info["n_docs"]))

        def on_round_end(self, b, record):
            t = record.round
            assert record["round"] == t and record.step == record["alpha"] == record.weight
            self.events.append(t)
            return t == 5  # stop after 5 rounds

        def on_fit_end(self, b, ensemble):
            self.events.append(("end", len(ensemble)))

    cb = CB()
    rb = RankBoost("rb-c", learner=Stumps(max_thresholds=4), n_rounds=20, callbacks=[cb])
    model = rb.fit(X, labels, g)
    assert cb.events == [("start", g.num_docs), 1, 2, 3, 4, 5, ("end", 5)]
    assert isinstance(model, Ensemble) and len(model) == 5
    p = tmp_path / "rb.safetensors"
    model.save(p)
    again = Ensemble.load(p)
    assert torch.equal(again.predict(X), model.predict(X))
    assert torch.allclose(model.predict(X), rb.scores_, atol=1e-12)


def test_bad_arguments():
    with pytest.raises(ValueError, match="variant"):
        RankBoost("rb-x")
    with pytest.raises(ValueError, match="on_unbounded"):
        RankBoost("rb-c", on_unbounded="ignore")
    with pytest.raises(ValueError, match="on_unbounded"):
        PNormPush(on_unbounded="smooth")  # smoothing is RankBoost's only
    with pytest.raises(ValueError, match="n_rounds"):
        RankBoost("rb-c", n_rounds=-1)
    X = torch.randn(4, 2)
    with pytest.raises(ValueError, match="labels"):
        RankBoost("rb-c").fit(X, torch.zeros(3))
    with pytest.raises(ValueError, match="no crucial pairs"):
        RankBoost("rb-c").fit(X, torch.zeros(4))
    with pytest.raises(ValueError, match="rankers"):
        RankBoost("rb-c", learner="stumps").fit(X, torch.tensor([0.0, 1, 0, 1]))


def test_removed_keyword_names_are_rejected():
    """The old names ``rankers=`` and ``on_undefined=`` are gone: unknown keywords."""
    with pytest.raises(TypeError, match="rankers"):
        RankBoost("rb-c", rankers=Stumps(max_thresholds=4))
    with pytest.raises(TypeError, match="on_undefined"):
        AdaBoost(on_undefined="cap")
    rb = RankBoost("rb-c", learner=Stumps(max_thresholds=4))
    assert not hasattr(rb, "rankers") and not hasattr(rb, "on_undefined")


@pytest.mark.parametrize("name", ["rankboost", "adaboost", "qbrank"])
def test_registry_lists_only_current_parameter_names(name):
    """An unknown parameter's message lists the current names; the removed old names are
    unknown parameters too."""
    from torchrankboost import registry

    with pytest.raises(ValueError, match="valid parameters: ") as err:
        registry.create("algorithm", name, no_such_parameter=1)
    valid = str(err.value).split("valid parameters: ", 1)[1].split(", ")
    assert not {"rankers", "on_undefined", "shrinkage"} & set(valid)
    assert ("learning_rate" if name == "qbrank" else "learner") in valid
    with pytest.raises(ValueError, match="unknown parameter"):
        registry.create("algorithm", name, **({"shrinkage": 0.2} if name == "qbrank" else {"on_undefined": "cap"}))


def test_driver_callbacks_work_unchanged():
    """The driver's HistoryCallback (same contract) records the RankBoost family's rounds."""
    from torchrankboost.boosting.callbacks import HistoryCallback

    g, labels, _, _ = random_ragged(6)
    X = torch.randn(g.num_docs, 3, generator=torch.Generator().manual_seed(0))
    hc = HistoryCallback()
    model = RankBoost("rb-c", learner=Stumps(max_thresholds=5), n_rounds=6, callbacks=[hc]).fit(X, labels, g)
    assert hc.info["algorithm"] == "rankboost" and hc.model is model
    assert [d["round"] for d in hc.rounds] == list(range(1, len(model) + 1))
    assert all(b["loss"] <= b["loss_before"] + 1e-12 for b in hc.rounds)


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
