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
    with pytest.raises(ValueError, match="the folder .*new does not exist"):
        check_writable(tmp_path / "new" / "model.safetensors")  # never created
    assert not (tmp_path / "new").exists()
    assert check_writable(tmp_path / "model.safetensors") == tmp_path / "model.safetensors"


def _tiny_booster_model():
    import torch

    from torchrankboost.factory import make_ranker

    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).double() + (X[:, 1] > 0.5).double()
    ranker = make_ranker("boost", loss="pnorm_push", loss_params={"p": 3}, max_leaves=4,
                         n_rounds=2, learner_params={"min_samples_leaf": 2})
    return ranker.fit(X, y, torch.arange(40) // 10)


def test_model_provenance_is_the_components_params(tmp_path):
    """A saved model's ``info`` holds the loss and learner as their get_params descriptions
    (JSON), which build the same components back."""
    from torchrankboost._modelfile import provenance_component
    from torchrankboost.factory import load_model

    model = _tiny_booster_model()
    model.save(tmp_path / "m.safetensors")
    info = load_model(tmp_path / "m.safetensors").info
    assert info["loss"]["type"] == "PNormPushLoss" and info["loss"]["params"]["p"] == 3.0
    loss = provenance_component(info, "loss")
    assert loss.get_params() == info["loss"]["params"]
    assert provenance_component(info, "learner").max_leaves == 4


def test_models_with_repr_provenance_still_load(tmp_path):
    """Files written before the descriptions carry ``repr`` strings: informational, they
    still load (and build no component)."""
    from torchrankboost._modelfile import provenance_component
    from torchrankboost.factory import load_model

    model = _tiny_booster_model()
    model.info.update(loss="PNormPushLoss(p=3.0, log=False, normalize=False, reduction='sum')",
                      learner="RegressionTree(max_leaves=4, max_depth=None)")
    model.save(tmp_path / "old.safetensors")
    back = load_model(tmp_path / "old.safetensors")
    assert back.info["loss"].startswith("PNormPushLoss(")
    assert provenance_component(back.info, "loss") is None
    assert provenance_component({}, "learner") is None
