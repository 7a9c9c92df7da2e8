"""Shared test fixtures: devices, data folder, hypothesis profile."""

import os
from pathlib import Path

import pytest
import torch

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

SHARED_DATA = Path(
    os.environ.get("TORCHRANKBOOST_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data")
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Parametrise a test over CPU and CUDA (CUDA skipped when absent)."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    return torch.device(request.param)


@pytest.fixture
def shared_data():
    """Path of ../shared/data; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def require_data(*parts):
    """Path under the shared data folder, or skip the calling test if missing."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"data not found: {p}")
    return p
