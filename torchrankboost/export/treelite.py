r"""Treelite (``treelite.Model``), built with Treelite's model builder.

Each round becomes one Treelite tree with float64 thresholds and float64 leaf values (the
round weight folded in, the product :meth:`Ensemble.predict` adds) and the test
``x <= threshold`` (``opname="<="``, our rule), NaN to the ``default_left`` side; the base
score is Treelite's ``base_scores``. Treelite compares in the threshold type (float64, so
inputs are read as float64): a tree fitted on float32 features compares ``float32(x) <= θ``,
so its thresholds are written as the largest float64 ``d`` with ``float32(d) <= θ``
(:func:`~torchrankboost.export.lightgbm.lgb_threshold`), and float32 and float64 inputs take
our branches exactly. The sum of the float64 leaves agrees with ours to float64 rounding
(Treelite may add the base score at the end). Treelite's dense inputs use NaN for missing;
a SciPy CSR input treats absent entries as missing, not as 0 (ours: 0), so give dense arrays.
"""

from __future__ import annotations

from typing import Any

from ._trees import PlainTree, plain_trees
from .lightgbm import lgb_threshold

__all__ = ["to_treelite"]


def _node_key(c: int, K: int) -> int:
    """Builder key of a child: internal node ``k`` keeps ``k``, leaf ``j`` gets ``K + j``."""
    return c if c >= 0 else K + ~c


def _add_tree(builder, tree: PlainTree) -> None:
    K = tree.num_splits
    builder.start_tree()
    for k in range(K):
        builder.start_node(k)
        builder.numerical_test(tree.split_feature[k], lgb_threshold(tree.threshold[k], tree.float32),
                               default_left=bool(tree.default_left[k]), opname="<=",
                               left_child_key=_node_key(tree.left_child[k], K),
                               right_child_key=_node_key(tree.right_child[k], K))
        builder.gain(float(tree.split_gain[k]))
        builder.end_node()
    for j, v in enumerate(tree.leaf_value):
        builder.start_node(K + j)
        builder.leaf(float(v))
        builder.end_node()
    builder.end_tree()


def _builder(treelite, base: float, F: int, T: int):
    mb = treelite.model_builder
    return mb.ModelBuilder(
        threshold_type="float64", leaf_output_type="float64",
        metadata=mb.Metadata(num_feature=F, task_type="kRegressor", average_tree_output=False,
                             num_target=1, num_class=[1], leaf_vector_shape=(1, 1)),
        tree_annotation=mb.TreeAnnotation(num_tree=T, target_id=[0] * T, class_id=[0] * T),
        postprocessor=mb.PostProcessorFunc(name="identity"), base_scores=[float(base)],
        attributes={"producer": "torchrankboost"})


def to_treelite(model: Any) -> Any:
    r"""A fitted tree or stump ensemble as a ``treelite.Model`` (needs ``treelite`` >= 4).

    Args:
        model: an :class:`~torchrankboost.boosting.ensemble.Ensemble` of ``TreeModel`` /
            ``StumpModel`` rounds (or a fitted ranker whose ``model_`` is one).

    Returns: a Treelite model whose ``treelite.gtil.predict(m, X, pred_margin=True)
    .reshape(-1)`` (``X`` dense ``(n, F)``, NaN missing) equals ``model.predict(X)`` to
    float64 rounding: thresholds, NaN sides, base score and round weights carry over. Save
    it with ``m.serialize(path)`` (``treelite.Model.deserialize`` reads it back) or compile
    it with TL2cgen. Per-query normalisation of the features is not part of the model: apply
    it before predicting. Other weak models raise ``ValueError``.
    """
    base, F, trees = plain_trees(model, "to_treelite")
    import treelite

    if not trees:  # Treelite needs a tree: a single leaf of 0
        trees = [PlainTree([], [], [], [], [], [], [0.0], False)]
    builder = _builder(treelite, base, F, len(trees))
    for tree in trees:
        _add_tree(builder, tree)
    return builder.commit()

