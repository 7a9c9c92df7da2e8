"""Shared test data of the weak learners' tests: a small regression problem with NaNs."""

import torch

__all__ = ["make_data"]


def make_data(n=300, F=4, seed=0, nan=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, F, generator=g, dtype=torch.float64)
    X[:, 1] = torch.round(X[:, 1] * 3)
    if nan:
        X[torch.rand(n, generator=g) < 0.15, 2] = float("nan")
    y = X[:, 0] + torch.sin(2 * X[:, 1]) + torch.nan_to_num(X[:, 2], nan=1.5) + 0.3 * torch.randn(n, generator=g)
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.2
    return X.to(dtype), y.to(dtype), w.to(dtype)
