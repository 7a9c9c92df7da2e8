"""Fixtures shared by the papers' algorithm tests: the papers' examples and a small random
ranking problem with ties (:func:`random_ragged`)."""

import torch

from torchrankboost.groups import Groups

F64 = torch.float64

# the 8x8 matrix of Rudin, Daubechies & Schapire (2004), "The dynamics of AdaBoost"
M88 = torch.tensor([
    [-1, 1, 1, 1, 1, -1, -1, 1], [-1, 1, 1, -1, -1, 1, 1, 1], [1, -1, 1, 1, 1, -1, 1, 1],
    [1, -1, 1, 1, -1, 1, 1, 1], [1, -1, 1, -1, 1, 1, 1, -1], [1, 1, -1, 1, 1, 1, 1, -1],
    [1, 1, -1, 1, 1, 1, -1, 1], [1, 1, 1, 1, -1, -1, 1, -1]], dtype=F64)


def ranking_8x8():
    """The 8x8 example as a ranking problem: 16 instances a_p, b_p; crucial pairs (a_p, b_p) in 8
    queries; h_j(a_p) = (1 + M_pj)/2, h_j(b_p) = (1 - M_pj)/2."""
    H = torch.empty(16, 8, dtype=F64)
    H[0::2] = (1 + M88) / 2
    H[1::2] = (1 - M88) / 2
    return H, torch.tensor([1.0, 0.0] * 8, dtype=F64), Groups.from_sizes([2] * 8)


def discrete_fixture():
    """One discrete feature, both classes at every value (so no model separates them; the
    infimum of AdaBoost's loss is ``F = 2 Σ_v sqrt(n⁺_v n⁻_v)``)."""
    npos = [2, 3, 5, 4, 8, 6, 9, 12]
    nneg = [10, 9, 7, 8, 4, 6, 3, 2]
    x, y = [], []
    for v, (a, b) in enumerate(zip(npos, nneg)):
        x += [v] * (a + b)
        y += [1.0] * a + [0.0] * b
    return torch.tensor(x, dtype=torch.float32)[:, None], torch.tensor(y, dtype=F64)


def random_ragged(seed, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 8, (6,), generator=gen)
    sizes[0] = max(int(sizes[0]), 3)
    g = Groups.from_sizes(sizes)
    n = g.num_docs
    labels = torch.randint(0, 4, (n,), generator=gen).to(F64)
    labels[0], labels[1] = 0.0, 2.0  # at least one pair
    s = (torch.randn(n, generator=gen, dtype=F64) * scale).round(decimals=1)  # ties in scores
    codes = torch.randint(0, 5, (n, 3), generator=gen)  # ties in the feature codes
    return g, labels, s, codes
