"""``train --cache PATH``: the training split from the bin cache
(:mod:`torchrankboost.data.cache`; the ``bin`` command is :mod:`torchrankboost.cli.bin`).

:func:`cached_splits` gives the training split from the cache — built first when it is
missing, rebuilt with a message when it is stale (its source changed, or the run's learner
bins differently), refused when damaged — and the validation and test data from their
files, read with the cache's feature numbering and padded to its feature count. On the
ranks of a data-parallel run every rank maps its own rows; a missing or stale cache is an
error there (``train --nproc`` builds it in the parent before the ranks start:
:func:`prepare_before_launch`). The fit sees a stand-in feature matrix that takes no memory (the
tree learner uses only the bins attached to it); after the fit the training split gets
the bins' representatives for its final metrics
(:func:`~torchrankboost.data.cache.realized`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

from ..data.cache import (BinSpec, bin_spec_of, build_cache, cache_status, is_table_file,
                          load_cache, run_sources, training_file)
from .inputs import PROG
from .options import TrainOptions

__all__ = ["cached_splits", "ensure_cache", "prepare_before_launch", "spec_for"]


def spec_for(options: TrainOptions, ranker_options: Dict[str, Any]) -> BinSpec:
    """The bins the run's learner (built from ``ranker_options``) and reading options
    make."""
    from .inputs import build_ranker

    ranker = build_ranker(**ranker_options)
    columns = options.columns() if is_table_file(training_file(options.data)) else None
    return bin_spec_of(getattr(ranker, "learner", None), zero_based=options.zero_based,
                       max_features=options.max_features, normalize=options.normalize,
                       columns=columns)


def ensure_cache(options: TrainOptions, spec: BinSpec, quiet: bool) -> None:
    """Build the cache when missing, rebuild it when stale (with a message); a damaged
    file (or not a cache at all) is :class:`CacheError` — never overwritten."""
    why = cache_status(options.cache, spec, run_sources(options.data, options.weights))
    if why is None:
        return
    if not quiet:
        print(f"{PROG}: building the bin cache {options.cache}: {why}", file=sys.stderr)
    build_cache(options.cache, options.data, spec=spec, weights=options.weights)


def prepare_before_launch(options: TrainOptions, ranker_options: Dict[str, Any]) -> None:
    """``train --nproc N --cache PATH`` in the parent: the cache built or rebuilt once,
    before the ranks start (they only map it)."""
    if options.cache:
        ensure_cache(options, spec_for(options, ranker_options), False)


def _side_files(options: TrainOptions):
    """``{split: path}`` of the validation and test files of a cached run."""
    from ..data.sources import fold_split, resolve_data_path

    files = {}
    p = resolve_data_path(options.data)
    if p.is_dir():
        files = {k: fold_split(p, stem) or p / f"{stem}.txt"
                 for k, stem in (("valid", "vali"), ("test", "test"))}
    if options.valid:
        files["valid"] = options.valid
    if options.test:
        files["test"] = options.test
    return files


def _by_name(d, names, path, cache):
    """A table's split with the cache's feature columns, in the cache's order (other
    columns: ``ValueError``)."""
    from dataclasses import replace

    if names is None or d.feature_names is None or tuple(d.feature_names) == tuple(names):
        return d
    if set(d.feature_names) != set(names):
        missing = [c for c in names if c not in d.feature_names]
        extra = [c for c in d.feature_names if c not in names]
        raise ValueError(f"{path}: its feature columns differ from the bin cache {cache}'s "
                         f"(missing {missing[:8]}, extra {extra[:8]})")
    order = [list(d.feature_names).index(c) for c in names]
    return replace(d, X=d.X[:, order].contiguous(), feature_names=tuple(names))


def cached_splits(options: TrainOptions, ctx, ranker_options: Dict[str, Any]):
    """``(train, valid, test, name, weights)`` of this rank with ``--cache``: the training
    split from the cache (already normalised when the cache was built so), the others read
    from their files with the cache's numbering and feature count."""
    import torch

    from ..data import RankingData, normalize_per_query
    from ..data.sources import read_run_files, pad_features

    with ctx.guard():
        if options.init_model:
            raise ValueError("--cache cannot continue a model (--init-model): its trees' "
                           "thresholds are not the cache's bin edges; train from the file")
        if torch.device(options.device).type != "cpu":
            raise ValueError(f"--cache trains on the CPU (the cache is memory-mapped); got "
                             f"--device {options.device}")
        spec = spec_for(options, ranker_options)
        if ctx.world_size == 1:
            ensure_cache(options, spec, not ctx.is_main)
        # (a resumed fit scores its checkpoint's trees on the features: values then)
        cached = load_cache(options.cache, spec=spec, context=ctx, values=bool(options.resume),
                            sources=run_sources(options.data, options.weights))
    tr, F = cached.data, cached.data.X.shape[1]
    files = _side_files(options)
    splits = {"valid": None, "test": None}
    if files:
        read = read_run_files(list(files.values()), context=ctx,
                               max_features=options.max_features,
                               zero_based=tr.zero_based if tr.zero_based is not None else "auto",
                               columns=spec.read_options().columns)
        for key, d in zip(files, read):
            with ctx.guard():
                if d.num_features > F:
                    raise ValueError(f"{files[key]}: has {d.num_features} features, the bin "
                                     f"cache {options.cache} has {F}")
                d = _by_name(d, tr.feature_names, files[key], options.cache)
            d = pad_features(d, F)
            d.zero_based = tr.zero_based
            if options.normalize:
                d = RankingData(normalize_per_query(d.X, d.groups), d.labels, d.groups, d.qid,
                                d.row, d.zero_based)
            splits[key] = d
    p = Path(options.data)
    name = p.name if p.is_dir() else p.stem
    return tr, splits["valid"], splits["test"], name, cached.weights
