"""Position debiasing: IPW's expected gradient on clicks equals the gradient on relevance
(exhaustive), regression-EM recovers the simulated propensities, fit(position=...) with
each wrapper, and resume = uninterrupted bit for bit with the learned state."""

import itertools

import pytest
import torch

from torchrankboost import Booster, Groups, RegressionTree
from torchrankboost.boosting.checkpoint import Checkpoint
from torchrankboost.clicks import pbm_propensity, relevance_click_prob
from torchrankboost.clicks.debias import (AdditivePositionLoss, IPWLoss, RegressionEMLoss,
                                          em_step, PositionBound)
from torchrankboost.losses import (ExponentialPairwiseLoss, PairwiseHingeLoss, QBRankLoss,
                                   RankNetLoss)
from torchrankboost.parallel import FitComm, get_context

from clicks_data import large_pbm_log, small_click_data

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
