"""The line search and Newton step of :mod:`torchrankboost.boosting.steps`: minimisers of
convex functions, unbounded directions, edge cases."""

import math

import pytest
import torch

from torchrankboost.boosting import line_search, newton_step
import sys
import warnings
from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.boosting.steps import line_search
from torchrankboost.contract import NumericalError
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss

F64 = torch.float64


# ----------------------------------------------------------------------------- line search
@pytest.mark.parametrize("phi,alpha_star", [
    (lambda a: (a - 3.0) ** 2 + 1.0, 3.0),
    (lambda a: 4.0 * (a + 0.25) ** 2, -0.25),                      # descent to the left
    (lambda a: torch.exp(-a) + torch.exp(2 * a - 5), (math.log(0.5) + 5) / 3),
    (lambda a: torch.log(torch.cosh(a - 7.0)), 7.0),
    (lambda a: torch.logaddexp(torch.zeros((), dtype=F64), -2 * a) + 0.01 * a ** 2, None),
    (lambda a: 3.0 * torch.relu(1.5 - a) ** 2 + 0.1 * torch.relu(a - 1.0) ** 2, 9.2 / 6.2),
    (lambda a: torch.abs(a - 7.5), 7.5),                            # no curvature at all
])
@pytest.mark.parametrize("order", [2, 1])
def test_line_search_minimises_convex_functions(phi, alpha_star, order):
    res = line_search(phi, order=order, xtol=1e-9)
    assert res.status == "converged", res
    if alpha_star is None:  # compare with a fine grid (phi is elementwise: vectorised)
        grid = torch.linspace(-10, 10, 2001, dtype=F64)
        a0 = float(grid[phi(grid).argmin()])
        fine = torch.linspace(a0 - 0.02, a0 + 0.02, 40001, dtype=F64)
        alpha_star = float(fine[phi(fine).argmin()])
        assert res.alpha == pytest.approx(alpha_star, abs=2e-6)
    else:
        assert res.alpha == pytest.approx(alpha_star, rel=1e-6, abs=1e-7)
    assert res.value <= res.value0
    assert res.n_evals <= 60


def test_line_search_hypothesis_convex():
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    @hyp.given(st.lists(st.tuples(st.floats(-3, 3), st.floats(-3, 3), st.floats(0.1, 5)),
                        min_size=1, max_size=6),
               st.floats(0.01, 2.0))
    def check(terms, ridge):
        def phi(a):
            out = ridge * a ** 2
            for m, c, w in terms:  # w * softplus(m * a + c): convex
                out = out + w * torch.nn.functional.softplus(m * a + c)
            return out
        res = line_search(phi, xtol=1e-10)
        assert res.status in ("converged", "stationary")
        # derivative at the result vanishes
        a = torch.tensor(res.alpha, dtype=F64, requires_grad=True)
        (d,) = torch.autograd.grad(phi(a), a)
        scale = max(1.0, sum(abs(m) * w for m, _, w in terms) + 2 * ridge * abs(res.alpha))
        assert abs(float(d)) <= 1e-6 * scale

    check()


@pytest.mark.parametrize("phi,sign", [
    (lambda a: torch.exp(-a), 1.0),            # separable: infimum 0 at +inf
    (lambda a: torch.exp(3 * a) + 2.0, -1.0),  # the same to the left
    (lambda a: -a, 1.0),                        # unbounded below
    (lambda a: torch.logaddexp(torch.zeros((), dtype=F64), -a), 1.0),  # logistic, separable
])
def test_line_search_detects_unbounded_direction(phi, sign):
    res = line_search(phi)
    assert res.unbounded and res.status == "unbounded"
    assert math.copysign(1.0, res.alpha) == sign
    assert res.value < res.value0
    res2 = line_search(phi, max_alpha=5.0)
    assert res2.unbounded and abs(res2.alpha) == 5.0


def test_line_search_edge_cases():
    res = line_search(lambda a: (a * 0 + 1.0) * torch.ones((), dtype=F64))
    assert res.status == "stationary" and res.alpha == 0.0
    with pytest.raises(ValueError, match="finite"):
        line_search(lambda a: a * float("nan"))
    with pytest.raises(ValueError, match="max_alpha"):
        line_search(lambda a: a ** 2, max_alpha=-1.0)
    # a wall of non-finite values beyond alpha = 2 is backtracked from
    res = line_search(lambda a: torch.where(a < 2.0, (a - 1.5) ** 2,
                                                torch.full_like(a, float("inf"))))
    assert res.alpha == pytest.approx(1.5) and math.isfinite(res.value)
    alpha, f0, d0, h0 = newton_step(lambda a: (a - 2.0) ** 2)
    assert alpha == pytest.approx(2.0) and d0 == pytest.approx(-4.0) and h0 == pytest.approx(2.0)


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


_TWO_RANKS = """
import inspect, sys, warnings
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
    in_line = any(fr.function == "_line_parts" for fr in inspect.stack(0))
    if s.requires_grad and not in_line:
        grads[0] += 1  # a gradient: the base-score shift, then once a round
    trial = in_line and not bool((s == s[0]).all())
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
