"""TensorBoard logging for boosting runs and neural training loops.

:class:`TensorBoardLogger` writes TensorBoard event files with
:class:`torch.utils.tensorboard.SummaryWriter`. It is used two ways:

1. as a callback of any algorithm (``ranker.fit(..., callbacks=[logger])``): it implements
   the contract's hooks ``on_fit_start(ranker, info: FitInfo)``,
   ``on_round_end(ranker, record: RoundRecord)`` and ``on_fit_end(ranker, model)`` (see
   :mod:`torchrankboost.contract`) and reads only what they are given;
2. from any training loop, through explicit methods::

       logger = TensorBoardLogger("runs/mlp")
       for step in range(n_steps):
           ...
           logger.log_step(step, {"metrics/loss_per_query": loss.item(),
                                  "metrics/valid/ndcg@10": ndcg})
       logger.log_histograms(step, {"scores/valid": scores})
       logger.log_curves(step, labels, scores, tag="test")
       logger.log_hparams({"learning_rate": 1e-3, "loss": "exponential"},
                          {"test/ndcg@10": 0.48})
       logger.close()

What is written (TensorBoard's Time Series tab orders card groups by name, so the curves
that matter come first):

* ``metrics/`` — the curves that matter, per round: the training objective divided by the
  number of training queries (``metrics/loss_per_query``: comparable across data sizes and
  runs, unlike the sum), the time per round (``metrics/seconds_per_round``), the step size
  (``metrics/step_size``) and every evaluation metric (``metrics/valid/ndcg@10``,
  ``metrics/valid/map``...; cards are ordered by name within a group);
* ``train/`` — the evaluation metrics on the training set (``eval_train``);
* ``round/`` — the algorithm's diagnostics (``round/weight``, ``round/grad_norm``,
  ``round/curvature_norm``, ``round/line_search_n_evals``, ``round/f_skew``,
  ``round/margin``, ``round/seconds_learner``, the loss on an evaluation set
  ``round/valid_loss``...);
* histograms ``scores/...`` and ``weak_model/...`` (the weak model's leaf values), every
  ``histogram_every`` rounds and at the last round;
* ``summary/`` — the final results: ``summary/<split>/<metric>`` (one value each, the HParams
  metrics), a text summary ``summary/final_metrics`` (Text tab) and a figure
  ``summary/<split>_roc_pr`` (the ROC curve with its AUC and the precision-recall curve with
  its average precision, with axes and labels; drawn with Pillow, no matplotlib needed),
  plus TensorBoard's interactive PR curve (PR Curves tab);
* ``hparams``: the run's session — the hyper-parameters a person tunes (algorithm as named,
  loss, learner and its settings as separate columns, learning rate, rounds, seed, data) —
  written into the run directory so that the HParams tab links to the curves. The columns
  (the *experiment*) are written once for the whole log folder, in the folder above the run
  (``runs/``; ``experiment_dir``): the union of every hyper-parameter the library knows
  (every algorithm's, loss's and learner's ``get_params()`` names) and of the runs' own, with
  the metric columns (NDCG@1/5/10, MAP, AUC, pair error on test, valid and train, rounds
  used, best round, seconds, and the runs' others); see :mod:`.experiment`.
  TensorBoard shows ``algorithm``, ``data``, ``learner``, ``learning_rate`` and ``loss``
  without a click.

Every scalar tag carries a one-line description (the chart's tooltip).

Event files go to ``logdir`` (default ``runs/<name>-<timestamp>``); view them with
``tensorboard --logdir runs``.

The package: :mod:`.logger` (:class:`TensorBoardLogger`, :func:`default_logdir`),
:mod:`.tags` (the tag layout and descriptions), :mod:`.hparams` (the HParams session of a
run), :mod:`.experiment` (the one experiment definition of a log folder), :mod:`.figures`
(ROC / precision-recall curves and their figure).
"""

from .figures import render_roc_image, roc_curve_points
from .hparams import info_hparams
from .logger import TensorBoardLogger, default_logdir
from .tags import flatten, record_items, round_tag

__all__ = ["TensorBoardLogger", "default_logdir", "roc_curve_points", "render_roc_image",
           "round_tag", "record_items", "info_hparams", "flatten"]
