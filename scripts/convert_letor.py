"""A LETOR fold (SVMlight text: ``train.txt``, ``vali.txt``, ``test.txt``) written as tables:
Parquet, Feather (Arrow IPC) and CSV, one fold folder per format.

The three files are read together by the library's SVMlight reader (one feature numbering,
one feature count) and written with the column roles the table readers expect: ``label``
(float32), ``qid`` (int64) and the features ``f1 .. fF`` (named by their LETOR index). The
values are the ones the SVMlight reader gives (float32): Parquet and Feather store them as
they are; CSV stores each as the decimal text of its float64 value, which reads back to
the same float32 — so ``torchrankboost train`` on any of the folders gives the model of the
text files, bit for bit. ``--row-group-size`` sets the rows of each Parquet row group and
Feather record batch (a size that cuts queries shows that they are still kept whole)::

    python scripts/convert_letor.py mq2008/Fold1 out --formats parquet,feather,csv
    torchrankboost train --data out/parquet            # out/parquet/{train,vali,test}.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, Optional, Sequence

SUFFIX = {"parquet": ".parquet", "feather": ".feather", "csv": ".csv"}


def fold_tables(fold) -> Dict[str, object]:
    """``{split: pyarrow.Table}`` of the fold's ``train``, ``vali`` and ``test`` files."""
    import pyarrow as pa

    from torchrankboost.data import load_letor_fold

    out = {}
    for name, d in zip(("train", "vali", "test"), load_letor_fold(Path(fold))):
        first = 0 if d.zero_based else 1
        cols = {"label": pa.array(d.labels.numpy()), "qid": pa.array(d.qid.numpy())}
        for j in range(d.num_features):
            cols[f"f{j + first}"] = pa.array(d.X[:, j].numpy())
        out[name] = pa.table(cols)
    return out


def write_table(table, path: Path, fmt: str, row_group_size: Optional[int] = None) -> Path:
    """``table`` written to ``path`` as ``fmt`` (``parquet``, ``feather``, ``csv``)."""
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, str(path), row_group_size=row_group_size)
    elif fmt == "feather":
        import pyarrow.feather as feather

        feather.write_feather(table, str(path), chunksize=row_group_size)
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        exact = pa.table({c: (table[c].cast(pa.float64()) if pa.types.is_floating(table[c].type)
                              else table[c]) for c in table.column_names})
        pcsv.write_csv(exact, str(path))
    else:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(SUFFIX)}")
    return path


def convert_fold(fold, out, formats: Sequence[str] = tuple(SUFFIX),
                 row_group_size: Optional[int] = None) -> Dict[str, Path]:
    """Write the fold in each format under ``out/<format>/``; returns ``{format: folder}``."""
    tables = fold_tables(fold)
    folders = {}
    for fmt in formats:
        if fmt not in SUFFIX:
            raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(SUFFIX)}")
        folder = Path(out) / fmt
        folder.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            write_table(table, folder / f"{name}{SUFFIX[fmt]}", fmt, row_group_size)
        folders[fmt] = folder
    return folders


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fold", help="a LETOR fold folder (train.txt, vali.txt, test.txt)")
    ap.add_argument("out", help="where the folders <format>/ go")
    ap.add_argument("--formats", default="parquet,feather,csv",
                    help="comma-separated: parquet, feather, csv (default: all)")
    ap.add_argument("--row-group-size", type=int, default=None, metavar="ROWS",
                    help="rows per Parquet row group / Feather record batch")
    args = ap.parse_args(argv)
    from torchrankboost.data.sources import resolve_data_path

    folders = convert_fold(resolve_data_path(args.fold), args.out,
                           [f.strip() for f in args.formats.split(",") if f.strip()],
                           args.row_group_size)
    for fmt, folder in folders.items():
        print(f"{fmt}: {folder}")


if __name__ == "__main__":
    main()
