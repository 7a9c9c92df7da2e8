"""Model files are verified on load: a SHA-256 over the tensors and the canonical JSON
description, the JSON types and tensor dtypes as written, a bounded feature count, scores
that cannot overflow, and one ``ValueError`` for anything corrupt, tampered, unreadable, a
folder or a pipe; saves go through a temporary file, and a failing save leaves the old file
untouched."""

import json
import os
import random
import stat
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from torchrankboost._modelfile import DEFAULT_MAX_FEATURES, write_model_file
from torchrankboost.data import make_letor
from torchrankboost.data.svmlight import DEFAULT_MAX_FEATURES as READER_MAX_FEATURES
from torchrankboost.factory import load_model, make_ranker
from torchrankboost.boosting.papers import LinearRanker

KINDS = {  # every model kind: the three weak models, the paper algorithms, the linear model
    "tree": dict(algorithm="boost", learner="tree", n_rounds=3, max_leaves=4),
    "stump": dict(algorithm="boost", learner="stump", n_rounds=3),
    "feature": dict(algorithm="boost", learner="feature", n_rounds=3),
    "rankboost": dict(algorithm="rankboost", n_rounds=3),
    "qbrank": dict(algorithm="qbrank", n_rounds=2, max_leaves=4),
    "ranksvm": dict(algorithm="ranksvm"),
}
FLIPS_PER_KIND = 170  # 6 kinds: 1,020 flips in all


@pytest.fixture(scope="module")
def data():
    return make_letor(8, 6, 4, n_grades=3, seed=3)


def _fit(kind, data):
    opts = dict(KINDS[kind])
    alg = opts.pop("algorithm")
    X, y, g = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RankBoost's stumps may warn about unbounded rounds
        if alg == "ranksvm":  # RankSVM's model (L-BFGS's first use costs seconds: built here)
            w = torch.linspace(-1.5, 2.0, X.shape[1], dtype=torch.float64)
            return LinearRanker(w, 0.25, info={"C": 1.0, "loss": "squared_hinge"})
        return make_ranker(alg, **opts).fit(X, y, g)


def _read(path):
    with safe_open(str(path), framework="pt") as fh:
        return fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}


def _outcome(path, X, expected) -> str:
    """``"refused"`` (a one-line ValueError), ``"identical"`` or ``"different"``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an "older file" warning would be a silent load
            scores = load_model(path).predict(X)
    except ValueError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
        return "refused"
    return "identical" if torch.equal(scores, expected) else "different"


def test_byte_flips_of_every_model_kind_are_refused_or_change_nothing(tmp_path, data):
    """Seeded fuzzing: every flipped byte (header length, JSON header, description,
    checksum, tensor data) of a saved model of each kind either raises a one-line
    ``ValueError`` or loads a model that predicts bit for bit the same — never a silently
    different model."""
    rng = random.Random(2024)
    X = data.X
    counts = {"refused": 0, "identical": 0, "different": 0}
    different = []
    for kind in KINDS:
        model = _fit(kind, data)
        good = tmp_path / f"{kind}.safetensors"
        model.save(good)
        expected = load_model(good).predict(X)
        raw = good.read_bytes()
        bad = tmp_path / f"{kind}-flipped.safetensors"
        for i in range(FLIPS_PER_KIND):
            pos = i if i < 8 else rng.randrange(len(raw))  # the header length, then anywhere
            flipped = bytearray(raw)
            flipped[pos] ^= 1 << rng.randrange(8)
            bad.write_bytes(bytes(flipped))
            result = _outcome(bad, X, expected)
            counts[result] += 1
            if result == "different":
                different.append((kind, pos))
    assert sum(counts.values()) >= 1000
    assert counts["different"] == 0, (counts, different[:10])
    assert counts["refused"] > 900, counts


def _resave(src, out, edit_tensors=None, edit_meta=None, key="ensemble"):
    """``src`` with its tensors/description edited and a fresh checksum (what a hand edit
    that recomputes it looks like): the checks behind the checksum must refuse it."""
    md, tensors = _read(src)
    meta = json.loads(md[key])
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    write_model_file(out, tensors, key, meta)
    return out


def _set_tensor(name, value):
    def edit(t):
        t[name] = value
    return edit


def _set_model(**kw):
    def edit(m):
        m["models"][0].update(kw)
    return edit


@pytest.mark.parametrize("kind, edit, problem", [
    ("tree", dict(edit_tensors=_set_tensor("m0.threshold", torch.tensor([1, 2, 3]))),
     "threshold has dtype int64"),
    ("stump", dict(edit_tensors=_set_tensor("m0.threshold", torch.tensor([True]))),
     "threshold has dtype bool"),
    ("stump", dict(edit_tensors=_set_tensor("m0.threshold",
                                            torch.tensor([0.5], dtype=torch.bfloat16))),
     "threshold has dtype bfloat16"),
    ("stump", dict(edit_meta=_set_model(feature=True)), "feature must be JSON int"),
    ("stump", dict(edit_meta=_set_model(feature="3")), "feature must be JSON int"),
    ("feature", dict(edit_meta=_set_model(normalize=None)), "normalize must be JSON bool"),
    ("tree", dict(edit_tensors=_set_tensor("weights", torch.tensor([1e308, 1e308, 1e308],
                                                                  dtype=torch.float64))),
     "overflow"),
    ("tree", dict(edit_meta=lambda m: m.update(num_features=10 ** 9)), "num_features is"),
    ("tree", dict(edit_meta=lambda m: m.update(base_score="0x1p99999")), "not a hex float"),
    ("tree", dict(edit_meta=lambda m: m.update(n_rounds=1e400)), "n_rounds must be JSON int"),
    ("tree", dict(edit_tensors=_set_tensor("m9.extra", torch.zeros(1))), "unexpected tensor"),
])
def test_hand_edited_files_with_a_valid_checksum_are_still_refused(tmp_path, data, kind, edit,
                                                                   problem):
    """Wrong dtypes (int/bool/bfloat16 thresholds would truncate the features), JSON values
    coerced into something else (``true``/``"3"`` as an index, ``null`` as a flag), scores
    that overflow, a feature count that would allocate terabytes, overflowing numbers."""
    good = tmp_path / "good.safetensors"
    _fit(kind, data).save(good)
    bad = _resave(good, tmp_path / "bad.safetensors", **edit)
    with pytest.raises(ValueError, match=f"bad.safetensors: invalid model file: .*{problem}"):
        load_model(bad)


def test_feature_count_limit_is_the_readers_and_can_be_raised(tmp_path, data):
    """``num_features`` above 100,000 (the data reader's limit) is refused on load unless
    ``max_features=`` raises the limit; nothing is allocated for it."""
    assert DEFAULT_MAX_FEATURES == READER_MAX_FEATURES
    good = tmp_path / "good.safetensors"
    _fit("tree", data).save(good)
    wide = _resave(good, tmp_path / "wide.safetensors",
                   edit_meta=lambda m: m.update(num_features=200_000))
    with pytest.raises(ValueError, match="num_features is 200000, outside"):
        load_model(wide)
    assert load_model(wide, max_features=200_000).num_features == 200_000


def test_deeply_nested_or_overflowing_descriptions_are_one_valueerror(tmp_path, data):
    """A description nested thousands deep (RecursionError in the JSON parser) or a number
    that overflows is a ValueError naming the file, never another exception."""
    good = tmp_path / "good.safetensors"
    _fit("tree", data).save(good)
    md, tensors = _read(good)
    deep = tmp_path / "deep.safetensors"
    save_file(tensors, str(deep), metadata={"ensemble": "[" * 100_000 + "]" * 100_000})
    with pytest.raises(ValueError, match="deep.safetensors: invalid model file"):
        load_model(deep)
    meta = json.loads(md["ensemble"])
    meta.update(version=1, base_score=1e400)  # an older, unchecked file: parsed as inf
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata={"ensemble": json.dumps(meta)})
    with pytest.warns(UserWarning, match="without a checksum"):
        with pytest.raises(ValueError, match="old.safetensors: invalid model file: base score"):
            load_model(old)


def test_files_without_a_checksum_load_only_as_older_files_with_a_warning(tmp_path, data):
    """A current-format file whose checksum is missing is refused; a file of the older
    format (no checksum yet) loads, with a warning, to the same scores."""
    model = _fit("tree", data)
    good = tmp_path / "good.safetensors"
    model.save(good)
    md, tensors = _read(good)
    stripped = tmp_path / "stripped.safetensors"
    save_file(tensors, str(stripped), metadata={"ensemble": md["ensemble"]})
    with pytest.raises(ValueError, match="checksum is missing"):
        load_model(stripped)
    meta = json.loads(md["ensemble"])
    meta["version"] = 1
    older = tmp_path / "older.safetensors"
    save_file(tensors, str(older), metadata={"ensemble": json.dumps(meta)})
    with pytest.warns(UserWarning, match="older torchrankboost, without a checksum"):
        back = load_model(older)
    assert torch.equal(back.predict(data.X), model.predict(data.X))


@pytest.mark.parametrize("suffix", [".json", ".txt", ".onnx", ".pkl", ".TXT"])
def test_save_refuses_suffixes_of_other_formats(tmp_path, data, suffix):
    """``save("m.json")`` would write binary safetensors under a text name: refused, naming
    the format to use; ``.safetensors`` and no suffix are fine."""
    model = _fit("tree", data)
    with pytest.raises(ValueError, match=r"model files are safetensors .*use the suffix "
                                         r"\.safetensors \(or none\)"):
        model.save(tmp_path / f"m{suffix}")
    assert not (tmp_path / f"m{suffix}").exists()
    model.save(tmp_path / "m")
    model.save(tmp_path / "m.safetensors")
    lin = LinearRanker(torch.ones(3))
    with pytest.raises(ValueError, match="model files are safetensors"):
        lin.save(tmp_path / f"lin{suffix}")


def test_linear_weights_whose_scores_overflow_are_refused(tmp_path):
    p = tmp_path / "lin.safetensors"
    LinearRanker(torch.tensor([1e308, 1e308], dtype=torch.float64)).save(p)
    with pytest.raises(ValueError, match="lin.safetensors: invalid model file: .*overflow"):
        load_model(p)


def _data(seed=0):
    return make_letor(20, 10, 5, n_grades=3, seed=seed)


def test_unreadable_model_file_says_permission_denied(tmp_path, monkeypatch):
    import torchrankboost._modelfile as mf

    p = tmp_path / "m.safetensors"
    LinearRanker(torch.tensor([1.0])).save(p)
    monkeypatch.setattr(mf.os, "access", lambda path, mode: False)
    with pytest.raises(ValueError, match="m.safetensors: cannot read the model file "
                                         r"\(permission denied\)"):
        load_model(p)


def _saved_tree_model(tmp_path):
    X, y, g = _data()
    model = make_ranker("boost", n_rounds=3, max_leaves=4).fit(X, y, g)
    path = tmp_path / "model.safetensors"
    model.save(path)
    return model, path, X


def _tamper(path, out, edit_tensors=None, edit_meta=None):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        meta = json.loads(fh.metadata()["ensemble"])
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    # written with a fresh checksum: what a hand edit that recomputes it looks like, so the
    # structural checks behind the checksum are what refuses it
    from torchrankboost._modelfile import write_model_file

    write_model_file(out, tensors, "ensemble", meta)
    return out


def _set(key, index, value):
    def edit(t):
        t[key][index] = value
    return edit


@pytest.mark.parametrize("case, problem", [
    ("depth1", "depth"),
    ("depth_huge", "depth"),
    ("cycle", "reached twice"),
    ("feature", "outside"),
    ("nan_weight", "weight"),
    ("nan_base", "base score"),
    ("nan_leaf", "leaf values"),
    ("num_features", "outside"),
    ("missing", "missing entry"),
])
def test_tampered_model_files_are_refused_on_load(tmp_path, case, problem):
    model, path, X = _saved_tree_model(tmp_path)
    out = tmp_path / f"{case}.safetensors"

    def meta_edit(fn):
        return dict(edit_meta=fn)

    edits = {
        "depth1": meta_edit(lambda m: m["models"][0].update(depth=1)),
        "depth_huge": meta_edit(lambda m: m["models"][0].update(depth=10**9)),
        "cycle": dict(edit_tensors=_set("m0.right_child", 2, 1)),
        "feature": dict(edit_tensors=_set("m0.split_feature", 0, 99)),
        "nan_weight": dict(edit_tensors=_set("weights", 0, float("nan"))),
        "nan_base": meta_edit(lambda m: m.update(base_score=float("nan").hex())),
        "nan_leaf": dict(edit_tensors=_set("m0.leaf_value", 0, float("nan"))),
        "num_features": meta_edit(lambda m: m.update(num_features=1)),
        "missing": meta_edit(lambda m: m.pop("base_score")),
    }
    _tamper(path, out, **edits[case])
    with pytest.raises(ValueError, match=f"{out.name}: invalid model file: .*{problem}"):
        load_model(out)
    torch.testing.assert_close(load_model(path).predict(X), model.predict(X))


def test_linear_model_with_nan_weights_is_refused_on_load(tmp_path):
    p = tmp_path / "lin.safetensors"
    LinearRanker(torch.tensor([1.0, float("nan")])).save(p)
    with pytest.raises(ValueError, match="lin.safetensors: invalid model file: weights"):
        load_model(p)


def test_model_path_that_is_a_folder_or_a_pipe_is_refused_without_blocking(tmp_path):
    with pytest.raises(ValueError, match="is a folder"):
        load_model(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        load_model(fifo)
    bad = tmp_path / "garbage.safetensors"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError, match="garbage.safetensors: not a readable"):
        load_model(bad)


@pytest.mark.parametrize("kind", ["ensemble", "linear"])
def test_saves_go_through_a_temporary_file_and_get_normal_permissions(tmp_path, kind,
                                                                      monkeypatch):
    from torchrankboost import _io

    model = (LinearRanker(torch.tensor([1.0, 2.0])) if kind == "linear"
             else _saved_tree_model(tmp_path)[0])
    target = tmp_path / "out.safetensors"
    target.write_bytes(b"old")
    calls = []
    real = _io.atomic_path

    def spy(path, **kw):
        calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(_io, "atomic_path", spy)
    import torchrankboost._modelfile as mf
    monkeypatch.setattr(mf, "atomic_path", spy)
    model.save(target)
    assert calls == [str(target)]
    mode = stat.S_IMODE(os.stat(target).st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    type(model).load(target)


def test_a_failing_save_leaves_the_old_file_untouched(tmp_path, monkeypatch):
    import safetensors.torch

    model = LinearRanker(torch.tensor([1.0, 2.0]))
    target = tmp_path / "m.safetensors"
    model.save(target)
    before = target.read_bytes()

    def broken(tensors, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError):
        LinearRanker(torch.tensor([5.0, 6.0])).save(target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]
