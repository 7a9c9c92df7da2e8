"""torchrankboost: learning to rank with boosting-family losses in PyTorch.

The public API is re-exported here; see the docs site (``docs/``, MkDocs) for a tour. Each
area owns one block.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    #: the installed distribution's version (``torchrankboost --version`` prints it)
    __version__: str = version("torchrankboost")
except PackageNotFoundError:  # a checkout on PYTHONPATH that was never installed
    __version__ = "0+unknown"
del PackageNotFoundError, version

# --- foundation: groups and pairs ---
from .groups import Groups, as_groups  # noqa: F401
from .pairs import Bipartite, ExplicitPairs, Graded  # noqa: F401

# --- metrics ---
from . import metrics  # noqa: F401
from .metrics import (  # noqa: F401
    auc,
    dcg_at_k,
    mean_average_precision,
    ndcg_at_k,
    pair_error,
    positives_above_first_negative,
    positives_below_top_negative,
    precision_at_k,
    precision_at_percent,
    ranking_margin,
    reciprocal_rank,
    roc_curve,
)

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
    take_queries,
)
from .data import data_root, dataset_path, load_builtin, load_data  # noqa: F401

# --- several processes (torch.distributed) ---
from . import parallel  # noqa: F401
from .parallel import (  # noqa: F401
    DistContext,
    DistributedError,
    get_context,
    global_mean_loss,
    global_mean_scale,
    global_metric,
)
from .data import DistributedQueryBatchSampler, load_svmlight_shard, shard_queries  # noqa: F401

# --- losses ---
from .losses import BoundLoss, RankingLoss  # noqa: F401
from .losses import AdaBoostLoss  # noqa: F401
from .losses import ExponentialPairwiseLoss  # noqa: F401
from .losses import PNormPushLoss  # noqa: F401
from .losses import SmoothMarginLoss  # noqa: F401
from .losses import f_skew, relative_f_skew, zero_skew_intercept, smooth_margin  # noqa: F401
from .losses import PairwiseHingeLoss, QBRankLoss  # noqa: F401
from .losses import ListMLELoss, ListNetLoss, RankNetLoss  # noqa: F401
from .losses import YetiRankLoss  # noqa: F401
from .losses.approx import ApproxNDCGLoss, NeuralNDCGLoss  # noqa: F401
from .losses import LambdaLoss, LambdaRankExpLoss  # noqa: F401

# --- boosting ---
from . import boosting  # noqa: F401
from .boosting import (  # noqa: F401
    Booster,
    Callback,
    EarlyStopping,
    Ensemble,
    FeatureRankers,
    HistoryCallback,
    PrintCallback,
    ObliviousTree,
    RegressionTree,
    Stumps,
    line_search,
)
from .losses.pointwise import SquaredErrorLoss  # noqa: F401  (the driver's GBT loss)
from .boosting.curvature import per_query  # noqa: F401  (exact curvature for a user's loss)

# --- the ranker contract (every algorithm) ---
from .contract import (  # noqa: F401
    FitInfo,
    NumericalError,
    Ranker,
    RankingModel,
    RoundRecord,
    UnboundedDirectionError,
)

# --- algorithms ---
from .boosting.papers import (  # noqa: F401
    GBT,
    AdaBoost,
    LinearRanker,
    MatrixRankers,
    PNormPush,
    QBRank,
    RankBoost,
    RankBoostPlus,
    RankSVM,
    SmoothMarginRanking,
    with_zero_skew_intercept,
)

# --- user surface (estimator, TensorBoard logging, progress) ---
from . import registry  # noqa: F401
from .factory import load_model, make_ranker  # noqa: F401
from .tensorboard import TensorBoardLogger  # noqa: F401
from .boosting.progress import ProgressCallback  # noqa: F401
from . import export  # noqa: F401
from .export import (from_lightgbm, from_xgboost, to_lightgbm, to_onnx,  # noqa: F401
                     to_torch, to_treelite, to_xgboost)


#: loaded on first use (PEP 562): the estimator imports scikit-learn (~1 s); importing the
#: package does not import the command line
_LAZY = {"BoostedRanker": "estimator", "estimator": "estimator",
         "TrainOptions": "cli", "run_training": "cli"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return module if name == _LAZY[name] else getattr(module, name)
    raise AttributeError(f"module 'torchrankboost' has no attribute {name!r}")


# --- the compiled kernels: one warning now when the install could not build them ---
from ._native import warn_if_not_built  # noqa: E402

warn_if_not_built()
del warn_if_not_built
