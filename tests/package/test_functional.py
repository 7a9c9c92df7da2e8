"""Every exported loss has a functional twin (``torchrankboost.functional``) that gives the
module's value, options and call arguments included."""

import inspect

import pytest
import torch

import torchrankboost.losses as L
from torchrankboost import functional as TF
from torchrankboost import registry
from torchrankboost.groups import Groups

OPTIONS = {"PNormPushLoss": {"p": 3.0, "log": True}, "SmoothMarginLoss": {"scale": 2.5},
           "ExponentialPairwiseLoss": {"normalize": True}, "AdaBoostLoss": {"threshold": 0.5},
           "PairwiseHingeLoss": {"margin": 0.5, "squared": True},
           "QBRankLoss": {"w": 0.3, "tau": "grade_difference"}, "ListNetLoss": {},
           "RankNetLoss": {"sigma": 2.0}}


def _exported_losses():
    return sorted(name for name, obj in vars(L).items()
                  if inspect.isclass(obj) and issubclass(obj, L.RankingLoss)
                  and obj is not L.RankingLoss)


def test_every_exported_and_registered_loss_has_a_twin():
    registered = {e.target.rpartition(":")[2] for e in registry.entries("loss")}
    assert set(_exported_losses()) | registered <= set(TF.TWINS)
    for name, fn in TF.TWINS.items():
        assert getattr(TF, fn.__name__) is fn


@pytest.mark.parametrize("name", sorted(TF.TWINS))
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_twin_equals_module(name, reduction):
    g = Groups.from_sizes([4, 3, 5])
    gen = torch.Generator().manual_seed(1)
    s = torch.randn(12, generator=gen, dtype=torch.float64)
    y = torch.tensor([0., 1, 2, 0, 1, 1, 0, 3, 0, 1, 2, 0])
    w = torch.rand(12, generator=gen, dtype=torch.float64) + 0.5
    opts = dict(OPTIONS.get(name, {}), reduction=reduction)
    import torchrankboost

    module = (getattr(L, name, None) or getattr(torchrankboost, name))(**opts)
    listwise = ("ListNetLoss", "ListMLELoss", "ApproxNDCGLoss", "NeuralNDCGLoss")
    call = {} if name in listwise else {"weights": w}  # listwise
    torch.testing.assert_close(TF.TWINS[name](s, y, g, **call, **opts), module(s, y, g, **call))
