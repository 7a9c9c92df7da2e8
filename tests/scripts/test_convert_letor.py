"""scripts/convert_letor.py: MQ2008 Fold1 written as Parquet, Feather and CSV folders, each
training the model of the SVMlight files bit for bit — in one process and on two, with row
groups (and record batches) of 1000 rows that cut queries."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from cli_helpers import main_quiet
from conftest import require_data

pa = pytest.importorskip("pyarrow")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
COMMON = ["--rounds", "3", "--max-leaves", "4", "--no-tensorboard", "-q", "--threads", "1"]


@pytest.fixture
def convert(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import convert_letor

    yield convert_letor
    sys.modules.pop("convert_letor", None)


def _tensors(path):
    with safe_open(str(path), "pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}


def _same(a, b):
    ta, tb = _tensors(a), _tensors(b)
    return ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


@pytest.fixture(scope="module")
def folds(tmp_path_factory):
    """The reference model of the text fold and the converted folders (1000-row groups)."""
    fold = require_data("mq2008", "Fold1")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import convert_letor
    finally:
        sys.path.remove(str(SCRIPTS))
    tmp = tmp_path_factory.mktemp("mq2008_tables")
    folders = convert_letor.convert_fold(fold, tmp, row_group_size=1000)
    ref = tmp / "ref.safetensors"
    assert main_quiet(["train", "--data", fold, "-o", ref] + COMMON) == 0
    return ref, folders


def test_row_groups_cut_queries(folds):
    import pyarrow.parquet as pq

    _, folders = folds
    f = pq.ParquetFile(folders["parquet"] / "train.parquet")
    assert f.metadata.num_row_groups > 2
    qid = f.read(columns=["qid"]).column("qid").to_numpy()
    cuts = np.cumsum([f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)])
    assert any(qid[c - 1] == qid[c] for c in cuts[:-1])  # a query straddles a row group


@pytest.mark.parametrize("fmt", ["parquet", "feather", "csv"])
def test_each_format_trains_the_svmlight_model(folds, fmt, tmp_path):
    ref, folders = folds
    out = tmp_path / f"{fmt}.safetensors"
    assert main_quiet(["train", "--data", folders[fmt], "-o", out] + COMMON) == 0
    assert _same(ref, out)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "feather", "csv"])
def test_two_processes_train_the_svmlight_model(folds, fmt, tmp_path):
    ref, folders = folds
    out = tmp_path / f"{fmt}2.safetensors"
    assert main_quiet(["train", "--data", folders[fmt], "-o", out, "--nproc", "2"]
                      + COMMON) == 0
    assert _same(ref, out)


def test_cli_writes_the_three_folders(convert, tmp_path, capsys):
    fold = require_data("mq2008", "Fold1")
    convert.main([str(fold), str(tmp_path), "--formats", "parquet,csv", "--row-group-size",
                  "5000"])
    assert sorted(p.name for p in (tmp_path / "parquet").iterdir()) == [
        "test.parquet", "train.parquet", "vali.parquet"]
    import pyarrow.csv as pcsv

    head = pcsv.read_csv(tmp_path / "csv" / "vali.csv").column_names
    assert head[:3] == ["label", "qid", "f1"] and head[-1] == "f46"
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        convert.convert_fold(fold, tmp_path, ["xml"])
