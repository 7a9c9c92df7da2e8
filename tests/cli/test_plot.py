"""``torchrankboost plot``: PNG files of a run folder or a model file, each path printed; a bad
source, a bad flag or a missing matplotlib is one line and exit 2."""

import sys

import pytest
from plot_helpers import run_folder  # noqa: F401  (fixture)

from torchrankboost.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _pngs(folder):
    return sorted(p.name for p in folder.glob("*.png") if p.read_bytes()[:8] == PNG)


def test_a_run_folder_gives_three_pngs(run_folder, tmp_path, capsys):
    out = tmp_path / "plots"
    assert main(["plot", str(run_folder), "-o", str(out), "--tree", "-1"]) == 0
    assert _pngs(out) == ["importance.png", "metrics.png", "tree.png"]
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"wrote {out / n}" for n in ("importance.png", "tree.png", "metrics.png")]


def test_a_model_file_gives_its_curves_from_the_saved_fit(run_folder, tmp_path, capsys):
    out = tmp_path / "plots"
    assert main(["plot", str(run_folder / "model.safetensors"), "-o", str(out),
                 "--importance-type", "split", "--max-features", "3"]) == 0
    assert _pngs(out) == ["importance.png", "metrics.png", "tree.png"]


@pytest.mark.parametrize("args, message", [
    (["nowhere"], "nowhere: no such model file or run folder"),
    (["{run}", "--max-features", "0"], "--max-features must be >= 1, got 0"),
    (["{empty}"], "nothing to plot"),
])
def test_bad_input_is_one_line(run_folder, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    args = [a.format(run=run_folder, empty=tmp_path / "empty") for a in args]
    assert main(["plot", *args, "-o", str(tmp_path / "out")]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert not cap.out and len(err.splitlines()) == 1, err
    assert err.startswith("torchrankboost: error: "), err
    assert message in err


def test_without_matplotlib_it_says_what_to_install(run_folder, tmp_path, capsys,
                                                    monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["plot", str(run_folder), "-o", str(tmp_path)]) == 2
    assert "pip install 'torchrankboost[plots]'" in capsys.readouterr().err
