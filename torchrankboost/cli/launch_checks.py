"""What ``torchrankboost train --nproc N`` checks in the parent, before any rank starts.

Every check that needs no data runs once, here, so that an input error is one line from one
process with status 2 (not one line per rank after the ranks started): the options
(:class:`~torchrankboost.cli.options.TrainOptions`, built before), the names
(:func:`~torchrankboost.cli.training.ranker_options`), the device, the algorithm's and the
learner's data-parallel fit, the parameters (the ranker is built), the ``--timeout``, that
the data source and the ``--valid``/``--test`` files exist, and the output. What only
reading the data can tell (a malformed line) the ranks find; rank 0 reports it in one line,
with status 2 as well.
"""

from __future__ import annotations

from ..parallel import supports_data_parallel
from ..parallel.timeouts import set_wait_timeout
from .inputs import CLIError, check_output, device
from .options import TrainOptions
from .training import DISTRIBUTED_ALGORITHMS, input_paths, ranker_options, run_ranker

__all__ = ["check_before_launch"]


def _check_data_paths(options: TrainOptions) -> None:
    from ..data.sources import BUILTIN, looked_in, resolve_data_path

    data = str(options.data)
    if data.strip().lower() not in BUILTIN and not resolve_data_path(data).exists():
        raise FileNotFoundError(f"data not found: {data!r} is neither a built-in data set "
                                f"({', '.join(BUILTIN)}) nor an existing file or LETOR fold "
                                f"folder (looked in {looked_in(data)})")
    for opt, path in (("--valid", options.valid), ("--test", options.test)):
        if path and not resolve_data_path(path).is_file():
            raise CLIError(f"{opt} {path}: file not found (looked in {looked_in(path)})")


def _check_weights(options: TrainOptions, nproc: int, algorithm: str) -> None:
    """RankBoost weighs its pairs by listing them (one process's documents): no document
    weights (``--weights``, ``FILE.weight``) on several processes."""
    if nproc < 2 or algorithm != "rankboost":
        return
    from ..data.sources import resolve_data_path
    from ..data.svmlight import weights_path

    w = weights_path(resolve_data_path(str(options.data)), options.weights)
    if w is not None:
        raise CLIError(f"--nproc {nproc}: algorithm 'rankboost' takes no document weights "
                       f"({w}) on several processes (its weighted pairs are listed per "
                       f"process); use one process, or -a boost")


def check_before_launch(options: TrainOptions, *, nproc: int, timeout: float) -> None:
    """Raise :class:`~torchrankboost.cli.inputs.CLIError` (or ``ValueError`` /
    ``FileNotFoundError``, all status 2) for what would stop every rank of ``train --nproc
    nproc --timeout timeout``."""
    if nproc < 1:
        raise CLIError(f"--nproc must be a positive integer, got {nproc}")
    try:
        set_wait_timeout(timeout)  # the parent's rendezvous store waits as long
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    device(options.device)
    kwargs = ranker_options(options)
    algorithm = kwargs["algorithm"]
    if nproc > 1 and algorithm not in DISTRIBUTED_ALGORITHMS:
        raise CLIError(f"--nproc {nproc}: algorithm {algorithm!r} has no data-parallel fit; "
                       f"use one of {', '.join(DISTRIBUTED_ALGORITHMS)}")
    _check_weights(options, nproc, algorithm)
    ranker = run_ranker(kwargs)
    learner = getattr(ranker, "learner", None)
    if nproc > 1 and learner is not None and not supports_data_parallel(learner):
        raise CLIError(f"--nproc {nproc}: learner {options.learner!r} has no "
                       f"data-parallel fit; use --learner tree (or the algorithm's default)")
    _check_data_paths(options)
    if options.output:
        check_output(options.output, input_paths(options))
