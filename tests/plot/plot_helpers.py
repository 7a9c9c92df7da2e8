"""What the plot tests share: a small run of ``torchrankboost train`` (a run folder with its
TensorBoard events and its model file), trained once per test module, in this process."""

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder of 3 rounds of trees on the synthetic set: events and model.safetensors."""
    from torchrankboost.cli import main

    folder = tmp_path_factory.mktemp("plot") / "run"
    assert main(["train", "--data", "synthetic", "--rounds", "3", "--max-leaves", "4",
                 "-q", "--logdir", str(folder)]) == 0
    assert (folder / "model.safetensors").is_file()
    return folder


def figure():
    from matplotlib.figure import Figure

    return Figure()
