"""Small ranking tables for the table-reader tests: a ``pyarrow.Table`` of graded documents
(``label``, ``qid``, features ``f0 ..``) and the same written as Parquet, Feather or CSV."""

import numpy as np


def ranking_table(n_queries=30, F=5, seed=0, *, extra=None):
    """``label`` (0-3, float), ``qid`` (int64, contiguous, 3-12 rows a query), ``f0 ..``
    (float32, some NaN) and the ``extra`` columns given."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 13, size=n_queries)
    n = int(sizes.sum())
    cols = {"label": pa.array(rng.integers(0, 4, size=n).astype(np.float64)),
            "qid": pa.array(np.repeat(np.arange(n_queries) * 7 + 100, sizes).astype(np.int64))}
    for j in range(F):
        x = np.round(rng.normal(size=n), 3).astype(np.float32)
        x[rng.random(n) < 0.05] = np.nan
        cols[f"f{j}"] = pa.array(x)
    for k, v in (extra or {}).items():
        cols[k] = pa.array(v)
    return pa.table(cols)


def write(table, path, *, rows=None):
    """``table`` written to ``path`` by its suffix (``rows``: Parquet row groups, Feather
    record batches)."""
    import pyarrow as pa

    s = str(path)
    if s.endswith(".parquet"):
        import pyarrow.parquet as pq

        pq.write_table(table, s, row_group_size=rows)
    elif s.endswith((".feather", ".arrow")):
        import pyarrow.feather as feather

        feather.write_feather(table, s, chunksize=rows)
    else:
        import pyarrow.csv as pcsv

        exact = pa.table({c: (table[c].cast(pa.float64())
                              if pa.types.is_floating(table[c].type) else table[c])
                          for c in table.column_names})
        pcsv.write_csv(exact, s, pcsv.WriteOptions(delimiter="\t" if s.endswith(".tsv")
                                                   else ","))
    return path
