"""The options of one training run (:class:`TrainOptions`), shared by Python code and the
command line.

``torchrankboost train`` builds one :class:`TrainOptions` from its flags (a field is the flag
of the same name: ``--max-leaves`` is ``max_leaves``; ``-p``/``--param``, ``--loss-param``
and ``--learner-param`` are the dicts ``params``, ``loss_params`` and ``learner_params``;
``--no-tensorboard`` is ``tensorboard=False``) and hands it to
:func:`~torchrankboost.cli.training.run_training`; Python code builds it directly::

    from torchrankboost import TrainOptions, run_training
    result = run_training(TrainOptions(loss="pnorm_push", loss_params={"p": 4}, rounds=50,
                                       tensorboard=False, output="model.safetensors"))

The options are checked when built: a value of the wrong type, an unknown ``zero_based`` or
``debias``, a seed outside ``[0, 2^63)``, a run name that could leave ``runs/``, ... raise an
:class:`OptionError`, a one-line ``ValueError`` naming the option as Python spells it
(``seed``); the command line prints the same line with its flag (``--seed``,
:meth:`OptionError.spelled`). What needs the registry, the data or the file system (the
names of algorithms and metrics, the files, the output) is checked by the run.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple, Union

from ..clicks.debias import DEBIAS

__all__ = ["TrainOptions", "OptionError", "check_run_name", "python_spelling"]

#: ``spell(name, metavar=None)``: how a message names the option ``name``
Spelling = Callable[..., str]


def python_spelling(name: str, metavar: Optional[str] = None) -> str:
    """An option as Python code names it: ``seed``, ``logdir=DIR``."""
    return name if metavar is None else f"{name}={metavar}"


class OptionError(ValueError):
    """A bad training option: one line naming the option as Python spells it
    (:func:`python_spelling`); :meth:`spelled` gives the same line with another spelling
    (the command line's flags)."""

    def __init__(self, render: Callable[[Spelling], str]):
        self.render = render
        super().__init__(render(python_spelling))

    def spelled(self, spell: Spelling) -> str:
        """The message with every option named by ``spell(name, metavar=None)``."""
        return self.render(spell)


def check_run_name(name: Optional[str]) -> None:
    """Refuse a run name that could leave ``runs/``: path separators (``/``, ``\\``),
    ``..``, a NUL byte, or an empty name (the run folder is ``runs/<name>-<timestamp>``)."""
    if name is None:
        return
    seps = {"/", "\\", os.sep, os.altsep or "/"}
    if not name.strip() or ".." in name or "\0" in name or any(c in name for c in seps):
        raise OptionError(lambda o: f"{o('name')} {name!r}: a run name is one folder name "
                                    f"under runs/ (no path separators, no '..'); use "
                                    f"{o('logdir', 'DIR')} to choose the folder")


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Everything one training run is told (the ``train`` command's flags, typed).

    Data:
        data: a built-in set (``"wdbc"``, ``"synthetic"``), a LETOR fold folder
            (``train.txt``/``vali.txt``/``test.txt``) or an SVMlight file with ``qid``.
        valid, test: validation (early stopping) and test files; ``None``: the data's own.
        weights: document weights of the training data, one per line (``None``: the
            training file's ``FILE.weight`` when it exists).
        normalize: per-query min-max feature scaling (stored in the model).
        zero_based: feature numbering of the files: ``"auto"`` (0-based iff some file of the
            run uses index 0), ``True`` or ``False`` (1-based, LETOR).
        max_features: widest feature matrix a file may imply (``None``: the readers' limit).
        position: displayed positions of the training documents (``None``: ``FILE.position``
            beside the training file, with ``debias``).
        debias: learning from clicks: ``"none"`` or a debiasing method of the registry
            (``registry.names("debias")``: ``"ipw"``, ``"em"``, ``"dla"``, ``"additive"``).
        propensity: examination probabilities of positions ``1..K`` (``debias="ipw"``).
        cache: train on this bin cache of ``data`` (built when missing, rebuilt when stale).
        label_column, qid_column, weight_column, position_column, group_weight_column: the
            columns of those roles in tables (Parquet, Feather/Arrow, CSV/TSV; ``None``: the
            role's own name — ``"label"``, ``"qid"`` required, the others used when
            present); a name given must exist.
        feature_columns: the feature columns of tables (``None``: every other numeric
            column).
    Model:
        algorithm: an algorithm's name (``None``: ``"boost"``, the generic driver).
        model: a neural ranker instead of boosting: ``"mlp"`` or ``"transformer"``
            (:class:`~torchrankboost.nn.NeuralRanker`; ``rounds`` are its epochs,
            ``learning_rate`` its optimiser's, ``loss`` its loss, ``params`` its other
            options such as ``max_docs``); ``model_params``: the network's options
            (``d_model``, ``n_layers``, ``hidden``, ``dropout``, ``norm``...).
        precision: the neural ranker's ``"fp32"``, ``"bf16"`` or ``"fp16"`` autocast.
        loss, learner: the driver's loss and weak learner (``None``: exponential, tree).
        rounds: boosting rounds (``None``: the algorithm's own).
        learning_rate, max_leaves: shrinkage; leaves per tree (``None``: the defaults).
        params, loss_params, learner_params: extra parameters of the algorithm, the loss and
            the weak learner.
        early_stopping: patience in rounds (``None``: 20 with validation data, else off;
            ``0``: off).
        metric: the validation metric (``None``: auc for 0/1 labels, else ndcg@10).
        report: the metrics of the final table (``None``: a standard set).
        seed: seed of the data split and of torch, in ``[0, 2^63)``.
    Run:
        device: torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...).
        threads: CPU threads of the fit (``None``: 1).
        logdir, name: the TensorBoard run folder (``None``: ``runs/<name>-<timestamp>``) and
            the run's name (``None``: ``<data>-<algorithm>``).
        output: where the model is saved (``None``: ``<logdir>/model.safetensors``).
        tensorboard: write event files.
        init_model: continue this saved model for ``rounds`` more rounds.
        checkpoint_every: save the fit's state every this many rounds.
        resume: resume the same run exactly from this checkpoint.
        quiet: no progress output.

    Several processes: :func:`~torchrankboost.cli.training.run_training` runs on every rank
    of an initialised process group (``torchrun``); the command's ``--nproc`` and
    ``--timeout`` (how it starts and joins its processes) are not run options.
    """

    data: str = "wdbc"
    valid: Optional[str] = None
    test: Optional[str] = None
    weights: Optional[str] = None
    normalize: bool = False
    zero_based: Union[bool, str] = "auto"
    max_features: Optional[int] = None
    position: Optional[str] = None
    debias: str = "none"
    propensity: Optional[Tuple[float, ...]] = None
    cache: Optional[str] = None
    label_column: Optional[str] = None
    qid_column: Optional[str] = None
    weight_column: Optional[str] = None
    position_column: Optional[str] = None
    group_weight_column: Optional[str] = None
    feature_columns: Optional[Tuple[str, ...]] = None
    algorithm: Optional[str] = None
    model: Optional[str] = None
    model_params: Mapping[str, Any] = field(default_factory=dict)
    precision: str = "fp32"
    loss: Optional[str] = None
    learner: Optional[str] = None
    rounds: Optional[int] = None
    learning_rate: Optional[float] = None
    max_leaves: Optional[int] = None
    params: Mapping[str, Any] = field(default_factory=dict)
    loss_params: Mapping[str, Any] = field(default_factory=dict)
    learner_params: Mapping[str, Any] = field(default_factory=dict)
    early_stopping: Optional[int] = None
    metric: Optional[str] = None
    report: Optional[Tuple[str, ...]] = None
    seed: int = 0
    device: str = "cpu"
    threads: Optional[int] = None
    logdir: Optional[str] = None
    name: Optional[str] = None
    output: Optional[str] = None
    tensorboard: bool = True
    init_model: Optional[str] = None
    checkpoint_every: Optional[int] = None
    resume: Optional[str] = None
    quiet: bool = False

    def __post_init__(self) -> None:
        for name in _PATHS:
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
        _check_types(self)
        _check_values(self)

    def columns(self) -> Any:
        """The column roles of the run's tables
        (:class:`~torchrankboost.data.readers.Columns`)."""
        from ..data.readers import Columns

        try:
            return Columns.of(label=self.label_column, qid=self.qid_column,
                              weight=self.weight_column, position=self.position_column,
                              group_weight=self.group_weight_column,
                              features=self.feature_columns)
        except ValueError as exc:
            msg = str(exc)
            raise OptionError(lambda o: msg) from None


_PATHS = ("data", "valid", "test", "weights", "position", "cache", "logdir", "output",
          "init_model", "resume")
_OPTIONAL_STRINGS = ("valid", "test", "weights", "position", "cache", "algorithm", "model", "loss",
                     "learner", "metric", "logdir", "name", "output", "init_model", "resume",
                     "label_column", "qid_column", "weight_column", "position_column",
                     "group_weight_column")
_OPTIONAL_INTS = ("max_features", "rounds", "max_leaves", "early_stopping", "checkpoint_every",
                  "threads")
_BOOLS = ("normalize", "tensorboard", "quiet")
_MAPPINGS = ("params", "loss_params", "learner_params", "model_params")


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _wrong(name: str, what: str, value) -> OptionError:
    return OptionError(lambda o: f"{o(name)} must be {what}, got {value!r}")


def _check_types(opts: TrainOptions) -> None:
    """Every field of the type it documents; mappings and sequences frozen in place."""
    for name in ("data", "device", "debias", "precision"):
        if not isinstance(getattr(opts, name), str):
            raise _wrong(name, "a string", getattr(opts, name))
    for name in _OPTIONAL_STRINGS:
        if not isinstance(getattr(opts, name), (str, type(None))):
            raise _wrong(name, "a string or None", getattr(opts, name))
    for name in _OPTIONAL_INTS:
        value = getattr(opts, name)
        if value is not None and not _is_int(value):
            raise _wrong(name, "an integer or None", value)
    for name in _BOOLS:
        if not isinstance(getattr(opts, name), bool):
            raise _wrong(name, "True or False", getattr(opts, name))
    for name in _MAPPINGS:
        value = getattr(opts, name)
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise _wrong(name, "a dict of parameters by name", value)
        object.__setattr__(opts, name, MappingProxyType(dict(value)))
    lr = opts.learning_rate
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real)):
        raise _wrong("learning_rate", "a number or None", lr)
    object.__setattr__(opts, "report", _strings("report", opts.report))
    object.__setattr__(opts, "feature_columns", _strings("feature_columns",
                                                         opts.feature_columns))
    object.__setattr__(opts, "propensity", _numbers("propensity", opts.propensity))


def _strings(name: str, value) -> Optional[Tuple[str, ...]]:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or \
            not all(isinstance(v, str) for v in value):
        raise _wrong(name, "a list of names or None", value)
    return tuple(value)


def _numbers(name: str, value) -> Optional[Tuple[float, ...]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
        raise _wrong(name, "a list of numbers or None", value)
    return tuple(float(v) for v in value)


def _check_values(opts: TrainOptions) -> None:
    """The checks that need no registry, data or file system."""
    if not (isinstance(opts.zero_based, bool) or opts.zero_based == "auto"):
        raise _wrong("zero_based", "'auto', True or False", opts.zero_based)
    if opts.debias not in DEBIAS:
        raise _wrong("debias", f"one of {', '.join(map(repr, DEBIAS))}", opts.debias)
    _check_model(opts)
    if not _is_int(opts.seed) or not 0 <= opts.seed < 2 ** 63:
        seed = opts.seed
        raise OptionError(lambda o: f"{o('seed')} must be an integer in [0, 2^63), got {seed}")
    if opts.threads is not None and opts.threads < 1:
        raise _wrong("threads", "a positive integer or None", opts.threads)
    check_run_name(opts.name)
    if opts.init_model and opts.resume:
        raise OptionError(lambda o: f"give {o('init_model')} or {o('resume')}, not both (a "
                                    f"checkpoint holds its model)")
    if opts.checkpoint_every is not None and opts.checkpoint_every < 1:
        every = opts.checkpoint_every
        raise OptionError(lambda o: f"{o('checkpoint_every')} must be >= 1, got {every}")


MODELS = ("mlp", "transformer")
PRECISIONS = ("fp32", "bf16", "fp16")


def _check_model(opts: TrainOptions) -> None:
    """A neural model: a known name, its options, nothing that belongs to boosting."""
    if opts.precision not in PRECISIONS:
        raise _wrong("precision", f"one of {', '.join(PRECISIONS)}", opts.precision)
    if opts.model is None:
        if opts.model_params or opts.precision != "fp32":
            raise OptionError(lambda o: f"{o('model_params')} and {o('precision')} go with "
                                        f"{o('model')} (a neural ranker)")
        return
    if opts.model not in MODELS:
        raise _wrong("model", f"one of {', '.join(MODELS)}", opts.model)
    for name in ("algorithm", "learner", "max_leaves", "cache"):
        if getattr(opts, name) is not None:
            raise OptionError(lambda o, n=name: f"{o(n)} goes with boosting, not with "
                                                f"{o('model')} (a neural ranker)")
    if opts.learner_params or opts.debias != "none":
        raise OptionError(lambda o: f"{o('learner_params')} and {o('debias')} go with "
                                    f"boosting, not with {o('model')} (a neural ranker)")
