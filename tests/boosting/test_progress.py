"""ProgressCallback: plain lines off a terminal, the last round of an early stop, quiet, a
tqdm bar that keeps its width and whole metric names."""

import io
import sys

import pytest
import torch

from torchrankboost import Booster, RegressionTree
from torchrankboost.boosting.progress import ProgressCallback
from torchrankboost.contract import RoundRecord
from torchrankboost.data import make_letor
from torchrankboost.losses import ExponentialPairwiseLoss

from conftest import fit_info


def test_progress_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = ProgressCallback(stream=out, every=2)
    p.on_fit_start(None, fit_info(5))
    for r in range(1, 6):
        p.on_round_end(None, RoundRecord(round=r, loss=1.0 / r, step=0.2,
                                         metrics={"train": {"loss": 1.0 / r},
                                                  "valid_0": {"ndcg@10": 0.3}}))
    p.on_fit_end(None, None)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 3  # rounds 2, 4 and the last
    assert lines[0].startswith("round 2/5") and "valid/ndcg@10 0.3000" in lines[0]
    assert "round/alpha" not in lines[0] and "s/round" in lines[0]


def test_progress_prints_the_last_round_of_an_early_stop():
    out = io.StringIO()
    p = ProgressCallback(stream=out, every=10, total=100)
    p.start()
    for r in range(13):
        p.update(r, {"train/loss": 1.0})
    p.finish()
    lines = out.getvalue().strip().splitlines()
    assert [l.split()[1] for l in lines] == ["10/100", "13/100"]


def test_progress_quiet_and_tqdm():
    out = io.StringIO()
    p = ProgressCallback(stream=out, quiet=True)
    p.start(3)
    for r in range(3):
        p.update(r, {"train/loss": 1.0})
    p.finish("done")
    assert out.getvalue() == ""
    out = io.StringIO()
    p = ProgressCallback(stream=out, use_tqdm=True, keys=["valid/auc"])
    p.start(3)
    for r in range(3):
        p.update(r, {"valid": {"auc": torch.tensor(0.75)}, "train/loss": 2.0})
    p.finish()
    text = out.getvalue()
    assert "3/3" in text and "valid/auc 0.7500" in text and "train/loss" not in text


def test_progress_bar_on_a_120_column_terminal_keeps_its_bar_and_whole_names():
    out = io.StringIO()
    p = ProgressCallback(stream=out, use_tqdm=True)
    p.start(200)
    p._bar.ncols = 120
    metrics = {"metrics": {"train": {"loss": 123.456}, "valid_0": {
        "ndcg@10": 0.77, "ndcg@1": 0.6, "ndcg@5": 0.7, "map": 0.71}}}
    for r in range(200):
        p.update(r, metrics)
    p.finish()
    last = out.getvalue().split("\r")[-1].strip()
    assert len(last) <= 120, last
    assert "|################|" in last  # the bar keeps its width
    shown = last.split(", ", 1)[1].split("  ")
    known = {"train/loss", "valid/ndcg@10", "valid/ndcg@1", "valid/ndcg@5", "valid/map"}
    assert shown and all(item.rsplit(" ", 1)[0] in known for item in shown), shown


@pytest.fixture(scope="module")
def data():
    d = make_letor(20, 10, 5, 3, seed=0)
    return d.X, d.labels, d.groups


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_booster_shows_a_progress_bar_on_a_terminal_only(data, monkeypatch):
    X, y, g = data

    def fit(**kw):
        Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4), n_rounds=3,
                **kw).fit(X, y, g)

    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    fit()  # default "auto" on a terminal: a bar
    assert "3/3" in tty.getvalue()
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    fit(verbose=False)
    assert tty.getvalue() == ""
    plain = io.StringIO()  # a log file, a pipe, CI: nothing by default
    monkeypatch.setattr(sys, "stderr", plain)
    fit()
    assert plain.getvalue() == ""
    with pytest.raises(ValueError, match="verbose"):
        Booster(ExponentialPairwiseLoss(), RegressionTree(), verbose="yes")


def test_lines_count_on_from_the_round_a_fit_starts_after():
    """A resumed fit's first record is round k + 1: the lines say ``round 8/10``; a warm
    start's total (n more rounds) becomes k + n."""
    buf = io.StringIO()
    p = ProgressCallback(every=1, stream=buf, use_tqdm=False)
    p.on_fit_start(None, fit_info(10))
    for r in (8, 9, 10):
        p.on_round_end(None, RoundRecord(round=r, loss=1.0, step=0.2, weight=0.02,
                                         metrics={"train": {"loss": 1.0}}))
    p.on_fit_end(None, None)
    lines = buf.getvalue().splitlines()
    assert [l.split()[1] for l in lines] == ["8/10", "9/10", "10/10"], lines
    buf = io.StringIO()
    p = ProgressCallback(every=1, stream=buf, use_tqdm=False)
    p.on_fit_start(None, fit_info(2))
    for r in (6, 7):
        p.on_round_end(None, RoundRecord(round=r, loss=1.0, step=0.2, weight=0.02,
                                         metrics={"train": {"loss": 1.0}}))
    assert [l.split()[1] for l in buf.getvalue().splitlines()] == ["6/7", "7/7"]
