"""Ranking data: the dataset, SVMlight/LETOR reading (whole files and per-rank shards),
synthetic data and batches of whole queries."""

from .batching import DistributedQueryBatchSampler
from .core import (
    QueryBatchSampler,
    QueryDataset,
    RankingData,
    collate_queries,
    epoch_query_order,
    iterate_query_batches,
    load_letor_fold,
    load_svmlight,
    load_svmlight_files,
    make_letor,
    normalize_per_query,
    take_queries,
)
from .shards import load_svmlight_shard, shard_queries

__all__ = [
    "DistributedQueryBatchSampler",
    "QueryBatchSampler",
    "QueryDataset",
    "RankingData",
    "collate_queries",
    "epoch_query_order",
    "iterate_query_batches",
    "load_letor_fold",
    "load_svmlight",
    "load_svmlight_files",
    "load_svmlight_shard",
    "make_letor",
    "normalize_per_query",
    "shard_queries",
    "take_queries",
]
