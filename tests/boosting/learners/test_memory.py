"""The histogram-memory check of the tree learners (boosting/learners/memory.py)."""

import pytest
import torch

from torchrankboost.boosting.learners import RegressionTree
import time
from torchrankboost.boosting import RegressionTree
from torchrankboost.boosting.learners import memory


def test_histogram_memory_counts_the_slots(monkeypatch):
    from torchrankboost.boosting.learners import memory

    monkeypatch.setattr(memory, "available_memory", lambda device: 10 ** 9)
    memory.check_histogram_memory(100, 31, "cpu")  # 32 x 100 x 256 x 24 bytes: 20 MB
    with pytest.raises(ValueError, match="x 32767 bins x 24 bytes.*n_bins") as e:
        memory.check_histogram_memory(100, 31, "cpu", slots=32767)  # 2.5 GB
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="32767 bins"):
        RegressionTree(n_bins=32766, max_leaves=31).prepare(torch.zeros(2, 100))


def test_histogram_estimate_is_19_7_gb_for_one_stray_index_99999():
    assert memory.histogram_bytes(99_999, 31) == 32 * 99_999 * 256 * 24
    assert round(memory.histogram_bytes(100_000, 31) / 1e9, 1) == 19.7


def test_tree_learner_refuses_histograms_larger_than_any_memory_before_allocating():
    X = torch.rand(8, 1000)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"needs about .* GB .*--max-leaves") as info:
        RegressionTree(max_leaves=10 ** 7).prepare(X)
    assert time.perf_counter() - t0 < 1.0 and len(str(info.value).splitlines()) == 1


def test_stray_feature_index_is_refused_in_one_line_naming_the_options(
        tmp_path, monkeypatch, capsys):
    """The real file of the report (features 1-3 and one stray 99,999) on a machine with
    8 GB available: status 2, one line, before any tree is grown."""
    from torchrankboost import cli

    g = torch.Generator().manual_seed(0)
    path = tmp_path / "train.txt"
    with open(path, "w") as fh:
        for q in range(4):
            for d in range(5):
                x = torch.rand(3, generator=g)
                stray = " 99999:1" if (q, d) == (2, 3) else ""
                fh.write(f"{int(float(x[0]) > 0.5)} qid:{q} 1:{float(x[0]):.3f} "
                         f"2:{float(x[1]):.3f} 3:{float(x[2]):.3f}{stray}\n")
    monkeypatch.setattr(memory, "available_memory", lambda device: 8 * 10 ** 9)
    rc = cli.main(["train", "--data", str(path), "--rounds", "2", "-q", "--no-tensorboard",
                   "-o", str(tmp_path / "m.safetensors")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "19.7 GB" in err and "--max-leaves" in err and "--max-features" in err
    assert not (tmp_path / "m.safetensors").exists()
