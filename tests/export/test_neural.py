"""Neural rankers where models are served: ONNX Runtime and torch.export score padded
queries as predict does (within 1e-5), for any number of queries and documents."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # torch.export imports triton: interpreted on the CPU, as
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton tests and gpu_check expect

from torchrankboost.data import make_letor
from torchrankboost.nn import NeuralRanker, pad_queries, unpad_scores

onnxruntime = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.fixture(scope="module", params=["mlp", "transformer"])
def fitted(request):
    tr = make_letor(12, 9, 5, seed=3)
    model = NeuralRanker(model=request.param, epochs=2, max_docs=64).fit(
        tr.X, tr.labels, tr.groups)
    test = make_letor(7, 15, 5, seed=4)  # other sizes than the tracing inputs
    return model, test


def test_onnx_runtime_scores_as_predict(fitted, tmp_path):
    from torchrankboost.export import to_onnx

    model, test = fitted
    path = tmp_path / "m.onnx"
    to_onnx(model, path)  # the export room's writer takes a NeuralModel too
    Xp, mask = pad_queries(test.X.float(), test.groups.fix_sizes())
    sess = onnxruntime.InferenceSession(str(path))
    out = sess.run(["scores"], {"X": Xp.numpy(), "mask": mask.numpy()})[0]
    got = unpad_scores(torch.from_numpy(out), test.groups.fix_sizes())
    want = model.predict(test.X, test.groups)
    assert (got - want).abs().max() <= 1e-5


def test_torch_export_program_scores_as_predict(fitted, tmp_path):
    model, test = fitted
    path = tmp_path / "m.pt2"
    prog = model.export(path)
    loaded = torch.export.load(str(path))
    g = test.groups.fix_sizes()
    Xp, mask = pad_queries(test.X.float(), g)
    want = model.predict(test.X, test.groups)
    for p in (prog, loaded):
        got = unpad_scores(p.module()(Xp, mask), g)
        assert (got - want).abs().max() <= 1e-5


def test_export_refuses_other_models(tmp_path):
    from torchrankboost.export.neural import to_torch_export

    with pytest.raises(ValueError, match="NeuralModel"):
        to_torch_export(object())
