"""The former home of data by name or path, now :mod:`torchrankboost.data` (its
``sources`` module): these names are re-exported from there until the last callers have
moved. Import them from :mod:`torchrankboost.data`."""

from .data.sources import (  # noqa: F401
    BUILTIN,
    DATA_ENV,
    _fold_paths,
    align_features,
    data_root,
    dataset_path,
    load_builtin,
    load_data,
    load_file,
    load_files,
    pad_features,
    single_query,
    slice_queries,
)

__all__ = ["DATA_ENV", "BUILTIN", "data_root", "dataset_path", "load_builtin", "load_data",
           "load_file", "load_files", "pad_features", "align_features", "single_query",
           "slice_queries"]
