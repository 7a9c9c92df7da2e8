"""``train --cache PATH``: the training split from the bin cache
(:mod:`torchrankboost.data.cache`; the ``bin`` command is :mod:`torchrankboost._cache_cli`).

:func:`cached_splits` gives the training split from the cache — built first when it is
missing, rebuilt with a message when it is stale (its source changed, or the run's learner
bins differently), refused when damaged — and the validation and test data from their
files, read with the cache's feature numbering and padded to its feature count. On the
ranks of a data-parallel run every rank maps its own rows; a missing or stale cache is an
error there (``train --nproc`` builds it in the parent before the ranks start:
:func:`ensure_cache`). The fit sees a stand-in feature matrix that takes no memory (the
tree learner uses only the bins attached to it); after the fit the training split gets
the bins' representatives for its final metrics
(:func:`~torchrankboost.data.cache.realized`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

from .data.cache import (BinSpec, bin_spec_of, build_cache, cache_status, load_cache,
                         run_sources)

__all__ = ["cached_splits", "ensure_cache", "reading_options", "spec_for"]

PROG = "torchrankboost"


_ZERO_BASED = {"auto": "auto", "yes": True, "no": False}  # (as training.ZERO_BASED)


def reading_options(args) -> Dict[str, Any]:
    return dict(zero_based=_ZERO_BASED[args.zero_based], max_features=args.max_features,
                normalize=bool(args.normalize))


def spec_for(args, options) -> BinSpec:
    from .factory import make_ranker

    ranker = make_ranker(**options)
    return bin_spec_of(getattr(ranker, "learner", None), **reading_options(args))


def ensure_cache(args, spec: BinSpec, quiet: bool) -> None:
    """Build the cache when missing, rebuild it when stale (with a message); a damaged
    file (or not a cache at all) is :class:`CacheError` — never overwritten."""
    why = cache_status(args.cache, spec, run_sources(args.data, getattr(args, "weights", None)))
    if why is None:
        return
    if not quiet:
        print(f"{PROG}: building the bin cache {args.cache}: {why}", file=sys.stderr)
    build_cache(args.cache, args.data, spec=spec, weights=getattr(args, "weights", None))


def _side_files(args):
    """``{split: path}`` of the validation and test files of a cached run."""
    from .data.sources import resolve_data_path

    files = {}
    p = resolve_data_path(args.data)
    if p.is_dir():
        files = {"valid": p / "vali.txt", "test": p / "test.txt"}
    if args.valid:
        files["valid"] = args.valid
    if args.test:
        files["test"] = args.test
    return files


def cached_splits(args, ctx, options):
    """``(train, valid, test, name, weights)`` of this rank with ``--cache``: the training
    split from the cache (already normalised when the cache was built so), the others read
    from their files with the cache's numbering and feature count."""
    import torch

    from .data import RankingData, normalize_per_query
    from .data.sources import _read_run_files, pad_features

    with ctx.guard():
        if args.init_model:
            raise ValueError("--cache cannot continue a model (--init-model): its trees' "
                           "thresholds are not the cache's bin edges; train from the file")
        if torch.device(args.device).type != "cpu":
            raise ValueError(f"--cache trains on the CPU (the cache is memory-mapped); got "
                           f"--device {args.device}")
        spec = spec_for(args, options)
        if ctx.world_size == 1:
            ensure_cache(args, spec, not ctx.is_main)
        # (a resumed fit scores its checkpoint's trees on the features: values then)
        cached = load_cache(args.cache, spec=spec, context=ctx, values=bool(args.resume),
                            sources=run_sources(args.data, getattr(args, "weights", None)))
    tr, F = cached.data, cached.data.X.shape[1]
    files = _side_files(args)
    splits = {"valid": None, "test": None}
    if files:
        read = _read_run_files(list(files.values()), context=ctx, max_features=args.max_features,
                               zero_based=tr.zero_based if tr.zero_based is not None else "auto")
        for key, d in zip(files, read):
            with ctx.guard():
                if d.num_features > F:
                    raise ValueError(f"{files[key]}: has {d.num_features} features, the bin "
                                   f"cache {args.cache} has {F}")
            d = pad_features(d, F)
            d.zero_based = tr.zero_based
            if args.normalize:
                d = RankingData(normalize_per_query(d.X, d.groups), d.labels, d.groups, d.qid,
                                d.row, d.zero_based)
            splits[key] = d
    p = Path(args.data)
    name = p.name if p.is_dir() else p.stem
    return tr, splits["valid"], splits["test"], name, cached.weights
