"""One HParams experiment definition per log folder.

TensorBoard's HParams tab reads its columns (the *experiment*: hyper-parameter and metric
columns) from one ``_hparams_/experiment`` summary; when several runs each carry one it
takes whichever it meets first, so columns such as ``loss.p`` appear and vanish between
restarts. The library therefore writes the experiment **once, in the folder above the
runs** (``runs/`` for the default ``runs/<name>-<timestamp>`` run folders, TensorBoard's
run ``.``), and each run writes only its session (its values and its end status).

The columns are the union the library knows, :func:`known_hparams`:

* the standard ones (:data:`~torchrankboost.tensorboard.hparams.STANDARD_HPARAMS`: ``algorithm``,
  ``loss``, ``learner``, ``learning_rate``, ``n_rounds``, ``seed``, ``data``...) and those
  the command line records (``metric``, ``early_stopping``, ``world_size``);
* every algorithm's parameters, ``<loss>.<setting>`` for every loss's and
  ``learner.<setting>`` for every weak learner's (the names ``get_params()`` reports, read
  from the registry), less the machinery's settings;

plus the columns the folder's definition already has and those of the run being written
(a training script's own hyper-parameters). The definition is rewritten only when that
union changes (a new column, a type learnt), atomically and under a lock, so two runs
starting together keep both runs' columns. Metric columns are the standard ones
(:func:`~torchrankboost.tensorboard.tags.declared_metrics`) plus every run's others, the same
way. Each column has a type: from the parameter's default (a bool, a number, a string) or,
for a parameter whose default is ``None``, from the first value a run gives it; values of
different types make it a string column.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .. import registry
from ..params import public_parameters
from .hparams import INTERNAL_PARAMS, SHOWN_HPARAMS, STANDARD_HPARAMS, clean_hparams, \
    hparams_plugin_summary
from .tags import declared_metrics, describe_tag

__all__ = ["EXPERIMENT_FILE", "known_hparams", "value_type", "read_experiment",
           "update_experiment", "experiment_summary"]

#: the file holding a folder's experiment definition (an event file TensorBoard reads as
#: the run ``.`` of that folder)
EXPERIMENT_FILE = "events.out.tfevents.0.torchrankboost-hparams"
#: hyper-parameters the command line and the fit records add to the standard ones
RUN_HPARAMS = ("metric", "early_stopping", "world_size", "kernel")
#: a component's parameters that are data or wiring, never columns
_NOT_COLUMNS = {"loss", "learner", "pairs", "callbacks", "distributed"}

# api_pb2.DataType values (kept as ints so that the union is computed without protos)
UNSET, STRING, BOOL, FLOAT64 = 0, 1, 2, 3


def value_type(v) -> int:
    """The column type of a value: bool, number (float64), string; ``UNSET`` for ``None``
    and other objects (learnt from a run's value later)."""
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, numbers.Real):
        return FLOAT64
    if isinstance(v, str):
        return STRING
    return UNSET


def _defaults(entry) -> Dict[str, object]:
    """``{name: default}`` of what ``get_params()`` reports for a registered class (the
    registry's defaults applied; a parameter without a default maps to ``None``)."""
    cls = entry.resolve()
    sig = inspect.signature(cls.__init__).parameters
    out = {}
    for name in public_parameters(cls):
        d = sig[name].default
        out[name] = entry.defaults.get(name, None if d is inspect.Parameter.empty else d)
    return out


@functools.lru_cache(maxsize=1)
def _known() -> Tuple[Tuple[str, int], ...]:
    cols: Dict[str, int] = {k: UNSET for k in STANDARD_HPARAMS + RUN_HPARAMS}
    cols.update(algorithm=STRING, loss=STRING, learner=STRING, data=STRING,
                metric=STRING, early_stopping=FLOAT64, world_size=FLOAT64, kernel=STRING,
                learning_rate=FLOAT64, n_rounds=FLOAT64, seed=FLOAT64)

    def add(name, default):
        t = value_type(default)
        if name not in cols or cols[name] == UNSET:
            cols[name] = t
        elif t not in (UNSET, cols[name]):
            cols[name] = STRING

    for kind, prefix in (("algorithm", ""), ("loss", "loss."), ("learner", "learner.")):
        for entry in registry.entries(kind):
            for name, default in _defaults(entry).items():
                if name in _NOT_COLUMNS or name in INTERNAL_PARAMS:
                    continue
                add(prefix + name, default)
    return tuple(cols.items())


def known_hparams() -> Dict[str, int]:
    """``{column: type}`` of every hyper-parameter the library records (see the module
    docstring); standard columns first."""
    return dict(_known())


def merge_columns(*sources: Mapping[str, int]) -> Dict[str, int]:
    """The union of ``{column: type}`` maps: a column typed in one source and ``UNSET`` in
    another keeps the type; two different types make a string column."""
    out: Dict[str, int] = {}
    for src in sources:
        for name, t in src.items():
            old = out.get(name, UNSET)
            out[name] = t if old == UNSET else old if t in (UNSET, old) else STRING
    return out


def experiment_summary(columns: Mapping[str, int], metric_tags: Sequence[str]):
    """The ``_hparams_/experiment`` summary of ``columns`` (``{name: type}``) and the
    metric columns ``metric_tags``; the columns of
    :data:`~torchrankboost.tensorboard.hparams.SHOWN_HPARAMS` are marked ``differs`` (TensorBoard
    shows the first five such columns without a click)."""
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    infos = [api_pb2.HParamInfo(name=k, type=t, differs=k in SHOWN_HPARAMS)
             for k, t in columns.items()]
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=t),
                                  display_name=t.split("/", 1)[-1],
                                  description=describe_tag(t)) for t in metric_tags]
    exp = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)
    return hparams_plugin_summary(metadata.EXPERIMENT_TAG,
                                      plugin_data_pb2.HParamsPluginData(experiment=exp))


def read_experiment(folder) -> Optional[Tuple[Dict[str, int], List[str]]]:
    """``({column: type}, metric tags)`` of the definition in ``folder`` (``None`` when
    there is none or it cannot be read: it is then written afresh)."""
    path = Path(folder) / EXPERIMENT_FILE
    if not path.is_file():
        return None
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.plugins.hparams import metadata

        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.tag == metadata.EXPERIMENT_TAG:
                    exp = metadata.parse_experiment_plugin_data(
                        v.metadata.plugin_data.content)
                    return ({h.name: int(h.type) for h in exp.hparam_infos},
                            [m.name.tag for m in exp.metric_infos])
    except Exception:  # noqa: BLE001 - a damaged definition is replaced, never fatal
        return None
    return None


def _write(folder: Path, columns: Mapping[str, int], metric_tags: Sequence[str]) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    from .._io import atomic_path

    now = time.time()
    with atomic_path(folder / EXPERIMENT_FILE, suffix=".part") as tmp:
        with open(tmp, "wb") as fh:
            w = RecordWriter(fh)
            w.write(Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
            w.write(Event(wall_time=now, step=0,
                          summary=experiment_summary(columns, metric_tags)
                          ).SerializeToString())


@contextlib.contextmanager
def _locked(folder: Path):
    """An exclusive lock on ``folder`` itself (``flock`` on the folder: no lock file left
    behind); no lock where ``fcntl`` or folder locks are missing."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):  # pragma: no cover - Windows
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # pragma: no cover - a file system without flock
            pass
        yield
    finally:
        os.close(fd)


def update_experiment(folder, hparams: Mapping[str, object],
                      metric_tags: Iterable[str] = ()) -> bool:
    """Make ``folder``'s definition hold the known columns, its own and this run's
    (``hparams``: the run's values, their types learnt; ``metric_tags``: its metric
    columns); written only when that changes. ``True`` when the file was (re)written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    run_cols = {k: value_type(v) for k, v in clean_hparams(hparams).items()}
    with _locked(folder):
        current = read_experiment(folder)
        old_cols, old_metrics = current if current is not None else ({}, [])
        cols = merge_columns(known_hparams(), old_cols, run_cols)
        metrics = declared_metrics([*old_metrics, *metric_tags])
        if current is not None and cols == old_cols and metrics == old_metrics:
            return False
        _write(folder, cols, metrics)
        return True
