"""The compiled-library cache loads only what this user built: a private folder, libraries
verified by their recorded SHA-256 (torchrankboost._native). Each case runs the real loader
in a fresh process on a tiny C source, with the fault made for real on disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler")

SOURCE = "int trb_answer(void) { return 42; }\n"
PLANTED = """#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w"); if (f) { fputs("ran", f); fclose(f); }
}
int trb_answer(void) { return 666; }
"""

LOAD = """
import json, sys, warnings
from torchrankboost import _native
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lib = _native.load_library(sys.argv[1])
print(json.dumps({"answer": lib.trb_answer(), "path": lib._name,
                  "warnings": [str(w.message) for w in caught]}))
"""


def _load(source: Path, cache: Path, **env) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("TORCHRANKBOOST_NATIVE",)}
    e.update(TORCHRANKBOOST_CACHE=str(cache), **env)
    out = subprocess.run([sys.executable, "-c", LOAD, str(source)], capture_output=True,
                         text=True, env=e, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _record(cache: Path, stem: str) -> Path:
    (record,) = cache.glob(f"{stem}-*.sha256")
    return record


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "answer.c"
    src.write_text(SOURCE)
    return src


def _plant(cache: Path, source: Path, marker: Path) -> None:
    """What another local user could do: compile a library whose constructor runs code and
    store it, with a matching record, under the names the loader computes."""
    good = _record(cache, source.stem)
    lib_src = cache.parent / "planted.c"
    lib_src.write_text(f'#define MARKER "{marker}"\n' + PLANTED)
    tmp = cache.parent / "planted.so"
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(tmp), str(lib_src)],
                   check=True)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    for old in cache.glob(f"{good.stem}-*.so"):
        old.unlink()
    shutil.copy(tmp, cache / f"{good.stem}-{digest[:16]}.so")
    good.write_text(digest + "\n")


def test_world_writable_cache_folder_is_never_trusted(tmp_path, source):
    cache = tmp_path / "shared-cache"
    assert _load(source, cache)["answer"] == 42
    marker = tmp_path / "constructor-ran"
    _plant(cache, source, marker)
    os.chmod(cache, 0o777)  # a shared, world-writable TORCHRANKBOOST_CACHE
    got = _load(source, cache)
    assert got["answer"] == 42 and not marker.exists()
    assert not got["path"].startswith(str(cache))
    assert any("writable by group or others" in w for w in got["warnings"])


def test_group_writable_library_is_rebuilt_not_loaded(tmp_path, source):
    cache = tmp_path / "cache"
    _load(source, cache)
    marker = tmp_path / "constructor-ran"
    _plant(cache, source, marker)
    (lib,) = cache.glob(f"{source.stem}-*-*.so")
    os.chmod(lib, 0o777)
    got = _load(source, cache)
    assert got["answer"] == 42 and not marker.exists()


def test_truncated_library_is_rebuilt_not_loaded(tmp_path, source):
    cache = tmp_path / "cache"
    first = _load(source, cache)
    lib = Path(first["path"])
    lib.write_bytes(lib.read_bytes()[:100])  # truncated: loading it could SIGBUS
    got = _load(source, cache)
    assert got["answer"] == 42
    digest = _record(cache, source.stem).read_text().strip()
    assert hashlib.sha256(Path(got["path"]).read_bytes()).hexdigest() == digest


def test_cache_folder_is_created_private(tmp_path, source):
    cache = tmp_path / "new" / "cache"
    _load(source, cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    record = _record(cache, source.stem)
    assert stat.S_IMODE(record.stat().st_mode) & 0o022 == 0


def test_no_home_folder_gives_a_private_unpredictable_folder(monkeypatch):
    from torchrankboost import _native

    monkeypatch.delenv("TORCHRANKBOOST_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(
        RuntimeError("no home"))))
    monkeypatch.setattr(_native, "_private_fallback", None)
    folder = _native._cache_dir()
    try:
        assert folder.name != f"torchrankboost-cache-{os.getuid()}"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        shutil.rmtree(folder, ignore_errors=True)
