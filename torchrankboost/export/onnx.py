r"""ONNX: one ``ai.onnx.ml`` ``TreeEnsembleRegressor`` node (``onnxruntime`` runs it).

The graph maps the input ``"X"`` (float32, ``(N, F)``, NaN missing) to ``"scores"``
(float32, ``(N, 1)``): ``scores = b + Σ_t h_t(x)`` with the round weights folded into the leaf
values. Each round is one tree (``nodes_treeids`` = round); internal node ``k`` keeps id ``k``
and leaf ``j`` gets id ``K + j``. Our trees send ``x`` left when ``x <= θ`` and NaN to the stored
side; that is ``BRANCH_LEQ`` with the left child as the true branch and
``nodes_missing_value_tracks_true`` = default-left. The operator compares float32 inputs with
float32 thresholds, so ``θ`` is written as the largest float32 ``≤ θ`` (``θ`` itself for a model
with float32 thresholds): for every float32 ``x``, ``x <= θ`` exactly when ``x <= θ₃₂``.
Leaf values and the base score are float32 in the graph and summed in float32: scores agree
with :meth:`Ensemble.predict` to float32 rounding.
"""

from __future__ import annotations

import math
import os
from typing import Any, List

import numpy as np

from .._io import atomic_write
from ..contract import PathLike
from ._trees import PlainTree, plain_trees

__all__ = ["to_onnx", "ML_OPSET"]

ML_OPSET = 3  # ai.onnx.ml version of TreeEnsembleRegressor used here
_ONNX_OPSET = 17


def onnx_threshold(theta: float) -> float:
    """The largest float32 ``≤ θ`` (as a float); ``+inf`` stays ``+inf``."""
    if theta == math.inf:
        return theta
    with np.errstate(over="ignore"):
        t = np.float32(theta)
    if float(t) > theta:
        t = np.nextafter(t, np.float32(-np.inf))
    return float(t)


def _f32(v: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def _tree_attributes(tid: int, tree: PlainTree, cols: dict) -> None:
    """Append round ``tid``'s nodes and leaf weights to the attribute columns ``cols``."""
    K = tree.num_splits
    node_id = lambda c: c if c >= 0 else K + ~c  # noqa: E731
    for k in range(K):
        for name, value in (("nodes_nodeids", k), ("nodes_featureids", tree.split_feature[k]),
                            ("nodes_modes", "BRANCH_LEQ"),
                            ("nodes_values", onnx_threshold(tree.threshold[k])),
                            ("nodes_truenodeids", node_id(tree.left_child[k])),
                            ("nodes_falsenodeids", node_id(tree.right_child[k])),
                            ("nodes_missing_value_tracks_true", int(tree.default_left[k]))):
            cols[name].append(value)
    for j, v in enumerate(tree.leaf_value):
        for name, value in (("nodes_nodeids", K + j), ("nodes_featureids", 0),
                            ("nodes_modes", "LEAF"), ("nodes_values", 0.0),
                            ("nodes_truenodeids", 0), ("nodes_falsenodeids", 0),
                            ("nodes_missing_value_tracks_true", 0),
                            ("target_nodeids", K + j), ("target_treeids", tid),
                            ("target_ids", 0), ("target_weights", _f32(v))):
            cols[name].append(value)
    cols["nodes_treeids"].extend([tid] * (2 * K + 1))


def _graph(base: float, F: int, trees: List[PlainTree]):
    from onnx import TensorProto, helper

    names = ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
             "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
             "nodes_missing_value_tracks_true", "target_nodeids", "target_treeids",
             "target_ids", "target_weights"]
    cols = {name: [] for name in names}
    for tid, tree in enumerate(trees):
        _tree_attributes(tid, tree, cols)
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["scores"], domain="ai.onnx.ml",
                            n_targets=1, aggregate_function="SUM", post_transform="NONE",
                            base_values=[_f32(base)], **cols)
    graph = helper.make_graph(
        [node], "torchrankboost_ensemble",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, F])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 1])])
    return helper.make_model(graph, producer_name="torchrankboost",
                             opset_imports=[helper.make_opsetid("", _ONNX_OPSET),
                                            helper.make_opsetid("ai.onnx.ml", ML_OPSET)])


def to_onnx(model: Any, path: PathLike) -> None:
    r"""Write a fitted tree or stump ensemble, or a linear ranker, as an ONNX model (needs
    the ``onnx`` package).

    Args:
        model: an :class:`~torchrankboost.boosting.ensemble.Ensemble` of ``TreeModel`` /
            ``StumpModel`` rounds, a :class:`~torchrankboost.boosting.papers.LinearRanker` (what
            ``RankSVM`` fits; see :mod:`.onnx_linear`), or a fitted ranker whose ``model_``
            is one of these.
        path: the file to write (atomically; name it ``*.onnx``).

    ``onnxruntime.InferenceSession(path).run(["scores"], {"X": X})[0][:, 0]`` (``X`` float32
    ``(N, F)``, NaN missing) equals ``model.predict(X)`` up to float32 leaf values and sums:
    thresholds, NaN sides, base score and round weights (folded into the leaves) carry over.
    Per-query normalisation of the features is not part of the file: apply it before
    predicting. Other weak models raise ``ValueError``. A neural ranker's
    :class:`~torchrankboost.nn.NeuralModel` goes to :func:`torchrankboost.export.neural.to_onnx`
    (padded queries ``(X (B, L, F), mask (B, L)) -> scores (B, L)``).
    """
    from ..boosting.papers.ranksvm import LinearRanker

    fitted = getattr(model, "model_", model)
    if getattr(fitted, "uses_groups", False):  # a neural ranker's NeuralModel
        from .neural import to_onnx as neural_onnx

        neural_onnx(fitted, path)
        return
    linear = fitted
    if isinstance(linear, LinearRanker):
        from .onnx_linear import linear_graph

        data = linear_graph(linear, _ONNX_OPSET).SerializeToString()
        atomic_write(os.fspath(path), lambda fh: fh.write(data), mode="wb")
        return
    base, F, trees = plain_trees(model, "to_onnx")
    if not trees:  # the operator needs a tree: a single leaf of 0
        trees = [PlainTree([], [], [], [], [], [], [0.0], True)]
    data = _graph(base, F, trees).SerializeToString()
    atomic_write(os.fspath(path), lambda fh: fh.write(data), mode="wb")
