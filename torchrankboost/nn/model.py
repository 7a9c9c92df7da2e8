"""A fitted neural ranker (:class:`NeuralModel`): scores, saved and loaded without pickle.

The file is the library's one model format (:mod:`torchrankboost._modelfile`: safetensors
tensors and a JSON description under the metadata key ``"neural"``, with a SHA-256): the
network's ``state_dict`` (normalisation statistics included) and ``{"format", "version",
"architecture", "config", "num_features", "info"}``. Loading rebuilds the network from the
architecture and its configuration and accepts the tensors only when they are exactly the
network's (names, shapes, floating dtypes, finite values): anything else is one
``ValueError`` naming the file. :func:`torchrankboost.factory.load_model` tells a neural
model from the others by that key.

``predict(X, groups)`` scores a flat batch in chunks of whole queries (eval mode, no
gradient). Export: :meth:`NeuralModel.to_onnx` and :meth:`NeuralModel.export`
(:mod:`torchrankboost.export.neural`) over padded queries ``(B, L, F)`` and their mask.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import numpy as np
import torch
from torch import Tensor

from ..contract import ArrayLike, DeviceLike, PathLike
from ..groups import Groups, as_groups
from .models import build_network

__all__ = ["NeuralModel", "KEY", "FORMAT", "check_state"]

KEY = "neural"
FORMAT = "torchrankboost.NeuralModel"
VERSION = 1
#: documents per chunk of :meth:`NeuralModel.predict` (whole queries)
PREDICT_DOCS = 1 << 16


def _as_features(X, device) -> Tensor:
    if not isinstance(X, Tensor):
        if hasattr(X, "toarray"):  # scipy sparse
            X = X.toarray()
        X = torch.as_tensor(np.asarray(X, dtype=np.float32))
    if X.dim() != 2:
        raise ValueError(f"X must be 2-D (n, F), got shape {tuple(X.shape)}")
    if not X.dtype.is_floating_point:
        X = X.to(torch.float32)
    return X.to(device)


class NeuralModel:
    """A trained network and what it was trained with (``info``: a JSON-able dict).

    Attributes: ``network`` (the module: :class:`~torchrankboost.nn.MLPScorer` or
    :class:`~torchrankboost.nn.ListwiseTransformer`), ``num_features``, ``info``,
    ``architecture``."""

    uses_groups = True  # predict takes the queries (a context-aware model needs them)

    def __init__(self, network: torch.nn.Module, *, info: Optional[Dict[str, Any]] = None):
        self.network = network
        self.info: Dict[str, Any] = dict(info or {})

    @property
    def architecture(self) -> str:
        return self.network.architecture

    @property
    def num_features(self) -> int:
        return int(self.network.config()["n_features"])

    @property
    def device(self) -> torch.device:
        return next(self.network.parameters()).device

    def to(self, device: DeviceLike) -> "NeuralModel":
        self.network.to(device)
        return self

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def predict(self, X: ArrayLike, groups: Any = None, *, batch_docs: int = PREDICT_DOCS) -> Tensor:
        """``(n,)`` float32 scores of the rows of ``X`` ``(n, F)`` (a tensor, an array or a
        scipy sparse matrix) with their queries ``groups`` (a :class:`Groups`, per-row
        contiguous query ids, or ``None``: one query), in chunks of whole queries of about
        ``batch_docs`` documents (eval mode, no gradient)."""
        dev = self.device
        X = _as_features(X, dev)
        if X.shape[1] != self.num_features:
            raise ValueError(f"X has {X.shape[1]} features, the model expects "
                             f"{self.num_features}")
        n = X.shape[0]
        if groups is not None and not isinstance(groups, Groups):
            groups = Groups.from_qid(np.asarray(groups))
        groups = as_groups(groups, n, device=dev).fix_sizes()
        net = self.network
        was = net.training
        net.eval()
        try:
            if n == 0:
                return X.new_zeros(0)
            if not net.needs_queries:
                return torch.cat([net.score(X[a:a + batch_docs], None)
                                  for a in range(0, n, batch_docs)])
            return self._chunks(X, groups, batch_docs)
        finally:
            net.train(was)

    def _chunks(self, X: Tensor, groups: Groups, batch_docs: int) -> Tensor:
        off = groups.offsets.cpu().numpy()
        out, a = [], 0
        G = off.shape[0] - 1
        while a < G:  # whole queries up to batch_docs documents (one query at least)
            b = int(np.searchsorted(off, off[a] + batch_docs, side="right")) - 1
            b = min(max(b, a + 1), G)
            sub = Groups.from_sizes(torch.from_numpy(off[a + 1:b + 1] - off[a:b]))
            s, e = int(off[a]), int(off[b])
            out.append(self.network.score(X[s:e], sub.fix_sizes().to(X.device)))
            a = b
        return torch.cat(out)

    def feature_importance(self, kind: str = "gain") -> Tensor:
        """``(F,)``: the Euclidean norm of each input's column in the first linear layer
        (after the normalisation: inputs on one scale) — a weight-based proxy; ``kind``
        must be ``"gain"`` (a network has no split counts)."""
        if kind != "gain":
            raise ValueError(f"a neural model has gain importances only, got kind={kind!r}")
        first = next(m for m in self.network.modules() if isinstance(m, torch.nn.Linear))
        return first.weight.detach().to(torch.float64).norm(dim=0).cpu()

    # ------------------------------------------------------------------ files
    def state(self) -> Any:
        """``(tensors, meta)``: what :meth:`save` writes."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in
                   self.network.state_dict().items()}
        meta = {"format": FORMAT, "version": VERSION, "architecture": self.architecture,
                "config": self.network.config(), "num_features": self.num_features,
                "info": _jsonable(self.info)}
        return tensors, meta

    def save(self, path: PathLike) -> None:
        """Write the model (atomically; safetensors + JSON, no pickle)."""
        from .._modelfile import write_model_file

        tensors, meta = self.state()
        write_model_file(path, tensors, KEY, meta, what="neural ranker")

    @classmethod
    def from_state(cls, tensors: Dict[str, Tensor], meta: dict, *, where: str = "model",
                   max_features: Optional[int] = None) -> "NeuralModel":
        """The model of :meth:`state`'s ``(tensors, meta)``, checked (``ValueError``
        naming ``where``)."""
        from .._modelfile import DEFAULT_MAX_FEATURES, ModelFileError

        try:
            model = _build_checked(tensors, meta, max_features or DEFAULT_MAX_FEATURES)
        except (ValueError, TypeError, KeyError) as exc:
            raise ModelFileError(f"{where}: invalid neural model: {exc}") from None
        return model

    @classmethod
    def load(cls, path: PathLike, *, device: Optional[DeviceLike] = None, max_features: Optional[int] = None) -> "NeuralModel":
        """Read a model written by :meth:`save` (checked: module docstring)."""
        from .._modelfile import read_model_file

        meta, tensors = read_model_file(path, KEY, "neural ranker", device="cpu")
        model = cls.from_state(tensors, meta, where=os.fspath(path), max_features=max_features)
        return model.to(device or "cpu")

    # ------------------------------------------------------------------ export
    def to_onnx(self, path: PathLike, **options: Any) -> None:
        """Write an ONNX graph ``(X (B, L, F), mask (B, L)) -> scores (B, L)``
        (:func:`torchrankboost.export.neural.to_onnx`)."""
        from ..export.neural import to_onnx

        to_onnx(self, path, **options)

    def export(self, path: Optional[PathLike] = None, **options: Any) -> Any:
        """A ``torch.export`` program of the same signature, saved to ``path`` when given
        (:func:`torchrankboost.export.neural.to_torch_export`)."""
        from ..export.neural import to_torch_export

        return to_torch_export(self, path, **options)

    def __repr__(self) -> str:
        return f"NeuralModel({self.architecture}, num_features={self.num_features})"


def _jsonable(obj):
    import json

    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if isinstance(o, Tensor)
                                 else repr(o)))


def check_state(net: torch.nn.Module, tensors: Dict[str, Tensor]) -> None:
    """One-line ``ValueError`` unless ``tensors`` are exactly ``net``'s state: the same names
    and shapes, floating point, finite (the check of every network file read back)."""
    expected = net.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"the tensors do not match the architecture (missing "
                         f"{missing or 'none'}, unexpected {extra or 'none'})")
    for k, t in tensors.items():
        if tuple(t.shape) != tuple(expected[k].shape):
            raise ValueError(f"tensor {k!r} has shape {tuple(t.shape)}, the architecture "
                             f"needs {tuple(expected[k].shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"tensor {k!r} has dtype {t.dtype}, not floating point")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"tensor {k!r} holds non-finite values")


def _build_checked(tensors: Dict[str, Tensor], meta: dict, max_features: int) -> NeuralModel:
    if meta.get("format") != FORMAT or not isinstance(meta.get("version"), int) \
            or meta["version"] > VERSION:
        raise ValueError(f"unknown format {meta.get('format')!r} version "
                         f"{meta.get('version')!r}")
    config = meta.get("config")
    if not isinstance(config, dict) or not isinstance(meta.get("architecture"), str):
        raise ValueError("no architecture and configuration")
    F = config.get("n_features")
    if isinstance(F, bool) or not isinstance(F, int) or not 1 <= F <= max_features:
        raise ValueError(f"n_features must be an integer in [1, {max_features}], got {F!r}")
    net = build_network(meta["architecture"], **config)
    check_state(net, tensors)
    expected = net.state_dict()
    net.load_state_dict({k: t.to(expected[k].dtype) for k, t in tensors.items()})
    info = meta.get("info")
    return NeuralModel(net.eval(), info=info if isinstance(info, dict) else {})
