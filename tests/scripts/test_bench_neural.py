"""scripts/bench_neural.py: allRank's padded slates built from our flat queries, and the two
sides trained for an epoch on a tiny fold (allRank itself only where it is importable)."""

import sys
from pathlib import Path

import pytest
import torch

from torchrankboost.data import make_letor

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import bench_neural

    yield bench_neural
    sys.modules.pop("bench_neural", None)


def test_padded_slates_mark_padding_with_minus_one(bench):
    d = make_letor(4, 5, 3, seed=0)
    X, y, mask = bench.padded(d, 20)
    assert X.shape == (4, 20, 3) and y.shape == mask.shape == (4, 20)
    assert torch.equal(y[mask], d.labels.float()) and (y[~mask] == -1).all()
    assert int(mask.sum()) == d.X.shape[0]


def test_both_sides_train_an_epoch(bench):
    tr, te = make_letor(20, 8, 4, seed=1), make_letor(6, 8, 4, seed=2)
    args = bench.parse(["--epochs", "1", "--d-model", "8", "--d-ff", "16"])
    nd, sec = bench.fit_ours(tr, te, args)
    assert 0 <= nd <= 1 and sec > 0
    pytest.importorskip("allrank")
    bench._stub_missing()
    nd, sec = bench.fit_allrank(tr, te, args)
    assert 0 <= nd <= 1 and sec > 0
