"""What the commands share (:mod:`torchrankboost.cli.inputs`): ``KEY=VALUE`` parameters, saved
models read with one-line errors, outputs refused before any work (an input, a folder, under
a file, read-only, named like another format)."""

import os

import pytest

from torchrankboost.cli import CLIError, main, parse_params

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import IS_ROOT, cli, letor_file, one_line, small, trained


def test_parse_params():
    assert parse_params(["p=4", "l2=0.5,criterion=correlation", "flag=true", "x=none"]) == \
        {"p": 4, "l2": 0.5, "criterion": "correlation", "flag": True, "x": None}
    with pytest.raises(CLIError, match="KEY=VALUE"):
        parse_params(["oops"])


def test_bad_model_paths_are_one_line_with_status_2(small):
    tmp, train, _ = small
    err = one_line(cli(["evaluate", tmp, train], tmp), 2)
    assert "is a folder" in err and "No such device" not in err
    os.mkfifo(tmp / "pipe")
    err = one_line(cli(["evaluate", tmp / "pipe", train], tmp, timeout=60), 2)
    assert "not a regular file" in err
    if not IS_ROOT:
        m = tmp / "m.safetensors"
        m.write_bytes(b"x")
        m.chmod(0)
        err = one_line(cli(["evaluate", m, train], tmp), 2)
        assert "permission denied" in err and "No such file" not in err


# ------------------------------------------------------------------ outputs checked first
def test_output_equal_to_an_input_is_refused(trained):
    tmp, train, model = trained
    before = train.read_bytes()
    err = one_line(cli(["train", "--data", train, "--rounds", 2, "-q", "--no-tensorboard",
                        "-o", train], tmp), 2)
    assert "also an input" in err and train.read_bytes() == before
    saved = model.read_bytes()
    for out in (model, train):
        err = one_line(cli(["predict", model, train, "-o", out], tmp), 2)
        assert "also an input" in err
    assert model.read_bytes() == saved and train.read_bytes() == before


@pytest.mark.skipif(IS_ROOT, reason="root writes read-only files")
def test_read_only_output_is_not_silently_replaced(trained):
    tmp, train, model = trained
    out = tmp / "scores.txt"
    out.write_text("keep\n")
    out.chmod(0o444)
    err = one_line(cli(["predict", model, train, "-o", out], tmp), 2)
    assert "read-only" in err and out.read_text() == "keep\n"


def test_output_under_a_file_or_onto_a_folder_is_refused_before_training(small):
    tmp, train, _ = small
    for out, why in ((tmp / "train.txt" / "m.st", "is a file, not a folder"),
                     (tmp, "is a directory")):
        err = one_line(cli(["train", "--data", train, "--rounds", 500, "-q",
                            "--no-tensorboard", "-o", out], tmp, timeout=60), 2)
        assert why in err


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only folders")
def test_output_in_a_read_only_folder_is_refused_before_training(small):
    tmp, train, _ = small
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_line(cli(["train", "--data", train, "--rounds", 500, "-q",
                            "--no-tensorboard", "-o", ro / "m.safetensors"], tmp, 60), 2)
        assert "cannot write" in err
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("name", ["m.json", "m.txt"])
def test_train_refuses_model_outputs_named_like_another_format(tmp_path, letor_file, capsys,
                                                               name):
    """`-o m.json` would get binary safetensors: refused at once, before any training."""
    rc = main(["train", "--data", str(letor_file), "--rounds", "2", "--quiet",
               "--no-tensorboard", "--output", str(tmp_path / name)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "model files are safetensors" in err and ".safetensors (or none)" in err
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("flags, hint", [
    (["-p", "num_leaves=15"], "num_leaves: use --max-leaves N"),
    (["--learner-param", "num_leaves=15"], "num_leaves: use --max-leaves N"),
    (["-p", "n_estimators=15"], "n_estimators: use --rounds N"),
    (["-p", "max_depth=3"], "max_depth: use --learner-param max_depth=D"),
])
def test_their_parameter_names_point_to_our_flags(flags, hint, capsys):
    """An unknown ``-p`` / ``--learner-param`` key that LightGBM or XGBoost would take (or
    one of ours given to the wrong flag) is one line naming the flag that takes it."""
    from torchrankboost.cli import main

    rc = main(["train", "--data", "synthetic", "--rounds", "2", "--no-tensorboard", "-q",
               *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and hint in err[0], err
