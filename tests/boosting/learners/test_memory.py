"""The histogram-memory check of the tree learners (boosting/learners/memory.py)."""

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree


def test_histogram_memory_counts_the_slots(monkeypatch):
    from torchrankboost.boosting.learners import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: 10 ** 9)
    memory.check_histogram_memory(100, 31, "cpu")  # 32 x 100 x 256 x 24 bytes: 20 MB
    with pytest.raises(ValueError, match="x 32767 bins x 24 bytes.*n_bins") as e:
        memory.check_histogram_memory(100, 31, "cpu", slots=32767)  # 2.5 GB
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="32767 bins"):
        RegressionTree(n_bins=32766, max_leaves=31).prepare(torch.zeros(2, 100))
