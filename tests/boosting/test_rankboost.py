"""RankBoost (RB-D, RB-C, coordinate descent): statistics kernels vs brute force, the papers'
numbers, halting policies, model round trip."""

import math

import pytest
import torch

from torchrankboost.boosting.learners import FeatureRankers, Stumps
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost._pair_engine.levels import label_pairs
from torchrankboost.boosting.papers import AdaBoost, MatrixRankers, PNormPush, RankBoost
from torchrankboost.boosting.papers.dictionaries import CodesDictionary
from torchrankboost.boosting.papers.pair_stats import make_pair_stats
from torchrankboost.contract import NumericalError, UnboundedDirectionError
from torchrankboost.groups import Groups
from torchrankboost.pairs import Bipartite, ExplicitPairs, Graded
from paper_fixtures import M88, ranking_8x8  # noqa: F401
from paper_fixtures import discrete_fixture as _discrete_fixture

F64 = torch.float64




def brute_pairs(labels, groups, pairs):
    out = []
    off = groups.offsets.tolist()
    for g in range(groups.num_groups):
        for i in range(off[g], off[g + 1]):
            for j in range(off[g], off[g + 1]):
                li, lj = float(labels[i]), float(labels[j])
                if isinstance(pairs, Bipartite):
                    li, lj = float(li > pairs.threshold), float(lj > pairs.threshold)
                if li > lj:
                    out.append((i, j))
    return out


def brute_stats(pl, s, h):
    z = torch.stack([s[j] - s[i] for i, j in pl])  # log pair weights
    d = torch.softmax(z, 0)
    hi = torch.tensor([h[i] for i, _ in pl], dtype=F64)
    lo = torch.tensor([h[j] for _, j in pl], dtype=F64)
    return ((d * hi * (1 - lo)).sum(), (d * (1 - hi) * lo).sum(),
            (d * (hi * lo + (1 - hi) * (1 - lo))).sum(), torch.logsumexp(z, 0))


def random_ragged(seed, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 8, (6,), generator=gen)
    sizes[0] = max(int(sizes[0]), 3)
    g = Groups.from_sizes(sizes)
    n = g.num_docs
    labels = torch.randint(0, 4, (n,), generator=gen).to(F64)
    labels[0], labels[1] = 0.0, 2.0  # at least one pair
    s = (torch.randn(n, generator=gen, dtype=F64) * scale).round(decimals=1)  # ties in scores
    codes = torch.randint(0, 5, (n, 3), generator=gen)  # ties in the feature codes
    return g, labels, s, codes


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["graded", "bipartite", "explicit"])
@pytest.mark.parametrize("scale", [2.0, 400.0])  # 400: the log-domain path
def test_stats_kernels_match_brute_force(seed, kind, scale):
    g, labels, s, codes = random_ragged(seed, scale)
    if kind == "graded":
        spec = Graded()
        pl = brute_pairs(labels, g, spec)
    elif kind == "bipartite":
        spec = Bipartite(1.0)
        pl = brute_pairs(labels, g, spec)
    else:
        pl = brute_pairs(labels, g, Graded())
        pl = pl[::2] + [(j, i) for i, j in pl[1::4]]  # arbitrary (also non-transitive) list
        spec = ExplicitPairs([p[0] for p in pl], [p[1] for p in pl])
    st = make_pair_stats(labels, g, spec)
    assert st.num_pairs == len(pl)
    w = st.weights(s)
    cd = CodesDictionary(codes, torch.ones(3, 4, dtype=torch.bool))
    ep, em, e0 = cd.all_stats(st, w)
    r = cd.edges(st, w)
    for c in range(cd.num_candidates):
        h = cd.column(c)
        bp, bm, b0, blz = brute_stats(pl, s, h)
        tol = 1e-9
        assert abs(float(ep[c]) - float(bp)) < tol
        assert abs(float(em[c]) - float(bm)) < tol
        assert abs(float(e0[c]) - float(b0)) < tol
        assert abs(float(r[c]) - float(bp - bm)) < tol
        cp, cm, c0 = st.chosen_stats(w, h)
        assert abs(float(cp) - float(bp)) < 1e-12 and abs(float(cm) - float(bm)) < 1e-12
        assert abs(float(c0) - float(b0)) < 1e-12
    assert abs(float(w.log_loss) - float(blz)) < 1e-9 * max(1.0, abs(float(blz)))
    assert abs(float(st.log_loss(s)) - float(blz)) < 1e-9 * max(1.0, abs(float(blz)))
    mu = min(float(s[i] - s[j]) for i, j in pl)
    assert float(st.margin(s)) == pytest.approx(mu)


def test_label_pairs_materialisation():
    g, labels, _, _ = random_ragged(3)
    hi, lo, _ = label_pairs(labels, g, Graded())
    assert sorted(zip(hi.tolist(), lo.tolist())) == sorted(brute_pairs(labels, g, Graded()))


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
