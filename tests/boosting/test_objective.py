"""The fit objective: the loss's capabilities asked once, the bound loss, the value, gradient
and curvature at the fit's scores, the pending fused gradient handed to the next round, the
per-round draws and debiasing, and the checkpoint state."""

import warnings

import pytest
import torch

import torchrankboost.losses as L
from torchrankboost import Groups
from torchrankboost.boosting.objective import DEBIAS_KEY, FitObjective, LossCapabilities
from torchrankboost.boosting.weights import FitWeights, fit_weights
from torchrankboost.clicks import pbm_propensity
from torchrankboost.clicks.debias import IPWLoss, RegressionEMLoss
from torchrankboost.parallel import FitComm
from torchrankboost import Groups, RankSVM
from torchrankboost.cli import main

F64 = torch.float64


def problem(G=8, size=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes([size] * G)
    y = torch.randint(0, 3, (g.num_docs,), generator=gen).to(F64)
    s = torch.randn(g.num_docs, generator=gen, dtype=F64)
    return y, g, s


def objective(loss, y, g, *, curvature="diag", weights=None, position=None, limit=2048):
    obj = FitObjective(loss, curvature=curvature, exact_hess_max_n=limit, comm=FitComm(None))
    obj.bind(y, g, weights=weights or FitWeights(), position=position)
    obj.agree_probes(torch.tensor([obj.local_probes(g.num_docs, g)], dtype=F64))
    return obj


def listnet(scores, labels, groups):
    p = groups.segment_softmax(labels.to(scores.dtype))
    return -(p * torch.log(groups.segment_softmax(scores))).sum()


# ----------------------------------------------------------------------------- capabilities
def test_capabilities_are_the_loss_hooks():
    exp = LossCapabilities.of(L.ExponentialPairwiseLoss())
    assert exp.grad_hess and exp.binds and exp.per_query and not exp.debiases
    assert exp.preferred_step == "surrogate" and exp.reduction == "sum"
    assert exp.resample is None and exp.position_update is None
    assert LossCapabilities.of(L.LambdaLoss()).preferred_step == "fixed"
    assert LossCapabilities.of(L.AdaBoostLoss()).diagnostics is not None
    plain = LossCapabilities.of(listnet)
    assert not (plain.grad_hess or plain.binds or plain.per_query or plain.debiases)
    ipw = LossCapabilities.of(IPWLoss(L.ExponentialPairwiseLoss(), pbm_propensity(4)))
    assert ipw.debiases


def test_bound_hooks_are_found_on_the_bound_loss():
    y, g, _ = problem()
    yeti = objective(L.YetiRankLoss(), y, g)
    assert yeti.caps.resample is not None and yeti.caps.position_update is None
    exp = objective(L.ExponentialPairwiseLoss(), y, g)
    assert exp.caps.resample is None


# ----------------------------------------------------------------------------- binding
def test_bind_refuses_weights_and_positions_the_loss_cannot_take():
    y, g, _ = problem()
    fw = fit_weights(torch.rand(g.num_docs, dtype=F64) + 0.5, None, g)
    with pytest.raises(ValueError, match="plain callable loss takes no weights"):
        objective(listnet, y, g, weights=fw)
    with pytest.raises(ValueError, match="position-debiasing loss"):
        objective(L.ExponentialPairwiseLoss(), y, g, position=torch.ones(g.num_docs).long())
    w = objective(L.ExponentialPairwiseLoss(), y, g, weights=fw)
    ref = L.ExponentialPairwiseLoss().bind(y, g, weights=fw.sample).value(torch.zeros(g.num_docs,
                                                                                     dtype=F64))
    assert float(w.bound.value(torch.zeros(g.num_docs, dtype=F64))) == float(ref)


def test_start_refuses_a_pairwise_loss_without_pairs():
    g = Groups.from_sizes([4, 4])
    obj = objective(L.ExponentialPairwiseLoss(), torch.ones(8, dtype=F64), g)
    with pytest.raises(ValueError, match="no crucial pairs"):
        obj.start(torch.zeros(8, dtype=F64))


# ----------------------------------------------------------------------------- value, gradient
def test_value_and_gradient_are_the_bound_loss_s():
    y, g, s = problem()
    loss = L.ExponentialPairwiseLoss()
    obj = objective(loss, y, g, curvature="bound")
    bound = loss.bind(y, g)
    assert obj.start(s) == float(bound.value(s)) == obj.value
    gr, h, kind = obj.gradient()
    rg, rh = bound.grad_hess(s, hess="bound")
    assert kind == "bound" and torch.equal(gr, rg) and torch.equal(h, rh)
    assert obj.evaluate(s + 1.0).value == float(bound.value(s + 1.0))


def test_fused_evaluation_is_the_next_round_s_gradient():
    y, g, s = problem()
    obj = objective(L.ExponentialPairwiseLoss(), y, g)
    obj.start(s)
    obj.gradient()
    s_new = s + 0.1
    ev = obj.evaluate(s_new, fused=True)
    assert ev.pending is not None and ev.pending.scores is s_new and ev.pending.kind == "diag"
    obj.move_to(s_new, ev.value, ev.pending)
    assert obj.checkpoint_state()["fused"] is True
    gr, h, _ = obj.gradient()
    assert gr is ev.pending.g and h is ev.pending.h  # reused, not computed again
    assert obj.checkpoint_state()["fused"] is False  # used up
    gr2, _, _ = obj.gradient()  # computed at the scores: the same numbers
    assert gr2 is not gr and torch.equal(gr2, gr)


def test_pending_at_other_scores_is_not_used():
    y, g, s = problem()
    obj = objective(L.ExponentialPairwiseLoss(), y, g)
    obj.start(s)
    ev = obj.evaluate(s + 0.1, fused=True)
    obj.move_to((s + 0.1).clone(), ev.value, ev.pending)  # equal values, another tensor
    gr, _, _ = obj.gradient()
    assert gr is not ev.pending.g


def test_checkpoint_state_restores_the_value_and_the_fused_call():
    y, g, s = problem()
    obj = objective(L.ExponentialPairwiseLoss(), y, g)
    obj.start(s)
    ev = obj.evaluate(s - 0.2, fused=True)
    obj.move_to(s - 0.2, ev.value, ev.pending)
    state = obj.checkpoint_state()
    other = objective(L.ExponentialPairwiseLoss(), y, g)
    other.start(s - 0.2)
    other.restore(state)
    assert other.value == ev.value and other.checkpoint_state() == state
    gr, h, _ = other.gradient()
    assert torch.equal(gr, ev.pending.g) and torch.equal(h, ev.pending.h)


def test_autograd_curvature_and_the_unit_fallback_warning_once():
    y, g, s = problem()
    obj = objective(listnet, y, g)
    obj.start(s)
    assert obj.gradient()[2] == "autograd-diag"
    small = objective(listnet, y, g, limit=3)
    small.start(s)
    with pytest.warns(UserWarning, match="exact_hess_max_n = 3"):
        _, h, kind = small.gradient()
    assert kind == "unit" and bool((h == 1).all())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small.gradient()  # warned once per fit
    none = objective(listnet, y, g, curvature="none")
    none.start(s)
    assert none.gradient()[2] == "none"


def test_constant_minimiser_is_the_mean_label_for_the_squared_error():
    y, g, _ = problem()
    obj = objective(L.SquaredErrorLoss(), y, g)
    c = obj.constant_minimiser(g.num_docs, None, max_ratio=100.0)
    assert c == pytest.approx(float(y.mean()), rel=1e-6)


def test_round_diagnostics_come_from_the_loss():
    y, g, s = problem()
    obj = objective(L.AdaBoostLoss(), (y > 0).to(F64), g)
    obj.start(s)
    assert obj.round_diagnostics()
    plain = objective(L.ExponentialPairwiseLoss(), y, g)
    plain.start(s)
    assert plain.round_diagnostics() == {}


# ----------------------------------------------------------------------------- between rounds
def test_a_resampling_loss_redraws_and_fuses_at_the_round_start():
    y, g, s = problem()
    loss = L.YetiRankLoss(seed=3)
    obj = objective(loss, y, g)
    obj.start(s)
    obj.begin_round(2)
    ref = loss.bind(y, g)
    loss.resample(ref, s, round=2)
    assert obj.value == pytest.approx(float(ref.value(s)), rel=1e-12)
    assert obj.checkpoint_state()["fused"] is True
    gr, _, _ = obj.gradient()
    assert torch.allclose(gr, ref.grad_hess(s)[0], rtol=0, atol=1e-12)
    assert obj.model_info() == {}


def test_a_debiasing_loss_updates_between_rounds_and_keeps_its_state():
    y, g, s = problem(G=10)
    clicks = (y > 1).to(F64)
    position = (g.position + 1).long()
    loss = RegressionEMLoss(L.ExponentialPairwiseLoss())
    obj = objective(loss, clicks, g, position=position)
    obj.start(s)
    v0 = obj.value
    obj.begin_round(1)
    assert obj.value != v0 and obj.checkpoint_state()["fused"] is True
    info = obj.model_info()
    assert info[DEBIAS_KEY]["method"] == "em"
    again = FitObjective(loss, curvature="diag", exact_hess_max_n=2048, comm=FitComm(None))
    again.bind(clicks, g, weights=FitWeights(), position=position, continued=info)
    assert again.bound.state() == info[DEBIAS_KEY]


def _no_pairs():
    X = torch.tensor([[0.1, 3.0], [0.3, 1.0], [0.2, 1.0], [0.5, 1.0]])
    return X, torch.tensor([1.0, 1.0, 0.0, 0.0]), Groups.from_sizes(torch.tensor([2, 2]))


def test_fit_without_a_crucial_pair_is_refused():
    from torchrankboost import make_ranker

    X, y, g = _no_pairs()
    for ranker in (make_ranker("boost", n_rounds=3), RankSVM()):
        with pytest.raises(ValueError, match="no crucial pairs .*nothing to learn"):
            ranker.fit(X, y, g)
    # a pointwise loss still learns from such data
    make_ranker("gbt", n_rounds=2).fit(X, y, g)


def test_train_command_without_a_crucial_pair_is_one_line_status_2(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "flat.txt"
    p.write_text("1 qid:1 1:0.1 2:3\n1 qid:1 1:0.3 2:1\n0 qid:2 1:0.2 2:1\n0 qid:2 1:0.5 2:1\n")
    assert main(["train", "--data", str(p), "--rounds", "3", "--no-tensorboard",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no crucial pairs" in err[0], err
