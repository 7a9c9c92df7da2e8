"""The command line's side of learning from clicks: ``--debias`` (its choices from the
registry), ``--position`` / the ``.position`` side file, ``--propensity``."""

import argparse

import numpy as np
import torch

from torchrankboost import Groups
from torchrankboost.cli import main
from torchrankboost.cli.clicks import add_click_options
from torchrankboost.clicks import simulate_clicks
from torchrankboost.data.positions import read_positions
from torchrankboost.boosting.ensemble import Ensemble


def _log(G=30, L=8):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(G * L, 4))
    y = (X[:, 0] > 0.3).astype(int) + (X[:, 0] > 1.2).astype(int)
    log = simulate_clicks(torch.tensor(y), Groups.from_sizes([L] * G), torch.tensor(X[:, 1]),
                          n_sessions=4000, top_k=5, seed=0)
    return X, y, np.repeat(np.arange(G), L), log


def test_cli_position_side_file(tmp_path, capsys):
    X, y, qid, log = _log()
    train = tmp_path / "train.txt"
    c = log.clicks.numpy()
    with open(train, "w") as fh:
        for i in range(len(y)):
            fh.write(f"{c[i]} qid:{qid[i]} " + " ".join(f"{j + 1}:{X[i, j]:.5f}"
                                                        for j in range(4)) + "\n")
    np.savetxt(str(train) + ".position", log.position.numpy(), fmt="%d")
    assert np.array_equal(read_positions(str(train) + ".position"), log.position.numpy())
    out = tmp_path / "m.safetensors"
    rc = main(["train", "--data", str(train), "--rounds", "2", "--debias", "ipw",
               "--propensity", "1,0.5,0.33,0.25,0.2", "--quiet", "--logdir",
               str(tmp_path / "run"), "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert Ensemble.load(out).info["position_debias"]["method"] == "ipw"
    bad = tmp_path / "bad.position"
    bad.write_text("1\nx\n")
    rc = main(["train", "--data", str(train), "--rounds", "1", "--debias", "additive",
               "--position", str(bad), "--quiet", "--logdir", str(tmp_path / "run3")])
    assert rc != 0 and "bad.position:2:" in capsys.readouterr().err


def test_debias_choices_are_the_registry_s_and_list_shows_them(capsys):
    from torchrankboost import registry

    ap = argparse.ArgumentParser()
    add_click_options(ap)
    choices = next(a.choices for a in ap._actions if a.dest == "debias")
    assert tuple(choices) == ("none", *registry.names("debias", sort=False))
    assert ap.parse_args([]).debias == "none"
    assert main(["list", "debias"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Debiasing methods (--debias")
    assert all(f"  {n} " in out for n in registry.names("debias"))
