"""The step rules over one step problem (surrogate, line search, Newton, fixed), their
``StepFailed``, and the round's one handling of it (the error, the stop, the capped step)."""

import math
import warnings

import pytest
import torch

import torchrankboost.losses as L
from torchrankboost import Groups
from torchrankboost.boosting import Booster, NumericalError, RegressionTree
from torchrankboost.boosting import booster as booster_module
from torchrankboost.boosting.objective import FitObjective
from torchrankboost.boosting.step_rules import (FixedStep, LineSearchStep, NewtonStep, StepFailed,
                                                StepProblem, StepResult, SurrogateStep,
                                                step_rule)
from torchrankboost.boosting.weights import FitWeights
from torchrankboost.contract import UnboundedDirectionError
from torchrankboost.parallel import FitComm

F64 = torch.float64


def problem(loss, *, f=None, lr=1.0, curvature="diag", seed=0, labels=None):
    """A step problem at random scores along ``f`` (default: the Newton direction -g/h)."""
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes([6] * 8)
    y = labels if labels is not None else torch.randint(0, 3, (48,), generator=gen).to(F64)
    s = torch.randn(48, generator=gen, dtype=F64)
    obj = FitObjective(loss, curvature=curvature, exact_hess_max_n=2048, comm=FitComm(None))
    obj.bind(y, g, weights=FitWeights())
    obj.start(s)
    gr, h, _ = obj.gradient()
    f = -gr / h if f is None else f
    return StepProblem(obj, f, float((gr * f).sum()), float((h * f * f).sum()), lr, 1)


def test_surrogate_step_is_the_quadratic_model_s_minimiser_with_the_fused_gradient():
    p = problem(L.SquaredErrorLoss())
    step = SurrogateStep()(p)
    assert step.alpha == pytest.approx(1.0, abs=1e-12)  # the Newton direction: α = 1
    assert step.info["status"] == "surrogate" and step.info["backtracks"] == 0
    assert step.value == p.objective.evaluate(step.scores).value
    assert step.pending is not None and step.pending.scores is step.scores


def test_surrogate_step_halves_an_overshoot_and_refuses_no_descent():
    p = problem(L.SquaredErrorLoss())
    far = StepProblem(p.objective, p.f, p.gf, p.hff / 1000.0, 1.0, 1)  # curvature too small
    step = SurrogateStep()(far)
    assert step.info["backtracks"] == 9 and step.alpha == 1000.0 / 2 ** 9
    assert step.value <= p.objective.value
    flat = StepProblem(p.objective, p.f, p.gf, 0.0, 1.0, 1)
    none = SurrogateStep()(flat)
    assert none.alpha == 0.0 and none.info["status"] == "no_descent" and none.value is None


def test_newton_and_line_search_find_the_minimiser_of_a_quadratic():
    p = problem(L.SquaredErrorLoss(), lr=1.0)
    newton = NewtonStep()(p)
    search = LineSearchStep(tol=1e-9)(p)
    assert newton.alpha == pytest.approx(1.0, rel=1e-9)
    assert search.alpha == pytest.approx(1.0, rel=1e-6)
    assert newton.info["status"] == "newton" and search.info["status"] == "converged"
    assert newton.value == pytest.approx(p.objective.evaluate(p.objective.scores + p.f).value)
    assert search.scores is None and search.pending is None  # the round moves the scores


def test_line_search_value_is_known_only_at_learning_rate_one():
    p = problem(L.SquaredErrorLoss(), lr=0.5)
    assert LineSearchStep()(p).value is None


def test_line_search_raises_step_failed_on_an_unbounded_direction():
    labels = torch.arange(48, dtype=F64) % 6  # the direction ranks every pair right
    p = problem(L.ExponentialPairwiseLoss(), labels=labels, f=labels.clone())
    with pytest.raises(StepFailed) as info:
        LineSearchStep(max_ratio=10.0)(p)
    exc = info.value
    assert exc.unbounded and exc.capped.alpha > 0
    assert exc.message.startswith("the loss decreases without bound along the weak learner's")


def test_line_search_failure_is_one_step_failed():
    p = problem(L.ExponentialPairwiseLoss())
    bad = StepProblem(p.objective, p.f * float("nan"), p.gf, p.hff, 1.0, 1)
    with pytest.raises(StepFailed, match="^line search failed: ") as info:
        LineSearchStep()(bad)
    assert not info.value.unbounded


def test_fixed_step_fuses_for_a_closed_form_loss_only():
    p = problem(L.ExponentialPairwiseLoss(), lr=0.3)
    step = FixedStep()(p)
    assert step.alpha == 1.0 and step.pending is not None
    assert torch.equal(step.scores, p.objective.scores + 0.3 * p.f)
    assert FixedStep()(problem(L.YetiRankLoss(), lr=0.3)) == StepResult(1.0)

    def plain(s, labels, groups):
        return ((s - labels) ** 2).sum()

    assert FixedStep()(problem(plain)).value is None


def test_step_rule_names():
    assert isinstance(step_rule("line_search", line_search_order=1), LineSearchStep)
    assert step_rule("line_search", line_search_order=1).order == 1
    assert isinstance(step_rule("fixed"), FixedStep)
    with pytest.raises(ValueError, match="step must be one of"):
        step_rule("auto")


# ----------------------------------------------------------------------------- the round's handling
def ranking():
    gen = torch.Generator().manual_seed(1)
    g = Groups.from_sizes([8] * 10)
    X = torch.randn(80, 3, generator=gen)
    y = (X[:, 0] > 0).to(F64) + (X[:, 1] > 0.5).to(F64)
    return X, y, g


def failing_rule(exc):
    def rule(problem):
        raise exc
    return lambda *a, **k: rule


def test_a_numerical_step_failure_is_a_numerical_error_with_the_last_good_model(monkeypatch):
    X, y, g = ranking()
    monkeypatch.setattr(booster_module, "step_rule", failing_rule(StepFailed("it broke")))
    with pytest.raises(NumericalError, match=r"^round 1: it broke$") as info:
        Booster(L.ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3,
                verbose=False).fit(X, y, g)
    assert info.value.round == 1 and info.value.model.n_rounds == 0


@pytest.mark.parametrize("policy", ["raise", "stop", "cap"])
def test_an_unbounded_step_failure_follows_on_unbounded(monkeypatch, policy):
    X, y, g = ranking()
    capped = StepResult(2.0, None, {"status": "unbounded"})
    monkeypatch.setattr(booster_module, "step_rule",
                        failing_rule(StepFailed("no bottom", capped=capped)))
    b = Booster(L.ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=2,
                learning_rate=0.1, on_unbounded=policy, verbose=False)
    if policy == "raise":
        with pytest.raises(UnboundedDirectionError, match="^round 1: no bottom$"):
            b.fit(X, y, g)
    elif policy == "stop":
        with pytest.warns(UserWarning, match="round 1: no bottom; stopping before this round"):
            model = b.fit(X, y, g)
        assert model.n_rounds == 0 and b.stop_reason_ == "round 1: no bottom"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model = b.fit(X, y, g)
        assert model.n_rounds == 2 and all(math.isclose(w, 0.2) for w in model.weights)
