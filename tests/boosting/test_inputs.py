"""Input conversion and checks of a fit (``boosting/inputs.py``): the check for infinite
features gives the same answers on expanded stand-in features (binned data) as on dense
ones; rows of infinite features are refused by the fits that scale features (feature rankers,
RankSVM) instead of converging silently."""

import math

import pytest
import torch

from torchrankboost.boosting.inputs import check_no_inf
from torchrankboost.data import make_letor


def test_check_no_inf_on_expanded_features():
    ok = torch.zeros((), dtype=torch.float32).expand(100_000, 50)  # binned data's stand-in
    assert check_no_inf(ok) is ok
    with pytest.raises(ValueError, match=r"column 0 \(row 0, value inf\)"):
        check_no_inf(torch.tensor(math.inf).expand(10, 3))
    row = torch.tensor([0.0, 1.0, 2.0, -math.inf, 4.0])
    with pytest.raises(ValueError, match=r"column 3 \(row 0, value -inf\)"):
        check_no_inf(row.expand(7, 5))
    col = torch.tensor([0.0, 1.0, math.inf, 3.0])
    with pytest.raises(ValueError, match=r"column 0 \(row 2, value inf\)"):
        check_no_inf(col[:, None].expand(4, 6))
    dense = torch.zeros(6, 4)
    dense[4, 2] = math.inf
    with pytest.raises(ValueError, match=r"column 2 \(row 4, value inf\)"):
        check_no_inf(dense)


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


def test_feature_rankers_and_ranksvm_refuse_inf_rows_instead_of_converging_silently():
    from torchrankboost.boosting import FeatureRankers, RankBoost
    from torchrankboost.boosting.papers import RankSVM

    X, y, g = _data()
    Xi = X.clone()
    Xi[5, :] = float("inf")
    with pytest.raises(ValueError, match="infinite value in column 0"):
        RankBoost(learner=FeatureRankers(), n_rounds=3).fit(Xi, y, g)
    with pytest.raises(ValueError, match="infinite value in column 0"):
        RankSVM().fit(Xi, y, g)
