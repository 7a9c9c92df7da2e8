"""Learning to rank from clicks: click simulation (:mod:`.simulate`) and position-debiased
losses (:mod:`.debias`)."""

from .simulate import (  # noqa: F401
    MODELS,
    ClickLog,
    logged_positions,
    pbm_propensity,
    relevance_click_prob,
    simulate_clicks,
)
from .debias import (  # noqa: F401
    DEBIAS,
    AdditivePositionLoss,
    DualLearningLoss,
    IPWLoss,
    PositionDebiasLoss,
    RegressionEMLoss,
    make_debias,
)
