"""One tree of a fitted ensemble, drawn with matplotlib: each split ``feature <= threshold``
(``yes`` to the left; the side of a missing value marked), each leaf's value with the
round's weight folded in (what the round adds to a document's score), and the training
rows of each node when the model recorded them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["tree_layout", "plot_tree"]


def _tree(model, index: int):
    from ..export._trees import plain_trees
    from .charts import fitted_model

    _, _, trees = plain_trees(fitted_model(model), "plot_tree")
    if not -len(trees) <= index < len(trees):
        raise ValueError(f"index {index}: the model has {len(trees)} rounds")
    return index % len(trees), trees[index]


def tree_layout(tree: Any) -> Tuple[Dict[int, Tuple[float, float]], List[Tuple[int, int, bool]]]:
    """``(positions, edges)`` of a :class:`~torchrankboost.export._trees.PlainTree`: the
    ``(x, depth)`` of every node — internal node ``k >= 0``, leaf ``~j`` (a negative id) —
    leaves one unit apart left to right, a split above the middle of its children; and the
    ``(parent, child, is_left)`` edges."""
    pos: Dict[int, Tuple[float, float]] = {}
    edges: List[Tuple[int, int, bool]] = []
    if tree.num_splits == 0:
        return {~0: (0.0, 0.0)}, edges
    next_x = [0.0]
    # iterative post-order: a leaf takes the next x, a split the middle of its children
    stack: List[Tuple[int, int, bool]] = [(0, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        if node < 0:
            pos[node] = (next_x[0], float(depth))
            next_x[0] += 1.0
            continue
        left, right = tree.left_child[node], tree.right_child[node]
        if not done:
            edges += [(node, left, True), (node, right, False)]
            stack += [(node, depth, True), (right, depth + 1, False), (left, depth + 1, False)]
            continue
        pos[node] = ((pos[left][0] + pos[right][0]) / 2, float(depth))
    return pos, edges


def _label(tree, node: int, names: Optional[Sequence[str]], precision: int) -> str:
    cover = tree.cover
    if node < 0:
        text = f"{tree.leaf_value[~node]:.{precision}g}"
        rows = None if cover is None else cover[tree.num_splits + ~node]
    else:
        f = tree.split_feature[node]
        name = names[f] if names is not None else f"f{f}"
        text = f"{name} <= {tree.threshold[node]:.{precision}g}"
        rows = None if cover is None else cover[node]
    return text if rows is None else f"{text}\n{rows:g} rows"


def plot_tree(model: Any, index: int = 0, *, feature_names: Optional[Sequence[str]] = None,
              precision: int = 3, ax: Any = None) -> Any:
    """Draw round ``index`` of a fitted tree or stump ensemble.

    Args:
        model: a fitted ``Ensemble`` of trees or stumps, a fitted algorithm or
            ``BoostedRanker``, or a model file.
        index: the round (0-based; ``-1`` is the last).
        feature_names: one name per feature (default ``f0``, ``f1``, ...).
        precision: significant digits of thresholds and leaf values.
        ax: matplotlib axes to draw on (default: a new figure's, sized to the tree).

    Returns:
        The axes.
    """
    from .charts import axes_or_new

    index, tree = _tree(model, index)
    pos, edges = tree_layout(tree)
    width = max(x for x, _ in pos.values()) + 1
    depth = max(d for _, d in pos.values()) + 1
    ax = axes_or_new(ax, figsize=(max(6.0, 1.6 * width), max(3.0, 1.4 * depth)))
    box = dict(boxstyle="round,pad=0.3", fc="#eef3fb", ec="#1f5ac8")
    leaf = dict(boxstyle="round,pad=0.3", fc="#f4f4f4", ec="#777777")
    for parent, child, is_left in edges:
        (x0, y0), (x1, y1) = pos[parent], pos[child]
        ax.plot([x0, x1], [-y0, -y1], color="#999999", zorder=1)
        missing = tree.default_left[parent] == is_left
        word = ("yes" if is_left else "no") + (", missing" if missing else "")
        ax.text((x0 + x1) / 2, -(y0 + y1) / 2, word, ha="center", va="center", fontsize=8,
                color="#555555", bbox=dict(fc="white", ec="none", pad=0.5), zorder=2)
    for node, (x, y) in pos.items():
        ax.text(x, -y, _label(tree, node, feature_names, precision), ha="center",
                va="center", fontsize=9, bbox=leaf if node < 0 else box, zorder=3)
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-depth + 0.4, 0.6)
    ax.set_axis_off()
    ax.set_title(f"round {index} ({tree.num_splits + 1} leaves)")
    return ax
