"""What the command-line tests share: the command run in a fresh process (``python -m
torchrankboost``) or in this one, the one-line error checks, and small LETOR files written for
a run (the fixtures ``svm_files``, ``small``, ``trained``, ``data``, ``letor_file``,
``full_disk``: a test module imports the fixtures it uses, and those they depend on)."""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrankboost.cli import main
from torchrankboost.data import make_letor

ROOT = Path(__file__).resolve().parents[2]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ------------------------------------------------------------------ running the command
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


def cli(args, cwd, timeout=180):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torchrankboost", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)


def main_quiet(args):
    """Set-up steps (not the faults under test) run in-process: faster than a subprocess."""
    from torchrankboost import cli as cli_mod

    return cli_mod.main([str(a) for a in args])


def one_line(r, status):
    err = r.stderr.strip()
    assert r.returncode == status, (r.returncode, err[-2000:])
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def captured_one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# ------------------------------------------------------------------ data files
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


def write_letor(path, rows, *, zero_based):
    """rows: (label, qid, {index: value}) written with the given numbering."""
    with open(path, "w") as fh:
        for label, q, feats in rows:
            items = " ".join(f"{i if zero_based else i + 1}:{v}" for i, v in sorted(feats.items()))
            fh.write(f"{label} qid:{q} {items}\n")
    return path


def letor_rows(seed, n_queries=12, F=4, skip_zero=False):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for q in range(n_queries):
        for _ in range(6):
            x = torch.rand(F, generator=g)
            label = int(x[0] + x[2] > 1.0)
            feats = {j: round(float(x[j]), 4) for j in range(F) if not (skip_zero and j == 0)}
            rows.append((label, q, feats))
    return rows


@pytest.fixture
def small(tmp_path):
    train = write_letor(tmp_path / "train.txt", letor_rows(0), zero_based=False)
    valid = write_letor(tmp_path / "valid.txt", letor_rows(1), zero_based=False)
    return tmp_path, train, valid


@pytest.fixture
def trained(small):
    """``(folder, train file, model file)``: a 2-round model trained by the CLI in-process."""
    tmp, train, _ = small
    model = tmp / "m.safetensors"
    assert main_quiet(["train", "--data", train, "--rounds", 2, "-q", "--no-tensorboard",
                       "-o", model]) == 0
    return tmp, train, model


def rows_file(path, seed, n_queries=10, F=4):
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as fh:
        for q in range(n_queries):
            for _ in range(6):
                x = torch.rand(F, generator=g)
                items = " ".join(f"{j + 1}:{float(x[j]):.4f}" for j in range(F))
                fh.write(f"{int(x[0] + x[2] > 1.0)} qid:{q} {items}\n")
    return path


@pytest.fixture
def data(tmp_path):
    return rows_file(tmp_path / "train.txt", 0)


@pytest.fixture(scope="module")
def letor_file(tmp_path_factory):
    d = make_letor(12, 8, 5, n_grades=3, seed=5)
    X = d.X.numpy() * np.linspace(1.0, 50.0, 5)  # unscaled features: normalising matters
    lines = [f"{int(y)} qid:{int(q)} " + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
             for y, q, row in zip(d.labels.tolist(), d.qid.tolist(), X)]
    p = tmp_path_factory.mktemp("letor") / "train.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def train_model(tmp_path, data, *extra):
    model = tmp_path / "m.safetensors"
    assert main(["train", "--data", str(data), "--valid", str(data), "--rounds", "3",
                 "--max-leaves", "4", "--learner-param", "min_samples_leaf=2", "--quiet",
                 "--no-tensorboard", "--output", str(model), *extra]) == 0
    return model


def model_scores(model, data, *extra, tmp_path):
    out = tmp_path / "s.out"
    assert main(["predict", str(model), str(data), "-o", str(out), *extra]) == 0
    return np.loadtxt(out)


# ------------------------------------------------------------------ a full disk
def try_mount_tmpfs(folder: Path) -> bool:
    if not (hasattr(os, "geteuid") and os.geteuid() == 0) or shutil.which("mount") is None:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0777", "tmpfs",
                        str(folder)], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def full_disk(monkeypatch):
    """A folder where every model write fails as on a full disk: a real full tmpfs when it
    can be mounted, else the safetensors writer raising its own error there."""
    folder = Path(tempfile.mkdtemp(prefix="trb-full-"))
    mounted = try_mount_tmpfs(folder)
    try:
        if mounted:
            fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 4096)
            os.close(fd)
        else:
            import safetensors.torch
            from safetensors import SafetensorError

            real = safetensors.torch.save_file

            def full(tensors, filename, metadata=None):
                if Path(filename).resolve().is_relative_to(folder.resolve()):
                    raise SafetensorError("Error while serializing: I/O error: No space left "
                                          "on device (os error 28)")
                return real(tensors, filename, metadata=metadata)

            monkeypatch.setattr(safetensors.torch, "save_file", full)
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=False)
        shutil.rmtree(folder, ignore_errors=True)
