"""The reader seam: how a file format (or an in-memory table) becomes ranking data.

Every loading path of the library — a whole file, one rank's rows of it, a file read
straight into bin codes, the bin cache — goes through a :class:`Reader` found here by the
file's suffix or a format name (:func:`reader_for`). A **new format is one file plus one
line**: a module with a ``Reader`` subclass whose :meth:`Reader.open` returns a
:class:`Source` (the row-chunk protocol below), and its ``"module:Class"`` line in
:data:`FORMATS`.

**The protocol.** ``reader.open(path, columns)`` gives a :class:`Source`:

* ``feature_names`` (``F`` names; ``None`` for formats without names, SVMlight), the
  feature count ``num_features``, the row count ``num_rows``;
* ``unit_starts``: ``(U + 1,)`` row offsets of the format's natural units (Parquet row
  groups, Arrow record batches; ``[0, n]`` for a stream), where ranks prefer to cut;
* ``chunks(start, stop)``: the rows ``[start, stop)`` as :class:`Chunk` s, in order — a
  ``(m, F)`` float32 feature block, ``(m,)`` labels, query ids and the optional per-row
  ``weight``, ``position`` and ``group_weight`` — each checked as it is read (one line
  naming the file, the row and the column of a problem);
* ``qids(start, stop)``: the query ids alone (to find query boundaries cheaply).

What is built on it (:mod:`.tables`): the whole data or one rank's rows as
:class:`~torchrankboost.data.RankingData`, and a file streamed into bin codes without a float
matrix. A reader may override those with a faster path of its own (SVMlight:
:mod:`.svmlight_format`, over the compiled reader).

**Column roles** (:class:`Columns`): tables name their columns; the label and the query id
columns are ``label`` and ``qid`` by default, ``weight``, ``position`` and
``group_weight`` are used when a column of that name exists, and the features are every
other numeric column (or the list given).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Columns", "ReadOptions", "Chunk", "Source", "Reader", "FORMATS", "ROLES", "SIDE_ROLES",
           "reader_for", "format_of", "supported_suffixes", "MissingDependency",
           "require_pyarrow"]

#: the roles a column can have besides being a feature
ROLES = ("label", "qid", "weight", "position", "group_weight")
#: the optional per-row columns a chunk may carry
SIDE_ROLES = ("weight", "position", "group_weight")

#: format name → ``("module:Class", suffixes)``; the first format whose suffix ends the
#: file's name reads it (longest suffixes first), anything else is SVMlight/LETOR text
FORMATS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "svmlight": ("torchrankboost.data.svmlight_format:SvmlightReader",
                 (".txt", ".svm", ".svmlight", ".libsvm", ".gz", ".bz2")),
    "parquet": ("torchrankboost.data.arrow:ParquetReader", (".parquet", ".pq")),
    "arrow": ("torchrankboost.data.arrow:IpcReader", (".feather", ".arrow", ".ipc")),
    "csv": ("torchrankboost.data.arrow:CsvReader", (".csv", ".csv.gz", ".csv.bz2")),
    "tsv": ("torchrankboost.data.arrow:TsvReader", (".tsv", ".tsv.gz", ".tsv.bz2")),
}
_DEFAULT = "svmlight"


class MissingDependency(ImportError, ValueError):
    """An optional package a reader needs is not installed (one line saying what to
    install; a ``ValueError`` too, so the command line reports it as bad input)."""


def require_pyarrow(what: str = "reading Parquet, Arrow/Feather and CSV data"):
    """``pyarrow``, or :class:`MissingDependency` saying how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise MissingDependency(f"{what} needs pyarrow: pip install 'torchrankboost[arrow]' "
                                f"(or pip install pyarrow)") from None
    return pyarrow


# ============================================================================ column roles
@dataclass(frozen=True)
class Columns:
    """Which table columns play which role.

    Attributes:
        label, qid, weight, position, group_weight: the column of each role (``None``: the
            role is absent).
        features: the feature columns, in order (``None``: every other numeric column, in
            the table's order).
        required: the roles whose column must exist (a missing one is a ``ValueError``
            naming the file and the column); the others are used when present.

    :meth:`of` builds it from the names a user gives: a given name is required, a role
    left ``None`` keeps its default name and is used when such a column exists (``label``
    and ``qid`` always required unless ``optional=`` says otherwise).
    """

    label: Optional[str] = "label"
    qid: Optional[str] = "qid"
    weight: Optional[str] = "weight"
    position: Optional[str] = "position"
    group_weight: Optional[str] = "group_weight"
    features: Optional[Tuple[str, ...]] = None
    required: FrozenSet[str] = frozenset({"label", "qid"})

    @classmethod
    def of(cls, *, label: Optional[str] = None, qid: Optional[str] = None,
           weight: Optional[str] = None, position: Optional[str] = None,
           group_weight: Optional[str] = None, features: Optional[Sequence[str]] = None,
           optional: Sequence[str] = ()) -> "Columns":
        """Roles from user names (``None``: the default name); ``optional``: roles that
        need not exist even by their default name (``predict`` reads no label)."""
        given = dict(label=label, qid=qid, weight=weight, position=position,
                     group_weight=group_weight)
        for role, name in given.items():
            if name is not None and (not isinstance(name, str) or not name):
                raise ValueError(f"the {role} column must be a column name (a non-empty "
                                 f"string), got {name!r}")
        if features is not None:
            if isinstance(features, str) or not all(isinstance(f, str) and f
                                                    for f in features):
                raise ValueError(f"features must be a list of column names, got {features!r}")
            features = tuple(features)
        required = {r for r, v in given.items() if v is not None}
        required |= {"label", "qid"} - set(optional)
        names = {r: v if v is not None else r for r, v in given.items()}
        return cls(**names, features=features, required=frozenset(required))

    def role_names(self) -> Dict[str, str]:
        """``{role: column}`` of the roles that have a column name."""
        return {r: getattr(self, r) for r in ROLES if getattr(self, r) is not None}

    def as_dict(self) -> dict:
        """The roles as plain JSON (what a bin cache records)."""
        return {**{r: getattr(self, r) for r in ROLES},
                "features": None if self.features is None else list(self.features),
                "required": sorted(self.required)}


@dataclass(frozen=True)
class ReadOptions:
    """How a run reads its files: ``zero_based`` and ``max_features`` (SVMlight's feature
    numbering and widest matrix, as :func:`~torchrankboost.data.load_svmlight` takes them)
    and ``columns`` (the column roles of tables)."""

    zero_based: object = "auto"
    max_features: Optional[int] = None
    columns: Columns = Columns()


# ============================================================================ the protocol
@dataclass
class Chunk:
    """Rows ``start .. start + m - 1`` of a source.

    Attributes:
        start: the first row's index in the source (0-based, data rows only).
        X: ``(m, F)`` float32 features, C-contiguous (NaN = missing).
        labels: ``(m,)`` float64 labels (``NaN`` when the source has no label column).
        qid: ``(m,)`` int64 query ids (``0`` when the source has no query id column).
        side: the optional per-row columns present (``weight`` float64, ``position``
            int64, ``group_weight`` float64), each ``(m,)``.
    """

    start: int
    X: np.ndarray
    labels: np.ndarray
    qid: np.ndarray
    side: Dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.X.shape[0])


class Source:
    """An opened source of rows (see the module docstring). Subclasses set ``path``,
    ``format``, ``feature_names``, ``num_rows``, ``unit_starts`` and ``roles`` (``{role:
    column}`` of the role columns present) and implement :meth:`chunks`."""

    path: str = ""
    format: str = ""
    feature_names: Optional[Tuple[str, ...]] = None
    num_rows: int = 0
    unit_starts: np.ndarray = np.zeros(1, dtype=np.int64)
    roles: Dict[str, str] = {}

    @property
    def num_features(self) -> int:
        return len(self.feature_names or ())

    def chunks(self, start: int = 0, stop: Optional[int] = None) -> Iterator[Chunk]:
        """The rows ``[start, stop)`` (``stop=None``: to the end) as chunks, in order."""
        raise NotImplementedError

    def qids(self, start: int, stop: int) -> np.ndarray:
        """``(stop - start,)`` int64 query ids of those rows (default: from the chunks)."""
        parts = [c.qid for c in self.chunks(start, stop)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``(len(rows), F)`` float32 features of the sorted, distinct ``rows`` (the bin
        edges' sample; default: one pass over the chunks)."""
        S = np.empty((rows.size, self.num_features), dtype=np.float32)
        for ch in self.chunks():
            lo, hi = np.searchsorted(rows, [ch.start, ch.start + len(ch)])
            S[lo:hi] = ch.X[rows[lo:hi] - ch.start]
        return S

    def close(self) -> None:
        """Release the file (a no-op by default)."""

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Reader:
    """A file format. ``open`` is the protocol; ``tabular`` says whether the format names
    its columns (column roles apply) or numbers its features (SVMlight).

    Optional faster paths a reader may define (the loading paths use them when present):
    ``read_files(paths, *, options, part, context)`` (several files of the format read
    together: one :class:`~torchrankboost.data.RankingData` per file) and
    ``read_binned(path, *, n_bins, sample_count, seed, options)`` (``(data, binned)`` or
    ``None``), both with a :class:`ReadOptions`."""

    name: str = ""
    tabular: bool = True

    def open(self, path, columns: Columns) -> Source:
        raise NotImplementedError


# ============================================================================ the registry
_INSTANCES: Dict[str, Reader] = {}


def supported_suffixes() -> Tuple[str, ...]:
    """Every registered suffix, longest first."""
    return tuple(sorted({s for _, (_, sfx) in FORMATS.items() for s in sfx}, key=len,
                        reverse=True))


def format_of(path) -> str:
    """The format name of a file by its suffix (anything unknown: ``"svmlight"``)."""
    name = os.fspath(path).lower()
    for suffix in supported_suffixes():
        if name.endswith(suffix):
            return next(f for f, (_, sfx) in FORMATS.items() if suffix in sfx)
    return _DEFAULT


def reader_for(path=None, *, format: Optional[str] = None) -> Reader:
    """The reader of ``path`` (by suffix) or of the format named ``format``; an unknown
    format name is a ``ValueError`` listing the known ones."""
    key = (format or format_of(Path(path))).strip().lower()
    if key not in FORMATS:
        raise ValueError(f"unknown data format {format!r}; known: {', '.join(FORMATS)}")
    if key not in _INSTANCES:
        module, _, attr = FORMATS[key][0].partition(":")
        _INSTANCES[key] = getattr(importlib.import_module(module), attr)()
    return _INSTANCES[key]
