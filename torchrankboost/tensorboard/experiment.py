"""One HParams experiment definition per log folder, the same in every run of it.

TensorBoard's HParams tab reads its columns (the *experiment*: hyper-parameter and metric
columns) from one ``_hparams_/experiment`` summary; when several runs carry different ones it
takes whichever it meets first, so columns such as ``loss.p`` would appear and vanish
between restarts. Each run therefore holds the definition in its own folder (the file
:data:`EXPERIMENT_FILE`, read by TensorBoard as part of that run: no run of its own in the
run lists), and every run of the log folder (``runs/`` for the default
``runs/<name>-<timestamp>`` run folders) holds **the same** one: the union of

* the standard columns (:data:`~torchrankboost.tensorboard.hparams.STANDARD_HPARAMS`:
  ``algorithm``, ``loss``, ``learner``, ``learning_rate``, ``n_rounds``, ``seed``,
  ``data``...) and those the command line records (``metric``, ``early_stopping``,
  ``world_size``, ``kernel``);
* the columns of the runs in the folder: each run's hyper-parameters (``loss.p`` only when
  some run of the folder has a p-norm loss; a training script's own settings).

When a run adds columns, the definition is rewritten in every run folder that holds one,
atomically and under a lock on the log folder, so two runs starting together keep both
runs' columns; otherwise nothing is written. A definition that older versions wrote in the
log folder itself (TensorBoard's phantom run ``.``) is merged and removed. Metric columns
are the standard ones (:func:`~torchrankboost.tensorboard.tags.declared_metrics`: test
NDCG@10 first) plus every run's others, the same way. Each column has a type: from the
first value a run gives it (a bool, a number, a string); values of different types make it
a string column. :func:`known_hparams` lists every column the library's components could
add (the registry's parameters), for reference.
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

__all__ = ["EXPERIMENT_FILE", "standard_hparams", "known_hparams", "value_type", "read_experiment",
           "update_experiment", "experiment_summary"]

#: the file holding a run's copy of the log folder's experiment definition (an event file
#: TensorBoard reads as part of that run)
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


def standard_hparams() -> Dict[str, int]:
    """``{column: type}`` of the columns every log folder's definition starts with."""
    cols: Dict[str, int] = {k: UNSET for k in STANDARD_HPARAMS + RUN_HPARAMS}
    cols.update(algorithm=STRING, loss=STRING, learner=STRING, data=STRING,
                metric=STRING, early_stopping=FLOAT64, world_size=FLOAT64, kernel=STRING,
                learning_rate=FLOAT64, n_rounds=FLOAT64, seed=FLOAT64)
    return cols


@functools.lru_cache(maxsize=1)
def _known() -> Tuple[Tuple[str, int], ...]:
    cols = standard_hparams()

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
    """``{column: type}`` of every hyper-parameter the library's registered components can
    record (the standard columns first, then every algorithm's, loss's and learner's
    ``get_params()`` names); a folder's definition holds only the columns of its runs."""
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


def _definitions(folder: Path, run: Path) -> List[Path]:
    """The run folders of ``folder`` holding a definition, and ``run``."""
    found = [p.parent for p in folder.glob(f"*/{EXPERIMENT_FILE}")]
    return sorted(set(found) | {run})


def update_experiment(folder, hparams: Mapping[str, object],
                      metric_tags: Iterable[str] = (), *, run=None) -> bool:
    """Bring the definition of the log folder ``folder`` to the union of the standard
    columns, those of its runs' definitions and this run's (``hparams``: the run's values,
    their types learnt; ``metric_tags``: its metric columns), in the run folder ``run``
    (default: ``folder`` itself, for a single run) and in every run folder of ``folder``
    that holds one; each file is written only when it changes. ``True`` when some file was
    (re)written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    run = Path(run) if run is not None else folder
    run.mkdir(parents=True, exist_ok=True)
    run_cols = {k: value_type(v) for k, v in clean_hparams(hparams).items()}
    with _locked(folder):
        holders = _definitions(folder, run)
        legacy = folder / EXPERIMENT_FILE if run != folder else None
        sources = {p: read_experiment(p) for p in holders}
        if legacy is not None and legacy.is_file():  # older versions: the phantom run "."
            sources[folder] = read_experiment(folder)
        cols, metrics = standard_hparams(), declared_metrics()
        for current in sources.values():
            if current is not None:
                cols = merge_columns(cols, current[0])
                metrics = declared_metrics([*metrics, *current[1]])
        cols = merge_columns(cols, run_cols)
        metrics = declared_metrics([*metrics, *metric_tags])
        wrote = False
        for p in holders:
            if sources[p] != (cols, metrics):
                _write(p, cols, metrics)
                wrote = True
        if legacy is not None and legacy.is_file():
            legacy.unlink()
            wrote = True
        return wrote
