"""The dual learning algorithm (DualLearningLoss): recovers the simulated propensities and
the link, resumes bit for bit, and is a debias choice of the estimator and the command line."""

import argparse

import pytest
import torch

from torchrankboost import Booster, RegressionTree
from torchrankboost.boosting.checkpoint import Checkpoint
from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.clicks import (DEBIAS, DualLearningLoss, make_debias, pbm_propensity,
                                   relevance_click_prob)
from torchrankboost.clicks.debias import dla_step
from torchrankboost.losses import ExponentialPairwiseLoss, RankNetLoss
from torchrankboost.parallel import FitComm, get_context

from clicks_data import large_pbm_log, small_click_data

F64 = torch.float64


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
    X, _, groups, log = small_click_data(G, L, F, seed)
    return X, groups, log


def _booster(loss, n_rounds, **kw):
    return Booster(loss, RegressionTree(max_leaves=6), n_rounds=n_rounds, learning_rate=0.3,
                   verbose=False, **kw)


@pytest.mark.parametrize("base", [ExponentialPairwiseLoss(), RankNetLoss()],
                         ids=["exponential", "ranknet"])
def test_dla_resume_is_uninterrupted_bit_for_bit(base, tmp_path):
    X, groups, log = _clicks()
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
    X, groups, log = _clicks(G=20)
    qid = groups.group_index.numpy()
    m = BoostedRanker(n_rounds=7, debias="dla").fit(X.numpy(), log.ctr().numpy(), qid=qid,
                                                    position=log.position.numpy())
    assert m.model_.info["position_debias"]["method"] == "dla"
    assert np.isfinite(m.predict(X.numpy())).all()
