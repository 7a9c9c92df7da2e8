"""Position debiasing (:mod:`torchrankboost.clicks.debias`): IPW's expected gradient on clicks
equals the gradient on relevance (exhaustive), regression-EM and the dual learning algorithm
recover the simulated propensities (DLA also the link), fit(position=...) with each wrapper,
resume = uninterrupted bit for bit with the learned state, the methods are the registry's
(and the debias choices of the estimator and the command line), and debiased fits on 2 gloo
processes (per-position sums all-reduced) equal the one-process fit (to 1e-9: the sums'
order differs).

Two process start-ups cost ~6 s of CPU: the default run checks DLA alone (its per-position
and learned link's sums are the newest); all three methods (~25 s on a loaded machine) run
when ``TORCHRANKBOOST_TEST_CLICKS_DIST=1`` is set.
"""

import argparse
import itertools
import os
import sys
from pathlib import Path

import pytest
import torch

from torchrankboost import Booster, Groups, RegressionTree, registry
from torchrankboost.boosting.checkpoint import Checkpoint
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.clicks import (DEBIAS, DualLearningLoss, make_debias, pbm_propensity,
                                   relevance_click_prob)
from torchrankboost.clicks.debias import (AdditivePositionLoss, IPWLoss, RegressionEMLoss,
                                          dla_step, em_step, PositionBound)
from torchrankboost.losses import (ExponentialPairwiseLoss, PairwiseHingeLoss, QBRankLoss,
                                   RankNetLoss)
from torchrankboost.parallel import FitComm, get_context

import dist_clicks_scenario as S
from clicks_data import large_pbm_log, small_click_data
from dist_helpers import explain, free_port, run_processes, worker_env

F64 = torch.float64


@pytest.mark.parametrize("base", [ExponentialPairwiseLoss(), PairwiseHingeLoss(),
                                  QBRankLoss(), RankNetLoss()], ids=lambda x: type(x).__name__)
def test_ipw_expected_gradient_equals_relevance_gradient(base):
    # one query of 6 documents, 4 shown (positions 1..4), clicks of one PBM session
    pos = torch.tensor([2, 0, 1, 4, 3, 0])
    rho = torch.tensor([0.9, 0.7, 0.2, 0.6, 0.05, 0.3], dtype=F64)
    theta = pbm_propensity(4, 1.3)
    s = torch.tensor([0.3, -0.2, 1.1, 0.4, -0.7, 0.05], dtype=F64)
    groups = Groups.from_sizes([6])
    ipw = IPWLoss(base, theta, clip=0.0)
    shown = torch.nonzero(pos > 0).reshape(-1)
    pc = theta[pos[shown] - 1] * rho[shown]  # click probabilities
    exp_g = torch.zeros(6, dtype=F64)
    for bits in itertools.product([0, 1], repeat=shown.numel()):
        c = torch.zeros(6, dtype=F64)
        c[shown] = torch.tensor(bits, dtype=F64)
        prob = torch.where(c[shown] > 0, pc, 1 - pc).prod()
        g, _ = ipw.bind_position(c, groups, pos).grad_hess(s)
        exp_g += prob * g
    # the same loss on relevance: a_i = ρ_i on the shown documents (propensity 1)
    rel = torch.where(pos > 0, rho, torch.zeros_like(rho))
    g_rel, _ = IPWLoss(base, [1.0] * 4, clip=0.0).bind_position(rel, groups, pos).grad_hess(s)
    # (not torch.testing.assert_close: its first call imports torch.distributed.tensor, ~5 s)
    assert float((exp_g - g_rel).abs().max()) <= 1e-12 + 1e-10 * float(g_rel.abs().max())


def test_regression_em_recovers_propensities():
    y, groups, log = large_pbm_log()
    k = 10
    rho = relevance_click_prob(y)
    score = torch.log(rho / (1 - rho).clamp_min(1e-3))  # a ranker that knows the relevance
    bound = RegressionEMLoss(ExponentialPairwiseLoss()).bind_position(log.ctr(), groups,
                                                                      log.position)
    comm = FitComm(get_context(False))
    for _ in range(60):
        em_step(bound, score, comm, 2)
    err = (bound.theta - pbm_propensity(k, 1.0)).abs().max()
    assert float(err) < 0.03, bound.theta  # stated tolerance: 0.03 on every position


def test_dla_recovers_propensities_and_link():
    y, groups, log = large_pbm_log()
    k = 10
    # a ranker that knows the relevance, on the exponential loss's scale: s = ½ ln ρ (τ = 2)
    score = 0.5 * torch.log(relevance_click_prob(y))
    comm = FitComm(get_context(False))
    for link in ("auto", "learn"):  # auto: the exponential loss's τ = 2; learn: from τ = 1
        bound = DualLearningLoss(ExponentialPairwiseLoss(), link=link).bind_position(
            log.ctr(), groups, log.position)
        for _ in range(30):
            dla_step(bound, score, comm, learn_link=link == "learn")
        err = (bound.theta - pbm_propensity(k, 1.0)).abs().max()
        assert float(err) < 0.01, bound.theta  # stated tolerance: 0.01 on every position
        assert abs(float(bound.extra["link"][0]) - 2.0) < 0.05


def _clicks(G=60, L=12, F=6, seed=0):
    return small_click_data(G, L, F, seed)


def _booster(loss, n_rounds, **kw):
    return Booster(loss, RegressionTree(max_leaves=6), n_rounds=n_rounds, learning_rate=0.3,
                   verbose=False, **kw)


@pytest.mark.parametrize("make", [
    lambda: RegressionEMLoss(ExponentialPairwiseLoss()),
    lambda: AdditivePositionLoss(RankNetLoss()),
    lambda: IPWLoss(ExponentialPairwiseLoss(), pbm_propensity(8, 1.0)),
], ids=["em", "additive", "ipw"])
def test_resume_is_uninterrupted_bit_for_bit(make, tmp_path):
    X, y, groups, log = _clicks()
    ctr = log.ctr()
    full = _booster(make(), 6).fit(X, ctr, groups, position=log.position)
    ck = tmp_path / "ck.trb"
    _booster(make(), 3, callbacks=[Checkpoint(ck, every=3)]).fit(X, ctr, groups,
                                                                 position=log.position)
    resumed = _booster(make(), 6).fit(X, ctr, groups, position=log.position, resume=ck)
    assert torch.equal(full.predict(X), resumed.predict(X))
    assert full.info["position_debias"] == resumed.info["position_debias"]
    # saved with the model, exactly
    path = tmp_path / "m.trb"
    full.save(path)
    from torchrankboost.boosting.ensemble import Ensemble
    assert Ensemble.load(path).info["position_debias"] == full.info["position_debias"]


def test_fit_position_errors_and_state():
    X, y, groups, log = _clicks(G=20)
    with pytest.raises(ValueError, match="position-debiasing loss"):
        _booster(ExponentialPairwiseLoss(), 1).fit(X, log.ctr(), groups, position=log.position)
    with pytest.raises(ValueError, match="click-through rates"):
        _booster(RegressionEMLoss(ExponentialPairwiseLoss()), 1).fit(
            X, log.clicks.to(F64) + 2, groups, position=log.position)
    loss = AdditivePositionLoss(ExponentialPairwiseLoss())
    b = _booster(loss, 3)
    m = b.fit(X, log.ctr(), groups, position=log.position)
    table = [float.fromhex(x) for x in m.info["position_debias"]["position_bias"]]
    assert len(table) == 9 and table[1] == 0.0 and table[8] < 0  # lower positions: fewer clicks
    assert "position_bias_p8" in b.history_[-1].extra
    assert isinstance(loss.bind_position(log.ctr(), groups, log.position), PositionBound)


def _click_log(G=60, L=12, F=6, seed=0):
    X, _, groups, log = small_click_data(G, L, F, seed)
    return X, groups, log


@pytest.mark.parametrize("base", [ExponentialPairwiseLoss(), RankNetLoss()],
                         ids=["exponential", "ranknet"])
def test_dla_resume_is_uninterrupted_bit_for_bit(base, tmp_path):
    X, groups, log = _click_log()
    ctr, pos = log.ctr(), log.position

    def make():
        return DualLearningLoss(base, warmup=1)

    b = _booster(make(), 6)
    full = b.fit(X, ctr, groups, position=pos)
    ck = tmp_path / "ck.trb"
    _booster(make(), 3, callbacks=[Checkpoint(ck, every=3)]).fit(X, ctr, groups, position=pos)
    resumed = _booster(make(), 6).fit(X, ctr, groups, position=pos, resume=ck)
    assert torch.equal(full.predict(X), resumed.predict(X))
    state = full.info["position_debias"]
    assert state == resumed.info["position_debias"] and state["method"] == "dla"
    theta = [float.fromhex(x) for x in state["propensity"]]
    assert theta[0] == 1.0 and theta[-1] < 0.9  # learned: the lower positions less examined
    path = tmp_path / "m.trb"
    full.save(path)
    assert Ensemble.load(path).info["position_debias"] == state
    extra = b.history_[-1].extra  # reported per round (TensorBoard's diagnostics)
    assert "propensity_p8" in extra and "propensity_link" in extra


def test_dla_is_a_debias_choice():
    assert "dla" in DEBIAS
    assert isinstance(make_debias("dla", ExponentialPairwiseLoss()), DualLearningLoss)
    with pytest.raises(ValueError, match="link"):
        DualLearningLoss(ExponentialPairwiseLoss(), link=-1.0)
    from torchrankboost.cli.clicks import add_click_options
    ap = argparse.ArgumentParser()
    add_click_options(ap)
    assert ap.parse_args(["--debias", "dla"]).debias == "dla"


def test_estimator_debias_dla():
    import numpy as np

    from torchrankboost import BoostedRanker
    X, groups, log = _click_log(G=20)
    qid = groups.group_index.numpy()
    m = BoostedRanker(n_rounds=7, debias="dla").fit(X.numpy(), log.ctr().numpy(), qid=qid,
                                                    position=log.position.numpy())
    assert m.model_.info["position_debias"]["method"] == "dla"
    assert np.isfinite(m.predict(X.numpy())).all()


def test_every_debias_method_is_registered_with_its_wrapper():
    """The registry names each method once: its wrapper class carries the same name (saved in
    the model's state), make_debias builds it, and the choices start with "none"."""
    names = registry.names("debias", sort=False)
    assert DEBIAS == ("none", *names) and set(names) == set(registry.names("debias"))
    for name in names:
        cls = registry.lookup("debias", name).resolve()
        assert cls.method == name
        prop = [1.0, 0.5] if cls.takes_propensity else None
        loss = make_debias(name, ExponentialPairwiseLoss(), propensity=prop)
        assert type(loss) is cls
    base = ExponentialPairwiseLoss()
    assert make_debias("none", base) is base
    with pytest.raises(ValueError, match="debias must be one of"):
        make_debias("nope", ExponentialPairwiseLoss())


# ------------------------------------------------------------------ two processes
def _run(tmp_path, methods):
    out = tmp_path / "res.pt"
    port = free_port()
    script = str(Path(__file__).resolve().parent / "dist_clicks_scenario.py")
    cmds = [[sys.executable, script, str(out), ",".join(methods)] for _ in range(2)]
    res = run_processes(cmds, [worker_env(r, 2, port) for r in range(2)], 120.0)
    assert all(r.returncode == 0 for r in res), explain(res)
    got = torch.load(out, weights_only=True)
    X, ctr, groups, pos = S.click_data()
    for method in methods:
        m = S.fit(method, X, ctr, groups, pos, False)
        pred, state = got[method]
        assert float((pred - m.predict(X)).abs().max()) < 1e-9, method
        for key, vals in state.items():
            if key == "method":
                continue
            one = [float.fromhex(x) for x in m.info["position_debias"][key]]
            two = [float.fromhex(x) for x in vals]
            assert max(abs(u - v) for u, v in zip(one, two)) < 1e-9, (method, key)


@pytest.mark.slow
def test_dla_two_processes_equal_one(tmp_path):
    _run(tmp_path, ["dla"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TORCHRANKBOOST_TEST_CLICKS_DIST") != "1",
                    reason="set TORCHRANKBOOST_TEST_CLICKS_DIST=1 (two processes, ~25 s)")
def test_debias_two_processes_equal_one(tmp_path):
    _run(tmp_path, S.METHODS)
