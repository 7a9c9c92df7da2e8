"""The loss bound once per fit (``boosting/objective.py``): a pairwise loss on data without a
crucial pair is refused, by the library and by the ``train`` command (one line, status 2)."""

import pytest
import torch

from torchrankboost import Groups, RankSVM
from torchrankboost.cli import main


def _no_pairs():
    X = torch.tensor([[0.1, 3.0], [0.3, 1.0], [0.2, 1.0], [0.5, 1.0]])
    return X, torch.tensor([1.0, 1.0, 0.0, 0.0]), Groups.from_sizes(torch.tensor([2, 2]))


def test_fit_without_a_crucial_pair_is_refused():
    from torchrankboost import make_ranker

    X, y, g = _no_pairs()
    for ranker in (make_ranker("boost", n_rounds=3), RankSVM()):
        with pytest.raises(ValueError, match="no crucial pairs .*nothing to learn"):
            ranker.fit(X, y, g)
    # a pointwise loss still learns from such data
    make_ranker("gbt", n_rounds=2).fit(X, y, g)


def test_train_command_without_a_crucial_pair_is_one_line_status_2(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "flat.txt"
    p.write_text("1 qid:1 1:0.1 2:3\n1 qid:1 1:0.3 2:1\n0 qid:2 1:0.2 2:1\n0 qid:2 1:0.5 2:1\n")
    assert main(["train", "--data", str(p), "--rounds", "3", "--no-tensorboard",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no crucial pairs" in err[0], err
