"""Shared test fixtures: devices, data folder, hypothesis profile."""

import os

import pytest
import torch

from torchrankboost.data import data_root

try:
    from hypothesis import settings

    settings.register_profile("ci", deadline=None, max_examples=40, derandomize=True)
    # HYPOTHESIS_PROFILE=thorough: ten times the examples, random seeds (after kernel changes)
    settings.register_profile("thorough", deadline=None, max_examples=400)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover
    pass

# The tests run many small tensor ops, for which an intra-op thread pool costs more than it
# gains (and stalls badly on a shared machine): one thread, deterministic and fast.
torch.set_num_threads(1)

# Real data sets (MQ2008, the UCI copies, ...) are found by the library's one rule:
# $TORCHRANKBOOST_DATA, else ./data (torchrankboost.data.data_root). Tests that need them
# skip when they are absent. Resolved once, so that a test changing directory does not move it.
DATA_ROOT = data_root().resolve()

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Parametrise a test over CPU and CUDA (CUDA skipped when absent)."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    return torch.device(request.param)


@pytest.fixture
def shared_data():
    """The data folder (``data_root()``); skips the test when it is absent."""
    if not DATA_ROOT.is_dir():
        pytest.skip(f"data folder not found at {DATA_ROOT} (set TORCHRANKBOOST_DATA)")
    return DATA_ROOT


def require_data(*parts):
    """Path under the data folder, or skip the calling test if missing."""
    p = DATA_ROOT.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"data not found: {p}")
    return p


def read_events(logdir):
    """TensorBoard's event reader over a run directory, everything kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0,
                                                      "tensors": 0, "images": 0})
    ea.Reload()
    return ea


class Recorder:
    """A callback that keeps every event: ``("start", info)``, ``("round", record)``,
    ``("end", model)``, and the ids of the rankers that called it; it asks to stop once
    ``record.round >= stop_at``."""

    def __init__(self, stop_at=None):
        self.events = []
        self.stop_at = stop_at

    def on_fit_start(self, ranker, info):
        self.events.append(("start", info))
        self.rankers = {id(ranker)}

    def on_round_end(self, ranker, record):
        self.events.append(("round", record))
        self.rankers.add(id(ranker))
        return self.stop_at is not None and record.round >= self.stop_at

    def on_fit_end(self, ranker, model):
        self.events.append(("end", model))
        self.rankers.add(id(ranker))


def fit_info(n_rounds=12):
    """A :class:`~torchrankboost.contract.FitInfo` shaped like the driver's (see
    ``boosting/booster.py``), for callback tests."""
    from torchrankboost import PNormPushLoss, RegressionTree
    from torchrankboost.contract import FitInfo
    from torchrankboost.params import describe

    return FitInfo(algorithm="boost", n_docs=50, n_queries=5, n_features=4, n_rounds=n_rounds,
                   eval_names=["valid_0"], metric_names=["auc", "ndcg@10"],
                   params={"learning_rate": 0.1, "callbacks": [1, 2],
                           "loss": describe(PNormPushLoss(2.0)),
                           "learner": describe(RegressionTree(max_leaves=15, l2=1.0)),
                           "step": "line_search", "curvature": "diag", "base_score": 0.0,
                           "seed": 0, "subsample": 1.0, "device": "cpu"})
