"""Atomic writes: a failure half-way never loses the previous file."""

import errno
import os
import stat

import pytest

from torchrankboost._io import atomic_path, atomic_write, check_writable


def test_atomic_write_replaces_and_keeps_normal_permissions(tmp_path):
    p = tmp_path / "scores.txt"
    atomic_write(p, lambda fh: fh.write("new\n"))
    assert p.read_text() == "new\n"
    mode = stat.S_IMODE(os.stat(p).st_mode)
    mask = os.umask(0)
    os.umask(mask)
    assert mode == 0o666 & ~mask
    assert [f.name for f in tmp_path.iterdir()] == ["scores.txt"]


def test_disk_full_half_way_keeps_the_old_file(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"old model")

    def writer(fh):
        fh.write(b"half of the new")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(p, writer, mode="wb")
    assert p.read_bytes() == b"old model"
    assert [f.name for f in tmp_path.iterdir()] == ["model.safetensors"]


def test_atomic_path_for_writers_that_take_a_name(tmp_path):
    p = tmp_path / "m.bin"
    with atomic_path(p) as tmp:
        assert tmp.parent == tmp_path and tmp != p
        tmp.write_bytes(b"x")
        assert not p.exists()
    assert p.read_bytes() == b"x"


def test_directories_and_unwritable_targets_are_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, lambda fh: fh.write("x"))
    with pytest.raises(ValueError, match="directory"):
        check_writable(tmp_path)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="cannot write"):
        check_writable(f / "model.safetensors")  # a path under a file
    assert check_writable(tmp_path / "new" / "model.safetensors").parent.is_dir()
