"""scripts/gpu_check.py: the dry run on the CPU (same code, tiny sizes) writes its JSON and
table, with every implementation's seconds per tree (the Triton backend under Triton's
interpreter when it is installed), the identity of the trees, the kernels' agreement and the
losses; a budget too short skips sections and says so; without a CUDA device the plain
command says so and writes nothing."""

import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # what the dry run sets, undone afterwards
    import gpu_check

    yield gpu_check
    sys.modules.pop("gpu_check", None)
    sys.modules.pop("gpu_check_report", None)


def _has(module):
    try:
        __import__(module)
    except Exception:
        return False
    return True


def test_dry_run_on_cpu_writes_results(gpu_check, tmp_path):
    assert gpu_check.main(["--dry-run-cpu", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["environment"]["dry_run"] and r["tests"] == {"skipped": "dry run"}
    t = r["trees"]
    assert t["rows"] == 2000 and t["binning"]["codes_identical"]
    assert [row["leaves"] for row in t["by_leaves"]] == [7, 15]
    for row in t["by_leaves"]:
        times, notes = row["seconds_per_tree"], row["notes"]
        assert all(v > 0 for v in times.values())
        assert any(k.startswith("ours cpu (native") for k in times)
        for kernel in ("torch", "triton"):  # the "GPU" side: a time and the identity, or why not
            assert f"ours cpu ({kernel})" in times or f"ours cpu ({kernel})" in notes
        assert times.get("ours cpu (torch)") and row["identity"]["torch cpu vs cpu"]["identical"]
        assert all(v["identical"] for v in row["identity"].values()), row["identity"]
        lgb = [k for k in times if k.startswith("lightgbm")]
        assert lgb if _has("lightgbm") else "LightGBM not installed" in notes["lightgbm cpu"]
    k = r["kernels"]
    assert "note" in k or (all(k["agree"].values()) and k["ms"]["apply_bins"] > 0)
    if _has("triton"):
        assert "ours cpu (triton)" in t["by_leaves"][0]["seconds_per_tree"]
    losses = r["losses"]["seconds"]
    assert set(losses) == set(gpu_check.LOSSES.values())
    assert all(row["cpu"] > 0 for row in losses.values() if "note" not in row)
    md = (tmp_path / "README.md").read_text()
    assert "## Tree growth" in md and "### 15 leaves" in md and "ExponentialPairwiseLoss" in md
    nn = r["neural"]
    assert nn["queries"] == 20 and nn["seconds_per_epoch"]["cpu_fp32"] > 0
    assert "## Neural trainer" in md


def test_a_short_budget_skips_sections_and_says_so(gpu_check, tmp_path):
    assert gpu_check.main(["--dry-run-cpu", "--out", str(tmp_path), "--budget", "0"]) == 0
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert all("left of the budget" in r[k]["skipped"] for k in ("trees", "kernels", "losses"))
    assert "Skipped:" in (tmp_path / "README.md").read_text()


def test_timed_keeps_within_its_cap(gpu_check):
    calls = []
    sec, k, out = gpu_check.timed(lambda: calls.append(1) or len(calls), 5,
                                  torch.device("cpu"), cap=0.0)
    assert (k, out, len(calls)) == (0, 1, 1) and sec >= 0
    sec, k, out = gpu_check.timed(lambda: calls.append(1) or len(calls), 3, torch.device("cpu"))
    assert (k, out) == (3, 5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_nothing_is_written(gpu_check, tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 0
    assert "no CUDA device: nothing to check" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
