"""Ranking data from any :class:`~torchrankboost.data.readers.Source` (the row-chunk
protocol of :mod:`.readers`): whole, one rank's rows, or streamed into bin codes.

* :func:`read_sources`: the files of a run (train, validation, test — each in any tabular
  format), whole or, on the ranks of a process group, each rank's rows: one
  :class:`~torchrankboost.data.RankingData` per file, with ``feature_names`` and the
  optional ``weight`` / ``position`` / ``group_weight`` columns. The files must have the
  same feature columns (by name; their order may differ).
* :func:`rank_rows`: rank ``r``'s rows ``[a, b)`` of a source of ``n`` rows — cut near
  ``r·n/W`` at a unit boundary (a Parquet row group, an Arrow record batch) when the
  source has at least ``W`` units, then moved forward to the next query start, so that a
  query that straddles the boundary goes whole to rank ``r - 1``, as the SVMlight
  byte-range shards do. Concatenating the ranks' rows gives the file.
* :func:`stream_binned_source`: a source read straight into bin codes (the seeded row
  sample of :func:`~torchrankboost.kernels.binning.bin_features` first, then every chunk
  coded): the codes ``bin_features`` gives on the whole float matrix, at a peak memory of
  the codes plus one chunk (no ``(n, F)`` float matrix).

**Queries are kept whole.** A query is a run of equal query ids; a query id that comes
back after another query is refused with its row (``"<file>: row <r>: ..."``, data rows
numbered from 1; over every rank's rows when ranks read parts).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..groups import Groups
from ..kernels.binning import (MAX_INT16_BINS, BinnedFeatures, apply_bins, attach_bins,
                               check_n_bins, code_dtype, edges_and_sample_codes, sample_rows)
from ..parallel.context import DistContext
from .dataset import RankingData
from .readers import SIDE_ROLES, Chunk, Columns, Reader, Source, reader_for

__all__ = ["TableReader", "open_source", "read_sources", "read_source", "rank_rows",
           "query_start_at", "stream_binned_source", "check_query_runs", "check_same_schema",
           "source_runs"]

_ALONE = DistContext()
_QID_WINDOW = 4096  # rows of query ids read at a time when looking for a query start
_SIDE_DTYPES = {"weight": np.float64, "position": np.int64, "group_weight": np.float64}


class TableReader(Reader):
    """The base of the tabular readers (:mod:`.arrow`): everything but ``open`` comes from
    this module's generic paths."""

    tabular = True


def open_source(path, columns: Columns = Columns()) -> Source:
    """The source of ``path``, opened by the reader of its format."""
    return reader_for(path).open(path, columns)


# ============================================================================ queries
def source_runs(qid: np.ndarray, start: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(run_qid, run_first_row)`` of a qid column whose first row is ``start``."""
    if qid.size == 0:
        return qid[:0], np.zeros(0, dtype=np.int64)
    heads = np.flatnonzero(np.concatenate(([True], qid[1:] != qid[:-1])))
    return qid[heads], heads.astype(np.int64) + start


def check_query_runs(path, runs: Sequence[Tuple[np.ndarray, np.ndarray]],
                     qid_column: str = "qid") -> None:
    """Refuse a query whose rows are not contiguous, given the runs (:func:`source_runs`)
    of every part of the file, in file order: ``ValueError`` naming the row where its id
    comes back and its first row (1-based data rows)."""
    run_qid = np.concatenate([r[0] for r in runs]) if runs else np.zeros(0, np.int64)
    if run_qid.size < 2:
        return
    first = np.concatenate([r[1] for r in runs])
    _, head, inv = np.unique(run_qid, return_index=True, return_inverse=True)
    back = np.flatnonzero(head[inv.reshape(-1)] != np.arange(run_qid.size))
    if back.size == 0:
        return
    k = int(back[0])
    k0 = int(head[inv.reshape(-1)[k]])
    raise ValueError(
        f"{path}: row {int(first[k]) + 1}: query id {int(run_qid[k])} comes back after other "
        f"queries (its first row is {int(first[k0]) + 1}); the rows of a query must be "
        f"contiguous: sort the table by {qid_column!r} first (a stable sort keeps each "
        f"query's order)")


def query_start_at(source: Source, row: int) -> int:
    """The first row ``>= row`` that starts a query (its id differs from the row before);
    ``0`` and ``num_rows`` at the ends."""
    n = source.num_rows
    if row <= 0:
        return 0
    if row >= n:
        return n
    prev = source.qids(row - 1, row)[0]
    pos, window = row, _QID_WINDOW
    while pos < n:
        q = source.qids(pos, min(n, pos + window))
        hit = np.flatnonzero(q != prev)
        if hit.size:
            return pos + int(hit[0])
        pos += q.size
        window *= 8
    return n


def _nominal_cut(source: Source, r: int, world: int) -> int:
    """Where rank ``r``'s rows would start before the query rule: the unit boundary nearest
    ``r·n/W`` when there are at least ``W`` units, else ``r·n/W``."""
    n = source.num_rows
    target = r * n // world
    units = np.asarray(source.unit_starts, dtype=np.int64)
    if units.size - 1 < world:
        return target
    inner = units[1:-1]
    if inner.size == 0:
        return target
    return int(inner[int(np.argmin(np.abs(inner - target)))])


def rank_rows(source: Source, rank: int, world: int) -> Tuple[int, int]:
    """Rank ``rank``'s rows ``[a, b)`` of ``source`` out of ``world`` ranks (see the module
    docstring): whole queries, consecutive ranges in rank order."""
    n = source.num_rows
    if world <= 1:
        return 0, n
    cut = [0] + [query_start_at(source, _nominal_cut(source, r, world))
                 for r in range(1, world)] + [n]
    cut = np.maximum.accumulate(np.asarray(cut, dtype=np.int64))
    return int(cut[rank]), int(cut[rank + 1])


# ============================================================================ whole or part
def check_same_schema(sources: Sequence[Source]) -> None:
    """The sources of a run have the same feature columns (by name; the first one's order
    is used). ``ValueError`` naming the file and the columns missing or extra."""
    first = sources[0]
    want = list(first.feature_names or ())
    for s in sources[1:]:
        have = list(s.feature_names or ())
        if set(have) == set(want):
            continue
        missing = [c for c in want if c not in have]
        extra = [c for c in have if c not in want]
        what = "; ".join(p for p in (
            f"missing {', '.join(map(repr, missing[:8]))}" if missing else "",
            f"extra {', '.join(map(repr, extra[:8]))}" if extra else "") if p)
        raise ValueError(f"{s.path}: its feature columns differ from {first.path}'s ({what}); "
                         f"every file of a run needs the same feature columns")


def _fill(source: Source, a: int, b: int):
    """``(X, labels, qid, side)`` arrays of rows ``[a, b)``, filled chunk by chunk."""
    n, F = b - a, source.num_features
    X = torch.empty((n, F), dtype=torch.float32)
    Xn = X.numpy()
    labels = np.empty(n, dtype=np.float64)
    qid = np.empty(n, dtype=np.int64)
    side = {r: np.empty(n, dtype=_SIDE_DTYPES[r]) for r in SIDE_ROLES if r in source.roles}
    got = 0
    for ch in source.chunks(a, b):
        o, m = ch.start - a, len(ch)
        Xn[o:o + m] = ch.X
        labels[o:o + m] = ch.labels
        qid[o:o + m] = ch.qid
        for r, v in ch.side.items():
            side[r][o:o + m] = v
        got += m
    if got != n:  # pragma: no cover - a reader that miscounts its rows
        raise ValueError(f"{source.path}: read {got} rows of {n}")
    return X, labels, qid, side


def _group_weights(path, qid_sizes: torch.Tensor, gw: np.ndarray, start: int,
                   column: str) -> torch.Tensor:
    """One weight per query from a per-row column, which must be constant in each query."""
    off = np.concatenate(([0], np.cumsum(qid_sizes.numpy())))
    per_query = gw[off[:-1]]
    bad = np.flatnonzero(gw != np.repeat(per_query, np.diff(off)))
    if bad.size:
        r = int(bad[0])
        raise ValueError(f"{path}: row {start + r + 1}: column {column!r} (the group weight) "
                         f"changes inside a query; it must hold one value per query")
    return torch.from_numpy(per_query.astype(np.float64))


def build_data(source: Source, X: torch.Tensor, labels: np.ndarray, qid: np.ndarray,
               side: Dict[str, np.ndarray], start: int) -> RankingData:
    """A :class:`RankingData` of rows read from ``source`` starting at row ``start``
    (the query runs already checked)."""
    q = torch.from_numpy(qid)
    groups = Groups.from_qid(q) if qid.size else Groups.from_sizes(
        torch.zeros(0, dtype=torch.long))
    gw = None
    if "group_weight" in side:
        gw = _group_weights(source.path, groups.sizes, side["group_weight"], start,
                            source.roles["group_weight"])
    return RankingData(X, torch.from_numpy(labels).to(torch.float32), groups, q,
                       torch.arange(qid.size, dtype=torch.long), None,
                       tuple(source.feature_names or ()),
                       torch.from_numpy(side["weight"]) if "weight" in side else None,
                       torch.from_numpy(side["position"]) if "position" in side else None, gw)


def read_source(source: Source, rows: Optional[Tuple[int, int]] = None) -> RankingData:
    """Rows ``[a, b)`` of ``source`` (default: all) as :class:`RankingData`, their query
    runs checked (within those rows)."""
    a, b = (0, source.num_rows) if rows is None else rows
    X, labels, qid, side = _fill(source, a, b)
    check_query_runs(source.path, [source_runs(qid, a)], source.roles.get("qid", "qid"))
    return build_data(source, X, labels, qid, side, a)


def _in_order(X: torch.Tensor, source: Source, first: Source) -> torch.Tensor:
    """``X``'s columns in the order of ``first``'s feature names (the same set)."""
    have = list(source.feature_names or ())
    want = list(first.feature_names or ())
    if have == want:
        return X
    return X[:, [have.index(c) for c in want]].contiguous()


def _check_not_empty(source: Source) -> None:
    if source.num_rows == 0:
        raise ValueError(f"{source.path}: the file has no data rows")


def read_sources(paths: Sequence, *, columns: Columns = Columns(),
                 part: Optional[Tuple[int, int]] = None,
                 context: Optional[DistContext] = None,
                 sources: Optional[Sequence[Source]] = None) -> List[RankingData]:
    """The files of a run (any tabular formats), one :class:`RankingData` per file: whole,
    or with ``part = (rank, world_size)`` rank ``rank``'s rows of each (:func:`rank_rows`).
    On the ranks of ``context`` the query runs are checked over every rank's rows (one
    gather) and a failure on one rank raises on every rank. ``sources``: already opened
    sources of ``paths``. ``ValueError`` (one line naming the file and the row or column)
    for bad data, an empty file, or files whose feature columns differ."""
    ctx = _ALONE if context is None else context
    rank, world = (0, 1) if part is None else part
    with ctx.guard():
        srcs = list(sources) if sources is not None else [open_source(p, columns)
                                                          for p in paths]
        try:
            check_same_schema(srcs)
            out, runs = [], []
            for s in srcs:
                _check_not_empty(s)
                a, b = rank_rows(s, rank, world)
                X, labels, qid, side = _fill(s, a, b)
                runs.append(source_runs(qid, a))
                out.append((s, _in_order(X, s, srcs[0]), labels, qid, side, a))
        finally:
            for s in srcs:
                s.close()
    gathered = ctx.all_gather_object(runs) if world > 1 else [runs]
    if len(gathered) != world:  # read alone (no process group): this part only
        gathered = [runs]
    with ctx.guard():
        for i, s in enumerate(srcs):
            check_query_runs(s.path, [g[i] for g in gathered], s.roles.get("qid", "qid"))
        got = [build_data(*item) for item in out]
    for d in got:  # the first file's column order (checked equal as sets)
        d.feature_names = srcs[0].feature_names
    return got


# ============================================================================ into bin codes
def _code(source: Source, edges: torch.Tensor, missing: int, dtype):
    """Second pass: every chunk coded into the preallocated codes; ``None`` when a weight
    is 0 (the edges then come from the rows of positive weight: read whole)."""
    n, F = source.num_rows, source.num_features
    codes = torch.empty((n, F), dtype=dtype)
    labels = np.empty(n, dtype=np.float64)
    qid = np.empty(n, dtype=np.int64)
    side = {r: np.empty(n, dtype=_SIDE_DTYPES[r]) for r in SIDE_ROLES if r in source.roles}
    has_missing = torch.zeros(F, dtype=torch.bool)
    for ch in source.chunks():
        if "weight" in ch.side and not bool((ch.side["weight"] > 0).all()):
            return None
        r, m = ch.start, len(ch)
        Xt = torch.from_numpy(ch.X)
        codes[r:r + m] = apply_bins(Xt, edges, missing_code=missing, dtype=dtype)
        has_missing |= torch.isnan(Xt).any(0)
        labels[r:r + m], qid[r:r + m] = ch.labels, ch.qid
        for k, v in ch.side.items():
            side[k][r:r + m] = v
    return codes, labels, qid, side, has_missing


def stream_binned_source(source: Source, *, n_bins: int = 255, sample_count: int = 200_000,
                         seed: int = 0):
    """``(data, binned)`` of ``source`` read straight into bin codes — the codes and edges
    ``bin_features(X, n_bins=, sample_count=, seed=)`` gives on its whole float matrix —
    or ``None`` when streaming saves nothing or cannot give those bins (at most
    ``sample_count`` rows: the sample is the whole data; a weight of 0: the edges come
    from the rows of positive weight). ``data.X`` is a stand-in that takes no memory,
    carrying the bins (as ``load_cache(values=False)``)."""
    check_n_bins(n_bins, MAX_INT16_BINS)
    _check_not_empty(source)
    n = source.num_rows
    if isinstance(sample_count, bool) or n <= sample_count:
        return None
    idx = sample_rows(n, sample_count, seed, "cpu").numpy()
    S = source.take(idx)
    dtype, missing = code_dtype(n_bins)
    edges, num_bins, _, _ = edges_and_sample_codes(torch.from_numpy(S), n_bins, S.shape[0],
                                                    seed, None, None)
    del S
    got = _code(source, edges, missing, dtype)
    if got is None:
        return None
    codes, labels, qid, side, has_missing = got
    check_query_runs(source.path, [source_runs(qid, 0)], source.roles.get("qid", "qid"))
    binned = BinnedFeatures(codes=codes, edges=edges, num_bins=num_bins,
                            has_missing=has_missing, missing_code=missing, n_bins=n_bins)
    X = attach_bins(torch.zeros((), dtype=edges.dtype).expand(codes.shape), binned,
                    key=(n_bins, sample_count, seed))
    return build_data(source, X, labels, qid, side, 0), binned
