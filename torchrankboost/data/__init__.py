"""Ranking data: the dataset (:mod:`.dataset`), the SVMlight/LETOR reader for whole files
and per-rank shards (:mod:`.svmlight`, :mod:`.lines`, :mod:`.shards`), data by name or path
and the data folder (:mod:`.sources`), synthetic data (:mod:`.synthetic`) and batches of
whole queries (:mod:`.batching`)."""

from .batching import (
    DistributedQueryBatchSampler,
    QueryBatchPlan,
    QueryBatchSampler,
    QueryDataset,
    collate_queries,
    epoch_query_order,
    gather_queries,
    iterate_query_batches,
    take_queries,
)
from .dataset import RankingData, normalize_per_query, shard_queries
from .shards import load_svmlight_shard
from .sources import (
    BUILTIN,
    DATA_ENV,
    align_features,
    data_root,
    dataset_path,
    load_builtin,
    load_data,
    load_file,
    load_files,
    load_table,
    pad_features,
    single_query,
    slice_queries,
)
from .svmlight import load_letor_fold, load_svmlight, load_svmlight_files
from .synthetic import make_letor

__all__ = [
    "BUILTIN",
    "DATA_ENV",
    "DistributedQueryBatchSampler",
    "QueryBatchPlan",
    "QueryBatchSampler",
    "QueryDataset",
    "RankingData",
    "align_features",
    "collate_queries",
    "gather_queries",
    "data_root",
    "dataset_path",
    "epoch_query_order",
    "iterate_query_batches",
    "load_builtin",
    "load_data",
    "load_file",
    "load_files",
    "load_letor_fold",
    "load_svmlight",
    "load_svmlight_files",
    "load_svmlight_shard",
    "load_table",
    "make_letor",
    "normalize_per_query",
    "pad_features",
    "shard_queries",
    "single_query",
    "slice_queries",
    "take_queries",
]
