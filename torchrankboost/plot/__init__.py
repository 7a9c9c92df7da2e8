"""Plots of what users look at, drawn with matplotlib (``pip install 'torchrankboost[plots]'``
or ``pip install matplotlib``; the rest of the library never needs it):

* :func:`plot_importance`: the features' importance in a fitted model (total split gain,
  or the number of splits), largest first;
* :func:`plot_metric`: a metric's curve per round, one line per data set, from a fit's
  history (``evals_result_`` of an algorithm or a ``BoostedRanker``, a saved model that
  kept it, ``history_``) or a run folder's TensorBoard events;
* :func:`plot_metrics`: every metric of a fit or run folder, one panel each;
* :func:`plot_tree`: one tree of an ensemble, its splits and leaf values.

Each draws on the ``ax`` it is given (a new figure's otherwise) and returns it. The
``torchrankboost plot`` command writes them as PNG files from a saved model or a run
folder.
"""

from .charts import importances, metric_curves, plot_importance, plot_metric, plot_metrics, \
    require_matplotlib
from .tree import plot_tree, tree_layout

__all__ = ["plot_importance", "plot_metric", "plot_metrics", "plot_tree", "metric_curves",
           "tree_layout", "importances", "require_matplotlib"]
