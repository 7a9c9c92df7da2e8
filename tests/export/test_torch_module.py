"""``to_torch``: a fitted tree / stump ensemble as a plain torch module (TorchScript,
torch.export with a dynamic batch, CUDA) scoring exactly as ``Ensemble.predict``."""

from __future__ import annotations

import pytest
import torch

from torchrankboost.boosting.ensemble import Ensemble
from torchrankboost.data import make_letor
from torchrankboost.export.torch_module import to_torch
from torchrankboost.factory import make_ranker

TOL = 1e-9


def _data(dtype=torch.float32):
    X, y, g = make_letor(40, 15, 10, seed=3, dtype=dtype)
    X = X.clone()
    X[::7, 2] = float("nan")  # missing values in some features
    X[1::5, 5] = float("nan")
    return X, y, g


@pytest.fixture(scope="module")
def tree_model():
    X, y, g = _data()
    return make_ranker("boost", loss="exponential", n_rounds=20).fit(X, y, g), X


@pytest.fixture(scope="module")
def stump_model():
    X, y, g = _data(torch.float64)
    return make_ranker("boost", learner="stump", n_rounds=15).fit(X, y, g), X


def _max_diff(a, b) -> float:
    return (a - b).abs().max().item()


@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_to_torch_scores_equal_predict_with_missing_values(which, request):
    model, X = request.getfixturevalue(which)
    module = to_torch(model)
    for Xin in (X, X.double(), X.float()):
        expected = model.predict(Xin)
        got = module(Xin)
        assert got.dtype == torch.float64 and got.shape == expected.shape
        assert _max_diff(got, expected) <= TOL
        assert torch.equal(got, expected)  # bit for bit on CPU


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_scripted_and_exported_modules_equal_predict(which, request):
    model, X = request.getfixturevalue(which)
    module = to_torch(model)
    scripted = torch.jit.script(module)
    assert torch.equal(scripted(X), model.predict(X))
    batch = torch.export.Dim("batch")
    program = torch.export.export(module, (X[:37],), dynamic_shapes=({0: batch},))
    for n in (5, 101):
        assert torch.equal(program.module()(X[:n]), model.predict(X[:n]))


def test_leaf_indices_pick_each_round_contribution(tree_model):
    model, X = tree_model
    module = to_torch(model)
    leaf = module.leaf_indices(X)
    assert leaf.shape == (X.shape[0], model.n_rounds) and leaf.dtype == torch.int64
    for t in (0, 7, 19):
        want = model.weights[t] * model.models[t].predict(X).double()
        assert torch.equal(module.leaf_value[t][leaf[:, t]], want)


def test_empty_ensemble_scores_its_base_score(tree_model):
    model, X = tree_model
    empty = Ensemble([], [], base_score=0.25, num_features=model.num_features)
    assert torch.equal(to_torch(empty)(X), empty.predict(X))


def test_unconvertible_weak_model_raises_one_line_value_error(tree_model):
    model, _ = tree_model

    class Odd:
        pass

    odd = Ensemble([*model.models[:2], Odd()], [1.0, 1.0, 1.0], num_features=model.num_features)
    with pytest.raises(ValueError, match=r"^to_torch: cannot convert weak model type Odd") as exc:
        to_torch(odd)
    assert "\n" not in str(exc.value)


@pytest.mark.cuda
@pytest.mark.parametrize("which", ["tree_model", "stump_model"])
def test_to_torch_runs_on_cuda(which, request):
    if not torch.cuda.is_available():
        pytest.skip("CUDA not available")
    model, X = request.getfixturevalue(which)
    expected = model.predict(X)
    module = to_torch(model).to("cuda")
    got = module(X.cuda())
    assert got.device.type == "cuda"
    assert _max_diff(got.cpu(), expected) <= TOL
    on_gpu = Ensemble([m.to("cuda") for m in model.models], model.weights,
                      base_score=model.base_score, num_features=model.num_features)
    assert _max_diff(got, on_gpu.predict(X.cuda())) <= TOL
    program = torch.export.export(module, (X[:37].cuda(),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert _max_diff(program.module()(X[:101].cuda()).cpu(), expected[:101]) <= TOL
