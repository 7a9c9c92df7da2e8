"""One tree drawn: the layout of its nodes, the labels of splits and leaves (round weight
folded in), the round counted from the end, a bad round one ValueError."""

import pytest
from plot_helpers import figure, run_folder  # noqa: F401  (fixture)

from torchrankboost.export._trees import PlainTree, plain_trees
from torchrankboost.factory import load_model
from torchrankboost.plot import plot_tree, tree_layout


def _tree():
    # root: f2 <= 0.5 -> leaf 0 | node 1; node 1: f0 <= 1.5 -> leaf 1 | leaf 2
    return PlainTree(split_feature=[2, 0], threshold=[0.5, 1.5], default_left=[True, False],
                     left_child=[~0, ~1], right_child=[1, ~2], split_gain=[3.0, 1.0],
                     leaf_value=[-1.0, 0.25, 2.0], float32=True, cover=[10, 6, 4, 3, 3])


def test_layout_puts_leaves_one_apart_and_splits_over_their_children():
    pos, edges = tree_layout(_tree())
    assert pos == {~0: (0.0, 1.0), ~1: (1.0, 2.0), ~2: (2.0, 2.0), 1: (1.5, 1.0), 0: (0.75, 0.0)}
    assert sorted(edges) == sorted([(0, ~0, True), (0, 1, False), (1, ~1, True), (1, ~2, False)])


def test_a_constant_round_is_one_leaf():
    assert tree_layout(PlainTree([], [], [], [], [], [], [0.5], True)) == ({~0: (0.0, 0.0)}, [])


def test_the_drawn_tree_is_the_models_round(run_folder):
    model = load_model(run_folder / "model.safetensors")
    _, _, trees = plain_trees(model, "test")
    ax = plot_tree(model, -1, feature_names=[f"x{j}" for j in range(model.num_features)],
                   ax=figure().add_subplot())
    last = trees[-1]
    assert ax.get_title() == f"round {len(trees) - 1} ({last.num_splits + 1} leaves)"
    texts = [t.get_text() for t in ax.texts]
    root = f"x{last.split_feature[0]} <= {last.threshold[0]:.3g}"
    assert any(t.startswith(root) for t in texts), texts
    leaves = {f"{v:.3g}" for v in last.leaf_value}
    assert leaves <= {t.split("\n")[0] for t in texts}
    assert sum(t.startswith(("yes", "no")) for t in texts) == 2 * last.num_splits


def test_a_round_out_of_range_is_one_value_error(run_folder):
    with pytest.raises(ValueError, match="index 3: the model has 3 rounds"):
        plot_tree(run_folder / "model.safetensors", 3, ax=figure().add_subplot())
