"""n_threads (``_threads.py``): torch's intra-op threads during a fit (one by default,
restored after, the outermost setting wins for nested fits)."""

import pytest
import torch

from torchrankboost import Booster
from torchrankboost._threads import DEFAULT_THREADS, limit_threads, resolve_n_jobs
from torchrankboost.boosting import RegressionTree
from torchrankboost.factory import make_ranker
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss


@pytest.fixture(scope="module")
def data():
    d = make_letor(20, 10, 5, 3, seed=0)
    return d.X, d.labels, d.groups


class Spy:
    def __init__(self):
        self.threads = []

    def on_round_end(self, ranker, record):
        self.threads.append(torch.get_num_threads())


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_limit_threads_restores_and_nests(two_threads):
    assert DEFAULT_THREADS == 1
    with limit_threads(1):
        assert torch.get_num_threads() == 1
        with limit_threads(2):  # an inner fit keeps the outer setting
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with limit_threads(None):
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError):
        with limit_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2
    assert resolve_n_jobs(None) == 1 and resolve_n_jobs(3) == 3 and resolve_n_jobs(-1) >= 1


@pytest.mark.parametrize("algorithm", ["boost", "qbrank", "rankboost", "adaboost", "ranksvm"])
def test_every_algorithm_fits_with_n_threads(algorithm, data, two_threads):
    X, y, g = data
    size = {"params": {"max_iter": 2}} if algorithm == "ranksvm" else {"n_rounds": 2}
    spy = Spy()
    make_ranker(algorithm, **size).fit(X, y, g, callbacks=[spy])
    assert spy.threads and set(spy.threads) == {1}  # the default: one thread
    assert torch.get_num_threads() == 2  # restored
    spy = Spy()
    r = make_ranker(algorithm, n_threads=None, **size)
    r.fit(X, y, g, callbacks=[spy])
    assert set(spy.threads) == {2}  # None: torch's own setting


def test_booster_n_threads_argument(data, two_threads):
    X, y, g = data
    spy = Spy()
    Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=2,
            n_threads=2, verbose=False).fit(X, y, g, callbacks=[spy])
    assert set(spy.threads) == {2}
    with pytest.raises(ValueError, match="n_threads"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), n_threads=0)
