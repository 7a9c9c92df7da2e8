"""A counter of host synchronisations and tensor ops, for the sync-discipline tests.

On a GPU, a *host synchronisation* is a call that makes the host wait for the device queue
to drain: reading a value (``item``, ``tolist``, ``bool(t)``, ``int(t)``, ``float(t)``,
``operator.index(t)``, ``equal``), copying to the host (``.cpu()``, ``.numpy()``,
``.to("cpu")``, a device value written into a host tensor), or an op whose output *shape*
depends on the data (``nonzero``, ``unique``, ``masked_select``, boolean-mask indexing
``x[mask]`` / ``x[mask] = v``, ``repeat_interleave`` with tensor repeats and no
``output_size``, ``bincount``, one-argument ``where``). :class:`SyncCounter` is a
:class:`~torch.overrides.TorchFunctionMode` that sees every torch call made while it is
active and counts those on CPU tensors, so that the discipline a GPU needs is a test that runs
anywhere.

**Host and device tensors.** On a CPU run every tensor is on the CPU; the counter tells the
tensors a GPU run would hold on the host from the others, so that reading a value already
copied to the host is not counted twice:

* *host* tensors: the results of ``.cpu()``, ``.to("cpu")`` (the string), ``.numpy()``; of a
  factory (``torch.zeros``, ``torch.tensor``, ...) called without a device or with the string
  ``"cpu"``; of any call whose tensor arguments are all host tensors;
* every other tensor is a *device* tensor, those made before the counter started included,
  and those made with ``device=dev`` for a ``torch.device`` (the package writes ``x.to(dev)``
  and ``device=dev`` for the data's device: the GPU on a GPU run).

A read or a data-dependent shape on host tensors only is no sync. ``uploads`` counts the
host-to-device copies (``.to(dev)`` of a host tensor, ``torch.tensor(data, device=dev)``,
``copy_`` from a host tensor): pageable copies that wait for the stream on CUDA too, but right
after a synchronisation, with an empty queue, they cost a transfer, not a drain.

``ops`` counts every other torch call except pure metadata reads (``shape``, ``dim``,
``numel``, ``size``, ``is_contiguous``, ``data_ptr``...): views and in-place updates included;
``views`` counts those of them that only make a view (``view``, ``reshape``, ``unsqueeze``,
``x[i, :j]``...), so ``ops - views`` estimates the kernel launches (``reshape`` of a
non-contiguous tensor copies: an underestimate there). Calls made by torch inside a counted call (a
Python-level torch function calling others) are not counted again: the mode is off while the
call runs. Code in compiled extensions (the native backend through ctypes) is invisible.

Usage::

    with SyncCounter(where=True) as sc:
        ...
    sc.syncs            # host synchronisations
    sc.by_kind          # Counter: kind -> count
    sc.by_site          # Counter: ("file.py:line", kind) -> count (with where=True)
"""

from __future__ import annotations

import sys
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["SyncCounter"]

_MARK = "_sync_counter_host"
#: calls that read device values on the host (or copy them there)
_READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__",
          "__array__", "numpy", "cpu", "is_nonzero", "equal", "allclose", "__contains__",
          "__repr__", "__format__", "__str__"}
#: calls whose output shape depends on the values
_SHAPES = {"nonzero", "argwhere", "unique", "unique_consecutive", "_unique", "_unique2",
           "masked_select", "bincount", "histc"}
#: metadata reads: neither a sync nor an op
_META = {"__get__", "__set__", "size", "dim", "numel", "stride", "is_contiguous", "data_ptr",
         "element_size", "__len__", "storage_offset", "is_floating_point", "is_complex",
         "nelement", "ndimension", "get_device", "untyped_storage", "__hash__", "is_sparse",
         "__iter__", "_is_view", "__reduce_ex__", "__deepcopy__", "is_signed",
         "__dlpack_device__"}
#: calls that make a view (no kernel on a GPU); indexing with ints and slices too
_VIEWS = {"view", "view_as", "reshape", "unsqueeze", "squeeze", "expand", "expand_as", "permute",
          "t", "transpose", "select", "narrow", "unbind", "split", "chunk", "as_strided",
          "flatten", "unflatten", "movedim", "detach", "real", "imag", "diagonal", "unfold"}
_FACTORIES = {"tensor", "as_tensor", "zeros", "ones", "empty", "full", "arange", "linspace",
              "logspace", "eye", "rand", "randn", "randint", "randperm", "from_numpy",
              "scalar_tensor", "empty_strided", "frombuffer"}


def _name(func) -> str:
    return getattr(func, "__name__", None) or str(func)


def _tensors(x):
    """The tensors in an argument (nested lists and tuples)."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from _tensors(y)


def _is_host(t: torch.Tensor) -> bool:
    return getattr(t, _MARK, False)


def _is_mask(ix) -> bool:
    return any(t.dtype in (torch.bool, torch.uint8) for t in _tensors(ix))


def _host_device(dev) -> bool:
    """Whether a ``device`` argument names the host: absent, or the string ``"cpu"``."""
    return dev is None or (isinstance(dev, str) and dev.split(":")[0] == "cpu")


def _to_target(args, kwargs):
    """``"host"``, ``"device"`` or ``None`` (a dtype change only) for a ``.to(...)`` call."""
    for a in list(args[1:]) + [kwargs.get("device")]:
        if isinstance(a, str):
            return "host" if a.split(":")[0] == "cpu" else "device"
        if isinstance(a, torch.device):
            return "device"
        if isinstance(a, torch.Tensor):
            return "host" if _is_host(a) else "device"
    return None


class SyncCounter(TorchFunctionMode):
    """Counts host synchronisations (:attr:`syncs`, :attr:`by_kind`), host-to-device copies
    (:attr:`uploads`) and other torch calls (:attr:`ops`) while active (see the module
    docstring). ``where=True`` also records :attr:`by_site`: the innermost frame of the
    package (``torchrankboost/...``) that made each synchronisation."""

    def __init__(self, *, where: bool = False):
        super().__init__()
        self.where = where
        self.syncs = self.ops = self.uploads = self.views = 0
        self.by_kind: Counter = Counter()
        self.by_site: Counter = Counter()

    def __enter__(self):
        # the counter stands in for a device: the CPU-only shortcut of the exact sums'
        # rounding (a few accumulators through Python integers) is off while it counts
        from torchrankboost import exact

        self._host_rows = exact.HOST_ROWS
        exact.HOST_ROWS = -1
        return super().__enter__()

    def __exit__(self, *exc):
        from torchrankboost import exact

        exact.HOST_ROWS = self._host_rows
        return super().__exit__(*exc)

    def reset(self) -> None:
        self.syncs = self.ops = self.uploads = self.views = 0
        self.by_kind.clear()
        self.by_site.clear()

    def _sync(self, kind: str) -> None:
        self.syncs += 1
        self.by_kind[kind] += 1
        if self.where:
            self.by_site[(_site(), kind)] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        out = func(*args, **kwargs)
        if name in _META:
            return out
        host = self._classify(name, args, kwargs)
        if host and args and out is args[0]:  # .cpu() / .to("cpu") of a CPU tensor: itself
            with torch._C.DisableTorchFunction():
                out = out.view_as(out)  # a new tensor on the same storage, marked alone
        if host:
            for t in _tensors(out if isinstance(out, (tuple, list)) else [out]):
                setattr(t, _MARK, True)
        return out

    def _classify(self, name: str, args, kwargs) -> bool:
        """Count the call; whether its outputs are host tensors."""
        ins = [t for a in list(args) + list(kwargs.values()) for t in _tensors(a)]
        all_host = bool(ins) and all(_is_host(t) for t in ins)
        if name in _READS:
            if not all_host:
                self._sync(name)
            return True
        if name == "to":
            target = _to_target(args, kwargs)
            if target == "host":
                if not _is_host(args[0]):
                    self._sync("to(cpu)")
                return True
            if target == "device":
                self.uploads += int(_is_host(args[0]))
                return False
        self.ops += 1
        self.views += int(name in _VIEWS or (name == "__getitem__" and _basic_index(args[1])))
        if name in _FACTORIES or (not ins and "device" in kwargs):
            host = _host_device(kwargs.get("device"))
            data = name in ("tensor", "as_tensor") and not ins  # Python data
            self.uploads += int(not host and (data or (bool(ins) and all_host)))
            return host if not ins or name != "as_tensor" else all_host
        self._side_effects(name, args, kwargs, all_host)
        return all_host

    def _side_effects(self, name: str, args, kwargs, all_host: bool) -> None:
        """Data-dependent shapes on device data; device values written into host tensors."""
        if all_host:
            return
        if name in _SHAPES:
            self._sync(name)
        elif name in ("__getitem__", "__setitem__") and len(args) > 1 and _is_mask(args[1]):
            self._sync(f"{name}[mask]")
        elif name == "where" and len(args) + len(kwargs) == 1:
            self._sync("where(cond)")
        elif name == "repeat_interleave" and kwargs.get("output_size") is None and (
                isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor)
                or (len(args) == 1 and "repeats" not in kwargs)):
            self._sync("repeat_interleave")
        elif name in ("__setitem__", "copy_") and _is_host(args[0]):
            self._sync(f"{name}(host <- device)")
        elif name == "copy_" and len(args) > 1 and _is_host(args[1]):
            self.uploads += 1


def _basic_index(ix) -> bool:
    """Whether an index makes a view: ints, slices, ``None``, ``...`` only."""
    items = ix if isinstance(ix, tuple) else (ix,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)


def _site() -> str:
    """``path:line`` of the innermost caller frame inside the package."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename.replace("\\", "/")
        if "/torchrankboost/" in fn and "/tests/" not in fn:
            return fn.split("/torchrankboost/", 1)[1] + f":{f.f_lineno}"
        f = f.f_back
    return "?"
