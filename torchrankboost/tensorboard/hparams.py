"""The hyper-parameters of a run as TensorBoard's HParams tab shows them.

A run's hyper-parameters are the settings a person tunes (:func:`info_hparams`: the
algorithm as named, the loss and the weak learner as names with their main and non-default
settings as separate columns, learning rate, rounds, seed); the machinery's settings
(:data:`INTERNAL_PARAMS`) are left out. Each run writes its session
(:func:`session_summaries`) directly as the hparams plugin's protos, so that booleans stay
booleans; the columns are written once per log folder
(:mod:`torchrankboost.tensorboard.experiment`).
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Dict, Mapping

from .. import registry
from ..contract import FitInfo
from ..params import describe, format_params

__all__ = ["STANDARD_HPARAMS", "SHOWN_HPARAMS", "INTERNAL_PARAMS", "component_setting",
           "component_hparams", "clean_hparams", "hparams_plugin_summary", "hparam_value",
           "session_summaries", "info_hparams"]

#: the first hyper-parameter columns of a log folder's experiment definition (in this
#: order; :mod:`.experiment` adds every other column the library knows)
STANDARD_HPARAMS = ("algorithm", "loss", "learner", "learner.max_leaves", "learning_rate",
                    "n_rounds", "seed", "data")
#: the columns TensorBoard's HParams table shows without a click (it shows five: those
#: marked ``differs``, in name order; the others are one click away in its left panel);
#: ``data`` among them, so that runs on different data are told apart at a glance
SHOWN_HPARAMS = ("algorithm", "data", "learner", "learning_rate", "loss")
#: settings of the machinery rather than of the model: not HParams columns
INTERNAL_PARAMS = frozenset({
    "callbacks", "step", "curvature", "device", "base_score", "eval_train",
    "exact_hess_max_n", "hess_floor", "line_search_tol", "line_search_order",
    "max_step_ratio", "verbose", "track_margin", "on_unbounded", "n_threads"})

#: settings always shown as their own column when the component has them
_MAIN_SETTINGS = {"learner": ("max_leaves",), "loss": ("p",)}


def component_setting(value, name: str):
    """The setting ``name`` of a component description (``{"type", "params"}``), or
    ``None``."""
    if isinstance(value, dict):
        return (value.get("params") or {}).get(name)
    return None


def _registry_defaults(kind: str, class_name: str):
    """``(registered name, its default parameters)`` of a component class (``(None, {})``
    when the class is not registered under ``kind``)."""
    for e in sorted(registry.entries(kind), key=lambda e: bool(e.defaults)):
        if e.target.rpartition(":")[2] == class_name:
            return e.name, e.create().get_params()
    return None, {}


def _differs(value, default) -> bool:
    if isinstance(value, float) and isinstance(default, numbers.Real) and \
            not isinstance(default, bool):
        return not math.isclose(float(default), value)
    return value != default


def component_hparams(kind: str, value) -> Dict[str, Any]:
    """``{kind: name, "<kind>.<setting>": value, ...}`` for a loss or weak learner given as
    an object, its description ``{"type": ..., "params": {...}}`` (its ``get_params``, as
    :class:`~torchrankboost.contract.FitInfo` carries it) or a name: the registered name,
    the main settings (a tree's ``max_leaves``) and the settings that differ from the
    registered defaults, as separate columns (a nested component as one line of text)."""
    if value is None:
        return {}
    if not isinstance(value, (str, dict)):
        value = describe(value)
    if isinstance(value, str) or "type" not in value:
        return {kind: value if isinstance(value, str) else str(value)}
    name, defaults = _registry_defaults(kind, value["type"])
    out: Dict[str, Any] = {kind: name or value["type"]}
    for k, v in (value.get("params") or {}).items():
        if v is None:
            continue
        if k in _MAIN_SETTINGS.get(kind, ()) or (k in defaults and _differs(v, defaults[k])):
            out[f"{kind}.{k}"] = format_params(v) if isinstance(v, dict) else v
    return out


def clean_hparams(hp: Mapping[str, Any]) -> Dict[str, Any]:
    """Values TensorBoard can show: bool, str, int/float; ``None`` dropped; other objects as
    their ``str``."""
    clean: Dict[str, Any] = {}
    for k, v in hp.items():
        if v is None:
            continue
        if isinstance(v, (bool, str)):
            clean[k] = v
        elif isinstance(v, numbers.Real) and not isinstance(v, bool):
            clean[k] = float(v) if not isinstance(v, numbers.Integral) else int(v)
        else:
            clean[k] = str(v)
    return clean


def hparams_plugin_summary(tag: str, data):
    """A summary carrying hparams plugin data (``HParamsPluginData``) under ``tag``."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import metadata

    data.version = metadata.PLUGIN_DATA_VERSION
    md = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name=metadata.PLUGIN_NAME, content=data.SerializeToString()))
    return Summary(value=[Summary.Value(tag=tag, metadata=md)])


def hparam_value(v):
    """A cleaned hyper-parameter value (see :func:`clean_hparams`) as the
    ``google.protobuf.Value`` of a session: a bool stays a bool (unlike
    ``torch.utils.tensorboard.summary.hparams``), numbers are float64."""
    from google.protobuf import struct_pb2

    if isinstance(v, bool):
        return struct_pb2.Value(bool_value=v)
    if isinstance(v, (int, float)):
        return struct_pb2.Value(number_value=float(v))
    return struct_pb2.Value(string_value=str(v))


def session_summaries(hparams: Mapping[str, Any], *, group_name: str = ""):
    """The session summaries of one run (session start with its hyper-parameter values,
    session end): what a run writes into its own folder. The columns (the experiment) are
    written once per log folder (:mod:`.experiment`)."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(group_name=group_name,
                                             start_time_secs=time.time())
    for k, v in clean_hparams(hparams).items():
        start.hparams[k].CopyFrom(hparam_value(v))
    end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS,
                                         end_time_secs=time.time())
    return (hparams_plugin_summary(metadata.SESSION_START_INFO_TAG,
                                   plugin_data_pb2.HParamsPluginData(session_start_info=start)),
            hparams_plugin_summary(metadata.SESSION_END_INFO_TAG,
                                   plugin_data_pb2.HParamsPluginData(session_end_info=end)))


def info_hparams(info: FitInfo) -> Dict[str, Any]:
    """The hyper-parameters a person tunes, from a run's ``FitInfo``: ``algorithm`` (the name
    the user chose), ``n_rounds``, the loss and the weak learner as names with their main
    and non-default settings as separate columns (``learner``, ``learner.max_leaves``,
    ``loss``, ``loss.p``...; see :func:`component_hparams`),
    ``learning_rate``, ``seed`` and the algorithm's other options; the machinery's settings
    (step rule, curvature, device, base score, ...) are left out."""
    out: Dict[str, Any] = {"algorithm": info.algorithm, "n_rounds": info.n_rounds}
    for k, v in info.params.items():
        if k in INTERNAL_PARAMS:
            continue
        if k == "loss" and info.algorithm != "boost":
            continue  # a paper's algorithm has its own fixed objective (QBRank's proxy loss)
        if k in ("loss", "learner"):
            out.update(component_hparams(k, v))
            continue
        out[k] = v if v is None or isinstance(v, (bool, str, numbers.Real)) else str(v)
    return out
