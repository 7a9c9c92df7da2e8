"""SVMlight/LETOR text as one reader of the seam (:mod:`.readers`).

The format numbers its features (no names, no column roles: ``tabular = False``) and has
its own fast paths, which the loading paths use: several files read together with one
feature numbering, whole or one rank's byte range of each (:func:`.svmlight.read_svmlight`
over the compiled reader), and a file streamed straight into bin codes
(:func:`.binned_read.stream_binned`). :meth:`SvmlightReader.open` gives the generic row-chunk
protocol too, over the file read whole.
"""

from __future__ import annotations

from typing import Iterator, Optional

import numpy as np

from .binned_read import stream_binned
from .readers import Chunk, Columns, ReadOptions, Reader, Source
from .svmlight import read_svmlight

__all__ = ["SvmlightReader", "SvmlightSource"]

_CHUNK_ROWS = 65536


class SvmlightSource(Source):
    """An SVMlight file read whole (:func:`~.svmlight.read_svmlight`), served as chunks."""

    format = "svmlight"

    def __init__(self, path, options: ReadOptions = ReadOptions()) -> None:
        self.path = str(path)
        self.data = read_svmlight([path], zero_based=options.zero_based,
                                  max_features=options.max_features)[0]
        self.num_rows = len(self.data)
        self.feature_names = None
        self.unit_starts = np.array([0, self.num_rows], dtype=np.int64)
        self.roles = {"label": "label", "qid": "qid"}

    @property
    def num_features(self) -> int:
        return self.data.num_features

    def chunks(self, start: int = 0, stop: Optional[int] = None) -> Iterator[Chunk]:
        stop = self.num_rows if stop is None else stop
        d = self.data
        for s in range(start, stop, _CHUNK_ROWS):
            e = min(stop, s + _CHUNK_ROWS)
            yield Chunk(s, d.X[s:e].numpy(), d.labels[s:e].double().numpy(),
                        d.qid[s:e].numpy())


class SvmlightReader(Reader):
    """SVMlight/LETOR files (``.txt``, ``.gz``, ``.bz2``, any unknown suffix)."""

    name = "svmlight"
    tabular = False

    def open(self, path, columns: Columns = Columns(), options: ReadOptions = ReadOptions()
             ) -> Source:
        return SvmlightSource(path, options)

    def read_files(self, paths, *, options: ReadOptions, part=None, context=None):
        """The files read together (one feature numbering and count), whole or this
        ``part = (rank, world_size)``'s byte range of each."""
        return read_svmlight(list(paths), zero_based=options.zero_based,
                             max_features=options.max_features, part=part, context=context)

    def read_binned(self, path, *, n_bins: int, sample_count: int, seed: int,
                    options: ReadOptions):
        """``(data, binned)`` of the file streamed into bin codes, or ``None``."""
        got = stream_binned(path, n_bins=n_bins, sample_count=sample_count, seed=seed,
                            zero_based=options.zero_based, max_features=options.max_features)
        return None if got is None else (got.data, got.binned)
