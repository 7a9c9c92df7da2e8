"""Ensemble: prediction paths, staged prediction, truncation, importance, save/load; a weak
model's failing summary is announced, not swallowed."""

import json

import pytest
import torch

from torchrankboost import Groups
from torchrankboost.boosting import (
    Booster,
    Ensemble,
    FeatureRankers,
    RegressionTree,
    Stumps,
)
from torchrankboost.losses import ExponentialPairwiseLoss, SquaredErrorLoss

F64 = torch.float64


def _fit(learner, device="cpu", n_rounds=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes([10] * 20)
    n = 200
    X = torch.randn(n, 5, generator=gen)
    X[::17, 2] = float("nan")  # missing values travel through save/load too
    y = torch.bucketize(X[:, 0].nan_to_num() + 0.5 * torch.randn(n, generator=gen),
                        torch.tensor([-0.5, 0.5])).to(F64)
    b = Booster(ExponentialPairwiseLoss(), learner, n_rounds=n_rounds, learning_rate=0.5,
                seed=seed)
    ens = b.fit(X.to(device), y.to(device), g.to(device))
    return ens, X.to(device), y.to(device), g.to(device)


LEARNERS = [
    lambda: RegressionTree(max_leaves=6, min_samples_leaf=3),
    lambda: Stumps(criterion="correlation"),
    lambda: FeatureRankers(),
]


@pytest.mark.filterwarnings("ignore:round .* decreases without bound")  # stumps: RB-D's ε⁻ = 0
@pytest.mark.parametrize("make", LEARNERS)
def test_save_load_round_trip_bit_identical(tmp_path, make):
    ens, X, y, g = _fit(make())
    assert ens.n_rounds > 0
    path = tmp_path / "model.safetensors"
    ens.save(path)
    back = Ensemble.load(path)
    assert back.n_rounds == ens.n_rounds and back.num_features == ens.num_features
    assert back.weights == ens.weights and back.base_score == ens.base_score
    assert torch.equal(back.predict(X), ens.predict(X))
    assert torch.equal(back.feature_importance("count"), ens.feature_importance("count"))
    assert back.info["evals_result"] == ens.info["evals_result"]
    # the file holds tensors + JSON only (no pickle)
    raw = path.read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + header_len])
    assert json.loads(header["__metadata__"]["ensemble"])["format"] == "torchrankboost.Ensemble"
    assert b"pickle" not in raw and not raw[8 + header_len:].startswith(b"\x80")


@pytest.mark.filterwarnings("ignore:round .* decreases without bound")
@pytest.mark.parametrize("make,new,old", [(LEARNERS[0], "TreeModel", "RegressionTree"),
                                          (LEARNERS[1], "StumpModel", "Stump"),
                                          (LEARNERS[2], "FeatureModel", "FeatureRanker")])
def test_weak_model_type_is_the_model_class_name(tmp_path, make, new, old):
    """A saved weak model's type is its model class name; another type name (such as the
    learner's name) is refused with a one-line error naming it."""
    from safetensors.torch import load_file, save_file

    ens, X, _, _ = _fit(make())
    path = tmp_path / "new.safetensors"
    ens.save(path)
    tensors, meta = ens.state()
    assert {m["type"] for m in meta["models"]} == {new}
    assert torch.equal(Ensemble.load(path).predict(X), ens.predict(X))
    for m in meta["models"]:
        m["type"] = old
    meta["version"] = 1  # no checksum to update: the file loads with a warning, then fails
    other = tmp_path / "other.safetensors"
    save_file(load_file(str(path)), str(other), metadata={"ensemble": json.dumps(meta)})
    with pytest.warns(UserWarning, match="without a checksum"):
        with pytest.raises(ValueError, match=f"unknown weak model type '{old}'") as e:
            Ensemble.load(other)
    assert "\n" not in str(e.value)


def test_predict_paths_agree(device):
    ens, X, y, g = _fit(RegressionTree(max_leaves=6, min_samples_leaf=3), device=device)
    full = ens.predict(X)
    assert full.dtype == F64 and full.shape == (X.shape[0],) and full.device == X.device
    assert torch.equal(ens.predict(X, batch_size=7), full)
    assert torch.equal(ens.predict(X, batch_size=None), full)
    staged = list(ens.staged_predict(X))
    assert len(staged) == ens.n_rounds
    assert torch.equal(staged[-1], full)
    for t in (0, 1, 3):
        assert torch.equal(ens.predict(X, n_rounds=t), ens.truncate(t).predict(X))
    torch.testing.assert_close(staged[2], ens.predict(X, n_rounds=3))
    assert torch.equal(ens.predict(X, n_rounds=0), torch.full_like(full, ens.base_score))
    # the numpy path
    assert torch.equal(ens.predict(X.cpu().numpy()).to(device), full)


def test_truncate_and_to():
    ens, X, y, g = _fit(RegressionTree(max_leaves=6, min_samples_leaf=3))
    t = ens.truncate(2)
    assert t.n_rounds == 2 and ens.n_rounds == 6  # a copy, the original is untouched
    with pytest.raises(ValueError):
        ens.truncate(7)
    assert ens.to("cpu") is ens


def test_feature_importance():
    ens, X, y, g = _fit(RegressionTree(max_leaves=6, min_samples_leaf=3), n_rounds=8)
    gain = ens.feature_importance("gain")
    count = ens.feature_importance("count")
    assert gain.shape == (5,) and gain.dtype == F64 and count.dtype == torch.int64
    assert int(count.sum()) == sum(int(m.feature_count(5).sum()) for m in ens.models)
    assert int(gain.argmax()) == 0  # the informative feature
    with pytest.raises(ValueError, match="kind"):
        ens.feature_importance("split")


def test_prediction_errors_and_bad_files(tmp_path):
    ens, X, y, g = _fit(RegressionTree(max_leaves=4, min_samples_leaf=3), n_rounds=2)
    with pytest.raises(ValueError, match="features"):
        ens.predict(X[:, :3])
    with pytest.raises(ValueError, match="2-D"):
        ens.predict(X[0])
    from safetensors.torch import save_file

    p = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(p))
    with pytest.raises(ValueError, match="not a torchrankboost"):
        Ensemble.load(p)


def test_empty_ensemble_and_base_score(tmp_path):
    X = torch.randn(30, 3)
    y = torch.randn(30, dtype=F64) + 5.0
    ens = Booster(SquaredErrorLoss(), RegressionTree(), n_rounds=0).fit(X, y)
    assert ens.n_rounds == 0
    assert ens.base_score == pytest.approx(float(y.mean()))
    ens.save(tmp_path / "e.safetensors")
    back = Ensemble.load(tmp_path / "e.safetensors")
    assert torch.equal(back.predict(X), ens.predict(X))


def test_a_failing_weak_model_summary_is_announced_not_swallowed():
    from torchrankboost.boosting.ensemble import weak_summary as _summary

    class Odd:
        def summary(self):
            raise RuntimeError("no summary today")

        def state(self):
            return {}, {"type": "Odd", "k": 1}

    with pytest.warns(RuntimeWarning, match="Odd.summary\\(\\) failed with RuntimeError"):
        assert _summary(Odd()) == {"type": "Odd", "k": 1}
