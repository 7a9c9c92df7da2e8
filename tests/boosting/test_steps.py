"""The step rules (``boosting/steps.py``): numerical failures are failures, not convergence —
a loss that turns NaN at a trial step of the line search (or of the surrogate/Newton
backtracking) is a ``NumericalError`` that keeps the last good round, on one process and on
every rank of two."""

import sys
import warnings

import pytest
import torch

from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.boosting.steps import line_search
from torchrankboost.contract import NumericalError
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


class NaNOffTheCurrentScores(torch.nn.Module):
    """The exponential pairwise loss, NaN at any scores but the current ones (and constant
    scores: the base score) from round ``bad`` on: finite where the driver stands, NaN at
    every trial step."""

    def __init__(self, bad):
        super().__init__()
        self.bad, self.rounds, self.current = bad, 0, None

    def forward(self, s, labels, groups=None):
        v = ExponentialPairwiseLoss()(s, labels, groups)
        here = bool((s == s[0]).all()) or (self.current is not None
                                           and torch.equal(s.detach(), self.current))
        if self.rounds + 1 >= self.bad and not here:
            return v * float("nan")
        return v

    def on_round_end(self, ranker, record):  # also the callback that tracks the scores
        self.rounds = record.round
        self.current = ranker.scores_.detach().clone()


def _fit(step, bad, n_rounds=6):
    X, y, g = _data()
    loss = NaNOffTheCurrentScores(bad)
    b = Booster(loss, RegressionTree(max_leaves=4), n_rounds=n_rounds, step=step,
                curvature="none", learning_rate=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NumericalError) as info:
            b.fit(X, y, g, callbacks=[loss])
    return b, info.value


@pytest.mark.parametrize("step", ["line_search", "surrogate", "newton"])
def test_nan_loss_inside_the_step_search_is_a_numerical_error_keeping_the_last_good_round(step):
    b, exc = _fit(step, bad=3)
    assert "NaN" in str(exc) and "converged" not in str(exc)
    assert "converged" not in (b.stop_reason_ or "")
    assert b.model_ is not None and b.model_.n_rounds == 2
    assert b.model_.info["partial"] is True and exc.model is not None


def test_nan_loss_in_the_first_round_search_is_an_error_not_a_zero_round_model():
    b, exc = _fit("line_search", bad=1)
    assert "round 1" in str(exc) and "NaN" in str(exc)
    assert b.model_ is None and "converged" not in (b.stop_reason_ or "")


def test_line_search_refuses_a_nan_phi_at_a_trial_point_but_backtracks_from_inf():
    def nan_beyond(a):
        a = float(a)
        return (a - 1.0) ** 2 if a < 0.5 else float("nan"), 2 * (a - 1.0), 2.0

    with pytest.raises(NumericalError, match="NaN at step"):
        line_search(evaluate=nan_beyond)

    def inf_beyond(a):
        a = float(a)
        return ((a - 1.0) ** 2, 2 * (a - 1.0), 2.0) if a < 3 else (float("inf"),) * 3

    res = line_search(evaluate=inf_beyond, alpha0=8.0, order=1)
    assert res.status == "converged" and abs(res.alpha - 1.0) < 1e-4


# ---------------------------------------------------------------- across ranks
_TWO_RANKS = """
import sys, warnings
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=30))
torch.set_num_threads(1)
from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.contract import NumericalError
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss
from torchrankboost.parallel import get_context

ctx = get_context()
tr = make_letor(20, 10, 5, n_grades=3, seed=0).shard(ctx.rank, ctx.world_size)
grads = [0]

def loss(s, labels, groups=None):  # NaN on rank 1 at trial steps from round 3 on
    v = ExponentialPairwiseLoss()(s, labels, groups)
    if s.requires_grad and s.grad_fn is None:
        grads[0] += 1  # a gradient: the base-score shift, then once a round
    trial = s.grad_fn is not None and not bool((s == s[0]).all())
    return v * float("nan") if ctx.rank == 1 and grads[0] >= 4 and trial else v

b = Booster(loss, RegressionTree(max_leaves=4), n_rounds=6, curvature="none", step="line_search")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        b.fit(tr.X, tr.labels, tr.groups)
        print("no error", b.stop_reason_)
    except NumericalError as exc:
        print("NumericalError", exc.round, b.model_.n_rounds, b.model_.info["partial"], exc)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_nan_loss_inside_the_line_search_on_one_rank_is_a_numerical_error_on_every_rank():
    from dist_helpers import free_port, run_processes, worker_env

    port = free_port()
    results = run_processes([[sys.executable, "-c", _TWO_RANKS]] * 2,
                            [worker_env(r, 2, port) for r in range(2)], timeout=120)
    for r in results:
        assert r.returncode == 0, r.err[-2000:]
        assert r.out.startswith("NumericalError 3 2 True round 3:"), (r.out, r.err[-1000:])
        assert "NaN" in r.out and "converged" not in r.out
