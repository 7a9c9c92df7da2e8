"""Stagewise boosting: the driver (:class:`Booster`), the fitted model (:class:`Ensemble`),
the loss of a fit (:mod:`.objective`), step rules (:mod:`.step_rules`; the line search:
:mod:`.steps`), the autograd curvature (:mod:`.curvature`), callbacks (:mod:`.callbacks`), the evaluation / early stopping
shared by every algorithm (:mod:`.evaluation`), input conversion (:mod:`.inputs`), the weak
learners (:mod:`.learners`: regression trees, stumps, single features), and the papers' algorithms
(:mod:`.papers`: RankBoost RB-D/RB-C/coordinate, RankBoost+, AdaBoost, smooth margin ranking,
p-norm push, QBRank and GBT, RankSVM)."""

from ..contract import NumericalError, UnboundedDirectionError  # noqa: F401
from .booster import Booster  # noqa: F401
from .curvature import autograd_grad_hess, hessian_diagonal  # noqa: F401
from .callbacks import Callback, EarlyStopping, HistoryCallback, PrintCallback  # noqa: F401
from .evaluation import FitMonitor, FitState, resolve_metrics  # noqa: F401
from .inputs import fit_inputs  # noqa: F401
from .ensemble import Ensemble  # noqa: F401
from .learners import (  # noqa: F401
    FeatureModel,
    FeatureRankers,
    ObliviousTree,
    RegressionTree,
    StumpModel,
    Stumps,
    TreeModel,
    weak_model_from_state,
)
from .steps import LineSearchResult, line_search, newton_step  # noqa: F401
from .papers import (  # noqa: F401
    GBT,
    AdaBoost,
    MatrixRankers,
    PNormPush,
    QBRank,
    RankBoost,
    RankBoostPlus,
    SmoothMarginRanking,
    with_zero_skew_intercept,
)
