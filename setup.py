"""The compiled part of the build (the rest of the metadata is in pyproject.toml).

Each C source of ``torchrankboost/_native/build.py``'s ``SOURCES`` is one setuptools
extension, built by :class:`BuildLibraries` into a plain shared library
(``<room>/lib<stem>.so``, no Python C API, loaded with ctypes) with the command of
``build.py``. ``pip install .`` and ``pip wheel .`` put the libraries in the package;
``pip install -e .`` builds them in place in the checkout. A library that cannot be built (no
C compiler, no OpenMP) is left out with a warning, and the install goes on: the package then
says so once at import and runs its torch fallbacks. The wheel is tagged ``py3-none-<platform>``:
the libraries depend on the platform, not on the Python version.
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_trb_build", ROOT / "torchrankboost/_native/build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


class BuildLibraries(build_ext):
    """Build each extension as a plain C library; warn, never fail, when one cannot be built."""

    def get_ext_filename(self, fullname):
        *package, stem = fullname.split(".")
        return str(Path(*package, build.library_name(stem)))

    def build_extension(self, ext):
        source, output = Path(ext.sources[0]), Path(self.get_ext_fullpath(ext.name))
        try:
            build.compile_library(source, output)
        except build.BuildError as exc:
            output.unlink(missing_ok=True)  # never ship a library of an earlier build
            print(f"WARNING: torchrankboost: {exc}\nWARNING: torchrankboost: {output.name} is "
                  "left out; the package will run its torch fallback", file=sys.stderr)


class PlatformWheel(bdist_wheel):
    """``py3-none-<platform>``: the libraries use no Python C API."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


# optional: an editable install copies into the checkout only the libraries that were built
setup(
    ext_modules=[Extension(f"torchrankboost.{Path(s).parent.name}.{Path(s).stem}",
                           sources=[f"torchrankboost/{s}"], optional=True) for s in build.SOURCES],
    cmdclass={"build_ext": BuildLibraries, "bdist_wheel": PlatformWheel},
)
