"""Placeholder main job until the training command lands: groups + metrics on built-in data."""

from __future__ import annotations


def main() -> None:
    import torch
    from sklearn.datasets import load_breast_cancer

    from torchrankboost import Groups

    X, y = load_breast_cancer(return_X_y=True)
    groups = Groups.single(len(y))
    scores = torch.as_tensor(X[:, 0] * -1.0)
    labels = torch.as_tensor(y, dtype=torch.float64)
    print(f"wdbc: {groups.num_docs} documents in {groups.num_groups} query")
    print("score of mean-radius ranker (positives = benign):", float(scores.mean()))


if __name__ == "__main__":
    main()
