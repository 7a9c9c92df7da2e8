"""get_params(): every registered loss, learner and algorithm reports its parameters as plain
JSON-able values, and ``type(x)(**x.get_params())`` rebuilds an equal object."""

import json

import pytest
import torch

from torchrankboost import registry
from torchrankboost.factory import make_ranker, ranker_from_params
from torchrankboost.pairs import Bipartite, ExplicitPairs, Graded
from torchrankboost.params import (build_from_params, describe, format_params, from_params,
                                   to_params)


def _default(kind, name):
    if (kind, name) == ("algorithm", "boost"):
        return registry.create(kind, name, loss=registry.create("loss", "exponential"),
                               learner=registry.create("learner", "tree"))
    return registry.create(kind, name)


def _non_default(kind, name):
    """The object with one non-default setting where a simple one exists."""
    changes = {("loss", "pnorm_push"): {"p": 3.0}, ("loss", "qbrank"): {"tau": "grade_difference"},
               ("loss", "smooth_margin"): {"scale": 2.5}, ("learner", "tree"): {"max_leaves": 7},
               ("learner", "stump"): {"max_thresholds": 8}, ("algorithm", "rankboost"):
               {"variant": "rb-d", "pairs": Bipartite(0.5), "learner": "stump"},
               ("algorithm", "qbrank"): {"w": 0.25, "pairs": "bipartite"},
               ("algorithm", "ranksvm"): {"C": 0.5, "pairs": Graded()}}
    kw = dict(changes.get((kind, name), {}))
    if kw.get("learner") == "stump":
        kw["learner"] = registry.create("learner", "stump", max_thresholds=4)
    if (kind, name) == ("algorithm", "boost"):
        kw.update(loss=registry.create("loss", "pnorm_push", p=4),
                  learner=registry.create("learner", "stump"), learning_rate=0.3,
                  device=torch.device("cpu"))
    return registry.create(kind, name, **kw)


ALL = [(k, n) for k in ("loss", "learner", "algorithm") for n in registry.names(k)]


@pytest.mark.parametrize("kind,name", ALL)
@pytest.mark.parametrize("make", [_default, _non_default])
def test_get_params_round_trips(kind, name, make):
    x = make(kind, name)
    params = x.get_params()
    json.loads(json.dumps(params))  # plain JSON-able values
    y = type(x)(**params)
    assert type(y) is type(x) and y.get_params() == params
    assert build_from_params(describe(x)).get_params() == params


def test_nested_components_are_typed_dicts():
    b = make_ranker("boost", loss="pnorm_push", loss_params={"p": 4}, max_leaves=15)
    p = b.get_params()
    assert p["loss"] == {"type": "PNormPushLoss",
                         "params": {"p": 4.0, "log": False, "normalize": False,
                                    "reduction": "sum"}}
    assert p["learner"]["type"] == "RegressionTree"
    assert p["learner"]["params"]["max_leaves"] == 15
    assert "callbacks" not in p and "distributed" not in p  # runtime wiring, not parameters
    again = ranker_from_params(describe(b))
    assert again.get_params() == p and again.n_threads == 1
    # a registered algorithm name works as the type too
    rb = ranker_from_params({"type": "rankboost", "params": {"variant": "rb-d"}})
    assert rb.variant == "rb-d"
    with pytest.raises(ValueError, match="unknown algorithm"):
        ranker_from_params({"type": "no_such_algorithm", "params": {}})


def test_registry_resolves_descriptions():
    loss = registry.resolve_loss({"type": "PNormPushLoss", "params": {"p": 3.0}})
    assert loss.p == 3.0
    tree = registry.resolve_learner(describe(registry.create("learner", "tree", max_leaves=5)))
    assert tree.max_leaves == 5


def test_old_keyword_names_are_gone():
    for name in ("rankboost", "adaboost", "pnorm_push", "qbrank", "gbt"):
        p = registry.create("algorithm", name).get_params()
        assert not {"rankers", "on_undefined", "shrinkage"} & set(p)
        with pytest.raises(ValueError, match="unknown parameter"):
            registry.create("algorithm", name, rankers=None, shrinkage=0.1)


def test_pair_specs_and_explicit_pairs():
    assert to_params(Bipartite(0.5)) == {"type": "Bipartite", "params": {"threshold": 0.5}}
    assert to_params(Graded()) == {"type": "Graded", "params": {}}
    assert from_params(to_params(Bipartite(0.5))) == Bipartite(0.5)
    # explicit pairs are data: described, never built back from the description
    ex = ExplicitPairs([0, 2], [1, 3], [1.0, 2.0])
    d = to_params(ex)
    assert d == {"type": "ExplicitPairs", "num_pairs": 2, "weighted": True}
    with pytest.raises(ValueError, match="data, not parameters"):
        build_from_params(d)
    rb = registry.create("algorithm", "rankboost", pairs=ex)
    assert rb.get_params()["pairs"] == d and json.dumps(rb.get_params())


def test_values_without_a_json_form():
    with pytest.raises(ValueError, match="no JSON form"):
        to_params(torch.zeros(2))
    # describe() never fails: an object without parameters is named by its type
    assert describe(lambda s, y, g: s.sum()) == {"type": "<lambda>"}
    with pytest.raises(ValueError, match="unknown type"):
        build_from_params({"type": "NoSuchThing", "params": {}})


def test_format_params():
    d = describe(registry.create("loss", "pnorm_push", p=4))
    assert format_params(d) == "PNormPushLoss(p=4.0, log=False, normalize=False, " \
                               "reduction='sum')"
    assert format_params(3) == "3"
