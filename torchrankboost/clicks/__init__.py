"""Learning to rank from clicks: click simulation (:mod:`.simulate`), position-debiased losses
(:mod:`.debias`; the methods are named in the registry, ``registry.names("debias")``, and
built by name with :func:`make_debias`) and their minibatch form for neural training
(:mod:`.neural`)."""

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
    NO_DEBIAS,
    AdditivePositionLoss,
    DualLearningLoss,
    IPWLoss,
    PositionDebiasLoss,
    RegressionEMLoss,
    make_debias,
)
