"""The `torchrankboost` command: default run (README's first command), list, train on files,
evaluate/predict round trip, and bad input (one line, exit status != 0, no traceback)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrankboost import registry
from torchrankboost.cli import main, parse_params, CLIError

from conftest import read_events

ROOT = Path(__file__).resolve().parents[1]


def run_cli(args, cwd, timeout=120, *, console_script=False):
    """Run the command in a fresh process: ``python -m torchrankboost`` or, with
    ``console_script``, the installed ``torchrankboost`` script next to this Python (as the
    README runs it) when it exists."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    script = Path(sys.executable).parent / "torchrankboost"
    cmd = [str(script)] if console_script and script.exists() else \
        [sys.executable, "-m", "torchrankboost"]
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def one_error_line(capsys_or_text):
    err = capsys_or_text.strip()
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("torchrankboost: error: ")
    return lines[0]


# ------------------------------------------------------------------ the README's first command
def test_readme_first_command_trains_prints_metrics_and_writes_events(tmp_path):
    readme = (ROOT / "README.md").read_text()
    first = [l for l in readme.splitlines() if "pip install -e . " in l or "pip install -e . &&" in l]
    assert first and first[0].rstrip().endswith("torchrankboost train"), \
        "README's first command must end with `torchrankboost train`"
    r = run_cli(["train"], cwd=tmp_path, timeout=300, console_script=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert re.search(r"^test\s+\d\.\d{4}", out, re.M), out  # the final metric table
    assert "auc" in out and "tensorboard --logdir runs" in out
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1 and runs[0].name.startswith("wdbc-exponential-")
    # the HParams columns: one definition for the log folder, beside the run folders
    assert "_hparams_/experiment" in read_events(tmp_path / "runs").PluginTagToContent(
        "hparams")
    assert (runs[0] / "model.safetensors").is_file()
    ea = read_events(runs[0])
    tags = ea.Tags()
    # the curves that matter under metrics/ (normalised loss, no duplicate of it elsewhere)
    assert {"metrics/loss_per_query", "train/auc", "metrics/valid/auc",
            "metrics/valid/ndcg@10", "metrics/valid/map", "metrics/valid/pair_error",
            "metrics/step_size", "metrics/seconds_per_round", "round/valid_loss",
            "round/grad_norm", "round/curvature_norm",
            "summary/test/auc"} <= set(tags["scalars"])
    assert not {"round/loss", "train/loss", "round/learning_rate"} & set(tags["scalars"])
    assert {"weak_model/leaf_value", "scores/test"} <= set(tags["histograms"])
    assert "weak_model/left_child" not in tags["histograms"]
    assert "summary/test_pr_curve" in tags["tensors"]
    assert "summary/test_roc_pr" in tags["images"]
    assert "summary/final_metrics/text_summary" in tags["tensors"]
    assert "_hparams_/session_start_info" in ea.PluginTagToContent("hparams")


# ------------------------------------------------------------------ list
def test_list_all_and_one_kind(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for title in ("Losses", "Algorithms", "Weak learners", "Metrics"):
        assert title in out
    for n in registry.names("loss") + registry.names("algorithm") + registry.names("learner"):
        assert re.search(rf"^\s+{re.escape(n)}\s+\S", out, re.M), n
    assert main(["list", "losses"]) == 0
    out = capsys.readouterr().out
    assert "exponential" in out and "rankboost_plus" not in out


def test_every_registered_name_resolves():
    for kind in ("loss", "algorithm", "learner"):
        for e in registry.entries(kind):
            try:
                e.resolve()
            except (ImportError, AttributeError) as exc:  # a peer module not written yet
                pytest.skip(f"{kind} {e.name}: {exc}")
    for m in registry.names("metric"):
        registry.metric(m.replace("@k", "@5"))


def test_registry_lookup_and_parameters():
    assert registry.lookup("loss", "P-Norm-Push").name == "pnorm_push"
    assert registry.lookup("losses", "exp").name == "exponential"  # plural kind, an alias
    loss = registry.create("loss", "pnorm_push", p=4)
    assert loss.p == 4
    with pytest.raises(ValueError, match="valid parameters: .*p"):
        registry.create("loss", "pnorm_push", q=3)
    with pytest.raises(ValueError, match="valid choices: .*exponential"):
        registry.lookup("loss", "nope")
    m = registry.metric("NDCG@3")
    assert m.name == "ndcg@3" and m.greater_is_better
    assert not registry.metric("pair_error").greater_is_better
    with pytest.raises(ValueError, match="valid choices"):
        registry.metric("ndcg@0")


def test_parse_params():
    assert parse_params(["p=4", "l2=0.5,criterion=correlation", "flag=true", "x=none"]) == \
        {"p": 4, "l2": 0.5, "criterion": "correlation", "flag": True, "x": None}
    with pytest.raises(CLIError, match="KEY=VALUE"):
        parse_params(["oops"])


def test_importing_the_package_does_not_import_the_cli():
    code = "import sys, torchrankboost; print('torchrankboost.cli' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# ------------------------------------------------------------------ train on files + evaluate/predict
@pytest.fixture
def svm_files(tmp_path):
    from sklearn.datasets import dump_svmlight_file

    from torchrankboost.data import make_letor

    d = make_letor(40, 12, 6, 3, seed=1)
    paths = []
    for name, lo, hi in (("train", 0, 24), ("vali", 24, 32), ("test", 32, 40)):
        off = d.groups.offsets
        a, b = int(off[lo]), int(off[hi])
        p = str(tmp_path / f"{name}.txt")
        dump_svmlight_file(d.X[a:b].numpy(), d.labels[a:b].numpy(), p,
                           query_id=d.qid[a:b].numpy(), zero_based=False)
        paths.append(Path(p))
    return paths


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


def test_train_algorithm_by_name_with_params(tmp_path, capsys):
    rc = main(["train", "--algorithm", "pnorm_push", "-p", "p=2", "--rounds", "5", "--quiet",
               "--no-tensorboard", "--output", str(tmp_path / "m.safetensors")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "pnorm_push on wdbc" in cap.out
    # a paper's algorithm: validation metrics per round and its own diagnostics
    rc = main(["train", "-a", "smooth_margin", "--rounds", "6", "--quiet",
               "--logdir", str(tmp_path / "sm")])
    assert rc == 0, capsys.readouterr().err
    tags = set(read_events(tmp_path / "sm").Tags()["scalars"])
    assert {"metrics/valid/auc", "metrics/valid/pair_error", "metrics/step_size", "round/margin",
            "round/smooth_margin"} <= tags
    assert "round/candidate" not in tags


@pytest.mark.parametrize("algorithm", registry.names("algorithm"))
def test_every_algorithm_trains_from_the_cli(algorithm, svm_files, tmp_path, capsys):
    size = ["-p", "max_iter=5"] if algorithm == "ranksvm" else ["--rounds", "2"]
    model = tmp_path / "m.safetensors"
    rc = main(["train", "--data", str(svm_files[0].parent), "-a", algorithm, *size, "--quiet",
               "--logdir", str(tmp_path / "run"), "--output", str(model)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    label = "exponential" if algorithm == "boost" else algorithm  # the driver: its loss
    assert f"{label} on " in cap.out and model.is_file()
    assert "metrics/valid/ndcg@10" in read_events(tmp_path / "run").Tags()["scalars"]
    assert main(["evaluate", str(model), str(svm_files[2])]) == 0


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("args, pattern", [
    (["train", "--loss", "nope"], r"unknown loss 'nope'; valid choices: .*exponential"),
    (["train", "--algorithm", "nope"], r"unknown algorithm 'nope'; valid choices: .*rankboost"),
    (["train", "--learner", "forest"], r"unknown learner 'forest'; valid choices: .*tree"),
    (["train", "--metric", "ndgc@10"], r"unknown metric 'ndgc@10'; valid choices: .*ndcg@k"),
    (["train", "--loss-param", "q=2", "--loss", "pnorm_push", "--rounds", "1"],
     r"unknown parameter 'q' for loss 'pnorm_push'; valid parameters: p"),
    (["train", "--data", "nope"], r"data not found: 'nope'"),
    (["train", "--data", "/no/such/file.txt"], r"data not found"),
    (["train", "--valid", "/no/such/vali.txt"], r"file not found: /no/such/vali.txt"),
    (["train", "--device", "cuda:7"] if not torch.cuda.is_available() else
     ["train", "--device", "warp"], r"device"),
    (["train", "--param", "oops"], r"--param expects KEY=VALUE"),
    (["list", "widgets"], r"unknown list 'widgets'; valid choices"),
    (["evaluate", "/no/model.safetensors", "/no/data.txt"], r"model not found"),
    (["predict", "/no/model.safetensors", "/no/data.txt"], r"model not found"),
])
def test_bad_input_is_one_line(args, pattern, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(args)
    cap = capsys.readouterr()
    assert rc != 0
    line = one_error_line(cap.err)
    assert re.search(pattern, line), line
    assert not (tmp_path / "runs").exists()  # no run directory for a bad command


def test_malformed_and_missing_files(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:0.5 2:0.1\n0 qid:1 1:abc 2:0.3\n")
    assert main(["train", "--data", str(bad), "--rounds", "1"]) != 0
    line = one_error_line(capsys.readouterr().err)
    assert "bad.txt" in line and ":2" in line  # names the file and the line

    notmodel = tmp_path / "model.safetensors"
    notmodel.write_text("not a model")
    good = tmp_path / "good.txt"
    good.write_text("1 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    assert main(["predict", str(notmodel), str(good)]) != 0
    line = one_error_line(capsys.readouterr().err)
    assert "cannot load model" in line
    fold = tmp_path / "fold"
    fold.mkdir()
    assert main(["train", "--data", str(fold)]) != 0
    assert "not a LETOR fold folder" in one_error_line(capsys.readouterr().err)


def test_numerical_failure_is_one_line_and_status_1(tmp_path, capsys):
    """RankBoost on separable data: the first stump orders every pair, its exact step is
    infinite; with on_unbounded=raise the run stops with a NumericalError."""
    sep = tmp_path / "separable.txt"
    sep.write_text("1 qid:1 1:1.0 2:0.3\n0 qid:1 1:0.0 2:0.5\n1 qid:1 1:0.9 2:0.1\n"
                   "0 qid:1 1:0.1 2:0.2\n")
    rc = main(["train", "--data", str(sep), "-a", "rankboost", "--learner", "stump",
               "-p", "on_unbounded=raise", "--rounds", "3", "--quiet", "--no-tensorboard",
               "--output", str(tmp_path / "m.safetensors")])
    cap = capsys.readouterr()
    assert rc == 1, cap.err
    one_error_line(cap.err)
    assert not (tmp_path / "m.safetensors").exists()


def test_bad_input_from_the_real_entry_point(tmp_path):
    r = run_cli(["train", "--loss", "nope"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    one_error_line(r.stderr)
    assert not (tmp_path / "runs").exists()  # nothing written for a bad name


def test_readme_snippets_compile_and_import_real_names():
    """Every Python snippet of the README compiles and imports names that exist (the
    snippets themselves were run by hand; they take minutes together)."""
    import ast
    import importlib

    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    for b in blocks:
        tree = ast.parse(b)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("torchrankboost"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(mod, alias.name), f"{node.module}.{alias.name}"


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


# ------------------------------------------------------------------ command-line details
def test_list_into_a_closed_pipe_prints_no_traceback(tmp_path):
    """`torchrankboost list | head -2`: the reader leaves early; no BrokenPipeError trace."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "-m", "torchrankboost", "list"], cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert err == "", err
    r = subprocess.run(f"'{sys.executable}' -m torchrankboost list losses | head -2",
                       shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert len(r.stdout.splitlines()) == 2 and "Traceback" not in r.stderr, r.stderr


def test_train_help_texts(tmp_path):
    r = run_cli(["train", "--help"], cwd=tmp_path)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "<logdir>/model.safetensors" in text
    assert "--threads N" in text and "default 1" in text
    assert "--normalize" in text and "per-query" in text


def test_run_named_after_the_data_folder_and_file(svm_files, tmp_path, capsys):
    from torchrankboost.cli.training import data_name as _data_name

    fold = svm_files[0].parent
    assert _data_name(str(svm_files[0]), "train") == f"{fold.name}-train"
    letor = tmp_path / "mq2008" / "Fold3"
    letor.mkdir(parents=True)
    assert _data_name(str(letor), "Fold3") == "mq2008-Fold3"
    assert _data_name(str(letor / "x.txt"), "x") == "x"  # not a file: the loader's name
    assert _data_name("wdbc", "wdbc") == "wdbc"
    rc = main(["train", "--data", str(svm_files[0]), "--valid", str(svm_files[1]),
               "--rounds", "30", "--early-stopping", "2", "--max-leaves", "4", "--quiet",
               "--no-tensorboard", "--output", str(tmp_path / "m.safetensors")])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"exponential on {fold.name}-train:" in out
    m = re.search(r"(\d+) rounds? \(the best on validation; (\d+) rounds run\)", out)
    assert m and int(m.group(1)) < int(m.group(2)), out


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


def test_threads_option_sets_torch_threads(svm_files, tmp_path, capsys):
    before = torch.get_num_threads()
    try:
        assert main(["train", "--data", str(svm_files[0]), "--rounds", "1", "--threads", "2",
                     "--quiet", "--no-tensorboard",
                     "--output", str(tmp_path / "m.safetensors")]) == 0
        assert torch.get_num_threads() == 2
        assert main(["list", "losses"]) == 0
        assert torch.get_num_threads() == 1  # the default
        assert main(["train", "--threads", "0", "--quiet"]) == 2
        assert "--threads must be a positive integer" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
