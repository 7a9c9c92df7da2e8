"""Ranking data: SVMlight/LETOR files, query-level normalisation, synthetic data, batching.

Everything here produces the library's one data shape: a dense feature matrix ``X`` of shape
``(n, F)``, flat ``labels`` of shape ``(n,)`` and :class:`~torchrankboost.groups.Groups`
saying which documents belong to which query (CSR offsets, queries contiguous)::

    from torchrankboost.data import load_svmlight, load_letor_fold
    X, y, groups = load_svmlight("train.txt")           # tuple-unpacking
    data = load_svmlight("train.txt"); data.qid          # or the full RankingData
    train, vali, test = load_letor_fold("MQ2008/Fold1")  # shared feature count

File format (SVMlight / LETOR, one document a line)::

    <label> [qid:<q>] <i>:<v> <i>:<v> ... [# comment]

Blank lines and ``#`` comment lines are skipped; indices ascend within a line. Parsing is
done by scikit-learn's compiled reader (:func:`sklearn.datasets.load_svmlight_files`), so
the usual conventions hold: ``zero_based="auto"`` maps index ``i`` to column ``i - 1``
unless some index is 0 in one of the files read together; ``.gz``/``.bz2`` files are read
transparently. On any parse failure the file is re-scanned (only then) to raise a
``ValueError("<path>:<line>: <problem>")`` naming the first offending line.

Query structure, in order of preference:

1. ``qid:`` on every line: consecutive documents with the same qid form a query. A qid that
   re-appears after another query (non-contiguous queries) is accepted: the documents are
   reordered with :meth:`Groups.from_unsorted_qid` — queries in order of first appearance,
   documents in file order inside each query — and :attr:`RankingData.row` records each
   document's original data-row index (``row`` is ``arange(n)`` for contiguous files).
   Lines with and without ``qid:`` mixed in one file are an error.
2. No ``qid:`` but a group-size file (LightGBM/XGBoost style: one integer per line, the
   number of consecutive documents of each query): ``query_file=`` if given, else
   ``path + ".query"`` or ``path + ".group"`` when such a file exists. The sizes must add up
   to the number of documents. ``qid`` is then the query's 0-based index.
3. Neither: one query holding every document (bipartite ranking data), ``qid`` all 0.

When the lines carry ``qid:`` *and* a group-size file is given or found, the two must agree
(``ValueError`` otherwise).

Batching for neural rankers (one item = one whole query, never padded):
:class:`QueryDataset`, :class:`QueryBatchSampler` (packs whole queries up to a document
budget), :func:`collate_queries` (flat ``(X, labels, Groups)``) for
``torch.utils.data.DataLoader``, :func:`iterate_query_batches`, a loader-free fast path, and
:func:`take_queries` (the flat batch of any list of queries). Several processes:
:meth:`RankingData.shard` and :mod:`torchrankboost.parallel`.
"""

from __future__ import annotations

import bz2
import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..groups import Groups

__all__ = [
    "RankingData",
    "load_svmlight",
    "load_svmlight_files",
    "load_letor_fold",
    "normalize_per_query",
    "make_letor",
    "QueryDataset",
    "QueryBatchSampler",
    "collate_queries",
    "iterate_query_batches",
    "take_queries",
]

PathLike = Union[str, "os.PathLike[str]"]


# ====================================================================== container
@dataclass(eq=False)
class RankingData:
    """Dense ranking data: features, labels, query groups.

    Attributes:
        X: ``(n, F)`` float features.
        labels: ``(n,)`` float relevance grades (same dtype as ``X``).
        groups: :class:`Groups` over the ``n`` documents (queries contiguous).
        qid: ``(n,)`` int64 query id of each document (from the file's ``qid:``; the query's
            index when groups come from a size file; 0 for a single group).
        row: ``(n,)`` int64 index of each document's data row in the source (``arange(n)``
            unless non-contiguous qids forced a reordering), or ``None``.
        zero_based: the feature numbering the file was read with (``True``: index ``i`` is
            column ``i``; ``False``: column ``i - 1``), ``None`` for data not read from a file.

    Unpacks as a 3-tuple, ``X, labels, groups = data``, so it drops into code written for
    ``(X, y, groups)`` triples; the other fields are attributes.
    """

    X: Tensor
    labels: Tensor
    groups: Groups
    qid: Tensor
    row: Optional[Tensor] = None
    zero_based: Optional[bool] = None

    def __iter__(self):
        return iter((self.X, self.labels, self.groups))

    def __len__(self) -> int:
        """Number of documents."""
        return int(self.X.shape[0])

    @property
    def num_queries(self) -> int:
        return self.groups.num_groups

    @property
    def num_features(self) -> int:
        return int(self.X.shape[1])

    def to(self, device) -> "RankingData":
        """All tensors (and the groups' offsets) on ``device``."""
        return RankingData(
            self.X.to(device), self.labels.to(device), self.groups.to(device),
            self.qid.to(device), None if self.row is None else self.row.to(device),
            self.zero_based,
        )

    def queries(self, start: int, stop: int) -> "RankingData":
        """Queries ``start .. stop-1`` as a new :class:`RankingData` (views, no copy)."""
        G = self.num_queries
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop <= G):
            raise ValueError(f"start, stop must satisfy 0 <= start <= stop <= {G} (the number "
                             f"of queries), got {start!r}, {stop!r}")
        off = self.groups.offsets
        a, b = int(off[start]), int(off[stop])
        sizes = self.groups.sizes[start:stop]
        return RankingData(self.X[a:b], self.labels[a:b],
                           Groups.from_sizes(sizes, device=sizes.device), self.qid[a:b],
                           None if self.row is None else self.row[a:b], self.zero_based)

    def shard(self, rank: int, world_size: int) -> "RankingData":
        """The queries of ``rank`` out of ``world_size`` processes.

        Whole queries, a contiguous block per rank in query order, balanced by document count
        (:func:`torchrankboost.data.shard_queries`): concatenating the shards of ranks
        ``0 .. world_size-1`` (:meth:`concat`) gives back this data. ``ValueError`` when
        ``rank`` is not in ``[0, world_size)`` or there are fewer queries than ranks.
        """
        from .shards import shard_queries

        owner = shard_queries(self.groups.sizes, world_size)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an integer in [0, {world_size}), got {rank!r}")
        lo = int(torch.searchsorted(owner, rank))
        hi = int(torch.searchsorted(owner, rank, right=True))
        return self.queries(lo, hi)

    @staticmethod
    def concat(parts: Sequence["RankingData"]) -> "RankingData":
        """The parts one after the other (e.g. the shards of every rank, in rank order).

        They must have the same feature count and dtype; ``row`` is concatenated as is (each
        part's own row indices), ``None`` if a part has none; ``zero_based`` is kept when all
        parts agree (else ``None``)."""
        parts = list(parts)
        if not parts or not all(isinstance(d, RankingData) for d in parts):
            raise ValueError("parts must be a non-empty sequence of RankingData")
        F = {d.num_features for d in parts}
        if len(F) > 1:
            raise ValueError(f"parts must have the same number of features, got {sorted(F)}")
        rows = [d.row for d in parts]
        zb = {d.zero_based for d in parts}
        sizes = torch.cat([d.groups.sizes for d in parts])
        return RankingData(
            torch.cat([d.X for d in parts]), torch.cat([d.labels for d in parts]),
            Groups.from_sizes(sizes, device=sizes.device), torch.cat([d.qid for d in parts]),
            None if any(r is None for r in rows) else torch.cat(rows),
            zb.pop() if len(zb) == 1 else None)

    def __repr__(self) -> str:
        return (
            f"RankingData(num_docs={len(self)}, num_features={self.num_features}, "
            f"num_queries={self.num_queries}, dtype={self.X.dtype}, device={self.X.device})"
        )


# ====================================================================== reading files
def _open_text(path: Path):
    """Open an SVMlight file for the (error-path) line scan, like scikit-learn does."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def _scan_line(line: bytes, zero_based, n_features: Optional[int]) -> Tuple[Optional[str], Optional[bool]]:
    """Check one line against the SVMlight grammar.

    Returns ``(problem, has_qid)``: ``problem`` is ``None`` for a valid line; ``has_qid`` is
    ``None`` for a blank/comment line.
    """
    hash_pos = line.find(b"#")
    if hash_pos >= 0:
        line = line[:hash_pos]
    parts = line.split()
    if not parts:
        return None, None
    try:
        lab = float(parts[0])
    except ValueError:
        return f"cannot parse the label {parts[0].decode(errors='replace')!r}", None
    if not math.isfinite(lab):
        return f"label is {lab} (labels must be finite)", None
    feats = parts[1:]
    has_qid = bool(feats) and feats[0].startswith(b"qid:")
    if has_qid:
        try:
            q = int(feats[0][4:])
        except ValueError:
            return f"cannot parse the query id {feats[0].decode(errors='replace')!r}", True
        if not -(1 << 63) <= q < (1 << 63):
            return (f"query id {q} does not fit in 64 bits (use shorter qids, e.g. numbered "
                    f"from 0)", True)
        feats = feats[1:]
    prev = -1
    min_index = 0 if zero_based is True or zero_based == "auto" else 1
    for tok in feats:
        t = tok.decode(errors="replace")
        if b":" not in tok:
            return f"expected index:value, got {t!r}", has_qid
        idx_s, val_s = tok.split(b":", 1)
        try:
            idx = int(idx_s)
        except ValueError:
            return f"cannot parse the feature index in {t!r}", has_qid
        try:
            float(val_s)
        except ValueError:
            return f"cannot parse the feature value in {t!r}", has_qid
        if idx < min_index:
            return f"invalid feature index {idx} (indices start at {min_index})", has_qid
        if idx <= prev:
            return "feature indices must be strictly increasing within a line", has_qid
        prev = idx
        if n_features is not None:
            col = idx if zero_based is True else idx - 1
            if col >= n_features:
                return (f"feature index {idx} exceeds n_features={n_features}", has_qid)
    return None, has_qid


def _numbered_lines(path: Path, rng: Optional[Tuple[int, int]] = None):
    """``(lineno, line)`` over a file (1-based numbers), or over the lines of the byte range
    ``rng = (start, end)`` of an uncompressed file (``start`` at a line start), numbered as
    in the whole file (error path only: the newlines before ``start`` are counted)."""
    with _open_text(path) as fh:
        if rng is None:
            yield from enumerate(fh, 1)
            return
        start, end = rng
        lineno, pos = 1, 0
        while pos < start:
            chunk = fh.read(min(1 << 20, start - pos))
            if not chunk:
                break
            lineno += chunk.count(b"\n")
            pos += len(chunk)
        for line in fh:
            if pos >= end:
                return
            yield lineno, line
            lineno += 1
            pos += len(line)


def _locate_problem(path: Path, zero_based, n_features,
                    rng: Optional[Tuple[int, int]] = None) -> Optional[Tuple[int, str]]:
    """First offending line ``(lineno, problem)`` of a file (or of its byte range ``rng``),
    or ``None`` (error path only)."""
    first_has_qid = None
    for lineno, line in _numbered_lines(path, rng):
        problem, has_qid = _scan_line(line, zero_based, n_features)
        if problem is not None:
            return lineno, problem
        if has_qid is None:
            continue
        if first_has_qid is None:
            first_has_qid = has_qid
        elif has_qid != first_has_qid:
            return lineno, (
                "some lines have 'qid:' and others do not; give every line a qid "
                "(or none, with a .query group-size file)"
            )
    return None


def _data_line_number(path: Path, row: int, rng: Optional[Tuple[int, int]] = None) -> int:
    """1-based line number of the ``row``-th (0-based) data line of a file (or of its byte
    range ``rng``; the number is the line's in the whole file)."""
    seen = -1
    for lineno, line in _numbered_lines(path, rng):
        hash_pos = line.find(b"#")
        if hash_pos >= 0:
            line = line[:hash_pos]
        if line.split():
            seen += 1
            if seen == row:
                return lineno
    return -1  # pragma: no cover - row out of range


def _read_sizes_file(path: Path) -> np.ndarray:
    sizes = []
    with open(path, "r") as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s:
                continue
            try:
                v = int(s)
            except ValueError:
                raise ValueError(
                    f"{path}:{lineno}: expected one query size (an integer) per line, got {s!r}"
                ) from None
            if v < 0:
                raise ValueError(f"{path}:{lineno}: query size must be non-negative, got {v}")
            sizes.append(v)
    return np.asarray(sizes, dtype=np.int64)


def _find_sizes_file(path: Path, query_file) -> Optional[Path]:
    if query_file is False:  # a byte range of a file: queries come from qid: alone
        return None
    if query_file is not None:
        q = Path(query_file)
        if not q.is_file():
            raise FileNotFoundError(f"query_file not found: {q}")
        return q
    for ext in (".query", ".group"):
        q = Path(str(path) + ext)
        if q.is_file():
            return q
    return None


def _np_dtype(dtype: torch.dtype):
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    return np.float64 if dtype == torch.float64 else np.float32


def _check_paths(paths: Sequence[Path]) -> None:
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"SVMlight file not found: {p}")
        if not p.is_file():
            raise ValueError(f"{p}: not a regular file")


#: the largest feature count a file may imply before its dense matrix is allocated (a
#: stray index such as ``1000000000:1`` would otherwise ask for gigabytes); raise it with
#: ``max_features=`` (or select columns from sparse input) when the data really are that wide
DEFAULT_MAX_FEATURES = 100_000
#: the largest dense ``X`` (bytes) a file may imply
MAX_DENSE_BYTES = 8 << 30


def _check_dense_size(paths, mats, zb: bool, npdt, max_features: Optional[int],
                      ranges=None) -> None:
    """Refuse, before allocating, a dense matrix wider than ``max_features`` columns or
    larger than :data:`MAX_DENSE_BYTES`, naming the largest index and its line."""
    limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    F = max((m.shape[1] for m in mats), default=0)
    n = sum(m.shape[0] for m in mats)
    size = n * F * np.dtype(npdt).itemsize
    if F <= limit and size <= MAX_DENSE_BYTES:
        return
    for p, m in zip(paths, mats):
        if m.nnz and int(m.indices.max()) == F - 1:
            k = int(np.flatnonzero(m.indices == F - 1)[0])
            r = int(np.searchsorted(m.indptr, k, side="right")) - 1
            where = f"{p}:{_data_line_number(p, r, _rng(ranges, paths.index(p)))}"
            break
    else:  # pragma: no cover - the widest column always has an entry
        where = str(paths[0])
    raise ValueError(
        f"{where}: feature index {F - 1 + (0 if zb else 1)} implies a dense matrix of {n} x "
        f"{F} {np.dtype(npdt).name} values ({size / 2**30:.2f} GiB), over the limit of "
        f"{limit} features / {MAX_DENSE_BYTES / 2**30:.0f} GiB; if the index is right, raise "
        f"the limit with max_features= (CLI: --max-features) or select columns from sparse "
        f"input (sklearn.datasets.load_svmlight_file) before fitting")


def _rng(ranges, i: int) -> Optional[Tuple[int, int]]:
    return None if ranges is None else ranges[i]


#: the column count handed to scikit-learn's reader for a byte range when the width is not
#: known yet (it insists on one with ``offset``/``length``); cut back to the largest index
_UNKNOWN_WIDTH = 1 << 40


def _parse_range(path: Path, rng: Tuple[int, int], n_features: Optional[int], npdt) -> list:
    """``[X, y, qid]`` of the data lines of the byte range ``rng = (start, end)``: ``start``
    and ``end`` are 0, the file size, or positions just after a data line's newline (so
    scikit-learn's ``offset``/``length`` reader reads exactly the lines in between)."""
    import scipy.sparse as sp
    from sklearn.datasets import load_svmlight_file

    start, end = rng
    width = _UNKNOWN_WIDTH if n_features is None else n_features + 1
    if end <= start:
        return [sp.csr_matrix((0, 1 if n_features is None else width), dtype=npdt),
                np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)]
    # the reader drops the (partial) line at `offset` and stops after the first data line
    # that ends beyond offset + length
    offset = start - 1 if start > 0 else 0
    length = end - start if start > 0 else end - 1
    size = path.stat().st_size
    X, y, q = load_svmlight_file(str(path), n_features=width, dtype=npdt, zero_based=True,
                                 query_id=True, offset=offset,
                                 length=-1 if end >= size else max(length, 1))
    X = sp.csr_matrix(X)
    if n_features is None:  # the reader's convention: the largest index + 1 (at least 1)
        w = int(X.indices.max()) + 1 if X.nnz else 1
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], w))
    return [X, y, q]


def _parse_svmlight(paths: List[Path], n_features: Optional[int], npdt, zero_based,
                    ranges=None):
    """``load_svmlight_files`` (parsed 0-based: column = index) with every failure a
    ``ValueError`` naming the file (and the line where it can be found). ``ranges``: one
    ``(start, end)`` byte range per file (see :func:`_parse_range`), or ``None``."""
    from sklearn.datasets import load_svmlight_files

    names = ", ".join(str(p) for p in paths)
    try:
        if ranges is not None:
            return [part for p, r in zip(paths, ranges)
                    for part in _parse_range(p, r, n_features, npdt)]
        return list(load_svmlight_files(
            [str(p) for p in paths], n_features=None if n_features is None else n_features + 1,
            dtype=npdt, zero_based=True, query_id=True,
        ))
    except (ValueError, OverflowError) as exc:
        for i, p in enumerate(paths):
            hit = _locate_problem(p, zero_based, n_features, _rng(ranges, i))
            if hit is not None:
                raise ValueError(f"{p}:{hit[0]}: {hit[1]}") from exc
        raise ValueError(f"{names}: cannot parse as SVMlight ({exc})") from exc
    except (EOFError, OSError) as exc:  # a truncated .gz, a corrupt .bz2, an unreadable file
        what = ("truncated or corrupt compressed file" if isinstance(exc, EOFError)
                or "gzip" in type(exc).__name__.lower() or "compressed" in str(exc).lower()
                or "Invalid data stream" in str(exc) else "cannot read")
        raise ValueError(f"{names}: {what} ({exc.strerror or exc})"
                         if isinstance(exc, OSError) and exc.strerror
                         else f"{names}: {what} ({exc})") from None


def _numbering_evidence(parsed: list, n_files: int) -> Tuple[int, bool]:
    """``(width, has_zero)`` of parsed files: the widest parsed matrix (largest index + 1)
    and whether some file uses feature index 0 (what ``zero_based="auto"`` decides on)."""
    mats = [parsed[3 * i] for i in range(n_files)]
    width = max((int(m.shape[1]) for m in mats), default=0)
    return width, any(m.nnz > 0 and int(m.indices.min()) == 0 for m in mats)


def _widen(parsed: list, n_files: int, width: int) -> None:
    """Give every parsed matrix ``width`` columns (in place; the agreed width of shards)."""
    import scipy.sparse as sp

    for i in range(n_files):
        m = parsed[3 * i]
        if m.shape[1] < width:
            parsed[3 * i] = sp.csr_matrix((m.data, m.indices, m.indptr),
                                          shape=(m.shape[0], width))


def _apply_numbering(paths: List[Path], parsed: list, zero_based,
                     n_features: Optional[int], ranges=None) -> bool:
    """Decide the feature numbering once for all files (``"auto"``: 0-based iff some file
    uses index 0), drop the unused column 0 of 1-based files and cut to ``n_features`` (in
    place in ``parsed``); returns ``zero_based`` as decided."""
    mats = [parsed[3 * i] for i in range(len(paths))]
    has_zero = [m.nnz > 0 and int(m.indices.min()) == 0 for m in mats]
    zb = any(has_zero) if zero_based == "auto" else bool(zero_based)
    for i, p in enumerate(paths):
        if not zb and has_zero[i]:
            r = int(np.searchsorted(mats[i].indptr, int(np.flatnonzero(mats[i].indices == 0)[0]),
                                    side="right")) - 1
            raise ValueError(f"{p}:{_data_line_number(p, r, _rng(ranges, i))}: feature index 0 "
                             f"in a file read "
                             f"with 1-based feature numbering (zero_based=False)")
        m = mats[i][:, 0 if zb else 1:]
        if n_features is not None:
            if m.shape[1] > n_features and m[:, n_features:].nnz:
                sub = m[:, n_features:].tocsr()
                r = int(np.flatnonzero(np.diff(sub.indptr))[0])
                raise ValueError(f"{p}:{_data_line_number(p, r, _rng(ranges, i))}: feature index "
                                 f"{n_features + (0 if zb else 1)} exceeds "
                                 f"n_features={n_features}")
            m = m[:, :n_features]
        parsed[3 * i] = m.tocsr()
    return zb


def _check_values(p: Path, y: np.ndarray, Xs, npdt, rng=None) -> None:
    """Labels finite (also in the target dtype) and no infinite feature, naming the line."""
    with np.errstate(over="ignore"):
        bad = ~np.isfinite(y) | ~np.isfinite(y.astype(npdt))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        beyond = (f", beyond {np.dtype(npdt).name} (read with dtype=torch.float64)"
                  if np.isfinite(y[r]) else "")
        raise ValueError(
            f"{p}:{_data_line_number(p, r, rng)}: label is {y[r]}{beyond} (labels must be "
            f"finite)"
        )
    if Xs.shape[0] and Xs.nnz and np.isinf(Xs.data).any():
        k = int(np.flatnonzero(np.isinf(Xs.data))[0])
        r = int(np.searchsorted(Xs.indptr, k, side="right")) - 1
        raise ValueError(
            f"{p}:{_data_line_number(p, r, rng)}: a feature value is infinite in "
            f"{np.dtype(npdt).name} (column {int(Xs.indices[k])}; features must be "
            f"finite, NaN = missing)"
        )


def _file_queries(p: Path, q: np.ndarray, n: int, query_file):
    """``(groups, qid, perm or None)`` of one file from its ``qid:`` fields or a sizes file
    (``.query``/``.group``); ``perm`` sorts the rows by query when they are not grouped."""
    sizes_path = _find_sizes_file(p, query_file)
    sizes = _read_sizes_file(sizes_path) if sizes_path is not None else None
    if sizes is not None and int(sizes.sum()) != n:
        raise ValueError(
            f"{sizes_path}: query sizes add up to {int(sizes.sum())} documents but "
            f"{p} has {n}"
        )
    if q.shape[0] == n and n > 0:
        qid = torch.from_numpy(np.ascontiguousarray(q)).long()
        groups, perm = Groups.from_unsorted_qid(qid)
        if sizes is not None and not torch.equal(groups.sizes, torch.from_numpy(sizes)):
            raise ValueError(f"{sizes_path}: query sizes disagree with the qid: fields of {p}")
        return groups, qid[perm], (None if torch.equal(perm, torch.arange(n)) else perm)
    if sizes is not None:
        groups = Groups.from_sizes(torch.from_numpy(sizes))
        return groups, groups.group_index.clone(), None
    groups = Groups.single(n) if n else Groups.from_sizes(torch.zeros(0, dtype=torch.long))
    return groups, torch.zeros(n, dtype=torch.long), None


def _read_files(paths: Sequence[PathLike], *, n_features: Optional[int], zero_based,
                dtype: torch.dtype, ranges=None):
    """First stage of reading: check the options and parse the files (or their byte
    ranges). Returns ``(paths, parsed, n_features, npdt)`` for :func:`_build_files`; the
    feature numbering is not decided yet (shards agree on it in between)."""
    paths = [Path(p) for p in paths]
    _check_paths(paths)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    if n_features is not None:
        if isinstance(n_features, bool) or int(n_features) != n_features or n_features < 0:
            raise ValueError(f"n_features must be a non-negative integer, got {n_features!r}")
        n_features = int(n_features)
    npdt = _np_dtype(dtype)
    return paths, _parse_svmlight(paths, n_features, npdt, zero_based, ranges), n_features, npdt


def _build_files(paths: List[Path], parsed: list, *, n_features: Optional[int], zero_based,
                 npdt, dtype: torch.dtype, query_files: Sequence, normalize: bool,
                 max_features: Optional[int] = None, ranges=None) -> List[RankingData]:
    """Second stage: decide the numbering (once for all files), check sizes and values,
    find the queries; one :class:`RankingData` per file."""
    zb = _apply_numbering(paths, parsed, zero_based, n_features, ranges)
    _check_dense_size(paths, [parsed[3 * i] for i in range(len(paths))], zb, npdt,
                      max_features, ranges)
    all_empty = all(parsed[3 * i].shape[0] == 0 for i in range(len(paths)))
    out = []
    for i, p in enumerate(paths):
        Xs, y, q = parsed[3 * i], parsed[3 * i + 1], parsed[3 * i + 2]
        n = Xs.shape[0]
        F = (n_features or 0) if all_empty else Xs.shape[1]
        _check_values(p, y, Xs, npdt, _rng(ranges, i))
        if q.shape[0] not in (0, n):
            hit = _locate_problem(p, zb, n_features, _rng(ranges, i))
            raise ValueError(f"{p}:{hit[0]}: {hit[1]}" if hit else f"{p}: some lines lack 'qid:'")
        X = torch.from_numpy(Xs.toarray() if n else np.zeros((0, F), dtype=npdt)).to(dtype)
        labels = torch.from_numpy(np.ascontiguousarray(y)).to(dtype)
        groups, qid, perm = _file_queries(p, q, n, query_files[i])
        row = torch.arange(n, dtype=torch.long)
        if perm is not None:
            X, labels, row = X[perm], labels[perm], perm
        if normalize:
            X = normalize_per_query(X, groups)
        out.append(RankingData(X, labels, groups, qid, row, zero_based=zb))
    return out


def _load_files(paths: Sequence[PathLike], *, n_features: Optional[int], zero_based,
                dtype: torch.dtype, query_files: Sequence[Optional[PathLike]],
                normalize: bool, max_features: Optional[int] = None) -> List[RankingData]:
    """Parse several SVMlight files together (shared base and feature count). The feature
    numbering (``zero_based="auto"``: 0-based iff some file uses index 0) is decided once for
    all of them and kept in each result's ``zero_based``."""
    paths, parsed, n_features, npdt = _read_files(paths, n_features=n_features,
                                                  zero_based=zero_based, dtype=dtype)
    return _build_files(paths, parsed, n_features=n_features, zero_based=zero_based,
                        npdt=npdt, dtype=dtype, query_files=query_files, normalize=normalize,
                        max_features=max_features)


def load_svmlight(path: PathLike, *, n_features: Optional[int] = None,
                  query_file: Optional[PathLike] = None, dtype: torch.dtype = torch.float32,
                  normalize: bool = False, zero_based="auto",
                  max_features: Optional[int] = None) -> RankingData:
    """Read an SVMlight/LETOR ranking file into dense tensors.

    Args:
        path: the file (``.gz``/``.bz2`` accepted).
        n_features: number of feature columns ``F`` (default: the largest index in the file);
            a line with a larger index raises ``ValueError``.
        query_file: a group-size file (one query size per line), for data without ``qid:``;
            default ``path + ".query"`` (or ``".group"``) when it exists. See the module
            docstring for how qid and size files combine.
        dtype: floating dtype of ``X`` and ``labels``.
        normalize: apply :func:`normalize_per_query` (per-query min–max scaling) to ``X``.
        zero_based: ``"auto"`` (LETOR's 1-based indices unless some index is 0), ``True``
            or ``False`` — as in scikit-learn; the numbering used is kept in the result's
            ``zero_based``. Index 0 with ``zero_based=False`` is an error.
        max_features: the widest dense matrix allowed (default
            :data:`DEFAULT_MAX_FEATURES`; the bytes are capped at :data:`MAX_DENSE_BYTES`):
            a larger implied width is refused before anything is allocated, naming the largest
            index and its line.

    Returns:
        :class:`RankingData` ``(X (n, F), labels (n,), groups, qid (n,), row (n,))``;
        unpacks as ``X, labels, groups``. An empty file gives ``n = 0`` documents,
        0 queries and ``F = n_features or 0``.

    Raises:
        FileNotFoundError: the file (or an explicit ``query_file``) does not exist.
        ValueError: a malformed line (``"<path>:<line>: <problem>"``), a non-finite label,
            lines mixing qid and no qid, size files that do not cover the documents.
    """
    return _load_files([path], n_features=n_features, zero_based=zero_based, dtype=dtype,
                       query_files=[query_file], normalize=normalize,
                       max_features=max_features)[0]


def load_svmlight_files(paths: Sequence[PathLike], *, n_features: Optional[int] = None,
                        dtype: torch.dtype = torch.float32, normalize: bool = False,
                        zero_based="auto", max_features: Optional[int] = None
                        ) -> List[RankingData]:
    """Read several SVMlight/LETOR files together: one feature numbering for all of them
    (``"auto"``: 0-based iff some file uses index 0; kept in each result's ``zero_based``)
    and one feature count (the largest index over the files). Arguments as
    :func:`load_svmlight` (group-size files are found beside each file)."""
    return _load_files(list(paths), n_features=n_features, zero_based=zero_based, dtype=dtype,
                       query_files=[None] * len(paths), normalize=normalize,
                       max_features=max_features)


def load_letor_fold(folder: PathLike, *, normalize: bool = False,
                    dtype: torch.dtype = torch.float32, zero_based="auto",
                    names: Sequence[str] = ("train", "vali", "test"),
                    max_features: Optional[int] = None
                    ) -> Tuple[RankingData, RankingData, RankingData]:
    """Read a LETOR fold folder (``train.txt``, ``vali.txt``, ``test.txt``).

    The three files are parsed together, so they share the index base and the feature count
    ``F`` (the largest index over the three files). ``names`` changes the file stems
    (``<stem>.txt`` is tried, then ``<stem>`` as given). Returns ``(train, vali, test)``
    :class:`RankingData`; ``normalize`` applies :func:`normalize_per_query` to each.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"LETOR fold folder not found: {folder}")
    paths = []
    for stem in names:
        cand = folder / f"{stem}.txt"
        if not cand.exists() and (folder / stem).exists():
            cand = folder / stem
        paths.append(cand)
    return tuple(_load_files(paths, n_features=None, zero_based=zero_based, dtype=dtype,
                             query_files=[None] * len(paths), normalize=normalize,
                             max_features=max_features))


# ====================================================================== normalisation
def normalize_per_query(X: Tensor, groups: Groups) -> Tensor:
    """Query-level min–max normalisation (LETOR's "QueryLevelNorm").

    For each query ``q`` and feature ``f``::

        X'[i, f] = (X[i, f] - min_{j in q} X[j, f]) / (max_{j in q} X[j, f] - min_{j in q} X[j, f])

    and ``X'[i, f] = 0`` where the feature is constant over the query. NaN entries are
    ignored by the min/max and stay NaN. Shapes: ``(n, F)`` (or ``(n,)``) in, same out;
    computed in ``X``'s dtype (float32 for half types, cast back), on ``X``'s device,
    with two segment reductions — no loop over queries.
    """
    if not isinstance(X, Tensor) or X.dim() not in (1, 2):
        raise ValueError("X must be a (n, F) or (n,) tensor")
    if not X.dtype.is_floating_point:
        raise ValueError(f"X must be floating point, got {X.dtype}")
    groups = groups.to(X.device)
    groups.check(X, "X")
    orig = X.dtype
    Xc = X if orig in (torch.float32, torch.float64) else X.float()
    # a NaN anywhere makes the sum NaN (one cheap reduction instead of a mask on every call)
    has_nan = bool(torch.isnan(Xc.sum()))
    nan = torch.isnan(Xc) if has_nan else None
    lo = groups.segment_min(Xc.masked_fill(nan, float("inf")) if has_nan else Xc)
    hi = groups.segment_max(Xc.masked_fill(nan, float("-inf")) if has_nan else Xc)
    rng = hi - lo
    scale = torch.where(rng > 0, 1.0 / rng, torch.zeros_like(rng))  # constant -> 0
    lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))  # all-NaN columns
    gi = groups.group_index
    out = Xc - lo[gi]
    out.mul_(scale[gi])
    if has_nan:
        out.masked_fill_(nan, float("nan"))
    return out.to(orig)


# ====================================================================== synthetic data
def make_letor(n_queries: int, docs_per_query: float, n_features: int, n_grades: int = 5, *,
               seed: int = 0, size_spread: float = 0.5, min_docs: int = 1,
               informative: Union[int, float] = 0.25, nonlinear: float = 0.5,
               noise: float = 0.5, query_shift: float = 0.5, tie_fraction: float = 0.2,
               sparse_fraction: float = 0.2, grade_decay: float = 0.5,
               dtype: torch.dtype = torch.float32, device=None,
               return_info: bool = False):
    """A seeded synthetic LETOR-shaped data set (for scale work and smoke tests).

    Generative story (all vectorised; 800k documents × 136 features take a few seconds):

    * query sizes ``~ round(LogNormal)`` with mean ``docs_per_query`` and log-sd
      ``size_spread`` (0: all equal), at least ``min_docs``;
    * latent document vectors ``Z ~ N(0, I_F)``; ``k`` informative columns (``informative``:
      a count, or a fraction of ``F``) carry relevance, the rest are noise;
    * latent relevance ``r = Z_inf·w / ‖w‖ + nonlinear·(tanh(Z_a·Z_b) + |Z_c| − E|Z_c|)
      + noise·ε + u_q`` with a per-query offset ``u_q ~ N(0, 0.5²)`` (some queries have
      more relevant documents);
    * grades ``0..n_grades-1`` cut ``r`` at global quantiles with proportions ∝
      ``grade_decay^k`` (most documents irrelevant, as in web search data);
    * observed features ``X = Z + query_shift·s_q`` with a per-query, per-feature shift
      ``s_q ~ N(0, 1)`` (query-level effects that per-query normalisation removes); a
      ``tie_fraction`` of the columns is rounded to half-integers (many ties) and a
      ``sparse_fraction`` is clipped at 0 (about half zeros, as for count features).
      The informative columns sit at random positions.

    Returns:
        :class:`RankingData` (``qid`` = query index, ``X``/``labels`` in ``dtype`` on
        ``device``); with ``return_info=True`` also a dict with ``"informative"`` (a
        ``(F,)`` bool mask of the informative columns) and ``"relevance"`` (``r``).
    """
    _check_letor_args(n_queries, docs_per_query, n_features, n_grades, min_docs, size_spread,
                      grade_decay, tie_fraction, sparse_fraction)
    n_queries, n_features, n_grades = int(n_queries), int(n_features), int(n_grades)
    gen = torch.Generator().manual_seed(int(seed))
    F = n_features
    k = int(round(informative * F)) if isinstance(informative, float) else int(informative)
    k = max(1, min(F, k))

    groups = _letor_sizes(n_queries, docs_per_query, size_spread, min_docs, gen)
    gi = groups.group_index
    Z = torch.randn(groups.num_docs, F, generator=gen, dtype=torch.float32)
    inf_cols = torch.randperm(F, generator=gen)[:k].sort().values
    r = _letor_relevance(Z[:, inf_cols], gi, n_queries, nonlinear, noise, gen)
    labels = _letor_grades(r, n_grades, grade_decay)
    X = _letor_features(Z, gi, n_queries, query_shift, tie_fraction, sparse_fraction, gen)
    inf_mask = torch.zeros(F, dtype=torch.bool)
    inf_mask[inf_cols] = True

    n = groups.num_docs
    data = RankingData(X.to(dtype=dtype, device=device), labels.to(dtype=dtype, device=device),
                       groups.to(device if device is not None else "cpu"),
                       gi.clone().to(device), torch.arange(n, device=device))
    if return_info:
        return data, {"informative": inf_mask, "relevance": r}
    return data


def _check_letor_args(n_queries, docs_per_query, n_features, n_grades, min_docs, size_spread,
                      grade_decay, tie_fraction, sparse_fraction) -> None:
    for name, v in (("n_queries", n_queries), ("n_features", n_features), ("n_grades", n_grades),
                    ("min_docs", min_docs)):
        if isinstance(v, bool) or int(v) != v or v < (0 if name == "n_queries" else 1):
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not docs_per_query > 0:
        raise ValueError(f"docs_per_query must be positive, got {docs_per_query!r}")
    if size_spread < 0:
        raise ValueError("size_spread must be non-negative")
    if not 0 < grade_decay:
        raise ValueError("grade_decay must be positive")
    for name, v in (("tie_fraction", tie_fraction), ("sparse_fraction", sparse_fraction)):
        if not 0 <= v <= 1:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")


def _letor_sizes(n_queries: int, docs_per_query: float, size_spread: float, min_docs: int,
                 gen) -> Groups:
    """Query sizes ``~ round(LogNormal)`` with mean ``docs_per_query``, at least
    ``min_docs``."""
    if size_spread > 0:
        mu = math.log(docs_per_query) - 0.5 * size_spread ** 2
        raw = torch.exp(mu + size_spread * torch.randn(n_queries, generator=gen, dtype=torch.float64))
    else:
        raw = torch.full((n_queries,), float(docs_per_query), dtype=torch.float64)
    return Groups.from_sizes(raw.round().long().clamp_min(int(min_docs)))


def _letor_relevance(Zi: Tensor, gi: Tensor, n_queries: int, nonlinear: float, noise: float,
                     gen) -> Tensor:
    """Latent relevance from the informative latent columns ``Zi``: a random direction, a
    nonlinear term, noise and a per-query offset."""
    n, k = Zi.shape
    w = torch.randn(k, generator=gen, dtype=torch.float32)
    w = w / w.norm()
    r = Zi @ w
    if nonlinear:
        a = torch.randint(0, k, (3,), generator=gen)
        r += nonlinear * (torch.tanh(Zi[:, a[0]] * Zi[:, a[1]]) + Zi[:, a[2]].abs()
                          - math.sqrt(2 / math.pi))
    r += noise * torch.randn(n, generator=gen, dtype=torch.float32)
    r += 0.5 * torch.randn(n_queries, generator=gen, dtype=torch.float32)[gi]
    return r


def _letor_grades(r: Tensor, n_grades: int, grade_decay: float) -> Tensor:
    """Grades ``0..n_grades-1`` cutting ``r`` at global quantiles, proportions ∝ decay^g."""
    n = r.shape[0]
    p = torch.tensor([grade_decay ** g for g in range(n_grades)], dtype=torch.float64)
    cum = torch.cumsum(p / p.sum(), 0)[:-1]
    labels = torch.zeros(n, dtype=torch.float32)
    if n and n_grades > 1:
        sr = torch.sort(r).values
        cuts = sr[(cum * n).long().clamp_max(n - 1)]
        labels = torch.bucketize(r, cuts, right=True).to(torch.float32)
    return labels


def _letor_features(Z: Tensor, gi: Tensor, n_queries: int, query_shift: float,
                    tie_fraction: float, sparse_fraction: float, gen) -> Tensor:
    """Observed features (in place on ``Z``): per-query shifts, tied and sparse columns."""
    F = Z.shape[1]
    X = Z
    if query_shift:
        X += query_shift * torch.randn(n_queries, F, generator=gen, dtype=torch.float32)[gi]
    n_tie = int(round(tie_fraction * F))
    n_sparse = min(F - n_tie, int(round(sparse_fraction * F)))
    kind_perm = torch.randperm(F, generator=gen)
    tie_cols, sparse_cols = kind_perm[:n_tie], kind_perm[n_tie:n_tie + n_sparse]
    if n_tie:
        X[:, tie_cols] = torch.round(X[:, tie_cols] * 2) / 2
    if n_sparse:
        X[:, sparse_cols] = X[:, sparse_cols].clamp_min(0)
    return X


# ====================================================================== batching
def _batch_bounds(sizes: np.ndarray, max_docs: int) -> np.ndarray:
    """Greedy packing of consecutive queries (in the given order) into batches.

    Returns ``bounds`` (``B + 1`` query positions): batch ``b`` is queries
    ``bounds[b]:bounds[b+1]``, holding at most ``max_docs`` documents unless it is a single
    query larger than the budget. One ``searchsorted`` per batch, no loop over queries.
    """
    G = sizes.shape[0]
    cum = np.empty(G + 1, dtype=np.int64)
    cum[0] = 0
    np.cumsum(sizes, out=cum[1:])
    bounds = [0]
    start = 0
    while start < G:
        # largest end with cum[end] - cum[start] <= max_docs
        end = int(np.searchsorted(cum, cum[start] + max_docs, side="right")) - 1
        end = max(end, start + 1)
        bounds.append(end)
        start = end
    return np.asarray(bounds, dtype=np.int64)


def _check_max_docs(max_docs) -> int:
    if isinstance(max_docs, bool) or int(max_docs) != max_docs or max_docs < 1:
        raise ValueError(f"max_docs must be a positive integer, got {max_docs!r}")
    return int(max_docs)


def _group_sizes_np(groups: Groups) -> np.ndarray:
    if not isinstance(groups, Groups):
        raise TypeError(f"groups must be a torchrankboost.Groups, got {type(groups).__name__}")
    return groups.sizes.cpu().numpy()


class QueryDataset(torch.utils.data.Dataset):
    """A map-style dataset whose item ``i`` is query ``i``: ``(X[s:e], labels[s:e])``.

    Build it from ``(X, labels, groups)`` or from a :class:`RankingData`
    (``QueryDataset(data)``). Items are views (no copy). Use with
    :class:`QueryBatchSampler` and :func:`collate_queries`::

        ds = QueryDataset(X, y, groups)
        dl = DataLoader(ds, batch_sampler=QueryBatchSampler(groups, max_docs=4096),
                        collate_fn=collate_queries)
        for Xb, yb, gb in dl: ...          # flat (m, F), (m,), Groups
    """

    def __init__(self, X, labels=None, groups: Optional[Groups] = None):
        if isinstance(X, RankingData):
            if labels is not None or groups is not None:
                raise ValueError("pass either a RankingData or (X, labels, groups), not both")
            X, labels, groups = X
        if not isinstance(groups, Groups):
            raise TypeError("groups must be a torchrankboost.Groups")
        groups.check(X, "X")
        if labels is None or labels.shape[0] != X.shape[0]:
            raise ValueError("labels must have one entry per document (row of X)")
        self.X, self.labels, self.groups = X, labels, groups
        self._off = groups.offsets.cpu().tolist()

    def __len__(self) -> int:
        return self.groups.num_groups

    def __getitem__(self, i: int) -> Tuple[Tensor, Tensor]:
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"query index {i} out of range for {len(self)} queries")
        s, e = self._off[i], self._off[i + 1]
        return self.X[s:e], self.labels[s:e]


def collate_queries(batch: Sequence[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor, Groups]:
    """Concatenate whole queries into one flat batch, no padding.

    ``batch``: a list of ``(X_q (n_q, F), labels_q (n_q,))``. Returns
    ``(X (m, F), labels (m,), Groups.from_sizes([n_q, ...]))`` with ``m = Σ n_q`` and the
    groups' offsets on ``X``'s device.
    """
    if len(batch) == 0:
        raise ValueError("collate_queries: empty batch")
    Xs, ys = zip(*[(b[0], b[1]) for b in batch])
    X = torch.cat(Xs, 0)
    y = torch.cat(ys, 0)
    sizes = torch.tensor([x.shape[0] for x in Xs], dtype=torch.long, device=X.device)
    return X, y, Groups.from_sizes(sizes)


def epoch_query_order(n_queries: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The query order of an epoch: ``torch.randperm`` with a generator seeded by
    ``seed + epoch`` (the same on every process), or ``0..n-1`` without ``shuffle``."""
    if not shuffle:
        return np.arange(n_queries)
    gen = torch.Generator().manual_seed(int(seed) + int(epoch))
    return torch.randperm(n_queries, generator=gen).numpy()


class QueryBatchSampler(torch.utils.data.Sampler):
    """Batches of whole queries holding at most ``max_docs`` documents each.

    Each epoch the queries are (optionally) shuffled and packed greedily in that order:
    a batch takes consecutive queries while the document count stays within ``max_docs``,
    so the number of queries per batch varies. A single query larger than the budget forms
    a batch of its own. Every query appears in exactly one batch per epoch.

    Args:
        groups: the :class:`Groups` of the dataset.
        max_docs: document budget per batch.
        shuffle: shuffle the query order each epoch.
        seed: the shuffles are ``torch.randperm`` with a generator seeded by
            ``seed + epoch``; the epoch counter starts at 0, advances after each full
            pass, and can be set with :meth:`set_epoch` (as for ``DistributedSampler``).
    """

    def __init__(self, groups: Groups, *, max_docs: int, shuffle: bool = True, seed: int = 0):
        self.sizes = _group_sizes_np(groups)
        self.max_docs = _check_max_docs(max_docs)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self._cache = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _plan(self, epoch: int):
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1], self._cache[2]
        order = epoch_query_order(self.sizes.shape[0], shuffle=self.shuffle, seed=self.seed,
                                  epoch=epoch)
        bounds = _batch_bounds(self.sizes[order], self.max_docs)
        self._cache = (epoch, order, bounds)
        return order, bounds

    def __iter__(self) -> Iterator[List[int]]:
        epoch = self.epoch
        order, bounds = self._plan(epoch)
        self.epoch = epoch + 1
        for b in range(bounds.shape[0] - 1):
            yield order[bounds[b]:bounds[b + 1]].tolist()

    def __len__(self) -> int:
        """Batches in the coming epoch (packing depends on the shuffle)."""
        return int(self._plan(self.epoch)[1].shape[0] - 1)


def _gather_index(starts: Tensor, sizes: Tensor) -> Tensor:
    """Document indices of whole queries: query ``j`` of the batch contributes
    ``starts[j] .. starts[j] + sizes[j] - 1``, in batch order (one ``repeat_interleave``)."""
    m = int(sizes.sum())
    local_off = torch.cumsum(sizes, 0) - sizes
    return (torch.repeat_interleave(starts - local_off, sizes, output_size=m)
            + torch.arange(m, device=sizes.device))


def take_queries(X: Tensor, labels: Tensor, groups: Groups, queries
                 ) -> Tuple[Tensor, Tensor, Groups]:
    """The documents of the given queries as one flat batch ``(X_b, labels_b, groups_b)``.

    ``queries``: query indices (a list, array or int64 tensor), in the batch order wanted
    (e.g. one batch of :class:`QueryBatchSampler` or
    :class:`~torchrankboost.data.DistributedQueryBatchSampler`). Returns
    ``X_b (m, F)``, ``labels_b (m,)`` (copies gathered with one vectorised index, documents
    of a query in their order) and ``Groups`` of the ``m = Σ n_q`` documents; everything on
    ``X``'s device. No Python loop over the queries.
    """
    if not isinstance(groups, Groups):
        raise TypeError("groups must be a torchrankboost.Groups")
    groups.check(X, "X")
    if labels.shape[0] != X.shape[0]:
        raise ValueError("labels must have one entry per document (row of X)")
    off = groups.offsets
    q = torch.as_tensor(queries, dtype=torch.long, device=off.device)
    if q.dim() != 1:
        raise ValueError(f"queries must be a 1-D sequence of query indices, got shape "
                         f"{tuple(q.shape)}")
    G = groups.num_groups
    if q.numel() and (int(q.min()) < 0 or int(q.max()) >= G):
        raise ValueError(f"queries must be query indices in [0, {G}), got values from "
                         f"{int(q.min())} to {int(q.max())}")
    starts = off[q]
    sizes = off[q + 1] - starts
    idx = _gather_index(starts, sizes).to(X.device)
    return (X.index_select(0, idx), labels.index_select(0, idx),
            Groups.from_sizes(sizes.to(X.device)))


def iterate_query_batches(X: Tensor, labels: Tensor, groups: Groups, *, max_docs: int,
                          shuffle: Union[bool, str] = True, seed: int = 0
                          ) -> Iterator[Tuple[Tensor, Tensor, Groups]]:
    """Yield flat ``(X_b, labels_b, groups_b)`` batches of whole queries, no DataLoader.

    Batches are packed as in :class:`QueryBatchSampler` (≤ ``max_docs`` documents, except a
    single larger query). ``shuffle``:

    * ``False``: queries in order; each batch is a contiguous slice — views of ``X`` and
      ``labels``, no copy.
    * ``"batches"``: the same contiguous batches, visited in a seeded random order (views).
    * ``True`` / ``"queries"``: queries in a seeded random order; each batch's documents
      are gathered with one vectorised index (a copy), per-query document order kept.

    Batch offsets are computed with a cumulative sum and ``searchsorted``; there is no
    Python loop over queries. Everything stays on ``X``'s device.
    """
    if not isinstance(groups, Groups):
        raise TypeError("groups must be a torchrankboost.Groups")
    groups.check(X, "X")
    if labels.shape[0] != X.shape[0]:
        raise ValueError("labels must have one entry per document (row of X)")
    max_docs = _check_max_docs(max_docs)
    if shuffle is True:
        shuffle = "queries"
    if shuffle not in (False, "batches", "queries"):
        raise ValueError(f"shuffle must be True, False, 'queries' or 'batches', got {shuffle!r}")
    sizes = _group_sizes_np(groups)
    G = sizes.shape[0]
    dev = X.device
    gen = torch.Generator().manual_seed(int(seed))
    if shuffle in (False, "batches"):
        bounds = _batch_bounds(sizes, max_docs)
        off = groups.offsets.cpu().numpy()
        nb = bounds.shape[0] - 1
        visit = torch.randperm(nb, generator=gen).tolist() if shuffle == "batches" else range(nb)
        for b in visit:
            qa, qb = int(bounds[b]), int(bounds[b + 1])
            s, e = int(off[qa]), int(off[qb])
            sub = torch.from_numpy(off[qa:qb + 1] - off[qa]).to(dev)
            yield X[s:e], labels[s:e], Groups(sub)
        return
    order = torch.randperm(G, generator=gen).numpy()
    psizes = sizes[order]
    bounds = _batch_bounds(psizes, max_docs)
    starts = groups.offsets.cpu().numpy()[:-1][order]
    for b in range(bounds.shape[0] - 1):
        qa, qb = int(bounds[b]), int(bounds[b + 1])
        bs = torch.from_numpy(psizes[qa:qb])
        # doc j of the batch -> starts[q] + (j - batch offset of q)
        idx = _gather_index(torch.from_numpy(starts[qa:qb]), bs).to(dev)
        yield X.index_select(0, idx), labels.index_select(0, idx), Groups.from_sizes(bs.to(dev))
