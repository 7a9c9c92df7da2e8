"""NeuralModel: predict by queries in chunks, files without pickle read back by load_model,
checked on the way in, feature importances."""


import numpy as np
import pytest
import torch

from torchrankboost import load_model
from torchrankboost.groups import Groups
from torchrankboost.nn import NeuralModel, build_network


def _model(arch="transformer", F=5, seed=0):
    torch.manual_seed(seed)
    X = torch.randn(40, F)
    net = build_network(arch, n_features=F)
    net.fit_normalisation(X)
    return NeuralModel(net.eval(), info={"algorithm": "neural"}), X


@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_predict_in_chunks_equals_one_batch(arch):
    model, X = _model(arch)
    g = Groups.from_sizes(torch.tensor([5, 9, 1, 12, 13]))
    whole = model.predict(X, g, batch_docs=10 ** 6)
    assert whole.dtype == torch.float32 and whole.shape == (40,)
    assert torch.allclose(model.predict(X, g, batch_docs=7), whole, atol=1e-6)
    qid = np.repeat(np.arange(5), [5, 9, 1, 12, 13])
    assert torch.allclose(model.predict(X.numpy(), qid), whole, atol=1e-6)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3], g)


@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_save_and_load_model_round_trip(tmp_path, arch):
    model, X = _model(arch)
    path = tmp_path / "m.safetensors"
    model.save(path)
    back = load_model(path)
    assert isinstance(back, NeuralModel) and back.architecture == arch
    assert back.network.config() == model.network.config()
    g = Groups.from_sizes(torch.tensor([20, 20]))
    assert torch.equal(back.predict(X, g), model.predict(X, g))


def test_load_refuses_a_tampered_or_inconsistent_file(tmp_path):
    model, _ = _model("mlp")
    path = tmp_path / "m.safetensors"
    model.save(path)
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # a flipped weight bit: the checksum fails
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError):
        load_model(bad)
    with pytest.raises(ValueError, match="features"):
        load_model(path, max_features=2)


def test_feature_importance():
    model, _ = _model("mlp")
    imp = model.feature_importance()
    assert imp.shape == (5,) and (imp > 0).all()
    with pytest.raises(ValueError, match="gain"):
        model.feature_importance("split")
