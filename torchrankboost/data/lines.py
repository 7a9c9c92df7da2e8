"""Line-level scanning of SVMlight/LETOR files: the error path (which line is wrong, and
why; line numbers as in the whole file, also for a byte range) and the query boundaries
that cut a file into per-rank byte ranges.

Reading itself is compiled (:mod:`torchrankboost.data.fastread`, else scikit-learn's reader);
these pure-Python scans run only on a parse failure, or over a few lines around each cut.
"""

from __future__ import annotations

import bz2
import gzip
import math
import re
from pathlib import Path
from typing import Optional, Tuple

__all__ = ["check_line_ends", "data_line_number", "locate_problem", "rank_byte_range"]

def open_text(path: Path):
    """Open an SVMlight file as bytes, ``.gz`` / ``.bz2`` decompressed on the way (the line
    scans of the error path and the compiled reader's blocks)."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.open(path, "rb")
    if suffix == ".bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


_CR_BLOCK = 1 << 22


def check_line_ends(path: Path, rng: Optional[Tuple[int, int]] = None) -> None:
    """``ValueError("<path>:<line>: ...")`` at the first bare carriage return (a ``\\r`` not
    followed by ``\\n``: classic Mac OS line ends) of a file or of its byte range ``rng``.

    The compiled reader ends lines at ``\\n`` only: a file whose lines end in a bare
    ``\\r`` would be one line (a LETOR ``# docid`` comment swallowing every document after
    the first). ``\\r\\n`` (Windows) line ends read fine. One pass over the bytes in
    blocks (``bytes.count``, so a plain or Windows file costs a fast read)."""
    start, end = (0, None) if rng is None else rng
    with open_text(path) as fh:
        if start:
            fh.seek(start)
        pos = start
        while end is None or pos < end:
            block = fh.read(_CR_BLOCK if end is None else min(_CR_BLOCK, end - pos))
            if not block:
                return
            if block.endswith(b"\r"):  # its \n may start the next block
                block += fh.read(1)
            if block.count(b"\r") != block.count(b"\r\n"):
                k = re.search(rb"\r(?!\n)", block).start()
                raise ValueError(
                    f"{path}:{_line_at(path, pos + k)}: a bare carriage return (\\r) ends a "
                    f"line (old Mac line ends), which the reader does not split lines at; "
                    f"convert them to \\n, e.g. tr '\\r' '\\n' < {path.name} > fixed.txt")
            pos += len(block)


def _line_at(path: Path, offset: int) -> int:
    """1-based number of the line holding byte ``offset`` (error path only)."""
    lineno, pos = 1, 0
    with open_text(path) as fh:
        while pos < offset:
            chunk = fh.read(min(_CR_BLOCK, offset - pos))
            if not chunk:
                break
            lineno += chunk.count(b"\n")
            pos += len(chunk)
    return lineno


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
    with open_text(path) as fh:
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


def locate_problem(path: Path, zero_based, n_features,
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


def data_line_number(path: Path, row: int, rng: Optional[Tuple[int, int]] = None) -> int:
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


# ---------------------------------------------------------------- byte ranges
_BLANK = object()
_SCAN_BLOCK = 1 << 16


def _qid_token(line: bytes, path: Path, pos: int):
    """The qid of a data line (an int, or the raw token when it does not parse: the reader
    reports that line), ``_BLANK`` for a blank or comment line."""
    hash_pos = line.find(b"#")
    if hash_pos >= 0:
        line = line[:hash_pos]
    parts = line.split()
    if not parts:
        return _BLANK
    if len(parts) < 2 or not parts[1].startswith(b"qid:"):
        raise ValueError(
            f"{path}: the data line at byte {pos} has no 'qid:'; load_svmlight_shard cuts a "
            f"file at query boundaries, which it finds by qid (give every line a qid, or "
            f"split the data into one file per shard and pass the list of files)")
    try:
        return int(parts[1][4:])
    except ValueError:
        return parts[1]


def _last_data_line(fh, p: int, path: Path):
    """``(qid, end)`` of the last data line ending at or before the line start ``p``
    (``(None, 0)`` when there is none), reading backwards in growing blocks."""
    block = _SCAN_BLOCK
    while True:
        a = max(0, p - block)
        fh.seek(a)
        buf = fh.read(p - a)
        pieces = buf.split(b"\n")[:-1]  # buf ends with the newline before p
        first = 0 if a == 0 else 1  # the first piece may be a partial line
        end = p
        for line in reversed(pieces[first:]):
            start = end - len(line) - 1
            q = _qid_token(line, path, start)
            if q is not _BLANK:
                return q, end
            end = start
        if a == 0:
            return None, 0
        block *= 8


def _query_cut(path: Path, pos: int, size: int) -> int:
    """Where the shard whose nominal start is byte ``pos`` begins: right after the last
    data line before the first query that starts at or after ``pos`` (a query starts at a
    data line whose qid differs from the previous data line's). 0 or ``size`` at the ends.

    Cutting right after a data line (comment lines after it go to the next shard) is what
    scikit-learn's ``offset``/``length`` reader needs to read exactly the lines between two
    cuts."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    with open(path, "rb") as fh:
        fh.seek(pos - 1)
        if fh.read(1) == b"\n":
            p = pos
        else:
            fh.readline()
            p = fh.tell()
        prev, prev_end = _last_data_line(fh, p, path)
        fh.seek(p)
        at = p
        for line in fh:
            q = _qid_token(line, path, at)
            at += len(line)
            if q is _BLANK:
                continue
            if prev is None:
                return 0
            if q != prev:
                return prev_end
            prev_end = at
    return size


def rank_byte_range(path: Path, rank: int, world_size: int) -> Tuple[int, int]:
    """Rank ``rank``'s part ``[start, end)`` of a file of ``S`` bytes cut into
    ``world_size`` parts: the nominal range ``[r·S/W, (r+1)·S/W)`` moved to query
    boundaries (:func:`_query_cut`), so that every query lies in exactly one part.
    ``ValueError`` for a compressed file (it cannot be cut by byte)."""
    if world_size > 1 and path.suffix.lower() in (".gz", ".bz2"):
        raise ValueError(f"{path}: a compressed file cannot be cut into byte ranges; "
                         f"decompress it, or pass a list of files")
    size = path.stat().st_size
    return (_query_cut(path, rank * size // world_size, size),
            _query_cut(path, (rank + 1) * size // world_size, size))
