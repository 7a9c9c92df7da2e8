"""scripts/gpu_check.py: the dry run on the CPU (same code, tiny sizes) writes its JSON and
table; without a CUDA device the plain command says so and writes nothing."""

import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import gpu_check

    yield gpu_check
    sys.modules.pop("gpu_check", None)


def test_dry_run_on_cpu_writes_results(gpu_check, tmp_path):
    pytest.importorskip("lightgbm")
    pytest.importorskip("xgboost")
    assert gpu_check.main(["--dry-run-cpu", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["environment"]["dry_run"] and r["tests"] == {"summary": "skipped"}
    t = r["trees"]
    assert t["rows"] == 2000 and t["trees"] == 3
    times = t["seconds_per_tree"]
    assert t["reference"] in times and t["ratio_to_reference"][t["reference"]] == 1.0
    assert all(v > 0 for v in times.values()) and len(times) >= 4
    losses = r["losses"]["seconds"]
    assert set(losses) == set(gpu_check.LOSSES.values())
    assert all(row["cpu"] > 0 for row in losses.values() if "note" not in row)
    md = (tmp_path / "README.md").read_text()
    assert "## Tree growth" in md and "ExponentialPairwiseLoss" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_nothing_is_written(gpu_check, tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 0
    assert "no CUDA device: nothing to check" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
