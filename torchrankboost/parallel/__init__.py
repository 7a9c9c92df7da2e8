"""Training on several processes: the one place that talks to ``torch.distributed``.

:class:`DistContext` (from :func:`get_context`) gives the collectives an algorithm needs;
in one process (no initialised process group) they are identities, so algorithms call them
unconditionally. :class:`FitComm` (:mod:`.fit`) gives an algorithm's fit its operations
(sum, max, min, log-sum-exp, gather over the ranks, each carrying the failure flag of
:mod:`.failure`; identities in one process) and its order-free sums
(:mod:`torchrankboost.exact`: the same float for any order of the queries and any split
over the ranks). All-reduces travel through a
:class:`~.transport.Transport`: ``torch.distributed``, or for float64 CPU sums of the ranks
of one host the shared memory of :mod:`.shm`. :mod:`.normalise` gives the global loss
normalisation and metrics of a data-parallel run; :mod:`.checks` what a data-parallel fit
takes (learners declare ``supports_data_parallel``). Sharding data over ranks is
:mod:`torchrankboost.data`'s.
"""

from .checks import check_data_parallel, supports_data_parallel
from .context import DistContext, get_context
from .errors import DistributedError
from .fit import FitComm
from .normalise import (METRIC_PARTS, global_mean_loss, global_mean_scale, global_metric,
                        metric_parts, metric_value)
from .transport import TorchTransport, Transport

__all__ = [
    "DistContext",
    "DistributedError",
    "FitComm",
    "TorchTransport",
    "Transport",
    "check_data_parallel",
    "get_context",
    "global_mean_loss",
    "global_mean_scale",
    "global_metric",
    "metric_parts",
    "metric_value",
    "METRIC_PARTS",
    "supports_data_parallel",
]
