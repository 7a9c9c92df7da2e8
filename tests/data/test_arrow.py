"""The pyarrow readers (torchrankboost/data/arrow.py): Parquet, Feather/Arrow IPC, CSV/TSV
and in-memory tables give the same ranking data; column roles by name; and every bad input
is one line naming the file and the row or column — a ``ValueError`` through the API
(``load_table``) and exit 2 with one line through the command line."""

import re

import numpy as np
import pytest
import torch

from cli_helpers import captured_one_line
from table_files import ranking_table, write
from torchrankboost.cli import main
from torchrankboost.data import load_table
from torchrankboost.data.readers import MissingDependency, reader_for, require_pyarrow

pa = pytest.importorskip("pyarrow")


def _set(t, name, values):
    return t.set_column(t.column_names.index(name), name, pa.array(values))


@pytest.mark.parametrize("suffix", [".parquet", ".feather", ".arrow", ".csv", ".tsv"])
def test_every_format_reads_the_table(tmp_path, suffix):
    t = ranking_table(12, 3, seed=4)
    ref = load_table(t)
    d = load_table(write(t, tmp_path / f"t{suffix}", rows=9))
    assert d.feature_names == ref.feature_names == ("f0", "f1", "f2")
    assert torch.equal(d.X.nan_to_num(9), ref.X.nan_to_num(9)) and d.X.dtype == torch.float32
    assert torch.equal(d.labels, ref.labels) and torch.equal(d.qid, ref.qid)
    assert reader_for(tmp_path / f"t{suffix}").name in ("parquet", "arrow", "csv", "tsv")


def test_column_roles_by_name():
    t = ranking_table(6, 3, seed=5).rename_columns(["rel", "query", "a", "b", "c"])
    d = load_table(t, label="rel", qid="query", features=["c", "a"])
    assert d.feature_names == ("c", "a")
    np.testing.assert_array_equal(d.X[:, 0].nan_to_num(3).numpy(),
                                  np.nan_to_num(t.column("c").to_numpy(), nan=3))
    t2 = ranking_table(6, 2).append_column("url", pa.array(["u"] * ranking_table(6, 2).num_rows))
    assert load_table(t2).feature_names == ("f0", "f1")  # text columns are not features


def _bad_inputs(tmp_path):
    """``{case: (path, expected message)}`` of every bad input the issue lists."""
    t = ranking_table(8, 3, seed=0)
    n = t.num_rows
    one_nan = np.r_[np.ones(5), np.nan, np.ones(n - 6)]
    cases = {
        "missing role": (write(t.drop(["qid"]), tmp_path / "noqid.parquet"),
                         r"noqid.parquet: no column 'qid' \(the query id; name another with "
                         r"--qid-column"),
        "nan label": (write(_set(t, "label", one_nan), tmp_path / "nanlabel.parquet"),
                      r"nanlabel.parquet: row 6: the label \(column 'label'\) is missing"),
        "negative label": (write(_set(t, "label", np.r_[np.ones(5), -1.0, np.ones(n - 6)]),
                                 tmp_path / "neg.feather"),
                           r"neg.feather: row 6: the label \(column 'label'\) is -1.0, "
                           r"negative"),
        "nan qid": (write(_set(t, "qid", one_nan), tmp_path / "nanqid.csv"),
                    r"nanqid.csv: row 6: the query id \(column 'qid'\) is missing"),
        "empty file": (tmp_path / "empty.csv", r"empty.csv: the file is empty"),
        "no rows": (write(t.slice(0, 0), tmp_path / "norows.parquet"),
                    r"norows.parquet: the (file|table) has no data rows"),
    }
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "empty.feather").write_bytes(b"")
    cases["empty feather"] = (tmp_path / "empty.feather", r"empty.feather: the file is empty")
    rows = "".join(f"1,{i // 3},0.5,{'x' if i == 7 else 1.5}\n" for i in range(12))
    (tmp_path / "mixed.csv").write_text("label,qid,f0,f1\n" + rows)
    cases["mixed column"] = (tmp_path / "mixed.csv",
                             r"mixed.csv: row 8: column 'f1' mixes numbers and text \('x'\)")
    good = write(t, tmp_path / "good.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(good[: len(good) // 2])
    cases["truncated parquet"] = (tmp_path / "cut.parquet",
                                  r"cut.parquet: not a readable Parquet file, truncated or "
                                  r"corrupt")
    return cases


CASES = ["missing role", "nan label", "negative label", "nan qid", "empty file", "empty feather",
         "no rows",
         "mixed column", "truncated parquet"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_through_the_api(tmp_path, case):
    path, msg = _bad_inputs(tmp_path)[case]
    with pytest.raises(ValueError, match=msg) as info:
        load_table(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_exit_2_and_one_line_on_the_command_line(tmp_path, case, capsys):
    path, msg = _bad_inputs(tmp_path)[case]
    capsys.readouterr()
    assert main(["train", "--data", str(path), "--rounds", "1", "--no-tensorboard", "-q",
                 "-o", str(tmp_path / "m.safetensors")]) == 2
    assert re.search(msg, captured_one_line(capsys))


def test_non_numeric_features_and_other_schemas(tmp_path, capsys):
    t = ranking_table(6, 2, seed=6)
    t = t.append_column("url", pa.array(["u"] * t.num_rows))
    p = write(t, tmp_path / "t.parquet")
    with pytest.raises(ValueError, match=r"t.parquet: feature column 'url' is of type string, "
                                         r"not numeric"):
        load_table(p, features=["f0", "url"])
    assert main(["train", "--data", str(p), "--feature-columns", "f0,url", "-q",
                 "--no-tensorboard", "--rounds", "1", "-o", str(tmp_path / "m")]) == 2
    assert "feature column 'url' is of type string, not numeric" in captured_one_line(capsys)
    v = write(t.rename_columns(["label", "qid", "f0", "g", "url"]), tmp_path / "v.parquet")
    assert main(["train", "--data", str(p), "--valid", str(v), "-q", "--no-tensorboard",
                 "--rounds", "1", "-o", str(tmp_path / "m")]) == 2
    assert re.search(r"v.parquet: its feature columns differ from .*t.parquet's \(missing "
                     r"'f1'; extra 'g'\)", captured_one_line(capsys))


def test_data_frames_with_mixed_columns_and_late_csv_text(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"label": [1, 0, 2, 1], "qid": [1, 1, 2, 2], "f0": [0.1, 0.2, "x", 0.3]})
    with pytest.raises(ValueError, match=r"<pandas DataFrame>: column 'f0' mixes types"):
        load_table(df)
    with pytest.raises(ValueError, match="expected a pyarrow Table, a pandas or Polars"):
        load_table([[1, 2]])
    # a word past pyarrow's first block (1 MiB) of a column typed as numbers by it
    rows = "".join(f"1,{i // 4},0.25,{'oops' if i == 150_000 else 0.5}\n"
                   for i in range(160_000))
    (tmp_path / "late.csv").write_text("label,qid,f0,f1\n" + rows)
    with pytest.raises(ValueError, match=r"late.csv: row 150001: column 'f1' holds 'oops', "
                                         r"not a number"):
        load_table(tmp_path / "late.csv")
    (tmp_path / "only.csv").write_text("label,qid,f0\n1,1,0.5\n0,1,x\n")
    with pytest.raises(ValueError, match=r"only.csv: row 2: column 'f0' mixes numbers and text"):
        load_table(tmp_path / "only.csv")


def test_without_pyarrow_one_line_says_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_arrow(name, *a, **k):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("no pyarrow")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_arrow)
    with pytest.raises(MissingDependency, match=r"needs pyarrow: pip install "
                                                r"'torchrankboost\[arrow\]'"):
        require_pyarrow()
    assert issubclass(MissingDependency, ValueError)
