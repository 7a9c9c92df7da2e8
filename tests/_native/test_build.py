"""The package's build (setup.py over torchrankboost/_native/build.py): ``pip wheel`` gives a
platform wheel holding the compiled libraries, which run where no C compiler is on ``PATH``
and give the model of the checkout, tensor for tensor; a build without a compiler still gives
a wheel, and its package says once, at import, that it runs the torch fallbacks.

Each wheel is built with ``pip wheel --no-build-isolation`` from a copy of the project (the
test extra installs setuptools; no network) and used unzipped on ``PYTHONPATH``: for the
loader that is an installed package (no ``pyproject.toml`` beside it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file

from torchrankboost._native import build

ROOT = Path(__file__).resolve().parents[2]


def _setuptools_ok() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 77


pytestmark = [
    pytest.mark.skipif(not _setuptools_ok(), reason="needs setuptools>=77 (the test extra)"),
    pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler"),
]

TRAIN = ["train", "--data", "synthetic", "--rounds", "3", "--no-tensorboard", "-q",
         "--threads", "1"]
#: the CLI, then which tree kernels ran (and from where) on stderr
RUN = ("import sys; from torchrankboost.cli import main; rc = main(sys.argv[1:]); "
       "from torchrankboost.kernels import native_backend as n; import torchrankboost as t; "
       "print('KERNELS', n.status(), t.__file__, file=sys.stderr); sys.exit(rc)")


def _wheel(tmp: Path, **env: str) -> Path:
    """``pip wheel`` of a copy of the project (no built libraries in it) into ``tmp/dist``."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "LICENSE", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "torchrankboost", src / "torchrankboost", ignore=shutil.ignore_patterns(
        "__pycache__", "lib*.so", "lib*.dylib", "lib*.dll", "*.egg-info"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("*.whl")
    return wheel


def _run(site: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """The command line with ``site`` first on the path and no C compiler on ``PATH``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CC", "TORCHRANKBOOST_NATIVE", "PYTHONPATH")}
    (tmp / "empty-bin").mkdir(exist_ok=True)
    env.update(PATH=str(tmp / "empty-bin"), PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True,
                         env=env, timeout=300, cwd=tmp)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _model(path: Path):
    meta = json.loads(safe_open(str(path), "pt").metadata()["ensemble"])
    meta["info"].pop("fit_seconds")
    return load_file(str(path)), meta


def test_wheel_holds_the_libraries_and_runs_them_without_a_compiler(tmp_path):
    wheel = _wheel(tmp_path)
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-py3-none-{platform}.whl"), wheel.name
    names = set(zipfile.ZipFile(wheel).namelist())
    libs = {f"torchrankboost/{Path(s).parent}/{build.library_name(Path(s).stem)}"
            for s in build.SOURCES}
    assert libs <= names and "torchrankboost/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)

    got = _run(site, tmp_path, *TRAIN, "-o", str(tmp_path / "wheel.safetensors"))
    kernels = got.stderr.splitlines()[-1]
    assert kernels.startswith("KERNELS native ") and kernels.endswith(
        str(site / "torchrankboost" / "__init__.py")), got.stderr
    assert "Warning" not in got.stderr and "not built" not in got.stderr, got.stderr

    ref = subprocess.run([sys.executable, "-m", "torchrankboost", *TRAIN,
                          "-o", str(tmp_path / "checkout.safetensors")], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-3000:]
    (a, meta_a), (b, meta_b) = _model(tmp_path / "wheel.safetensors"), _model(
        tmp_path / "checkout.safetensors")
    assert sorted(a) == sorted(b) and all(a[k].equal(b[k]) for k in a)
    assert meta_a == meta_b


def test_a_build_without_a_compiler_installs_and_warns_once(tmp_path):
    wheel = _wheel(tmp_path, CC="/nonexistent/cc")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if "/lib" in n]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    got = _run(site, tmp_path, *TRAIN, "-o", str(tmp_path / "torch.safetensors"))
    assert got.stderr.count("RuntimeWarning") == 1, got.stderr
    assert "were not built when the package was installed" in got.stderr
    assert got.stderr.splitlines()[-1].startswith("KERNELS torch (")
