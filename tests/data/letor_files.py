"""LETOR text files made from :class:`~torchrankboost.data.RankingData` for the data tests
(comment and blank lines sprinkled in), and the check that two readings are the same."""

import torch


def write_letor_data(path, data, *, comments=True, zero_col=False, wide_tail=False):
    """``data`` as a LETOR file (1-based indices; comment and blank lines sprinkled in);
    ``zero_col``: index 0 on the first line only; ``wide_tail``: an extra feature on the
    last line only."""
    X, y, qid = data.X.numpy(), data.labels.numpy(), data.qid.numpy()
    lines = ["# a header comment", ""] if comments else []
    n = len(y)
    for i in range(n):
        feats = " ".join(f"{j + 1}:{X[i, j]:.6g}" for j in range(X.shape[1]) if X[i, j] != 0)
        if zero_col and i == 0:
            feats = "0:1 " + feats
        if wide_tail and i == n - 1:
            feats += f" {X.shape[1] + 3}:7"
        doc = f"  #docid = d{i} inc = 1" if comments and i % 3 == 0 else ""
        lines.append(f"{int(y[i])} qid:{int(qid[i]) + 100} {feats}{doc}")
        if comments and i % 17 == 5:
            lines.append("# between lines")
        if comments and i % 29 == 7:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_same_data(a, b):
    assert a.num_features == b.num_features
    assert torch.equal(a.X, b.X) and torch.equal(a.labels, b.labels)
    assert torch.equal(a.qid, b.qid) and torch.equal(a.groups.sizes, b.groups.sizes)
    assert a.zero_based == b.zero_based
