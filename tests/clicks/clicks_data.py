"""The large click simulation the propensity-estimation tests share (EM, DLA)."""

import torch

from torchrankboost import Groups
from torchrankboost.clicks import simulate_clicks

F64 = torch.float64


def large_pbm_log(n_sessions: int = 200_000):
    """1,000 queries of 10 documents (labels 0-2), a noisy logging ranker, PBM clicks at
    η = 1 on the top 10: ``(labels, groups, click log)``, seeded."""
    g = torch.Generator().manual_seed(0)
    G, L = 1000, 10
    groups = Groups.from_sizes(torch.full((G,), L))
    y = torch.randint(0, 3, (G * L,), generator=g)
    log_s = y.to(F64) + 1.5 * torch.randn(G * L, generator=g, dtype=F64)
    log = simulate_clicks(y, groups, log_s, n_sessions=n_sessions, eta=1.0, top_k=10, seed=1)
    return y, groups, log


def small_click_data(G: int = 60, L: int = 12, F: int = 6, seed: int = 0):
    """A small learnable click set for booster tests: ``(X, labels, groups, click log)``."""
    g = torch.Generator().manual_seed(seed)
    groups = Groups.from_sizes(torch.full((G,), L))
    X = torch.randn(G * L, F, generator=g, dtype=F64)
    y = (X[:, 0] > 0.5).long() + (X[:, 0] + X[:, 1] > 1.5).long()
    log = simulate_clicks(y, groups, X[:, 1] + X[:, 2], n_sessions=20_000, top_k=8, seed=2)
    return X, y, groups, log
