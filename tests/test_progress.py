"""Progress output (``progress.py``): the Booster shows a progress bar on a terminal only."""

import io
import sys

import pytest

from torchrankboost import Booster
from torchrankboost.boosting import RegressionTree
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss


@pytest.fixture(scope="module")
def data():
    d = make_letor(20, 10, 5, 3, seed=0)
    return d.X, d.labels, d.groups


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_booster_shows_a_progress_bar_on_a_terminal_only(data, monkeypatch):
    X, y, g = data

    def fit(**kw):
        Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3,
                **kw).fit(X, y, g)

    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    fit()  # default "auto" on a terminal: a bar
    assert "3/3" in tty.getvalue()
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    fit(verbose=False)
    assert tty.getvalue() == ""
    plain = io.StringIO()  # a log file, a pipe, CI: nothing by default
    monkeypatch.setattr(sys, "stderr", plain)
    fit()
    assert plain.getvalue() == ""
    with pytest.raises(ValueError, match="verbose"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), verbose="yes")
