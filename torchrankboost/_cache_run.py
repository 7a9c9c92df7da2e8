"""The command line's side of the bin cache (:mod:`torchrankboost.data.cache`).

* ``torchrankboost bin DATA -o data.trbin`` (:func:`cmd_bin`): read, bin and store a
  training file with the tree learner's binning (``--max-bins``, ``--learner-param
  n_bins=/bin_sample_count=/seed=`` as ``train`` takes them) and the reading options of
  ``train`` (``--zero-based``, ``--max-features``, ``--normalize``, ``--weights``).
* ``torchrankboost train --cache PATH`` (:func:`cached_splits`): the training split from
  the cache — built first when it is missing, rebuilt with a message when it is stale (its
  source changed, or the run's learner bins differently) — validation and test data from
  their files, read with the cache's feature numbering and padded to its feature count.
  On the ranks of a data-parallel run every rank maps its own rows; a missing or stale
  cache is an error there (``train --nproc`` builds it in the parent before the ranks
  start: :func:`prepare_before_launch`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict

from .data.cache import (BinSpec, bin_spec_of, build_cache, cache_status,
                         load_cache, training_file)

__all__ = ["add_bin_command", "cmd_bin", "cached_splits", "prepare_before_launch"]

PROG = "torchrankboost"


def add_bin_command(sub) -> None:
    """The ``bin`` sub-command's parser."""
    p = sub.add_parser("bin", help="bin a training file once into a memory-mapped cache",
                       description="Read an SVMlight/LETOR training file, bin its features "
                                   "as the tree learner does and store them (safetensors) for "
                                   "`train --cache`.")
    p.add_argument("data", help="SVMlight/LETOR training file (or a LETOR fold folder)")
    p.add_argument("--output", "-o", required=True, metavar="PATH", help="the cache file")
    p.add_argument("--max-bins", type=int, default=None, metavar="N",
                   help="value bins per feature (the tree learner's n_bins; default 255)")
    p.add_argument("--learner-param", action="append", default=[], metavar="KEY=VALUE",
                   help="tree learner parameters as given to train (n_bins, "
                        "bin_sample_count, seed decide the bins)")
    p.add_argument("--weights", metavar="FILE", help="document weights (default: FILE.weight)")
    p.add_argument("--normalize", action="store_true", help="per-query min-max scaling first")
    p.add_argument("--zero-based", choices=("auto", "yes", "no"), default="auto",
                   help="feature numbering of the file (as train's)")
    p.add_argument("--max-features", type=int, default=None, metavar="N",
                   help="widest feature matrix the file may imply")
    p.add_argument("--quiet", "-q", action="store_true")


def _reading(args) -> Dict[str, Any]:
    from .training import ZERO_BASED

    return dict(zero_based=ZERO_BASED[args.zero_based], max_features=args.max_features,
                normalize=bool(args.normalize))


def cmd_bin(args) -> int:
    """``bin``: build the cache (atomically); one line of what was written."""
    import time

    from .boosting.learners import RegressionTree
    from .training import check_output, parse_params

    params = parse_params(args.learner_param, "--learner-param")
    if args.max_bins is not None:
        params["n_bins"] = args.max_bins
    spec = bin_spec_of(RegressionTree(**params), **_reading(args))
    check_output(args.output, [training_file(args.data)], "--output")
    t0 = time.perf_counter()
    path = build_cache(args.output, args.data, spec=spec, weights=args.weights)
    if not args.quiet:
        print(f"{PROG}: binned {args.data} into {path} ({path.stat().st_size / 2**20:.1f} MiB, "
              f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


def _spec(args, options) -> BinSpec:
    from .factory import make_ranker

    ranker = make_ranker(**options)
    return bin_spec_of(getattr(ranker, "learner", None), **_reading(args))


def _ensure(args, spec: BinSpec, quiet: bool) -> None:
    """Build the cache when missing, rebuild it when stale (with a message); a damaged
    file (or not a cache at all) is :class:`CacheError` — never overwritten."""
    why = cache_status(args.cache, spec)
    if why is None:
        return
    if not quiet:
        print(f"{PROG}: building the bin cache {args.cache}: {why}", file=sys.stderr)
    build_cache(args.cache, args.data, spec=spec, weights=getattr(args, "weights", None))


def prepare_before_launch(args) -> None:
    """``train --nproc N --cache PATH`` in the parent: the cache built or rebuilt once,
    before the ranks start (they only map it)."""
    from .training import _ranker_options

    if getattr(args, "cache", None):
        _ensure(args, _spec(args, _ranker_options(args)), False)


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
    from .data.sources import _read_run_files, pad_features
    from .training import CLIError, normalized

    with ctx.guard():
        if args.init_model:
            raise CLIError("--cache cannot continue a model (--init-model): its trees' "
                           "thresholds are not the cache's bin edges; train from the file")
        spec = _spec(args, options)
        if ctx.world_size == 1:
            _ensure(args, spec, not ctx.is_main)
        cached = load_cache(args.cache, spec=spec, context=ctx)
    tr, F = cached.data, cached.data.X.shape[1]
    files = _side_files(args)
    splits = {"valid": None, "test": None}
    if files:
        read = _read_run_files(list(files.values()), context=ctx, max_features=args.max_features,
                               zero_based=tr.zero_based if tr.zero_based is not None else "auto")
        for key, d in zip(files, read):
            with ctx.guard():
                if d.num_features > F:
                    raise CLIError(f"{files[key]}: has {d.num_features} features, the bin "
                                   f"cache {args.cache} has {F}")
            d = pad_features(d, F)
            d.zero_based = tr.zero_based
            splits[key] = normalized(d) if args.normalize else d
    p = Path(args.data)
    name = p.name if p.is_dir() else p.stem
    return tr, splits["valid"], splits["test"], name, cached.weights
