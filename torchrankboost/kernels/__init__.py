"""Tree backends: where a histogram tree grows and where rows find their leaves.

:func:`choose_backend` is the one place that picks a backend (see :class:`.base.TreeBackend`):
``"native"`` (:mod:`.native_backend`, the compiled CPU kernels of ``trees.c``), ``"torch"``
(:mod:`.torch_backend`, the pure-torch reference, any device). Every backend grows the same
trees bit for bit. A new backend (a GPU kernel) is one module here and one entry in
``_AUTO_ORDER``. The node histogram of the torch path (and of stumps) is
:func:`.histogram.histogram`.
"""

from __future__ import annotations

import logging
import warnings

import torch

from .base import GrownTree, TreeBackend, TreeParams, Unavailable, newton_values  # noqa: F401
from .histogram import histogram  # noqa: F401
from .native_backend import NativeBackend
from .torch_backend import TorchBackend

__all__ = ["KERNELS", "choose_backend", "histogram", "TreeBackend", "TreeParams", "GrownTree",
           "newton_values"]

_log = logging.getLogger("torchrankboost")
#: the backends ``kernel="auto"`` tries, first that runs wins
_AUTO_ORDER = (NativeBackend(), TorchBackend())
_BACKENDS = {b.name: b for b in _AUTO_ORDER}
KERNELS = ("auto",) + tuple(_BACKENDS)
_warned_fallback = False


def choose_backend(kernel: str, *, device: torch.device, data_dtype: torch.dtype, num_rows: int,
                   announce: bool = True) -> TreeBackend:
    """The backend that runs ``kernel`` (``"auto"``, ``"native"``, ``"torch"``) on data of
    ``data_dtype`` (bin codes, or raw features for a prediction) with ``num_rows`` rows on
    ``device``.

    ``"auto"`` takes the first backend of ``_AUTO_ORDER`` that runs here; when one is
    ``missing`` on this machine (no C compiler) the slower fallback is announced once per
    process (a ``RuntimeWarning`` and the ``torchrankboost`` logger). A named backend that
    cannot run raises ``RuntimeError`` with the reason. ``announce=False`` (predictions): no
    warning, no error, the reference path instead.
    """
    global _warned_fallback
    if kernel not in _BACKENDS and kernel != "auto":
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    order = _AUTO_ORDER if kernel == "auto" else (_BACKENDS[kernel],)
    for backend in order:
        why = backend.unavailable(device=device, data_dtype=data_dtype, num_rows=num_rows)
        if why is None:
            return backend
        if not announce:
            continue
        if kernel != "auto":
            raise RuntimeError(f"kernel={kernel!r}: the compiled tree kernels cannot run here: "
                               f"{why.reason}")
        if why.missing and not _warned_fallback:
            _warned_fallback = True
            msg = (f"compiled tree kernels unavailable ({why.reason}); the trees run on the "
                   f"pure-torch path, several times slower on CPU")
            _log.warning(msg)
            warnings.warn(msg, RuntimeWarning, stacklevel=4)
    return _BACKENDS["torch"]
