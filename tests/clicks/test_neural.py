"""Neural training on clicks: ClickLoss on (click-through rate, position) labels, and a
smoke run of ``scripts/train_neural.py --clicks`` with each debias method."""

import importlib.util
from pathlib import Path

import pytest
import torch

from torchrankboost import Groups
from torchrankboost.clicks import pbm_propensity, simulate_clicks
from torchrankboost.clicks.neural import ClickLoss
from torchrankboost.losses import ExponentialPairwiseLoss

ROOT = Path(__file__).resolve().parents[2]
F64 = torch.float64


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_neural_clicks",
                                                  ROOT / "scripts" / "train_neural.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _labels(G=20, L=8):
    g = torch.Generator().manual_seed(0)
    groups = Groups.from_sizes(torch.full((G,), L))
    y = torch.randint(0, 3, (G * L,), generator=g)
    log = simulate_clicks(y, groups, torch.randn(G * L, generator=g), n_sessions=3000,
                          top_k=5, seed=0)
    return torch.stack([log.ctr().to(F64), log.position.to(F64)], 1), groups


def test_click_loss_ipw_and_additive_gradients():
    labels, groups = _labels()
    s = torch.zeros(labels.shape[0], dtype=F64, requires_grad=True)
    ipw = ClickLoss(ExponentialPairwiseLoss(), "ipw", n_positions=5,
                    propensity=pbm_propensity(5, 1.0).tolist())
    ipw(s, labels, groups).backward()
    assert torch.isfinite(s.grad).all() and s.grad.abs().sum() > 0
    add = ClickLoss(ExponentialPairwiseLoss(), "additive", n_positions=5)
    add(s.detach(), labels, groups).backward()
    assert add.position_bias.grad is not None and add.position_bias.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="ipw needs"):
        ClickLoss(ExponentialPairwiseLoss(), "ipw", n_positions=5)


@pytest.mark.parametrize("method", ["ipw", "dla", "additive"])
def test_train_neural_clicks_smoke(script, method):
    out = script.main(["--clicks", "--debias", method, "--epochs", "2", "--synthetic-queries",
                       "60", "--sessions", "3000", "--no-tensorboard", "--quiet"])
    assert 0.0 <= out["after"] <= 1.0
    prop = [out["clicks"][f"propensity_p{k}"] for k in range(1, 11)]
    assert prop[0] == 1.0
    if method == "ipw":
        assert prop == pytest.approx(pbm_propensity(10, 1.0).tolist())
    if method == "dla":
        assert prop[-1] < 1.0  # updated from the network's scores after the first epoch
