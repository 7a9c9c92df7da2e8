"""What a model records about its preprocessing is applied by `evaluate`/`predict`, and
model outputs named like another format are refused before training."""

import re

import numpy as np
import pytest

from torchrankboost.cli import main
from torchrankboost.data import load_svmlight, make_letor, normalize_per_query
from torchrankboost.factory import load_model


@pytest.fixture(scope="module")
def letor_file(tmp_path_factory):
    d = make_letor(12, 8, 5, n_grades=3, seed=5)
    X = d.X.numpy() * np.linspace(1.0, 50.0, 5)  # unscaled features: normalising matters
    lines = [f"{int(y)} qid:{int(q)} " + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
             for y, q, row in zip(d.labels.tolist(), d.qid.tolist(), X)]
    p = tmp_path_factory.mktemp("letor") / "train.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def _train(tmp_path, data, *extra):
    model = tmp_path / "m.safetensors"
    assert main(["train", "--data", str(data), "--valid", str(data), "--rounds", "3",
                 "--max-leaves", "4", "--learner-param", "min_samples_leaf=2", "--quiet",
                 "--no-tensorboard", "--output", str(model), *extra]) == 0
    return model


def _scores(model, data, *extra, tmp_path):
    out = tmp_path / "s.out"
    assert main(["predict", str(model), str(data), "-o", str(out), *extra]) == 0
    return np.loadtxt(out)


def test_normalize_is_stored_in_the_model_and_applied_by_evaluate_and_predict(
        tmp_path, letor_file, capsys):
    """A model trained with --normalize scores with per-query scaling without the flag
    (the same scores as with it), a model trained without it refuses the flag in one line."""
    scaled = _train(tmp_path, letor_file, "--normalize")
    info = load_model(scaled).info
    assert info["normalize"] is True and info["zero_based"] is False
    plain = _scores(scaled, letor_file, tmp_path=tmp_path)
    np.testing.assert_array_equal(plain, _scores(scaled, letor_file, "--normalize",
                                                 tmp_path=tmp_path))
    d = load_svmlight(letor_file)
    np.testing.assert_array_equal(plain, load_model(scaled).predict(
        normalize_per_query(d.X, d.groups)).numpy())
    capsys.readouterr()
    assert main(["evaluate", str(scaled), str(letor_file), "-m", "ndcg@10"]) == 0
    without = capsys.readouterr().out
    assert main(["evaluate", str(scaled), str(letor_file), "-m", "ndcg@10", "--normalize"]) == 0
    assert capsys.readouterr().out == without

    raw = _train(tmp_path, letor_file)
    assert load_model(raw).info["normalize"] is False
    assert main(["predict", str(raw), str(letor_file), "--normalize"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(r"--normalize contradicts the model .*trained without per-query", err)


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


def test_model_saved_from_python_without_numbering_needs_zero_based_to_score_a_file(
        tmp_path, letor_file, capsys):
    """A model that records no feature numbering (fitted and saved from Python) is not
    applied to a file by guessing: `predict`/`evaluate` ask for --zero-based; with it (or
    with the numbering recorded in ``model.info``) the scores are the model's own."""
    from torchrankboost import Booster, ExponentialPairwiseLoss, RegressionTree

    data = load_svmlight(letor_file)
    model = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3,
                    verbose=False).fit(data.X, data.labels, data.groups)
    path = tmp_path / "py.safetensors"
    model.save(path)
    assert main(["predict", str(path), str(letor_file), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "records no feature numbering" in err and "--zero-based" in err
    assert main(["evaluate", str(path), str(letor_file)]) == 2
    want = model.predict(data.X).numpy()
    got = _scores(path, letor_file, "--zero-based", "no", tmp_path=tmp_path)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    model.info["zero_based"] = bool(data.zero_based)  # recorded: no flag needed
    model.save(path)
    np.testing.assert_allclose(_scores(path, letor_file, tmp_path=tmp_path), want, rtol=0,
                               atol=1e-12)
