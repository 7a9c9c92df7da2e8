"""Displayed positions of the training documents: LightGBM's ``.position`` side file.

A file ``DATA.position`` beside the data file holds one non-negative integer per data line:
the 1-based rank at which the document was shown in the logged list (0: not shown). The
labels of the data file are then the clicks (0/1, counts or click-through rates). Read by
the command line (``--position FILE``, else the ``.position`` file when it exists) and
passed to ``fit(..., position=...)``.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .svmlight import PathLike, read_per_line

__all__ = ["position_file", "read_positions", "document_positions"]


def _position(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise ValueError(f"expected one position (an integer) per line, got {s!r}") from None
    if v < 0:
        raise ValueError(f"a position must be >= 0 (1-based rank, 0: not shown), got {v}")
    return v


def position_file(path: PathLike) -> Optional[Path]:
    """The ``.position`` side file of the data file ``path`` (``path + ".position"``), when
    it exists."""
    q = Path(str(path) + ".position")
    return q if q.is_file() else None


def read_positions(path: PathLike, n_rows: Optional[int] = None) -> np.ndarray:
    """``(n,)`` int64 positions, one per non-blank line of ``path``; ``ValueError`` naming
    the line for a bad value, or when ``n_rows`` is given and the count differs."""
    out = read_per_line(path, _position, "bad position")
    if n_rows is not None and len(out) != n_rows:
        raise ValueError(f"{path}: {len(out)} positions for {n_rows} data rows (one position "
                         f"per data line of the file)")
    return np.asarray(out, dtype=np.int64)


def _train_file(source: PathLike) -> Optional[Path]:
    p = Path(source)
    if p.is_dir():
        return next((q for q in (p / "train.txt", p / "train") if q.is_file()), None)
    return p if p.is_file() else None


def document_positions(source: PathLike, position_path: Optional[PathLike], data, *,
                       context=None) -> Optional[torch.Tensor]:
    """The ``(n,)`` int64 positions of ``data``'s documents, or ``None``: from
    ``position_path`` when given, else from the ``.position`` side file of the training file
    of ``source`` (a file or a LETOR fold folder) when it exists; taken in ``data.row``
    order, offset by the rows of the ranks before this one on several processes (as
    :func:`~torchrankboost.data.svmlight.document_weights` does)."""
    if position_path:
        path = Path(position_path)
    else:
        train = _train_file(source)
        path = position_file(train) if train is not None else None
    if path is None:
        return None
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "position file not found", str(path))
    start, total = 0, len(data)
    if context is not None and context.world_size > 1:
        sizes = context.gather_values([len(data)])[:, 0].to(torch.int64)
        start, total = int(sizes[:context.rank].sum()), int(sizes.sum())
    row = data.row if data.row is not None else torch.arange(len(data))
    return torch.from_numpy(read_positions(path, total))[row.cpu() + start]
