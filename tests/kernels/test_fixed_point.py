"""The fixed point of the histogram learners (kernels/fixed_point.py): the documented precision
(every value within 2^-K of its channel's maximum, K = 62 - ceil(log2 N); leaf values within
that order of the float64 path's), the scales agreed over ranks (the fixed point of a shard
is the shard of the fixed point), the fit's rows alone setting the scales, round half to
even, and one-line errors."""

import math

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree
from torchrankboost.kernels.fixed_point import fraction_bits, quantize


def test_fraction_bits_keep_every_sum_below_2_62():
    assert [fraction_bits(n) for n in (0, 1, 2, 3, 4, 5, 1000, 1 << 20, (1 << 20) + 1)] == \
        [62, 62, 61, 60, 60, 59, 52, 42, 41]
    for n in (1, 3, 1000, 123457):
        assert n * 2 ** fraction_bits(n) <= 2 ** 62
    for bad in (-1, 1.5, True, 1 << 61):
        with pytest.raises(ValueError, match="num_rows"):
            fraction_bits(bad)


@pytest.mark.parametrize("scale", [1e-30, 1.0, 3e5])
def test_every_value_and_sum_is_within_the_documented_bound(device, scale):
    g = torch.Generator().manual_seed(0)
    n = 3000
    x = torch.randn(n, 2, generator=g, dtype=torch.float64) * scale
    x[:, 1] = x[:, 1].abs()
    fp = quantize(x.to(device), num_rows=n)
    assert fp.q.dtype == torch.int64 and fp.q.shape == (n, 2) and fp.q.is_contiguous()
    assert fp.shift.dtype == torch.int64 and fp.scale.dtype == torch.float64
    assert torch.equal(fp.scale, torch.ldexp(torch.ones(2, dtype=torch.float64, device=device),
                                             -fp.shift))  # exactly 2^-shift
    K = fraction_bits(n)
    M = x.abs().amax(0)
    back = fp.to_float(fp.q).cpu()
    assert bool(((back - x).abs() <= M * 2.0 ** -K).all())
    for c in range(2):  # a sum of n values: within n·2^-K·M of the exact sum
        exact = math.fsum(x[:, c].tolist())
        got = float(fp.to_float(fp.q[:, c].sum(), c))
        assert abs(got - exact) <= n * 2.0 ** -K * float(M[c]) + abs(exact) * 2.0 ** -52


def test_leaf_values_are_the_float64_leaf_values_to_2_pow_minus_k():
    """A tree's leaf values G / (H + λ) from the integer sums differ from the exact float
    values of its leaves' rows by at most the fixed point's precision."""
    g = torch.Generator().manual_seed(1)
    n = 4000
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    t = torch.randn(n, generator=g, dtype=torch.float64) * 50
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.01
    lam = 0.5
    tree = RegressionTree(max_leaves=12, min_samples_leaf=5, l2=lam)
    p = tree.prepare(X)
    m = tree.fit(p, t, w)
    leaf = m.leaves(X)
    K = fraction_bits(n)
    wt = w * t
    err_g, err_h = 2.0 ** -K * float(wt.abs().max()), 2.0 ** -K * float(w.max())
    for k in range(m.num_leaves):
        r = leaf == k
        G, H = math.fsum(wt[r].tolist()), math.fsum(w[r].tolist())
        cnt = int(r.sum())
        exact = G / (H + lam)
        bound = (cnt * err_g + abs(exact) * cnt * err_h) / (H + lam) + 4 * abs(exact) * 2.0 ** -52
        assert abs(float(m.leaf_value[k]) - exact) <= bound, k


def test_a_shard_of_the_fixed_point_is_the_fixed_point_of_the_shard():
    """Ranks agree on the scales (the maxima max-reduced): each rank's values are those of
    one process, so the integer sums over the ranks are the one-process sums exactly."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1000, 2, generator=g, dtype=torch.float64)
    whole = quantize(x, num_rows=1000)
    M = torch.stack([x[:, c].abs().max() for c in range(2)])
    for part in (x[:300], x[300:]):
        got = quantize(part, num_rows=1000, max_reduce=lambda m: torch.maximum(m, M))
        assert torch.equal(got.shift, whole.shift)
    a = quantize(x[:300], num_rows=1000, max_reduce=lambda m: m.copy_(M)).q
    b = quantize(x[300:], num_rows=1000, max_reduce=lambda m: m.copy_(M)).q
    assert torch.equal(torch.cat([a, b]), whole.q)


def test_the_fit_rows_set_the_scale_and_rounding_is_half_to_even():
    x = torch.tensor([[0.5], [1.5], [2.5], [-2.5], [1e300]], dtype=torch.float64)
    rows = torch.tensor([0, 1, 2, 3])
    fp = quantize(x, num_rows=5, rows=rows)
    assert int(fp.shift) == fraction_bits(5) - 2  # max |x| over the rows: 2.5 < 2^2
    # the values outside the rows are clamped (never summed), not undefined
    assert int(fp.q[4, 0]) == 2 ** 62
    K = fraction_bits(6)
    y = torch.tensor([[0.5], [1.5], [2.5], [-0.5], [-1.5]], dtype=torch.float64) * 2.0 ** -(K - 1)
    half = quantize(torch.cat([y, torch.ones(1, 1, dtype=torch.float64)]), num_rows=6)
    assert int(half.shift) == K - 1  # the maximum 1.0 < 2^1: x·2^shift = the halves above
    assert half.q[:, 0].tolist() == [0, 2, 2, 0, -2, 2 ** (K - 1)]
    zero = quantize(torch.zeros(4, 2, dtype=torch.float64), num_rows=4)
    assert not bool(zero.q.any()) and bool((zero.scale > 0).all())


def test_bad_channels_are_refused_in_one_line():
    for bad in (torch.zeros(3, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.int64),
                torch.zeros(3, 0, dtype=torch.float64)):
        with pytest.raises(ValueError, match="x: expected"):
            quantize(bad, num_rows=3)
    with pytest.raises(ValueError, match="x: expected"):
        quantize([torch.zeros(3), torch.zeros(4)], num_rows=4)
