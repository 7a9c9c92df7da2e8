"""``torchrankboost train --config run.toml``: a run's options from a TOML file, and the
resolved options of every run saved beside its model.

The file's keys are the ``train`` flags without their dashes, or the fields of
:class:`~torchrankboost.cli.options.TrainOptions` (``rounds``, ``max_leaves`` or
``max-leaves``, ``learning_rate``, ``data``, ``nproc``...); the parameters of the algorithm,
the loss, the learner and a neural network are tables (``[params]``, ``[loss_params]``,
``[learner_params]``, ``[model_params]``; ``param``, ``loss-param``, ``learner-param`` and
``model-param`` name the same). A flag given on the command
line overrides the file's value; a table's keys are merged, the command line's winning::

    data = "synthetic"
    loss = "pnorm_push"
    rounds = 200
    max_leaves = 15

    [loss_params]
    p = 4

An unknown key or a value of the wrong type is one line naming the file and the key (exit
status 2). Reading TOML needs Python 3.11 (``tomllib``) or the ``tomli`` package.

Every run writes the options it ran with, as such a file, beside its model:
``<model stem>.config.toml`` (``model.config.toml`` for ``model.safetensors``), so that
``train --config model.config.toml`` runs it again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from typing import Any, Callable, Dict, Mapping, Sequence, Set

from .._io import atomic_write
from .inputs import CLIError
from .options import TrainOptions

__all__ = ["apply_config", "read_toml", "config_path", "write_config", "config_text",
           "TABLES"]

#: the table keys of the file -> the ``train`` flag's destination that takes them
TABLES = {"params": "param", "param": "param", "loss_params": "loss_param",
          "loss_param": "loss_param", "learner_params": "learner_param",
          "learner_param": "learner_param", "model_params": "model_param",
          "model_param": "model_param"}
#: destinations of the ``train`` parser that are not run options
_NOT_KEYS = {"config", "command", "handler", "help"}


def read_toml(path) -> Dict[str, Any]:
    """The TOML file ``path`` as a dict (:class:`CLIError` for a missing, unreadable or
    malformed file, or when no TOML reader is installed)."""
    try:
        import tomllib as toml  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as toml  # type: ignore[no-redef]
        except ImportError:
            raise CLIError(f"--config {path}: reading TOML needs Python 3.11 or the tomli "
                           f"package (pip install tomli)") from None
    try:
        with open(path, "rb") as fh:
            return toml.load(fh)
    except OSError as exc:
        raise CLIError(f"--config {path}: {exc.strerror or exc}") from None
    except toml.TOMLDecodeError as exc:
        raise CLIError(f"--config {path}: not a valid TOML file ({exc})") from None


def _train_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["train"]


def _given(build_parser: Callable[[], argparse.ArgumentParser], raw: Sequence[str]) -> Set[str]:
    """The ``train`` destinations the command line ``raw`` sets itself: a fresh parser whose
    defaults are all suppressed keeps only those."""
    parser = build_parser()
    for action in _train_parser(parser)._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(list(raw)))) - _NOT_KEYS


def _key(key: str, actions: Mapping[str, argparse.Action]) -> str:
    """The destination of the file's ``key`` (dashes or underscores; ``tensorboard`` for
    ``no_tensorboard``), or ``""`` when there is none."""
    k = key.replace("-", "_")
    if k in TABLES:
        return TABLES[k]
    if k == "tensorboard":
        return k
    return k if k in actions and k not in _NOT_KEYS and k not in TABLES.values() else ""


def _what(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "true or false"
    if action.nargs == "+":
        return "a list of strings"
    if action.type is int:
        return "an integer"
    if action.type is float:
        return "a number"
    return "a string"


def _value(dest: str, value: Any, action: argparse.Action, path, key: str) -> Any:
    """``value`` as the parser would have stored it for ``dest`` (the file's types
    checked: :class:`CLIError` naming the file and the key)."""
    if dest == "zero_based" and isinstance(value, bool):
        value = "yes" if value else "no"
    if dest == "propensity" and isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if dest == "report" and isinstance(value, str):
        value = [value]
    want = _what(action)
    ok = {"true or false": lambda v: isinstance(v, bool),
          "a list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str)
                                                                     for x in v),
          "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "a number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "a string": lambda v: isinstance(v, str)}[want](value)
    if not ok:
        raise CLIError(f"--config {path}: {key} must be {want}, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise CLIError(f"--config {path}: {key} must be one of "
                       f"{', '.join(map(str, action.choices))}, got {value!r}")
    return float(value) if want == "a number" else value


def apply_config(args: argparse.Namespace, raw: Sequence[str],
                 build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Fill the parsed ``train`` flags ``args`` from ``args.config``: each key the command
    line ``raw`` does not set itself; the tables go to ``args.config_tables`` (merged under
    the command line's ``-p`` / ``--loss-param`` / ``--learner-param`` by
    :func:`~torchrankboost.cli.train.train_options`)."""
    path = args.config
    values = read_toml(path)
    actions = {a.dest: a for a in _train_parser(build_parser())._actions}
    given = _given(build_parser, raw)
    tables: Dict[str, Dict[str, Any]] = {}
    for key, value in values.items():
        dest = _key(key, actions)
        if not dest:
            raise CLIError(f"--config {path}: unknown key {key!r}; the keys are the train "
                           f"flags without dashes (rounds, max_leaves, data, ...) and the "
                           f"tables params, loss_params, learner_params")
        if dest in TABLES.values():
            if not isinstance(value, dict):
                raise CLIError(f"--config {path}: {key} must be a table ([{key}] with "
                               f"KEY = VALUE lines), got {value!r}")
            tables.setdefault(dest, {}).update(value)
        elif dest == "tensorboard":
            if not isinstance(value, bool):
                raise CLIError(f"--config {path}: {key} must be true or false, got {value!r}")
            if "no_tensorboard" not in given:
                args.no_tensorboard = not value
        elif dest not in given:
            setattr(args, dest, _value(dest, value, actions[dest], path, key))
    args.config_tables = tables


# ---------------------------------------------------------------------------- writing
def config_path(model_path: str) -> str:
    """Where the resolved options of a run go: ``<model stem>.config.toml``."""
    stem = model_path[:-len(".safetensors")] if model_path.endswith(".safetensors") \
        else model_path
    return stem + ".config.toml"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) \
            if not math.isfinite(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}"
                               for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"{type(v).__name__} has no TOML form")


def config_text(options: TrainOptions) -> str:
    """The TOML text of ``options``: every field that is set (``None`` left out), the
    parameter dicts as tables; ``train --config`` reads it back to the same options."""
    fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    lines = ["# the options of a torchrankboost train run (torchrankboost train --config "
             "FILE runs it again)"]
    tables = []
    for name, value in fields.items():
        if value is None:
            continue
        if name in ("params", "loss_params", "learner_params"):
            if value:
                tables.append((name, value))
            continue
        lines.append(f"{name} = {_toml_value(value)}")
    for name, table in tables:
        lines += ["", f"[{name}]"]
        for k, v in table.items():
            if v is None:
                lines.append(f"# {k} = None (no TOML form)")
                continue
            try:
                lines.append(f"{json.dumps(str(k))} = {_toml_value(v)}")
            except TypeError:
                lines.append(f"# {k} = {v!r} (no TOML form)")
    return "\n".join(lines) + "\n"


def write_config(model_path: str, options: TrainOptions) -> str:
    """Write :func:`config_text` of ``options`` beside the model ``model_path``
    (atomically); returns its path."""
    path = config_path(model_path)
    text = config_text(options)
    atomic_write(path, lambda fh: fh.write(text))
    return path

