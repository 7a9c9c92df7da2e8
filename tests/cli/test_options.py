"""``TrainOptions`` (:mod:`torchrankboost.cli.options`): the typed options of one run, built
once from the ``train`` flags or directly in Python, checked when built (one-line
``ValueError``s naming the option as Python spells it, and as the command line does), and
``run_training`` from Python trains what the command trains, bit for bit."""

import dataclasses

import pytest
import torch
from safetensors import safe_open

import torchrankboost
from torchrankboost.cli import OptionError, TrainOptions, main, run_training
from torchrankboost.cli.main import build_parser
from torchrankboost.cli.train import flag, train_options

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import captured_one_line, data, main_quiet


# ------------------------------------------------------------------ run names
@pytest.mark.parametrize("name", ["../..", "a/b", "..", "x..y", "a\\b", ""])
def test_run_name_cannot_write_outside_runs(tmp_path, data, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.parent.iterdir())
    assert main_quiet(["train", "--data", data, "--rounds", 1, "-q", "--name", name]) == 2
    err = captured_one_line(capsys)
    assert "--name" in err and "separators" in err
    assert set(tmp_path.parent.iterdir()) == before and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["my-run.v2", "mq2008 fold1", "a.b_c"])
def test_plain_run_names_are_accepted(name):
    from torchrankboost.cli.options import check_run_name

    check_run_name(name)


# ------------------------------------------------------------------ built from the flags
def test_no_flag_builds_the_default_options():
    assert train_options(build_parser().parse_args(["train"])) == TrainOptions()


def test_flags_become_typed_options():
    args = build_parser().parse_args([
        "train", "--data", "x.txt", "-a", "qbrank", "-p", "subsample=0.8", "--loss-param",
        "p=4", "--learner-param", "l2=1,n_bins=15", "--zero-based", "no", "--no-tensorboard",
        "--report", "map", "auc", "--debias", "ipw", "--propensity", "1,0.5", "--lr", "0.2",
        "-n", "7"])
    o = train_options(args)
    assert (o.data, o.algorithm, o.rounds, o.learning_rate) == ("x.txt", "qbrank", 7, 0.2)
    assert o.params == {"subsample": 0.8} and o.loss_params == {"p": 4}
    assert o.learner_params == {"l2": 1, "n_bins": 15}
    assert o.zero_based is False and o.tensorboard is False and o.report == ("map", "auc")
    assert o.debias == "ipw" and o.propensity == (1.0, 0.5)
    # --propensity is read with a debiasing method only
    assert train_options(build_parser().parse_args(["train", "--propensity", "x"])
                         ).propensity is None


# ------------------------------------------------------------------ checked when built
#: (options, the message as Python spells it, as the command line spells it)
BAD_OPTIONS = [
    (dict(seed=-1), "seed must be an integer in [0, 2^63), got -1",
     "--seed must be an integer in [0, 2^63), got -1"),
    (dict(name="a/b"), "name 'a/b': a run name is one folder name under runs/ (no path "
     "separators, no '..'); use logdir=DIR to choose the folder",
     "--name 'a/b': a run name is one folder name under runs/ (no path separators, no '..'); "
     "use --logdir DIR to choose the folder"),
    (dict(init_model="a", resume="b"), "give init_model or resume, not both",
     "give --init-model or --resume, not both"),
    (dict(checkpoint_every=0), "checkpoint_every must be >= 1, got 0",
     "--checkpoint-every must be >= 1, got 0"),
    (dict(threads=0), "threads must be a positive integer or None, got 0",
     "--threads must be a positive integer or None, got 0"),
    (dict(rounds="5"), "rounds must be an integer or None, got '5'", "--rounds must be"),
    (dict(learning_rate="0.1"), "learning_rate must be a number or None", "--learning-rate"),
    (dict(zero_based="yes"), "zero_based must be 'auto', True or False, got 'yes'",
     "--zero-based must be"),
    (dict(debias="nope"), "debias must be one of 'none', 'ipw', 'em', 'dla', 'additive', "
     "got 'nope'", "--debias must be one of"),
    (dict(tensorboard=1), "tensorboard must be True or False, got 1", "--no-tensorboard"),
    (dict(params=[("p", 1)]), "params must be a dict of parameters by name", "--param must"),
    (dict(loss_params={1: 2}), "loss_params must be a dict of parameters by name",
     "--loss-param must"),
    (dict(report="ndcg@10"), "report must be a list of names or None, got 'ndcg@10'",
     "--report must"),
    (dict(propensity=[1, "x"]), "propensity must be a list of numbers or None",
     "--propensity must"),
    (dict(data=None), "data must be a string, got None", "--data must"),
]


@pytest.mark.parametrize("kwargs, python, cli", BAD_OPTIONS,
                         ids=[next(iter(k)) for k, _, _ in BAD_OPTIONS])
def test_bad_options_are_one_line_value_errors_for_python_and_the_cli(kwargs, python, cli):
    with pytest.raises(ValueError) as info:
        TrainOptions(**kwargs)
    assert isinstance(info.value, OptionError) and "\n" not in str(info.value)
    assert str(info.value).startswith(python), str(info.value)
    assert info.value.spelled(flag).startswith(cli), info.value.spelled(flag)


def test_options_are_keyword_only_frozen_and_hold_paths_as_text(tmp_path):
    o = TrainOptions(data=tmp_path / "t.txt", params={"p": 1}, report=["map"],
                     propensity=[1, 0.5])
    assert o.data == str(tmp_path / "t.txt") and o.report == ("map",)
    assert o.propensity == (1.0, 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 1
    with pytest.raises(TypeError):
        o.params["q"] = 2  # a read-only view of the parameters
    with pytest.raises(TypeError):
        TrainOptions("wdbc")
    assert dataclasses.replace(o, seed=5).seed == 5 and o.seed == 0


# ------------------------------------------------------------------ run from Python
def _tensors(path):
    with safe_open(str(path), "pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}


def test_run_training_from_python_trains_the_command_s_model(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert main(["train", "--data", "synthetic", "--rounds", "3", "--max-leaves", "5",
                 "--loss", "pnorm_push", "--loss-param", "p=2", "-q", "--no-tensorboard",
                 "-o", str(a)]) == 0
    result = run_training(TrainOptions(data="synthetic", rounds=3, max_leaves=5,
                                       loss="pnorm_push", loss_params={"p": 2}, quiet=True,
                                       tensorboard=False, output=str(b)))
    assert result.out_path == str(b) and set(result.rows) == {"train", "valid", "test"}
    assert result.plan.label == "pnorm_push" and result.model.n_rounds == 3
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert torchrankboost.TrainOptions is TrainOptions
    assert torchrankboost.run_training is run_training
    with pytest.raises(TypeError, match="takes a TrainOptions"):
        run_training({"data": "wdbc"})
