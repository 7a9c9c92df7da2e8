"""The ``bin`` command: ``torchrankboost bin DATA -o data.trbin`` reads a training file in
any supported format (SVMlight/LETOR, Parquet, Feather/Arrow, CSV/TSV, with the column-role
flags of ``train`` for tables), bins it with the tree learner's binning (``--max-bins``, ``--learner-param
n_bins=/bin_sample_count=/seed=`` as ``train`` takes them) and the reading options of
``train`` (``--zero-based``, ``--max-features``, ``--normalize``, ``--weights``), and stores
it for ``train --cache`` (:mod:`torchrankboost.data.cache`, :mod:`torchrankboost.cli.cached`).
"""

from __future__ import annotations

import sys

from ..data.cache import bin_spec_of, build_cache, is_table_file, training_file
from .inputs import (COLUMNS_HELP, PROG, ZERO_BASED, add_column_options, check_output,
                     column_roles, parse_params)

__all__ = ["add_commands", "cmd_bin"]


def add_commands(sub) -> None:
    """The ``bin`` sub-command's parser."""
    p = sub.add_parser("bin", help="bin a training file once into a memory-mapped cache",
                       description="Read a training file (SVMlight/LETOR, Parquet, "
                                   "Feather/Arrow, CSV/TSV), bin its features as the tree "
                                   "learner does and store them (safetensors) for "
                                   "`train --cache`. " + COLUMNS_HELP + ".")
    p.set_defaults(handler=cmd_bin)
    p.add_argument("data", help="training file (or a fold folder's train file)")
    p.add_argument("--output", "-o", required=True, metavar="PATH", help="the cache file")
    p.add_argument("--max-bins", type=int, default=None, metavar="N",
                   help="value bins per feature (the tree learner's n_bins; default 255; "
                        "above 255 the codes take 2 bytes)")
    p.add_argument("--learner-param", action="append", default=[], metavar="KEY=VALUE",
                   help="tree learner parameters as given to train (n_bins, "
                        "bin_sample_count, seed decide the bins)")
    p.add_argument("--weights", metavar="FILE", help="document weights (default: FILE.weight)")
    p.add_argument("--normalize", action="store_true", help="per-query min-max scaling first")
    p.add_argument("--zero-based", choices=tuple(ZERO_BASED), default="auto",
                   help="feature numbering of the file (as train's)")
    p.add_argument("--max-features", type=int, default=None, metavar="N",
                   help="widest feature matrix the file may imply")
    add_column_options(p)
    p.add_argument("--quiet", "-q", action="store_true")


def cmd_bin(args) -> int:
    """``bin``: build the cache (atomically); one line of what was written."""
    import time

    from ..boosting.learners import RegressionTree

    params = parse_params(args.learner_param, "--learner-param")
    if args.max_bins is not None:
        params["n_bins"] = args.max_bins
    train = training_file(args.data)
    columns = column_roles(args) if is_table_file(train) else None
    spec = bin_spec_of(RegressionTree(**params), zero_based=ZERO_BASED[args.zero_based],
                       max_features=args.max_features, normalize=bool(args.normalize),
                       columns=columns)
    check_output(args.output, [train], "--output")
    t0 = time.perf_counter()
    path = build_cache(args.output, args.data, spec=spec, weights=args.weights)
    if not args.quiet:
        print(f"{PROG}: binned {args.data} into {path} ({path.stat().st_size / 2**20:.1f} MiB, "
              f"{time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0
