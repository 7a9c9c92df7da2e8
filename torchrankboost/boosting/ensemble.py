r"""The fitted boosting model: a base score plus weighted weak models.

.. math::

    F_T(x) = b + \sum_{t=1}^{T} \nu_t\, f_t(x), \qquad \nu_t = \text{learning\_rate}\cdot\alpha_t

Scores are accumulated in float64 in round order (so a saved and reloaded model predicts
bit-identically on CPU). Models save as safetensors (tensors) with the JSON description in
the safetensors metadata — no pickle anywhere.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .._errors import first_line
from ..kernels import choose_backend
from .inputs import as_features
from ..contract import ArrayLike, DeviceLike, PathLike
from .learners.tree import TreeModel

__all__ = ["Ensemble", "as_features", "weak_summary"]

FORMAT = "torchrankboost.Ensemble"
FORMAT_VERSION = 2  # 2: the file carries a SHA-256 (older files load with a warning)


def default_registry(tensors, meta):
    from .learners import weak_model_from_state  # noqa: WPS433 (late: learners import torch only)

    return weak_model_from_state(tensors, meta)


class Ensemble:
    """Additive model ``F(x) = base_score + Σ_t weights[t] · models[t](x)``.

    Args:
        models: fitted weak models (``predict``, ``state``, ... see
            :mod:`torchrankboost.boosting.learners`).
        weights: per-round weights ``ν_t = learning_rate · α_t`` (floats).
        base_score: the constant initial score ``b``.
        num_features: number of input features ``F`` (checked at prediction).
        info: JSON-able extras (loss name, options, best round, evaluation history ...).

    Attributes:
        n_rounds: number of weak models ``T``.
        best_round, best_score, evals_result: copied from the booster's fit (or ``None``).
    """

    def __init__(self, models: Sequence = (), weights: Sequence[float] = (), *,
                 base_score: float = 0.0, num_features: int, info: Optional[dict] = None):
        if len(models) != len(weights):
            raise ValueError(f"got {len(models)} models but {len(weights)} weights")
        self.models: List = list(models)
        self.weights: List[float] = [float(w) for w in weights]
        self.base_score = float(base_score)
        self.num_features = int(num_features)
        self.info: dict = dict(info or {})
        self._predict_cache: dict = {}  # what the tree backend keeps between predictions

    # ------------------------------------------------------------------ basic
    @property
    def n_rounds(self) -> int:
        return len(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def __repr__(self) -> str:
        kinds = sorted({type(m).__name__ for m in self.models})
        return (f"Ensemble(n_rounds={self.n_rounds}, base_score={self.base_score:.6g}, "
                f"num_features={self.num_features}, weak={','.join(kinds) or '-'})")

    @property
    def best_round(self) -> Optional[int]:
        return self.info.get("best_round")

    @property
    def best_score(self) -> Optional[float]:
        return self.info.get("best_score")

    @property
    def evals_result(self) -> Optional[dict]:
        return self.info.get("evals_result")

    def append(self, model: Any, weight: float) -> None:
        """Add one round (used by the booster)."""
        self.models.append(model)
        self.weights.append(float(weight))

    def truncate(self, n: int) -> "Ensemble":
        """A new ensemble holding the first ``n`` rounds (``0 <= n <= n_rounds``)."""
        if not (0 <= int(n) <= self.n_rounds):
            raise ValueError(f"n must be in [0, {self.n_rounds}], got {n}")
        n = int(n)
        return Ensemble(self.models[:n], self.weights[:n], base_score=self.base_score,
                        num_features=self.num_features, info=dict(self.info))

    def to(self, device: DeviceLike) -> "Ensemble":
        """Move every weak model to ``device`` (in place); returns ``self``."""
        self.models = [m.to(device) for m in self.models]
        return self

    # ------------------------------------------------------------------ prediction
    def _check_X(self, X, device=None) -> Tensor:
        X = as_features(X, device=device)
        if X.shape[1] != self.num_features:
            raise ValueError(f"X has {X.shape[1]} features but the model was trained with "
                             f"{self.num_features}")
        return X

    def _rounds(self, n_rounds: Optional[int]) -> int:
        T = self.n_rounds if n_rounds is None else int(n_rounds)
        if not 0 <= T <= self.n_rounds:
            raise ValueError(f"n_rounds must be in [0, {self.n_rounds}], got {n_rounds}")
        return T

    def predict(self, X: ArrayLike, *, n_rounds: Optional[int] = None,
                batch_size: Optional[int] = 262144, device: DeviceLike = None,
                contrib: bool = False) -> Tensor:
        """Scores ``(n,)`` float64 of the first ``n_rounds`` rounds (default all).

        ``X``: ``(n, F)`` features (tensor, numpy, scipy sparse; NaN = missing), predicted in
        row batches of ``batch_size`` (``None``: one batch) on ``device`` (default: where
        ``X`` lives; the weak models must be on that device, see :meth:`to`).

        ``contrib=True``: instead, the exact path-dependent TreeSHAP values ``φ`` ``(n, F + 1)``
        float64 (:mod:`torchrankboost.explain`), the expected value ``b + Σ_t ν_t E[f_t]`` in
        the last column (LightGBM's ``pred_contrib`` layout): ``φ.sum(1)`` equals the scores.
        Tree and stump rounds with node covers only (a model file written before covers were
        recorded raises a one-line ``ValueError``).
        """
        X = self._check_X(X, device)
        T = self._rounds(n_rounds)
        if contrib:
            from ..explain import contributions

            return contributions(self, X, T)
        n = X.shape[0]
        out = torch.full((n,), self.base_score, dtype=torch.float64, device=X.device)
        bs = n if not batch_size else int(batch_size)
        if bs < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        models, weights = self.models[:T], self.weights[:T]
        trees = all(isinstance(m, TreeModel) and m.leaf_value.device == X.device for m in models)
        for start in range(0, n, max(bs, 1)):
            xb = X[start:start + bs]
            acc = out[start:start + bs]
            if trees:  # the backend's pass over all trees (the same sums as the loop below)
                backend = choose_backend("auto", device=xb.device, data_dtype=xb.dtype,
                                         num_rows=xb.shape[0], announce=False)
                backend.predict_trees(models, weights, xb, acc, cache=self._predict_cache)
                continue
            for t in range(T):
                acc += weights[t] * models[t].predict(xb).to(torch.float64)
        return out

    def apply(self, X: ArrayLike, *, n_rounds: Optional[int] = None, device: DeviceLike = None
             ) -> Tensor:
        """``(n, T)`` int64 leaf index of every row in each of the first ``n_rounds`` rounds
        (LightGBM's ``pred_leaf``; a stump's leaves: 0 for ``x <= θ`` or NaN, 1 above)."""
        from ..explain import leaf_indices

        return leaf_indices(self, self._check_X(X, device), self._rounds(n_rounds))

    def staged_predict(self, X: ArrayLike, *, device: DeviceLike = None) -> Iterator[Tensor]:
        """Yield the ``(n,)`` float64 scores after each round ``1..T`` (same arithmetic as
        :meth:`predict`, so the last yield equals ``predict(X)``). ``torch.stack(list(...))``
        gives a ``(T, n)`` tensor."""
        X = self._check_X(X, device)
        acc = torch.full((X.shape[0],), self.base_score, dtype=torch.float64, device=X.device)
        for t in range(self.n_rounds):
            acc = acc + self.weights[t] * self.models[t].predict(X).to(torch.float64)
            yield acc

    # ------------------------------------------------------------------ importance
    def feature_importance(self, kind: str = "gain") -> Tensor:
        """``(F,)`` importance summed over rounds: ``"gain"`` (float64 total split gain, as
        LightGBM's ``importance_type="gain"``) or ``"count"`` (int64 number of splits)."""
        F = self.num_features
        if kind == "gain":
            out = torch.zeros(F, dtype=torch.float64)
            for m in self.models:
                out += m.feature_gain(F).to("cpu", torch.float64)
        elif kind == "count":
            out = torch.zeros(F, dtype=torch.int64)
            for m in self.models:
                out += m.feature_count(F).to("cpu", torch.int64)
        else:
            raise ValueError(f"kind must be 'gain' or 'count', got {kind!r}")
        return out

    # ------------------------------------------------------------------ persistence
    def state(self) -> Tuple[Dict[str, Tensor], Dict[str, Any]]:
        """``(tensors, meta)``: flat dict of CPU tensors and a JSON-able description."""
        tensors: Dict[str, Tensor] = {}
        metas = []
        for t, m in enumerate(self.models):
            ts, meta = m.state()
            for k, v in ts.items():
                tensors[f"m{t}.{k}"] = v.detach().to("cpu").contiguous().clone()
            metas.append(meta)
        tensors["weights"] = torch.tensor(self.weights, dtype=torch.float64)
        meta = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "base_score": self.base_score.hex(),
            "num_features": self.num_features,
            "n_rounds": self.n_rounds,
            "models": metas,
            "info": self.info,
        }
        return tensors, meta

    def save(self, path: PathLike) -> None:
        """Write a ``.safetensors`` file: the weak models' tensors (``m{t}.{name}``), the
        float64 round weights, and the JSON description in the metadata (``"ensemble"``).
        The write is atomic (a temporary file in the target's folder replaces it)."""
        from .._modelfile import write_model_file

        tensors, meta = self.state()
        write_model_file(path, tensors, "ensemble", meta, what="Ensemble")

    @classmethod
    def load(cls, path: PathLike, *, device: DeviceLike = None,
             model_from_state: Optional[Callable[[dict, dict], object]] = None,
             max_features: Optional[int] = None) -> "Ensemble":
        """Read a file written by :meth:`save` (no pickle: safetensors + JSON).

        ``model_from_state(tensors, meta)`` rebuilds one weak model (default: the registry
        ``torchrankboost.boosting.learners.weak_model_from_state``, dispatching on
        ``meta["type"]``). ``device``: where to put the tensors (default CPU).

        Verified before use (:mod:`torchrankboost._modelfile`): the file's SHA-256, the JSON
        types and tensor dtypes as written, ``num_features <= max_features`` (default
        100,000), index ranges, acyclic tree links, depth, finite values and scores that
        cannot overflow. A corrupt or tampered file raises
        ``ValueError("<path>: invalid model file: <problem>")``.
        """
        from .._modelfile import guarded

        with guarded(path):
            return cls._load(path, device, model_from_state, max_features)

    @classmethod
    def _load(cls, path, device, model_from_state, max_features) -> "Ensemble":
        from .._modelfile import (ModelFileError, check_ensemble, check_ensemble_state,
                                  check_format, hex_float, read_model_file)

        meta, tensors = read_model_file(path, "ensemble", "Ensemble", device=device)
        check_format(path, meta, FORMAT, FORMAT_VERSION, default_version=0)
        check_ensemble_state(path, meta, tensors, max_features=max_features)
        try:
            build = model_from_state or default_registry
            models = []
            for t, mmeta in enumerate(meta["models"]):
                prefix = f"m{t}."
                ts = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
                models.append(build(ts, mmeta))
            weights = tensors["weights"].to("cpu").tolist()
            ens = cls(models, weights, base_score=hex_float(meta["base_score"], "base score"),
                      num_features=meta["num_features"], info=meta.get("info") or {})
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                RuntimeError) as exc:
            what = f"missing entry {exc}" if isinstance(exc, KeyError) else first_line(exc)
            raise ModelFileError(f"{path}: invalid model file: {what}") from None
        check_ensemble(path, ens, meta)
        return ens


_log = logging.getLogger("torchrankboost")


def _summary_failed(model, what: str, exc: BaseException, instead: str) -> None:
    msg = (f"round record: {type(model).__name__}.{what} failed with {type(exc).__name__}: "
           f"{exc}; recording {instead}")
    _log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def weak_summary(model) -> dict:
    """The weak model's description for the round record. A failing ``summary()`` or
    ``state()`` must not break a fit, but it is never silent either: it is announced with a
    ``RuntimeWarning`` naming the model and the error, and the record falls back to the next
    description (``state()``'s plain values, else the type name)."""
    if hasattr(model, "summary"):
        try:
            return dict(model.summary())
        except Exception as exc:  # noqa: BLE001 - reported, then the next description
            _summary_failed(model, "summary()", exc, "its state()")
    try:
        tensors, meta = model.state()
    except Exception as exc:  # noqa: BLE001 - reported, then the type name
        _summary_failed(model, "state()", exc, "the type name only")
        return {"type": type(model).__name__}
    out = {k: v for k, v in meta.items() if isinstance(v, (int, float, str, bool))}
    out.update(_small_tensors({k: v for k, v in tensors.items() if v.numel() <= 64}))
    return out


def _small_tensors(tensors: dict) -> dict:
    """``{name: tensor.tolist()}`` for small tensors, with one device-to-host copy per device
    (their bytes side by side, each read back in its dtype: exact)."""
    out, by_device = {}, {}
    for k, v in tensors.items():
        by_device.setdefault(v.device, []).append((k, v.detach()))
    for items in by_device.values():
        raw = [v.reshape(-1).contiguous().view(torch.uint8) for _, v in items]
        flat = torch.cat(raw).cpu()
        at = 0
        for (k, v), r in zip(items, raw):
            out[k] = flat[at:at + r.numel()].clone().view(v.dtype).reshape(v.shape).tolist()
            at += r.numel()
    return {k: out[k] for k in tensors}
