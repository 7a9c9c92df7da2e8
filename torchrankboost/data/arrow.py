"""Tables through ``pyarrow``: Parquet, Arrow IPC/Feather and CSV/TSV files, and in-memory
tables (a ``pyarrow.Table``, a pandas or Polars ``DataFrame``), as sources of the reader
seam (:mod:`.readers`).

Every source streams: Parquet by row groups (read in batches of at most
:data:`CHUNK_ROWS` rows), Arrow IPC files by record batches (memory-mapped), CSV by the
blocks of pyarrow's streaming reader; so a file bigger than memory goes straight into bin
codes (:func:`~.tables.stream_binned_source`) without a float matrix.

**Column roles** (:class:`~.readers.Columns`): the ``label`` and ``qid`` columns, the
optional ``weight``, ``position`` and ``group_weight`` columns, and the features: the given
list, else every other numeric column (integers, floats, booleans, decimals) in the table's
order; other columns (strings such as a document id) are not read. Each chunk is checked as
it is converted, with one line naming the file, the row (data rows numbered from 1) and
the column: a missing role column, a non-numeric feature or role column, a NaN, infinite
or negative label, a NaN or non-integer query id, an infinite feature value (NaN or null =
missing), a negative weight or position, a CSV column mixing numbers and text, an empty or
truncated file.

Values: a float32 column is read as it is; other numeric columns are converted to float64,
then rounded to float32 (as the SVMlight reader rounds its decimals).
"""

from __future__ import annotations

import csv
import os
import re
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from .._errors import first_line
from .readers import Chunk, Columns, SIDE_ROLES, Source, require_pyarrow
from .tables import TableReader

__all__ = ["ParquetReader", "IpcReader", "CsvReader", "TsvReader", "TableSource",
           "as_arrow_table", "is_table", "CHUNK_ROWS"]

#: rows converted at a time (one ``(m, F)`` float32 block)
CHUNK_ROWS = 65536
_NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
_WHAT = {"label": "the label", "qid": "the query id", "weight": "the weight",
         "position": "the position", "group_weight": "the group weight"}


def _threads() -> bool:
    import torch

    return torch.get_num_threads() > 1


def _is_numeric(t) -> bool:
    pa = require_pyarrow()
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t) or pa.types.is_null(t))


# ============================================================================ the plan
class _Plan:
    """The columns of a schema by role: ``roles`` ``{role: name}`` of the role columns
    present, ``features`` the feature names, ``read`` every column to read."""

    def __init__(self, schema, columns: Columns, path: str) -> None:
        names = list(schema.names)
        dup = sorted({c for c in names if names.count(c) > 1})
        if dup:
            raise ValueError(f"{path}: column {dup[0]!r} appears more than once")
        types = {name: schema.field(name).type for name in names}
        self.roles: Dict[str, str] = {}
        for role, name in columns.role_names().items():
            if name in types:
                self.roles[role] = name
            elif role in columns.required:
                raise ValueError(f"{path}: no column {name!r} ({_WHAT[role]}; name another with "
                                 f"--{role.replace('_', '-')}-column, or {role}= in Python); "
                                 f"its columns: "
                                 f"{_list(names)}")
        for role, name in self.roles.items():
            if not _is_numeric(types[name]):
                raise ValueError(f"{path}: column {name!r} ({_WHAT[role]}) is of type "
                                 f"{types[name]}, not numeric")
        taken = set(self.roles.values())
        if columns.features is not None:
            self.features = list(columns.features)
            for name in self.features:
                if name not in types:
                    raise ValueError(f"{path}: no feature column {name!r}; its columns: "
                                     f"{_list(names)}")
                if name in taken:
                    raise ValueError(f"{path}: column {name!r} is both a feature and "
                                     f"{_WHAT[next(r for r, c in self.roles.items() if c == name)]}")
                if not _is_numeric(types[name]):
                    raise ValueError(f"{path}: feature column {name!r} is of type "
                                     f"{types[name]}, not numeric")
        else:
            self.features = [c for c in names if c not in taken and _is_numeric(types[c])]
        if not self.features:
            raise ValueError(f"{path}: no numeric feature column (its columns: {_list(names)})")
        self.ignored = [c for c in names if c not in taken and c not in self.features]
        self.types = types
        self.read = [c for c in names if c in taken or c in self.features]


def _list(names) -> str:
    names = list(names)
    return ", ".join(map(repr, names[:12])) + (f", ... ({len(names)} in all)"
                                                if len(names) > 12 else "")


# ============================================================================ conversion
def _floats(col) -> np.ndarray:
    """A numeric column (Array or ChunkedArray) as float32 (float32 as is) or float64
    values, NaN for nulls."""
    pa = require_pyarrow()
    t = col.type
    if t == pa.float32() and col.null_count == 0:
        return col.to_numpy()
    if not (t == pa.float64() or t == pa.float32()):
        col = col.cast(pa.float64(), safe=False)
    return col.to_numpy(zero_copy_only=False)


def _features(table, plan: _Plan, start: int, path: str) -> np.ndarray:
    """``(m, F)`` float32 features of a table slice (NaN = missing; infinite refused)."""
    m = table.num_rows
    X = np.empty((m, len(plan.features)), dtype=np.float32)
    with np.errstate(over="ignore"):
        for j, name in enumerate(plan.features):
            X[:, j] = _floats(table.column(name))
    bad = np.isinf(X)
    if bad.any():
        r, j = (int(v[0]) for v in np.nonzero(bad))
        raise ValueError(f"{path}: row {start + r + 1}: column {plan.features[j]!r} is "
                         f"infinite in float32 (features must be finite; NaN or null = "
                         f"missing)")
    return X


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _labels(col, start: int, path: str, name: str) -> np.ndarray:
    y = np.asarray(_floats(col), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        bad = ~np.isfinite(y) | ~np.isfinite(y.astype(np.float32)) | (y < 0)
    if bad.any():
        r = _first(bad)
        why = ("missing (NaN or null)" if np.isnan(y[r]) else f"{float(y[r])!r}, negative"
               if y[r] < 0 else f"{float(y[r])!r}, not finite in float32")
        raise ValueError(f"{path}: row {start + r + 1}: the label (column {name!r}) is {why}; "
                         f"labels must be finite relevance grades >= 0")
    return y


def _qids(col, start: int, path: str, name: str) -> np.ndarray:
    pa = require_pyarrow()
    if pa.types.is_integer(col.type) and col.null_count == 0:
        if col.type == pa.uint64():
            q = col.to_numpy()
            if (q > np.iinfo(np.int64).max).any():
                r = _first(q > np.iinfo(np.int64).max)
                raise ValueError(f"{path}: row {start + r + 1}: query id {int(q[r])} (column "
                                 f"{name!r}) does not fit in 64 bits")
        return np.asarray(col.to_numpy(), dtype=np.int64)
    q = np.asarray(_floats(col), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(q) | (q != np.round(q)) | (np.abs(q) >= 2.0 ** 63)
    if bad.any():
        r = _first(bad)
        why = "missing (NaN or null)" if np.isnan(q[r]) else f"{float(q[r])!r}, not an integer"
        raise ValueError(f"{path}: row {start + r + 1}: the query id (column {name!r}) is "
                         f"{why}; query ids must be integers")
    return q.astype(np.int64)


def _side(role: str, col, start: int, path: str, name: str) -> np.ndarray:
    v = np.asarray(_floats(col), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(v) | (v < 0)
        if role == "position":
            bad |= v != np.round(v)
    if bad.any():
        r = _first(bad)
        need = "an integer >= 0" if role == "position" else "finite and >= 0"
        raise ValueError(f"{path}: row {start + r + 1}: {_WHAT[role]} (column {name!r}) is "
                         f"{float(v[r])!r}; it must be {need}")
    return v.astype(np.int64) if role == "position" else v


def to_chunk(table, plan: _Plan, start: int, path: str) -> Chunk:
    """A table slice (``pyarrow.Table`` or ``RecordBatch``) whose first row is ``start`` as
    a checked :class:`~.readers.Chunk`."""
    m, roles = table.num_rows, plan.roles
    X = _features(table, plan, start, path)
    y = _labels(table.column(roles["label"]), start, path, roles["label"]) \
        if "label" in roles else np.full(m, np.nan)
    q = _qids(table.column(roles["qid"]), start, path, roles["qid"]) \
        if "qid" in roles else np.zeros(m, dtype=np.int64)
    side = {r: _side(r, table.column(roles[r]), start, path, roles[r])
            for r in SIDE_ROLES if r in roles}
    return Chunk(start, X, y, q, side)


# ============================================================================ sources
class _ArrowSource(Source):
    """A source over units of a pyarrow format: subclasses give ``_unit_batches(i, names,
    skip)`` (the record batches of unit ``i`` from its row ``skip`` on, only the columns
    ``names``)."""

    def _setup(self, schema, columns: Columns, sizes: List[int]) -> None:
        self.plan = _Plan(schema, columns, self.path)
        self.feature_names = tuple(self.plan.features)
        self.roles = dict(self.plan.roles)
        self.unit_starts = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        self.num_rows = int(self.unit_starts[-1])

    def _batches(self, start: int, stop: int, names) -> Iterator[Tuple[int, object]]:
        """``(row, batch)`` covering rows ``[start, stop)`` (batches cut to that range)."""
        u = self.unit_starts
        first = max(int(np.searchsorted(u, start, side="right")) - 1, 0)
        for i in range(first, u.size - 1):
            if u[i] >= stop:
                return
            row = max(start, int(u[i]))
            for b in self._unit_batches(i, names, row - int(u[i])):
                if row >= stop:
                    return
                m = min(b.num_rows, stop - row)
                yield row, (b if m == b.num_rows else b.slice(0, m))
                row += m

    def _unit_batches(self, i: int, names, skip: int):
        raise NotImplementedError

    def chunks(self, start: int = 0, stop: Optional[int] = None) -> Iterator[Chunk]:
        stop = self.num_rows if stop is None else stop
        for row, b in self._batches(start, stop, self.plan.read):
            for s in range(0, b.num_rows, CHUNK_ROWS):
                yield to_chunk(b.slice(s, CHUNK_ROWS), self.plan, row + s, self.path)

    def qids(self, start: int, stop: int) -> np.ndarray:
        if "qid" not in self.roles:
            return np.zeros(stop - start, dtype=np.int64)
        name = self.roles["qid"]
        parts = [_qids(b.column(name), row, self.path, name)
                 for row, b in self._batches(start, stop, [name])]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The sampled rows' features, each batch's rows taken before conversion."""
        S = np.empty((rows.size, self.num_features), dtype=np.float32)
        for row, b in self._batches(0, self.num_rows, self.plan.features):
            lo, hi = np.searchsorted(rows, [row, row + b.num_rows])
            if hi > lo:
                S[lo:hi] = _features(b.take(rows[lo:hi] - row), self.plan, row, self.path)
        return S


def _unreadable(path: str, kind: str, exc: BaseException) -> ValueError:
    msg = first_line(exc)
    if "size is 0 bytes" in msg or "Empty CSV" in msg or (
            os.path.isfile(path) and os.path.getsize(path) == 0):
        return ValueError(f"{path}: the file is empty")
    return ValueError(f"{path}: not a readable {kind} file, truncated or corrupt ({msg})")


class ParquetSource(_ArrowSource):
    """A Parquet file, read by row groups in batches of at most :data:`CHUNK_ROWS` rows
    (plain reads, not memory-mapped: a mapped file's touched pages would count in the
    process's resident memory, which stays the codes plus one chunk)."""

    format = "parquet"

    def __init__(self, path, columns: Columns = Columns()) -> None:
        pa = require_pyarrow()
        import pyarrow.parquet as pq

        self.path = str(path)
        try:
            self._file = pq.ParquetFile(self.path, memory_map=False)
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, "Parquet", exc) from None
        md = self._file.metadata
        self._setup(self._file.schema_arrow, columns,
                    [md.row_group(i).num_rows for i in range(md.num_row_groups)])

    def _unit_batches(self, i: int, names, skip: int):
        pa = require_pyarrow()
        try:
            if names == [self.roles.get("qid")]:  # query ids only: the whole column chunk
                t = self._file.read_row_group(i, columns=names, use_threads=False)
                yield from (b for b in t.slice(skip).to_batches())
                return
            done = 0
            for b in self._file.iter_batches(batch_size=CHUNK_ROWS, row_groups=[i],
                                             columns=names, use_threads=_threads()):
                if done + b.num_rows > skip:
                    yield b.slice(max(skip - done, 0))
                done += b.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, "Parquet", exc) from None

    def close(self) -> None:
        self._file.close()


class IpcSource(_ArrowSource):
    """An Arrow IPC file (Feather v2), memory-mapped, read by record batches."""

    format = "arrow"

    def __init__(self, path, columns: Columns = Columns()) -> None:
        pa = require_pyarrow()
        import pyarrow.ipc as ipc

        self.path = str(path)
        try:
            self._map = pa.memory_map(self.path)
            head = ipc.open_file(self._map)
            schema = head.schema
            plan = _Plan(schema, columns, self.path)
            key = schema.get_field_index(plan.read[0])
            counter = ipc.open_file(self._map, options=ipc.IpcReadOptions(included_fields=[key]))
            sizes = [counter.get_batch(i).num_rows for i in range(counter.num_record_batches)]
            self._readers = {}
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, "Arrow IPC/Feather (v2)", exc) from None
        self._schema = schema
        self._setup(schema, columns, sizes)

    def _unit_batches(self, i: int, names, skip: int):
        pa = require_pyarrow()
        import pyarrow.ipc as ipc

        key = tuple(names)
        try:
            if key not in self._readers:
                idx = [self._schema.get_field_index(c) for c in names]
                self._readers[key] = ipc.open_file(
                    self._map, options=ipc.IpcReadOptions(included_fields=idx))
            b = self._readers[key].get_batch(i)
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, "Arrow IPC/Feather (v2)", exc) from None
        yield b.slice(skip) if skip else b

    def close(self) -> None:
        self._readers = {}
        self._map.close()


class TableSource(_ArrowSource):
    """An in-memory ``pyarrow.Table`` (see :func:`as_arrow_table` for data frames), in
    units of :data:`CHUNK_ROWS` rows."""

    format = "table"

    def __init__(self, table, columns: Columns = Columns(), name: str = "<table>") -> None:
        self.path = name
        self._table = table
        n = table.num_rows
        self._setup(table.schema, columns, [min(CHUNK_ROWS, n - s) for s in
                                            range(0, n, CHUNK_ROWS)])

    def _unit_batches(self, i: int, names, skip: int):
        a = int(self.unit_starts[i]) + skip
        t = self._table.select(names).slice(a, int(self.unit_starts[i + 1]) - a)
        yield t


# ============================================================================ CSV
class CsvSource(_ArrowSource):
    """A CSV/TSV file (a header row of column names; ``.gz``/``.bz2`` decompressed on the
    way) through pyarrow's streaming reader: numeric columns are read as float64 (integer
    query ids as int64), so a column's type does not hang on its first block. Its row
    count comes from a first pass over the query id column."""

    format = "csv"

    def __init__(self, path, columns: Columns = Columns(), delimiter: str = ",") -> None:
        pa = require_pyarrow()
        import pyarrow.csv as pcsv

        self.path = str(path)
        self._parse = pcsv.ParseOptions(delimiter=delimiter)
        try:
            probe = pcsv.open_csv(self._stream(), parse_options=self._parse)
            schema = probe.schema
            first = probe.read_next_batch() if schema.names else None
        except StopIteration:
            first = None
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, "CSV", exc) from None
        if first is not None:  # before the plan: a mixed column is not "no feature"
            taken = set(columns.role_names().values())
            _check_mixed(first, [c for c in schema.names if c not in taken], self.path)
        plan = _Plan(schema, columns, self.path)
        self._types = {c: (pa.int64() if plan.roles.get("qid") == c and
                           pa.types.is_integer(schema.field(c).type) else pa.float64())
                       for c in plan.read if not pa.types.is_boolean(schema.field(c).type)}
        sizes = [b.num_rows for b in self._stream_batches([plan.read[0]])]
        self._setup(schema, columns, [s for s in sizes if s] or [0])

    def _stream(self):
        pa = require_pyarrow()
        return pa.input_stream(self.path, compression="detect")

    def _stream_batches(self, names):
        pa = require_pyarrow()
        import pyarrow.csv as pcsv

        conv = pcsv.ConvertOptions(include_columns=list(names),
                                   column_types={c: t for c, t in self._types.items()
                                                 if c in names})
        try:
            for b in pcsv.open_csv(self._stream(), parse_options=self._parse,
                                   convert_options=conv):
                yield b
        except (pa.ArrowException, OSError) as exc:
            raise _csv_error(self.path, self._parse.delimiter, exc) from None

    def _batches(self, start: int, stop: int, names):
        """A stream: the blocks before ``start`` are read too (and dropped)."""
        row = 0
        for b in self._stream_batches(names):
            m = b.num_rows
            lo, hi = max(start, row), min(stop, row + m)
            if hi > lo:
                yield lo, b.slice(lo - row, hi - lo)
            row += m
            if row >= stop:
                return


def _check_mixed(batch, names, path: str) -> None:
    """A text column (of ``names``) of a CSV whose first block mixes numbers and text is
    refused (a numeric column with a stray word would otherwise be dropped from the
    features)."""
    pa = require_pyarrow()
    import pyarrow.compute as pc

    for name in names:
        col = batch.column(name)
        if not pa.types.is_string(col.type) or col.null_count == len(col):
            continue
        num = pc.match_substring_regex(col, _NUMBER).to_numpy(zero_copy_only=False)
        num = np.asarray([bool(v) for v in num]) if num.dtype == object else num
        valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if num[valid].any() and not num[valid].all():
            r = _first(valid & ~num)
            raise ValueError(f"{path}: row {r + 1}: column {name!r} mixes numbers and text "
                             f"({col[r].as_py()!r}); a column holds one type (fix the value, "
                             f"or give the features with --feature-columns)")


def _csv_error(path: str, delimiter: str, exc: BaseException) -> ValueError:
    """A conversion error of pyarrow's CSV reader ("In CSV column #k: ... invalid value
    'x'") with the row and column found (error path: a plain scan of the file)."""
    msg = first_line(exc)
    hit = re.search(r"column #(\d+).*invalid value '(.*)'", msg)
    if hit is None:
        return _unreadable(path, "CSV", exc)
    k, value = int(hit.group(1)), hit.group(2)
    import gzip
    import bz2

    opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
    with opener(path, "rt", newline="") as fh:
        rows = csv.reader(fh, delimiter=delimiter)
        header = next(rows, [])
        for r, fields in enumerate(rows, 1):
            if k < len(fields) and fields[k] == value:
                name = header[k] if k < len(header) else f"#{k}"
                return ValueError(f"{path}: row {r}: column {name!r} holds {value!r}, not a "
                                  f"number; a numeric column mixes numbers and text")
    return ValueError(f"{path}: column #{k} holds {value!r}, not a number ({msg})")


# ============================================================================ readers
class ParquetReader(TableReader):
    """Parquet files (``.parquet``, ``.pq``)."""

    name = "parquet"

    def open(self, path, columns: Columns = Columns(), options=None) -> Source:
        return ParquetSource(path, columns)


class IpcReader(TableReader):
    """Arrow IPC files and Feather v2 (``.feather``, ``.arrow``, ``.ipc``)."""

    name = "arrow"

    def open(self, path, columns: Columns = Columns(), options=None) -> Source:
        return IpcSource(path, columns)


class CsvReader(TableReader):
    """Comma-separated files with a header row (``.csv``, ``.csv.gz``, ``.csv.bz2``)."""

    name = "csv"
    delimiter = ","

    def open(self, path, columns: Columns = Columns(), options=None) -> Source:
        return CsvSource(path, columns, self.delimiter)


class TsvReader(CsvReader):
    """Tab-separated files with a header row (``.tsv``, ``.tsv.gz``, ``.tsv.bz2``)."""

    name = "tsv"
    delimiter = "\t"


# ============================================================================ in memory
def is_table(obj) -> bool:
    """A ``pyarrow.Table``/``RecordBatch``, or a pandas or Polars ``DataFrame``."""
    mod = type(obj).__module__ or ""
    name = type(obj).__name__
    return (name in ("Table", "RecordBatch") and mod.startswith("pyarrow")) or (
        name == "DataFrame" and (mod.startswith("pandas") or mod.startswith("polars")))


def as_arrow_table(obj):
    """``obj`` (see :func:`is_table`) as a ``pyarrow.Table``; a pandas column of mixed
    Python types is a ``ValueError`` naming it."""
    pa = require_pyarrow("reading a table or data frame")
    mod = type(obj).__module__ or ""
    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if mod.startswith("polars"):
        return obj.to_arrow()
    try:
        return pa.Table.from_pandas(obj, preserve_index=False)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        col = re.search(r"column (.+?) with type", str(exc))
        where = f"column {col.group(1)!r}" if col else "a column"
        why = exc.args[0] if exc.args and isinstance(exc.args[0], str) else first_line(exc)
        raise ValueError(f"<pandas DataFrame>: {where} mixes types ({first_line(why)}); a "
                         f"column holds one type") from None


def table_source(obj, columns: Columns = Columns()) -> TableSource:
    """A source over an in-memory table or data frame."""
    table = as_arrow_table(obj)
    kind = type(obj).__module__.split(".")[0]
    name = {"pandas": "<pandas DataFrame>", "polars": "<polars DataFrame>"}.get(kind,
                                                                               "<table>")
    return TableSource(table, columns, name)

