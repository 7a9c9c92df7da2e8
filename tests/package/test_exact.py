"""The order-free sum (:mod:`torchrankboost.exact`): ``math.fsum`` bit for bit on adversarial
values, the same for any order of the values and any split of them (over ranks: summed
accumulators, as they travel), NaN/inf by float rules, differentiable."""

import math
import random
import struct
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from torchrankboost import exact as exact_module
from torchrankboost.exact import (WIDTH, ExactSum, accumulate, exact_sum, from_wire,
                                  query_accumulate, query_sums, round_host, round_sum, to_wire)

F64 = torch.float64
TINY, HUGE = 5e-324, 1.7976931348623157e308


def same(a: float, b: float) -> bool:
    """Equal bits (one NaN for every NaN)."""
    return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)


def fsum(xs):
    """``math.fsum`` with float rules where it raises: NaN for inf - inf, None (not
    comparable) for an overflowing intermediate."""
    try:
        return math.fsum(xs)
    except ValueError:
        return float("nan")
    except OverflowError:
        return None


def ours(xs) -> float:
    return float(round_sum(accumulate(torch.tensor(xs, dtype=F64))))


def adversarial(rng: random.Random, n: int):
    """Random bit patterns, subnormals, the extremes, values spread over 2^±60, and exact
    cancellations around them."""
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.15:
            out.append(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
        elif k < 0.3:
            out.append(rng.choice([TINY, -TINY, 2.2250738585072014e-308, HUGE, -HUGE, 1e308,
                                   -1e308, 0.0, -0.0, 1.0, -1.0, 2.0 ** -53]))
        elif k < 0.45:
            out.append(rng.uniform(-1, 1) * 2.0 ** rng.randint(-1074, -1000))
        else:
            out.append(rng.uniform(-1, 1) * 2.0 ** rng.randint(-60, 60))
    if rng.random() < 0.4:  # huge cancellation: the sum is what is left of the small ones
        out = out + [-x for x in out if math.isfinite(x)] + [rng.choice([TINY, 1e-300, 3.0])]
    rng.shuffle(out)
    return out


def test_equals_fsum_on_adversarial_values():
    rng = random.Random(0)
    for trial in range(600):
        xs = adversarial(rng, rng.randint(0, 30))
        if trial % 3:
            xs = [x for x in xs if math.isfinite(x)]
        want = fsum(xs)
        if want is not None:
            assert same(ours(xs), want), xs


def test_rounding_through_python_integers_gives_the_vectorised_bits(monkeypatch):
    """:func:`round_host` (a few CPU accumulators) and the vectorised rounding give the same
    bits on adversarial sums, infinities and NaN, and on accumulators summed over ranks
    (raw limbs, not normalised)."""
    rng = random.Random(5)
    accs = [accumulate(torch.tensor(adversarial(rng, rng.randint(1, 30)), dtype=F64))
            for _ in range(400)]
    accs += [accumulate(torch.tensor([HUGE, HUGE], dtype=F64)),
             accumulate(torch.tensor([float("inf"), 1.0], dtype=F64)),
             accumulate(torch.tensor([float("inf"), float("-inf")], dtype=F64)),
             accumulate(torch.tensor([-0.0, -0.0], dtype=F64))]
    accs += [sum(accs[i:i + 3]) for i in range(0, 60, 3)]  # ranks' raw sums
    a = torch.stack(accs)
    host = round_host(a)
    monkeypatch.setattr(exact_module, "HOST_ROWS", -1)
    vec = round_sum(a)
    assert all(same(x, y) for x, y in zip(host.tolist(), vec.tolist()))


@pytest.mark.parametrize("xs", [
    [1.0, 2.0 ** -53],  # a tie: to even (down)
    [1.0 + 2.0 ** -52, 2.0 ** -53],  # a tie: to even (up)
    [1.0, 2.0 ** -53, TINY],  # just above the tie (the sticky bit far below)
    [-1.0, -(2.0 ** -53), -TINY],
    [2.0 ** 1023, 2.0 ** 1023 * (1 - 2.0 ** -53)],  # rounds to inf
    [HUGE, 2.0 ** 970],  # the tie at the top: to inf
    [HUGE, 2.0 ** 969 + 2.0 ** 900],  # below it: HUGE
    [2.0 ** -1022, -TINY],  # into the subnormals
    [TINY] * 7,
    [1e308, 1e308, -1e308, -1e308, 1e-308, 3.0],
    [1e16, 1.0, -1e16],
    [0.1] * 10,
    [-0.0, -0.0],  # an exact zero is +0.0
    [],
])
def test_the_hard_cases(xs):
    """Against the exact rational sum rounded once (``float(Fraction)``; beyond the range:
    ±inf), which ``math.fsum`` equals where it does not overflow in between."""
    exact = sum((Fraction(x) for x in xs), Fraction(0))
    try:
        want = float(exact)
    except OverflowError:
        want = float("inf") if exact > 0 else float("-inf")
    got = ours(xs)
    assert same(got, want), (xs, got, want)
    if fsum(xs) is not None:
        assert same(got, fsum(xs))


def test_nan_and_infinities_follow_float_rules():
    inf, nan = float("inf"), float("nan")
    assert ours([1.0, inf, 2.0]) == inf and ours([-inf, 5.0]) == -inf
    assert math.isnan(ours([inf, -inf])) and math.isnan(ours([nan, 1.0]))
    assert math.isnan(ours([-nan, inf]))
    assert ours([HUGE, HUGE]) == inf and ours([-HUGE, -HUGE]) == -inf  # beyond the range


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), max_size=40),
       st.randoms(use_true_random=False))
def test_any_order_and_any_split_give_the_same_bits(xs, rnd):
    """Shuffled, or cut into parts accumulated apart and summed as they travel between ranks
    (float64 digits): the same float, the correctly rounded sum."""
    want = ours(xs)
    ys = list(xs)
    rnd.shuffle(ys)
    assert same(ours(ys), want)
    cuts = sorted(rnd.randint(0, len(ys)) for _ in range(rnd.randint(0, 4)))
    parts = [ys[a:b] for a, b in zip([0] + cuts, cuts + [len(ys)])]
    wire = sum(to_wire(accumulate(torch.tensor(p, dtype=F64))) for p in parts)
    if isinstance(wire, int):  # no parts
        wire = torch.zeros(WIDTH, dtype=F64)
    assert same(float(round_sum(from_wire(wire))), want)
    ref = fsum(xs)
    if ref is not None:
        assert same(want, ref)


def test_rows_and_index_sum_apart():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 17, generator=gen, dtype=F64) * 1e10
    rows = round_sum(accumulate(x))
    assert [float(v) for v in rows] == [math.fsum(r.tolist()) for r in x]
    idx = torch.randint(0, 4, (85,), generator=gen)
    by = round_sum(accumulate(x.reshape(-1), idx, 4))
    assert [float(v) for v in by] == [math.fsum(x.reshape(-1)[idx == k].tolist())
                                      for k in range(4)]


def test_query_sums_add_each_query_in_row_order():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(40, generator=gen, dtype=F64) * torch.logspace(-8, 8, 40, dtype=F64)
    off = torch.tensor([0, 5, 5, 23, 40])
    per = query_sums(x, off)
    for q in range(4):
        t = 0.0
        for v in x[off[q]:off[q + 1]].tolist():
            t += v
        assert same(float(per[q]), t)
    assert query_sums(torch.stack([x, -x]), off).shape == (2, 4)
    assert same(float(round_sum(query_accumulate(x, off))), math.fsum(per.tolist()))


def test_exact_sum_is_differentiable_twice():
    x = torch.randn(7, dtype=F64, requires_grad=True)
    y = exact_sum(x * x)
    assert same(float(y.detach()), math.fsum((x * x).detach().tolist()))
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    assert torch.equal(g, 2 * x)
    (h,) = torch.autograd.grad(g.sum(), x)
    assert torch.equal(h, torch.full_like(x, 2.0))
    assert exact_sum(torch.ones(2, 3, dtype=F64)).tolist() == [3.0, 3.0]
    assert ExactSum.apply(torch.ones(4, dtype=torch.float32)).dtype == torch.float32


def test_no_python_loop_over_values_and_the_limit():
    with pytest.raises(ValueError, match="1-D or 2-D"):
        accumulate(torch.zeros(2, 2, 2, dtype=F64))
