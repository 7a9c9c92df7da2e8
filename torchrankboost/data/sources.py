"""Data sets by name or by path, and where data folders are found.

* :func:`data_root` / :func:`dataset_path`: the one rule for finding data on disk. The data
  folder is the one named by the ``TORCHRANKBOOST_DATA`` environment variable; without it,
  ``data/`` under the current working directory. Scripts and tests look up real data sets
  (``mq2008/Fold1``, ``uci_wdbc``, ...) there.
* :func:`load_builtin`: small data sets that need no download (scikit-learn's breast-cancer
  data, a synthetic LETOR-like set), split into train / validation / test.
* :func:`load_data`: a built-in name, a fold folder (``train``/``vali``/``test`` in any
  supported format) or a data file → the three splits (what ``torchrankboost train --data``
  reads), in one process or as this rank's shards on every rank of a process group.
* :func:`read_run_files`: the files of a run through the reader seam (:mod:`.readers`):
  SVMlight/LETOR files read together by their reader, tables (Parquet, Arrow/Feather,
  CSV/TSV) by :func:`~.tables.read_sources`.
* :func:`load_table`: the one function for a table in Python — a ``pyarrow.Table``, a
  pandas or Polars ``DataFrame``, or a path in any supported format.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from .._errors import first_line
from ..groups import Groups
from ..parallel.context import DistContext, get_context
from .dataset import RankingData
from .readers import Columns, ReadOptions, reader_for, supported_suffixes
from .synthetic import make_letor
from ..contract import PathLike

__all__ = ["DATA_ENV", "BUILTIN", "data_root", "dataset_path", "load_builtin", "load_data",
           "load_file", "load_files", "load_table", "fold_paths", "fold_split", "looked_in",
           "read_run_files", "resolve_data_path",
           "pad_features", "align_features", "single_query", "slice_queries"]

DATA_ENV = "TORCHRANKBOOST_DATA"
BUILTIN = ("wdbc", "synthetic")
_SPLITS = ("train", "valid", "test")


# ============================================================================ where data live
def data_root() -> Path:
    """The data folder: ``$TORCHRANKBOOST_DATA`` if set (and not empty), else ``./data``
    (``data/`` under the current working directory; git ignores it). The folder need not
    exist: callers check the paths they need."""
    env = os.environ.get(DATA_ENV, "").strip()
    return Path(env).expanduser() if env else Path.cwd() / "data"


def dataset_path(*parts: str) -> Path:
    """A path under :func:`data_root`, e.g. ``dataset_path("mq2008", "Fold1")``."""
    return data_root().joinpath(*parts)


def resolve_data_path(name) -> Path:
    """``name`` as given when it exists (relative to the working folder) or is absolute,
    else under :func:`data_root` when it exists there (``--data mq2008/Fold1`` with
    ``TORCHRANKBOOST_DATA`` holding it); otherwise ``name`` as given (callers report it
    missing, with :func:`looked_in`)."""
    p = Path(name).expanduser()
    if p.exists() or p.is_absolute():
        return p
    under = data_root() / p
    return under if under.exists() else p


def looked_in(name) -> str:
    """Where :func:`resolve_data_path` looked for ``name``, for a not-found message."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return str(p)
    env = f" (${DATA_ENV})" if os.environ.get(DATA_ENV, "").strip() else f" (${DATA_ENV} unset)"
    return f"{Path.cwd() / p} and {data_root() / p}{env}"


# ============================================================================ helpers
def single_query(X: Tensor, y: Tensor) -> RankingData:
    """``RankingData`` holding ``X``, ``y`` as one query (bipartite ranking)."""
    n = X.shape[0]
    return RankingData(X, y, Groups.single(n), torch.zeros(n, dtype=torch.long),
                       torch.arange(n))


def slice_queries(data: RankingData, g0: int, g1: int) -> RankingData:
    """Queries ``g0 .. g1-1`` of ``data`` (a ``RankingData``) as a new ``RankingData``."""
    off = data.groups.offsets
    a, b = int(off[g0]), int(off[g1])
    return RankingData(data.X[a:b], data.labels[a:b], Groups.from_sizes(data.groups.sizes[g0:g1]),
                       data.qid[a:b], None if data.row is None else data.row[a:b])


def pad_features(data: Optional[RankingData], F: int) -> Optional[RankingData]:
    """``data`` with zero feature columns appended up to ``F`` (``None`` stays ``None``)."""
    if data is None or data.num_features == F:
        return data
    X = torch.zeros(data.X.shape[0], F, dtype=data.X.dtype)
    X[:, :data.num_features] = data.X
    return RankingData(X, data.labels, data.groups, data.qid, data.row)


def align_features(*datas: Optional[RankingData]) -> Tuple[Optional[RankingData], ...]:
    """The splits padded to the largest feature count among them (``None`` entries kept)."""
    F = max(d.num_features for d in datas if d is not None)
    return tuple(pad_features(d, F) for d in datas)


# ============================================================================ built-in data
def _split_wdbc(seed: int):
    from sklearn.datasets import load_breast_cancer

    X, target = load_breast_cancer(return_X_y=True)
    y = (target == 0).astype(np.float32)  # malignant = relevant
    rng = np.random.default_rng(seed)
    parts = ([], [], [])
    for cls in (0.0, 1.0):
        idx = rng.permutation(np.flatnonzero(y == cls))
        n = idx.size
        a, b = int(round(0.6 * n)), int(round(0.8 * n))
        for p, sl in zip(parts, (idx[:a], idx[a:b], idx[b:])):
            p.append(sl)
    out = []
    for p in parts:
        idx = np.sort(np.concatenate(p))
        out.append(single_query(torch.as_tensor(X[idx], dtype=torch.float32),
                                torch.as_tensor(y[idx])))
    return tuple(out)


def load_builtin(name: str, *, seed: int = 0, n_queries: int = 300, docs_per_query: float = 30,
                 n_features: int = 40) -> Tuple[RankingData, RankingData, RankingData]:
    """Built-in data split into ``(train, valid, test)`` :class:`~torchrankboost.data.RankingData`.

    * ``"wdbc"``: scikit-learn's breast-cancer data (569 × 30) as one bipartite query per
      split; relevant (label 1) = malignant. A stratified 60/20/20 split drawn with ``seed``.
    * ``"synthetic"``: :func:`~torchrankboost.data.make_letor` (``n_queries`` queries of about
      ``docs_per_query`` documents, ``n_features`` features, grades 0–4), split by query
      60/20/20.

    An unknown name raises ``ValueError`` listing the valid ones.
    """
    key = name.strip().lower()
    if key == "wdbc":
        return _split_wdbc(seed)
    if key == "synthetic":
        data = make_letor(n_queries, docs_per_query, n_features, 5, seed=seed)
        G = data.groups.num_groups
        a, b = int(round(0.6 * G)), int(round(0.8 * G))
        return slice_queries(data, 0, a), slice_queries(data, a, b), slice_queries(data, b, G)
    raise ValueError(f"unknown built-in data {name!r}; valid choices: {', '.join(BUILTIN)} "
                     "(or a LETOR fold folder / an SVMlight file)")


# ============================================================================ files


def _read_error(exc: BaseException, paths) -> ValueError:
    msg = first_line(exc)
    if not any(str(p) in msg for p in paths):
        msg = f"{paths[0]}: {msg}"
    return ValueError(msg)


def _check_file(path) -> Path:
    p = resolve_data_path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {path} (looked in {looked_in(path)})")
    if p.is_dir():
        raise ValueError(f"expected a file, got a folder: {path}")
    return p


def read_run_files(paths, *, context: DistContext, n_features: Optional[int] = None,
                   zero_based="auto", max_features: Optional[int] = None,
                   columns: Columns = Columns()):
    """The files of a run read together, each as this rank's part of it (the whole file in
    one process), through the reader of their format: SVMlight/LETOR files with one feature
    numbering and one feature count (each rank its byte range), tables (any mix of Parquet,
    Arrow/Feather, CSV/TSV) with the same feature columns, the column roles of ``columns``
    (each rank its rows, whole queries: :func:`~.tables.rank_rows`). Errors as
    :func:`load_file` (on every rank: :class:`~torchrankboost.parallel.DistributedError`);
    SVMlight files and tables in one run are a ``ValueError``."""
    with context.guard():
        ps = [_check_file(p) for p in paths]
        readers = [reader_for(p) for p in ps]
        if len({r.tabular for r in readers}) > 1:
            raise ValueError(f"{', '.join(map(str, ps))}: a run reads SVMlight/LETOR text or "
                             f"tables (Parquet, Arrow, CSV), not both")
    options = ReadOptions(zero_based=zero_based, max_features=max_features, columns=columns)
    part = (context.rank, context.world_size)
    group = getattr(readers[0], "read_files", None) if len({r.name for r in readers}) == 1 \
        else None
    if group is None:
        from .tables import read_sources

        return read_sources(ps, columns=columns, part=part, context=context)
    try:
        if n_features is not None:
            from .svmlight import read_svmlight

            return read_svmlight(ps, n_features=n_features, zero_based=zero_based,
                                 max_features=max_features, part=part, context=context)
        return group(ps, options=options, part=part, context=context)
    except (ValueError, OSError, UnicodeDecodeError, EOFError) as exc:
        raise _read_error(exc, ps) from None


def load_table(source: Any, *, label: Optional[str] = None, qid: Optional[str] = None,
               weight: Optional[str] = None, position: Optional[str] = None,
               group_weight: Optional[str] = None, features: Optional[Sequence[str]] = None,
               columns: Optional[Columns] = None) -> RankingData:
    """Ranking data from a table: a ``pyarrow.Table``, a pandas or Polars ``DataFrame``, or
    a path (Parquet, Arrow IPC/Feather, CSV/TSV — or SVMlight/LETOR text, which has no
    column names).

    Column roles by name: ``label`` (default ``"label"``) and ``qid`` (default ``"qid"``)
    must exist; ``weight``, ``position`` and ``group_weight`` are read from the column of
    that name (default: the role's own name) when it exists, and a name given explicitly
    must exist; ``features``: the feature columns (default: every other numeric column).
    ``columns``: a :class:`~.readers.Columns` instead of the names (e.g. no label column:
    ``Columns(label=None)``).

    Returns:
        :class:`RankingData` with ``feature_names``, and ``weight`` ``(n,)``, ``position``
        ``(n,)``, ``group_weight`` ``(G,)`` when those columns exist. Queries are the runs
        of equal query ids; an id that comes back later is a ``ValueError`` naming its row.
        Any bad input is one ``ValueError`` line naming the file (or the kind of table),
        the row and the column; without pyarrow, one line saying what to install.
    """
    from .tables import read_source

    cols = columns if columns is not None else Columns.of(
        label=label, qid=qid, weight=weight, position=position, group_weight=group_weight,
        features=features)
    if not isinstance(source, (str, os.PathLike)):
        from .arrow import is_table, table_source

        if not is_table(source):
            raise ValueError(f"expected a pyarrow Table, a pandas or Polars DataFrame or a "
                             f"path, got {type(source).__name__}")
        src = table_source(source, cols)
    else:
        p = _check_file(source)
        if not reader_for(p).tabular:
            return load_file(p)
        src = reader_for(p).open(p, cols)
    with src:
        if src.num_rows == 0:
            raise ValueError(f"{src.path}: the table has no data rows")
        return read_source(src)


def load_file(path: PathLike, *, n_features: Optional[int] = None,
              zero_based: Union[bool, str] = "auto", max_features: Optional[int] = None
             ) -> RankingData:
    """One SVMlight/LETOR file as ``RankingData``. A missing file raises
    ``FileNotFoundError``; a folder or a malformed file ``ValueError`` with a one-line message
    naming the file (and the line). ``zero_based``: the feature numbering (``"auto"``,
    ``True``, ``False``; the one used is kept in the result's ``zero_based``)."""
    return load_files([path], n_features=n_features, zero_based=zero_based,
                      max_features=max_features)[0]


def load_files(paths: Sequence[PathLike], *, n_features: Optional[int] = None,
               zero_based: Union[bool, str] = "auto", max_features: Optional[int] = None
              ) -> List[RankingData]:
    """Several SVMlight/LETOR files read together — one feature numbering decided for all
    of them, one feature count — as a list of ``RankingData``; errors as :func:`load_file`."""
    return read_run_files(paths, context=get_context(False), n_features=n_features,
                           zero_based=zero_based, max_features=max_features)


def fold_split(folder: Path, stem: str) -> Optional[Path]:
    """The file of split ``stem`` (``train``, ``vali``, ``test``) in a fold folder: ``stem``
    with any supported suffix (``train.txt``, ``train.parquet``, ...) or bare; ``None`` when
    there is none, ``ValueError`` when there are several."""
    found = [folder / f"{stem}{sfx}" for sfx in supported_suffixes()
             if (folder / f"{stem}{sfx}").is_file()]
    if (folder / stem).is_file():
        found.append(folder / stem)
    if len(found) > 1:
        raise ValueError(f"{folder}: several {stem} files ({', '.join(p.name for p in found)}); "
                         f"keep one")
    return found[0] if found else None


def fold_paths(p: Path, source: str):
    """The ``train``, ``vali`` and ``test`` files of a fold folder (in any supported
    format each); ``ValueError`` naming what is missing."""
    files = {s: fold_split(p, s) for s in ("train", "vali", "test")}
    missing = [s for s, f in files.items() if f is None]
    if missing:
        raise ValueError(f"{source}: not a LETOR fold folder (missing "
                         f"{', '.join(m + '.txt' for m in missing)}, or the same names as "
                         f"tables: .parquet, .feather, .arrow, .csv, .tsv)")
    return list(files.values())


# ============================================================================ data by name
def _sources(source: str, seed: int, ctx: DistContext):
    """``(splits, files, name)``: the built-in splits (this rank's shards of them), or the
    files of the source by split (a LETOR fold folder, or one training file)."""
    p = resolve_data_path(source)
    if source.strip().lower() in BUILTIN and not p.exists():
        splits = {k: d.shard(ctx.rank, ctx.world_size)
                  for k, d in zip(_SPLITS, load_builtin(source, seed=seed))}
        return splits, {}, source.strip().lower()
    splits = dict.fromkeys(_SPLITS)
    if p.is_dir():
        return splits, dict(zip(_SPLITS, fold_paths(p, source))), p.name or "fold"
    if p.exists():
        return splits, {"train": p}, p.stem
    raise FileNotFoundError(f"data not found: {source!r} is neither a built-in data set "
                            f"({', '.join(BUILTIN)}) nor an existing file or LETOR fold "
                            f"folder (looked in {looked_in(source)})")


def load_data(source: str, *, valid: Optional[str] = None, test: Optional[str] = None,
              seed: int = 0, zero_based: Union[bool, str] = "auto",
              max_features: Optional[int] = None, context: Optional[DistContext] = None,
              columns: Columns = Columns()) -> Tuple:
    """``(train, valid or None, test or None, name)`` from a data source and optional files.

    ``source`` is a built-in name (``wdbc``, ``synthetic``), a fold folder (``train``,
    ``vali``, ``test``, each ``.txt`` or any table format: ``.parquet``, ``.feather``,
    ``.csv``, ...), an SVMlight/LETOR file with ``qid:`` or a table file (column roles:
    ``columns``, see :class:`~.readers.Columns`; every file of the run with the same
    feature columns, and its feature names kept in ``train.feature_names``); a relative path
    that does not exist in the working folder is looked up under :func:`data_root`
    (``"mq2008/Fold1"``), also for ``valid``/``test``, and a missing one is reported with
    both places. Files given as
    ``valid``/``test`` replace the fold's or built-in split. Every file of the run is read
    together: one feature numbering (``zero_based``: ``"auto"`` — 0-based iff some file uses
    index 0 —, ``True`` or ``False``), kept in ``train.zero_based`` (``None`` for built-in
    data), and one feature count (the splits are padded to it). Missing data raise
    ``FileNotFoundError``, bad data ``ValueError``.

    **On the ranks of a process group** (``context``, default :func:`get_context`
    ``(None)``, with ``world_size W > 1``) each split returned is this rank's shard, and
    concatenating the shards of ranks ``0 .. W-1`` gives the one-process split. Built-in
    data: the one-process split (the same ``seed`` on every rank) cut by
    :meth:`RankingData.shard`. Files: each rank parses only its byte range of each file
    (every line needs ``qid:``; see :func:`~torchrankboost.data.load_svmlight_shard`), and
    the ranks agree on the feature numbering and count over every file of the run (one
    all-reduce), so every shard has the same columns as the one-process read. A failure
    on some rank raises :class:`~torchrankboost.parallel.DistributedError` on every rank.
    In one process the result is the whole splits.
    """
    ctx = get_context(context)
    splits, files, name = _sources(source, seed, ctx)
    if valid:
        files["valid"] = valid
    if test:
        files["test"] = test
    numbering = None
    if files:
        loaded = dict(zip(files, read_run_files(list(files.values()), context=ctx,
                                                 zero_based=zero_based,
                                                 max_features=max_features, columns=columns)))
        numbering = next(iter(loaded.values())).zero_based
        splits.update(loaded)
    tr, va, te = align_features(*(splits[k] for k in _SPLITS))
    if numbering is not None:
        for d in (tr, va, te):
            if d is not None:
                d.zero_based = numbering
    return tr, va, te, name
