"""``train --config FILE``: the file's options under the command line's flags, one line for
a bad file, and the resolved options saved beside the model (read back, the same run)."""

import sys

import pytest

from torchrankboost.cli import TrainOptions, main
from torchrankboost.cli.config import config_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the command reads TOML with tomli
    tomllib = pytest.importorskip("tomli")


def _toml(path):
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def test_flags_override_the_file_and_the_run_saves_its_options(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('data = "synthetic"\nloss = "pnorm_push"\nrounds = 5\nmax-leaves = 7\n'
                   'tensorboard = false\nquiet = true\nzero_based = false\n\n'
                   '[loss_params]\np = 4\n\n[learner_params]\nl2 = 0.5\n')
    out = tmp_path / "m.safetensors"
    rc = main(["train", "--config", str(cfg), "--rounds", "3", "--learner-param",
               "min_samples_leaf=5", "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "pnorm_push on synthetic: Ensemble, 3 rounds" in cap.out  # --rounds won
    saved = tmp_path / "m.config.toml"
    assert f"its options in {saved}" in cap.out
    got = _toml(saved)
    assert got["rounds"] == 3 and got["max_leaves"] == 7 and got["loss"] == "pnorm_push"
    assert got["loss_params"] == {"p": 4}
    assert got["learner_params"] == {"l2": 0.5, "min_samples_leaf": 5}  # merged
    assert got["tensorboard"] is False and got["zero_based"] is False
    assert got["output"] == str(out)
    # read back: the same options (the saved file is a config file)
    rc = main(["train", "--config", str(saved), "-o", str(tmp_path / "again.safetensors")])
    assert rc == 0, capsys.readouterr().err
    again = _toml(tmp_path / "again.config.toml")
    assert {k: v for k, v in again.items() if k != "output"} == \
        {k: v for k, v in got.items() if k != "output"}


@pytest.mark.parametrize("text, message", [
    ("bogus = 1\n", "unknown key 'bogus'"),
    ('rounds = "ten"\n', "rounds must be an integer, got 'ten'"),
    ("loss_params = 4\n", "loss_params must be a table"),
    ('zero_based = "maybe"\n', "zero_based must be one of"),
    ("rounds = \n", "not a valid TOML file"),
])
def test_a_bad_file_is_one_line_naming_it(tmp_path, capsys, text, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    rc = main(["train", "--config", str(cfg), "--no-tensorboard", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"torchrankboost: error: --config {cfg}: ") and message in err[0]


def test_config_text_is_toml_of_every_set_option():
    opts = TrainOptions(data="a b\"c", rounds=4, report=["ndcg@10", "map"],
                        propensity=[1.0, 0.5], params={"subsample": 0.8, "seed": 3},
                        learning_rate=float("inf"), tensorboard=False)
    got = tomllib.loads(config_text(opts))
    assert got["data"] == 'a b"c' and got["report"] == ["ndcg@10", "map"]
    assert got["propensity"] == [1.0, 0.5] and got["params"] == {"subsample": 0.8, "seed": 3}
    assert got["learning_rate"] == float("inf") and "valid" not in got  # None left out
