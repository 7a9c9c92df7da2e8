"""The compiled all-trees prediction pass gives the per-round loop's scores bit for bit."""

import pytest
import torch

from torchrankboost import Booster, Ensemble, RegressionTree
from torchrankboost.kernels import native_backend
from torchrankboost.data.synthetic import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss


def _per_round(model, X, T=None):
    T = model.n_rounds if T is None else T
    out = torch.full((X.shape[0],), model.base_score, dtype=torch.float64)
    for t in range(T):
        out += model.weights[t] * model.models[t].predict(X).to(torch.float64)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pass_equals_the_per_round_loop(dtype):
    pytest.importorskip("ctypes")
    if native_backend.NativeBackend().unavailable(device=torch.device("cpu"),
                                                  data_dtype=torch.float32, num_rows=1):
        pytest.skip("compiled kernels unavailable")
    d = make_letor(40, 15, 6, seed=1, dtype=dtype)
    X = d.X.clone()
    X[::3, 2] = float("nan")
    model = Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=7), n_rounds=8,
                    verbose=False).fit(X, d.labels, d.groups)
    for Xq in (X, X.double(), X.float()):
        assert torch.equal(model.predict(Xq), _per_round(model, Xq))
        assert torch.equal(model.predict(Xq, n_rounds=3), _per_round(model, Xq, 3))
        assert torch.equal(model.predict(Xq, batch_size=7), _per_round(model, Xq))
    # a tree changed in place is repacked, not served stale
    model.models[0].leaf_value.mul_(2.0)
    assert torch.equal(model.predict(X), _per_round(model, X))
    # a mix of thresholds in float32 and float64 (an imported model compares in float64)
    m64 = model.models[1]
    model.models[1] = type(m64)(**{k: getattr(m64, k) for k in m64._tensor_names[:2]},
                                threshold=m64.threshold.double(),
                                **{k: getattr(m64, k) for k in m64._tensor_names[3:]},
                                depth=m64.depth)
    both = Ensemble(model.models, model.weights, base_score=0.25, num_features=X.shape[1])
    assert torch.equal(both.predict(X.float()), _per_round(both, X.float()))
