"""The line search and Newton step of :mod:`torchrankboost.boosting.steps`: minimisers of
convex functions, unbounded directions, edge cases."""

import math

import pytest
import torch

from torchrankboost.boosting import line_search, newton_step

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
