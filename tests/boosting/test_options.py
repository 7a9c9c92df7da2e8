"""The Booster's option checks: one-line ValueErrors naming the option."""

import pytest

from torchrankboost.boosting import Booster, RegressionTree
from torchrankboost.boosting.options import base_score_option, check_options
from torchrankboost.losses import ExponentialPairwiseLoss

GOOD = dict(n_rounds=10, learning_rate=0.1, step="surrogate", curvature="diag", subsample=1.0,
            on_unbounded="stop", hess_floor=1e-6, verbose="auto", line_search_tol=1e-3,
            line_search_order=2, distributed=None)


@pytest.mark.parametrize("name,bad,shown", [
    ("n_rounds", -1, "a non-negative integer, got -1"),
    ("learning_rate", 0.0, "positive, got 0.0"),
    ("step", "auto", "one of ('surrogate', 'line_search', 'newton', 'fixed', 'auto'), got 'auto'"),
    ("curvature", "full", "one of ('diag', 'bound', 'none'), got 'full'"),
    ("subsample", 1.5, "in (0, 1], got 1.5"),
    ("on_unbounded", "ignore", "one of ('stop', 'raise', 'cap'), got 'ignore'"),
    ("hess_floor", 0, "positive, got 0"),
    ("verbose", "loud", "'auto', a bool or an int, got 'loud'"),
    ("line_search_tol", 1.0, "in (0, 1), got 1.0"),
    ("line_search_order", True, "1 or 2, got True"),
    ("distributed", "yes", "None, True, False or a DistContext, got 'yes'"),
])
def test_each_option_is_checked(name, bad, shown):
    check_options(ExponentialPairwiseLoss(), RegressionTree(), GOOD)
    with pytest.raises(ValueError) as info:
        check_options(ExponentialPairwiseLoss(), RegressionTree(), dict(GOOD, **{name: bad}))
    assert str(info.value) == f"{name} must be {shown}"


def test_loss_learner_and_base_score():
    with pytest.raises(ValueError, match="loss must be callable"):
        check_options(None, RegressionTree(), GOOD)
    with pytest.raises(ValueError, match="learner must have a prepare"):
        check_options(ExponentialPairwiseLoss(), object(), GOOD)
    assert base_score_option("auto") == "auto" and base_score_option("1.5") == 1.5
    with pytest.raises(ValueError, match="base_score must be 'auto' or a float"):
        base_score_option("mean")
    with pytest.raises(ValueError, match="step must be one of"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), step="exact")
