r"""ONNX for a linear ranker (:class:`~torchrankboost.boosting.papers.LinearRanker`, what
``RankSVM`` fits): ``score(x) = w·x + b`` with NaN features counting as 0, as
:meth:`LinearRanker.predict`.

The graph has the tree graphs' signature — input ``"X"`` float32 ``(N, F)``, output
``"scores"`` float32 ``(N, 1)`` — and computes in float64 inside::

    Xd = Cast<double>(X);  Z = Where(IsNaN(Xd), 0, Xd);  s = MatMul(Z, w) + b

with ``w`` ``(F, 1)`` and ``b`` the model's float64 weights and bias, so the scores equal
``model.predict(X)`` up to the final float32 rounding (and the order of the dot product's sum).
"""

from __future__ import annotations

import numpy as np

__all__ = ["linear_graph"]


def linear_graph(model, opset: int):
    """The ONNX ``ModelProto`` of a :class:`LinearRanker`."""
    from onnx import TensorProto, helper, numpy_helper

    w = model.weight.detach().to("cpu").numpy().astype(np.float64).reshape(-1, 1)
    F = w.shape[0]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([model.bias], dtype=np.float64), "b"),
             numpy_helper.from_array(np.array(0.0, dtype=np.float64), "zero")]
    nodes = [helper.make_node("Cast", ["X"], ["Xd"], to=TensorProto.DOUBLE),
             helper.make_node("IsNaN", ["Xd"], ["missing"]),
             helper.make_node("Where", ["missing", "zero", "Xd"], ["Z"]),
             helper.make_node("MatMul", ["Z", "w"], ["dot"]),
             helper.make_node("Add", ["dot", "b"], ["sd"]),
             helper.make_node("Cast", ["sd"], ["scores"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "torchrankboost_linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, F])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 1])],
        initializer=inits)
    return helper.make_model(graph, producer_name="torchrankboost",
                             opset_imports=[helper.make_opsetid("", opset)])
