"""Rankers built from names, and saved models loaded from files (used by the CLI and the
scikit-learn estimator).

:func:`make_ranker` turns the user's choices (an algorithm name, a loss and a weak learner by
name or as objects, their parameters) into an unfitted ranker of the contract
(:mod:`torchrankboost.contract`); the caller then calls its ``fit`` directly::

    from torchrankboost.factory import make_ranker
    ranker = make_ranker("boost", loss="pnorm_push", loss_params={"p": 4}, max_leaves=15)
    model = ranker.fit(X, y, groups, eval_set=[(Xv, yv, gv)], early_stopping_rounds=20)

:func:`load_model` reads back what ``model.save(path)`` wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from . import registry
from .params import build_from_params
from ._threads import DEFAULT_THREADS, check_threads, resolve_device
from .contract import DeviceLike, PathLike, Ranker, RankingModel

if TYPE_CHECKING:
    import torch

__all__ = ["make_ranker", "ranker_from_params", "rounds_kept", "load_model",
           "resolve_device"]


def _learner(entry_name: str, learner, learner_params: Dict[str, Any],
             max_leaves: Optional[int], default: Optional[str]):
    """The weak learner object, or ``None`` when the user chose none and there is no
    default (the algorithm keeps its own)."""
    spec = learner if learner is not None else default
    if spec is None and max_leaves is not None:
        spec = "tree"  # --max-leaves alone: a tree learner of that size
    if spec is None:
        if learner_params:
            raise ValueError(f"learner parameters given but no learner: name one "
                             f"(--learner) for algorithm {entry_name!r}")
        return None
    params = dict(learner_params)
    if max_leaves is not None:
        if not isinstance(spec, str) or registry.lookup("learner", spec).name != "tree":
            raise ValueError("max_leaves applies to the tree learner only")
        params.setdefault("max_leaves", int(max_leaves))
    return registry.resolve_learner(spec, **params)


def make_ranker(algorithm: str = "boost", *, loss: Any = None, learner: Any = None,
                n_rounds: Optional[int] = None, learning_rate: Optional[float] = None,
                max_leaves: Optional[int] = None, loss_params: Optional[dict] = None,
                learner_params: Optional[dict] = None, params: Optional[dict] = None,
                seed: Optional[int] = None, n_threads: Optional[int] = DEFAULT_THREADS) -> Ranker:
    """An unfitted ranker from names (or objects) and parameters.

    ``algorithm="boost"``: the generic :class:`~torchrankboost.boosting.Booster` with
    ``loss`` (default ``"exponential"``) and ``learner`` (default ``"tree"``). Any other
    algorithm (``torchrankboost list algorithms``) has its own objective: giving it a
    ``loss`` is an error. ``learner`` (a name with ``learner_params``, or an object) and
    ``max_leaves`` (a tree's size; alone it means a tree learner) become the algorithm's
    ``learner``. ``n_rounds``, ``learning_rate`` and ``seed`` are passed when given
    (``None``: the algorithm's default); ``params`` are the algorithm's other options.

    ``n_threads``: torch intra-op threads while the ranker fits (every algorithm has it, see
    :mod:`torchrankboost._threads`; default 1, ``None`` keeps torch's setting).

    Unknown names or parameters raise ``ValueError`` naming the valid ones (a parameter the
    algorithm does not have, e.g. ``learning_rate`` for RankBoost's exact steps, included).
    """
    n_threads = check_threads(n_threads)
    entry = registry.lookup("algorithm", algorithm)
    kwargs: Dict[str, Any] = {}
    if entry.name == "boost":
        kwargs["loss"] = registry.resolve_loss(loss if loss is not None else "exponential",
                                               **dict(loss_params or {}))
    elif loss is not None or loss_params:
        raise ValueError(f"a loss (--loss/--loss-param) goes with the generic driver "
                         f"(algorithm 'boost'); algorithm {entry.name!r} has its own objective "
                         f"(set its options with params / -p KEY=VALUE)")
    weak = _learner(entry.name, learner, dict(learner_params or {}), max_leaves,
                    "tree" if entry.name == "boost" else None)
    if weak is not None:
        kwargs["learner"] = weak
    for key, val in (("n_rounds", n_rounds), ("learning_rate", learning_rate), ("seed", seed)):
        if val is not None:
            kwargs[key] = val
    kwargs.update(params or {})
    ranker = registry.create("algorithm", entry.name, **kwargs)
    ranker.n_threads = n_threads
    return ranker


def ranker_from_params(spec: Dict[str, Any], *, n_threads: Optional[int] = DEFAULT_THREADS):
    """An unfitted ranker from its description ``{"type": ..., "params": {...}}``: what
    ``ranker.get_params()`` wrote (``type`` the class name, e.g. ``"Booster"``) or a
    registered algorithm name (``"rankboost"``); nested loss and learner descriptions are
    built too. ``n_threads`` as in :func:`make_ranker`."""
    n_threads = check_threads(n_threads)
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"a ranker description is a dict with 'type' and 'params', got "
                         f"{spec!r}")
    if spec["type"] not in [e.target.rpartition(":")[2] for e in registry.entries("algorithm")]:
        entry = registry.lookup("algorithm", spec["type"])  # ValueError naming the choices
        spec = {"type": entry.target.rpartition(":")[2],
                "params": dict(entry.defaults, **(spec.get("params") or {}))}
    ranker = build_from_params(spec)
    ranker.n_threads = n_threads
    return ranker


def rounds_kept(ranker, early_stopping_rounds: Optional[int]) -> int:
    """Rounds in a fitted ranker's model: the best round when early stopping cut the model
    back to it, else every round that ran (``len(history_)``, after the rounds of a
    continued model: ``info["init_rounds"]``)."""
    if early_stopping_rounds and ranker.best_round_ is not None:
        return int(ranker.best_round_)
    info = getattr(getattr(ranker, "model_", None), "info", None)
    return len(ranker.history_) + int((info or {}).get("init_rounds", 0))


def load_model(path: PathLike, *, device: DeviceLike = None, max_features: Optional[int] = None
               ) -> RankingModel:
    """Load a model saved by ``torchrankboost train`` / ``model.save(path)``: an
    :class:`~torchrankboost.boosting.Ensemble` or a
    :class:`~torchrankboost.boosting.papers.LinearRanker` or a
    :class:`~torchrankboost.nn.NeuralModel` (told apart by the file's metadata).
    The file is verified on the way in (its SHA-256, types, structure, at most
    ``max_features`` features, default 100,000): a folder, a pipe, an unreadable, corrupt or
    tampered file raises ``ValueError`` naming it."""
    from ._modelfile import guarded, metadata_keys

    with guarded(path):
        keys = metadata_keys(path)
    linear = "linear" in keys
    if "neural" in keys:
        from .nn.model import NeuralModel

        return NeuralModel.load(path, device=device, max_features=max_features)
    if linear:
        from .boosting.papers.ranksvm import LinearRanker

        return LinearRanker.load(path, device=device, max_features=max_features)
    from .boosting.ensemble import Ensemble

    return Ensemble.load(path, device=device, max_features=max_features)
