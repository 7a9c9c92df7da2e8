"""``train`` keeps what it trained: run names stay under ``runs/``, a full disk at the final
or the partial save never ends in a traceback (the model goes to the fallback file, or one
line says that nothing could be saved and why), and a second Ctrl-C during the partial save
cannot lose it.

The full disk is real: a small tmpfs filled to the last byte (mounted when the tests run as
root with mount rights). Elsewhere the writer's own failure is injected instead:
``safetensors.torch.save_file`` raises a real ``SafetensorError`` with the message safetensors
gives on a full disk, for files in that folder.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _rows_file(path, seed, n_queries=10, F=4):
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
    return _rows_file(tmp_path / "train.txt", 0)


def _try_mount_tmpfs(folder: Path) -> bool:
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
    mounted = _try_mount_tmpfs(folder)
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


def _main(args):
    from torchrankboost import cli

    return cli.main([str(a) for a in args])


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# ---------------------------------------------------------------- run names
@pytest.mark.parametrize("name", ["../..", "a/b", "..", "x..y", "a\\b", ""])
def test_run_name_cannot_write_outside_runs(tmp_path, data, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.parent.iterdir())
    assert _main(["train", "--data", data, "--rounds", 1, "-q", "--name", name]) == 2
    err = _one_line(capsys)
    assert "--name" in err and "separators" in err
    assert set(tmp_path.parent.iterdir()) == before and not (tmp_path / "runs").exists()


def test_run_name_is_refused_before_several_processes_are_launched(tmp_path, data, monkeypatch,
                                                                   capsys):
    from torchrankboost.cli import train as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "relaunch", lambda *a: pytest.fail("relaunched"))
    assert _main(["train", "--data", data, "--nproc", 2, "--name", "../x"]) == 2
    assert "--name" in _one_line(capsys) and not (tmp_path.parent / "x").exists()


@pytest.mark.parametrize("name", ["my-run.v2", "mq2008 fold1", "a.b_c"])
def test_plain_run_names_are_accepted(name):
    from torchrankboost.cli.options import check_run_name

    check_run_name(name)


# ---------------------------------------------------------------- full disk at the final save
def test_full_disk_at_the_final_save_keeps_the_model_in_the_fallback_file(
        tmp_path, data, full_disk, capsys):
    from torchrankboost.factory import load_model

    out = full_disk / "m.safetensors"
    assert _main(["train", "--data", data, "--rounds", 2, "-q", "--no-tensorboard",
                  "-o", out, "--logdir", tmp_path / "run"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err, err
    fallback = tmp_path / "run" / "model.fallback.safetensors"
    assert str(fallback) in err and load_model(fallback).n_rounds == 2
    assert not out.exists() and [p.name for p in full_disk.iterdir()] in ([], ["filler"])


def test_full_disk_for_output_and_fallback_says_in_one_line_nothing_was_saved(
        data, full_disk, capsys):
    out = full_disk / "m.safetensors"
    assert _main(["train", "--data", data, "--rounds", 2, "-q", "--no-tensorboard",
                  "-o", out, "--logdir", full_disk / "run"]) == 2
    err = _one_line(capsys)
    assert "nothing was saved" in err and "No space left on device" in err
    assert "model.fallback.safetensors" in err


# ---------------------------------------------------------------- partial saves
def test_full_disk_at_the_partial_save_after_ctrl_c_says_why_without_a_traceback(
        data, full_disk, monkeypatch, capsys):
    from torchrankboost.cli import training

    real = training._fit

    class CtrlC:
        def on_round_end(self, ranker, record):
            if record.round == 1:
                raise KeyboardInterrupt

    monkeypatch.setattr(training, "_fit", lambda r, s, run, cb: real(r, s, run, cb + [CtrlC()]))
    out = full_disk / "m.safetensors"
    assert _main(["train", "--data", data, "--rounds", 5, "-q", "--no-tensorboard",
                  "-o", out]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert "cannot save the model of the last good round to" in err
    assert "No space left on device" in err and "interrupted" in err
    assert not (full_disk / "m.partial.safetensors").exists()


_SECOND_CTRL_C = textwrap.dedent("""
    import os, signal, sys
    import safetensors.torch
    from torchrankboost import cli
    from torchrankboost.cli import training

    real_save, real_fit = safetensors.torch.save_file, training._fit

    def save_interrupted(tensors, filename, metadata=None):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, in the middle of the save
        return real_save(tensors, filename, metadata=metadata)

    class FirstCtrlC:
        def on_round_end(self, ranker, record):
            if record.round == 2:
                safetensors.torch.save_file = save_interrupted
                os.kill(os.getpid(), signal.SIGINT)

    training._fit = lambda r, s, run, cb: real_fit(r, s, run, cb + [FirstCtrlC()])
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_second_ctrl_c_during_the_partial_save_does_not_lose_it(tmp_path, data):
    """Both interrupts are real SIGINTs sent to the real command (in a subprocess)."""
    from torchrankboost.factory import load_model

    out = tmp_path / "m.safetensors"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", _SECOND_CTRL_C, "train", "--data", str(data),
                        "--rounds", "50", "--no-tensorboard", "-q", "-o", str(out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and "Traceback" not in r.stderr, r.stderr
    assert "SIGINT received while saving" in r.stderr
    partial = tmp_path / "m.partial.safetensors"
    assert str(partial) in r.stderr and load_model(partial).n_rounds == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.partial.safetensors", "train.txt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
