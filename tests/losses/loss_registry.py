"""Every ``RankingLoss`` exported by ``torchrankboost.losses``, as pytest parameters: the
list the contract tests and the bound-form tests run over (new losses join automatically;
a loss with ``stochastic = True``, whose value depends on random draws, has its own tests)."""

import pytest

import torchrankboost.losses as L
from torchrankboost.losses import RankingLoss


def exported_losses(variants):
    """``pytest.param(cls, kwargs, id="Name-i")`` for every exported loss class, once per
    constructor variant in ``variants[name]`` (its defaults when the name is absent)."""
    out = []
    for name in sorted(getattr(L, "__all__", None) or dir(L)):
        obj = getattr(L, name, None)
        if isinstance(obj, type) and issubclass(obj, RankingLoss) and obj is not RankingLoss \
                and not name.startswith("_") and not getattr(obj, "stochastic", False):
            for i, kw in enumerate(variants.get(name, [{}])):
                out.append(pytest.param(obj, kw, id=f"{name}-{i}"))
    return out
