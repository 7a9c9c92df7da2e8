"""Training on several processes: the one place that talks to ``torch.distributed``.

:class:`DistContext` (from :func:`get_context`) gives the collectives an algorithm needs;
in one process (no initialised process group) they are identities, so algorithms call them
unconditionally. :mod:`.shm` sums float64 CPU tensors of ranks on one host through shared
memory; :mod:`.normalise` gives the global loss normalisation and metrics of a
data-parallel run. Sharding data over ranks is :mod:`torchrankboost.data`'s.
"""

from .context import DistContext, get_context
from .errors import DistributedError
from .normalise import global_mean_loss, global_mean_scale, global_metric, metric_parts

__all__ = [
    "DistContext",
    "DistributedError",
    "get_context",
    "global_mean_loss",
    "global_mean_scale",
    "global_metric",
    "metric_parts",
]
