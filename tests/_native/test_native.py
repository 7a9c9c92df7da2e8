"""The loader of the compiled libraries (torchrankboost._native): a library is used only when
it carries the build stamp of the source beside it; a source checkout builds a missing or
stale one in place, an installed package never builds and says once, at import, what the
install could not build. Each case runs the real loader on a tiny C source in a temporary
folder, with the compiler of the machine."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from torchrankboost import _native
from torchrankboost._native import build

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="no C compiler")

ANSWER = "int trb_answer(void) {{ return {}; }}\n"
PLANTED = """#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w"); if (f) { fputs("ran", f); fclose(f); }
}
int trb_answer(void) { return 666; }
"""


@pytest.fixture
def loader(monkeypatch):
    """The loader with empty per-process caches, as in a fresh process."""
    monkeypatch.setattr(_native, "_loaded", {})
    monkeypatch.setattr(_native, "_failed", {})
    monkeypatch.setattr(_native, "_announced", False)
    monkeypatch.delenv("TORCHRANKBOOST_NATIVE", raising=False)
    return _native


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "answer.c"
    src.write_text(ANSWER.format(42))
    return src


def _answer_in_a_fresh_process(lib: Path) -> int:
    """``trb_answer()`` of the library file, loaded by a new process (a process keeps the
    first library it loaded from a path)."""
    code = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).trb_answer())"
    out = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True,
                         text=True, timeout=60, check=True)
    return int(out.stdout)


def test_checkout_builds_a_missing_library_in_place_then_reuses_it(loader, source, monkeypatch):
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", True)
    lib = loader.load_library(source)
    path = source.with_name(build.library_name("answer"))
    assert lib.trb_answer() == 42 and Path(lib._name) == path
    stamp = lib.trb_build_stamp
    stamp.restype = ctypes.c_char_p
    assert stamp().decode() == f"trb-build-stamp:{build.stamp(source)}"
    assert loader.load_library(source) is lib  # once per process
    monkeypatch.setattr(loader, "_loaded", {})
    mtime = path.stat().st_mtime_ns
    loader.load_library(source)
    assert path.stat().st_mtime_ns == mtime  # up to date: not rebuilt
    assert sorted(p.name for p in source.parent.iterdir()) == sorted([source.name, path.name])


def test_checkout_rebuilds_a_stale_library(loader, source, monkeypatch):
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", True)
    loader.load_library(source)
    source.write_text(ANSWER.format(43))  # the source edited: the library is stale
    monkeypatch.setattr(loader, "_loaded", {})
    path = Path(loader.load_library(source)._name)
    assert _answer_in_a_fresh_process(path) == 43


def test_installed_package_never_builds(loader, source, monkeypatch):
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", False)
    with pytest.raises(_native.NativeUnavailable, match="was not built when torchrankboost "
                                                        "was installed"):
        loader.load_library(source)
    assert not source.with_name(build.library_name("answer")).exists()
    with pytest.raises(_native.NativeUnavailable, match="not built"):  # decided once
        loader.load_library(source)


def test_a_library_of_another_source_never_runs(loader, source, tmp_path, monkeypatch):
    """A library that is not the build of the source beside it (stale, or planted) is
    neither loaded nor run: installed, it is refused; in a checkout, rebuilt."""
    marker = tmp_path / "constructor-ran"
    planted = tmp_path / "planted.c"
    planted.write_text(f'#define MARKER "{marker}"\n' + PLANTED)
    path = source.with_name(build.library_name("answer"))
    build.compile_library(planted, path)  # a stamped library, but of another source
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", False)
    with pytest.raises(_native.NativeUnavailable, match="another version of answer.c"):
        loader.load_library(source)
    assert not marker.exists()
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", True)
    monkeypatch.setattr(loader, "_failed", {})
    assert loader.load_library(source).trb_answer() == 42 and not marker.exists()


def test_failed_build_and_disabled_kernels_say_why(loader, source, monkeypatch):
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", True)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(_native.NativeUnavailable, match="no C compiler"):
        loader.load_library(source)
    monkeypatch.setenv("CC", "false")  # a compiler that fails: its message, nothing left
    monkeypatch.setattr(loader, "_failed", {})
    with pytest.raises(_native.NativeUnavailable, match="building answer.c failed"):
        loader.load_library(source)
    assert sorted(p.name for p in source.parent.iterdir()) == ["answer.c"]
    monkeypatch.setenv("TORCHRANKBOOST_NATIVE", "0")
    monkeypatch.setattr(loader, "_failed", {})
    with pytest.raises(_native.NativeUnavailable, match="TORCHRANKBOOST_NATIVE=0"):
        loader.load_library(source)


def test_an_install_without_libraries_warns_once(loader, tmp_path, monkeypatch):
    package = tmp_path / "torchrankboost"
    for s in build.SOURCES:
        (package / s).parent.mkdir(parents=True, exist_ok=True)
        (package / s).write_text("")
    monkeypatch.setattr(loader, "_PACKAGE", package)
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", False)
    first = Path(build.SOURCES[0])
    answer = tmp_path / first.name
    answer.write_text(ANSWER.format(1))
    build.compile_library(answer, build.library_path(package / first))  # only this one built
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.warn_if_not_built()
        loader.announce_fallback("a later fallback")  # already said: silent
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    text = str(caught[0].message)
    assert "were not built when the package was installed" in text and "\n" not in text
    assert first.name not in text and all(Path(s).name in text for s in build.SOURCES[1:])
    monkeypatch.setattr(loader, "_announced", False)
    monkeypatch.setattr(loader, "SOURCE_CHECKOUT", True)  # a checkout builds on first use
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.warn_if_not_built()
    assert caught == []
