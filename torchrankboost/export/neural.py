"""A neural ranker (:class:`~torchrankboost.nn.NeuralModel`) where models are served: ONNX
and ``torch.export``.

Both take padded queries, the form a serving batch has: ``X`` ``(B, L, F)`` float32 and
``mask`` ``(B, L)`` bool (true on real documents), and give ``scores`` ``(B, L)`` float32
(padding scores are meaningless). ``B`` and ``L`` are dynamic. The network's normalisation
is part of the graph. :func:`torchrankboost.nn.pad_queries` turns the library's flat batch
into this form and :func:`torchrankboost.nn.unpad_scores` back.

* :func:`to_onnx` — an ONNX graph (opset 17, torch's TorchScript-based exporter, which needs
  no extra package); ONNX Runtime scores agree with ``predict`` to float32 rounding (the
  tests hold them within 1e-5).
* :func:`to_torch_export` — a ``torch.export.ExportedProgram`` (saved with
  ``torch.export.save`` when a path is given: its own serialisation, no pickle of code).
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import torch

from .._io import atomic_path

__all__ = ["to_onnx", "to_torch_export", "example_inputs"]

ONNX_OPSET = 17


def example_inputs(model, *, queries: int = 2, length: int = 5):
    """``(X (queries, length, F), mask)``: tracing inputs for ``model`` (a ragged mask, so
    the padding path is exercised)."""
    F = model.num_features
    dev = model.device
    X = torch.zeros(queries, length, F, device=dev)
    mask = torch.ones(queries, length, dtype=torch.bool, device=dev)
    mask[-1, length // 2:] = False
    return X, mask


def _network(model):
    net = getattr(model, "network", None)
    if net is None or not callable(getattr(net, "config", None)):
        raise ValueError(f"expected a NeuralModel, got {type(model).__name__}")
    return net


def to_onnx(model, path, *, opset: int = ONNX_OPSET) -> None:
    """Write ``model`` as an ONNX graph ``(X, mask) -> scores`` (module docstring),
    atomically."""
    net = _network(model)
    was = net.training
    net.eval()
    X, mask = example_inputs(model)
    axes = {"X": {0: "queries", 1: "documents"}, "mask": {0: "queries", 1: "documents"},
            "scores": {0: "queries", 1: "documents"}}
    try:
        with atomic_path(os.fspath(path)) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation note
            torch.onnx.export(net, (X, mask), tmp, input_names=["X", "mask"],
                              output_names=["scores"], dynamic_axes=axes,
                              opset_version=int(opset), dynamo=False)
    finally:
        net.train(was)


def to_torch_export(model, path: Optional[str] = None):
    """A ``torch.export.ExportedProgram`` of ``(X, mask) -> scores`` with dynamic ``B`` and
    ``L``; saved to ``path`` (``torch.export.save``) when given."""
    net = _network(model)
    was = net.training
    net.eval()
    try:
        X, mask = example_inputs(model)
        B, L = torch.export.Dim("queries"), torch.export.Dim("documents")
        prog = torch.export.export(net, (X, mask), dynamic_shapes={
            "X": {0: B, 1: L}, "mask": {0: B, 1: L}})
    finally:
        net.train(was)
    if path is not None:
        with atomic_path(os.fspath(path)) as tmp, open(tmp, "wb") as fh:
            torch.export.save(prog, fh)  # (a file object: the temporary name is no *.pt2)
    return prog
