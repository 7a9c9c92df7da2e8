"""The ``torchrankboost`` command (also ``python -m torchrankboost``).

Sub-commands::

    torchrankboost train     [--data wdbc|synthetic|FOLD_DIR|FILE] [--valid FILE] [--test FILE]
                             [--algorithm NAME | --loss NAME --learner NAME] [--rounds N] ...
    torchrankboost evaluate  MODEL FILE [--metric NAME ...]
    torchrankboost predict   MODEL FILE [--output OUT]
    torchrankboost list      [losses|algorithms|learners|metrics|debias]
    torchrankboost export    MODEL --format {lightgbm,xgboost,onnx,treelite} -o PATH
    torchrankboost bin       DATA -o data.trbin   (then: train --data DATA --cache data.trbin)
    torchrankboost plot      MODEL_OR_RUN_FOLDER [-o DIR]   (PNG files; needs matplotlib)

``torchrankboost train`` with no arguments trains the main job on built-in data (wdbc,
bipartite) in seconds, logs to ``runs/<name>-<timestamp>`` and prints how to open
TensorBoard. Errors in the input (unknown names, missing or malformed files, bad parameters)
print one line ``torchrankboost: error: ...`` on stderr and exit with status 2; a run that
fails numerically (:class:`~torchrankboost.contract.NumericalError`: a NaN gradient, an
unbounded step with ``-p on_unbounded=raise``...) prints one such line and exits with status
1; no traceback.

**Several processes.** ``torchrun --standalone --nproc-per-node N -m torchrankboost train ...``
(or ``torchrankboost train --nproc N ...``, which checks its input, then starts the N
processes itself, forwards SIGINT/SIGTERM to them and waits for them) trains one
model data-parallel: each process initialises the process group (gloo on CPU, NCCL with
``--device cuda``, one GPU per ``LOCAL_RANK``), holds a shard of whole queries of every split
(built-in data: the split of one process cut by :meth:`~torchrankboost.data.RankingData.shard`;
files: :func:`~torchrankboost.data.load_svmlight_shard`, each rank parsing its own byte
range) and fits with the algorithm's data-parallel path (``boost``, ``qbrank``, ``gbt``,
``rankboost``); metrics are combined over the ranks; rank 0 alone prints, writes the
TensorBoard events and saves the model — the model of one process on the whole data. A
failure on one rank stops every rank with one line naming it, from rank 0 (status 1; 2 for
bad input). ``--timeout`` (default 60 s) bounds every wait for the other ranks.

**From Python.** The training run is :func:`run_training` with a :class:`TrainOptions` (the
``train`` flags, typed and checked; ``torchrankboost.TrainOptions`` and
``torchrankboost.run_training`` are the same objects)::

    from torchrankboost.cli import TrainOptions, run_training
    result = run_training(TrainOptions(data="wdbc", rounds=20, tensorboard=False,
                                       output="model.safetensors"))
    print(result.rows["test"]["auc"], result.out_path)

The package: :mod:`.main` (the parser, the exit statuses, ``list``), :mod:`.train` (the
``train`` command: its flags, the options built from them, the ``--nproc`` parent),
:mod:`.options` (:class:`TrainOptions`), :mod:`.training` (the run), :mod:`.launch_checks`
(what the ``--nproc`` parent checks), :mod:`.scoring` (``evaluate``, ``predict``),
:mod:`.export` (``export``), :mod:`.bin` (``bin``), :mod:`.plot` (``plot``),
:mod:`.config` (``train --config``, the options saved beside the model), :mod:`.cached`
(``train --cache``),
:mod:`.clicks` (``--position``, ``--debias``, ``--propensity``), :mod:`.inputs` (what the
commands share).
"""

from .inputs import CLIError, parse_params
from .main import build_parser, main
from .options import OptionError, TrainOptions
from .training import TrainResult, run_training

__all__ = ["main", "build_parser", "parse_params", "CLIError", "TrainOptions", "OptionError",
           "TrainResult", "run_training"]
