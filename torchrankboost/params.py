"""Parameters as data: ``get_params()`` on every loss, weak learner and algorithm.

A class that mixes in :class:`Params` reports the keyword parameters of its ``__init__``
read from the attributes of the same name (scikit-learn's convention), as plain JSON-able
values, so that::

    loss = PNormPushLoss(4.0, log=True)
    loss.get_params()                     # {'p': 4.0, 'log': True, 'normalize': False, ...}
    type(loss)(**loss.get_params())       # an equal loss
    json.dumps(booster.get_params())      # nested components included

Values are encoded by :func:`to_params`:

* ``None``, bools, ints, floats and strings as they are; tuples and lists as lists; dicts
  with string keys as dicts; a ``torch.device`` as its string;
* a *component* (an object with ``get_params``: a Booster's loss and learner, a pair spec
  :class:`~torchrankboost.pairs.Graded` / :class:`~torchrankboost.pairs.Bipartite`) as
  ``{"type": "<class name>", "params": {...}}`` (:func:`component_params`);
* explicit pairs (:class:`~torchrankboost.pairs.ExplicitPairs`) are data, not parameters:
  they are described as ``{"type": "ExplicitPairs", "num_pairs": P, "weighted": bool}``
  (no ``"params"``: such a description cannot be built back; pass the pairs again).

:func:`build_from_params` turns a ``{"type", "params"}`` description back into an object
(its nested components first); the constructors that take components (a Booster's
``loss``/``learner``, an algorithm's ``learner``/``pairs``) accept such descriptions
through :func:`from_params`, so ``type(x)(**x.get_params())`` holds for them too.

Classes are found by the name under which they mixed :class:`Params` in (every loss,
learner, algorithm and pair spec of the library; a name defined twice is refused).

Which ``__init__`` parameters are not reported: those in ``_not_params`` (runtime wiring:
``callbacks``, ``distributed`` by default).
"""

from __future__ import annotations

import copy
import inspect
import numbers
from typing import Any, Dict

__all__ = ["Params", "to_params", "component_params", "describe", "format_params",
           "from_params", "build_from_params", "params_class", "public_parameters"]

#: class name -> class, for every class that mixes in :class:`Params`
_CLASSES: Dict[str, type] = {}
_AMBIGUOUS = object()


class Params:
    """Mixin: :meth:`get_params` from the keyword parameters of ``__init__``."""

    #: ``__init__`` parameters that are runtime wiring, not parameters
    _not_params: tuple = ("callbacks", "distributed")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = cls.__name__
        if name.startswith("_"):
            return
        seen = _CLASSES.get(name)
        _CLASSES[name] = cls if seen is None or seen is cls else _AMBIGUOUS

    def __sklearn_clone__(self):
        """scikit-learn's ``clone`` of a component held by an estimator: a deep copy (its
        ``get_params`` is JSON, not scikit-learn's ``get_params(deep=...)``)."""
        return copy.deepcopy(self)

    def get_params(self) -> Dict[str, Any]:
        """``{name: value}`` of the ``__init__`` parameters (plain JSON-able values; see
        :func:`to_params`): ``type(self)(**self.get_params())`` is an equal object."""
        return {name: to_params(getattr(self, name))
                for name in public_parameters(type(self))}


def public_parameters(cls) -> list:
    """The names :meth:`Params.get_params` reports for ``cls``: its ``__init__``'s
    parameters that can be passed by keyword, less ``_not_params``."""
    skip = set(getattr(cls, "_not_params", ()))
    sig = inspect.signature(cls.__init__)
    return [n for n, p in sig.parameters.items()
            if n != "self" and n not in skip
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def component_params(obj) -> Dict[str, Any]:
    """``{"type": class name, "params": obj.get_params()}`` of a component."""
    return {"type": type(obj).__name__, "params": obj.get_params()}


def describe(obj):
    """A JSON-able description of a component for logs and provenance: its
    :func:`component_params` when it has parameters that can be written down, else
    ``{"type": class name}`` (a user's loss function, a learner holding a tensor)."""
    if obj is None or isinstance(obj, str):
        return obj
    try:
        return component_params(obj)
    except (AttributeError, TypeError, ValueError):
        return {"type": getattr(obj, "__name__", None) or type(obj).__name__}


def format_params(value) -> str:
    """A description as one line of text: a component as ``Type(k=v, ...)`` (its
    parameters as Python literals), anything else as its ``str``."""
    if isinstance(value, dict) and "type" in value:
        inner = value.get("params")
        if inner is None:
            rest = ", ".join(f"{k}={v!r}" for k, v in value.items() if k != "type")
        else:
            rest = ", ".join(f"{k}={format_params(v) if isinstance(v, dict) else repr(v)}"
                             for k, v in inner.items())
        return f"{value['type']}({rest})"
    return str(value)


def to_params(value):
    """A JSON-able form of a parameter value (see the module docstring); ``ValueError``
    for a value that has none (e.g. a tensor)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [to_params(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: to_params(v) for k, v in value.items()}
    if callable(getattr(value, "get_params", None)):
        return component_params(value)
    kind = type(value).__name__
    if kind == "device":  # torch.device, without importing torch here
        return str(value)
    if kind == "ExplicitPairs":
        return {"type": "ExplicitPairs", "num_pairs": int(value.num_pairs),
                "weighted": value.weight is not None}
    raise ValueError(f"a parameter value of type {kind} has no JSON form: {value!r}")


def params_class(name: str) -> type:
    """The class that mixed in :class:`Params` under ``name``; ``ValueError`` otherwise."""
    cls = _CLASSES.get(name)
    if cls is None:
        raise ValueError(f"unknown type {name!r} in a parameter description; known types: "
                         f"{', '.join(sorted(_CLASSES))}")
    if cls is _AMBIGUOUS:
        raise ValueError(f"type {name!r} names two classes: it cannot be built back")
    return cls


def build_from_params(spec: Dict[str, Any]):
    """The object a ``{"type": name, "params": {...}}`` description stands for (nested
    descriptions built first). ``ValueError`` for an unknown type or a description
    without ``"params"`` (explicit pairs: data, not parameters)."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"a component description is a dict with 'type' and 'params', "
                         f"got {spec!r}")
    if "params" not in spec:
        raise ValueError(f"{spec['type']} is data, not parameters: it cannot be built from "
                         f"its description {spec!r} (pass the object itself)")
    cls = params_class(spec["type"])
    kwargs = {k: from_params(v) for k, v in dict(spec["params"] or {}).items()}
    return cls(**kwargs)


def from_params(value):
    """``value`` with component descriptions (dicts with a ``"type"``) built into objects;
    everything else unchanged. Constructors that take components call it."""
    if isinstance(value, dict) and "type" in value:
        return build_from_params(value)
    return value
