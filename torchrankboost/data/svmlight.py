"""The SVMlight/LETOR reader: whole files, several files together, and per-rank byte ranges.

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
done by the compiled multi-threaded reader (:mod:`.fastread`: text straight into the dense
float matrix, byte ranges, ``.gz``/``.bz2`` decompressed on the way) with the values and
conventions of scikit-learn's reader (:func:`sklearn.datasets.load_svmlight_files`), which
reads whatever the compiled one declines (no C compiler, a malformed line, any check below
failing): ``zero_based="auto"`` maps index ``i`` to column ``i - 1`` unless some index is
0 in one of the files read together. On any parse failure the file is re-scanned (only
then) to raise a ``ValueError("<path>:<line>: <problem>")`` naming the first offending line.

Query structure, in order of preference:

1. ``qid:`` on every line: consecutive documents with the same qid form a query. The lines
   of a query must be contiguous (as LightGBM requires): a qid that re-appears after
   another query is a ``ValueError`` naming the line where it comes back and its first line
   — the same rule, and the same message, when ranks read byte ranges of the file
   (:func:`read_svmlight` with a process group). Group such a file first (e.g. a stable
   sort on the qid field). Lines with and without ``qid:`` mixed in one file are an error.
2. No ``qid:`` but a group-size file (LightGBM/XGBoost style: one integer per line, the
   number of consecutive documents of each query): ``query_file=`` if given, else
   ``path + ".query"`` or ``path + ".group"`` when such a file exists. The sizes must add up
   to the number of documents. ``qid`` is then the query's 0-based index.
3. Neither: one query holding every document (bipartite ranking data), ``qid`` all 0.

When the lines carry ``qid:`` *and* a group-size file is given or found, the two must agree
(``ValueError`` otherwise).

Every reader here goes through :func:`read_svmlight` (whole files, or one rank's byte range of
each file with the ranks agreeing on the feature numbering; :func:`load_svmlight_shard
<torchrankboost.data.load_svmlight_shard>` is a thin layer over it).
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..groups import Groups
from ..parallel.context import DistContext
from . import fastread
from .dataset import RankingData, normalize_per_query
from .fastread import NativeMatrix
from .lines import check_line_ends, data_line_number, locate_problem, rank_byte_range

__all__ = ["DEFAULT_MAX_FEATURES", "MAX_DENSE_BYTES", "load_letor_fold", "load_svmlight",
           "load_svmlight_files", "read_svmlight", "read_weights", "weight_file", "weights_path",
           "document_weights"]

PathLike = Union[str, "os.PathLike[str]"]


# ====================================================================== side files and checks

def read_per_line(path: PathLike, parse, what: str) -> list:
    """One value per non-blank line of a side file: ``parse(text)`` → the value, or
    ``ValueError(reason)``, reported as ``"<path>:<line>: <reason>"``."""
    out = []
    with open(path, "r") as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s:
                continue
            try:
                out.append(parse(s))
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: {exc or what}") from None
    return out


def _query_size(s: str) -> int:
    text = s.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"expected one query size (an integer) per line, got {s!r}")
    v = int(text)
    if v < 0:
        raise ValueError(f"query size must be non-negative, got {v}")
    if v >= 2 ** 62:
        raise ValueError(f"query size {text[:30]} is too large")
    return v


def _weight(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise ValueError(f"expected one weight (a number) per line, got {s!r}") from None
    if not (v >= 0 and np.isfinite(v)):
        raise ValueError(f"a weight must be finite and >= 0, got {s}")
    return v


def _read_sizes_file(path: Path) -> np.ndarray:
    return np.asarray(read_per_line(path, _query_size, "bad query size"), dtype=np.int64)


def weight_file(path: PathLike) -> Optional[Path]:
    """LightGBM's side file of document weights, ``path + ".weight"``, when it exists."""
    q = Path(str(path) + ".weight")
    return q if q.is_file() else None


def read_weights(path: PathLike, n_rows: Optional[int] = None) -> np.ndarray:
    """Document weights from a text file, one non-negative number per data row of the data
    file (LightGBM's ``.weight`` format; blank lines skipped). ``ValueError`` naming the
    line for a bad value, or when ``n_rows`` is given and the count differs."""
    out = read_per_line(path, _weight, "bad weight")
    if n_rows is not None and len(out) != n_rows:
        raise ValueError(f"{path}: {len(out)} weights for {n_rows} data rows (one weight per "
                         f"data line of the file)")
    return np.asarray(out, dtype=np.float64)


def weights_path(source: PathLike, weights_file: Optional[PathLike]) -> Optional[Path]:
    """The weights file of a run: ``weights_file``, else the ``.weight`` side file of the
    training file of ``source`` (a file, or a LETOR fold folder's ``train.txt``) when it
    exists, else ``None``."""
    if weights_file:
        return Path(weights_file)
    p = Path(source)
    train = next((q for q in (p / "train.txt", p / "train") if q.is_file()), None) \
        if p.is_dir() else (p if p.is_file() else None)
    return weight_file(train) if train is not None else None


def document_weights(source: PathLike, weights_file: Optional[PathLike], data, *,
                     context=None) -> Optional[torch.Tensor]:
    """The ``(n,)`` weights of ``data``'s documents (float64), or ``None``: read from
    ``weights_file`` when given, else from the ``.weight`` side file of the training file of
    ``source`` (a file, or a LETOR fold folder's ``train.txt``) when it exists; one weight per
    data row of that file, taken in ``data.row`` order.

    ``context`` (a :class:`~torchrankboost.parallel.DistContext` with ``world_size > 1``):
    ``data`` is this rank's byte range of the file (``row`` counted from its start, the
    ranks' parts in rank order making the whole file), so its rows are offset by the data
    rows of the ranks before it (one gather of the part sizes); every rank reads the whole
    weights file (8 bytes a document) and keeps its own rows."""
    path = weights_path(source, weights_file)
    if path is None:
        return None
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "weights file not found", str(path))
    start, total = 0, len(data)
    if context is not None and context.world_size > 1:
        sizes = context.gather_values([len(data)])[:, 0].to(torch.int64)
        start, total = int(sizes[:context.rank].sum()), int(sizes.sum())
    row = data.row if data.row is not None else torch.arange(len(data))
    w = read_weights(path, total)
    if not bool((w > 0).any()):  # checked here for all ranks (a rank's part may weigh 0)
        raise ValueError(f"{path}: every weight is zero: nothing to fit")
    return torch.from_numpy(w)[row.cpu() + start]


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
            where = f"{p}:{data_line_number(p, r, _rng(ranges, paths.index(p)))}"
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
            hit = locate_problem(p, zero_based, n_features, _rng(ranges, i))
            if hit is not None:
                raise ValueError(f"{p}:{hit[0]}: {hit[1]}") from exc
        raise ValueError(f"{names}: cannot parse as SVMlight ({exc})") from exc
    except (EOFError, OSError) as exc:  # a truncated .gz, a corrupt .bz2, an unreadable file
        raise _read_failure(names, exc) from None


def _read_failure(names: str, exc: BaseException) -> ValueError:
    """The one-line error for a file that cannot be read (``EOFError``/``OSError``)."""
    what = ("truncated or corrupt compressed file" if isinstance(exc, EOFError)
            or "gzip" in type(exc).__name__.lower() or "compressed" in str(exc).lower()
            or "Invalid data stream" in str(exc) else "cannot read")
    return ValueError(f"{names}: {what} ({exc.strerror or exc})"
                      if isinstance(exc, OSError) and exc.strerror
                      else f"{names}: {what} ({exc})")


def _check_line_ends(paths: List[Path], ranges) -> None:
    """:func:`~torchrankboost.data.lines.check_line_ends` of every file (or byte range);
    an unreadable or corrupt compressed file is reported as the parser reports it."""
    for i, p in enumerate(paths):
        try:
            check_line_ends(p, _rng(ranges, i))
        except (EOFError, OSError) as exc:
            raise _read_failure(str(p), exc) from None


def _numbering_evidence(parsed: list, n_files: int) -> Tuple[int, bool]:
    """``(width, has_zero)`` of parsed files: the widest parsed matrix (largest index + 1)
    and whether some file uses feature index 0 (what ``zero_based="auto"`` decides on)."""
    mats = [parsed[3 * i] for i in range(n_files)]
    width = max((int(m.shape[1]) for m in mats), default=0)
    return width, any(_has_zero(m) for m in mats)


def _has_zero(m) -> bool:
    """Some entry of a parsed matrix (sparse, or the compiled reader's) has index 0."""
    if isinstance(m, NativeMatrix):
        return m.has_zero
    return m.nnz > 0 and int(m.indices.min()) == 0


def _widen(parsed: list, n_files: int, width: int) -> None:
    """Give every parsed matrix ``width`` columns (in place; the agreed width of shards)."""
    import scipy.sparse as sp

    for i in range(n_files):
        m = parsed[3 * i]
        if isinstance(m, NativeMatrix):
            m.shape = (m.shape[0], max(m.shape[1], width))
        elif m.shape[1] < width:
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
            raise ValueError(f"{p}:{data_line_number(p, r, _rng(ranges, i))}: feature index 0 "
                             f"in a file read "
                             f"with 1-based feature numbering (zero_based=False)")
        m = mats[i][:, 0 if zb else 1:]
        if n_features is not None:
            if m.shape[1] > n_features and m[:, n_features:].nnz:
                sub = m[:, n_features:].tocsr()
                r = int(np.flatnonzero(np.diff(sub.indptr))[0])
                raise ValueError(f"{p}:{data_line_number(p, r, _rng(ranges, i))}: feature index "
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
            f"{p}:{data_line_number(p, r, rng)}: label is {y[r]}{beyond} (labels must be "
            f"finite)"
        )
    if Xs.shape[0] and Xs.nnz and np.isinf(Xs.data).any():
        k = int(np.flatnonzero(np.isinf(Xs.data))[0])
        r = int(np.searchsorted(Xs.indptr, k, side="right")) - 1
        raise ValueError(
            f"{p}:{data_line_number(p, r, rng)}: a feature value is infinite in "
            f"{np.dtype(npdt).name} (column {int(Xs.indices[k])}; features must be "
            f"finite, NaN = missing)"
        )


def qid_runs(q: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(run_qid, run_start)`` of a qid column ``(n,)``: the qid and the first row of each
    run of equal consecutive qids."""
    if q.size == 0:
        return q[:0], np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], q[1:] != q[:-1])))
    return q[starts], starts.astype(np.int64)


def _first_repeat(run_qid: np.ndarray) -> Optional[Tuple[int, int]]:
    """``(k, k0)``: the first run ``k`` whose qid was already the qid of an earlier run
    ``k0`` (a non-contiguous query), or ``None``."""
    if run_qid.size < 2:
        return None
    _, first, inv = np.unique(run_qid, return_index=True, return_inverse=True)
    rep = np.flatnonzero(first[inv.reshape(-1)] != np.arange(run_qid.size))
    if rep.size == 0:
        return None
    k = int(rep[0])
    return k, int(first[inv.reshape(-1)[k]])


def _split_query_error(p: Path, qid: int, line: int, first_line: int) -> ValueError:
    return ValueError(
        f"{p}:{line}: query id {qid} comes back after other queries (its first line is "
        f"{first_line}); the lines of a query must be contiguous: group them, e.g. "
        f"sort -s -k2,2 {p.name} > grouped.txt")


def check_contiguous(p: Path, runs: Sequence[Tuple[np.ndarray, np.ndarray]], mine: int,
                     range_of) -> None:
    """Refuse a query split into several runs of the file ``p``, given the runs
    (:func:`qid_runs`) of the parts read, in file order: one part (the whole file, or a
    byte range read alone) or every rank's range (gathered). ``mine``: the index of this
    process's part; ``range_of(r)``: part ``r``'s byte range (``None``: the whole file).
    Only the part holding the first line where a qid comes back raises, so that the ranks
    report one error, the one-process one."""
    run_qid = np.concatenate([r[0] for r in runs])
    hit = _first_repeat(run_qid)
    if hit is None:
        return
    part = np.repeat(np.arange(len(runs)), [r[0].size for r in runs])
    local = np.concatenate([np.arange(r[0].size) for r in runs])
    if int(part[hit[0]]) != mine:
        return

    def line(j: int) -> int:
        r = int(part[j])
        return data_line_number(p, int(runs[r][1][local[j]]), range_of(r))

    raise _split_query_error(p, int(run_qid[hit[0]]), line(hit[0]), line(hit[1]))


def check_query_runs(p: Path, q: np.ndarray, i: int, gathered, part, ranges) -> None:
    """:func:`check_contiguous` for file ``i``: over every rank's runs when they were
    gathered (``gathered[r][i]``), else over this process's part alone."""
    if gathered is None:
        check_contiguous(p, [qid_runs(q)], 0, lambda r: _rng(ranges, i))
        return
    rank, world = part
    check_contiguous(p, [g[i] for g in gathered], rank,
                     lambda r: rank_byte_range(p, r, world))


def file_queries(p: Path, q: np.ndarray, n: int, query_file, check_runs=None):
    """``(groups, qid)`` of one file from its ``qid:`` fields (contiguous queries:
    ``check_runs()`` refuses split ones) or a sizes file (``.query``/``.group``)."""
    sizes_path = _find_sizes_file(p, query_file)
    sizes = _read_sizes_file(sizes_path) if sizes_path is not None else None
    if sizes is not None and int(sizes.sum()) != n:
        raise ValueError(
            f"{sizes_path}: query sizes add up to {int(sizes.sum())} documents but "
            f"{p} has {n}"
        )
    if q.shape[0] == n and n > 0:
        if check_runs is not None:
            check_runs()
        qid = torch.from_numpy(np.ascontiguousarray(q)).long()
        groups = Groups.from_qid(qid)
        if sizes is not None and not torch.equal(groups.sizes, torch.from_numpy(sizes)):
            raise ValueError(f"{sizes_path}: query sizes disagree with the qid: fields of {p}")
        return groups, qid
    if sizes is not None:
        groups = Groups.from_sizes(torch.from_numpy(sizes))
        return groups, groups.group_index.clone()
    groups = Groups.single(n) if n else Groups.from_sizes(torch.zeros(0, dtype=torch.long))
    return groups, torch.zeros(n, dtype=torch.long)


def _read_files(paths: Sequence[PathLike], *, n_features: Optional[int], zero_based,
                dtype: torch.dtype, ranges=None, max_features=None):
    """First stage of reading: check the options and parse the files (or their byte
    ranges): the compiled reader (:mod:`.fastread`) when it takes every file, else
    scikit-learn's. Returns ``(paths, parsed, n_features, npdt)`` for :func:`_build_files`;
    the feature numbering is not decided yet (ranks agree on it in between)."""
    paths = [Path(p) for p in paths]
    _check_paths(paths)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    if n_features is not None:
        if isinstance(n_features, bool) or int(n_features) != n_features or n_features < 0:
            raise ValueError(f"n_features must be a non-negative integer, got {n_features!r}")
        n_features = int(n_features)
    npdt = _np_dtype(dtype)
    native = _read_native(paths, ranges, n_features, zero_based, npdt, max_features)
    if native is not None:
        return paths, native, n_features, npdt
    _check_line_ends(paths, ranges)
    return paths, _parse_svmlight(paths, n_features, npdt, zero_based, ranges), n_features, npdt


def _read_native(paths: List[Path], ranges, n_features: Optional[int], zero_based, npdt,
                 max_features) -> Optional[list]:
    """``[matrix, y, qid]`` per file from the compiled reader (each matrix a
    :class:`~.fastread.NativeMatrix` with scikit-learn's column count), or ``None`` when it
    declines one of them (then scikit-learn's reader parses them all)."""
    try:
        limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    except (TypeError, ValueError):
        return None
    max_index = limit if n_features is None else min(limit, n_features)
    parsed = []
    for i, p in enumerate(paths):
        got = fastread.read_part(p, _rng(ranges, i), npdt=npdt, zero_based=zero_based,
                                 max_index=max_index, max_bytes=MAX_DENSE_BYTES)
        if got is None:
            return None
        parsed.extend(got)
    mats = parsed[0::3]
    common = max((max(m.max_index, 0) for m in mats), default=0) + 1
    for m in mats:  # scikit-learn's widths: n_features + 1, the files' or the range's
        w = n_features + 1 if n_features is not None else (
            common if ranges is None else max(m.max_index + 1, 1))
        m.shape = (m.shape[0], w)
    return parsed


def _build_files(paths: List[Path], parsed: list, *, n_features: Optional[int], zero_based,
                 npdt, dtype: torch.dtype, query_files: Sequence, normalize: bool,
                 max_features: Optional[int] = None, ranges=None, runs=None,
                 part=None) -> List[RankingData]:
    """Second stage: decide the numbering (once for all files), check sizes and values,
    find the queries (contiguous: over every rank's ``runs[r][i]`` when gathered, this
    ``part = (rank, world_size)``'s own runs otherwise); one :class:`RankingData` per
    file."""
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
            hit = locate_problem(p, zb, n_features, _rng(ranges, i))
            raise ValueError(f"{p}:{hit[0]}: {hit[1]}" if hit else f"{p}: some lines lack 'qid:'")
        X = Xs.toarray() if n else np.zeros((0, F), dtype=npdt)
        out.append(_ranking_data(p, i, X, y, q, zb=zb, dtype=dtype, query_file=query_files[i],
                                 normalize=normalize, runs=runs, part=part, ranges=ranges))
    return out


def _ranking_data(p: Path, i: int, X: np.ndarray, y: np.ndarray, q: np.ndarray, *, zb: bool,
                  dtype: torch.dtype, query_file, normalize: bool, runs, part,
                  ranges) -> RankingData:
    """File ``i``'s :class:`RankingData` from its dense ``X (n, F)``, labels and qids
    (queries checked by :func:`file_queries`)."""
    n = X.shape[0]
    labels = torch.from_numpy(np.ascontiguousarray(y)).to(dtype)
    groups, qid = file_queries(p, q, n, query_file,
                               lambda: check_query_runs(p, q, i, runs, part, ranges))
    Xt = torch.from_numpy(X).to(dtype)
    if normalize:
        Xt = normalize_per_query(Xt, groups)
    return RankingData(Xt, labels, groups, qid, torch.arange(n, dtype=torch.long), zero_based=zb)


def _native_columns(mats: list, n_features: Optional[int], zb: bool, npdt,
                    max_features: Optional[int]) -> Optional[List[int]]:
    """Each compiled-reader matrix's final column count ``F`` (as :func:`_apply_numbering`
    cuts scikit-learn's), or ``None`` when the numbering, the width or the size limits
    would raise (the Python path then names the line)."""
    shift = 0 if zb else 1
    if not zb and any(m.has_zero for m in mats):
        return None
    F = [n_features if n_features is not None else max(m.shape[1] - shift, 0) for m in mats]
    if any(m.max_index >= 0 and m.max_index - shift >= f for m, f in zip(mats, F)):
        return None
    limit = DEFAULT_MAX_FEATURES if max_features is None else int(max_features)
    widest, n = max(F, default=0), sum(m.shape[0] for m in mats)
    if widest > limit or n * widest * np.dtype(npdt).itemsize > MAX_DENSE_BYTES:
        return None
    if all(m.shape[0] == 0 for m in mats):
        F = [n_features or 0] * len(mats)
    return F


def _build_native(paths: List[Path], parsed: list, *, n_features: Optional[int], zb: bool,
                  npdt, dtype: torch.dtype, query_files: Sequence, normalize: bool,
                  max_features: Optional[int], ranges, runs, part) -> Optional[List[RankingData]]:
    """:func:`_build_files` for the compiled reader's dense parts (no sparse copy; ``X``
    kept as read when its columns are already the final ones): one :class:`RankingData`
    per file, or ``None`` when a check of :func:`_build_files` would fail (non-finite
    values, widths, numbering: the caller re-reads with the Python path, which raises)."""
    mats = parsed[0::3]
    F = _native_columns(mats, n_features, zb, npdt, max_features)
    if F is None:
        return None
    for m, y in zip(mats, parsed[1::3]):
        with np.errstate(over="ignore"):
            if m.any_inf or not (np.isfinite(y).all() and np.isfinite(y.astype(npdt)).all()):
                return None
    out = []
    for i, p in enumerate(paths):
        m, y, q = parsed[3 * i], parsed[3 * i + 1], parsed[3 * i + 2]
        X, off = m.X, m.shift - (0 if zb else 1)
        if X.shape[1] != F[i] or off:
            X = np.zeros((m.shape[0], F[i]), dtype=npdt)
            X[:, off:off + m.X.shape[1]] = m.X
        out.append(_ranking_data(p, i, X, y, q, zb=zb, dtype=dtype, query_file=query_files[i],
                                 normalize=normalize, runs=runs, part=part, ranges=ranges))
    return out


# ====================================================================== the reader
#: the context of a process reading on its own (every collective an identity)
_ALONE = DistContext()


def _plan_parts(paths: Sequence[PathLike], part: Optional[Tuple[int, int]], query_files):
    """``(paths, ranges, query files)``: what this process parses. ``part = (rank,
    world_size)`` with ``world_size > 1``: each file's byte range of that rank (no group-size
    files: a range finds its queries by qid); else the whole files (``ranges = None``)."""
    paths = [Path(p) for p in paths]
    qfiles = [None] * len(paths) if query_files is None else list(query_files)
    if part is None or part[1] == 1:
        return paths, None, qfiles
    _check_paths(paths)
    ranges = [rank_byte_range(p, part[0], part[1]) for p in paths]
    return paths, ranges, [False] * len(paths)


def _check_range_qids(paths: List[Path], parsed: list, ranges) -> None:
    """Every line of a byte range carries ``qid:`` (its queries are found by qid alone)."""
    for i, rng in enumerate(ranges or ()):
        if parsed[3 * i + 2].shape[0] != parsed[3 * i].shape[0]:
            raise ValueError(f"{paths[i]}: lines without 'qid:' in bytes {rng[0]}..{rng[1]}; "
                             f"load_svmlight_shard needs a qid on every line")


def read_svmlight(paths: Sequence[PathLike], *, n_features: Optional[int] = None,
                  zero_based="auto", dtype: torch.dtype = torch.float32,
                  query_files: Optional[Sequence] = None, normalize: bool = False,
                  max_features: Optional[int] = None, part: Optional[Tuple[int, int]] = None,
                  context: Optional[DistContext] = None) -> List[RankingData]:
    """The one SVMlight/LETOR reader: several files read together, whole or one rank's
    byte range of each, one :class:`RankingData` per file.

    Reading is two local stages with one agreement in between: (1) parse (scikit-learn's
    reader) the whole files or, with ``part = (r, W)`` and ``W > 1``, each file's byte
    range ``[start, end)`` of rank ``r`` (:func:`~torchrankboost.data.lines.rank_byte_range`);
    (2) the ranks of ``context`` all-reduce ``max`` of ``(width, has_zero)`` — the widest
    parsed matrix (largest index + 1) and whether some file uses index 0 — so that
    ``zero_based="auto"`` (0-based iff some index is 0) and the feature count are decided
    over everything the ranks read; (3) build dense tensors, queries and checks. With
    ``W > 1`` and ``n_features=None`` every part gets the agreed width ``F = width - 1``
    (1-based) or ``width`` (0-based). In one process (``context=None``: every collective an
    identity) this is reading the whole files together.

    Args:
        paths: the files.
        n_features, zero_based, dtype, normalize, max_features: as :func:`load_svmlight`.
        query_files: per file a group-size file, ``None`` (look beside the file) or
            ``False`` (none); default all ``None``. Byte ranges use none.
        part: ``(rank, world_size)``, or ``None`` for the whole files.
        context: the ranks reading parts of the same data (their failures become
            :class:`~torchrankboost.parallel.DistributedError` on every rank); ``None``:
            this process alone.

    Returns:
        one :class:`RankingData` per file (``row``: the data rows of the part read).
    """
    ctx = _ALONE if context is None else context
    with ctx.guard():
        paths, ranges, qfiles = _plan_parts(paths, part, query_files)
        paths, parsed, nf, npdt = _read_files(paths, n_features=n_features,
                                              zero_based=zero_based, dtype=dtype, ranges=ranges,
                                              max_features=max_features)
        _check_range_qids(paths, parsed, ranges)
        width, has_zero = _numbering_evidence(parsed, len(paths))
        runs = [qid_runs(parsed[3 * i + 2]) for i in range(len(paths))]
    evidence = ctx.all_reduce_max(torch.tensor([width, int(has_zero)], dtype=torch.int64))
    width, has_zero = int(evidence[0]), bool(evidence[1])
    # the ranks' byte ranges: a query split between two of them is found over all runs
    # (read alone, without the group, a rank gathers its own runs only: checked locally)
    gathered = ctx.all_gather_object(runs) if ranges is not None else None
    if gathered is not None and len(gathered) != part[1]:
        gathered = None
    with ctx.guard():
        zb = has_zero if zero_based == "auto" else zero_based
        given, widen = nf, nf is None and ctx.world_size > 1
        if widen:
            _widen(parsed, len(paths), width)
            nf = max(width - (0 if zb else 1), 0)
        opts = dict(n_features=nf, npdt=npdt, dtype=dtype, query_files=qfiles,
                    normalize=normalize, max_features=max_features, ranges=ranges,
                    runs=gathered, part=part)
        if parsed and isinstance(parsed[0], NativeMatrix):
            out = _build_native(paths, parsed, zb=zb, **opts)
            if out is not None:
                return out
            # a check fails: the Python path reads the same bytes and reports it
            _check_line_ends(paths, ranges)
            parsed = _parse_svmlight(paths, given, npdt, zero_based, ranges)
            if widen:
                _widen(parsed, len(paths), width)
        return _build_files(paths, parsed, zero_based=zb, **opts)


def load_svmlight(path: PathLike, *, n_features: Optional[int] = None,
                  query_file: Optional[PathLike] = None, dtype: torch.dtype = torch.float32,
                  normalize: bool = False, zero_based: Union[bool, str] = "auto",
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
    return read_svmlight([path], n_features=n_features, zero_based=zero_based, dtype=dtype,
                         query_files=[query_file], normalize=normalize,
                         max_features=max_features)[0]


def load_svmlight_files(paths: Sequence[PathLike], *, n_features: Optional[int] = None,
                        dtype: torch.dtype = torch.float32, normalize: bool = False,
                        zero_based: Union[bool, str] = "auto", max_features: Optional[int] = None
                        ) -> List[RankingData]:
    """Read several SVMlight/LETOR files together: one feature numbering for all of them
    (``"auto"``: 0-based iff some file uses index 0; kept in each result's ``zero_based``)
    and one feature count (the largest index over the files). Arguments as
    :func:`load_svmlight` (group-size files are found beside each file)."""
    return read_svmlight(list(paths), n_features=n_features, zero_based=zero_based,
                         dtype=dtype, normalize=normalize, max_features=max_features)


def load_letor_fold(folder: PathLike, *, normalize: bool = False,
                    dtype: torch.dtype = torch.float32, zero_based: Union[bool, str] = "auto",
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
    return tuple(read_svmlight(paths, zero_based=zero_based, dtype=dtype, normalize=normalize,
                               max_features=max_features))

