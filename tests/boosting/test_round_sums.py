"""The booster round's bookkeeping helpers (:mod:`torchrankboost.boosting._round_sums`) give
the sums and targets of the plain expressions they replace, bit for bit."""

import torch

from torchrankboost.boosting._round_sums import (all_finite, gradient_stats, moved,
                                                 newton_target, step_sums)


def same_bits(a, b):
    """Bit for bit (NaN where NaN: a NaN's payload is the only freedom)."""
    assert a.shape == b.shape and a.dtype == b.dtype
    nan = torch.isnan(a)
    assert torch.equal(nan, torch.isnan(b))
    bits = torch.int64 if a.dtype == torch.float64 else torch.int32
    assert torch.equal(a[~nan].view(bits), b[~nan].view(bits))


def test_round_sums_match_the_plain_expressions():
    gen = torch.Generator().manual_seed(5)
    n = 1001
    g, h, f, s = (torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(4))
    g[::7], h[::5], f[::3] = -0.0, -0.0, 0.0
    out = torch.zeros(5, dtype=torch.float64)
    work = gradient_stats(g, h, out, 4)
    assert torch.equal(out[[0, 2, 4]], torch.stack([h.abs().sum(), (g * g).sum(), g.abs().max()]))
    for w in (None, work):
        t, hc = newton_target(g, h, 0.3, w)
        same_bits(hc, h.clamp_min(0.3))
        same_bits(t, -g / h.clamp_min(0.3))
    ref = torch.stack([(g * f).sum(), (hc * f * f).sum(), (hc * hc).sum(), hc.sum(),
                       torch.tensor(float(n), dtype=torch.float64)])
    same_bits(step_sums(g, hc, f, n), ref)
    same_bits(moved(s, 0.037, f), s + 0.037 * f)
    assert all_finite(g)
    for bad in (float("nan"), float("inf")):
        x = g.clone()
        x[9] = bad
        assert not all_finite(x)
    assert all_finite(torch.full((4,), 1e308, dtype=torch.float64))  # the sum overflows
