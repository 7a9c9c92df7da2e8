"""The generic paths over the reader seam (torchrankboost/data/tables.py): one rank's rows
(whole queries, a query that straddles a row group to one rank), a query id that comes back
refused with its row, the files of a run with the same feature columns, and a table
streamed into the bin codes of its whole float matrix."""

import numpy as np
import pytest
import torch

from table_files import ranking_table, write
from torchrankboost.data import RankingData
from torchrankboost.data.readers import Columns
from torchrankboost.data.tables import (open_source, query_start_at, rank_rows, read_source,
                                        read_sources, stream_binned_source)
from torchrankboost.kernels.binning import bin_features

pa = pytest.importorskip("pyarrow")


@pytest.mark.parametrize("suffix", [".parquet", ".feather", ".csv"])
@pytest.mark.parametrize("world", [2, 3, 5])
def test_ranks_get_whole_queries_and_give_back_the_file(tmp_path, suffix, world):
    t = ranking_table(40, 4, seed=world)
    p = write(t, tmp_path / f"t{suffix}", rows=37)  # units that cut queries
    whole = read_sources([p])[0]
    with open_source(p) as src:
        cuts = [rank_rows(src, r, world) for r in range(world)]
    assert cuts[0][0] == 0 and cuts[-1][1] == len(whole)
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    q = whole.qid.numpy()
    for a, _ in cuts[1:]:
        assert q[a] != q[a - 1]  # every cut is a query start
    parts = [read_sources([p], part=(r, world))[0] for r in range(world)]
    cat = RankingData.concat(parts)
    assert torch.equal(cat.X.nan_to_num(7), whole.X.nan_to_num(7))
    assert torch.equal(cat.qid, whole.qid) and torch.equal(cat.labels, whole.labels)


def test_a_query_across_a_row_group_goes_to_the_rank_before(tmp_path):
    t = ranking_table(6, 2, seed=1)
    q = t.column("qid").to_numpy()
    g = 10  # rows per row group; make sure row 10 continues the query of row 9
    assert q[g] == q[g - 1] or True
    p = write(t, tmp_path / "t.parquet", rows=g)
    with open_source(p) as src:
        start = query_start_at(src, g)
        assert start >= g and q[start] != q[start - 1]
        assert (q[g:start] == q[g - 1]).all()
        a, b = rank_rows(src, 0, 2)
        assert a == 0 and q[b] != q[b - 1]


def test_a_query_id_that_comes_back_is_refused_with_its_row(tmp_path):
    t = ranking_table(5, 2, seed=2)
    q = t.column("qid").to_numpy().copy()
    last = q[-1]
    q[:3] = last  # the last query's id also heads the file
    t = t.set_column(1, "qid", pa.array(q))
    p = write(t, tmp_path / "t.parquet", rows=8)
    row = int(np.flatnonzero(q != last)[-1]) + 2  # 1-based: the first row of the last run
    with pytest.raises(ValueError, match=rf"t.parquet: row {row}: query id {last} comes back "
                                         rf"after other queries \(its first row is 1\)"):
        read_sources([p])
    for r in range(2):  # each rank alone sees only its own rows; together they refuse it
        read_sources([p], part=(r, 2))


def test_files_of_a_run_need_the_same_feature_columns(tmp_path):
    t = ranking_table(8, 3)
    a = write(t, tmp_path / "a.parquet")
    b = write(t.select(["f2", "qid", "f0", "label", "f1"]), tmp_path / "b.csv")
    da, db = read_sources([a, b])
    assert db.feature_names == da.feature_names == ("f0", "f1", "f2")
    assert torch.equal(da.X.nan_to_num(5), db.X.nan_to_num(5))  # b's columns put in a's order
    c = write(t.drop(["f1"]).append_column("g", t.column("f1")), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"c.parquet: its feature columns differ from .*a.parquet"
                                         r"'s \(missing 'f1'; extra 'g'\)"):
        read_sources([a, c])


@pytest.mark.parametrize("suffix", [".parquet", ".feather", ".csv"])
def test_streamed_codes_equal_the_float_matrix_codes(tmp_path, suffix):
    t = ranking_table(60, 6, seed=3)
    p = write(t, tmp_path / f"t{suffix}", rows=50)
    whole = read_sources([p])[0]
    ref = bin_features(whole.X, n_bins=15, sample_count=100, seed=4)
    with open_source(p) as src:
        data, b = stream_binned_source(src, n_bins=15, sample_count=100, seed=4)
    assert torch.equal(b.codes, ref.codes) and torch.equal(b.edges, ref.edges)
    assert torch.equal(b.num_bins, ref.num_bins) and torch.equal(b.has_missing, ref.has_missing)
    assert torch.equal(data.labels, whole.labels) and torch.equal(data.qid, whole.qid)
    assert data.X.stride() == (0, 0) and data.feature_names == whole.feature_names
    with open_source(p) as src:  # the sample would be the whole table: nothing to stream
        assert stream_binned_source(src, n_bins=15, sample_count=10_000) is None


def test_group_weight_is_one_value_per_query(tmp_path):
    t = ranking_table(6, 2, seed=5)
    q = t.column("qid").to_numpy()
    gw = (q % 5 + 1).astype(float)
    d = read_source(open_source(write(t.append_column("group_weight", pa.array(gw)),
                                      tmp_path / "a.parquet")))
    assert d.group_weight.numel() == d.num_queries
    assert torch.equal(d.group_weight, torch.as_tensor(gw[d.groups.offsets[:-1].numpy()]))
    gw[1] += 1  # inside the first query
    p = write(t.append_column("group_weight", pa.array(gw)), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"b.parquet: row 2: column 'group_weight' .* changes "
                                         r"inside a query"):
        read_source(open_source(p))


def test_weight_and_position_columns(tmp_path):
    t = ranking_table(5, 2)
    n = t.num_rows
    t = t.append_column("weight", pa.array(np.linspace(0.5, 2, n)))
    t = t.append_column("position", pa.array(np.arange(n) % 7 + 1))
    d = read_source(open_source(write(t, tmp_path / "a.feather")))
    assert d.feature_names == ("f0", "f1") and d.weight.dtype == torch.float64
    assert torch.equal(d.position, torch.arange(n) % 7 + 1)
    off = read_source(open_source(tmp_path / "a.feather", Columns(weight=None, position=None)))
    assert off.weight is None and off.feature_names == ("f0", "f1", "weight", "position")
