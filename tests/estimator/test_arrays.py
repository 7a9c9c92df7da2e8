"""BoostedRanker on tables (torchrankboost/estimator/arrays.py): a ``pyarrow.Table``, a
Polars or pandas ``DataFrame`` or a path, read by column names — the model of the same
arrays, the feature names kept (in the estimator and in a saved model), predicting on other
feature columns refused, and one-line errors for bad tables."""

import numpy as np
import pytest

from table_files import ranking_table, write
from torchrankboost import BoostedRanker
from torchrankboost.estimator.arrays import is_tabular, table_arrays, uses_columns

pa = pytest.importorskip("pyarrow")

SMALL = dict(n_rounds=4, max_leaves=4, learner_params={"min_samples_leaf": 3})


@pytest.fixture(scope="module")
def fitted():
    """A table, the model fitted on its arrays and its scores."""
    t = ranking_table(30, 4, seed=1)
    X = np.column_stack([t.column(f"f{j}").to_numpy() for j in range(4)])
    est = BoostedRanker(**SMALL).fit(X, t.column("label").to_numpy(),
                                     qid=t.column("qid").to_numpy())
    return t, est.predict(X)


def test_an_arrow_table_fits_the_model_of_its_arrays(fitted):
    t, s = fitted
    est = BoostedRanker(**SMALL).fit(t)
    assert list(est.feature_names_in_) == ["f0", "f1", "f2", "f3"]
    assert est.table_roles_ == {"label": "label", "qid": "qid"}
    np.testing.assert_array_equal(est.predict(t), s)
    np.testing.assert_array_equal(est.predict(t.select(["f3", "f1", "f0", "f2"])), s)
    with pytest.raises(ValueError, match=r"feature names should match .*missing: \['f0'\], "
                                         r"unexpected: \['a'\]"):
        est.predict(t.rename_columns(["label", "qid", "a", "f1", "f2", "f3"]))


def test_data_frames_by_column_name(fitted):
    t, s = fitted
    frames = [t.to_pandas()]
    try:
        import polars as pl

        frames.append(pl.from_arrow(t))
    except ImportError:
        pass
    for frame in frames:
        est = BoostedRanker(**SMALL).fit(frame, "label", qid="qid")
        np.testing.assert_array_equal(est.predict(frame), s)
        assert est.score(frame) == pytest.approx(est.score(t))
    renamed = t.rename_columns(["rel", "query", "f0", "f1", "f2", "f3"])
    est = BoostedRanker(**SMALL).fit(renamed, "rel", qid="query")
    np.testing.assert_array_equal(est.predict(renamed), s)


def test_a_path_eval_set_and_a_saved_model(fitted, tmp_path):
    t, s = fitted
    p = write(t, tmp_path / "t.parquet", rows=20)
    est = BoostedRanker(**SMALL).fit(p, eval_set=[write(t, tmp_path / "v.csv")])
    np.testing.assert_array_equal(est.predict(p), s)
    est.save_model(tmp_path / "m.safetensors")
    back = BoostedRanker().load_model(tmp_path / "m.safetensors")
    assert list(back.feature_names_in_) == ["f0", "f1", "f2", "f3"]
    np.testing.assert_array_equal(back.predict(t.select(["f2", "f0", "f1", "f3"])), s)
    with pytest.raises(ValueError, match="feature names should match"):
        back.predict(t.drop(["f3"]))


def test_table_arrays_roles_and_values():
    t = ranking_table(6, 2, seed=2)
    n = t.num_rows
    t = t.append_column("weight", pa.array(np.linspace(1, 2, n)))
    got = table_arrays(t)
    assert got["names"] == ("f0", "f1") and got["X"].shape == (n, 2)
    assert got["roles"] == {"label": "label", "qid": "qid", "weight": "weight"}
    np.testing.assert_array_equal(got["sample_weight"], np.linspace(1, 2, n))
    w = np.full(n, 3.0)  # an array overrides the column, which then is a feature
    got = table_arrays(t, sample_weight=w)
    assert got["names"] == ("f0", "f1", "weight") and got["sample_weight"] is w
    assert is_tabular("x.parquet") and is_tabular(t) and not is_tabular(t.to_pandas())
    assert uses_columns(t.to_pandas(), y=None) and not uses_columns(t.to_pandas(), y=w)


def test_bad_tables_are_one_line_errors(tmp_path):
    t = ranking_table(5, 2, seed=3)
    with pytest.raises(ValueError, match=r"<table>: no column 'label'"):
        BoostedRanker(**SMALL).fit(t.drop(["label"]))
    with pytest.raises(ValueError, match=r"no column 'grade'"):
        BoostedRanker(**SMALL).fit(t, "grade")
    with pytest.raises(ValueError, match="qid_column indexes a column of an array X"):
        BoostedRanker(qid_column=1, **SMALL).fit(t)
    with pytest.raises(ValueError, match="has no column names"):
        BoostedRanker(**SMALL).fit(tmp_path / "train.txt")
    with pytest.raises(ValueError, match="the table has no rows"):
        BoostedRanker(**SMALL).fit(t.slice(0, 0))
    arrays = BoostedRanker(**SMALL).fit(np.zeros((6, 2)), np.arange(6) % 2, qid=[1] * 6)
    with pytest.raises(ValueError, match="fitted without feature names"):
        arrays.predict(t)
