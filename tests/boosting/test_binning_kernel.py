"""The compiled bin coder gives torch.searchsorted's codes (NaN, infinities, signed zeros,
repeated values, uint8 and int16 codes, float32 and float64)."""

import pytest
import torch

from torchrankboost.kernels import binning
from torchrankboost.kernels import native_backend


def _reference(X, edges, missing, dtype):
    Xt = X.t().contiguous()
    ref = torch.searchsorted(edges, Xt, side="left")
    ref.masked_fill_(torch.isnan(Xt), missing)
    return ref.t().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_codes_equal_searchsorted(dtype):
    if native_backend.NativeBackend().unavailable(device=torch.device("cpu"),
                                                  data_dtype=torch.uint8, num_rows=0):
        pytest.skip("compiled kernels unavailable")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(3000, 9, generator=g, dtype=dtype)
    X[X > 1.8] = float("nan")
    X[:, 2] = X[:, 2].round()  # few distinct values: exact bins, values on the edges
    X[::7, 3], X[::11, 4], X[::13, 5] = float("inf"), -float("inf"), -0.0
    X[:, 6] = 0.0  # one constant feature
    edges = binning.bin_features(X[:1000], n_bins=16).edges
    for missing, code_dtype in ((255, torch.uint8), (300, torch.int16)):
        got = native_backend.NativeBackend().apply_bins(X, edges, missing_code=missing,
                                                        dtype=code_dtype)
        assert torch.equal(got, _reference(X, edges, missing, code_dtype))
    # apply_bins takes the compiled path and gives the same codes as before
    assert torch.equal(binning.apply_bins(X, edges), _reference(X, edges, 255, torch.uint8))


def test_the_reference_where_the_kernel_does_not_apply(monkeypatch):
    """Codes the compiled coder does not make (X not in the edges' dtype, int64 codes, NaN
    in the edges) come from the torch reference, never from the kernel."""
    def refuse():
        raise AssertionError("the compiled coder was called")

    monkeypatch.setattr(native_backend, "library", refuse)
    X = torch.randn(10, 3)
    edges = torch.full((3, 4), float("inf"))
    nat, ref = native_backend.NativeBackend(), native_backend.TorchBackend()
    nan_edges = edges.clone()
    nan_edges[0, 0] = float("nan")
    for x, e, dt in ((X.double(), edges, torch.uint8), (X, edges, torch.int64),
                     (X, nan_edges, torch.uint8)):
        got = nat.apply_bins(x, e, missing_code=255, dtype=dt)
        assert torch.equal(got, ref.apply_bins(x, e, missing_code=255, dtype=dt))
