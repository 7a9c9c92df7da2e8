"""torchrankboost: learning to rank with boosting-family losses in PyTorch.

The public API is re-exported here; see README.md for a tour. Each area owns one block.
"""

__version__ = "0.1.0"

# --- foundation: groups and pairs ---
from .groups import Groups, as_groups  # noqa: F401
from .pairs import Bipartite, ExplicitPairs, Graded  # noqa: F401

# --- metrics ---

# --- data ---
from . import data  # noqa: F401
from .data import (  # noqa: F401
    QueryBatchSampler,
    QueryDataset,
    RankingData,
    collate_queries,
    iterate_query_batches,
    load_letor_fold,
    load_svmlight,
    make_letor,
    normalize_per_query,
)

# --- losses ---
from .losses import RankingLoss  # noqa: F401

# --- boosting ---

# --- algorithms ---

# --- user surface (estimator, logging) ---
