"""Ranking losses as ``torch.nn.Module``s (see :mod:`torchrankboost.losses.base`)."""

from .base import (  # noqa: F401
    BoundLoss,
    Prepared,
    RankingLoss,
    prepare_inputs,
    prepare_targets,
    ValueTerms,
    reduce_per_group,
    reduction_terms,
)
from .pointwise import SquaredErrorLoss  # noqa: F401
from .exponential import (  # noqa: F401
    AdaBoostLoss,
    ExponentialPairwiseLoss,
    f_skew,
    relative_f_skew,
    zero_skew_intercept,
)
from .pnorm import PNormPushLoss  # noqa: F401
from .margin import SmoothMarginLoss, smooth_margin  # noqa: F401
from .hinge import PairwiseHingeLoss  # noqa: F401
from .qbrank import QBRankLoss  # noqa: F401
from .listwise import ListMLELoss, ListNetLoss, RankNetLoss  # noqa: F401
from .yetirank import YetiRankLoss  # noqa: F401
from .lambda_loss import LambdaLoss  # noqa: F401
from .lambdarank_exp import LambdaRankExpLoss  # noqa: F401
