"""Input checks of the data readers, the pair specs, the fits and the metrics: what the
library refuses (one-line ``ValueError``) or warns about instead of training on a silently
wrong reading — split queries, old Mac line ends, infinite pair weights, NaN thresholds,
data without a pair, DCG overflow, RankNet's quadratic cost — and data names found under
the data folder."""

import math
import warnings

import pytest
import torch

from torchrankboost import (AdaBoostLoss, Bipartite, ExplicitPairs, Groups, RankNetLoss,
                            RankSVM)
from torchrankboost.cli import main
from torchrankboost.data import load_data, load_svmlight, load_svmlight_shard
from torchrankboost.metrics import dcg_at_k, ndcg_at_k

from dist_helpers import explain, launch

# qid 1 comes back at line 7 (its first line is 1); cut for two ranks, rank 0 reads lines
# 1-4 or 1-6 and rank 1 the rest, where qid 4 also comes back (line 10, first line 8)
SPLIT = "".join(f"{i % 3} qid:{q} 1:{i} 2:{i % 2}\n"
                for i, q in enumerate([1, 1, 2, 2, 3, 3, 1, 4, 5, 4]))
SPLIT_MSG = "split.txt:7: query id 1 comes back after other queries (its first line is 1)"


# ------------------------------------------------------------------ split queries
def test_split_query_is_refused_in_one_process(tmp_path):
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    with pytest.raises(ValueError, match=r"split.txt:7: query id 1 comes back .* first line "
                                         r"is 1\); the lines of a query must be contiguous"):
        load_svmlight(p)
    with pytest.raises(ValueError, match="comes back"):
        load_data(str(p))


def test_shard_read_alone_refuses_a_query_split_inside_its_range(tmp_path):
    """Without a process group a rank sees its own byte range only: a qid coming back
    inside it is refused, the lines numbered as in the whole file."""
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    with pytest.raises(ValueError, match=r"split.txt:10: query id 4 comes back after other "
                                         r"queries \(its first line is 8\)"):
        load_svmlight_shard(p, rank=1, world_size=2, n_features=2, zero_based=False)


def test_two_ranks_refuse_a_split_query_with_the_one_process_message(tmp_path):
    """The rule over byte ranges read by two gloo processes: the ranks gather their qid
    runs, so a query split between them is refused exactly as one process refuses it
    (the same file:line message, raised by the rank holding that line; not rank 1's own
    first repeat)."""
    p = tmp_path / "split.txt"
    p.write_text(SPLIT)
    one = None
    try:
        load_svmlight(p)
    except ValueError as exc:
        one = str(exc)
    assert one is not None and SPLIT_MSG in one
    res = launch("load_shard", 2, [str(p), str(tmp_path / "out")], timeout=90)
    assert all(r.returncode != 0 for r in res), explain(res)
    for r in res:
        assert f"DistributedError: rank 1 failed: ValueError: {one}" in r.err, explain(res)
    assert not (tmp_path / "out.0").exists()


# ------------------------------------------------------------------ line ends
def test_bare_cr_line_ends_are_refused_crlf_read(tmp_path):
    rows = ["2 qid:1 1:0.5 2:0.1 #docid = a", "0 qid:1 1:0.2 2:0.3 #docid = b",
            "1 qid:2 1:0.1 2:0.9 #docid = c"]
    cr = tmp_path / "cr.txt"
    cr.write_bytes(("\r".join(rows) + "\r").encode())
    with pytest.raises(ValueError, match=r"cr.txt:1: a bare carriage return .* tr '\\r'"):
        load_svmlight(cr)
    with pytest.raises(ValueError, match="bare carriage return"):
        load_svmlight_shard(cr, rank=0, world_size=2, n_features=2, zero_based=False)
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(("\n".join(rows[:2]) + "\n" + rows[2] + "\r0 qid:2 1:1\n").encode())
    with pytest.raises(ValueError, match="mixed.txt:3: a bare carriage return"):
        load_svmlight(mixed)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(("\r\n".join(rows) + "\r\n").encode())
    d = load_svmlight(crlf)
    assert d.groups.sizes.tolist() == [2, 1] and d.labels.tolist() == [2, 0, 1]


# ------------------------------------------------------------------ pair specs
def test_pair_weights_must_be_finite():
    for w in ([1.0, math.inf], [1.0, -math.inf], [math.nan, 1.0], [1.0, -1.0]):
        with pytest.raises(ValueError, match="weight must be finite and non-negative"):
            ExplicitPairs([0, 1], [1, 0], w)
    assert ExplicitPairs([0], [1], [2.5]).weight.tolist() == [2.5]


def test_bipartite_threshold_must_be_finite():
    for t in (math.nan, math.inf, "x", None, True):
        with pytest.raises(ValueError, match="threshold must be a finite number"):
            Bipartite(t)
        with pytest.raises(ValueError, match="threshold must be a finite number"):
            AdaBoostLoss(threshold=t)
    assert Bipartite(0.5).threshold == 0.5


# ------------------------------------------------------------------ no pair at all
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


# ------------------------------------------------------------------ DCG and RankNet
def test_dcg_exp_gain_is_finite_up_to_label_1023():
    s = torch.tensor([1.0, 0.0])
    for top in (513.0, 800.0, 1023.0):
        v = float(dcg_at_k(s, torch.tensor([top, 0.0]), k=None))
        assert v == pytest.approx(2.0 ** top - 1.0, rel=1e-12)
    with pytest.raises(ValueError, match=r"2\^1024 - 1, which overflows float64 \(finite up "
                                         r"to label 1023\)"):
        dcg_at_k(s, torch.tensor([1024.0, 0.0]))
    with pytest.raises(ValueError, match="DCG is beyond float64: the discounted sum"):
        dcg_at_k(torch.tensor([2.0, 1.0, 0.0]), torch.tensor([1023.0] * 3))
    assert float(ndcg_at_k(s, torch.tensor([1023.0, 1023.0]))) == pytest.approx(1.0)


def test_ranknet_warns_of_its_quadratic_cost_on_a_long_query():
    n = 10_000
    y = torch.zeros(n)
    y[:10] = 1.0
    with pytest.warns(UserWarning, match=r"query 0 has 10,000 documents and 99,900 preferred "
                                         r"pairs; RankNet costs O\(n²\)"):
        RankNetLoss().bind(y, Groups.single(n))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RankNetLoss().bind(y[:5000], Groups.single(5000))


# ------------------------------------------------------------------ data names
def test_relative_data_names_are_found_under_the_data_root(tmp_path, monkeypatch):
    fold = tmp_path / "root" / "set" / "Fold1"
    fold.mkdir(parents=True)
    for name in ("train", "vali", "test"):
        (fold / f"{name}.txt").write_text("2 qid:1 1:1 2:0\n0 qid:1 1:0 2:1\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TORCHRANKBOOST_DATA", str(tmp_path / "root"))
    tr, va, te, name = load_data("set/Fold1", valid="set/Fold1/vali.txt")
    assert name == "Fold1" and len(tr) == 2 and len(va) == 2
    with pytest.raises(FileNotFoundError, match=r"looked in .*work/set/Fold9 and "
                                                r".*root/set/Fold9 \(\$TORCHRANKBOOST_DATA\)"):
        load_data("set/Fold9")
    with pytest.raises(FileNotFoundError, match=r"nope.txt \(looked in .*work/nope.txt and "):
        load_data("set/Fold1", test="nope.txt")
