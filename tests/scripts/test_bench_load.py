"""scripts/bench_load.py --parquet at a toy size: the Parquet file it writes (row groups,
whole queries of 20-200 rows) and each of its loads giving the same rows and features."""

import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench_load

    yield bench_load
    sys.modules.pop("bench_load", None)


def test_parquet_loads_agree(bench, tmp_path):
    import pyarrow.parquet as pq

    p = tmp_path / "t.parquet"
    bench.write_parquet(p, 3000, 6, rows=1000)
    f = pq.ParquetFile(p)
    assert f.metadata.num_row_groups == 3 and f.schema_arrow.names[:3] == ["label", "qid", "f1"]
    _, shape, _ = bench.parquet_child("pq_ours", str(p), 1)
    assert shape == (3000, 6)
    bench.parquet_child("pq_cache", str(p), 1)
    assert bench.parquet_child("pq_mapped", str(p), 1)[1] == (3000, 6)
    pytest.importorskip("lightgbm")
    _, shape, extra = bench.parquet_child("pq_lightgbm", str(p), 1)
    assert shape == (3000, 6) and extra["read_s"] >= 0
