"""The kernel room: every compiled (or device) kernel of the histogram learners, binning and
prediction, behind one protocol, and the binning those kernels work on.

:func:`choose_backend` is the one place that picks a backend (see :class:`.base.TreeBackend`:
binning, tree growth, oblivious levels, traversal, prediction): ``"native"``
(:mod:`.native_backend`, the compiled CPU kernels of ``trees.c``, the only module that loads
them), ``"torch"`` (:mod:`.torch_backend`, the pure-torch reference, any device), ``"triton"``
(:mod:`.triton_backend`, Triton kernels: CUDA; the CPU only by name, under Triton's
interpreter). Every backend gives the same codes, trees and scores bit for bit. **A new
backend (a GPU kernel) is one module here and one entry in** ``_AUTO_ORDER``. Every histogram
of every backend is an int64 sum of the fit's channels in the fixed point of
:mod:`.fixed_point` (exact: the same on every backend, number of processes and row order). The
node histogram of the torch path (and of stumps) is :func:`.histogram.histogram`; the oblivious
level arithmetic is :mod:`.levels`; the quantile binning (:func:`.binning.bin_features`,
:class:`.binning.BinnedFeatures`) is :mod:`.binning`.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import _native
from .base import GrownTree, Level, TreeBackend, TreeParams, Unavailable, newton_values  # noqa: F401
from .histogram import histogram  # noqa: F401
from .native_backend import NativeBackend
from .torch_backend import TorchBackend
from .triton_backend import TritonBackend

__all__ = ["KERNELS", "choose_backend", "check_kernel", "histogram", "TreeBackend", "TreeParams",
           "GrownTree", "Level", "newton_values"]

#: the backends ``kernel="auto"`` tries, first that runs wins (the torch reference last: it
#: runs anywhere); adding a backend is adding it here
_AUTO_ORDER = (TritonBackend(), NativeBackend(), TorchBackend())
#: the ``kernel`` values a learner accepts
KERNELS = ("auto",) + tuple(b.name for b in _AUTO_ORDER)


def _named(kernel: str) -> Optional[TreeBackend]:
    """The backend of ``_AUTO_ORDER`` called ``kernel``, or ``None``."""
    return next((b for b in _AUTO_ORDER if b.name == kernel), None)


def check_kernel(kernel: str) -> str:
    """``kernel`` when it is ``"auto"`` or the name of a backend of ``_AUTO_ORDER``, else a
    one-line ``ValueError``."""
    if kernel != "auto" and _named(kernel) is None:
        names = ("auto",) + tuple(b.name for b in _AUTO_ORDER)
        raise ValueError(f"kernel: expected one of {names}, got {kernel!r}")
    return kernel


def choose_backend(kernel: str, *, device: torch.device, data_dtype: torch.dtype, num_rows: int,
                   announce: bool = True) -> TreeBackend:
    """The backend that runs ``kernel`` (``"auto"`` or a backend's name) on data of
    ``data_dtype`` (bin codes, or raw features for binning and prediction) with ``num_rows``
    rows on ``device``.

    ``"auto"`` takes the first backend of ``_AUTO_ORDER`` that runs here (a backend with
    ``auto_devices`` only on those device types: Triton on CUDA); when one is
    ``missing`` on this machine (not built at install, ``TORCHRANKBOOST_NATIVE=0``) the slower
    fallback is announced once per process: one ``RuntimeWarning``
    (:func:`torchrankboost._native.announce_fallback`; none when the import already said that
    the kernels were not built). A named backend that
    cannot run raises ``RuntimeError`` with the reason. ``announce=False`` (predictions,
    binning): no warning, no error, the next backend that runs (at last the reference).
    """
    check_kernel(kernel)
    order = _AUTO_ORDER if kernel == "auto" else (_named(kernel),)
    for backend in order:
        if kernel == "auto" and device.type not in getattr(backend, "auto_devices", (device.type,)):
            continue  # a backend that "auto" takes on some device types only
        why = backend.unavailable(device=device, data_dtype=data_dtype, num_rows=num_rows)
        if why is None:
            return backend
        if not announce:
            continue
        if kernel != "auto":
            raise RuntimeError(f"kernel={kernel!r}: the compiled tree kernels cannot run here: "
                               f"{why.reason}")
        if why.missing:
            _native.announce_fallback(f"torchrankboost: compiled tree kernels unavailable: "
                                      f"{why.reason}. The trees run on the pure-torch path, "
                                      f"several times slower on CPU", stacklevel=4)
    return _named("torch")
