"""Ranking data: the dataset (:mod:`.dataset`), the SVMlight/LETOR reader for whole files
and per-rank shards (:mod:`.svmlight`, :mod:`.lines`, :mod:`.shards`), synthetic data
(:mod:`.synthetic`) and batches of whole queries (:mod:`.batching`)."""

from .batching import (
    DistributedQueryBatchSampler,
    QueryBatchSampler,
    QueryDataset,
    collate_queries,
    epoch_query_order,
    iterate_query_batches,
    take_queries,
)
from .dataset import RankingData, normalize_per_query, shard_queries
from .shards import load_svmlight_shard
from .svmlight import load_letor_fold, load_svmlight, load_svmlight_files
from .synthetic import make_letor

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
