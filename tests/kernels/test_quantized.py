"""The quantized speed mode's channels (kernels/quantized.py): b-bit integers within their
bounds, stochastic rounding that is unbiased, seeded (the same seed the same integers, another
seed others) and a function of each row's own values (rows in another order: the same
integers, moved with them); the hash equals its pure-Python reference (int64 products wrap
modulo 2^64)."""

import math
import struct

import pytest
import torch

from torchrankboost.kernels.quantized import (check_bits, mix_int, quantize_stochastic,
                                              row_uniforms)


def _channels(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, generator=g, dtype=torch.float64) * 3
    return torch.randn(n, generator=g, dtype=torch.float64) * w, w


def _bits64(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def test_row_uniforms_equal_the_python_reference():
    a, b = _channels(50, seed=1)
    a[0], b[0] = -0.0, 0.0  # the bit patterns are hashed, the signs of zero too
    seed = 2 ** 63 + 12345  # seeds of 64 bits
    ua, ub = row_uniforms(a, b, seed)
    M = (1 << 64) - 1
    s = mix_int(seed + 0x9E3779B97F4A7C15)
    for i in range(a.numel()):
        z = mix_int((_bits64(float(a[i])) * 0x9E3779B97F4A7C15 + s) & M)
        z = mix_int(z ^ _bits64(float(b[i])))
        assert float(ua[i]) == (z >> 32) * 2.0 ** -32
        assert float(ub[i]) == (z & 0xFFFFFFFF) * 2.0 ** -32


@pytest.mark.parametrize("bits", [2, 8, 16])
def test_integers_stay_within_their_bounds(bits):
    wt, w = _channels(5000)
    fp = quantize_stochastic((wt, w), bits=bits, seed=3)
    L = (1 << (bits - 1)) - 1
    assert fp.q.dtype == torch.int64 and fp.bits == bits and fp.shift is None
    assert int(fp.q[:, 0].abs().max()) <= L and int(fp.q[:, 1].min()) >= 0
    assert int(fp.q[:, 1].max()) <= (1 << bits) - 1
    # the steps come from the maxima: the largest |w·t| is L steps (up to the rounding)
    assert fp.scale[0] == wt.abs().max() / L and fp.scale[1] == w.max() / ((1 << bits) - 1)
    i = int(wt.abs().argmax())
    assert abs(int(fp.q[i, 0])) >= L - 1


def test_rounding_is_unbiased():
    """Over many distinct rows the mean error is ~0 (within 5 standard errors; each error
    is below one step), and so is the mean over seeds of one row's error."""
    n = 200_000
    wt, w = _channels(n, seed=4)
    fp = quantize_stochastic((wt, w), bits=4, seed=5)
    for c, x in enumerate((wt, w)):
        err = fp.q[:, c].double() * fp.scale[c] - x
        assert float(err.abs().max()) < float(fp.scale[c])
        assert abs(float(err.mean())) < 5 * float(fp.scale[c]) / math.sqrt(n)
    # one row, many seeds: E[q · step] = x
    x = torch.tensor([0.3, 1.0], dtype=torch.float64)  # the second row sets the steps
    got = torch.stack([quantize_stochastic((x, x), bits=2, seed=s).q[0].double()
                       for s in range(4000)])
    step = torch.tensor([1.0, 1.0 / 3.0], dtype=torch.float64)
    mean = (got * step).mean(0)
    assert torch.allclose(mean, torch.full((2,), 0.3, dtype=torch.float64), atol=0.02)


def test_seeded_and_a_function_of_each_rows_values():
    wt, w = _channels(3000, seed=6)
    a = quantize_stochastic((wt, w), bits=8, seed=7)
    assert torch.equal(a.q, quantize_stochastic((wt, w), bits=8, seed=7).q)
    assert not torch.equal(a.q, quantize_stochastic((wt, w), bits=8, seed=8).q)
    perm = torch.randperm(3000, generator=torch.Generator().manual_seed(9))
    moved = quantize_stochastic((wt[perm], w[perm]), bits=8, seed=7)
    assert torch.equal(moved.q, a.q[perm]) and torch.equal(moved.scale, a.scale)
    # the fit's rows set the steps; the other rows are quantized too (never summed)
    rows = torch.arange(0, 3000, 2)
    part = quantize_stochastic((wt, w), bits=8, seed=7, rows=rows)
    assert part.scale[1] == w[rows].max() / 255


def test_zero_channels_and_bad_bits():
    z = torch.zeros(10, dtype=torch.float64)
    fp = quantize_stochastic((z, z), bits=8, seed=0)
    assert int(fp.q.abs().sum()) == 0 and fp.scale.tolist() == [1.0, 1.0]
    for bad in (1, 17, 8.0, True, "8"):
        with pytest.raises(ValueError, match="quantized_bits"):
            check_bits(bad)
    assert check_bits(None) is None and check_bits(16) == 16
