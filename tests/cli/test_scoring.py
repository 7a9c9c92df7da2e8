"""A saved model applied to a file (:mod:`torchrankboost.cli.scoring`): ``evaluate`` and
``predict`` after ``train`` (the model's own scores, in file order), the feature numbering
and the per-query normalisation the model records, written atomically, one line for a bad
model or a full disk."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrankboost.cli import main
from torchrankboost.data import load_svmlight, normalize_per_query
from torchrankboost.factory import load_model

from conftest import read_events

# the fixtures this module uses are imported by name (pytest finds them here)
from cli_helpers import (cli, letor_file, letor_rows, main_quiet, model_scores, one_error_line,
                         one_line, small, svm_files, train_model, trained, write_letor)


def test_train_fold_then_evaluate_and_predict(tmp_path, svm_files, capsys):
    fold = svm_files[0].parent
    model = tmp_path / "m.safetensors"
    rc = main(["train", "--data", str(fold), "--rounds", "8", "--max-leaves", "4",
               "--learner-param", "min_samples_leaf=5", "--loss", "hinge", "--quiet",
               "--logdir", str(tmp_path / "run"), "--output", str(model), "--metric", "map"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert re.search(r"^valid\s", cap.out, re.M) and "ndcg@10" in cap.out
    assert cap.err == ""  # --quiet
    assert model.is_file()
    assert {"metrics/valid/map", "metrics/valid/ndcg@10", "round/valid_loss"} <= set(
        read_events(tmp_path / "run").Tags()["scalars"])

    assert main(["evaluate", str(model), str(svm_files[2]), "-m", "ndcg@5", "auc"]) == 0
    out = capsys.readouterr().out
    assert "ndcg@5" in out and "test.txt" in out
    pred = tmp_path / "pred.txt"
    assert main(["predict", str(model), str(svm_files[2]), "-o", str(pred)]) == 0
    scores = np.loadtxt(pred)
    from torchrankboost.boosting import Ensemble
    from torchrankboost.data import load_svmlight

    d = load_svmlight(svm_files[2])
    ref = Ensemble.load(model).predict(d.X).numpy()
    np.testing.assert_allclose(scores, ref, rtol=1e-12)


def test_ranksvm_linear_model_round_trip(tmp_path, svm_files, capsys):
    model = tmp_path / "svm.safetensors"
    assert main(["train", "--data", str(svm_files[0]), "--test", str(svm_files[2]), "-a",
                 "ranksvm", "-p", "max_iter=30", "--quiet", "--no-tensorboard",
                 "--output", str(model)]) == 0
    assert "LinearRanker" in capsys.readouterr().out
    assert main(["evaluate", str(model), str(svm_files[2])]) == 0
    assert "ndcg@10" in capsys.readouterr().out
    assert main(["train", "-a", "ranksvm", "--loss", "hinge"]) == 2
    assert "own objective" in one_error_line(capsys.readouterr().err)


# ------------------------------------------------------------------ what the model records
def test_feature_numbering_is_decided_once_per_run_stored_and_used_by_evaluate(tmp_path):
    # 0-based files; the validation and scored files never use feature 0
    train = write_letor(tmp_path / "train.txt", letor_rows(0), zero_based=True)
    valid = write_letor(tmp_path / "valid.txt", letor_rows(1, skip_zero=True), zero_based=True)
    score = write_letor(tmp_path / "score.txt", letor_rows(2, skip_zero=True), zero_based=True)
    model = tmp_path / "m.safetensors"
    assert main_quiet(["train", "--data", train, "--valid", valid, "--rounds", 3, "-q",
                       "--no-tensorboard", "-o", model]) == 0
    from torchrankboost.factory import load_model

    assert load_model(model).info["zero_based"] is True
    pred = tmp_path / "p.txt"
    assert main_quiet(["predict", model, score, "-o", pred]) == 0
    from torchrankboost.data import load_svmlight

    X = load_svmlight(score, zero_based=True, n_features=4).X
    want = load_model(model).predict(X)
    got = torch.tensor([float(v) for v in pred.read_text().split()], dtype=torch.float64)
    torch.testing.assert_close(got, want)
    # an explicit numbering that contradicts the model is refused
    err = one_line(cli(["evaluate", model, score, "--zero-based", "no"], tmp_path), 2)
    assert "contradicts the model's 0-based" in err


def test_file_with_index_0_is_refused_by_a_one_based_model(trained):
    tmp, train, model = trained
    zero = write_letor(tmp / "zero.txt", letor_rows(3), zero_based=True)
    err = one_line(cli(["evaluate", model, zero], tmp), 2)
    assert "feature index 0" in err and "1-based" in err


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
    got = model_scores(path, letor_file, "--zero-based", "no", tmp_path=tmp_path)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    model.info["zero_based"] = bool(data.zero_based)  # recorded: no flag needed
    model.save(path)
    np.testing.assert_allclose(model_scores(path, letor_file, tmp_path=tmp_path), want, rtol=0,
                               atol=1e-12)


def test_normalize_scales_features_per_query(svm_files, tmp_path, capsys):
    model = tmp_path / "m.safetensors"
    assert main(["train", "--data", str(svm_files[0]), "--normalize", "--rounds", "3",
                 "--quiet", "--no-tensorboard", "--output", str(model)]) == 0
    capsys.readouterr()
    from torchrankboost.boosting import Ensemble

    # the trees split on thresholds in [0, 1]: the features were scaled per query
    ens = Ensemble.load(model)
    pred = tmp_path / "p.txt"
    assert main(["predict", str(model), str(svm_files[2]), "--normalize", "-o", str(pred)]) == 0
    from torchrankboost.data import load_svmlight, normalize_per_query

    d = load_svmlight(svm_files[2])
    ref = ens.predict(normalize_per_query(d.X, d.groups)).numpy()
    np.testing.assert_allclose(np.loadtxt(pred), ref, rtol=1e-12)
    assert main(["evaluate", str(model), str(svm_files[2]), "--normalize"]) == 0


def test_normalize_is_stored_in_the_model_and_applied_by_evaluate_and_predict(
        tmp_path, letor_file, capsys):
    """A model trained with --normalize scores with per-query scaling without the flag
    (the same scores as with it), a model trained without it refuses the flag in one line."""
    scaled = train_model(tmp_path, letor_file, "--normalize")
    info = load_model(scaled).info
    assert info["normalize"] is True and info["zero_based"] is False
    plain = model_scores(scaled, letor_file, tmp_path=tmp_path)
    np.testing.assert_array_equal(plain, model_scores(scaled, letor_file, "--normalize",
                                                 tmp_path=tmp_path))
    d = load_svmlight(letor_file)
    np.testing.assert_array_equal(plain, load_model(scaled).predict(
        normalize_per_query(d.X, d.groups)).numpy())
    capsys.readouterr()
    assert main(["evaluate", str(scaled), str(letor_file), "-m", "ndcg@10"]) == 0
    without = capsys.readouterr().out
    assert main(["evaluate", str(scaled), str(letor_file), "-m", "ndcg@10", "--normalize"]) == 0
    assert capsys.readouterr().out == without

    raw = train_model(tmp_path, letor_file)
    assert load_model(raw).info["normalize"] is False
    assert main(["predict", str(raw), str(letor_file), "--normalize"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(r"--normalize contradicts the model .*trained without per-query", err)


# ------------------------------------------------------------------ bad models, outputs
def test_out_of_range_split_feature_is_one_line_with_status_2(trained):
    import json

    from safetensors import safe_open

    tmp, train, model = trained
    with safe_open(str(model), framework="pt") as fh:
        meta = fh.metadata()
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    tensors["m0.split_feature"][0] = 1000
    bad = tmp / "bad.safetensors"
    # with a fresh checksum (a hand edit that recomputes it): the structure check refuses it
    from torchrankboost._modelfile import write_model_file

    write_model_file(bad, tensors, "ensemble", json.loads(meta["ensemble"]))
    err = one_line(cli(["predict", bad, train], tmp), 2)
    assert "invalid model file" in err and "split feature 1000" in err
    json.loads(meta["ensemble"])


def test_predict_output_is_written_atomically(trained, monkeypatch):
    from torchrankboost import _io, cli as cli_mod

    tmp, train, model = trained
    calls = []
    real = _io.atomic_write
    monkeypatch.setattr(_io, "atomic_write", lambda p, w, **k: (calls.append(p), real(p, w, **k)))
    out = tmp / "scores.txt"
    assert cli_mod.main(["predict", str(model), str(train), "-o", str(out)]) == 0
    assert calls == [str(out)] and len(out.read_text().split()) == 72


def test_full_disk_on_predict_is_one_line_with_status_2(trained):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    tmp, train, model = trained
    err = one_line(cli(["predict", model, train, "-o", "/dev/full"], tmp), 2)
    assert "/dev/full" in err


def test_disk_full_while_writing_predictions_is_one_line_and_keeps_the_old_file(
        trained, monkeypatch, capsys):
    import torchrankboost._io as io_mod
    from torchrankboost import cli as cli_mod

    tmp, train, model = trained
    out = tmp / "scores.txt"
    out.write_text("old\n")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io_mod.os, "fsync", full)
    assert cli_mod.main(["predict", str(model), str(train), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err
    assert out.read_text() == "old\n"


def test_tables_train_bin_predict_and_evaluate_by_column_names(tmp_path, capsys):
    """Parquet/Feather/CSV through the command line: the model of the Parquet file also from
    its bin cache; ``predict`` on a CSV of other role names writes the query ids beside the
    scores (text or a Parquet table), the scores of the feature columns the model records."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    from safetensors import safe_open

    from table_files import ranking_table, write

    train = write(ranking_table(60, 5, seed=7), tmp_path / "train.parquet", rows=50)
    test = ranking_table(20, 5, seed=9)
    renamed = test.rename_columns(["rel", "query", "f4", "f1", "f2", "f3", "f0"])
    csv = write(renamed, tmp_path / "test.csv")
    common = ["--rounds", "3", "--no-tensorboard", "-q", "--max-leaves", "4"]
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert main_quiet(["train", "--data", train, "-o", a] + common) == 0
    assert main_quiet(["bin", train, "-o", tmp_path / "t.trbin"]) == 0
    assert main_quiet(["train", "--data", train, "--cache", tmp_path / "t.trbin", "-o", b]
                      + common) == 0
    with safe_open(str(a), "pt") as fa, safe_open(str(b), "pt") as fb:
        assert all(torch.equal(fa.get_tensor(k), fb.get_tensor(k)) for k in fa.keys())
    model = load_model(a)
    assert model.info["feature_names"] == ["f0", "f1", "f2", "f3", "f4"]
    X = torch.from_numpy(np.column_stack([renamed.column(f"f{j}").to_numpy() for j in range(5)]))
    ref = model.predict(X).double().numpy()
    capsys.readouterr()
    roles = ["--label-column", "rel", "--qid-column", "query"]
    assert main(["predict", str(a), str(csv)] + roles) == 0
    lines = capsys.readouterr().out.splitlines()
    qid = test.column("qid").to_numpy()
    assert [int(x.split("\t")[0]) for x in lines] == qid.tolist()
    np.testing.assert_allclose([float(x.split("\t")[1]) for x in lines], ref, rtol=1e-12)
    assert main(["predict", str(a), str(csv), "-o", str(tmp_path / "s.parquet")] + roles) == 0
    out = pq.read_table(tmp_path / "s.parquet")
    assert out.column_names == ["query", "score"]
    np.testing.assert_allclose(out.column("score").to_numpy(), ref, rtol=1e-12)
    assert main(["evaluate", str(a), str(csv)] + roles) == 0
    assert main(["evaluate", str(a), str(csv)]) == 2
    assert "test.csv: no column 'label'" in one_error_line(capsys.readouterr().err)
    write(renamed.drop(["f3"]), tmp_path / "short.csv")
    assert main(["predict", str(a), str(tmp_path / "short.csv")] + roles) == 2
    assert "f3" in one_error_line(capsys.readouterr().err)
    assert pa is not None
