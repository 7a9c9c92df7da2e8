"""The booster round's bookkeeping helpers (:mod:`torchrankboost.boosting._round_sums`) give
the targets of the plain expressions they replace bit for bit, and their sums order-free:
per query in row order, then exactly over the queries (``math.fsum`` of the per-query
sums), the same for the queries in any order."""

import math

import torch

from torchrankboost.exact import round_sum

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
    cuts = torch.randint(0, n + 1, (40,), generator=gen).sort().values
    off = torch.cat([torch.zeros(1, dtype=torch.long), cuts, torch.tensor([n])])
    sizes = off[1:] - off[:-1]  # some empty queries

    def order_free(x):  # per query from 0 in row order, then exactly over the queries
        per = []
        for q in range(sizes.numel()):
            t = 0.0
            for v in x[off[q]:off[q + 1]].tolist():
                t += v
            per.append(t)
        return math.fsum(per)

    acc, gmax, work = gradient_stats(g, h, off)
    sums = round_sum(acc).tolist()
    assert sums == [order_free(h.abs()), order_free(g * g)] and gmax == g.abs().max()
    for w in (None, work):
        t, hc = newton_target(g, h, 0.3, w)
        same_bits(hc, h.clamp_min(0.3))
        same_bits(t, -g / h.clamp_min(0.3))
    ref = [order_free(g * f), order_free(hc * f * f), order_free(hc * hc), order_free(hc)]
    assert round_sum(step_sums(g, hc, f, off)).tolist() == ref
    same_bits(moved(s, 0.037, f), s + 0.037 * f)
    assert all_finite(g)
    for bad in (float("nan"), float("inf")):
        x = g.clone()
        x[9] = bad
        assert not all_finite(x)
    assert all_finite(torch.full((4,), 1e308, dtype=torch.float64))  # the sum overflows
