"""Click simulation: click rates by position match the click models (PBM, cascade, DCM)."""

import pytest
import torch

from torchrankboost import Groups
from torchrankboost.clicks import (logged_positions, pbm_propensity, relevance_click_prob,
                                   simulate_clicks)

F64 = torch.float64


def _data(G=40, L=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(3, L + 1, (G,), generator=g)
    groups = Groups.from_sizes(sizes)
    n = int(sizes.sum())
    labels = torch.randint(0, 3, (n,), generator=g)
    scores = labels.to(F64) + torch.randn(n, generator=g, dtype=F64)
    return labels, groups, scores


def _expected(model, rho_tab, k, eta, lam):
    """(G, k) per-session click probability at each rank of each query."""
    if model == "pbm":
        return rho_tab * pbm_propensity(k, eta)
    stop = rho_tab if model == "cascade" else rho_tab * (1 - lam)
    alive = torch.cumprod(1 - stop, 1)
    exam = torch.cat([torch.ones_like(alive[:, :1]), alive[:, :-1]], 1)
    return exam * rho_tab


@pytest.mark.parametrize("model", ["pbm", "cascade", "dcm"])
def test_click_rate_by_position(model):
    labels, groups, scores = _data()
    k, eta, lam = 8, 1.5, 0.6
    log = simulate_clicks(labels, groups, scores, n_sessions=60_000, model=model, eta=eta,
                          eps_minus=0.1, eps_plus=0.9, top_k=k, continue_prob=lam, seed=3)
    assert int(log.sessions.sum()) == 60_000
    pos = log.position
    assert bool(((pos >= 0) & (pos <= k)).all())
    rho = relevance_click_prob(labels, eps_minus=0.1, eps_plus=0.9)
    G = groups.num_groups
    rho_tab = torch.zeros(G, k, dtype=F64)
    shown = pos > 0
    rho_tab[groups.group_index[shown], pos[shown] - 1] = rho[shown]
    pi = _expected(model, rho_tab, k, eta, lam)  # (G, k)
    S = log.sessions.to(F64)[:, None]
    mean = (S * pi).sum(0)
    sd = (S * pi * (1 - pi)).sum(0).sqrt()
    got = torch.zeros(k, dtype=F64).index_add_(0, pos[shown] - 1, log.clicks[shown].to(F64))
    z = (got - mean) / sd.clamp_min(1e-9)
    assert float(z.abs().max()) < 4.5, z
    assert int(log.clicks[~shown].sum()) == 0


def test_positions_and_seed():
    labels, groups, scores = _data(G=5)
    p = logged_positions(scores, groups)
    for q in range(5):
        a, b = int(groups.offsets[q]), int(groups.offsets[q + 1])
        want = torch.argsort(torch.argsort(-scores[a:b], stable=True)) + 1
        assert torch.equal(p[a:b], want)
    a = simulate_clicks(labels, groups, scores, n_sessions=500, seed=1)
    b = simulate_clicks(labels, groups, scores, n_sessions=500, seed=1)
    assert torch.equal(a.clicks, b.clicks) and torch.equal(a.sessions, b.sessions)
    ctr = a.ctr()
    assert bool(((ctr >= 0) & (ctr <= 1)).all())
    with pytest.raises(ValueError, match="model must be"):
        simulate_clicks(labels, groups, scores, n_sessions=5, model="ubm")
