"""scripts/count_syncs.py and the counter it reads (tests/sync_counter.py): what counts as a
host synchronisation, host and device tensors told apart; the script's counts on a tiny set."""

import sys
from pathlib import Path

import pytest
import torch

import torchrankboost.kernels as kernels
from sync_counter import SyncCounter

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def count_syncs(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import count_syncs

    yield count_syncs
    sys.modules.pop("count_syncs", None)


def test_counter_counts_reads_shapes_and_copies_of_device_tensors():
    x = torch.arange(10.0)  # made before the counter: a device tensor
    with SyncCounter() as sc:
        y = x * 2
        float(y[0]), y.tolist(), bool(y.any()), int(y[1])
        y[y > 2], torch.nonzero(y), torch.unique(y)
        torch.repeat_interleave(y, torch.ones(10, dtype=torch.long))
        host = torch.zeros(3, dtype=torch.float64)
        host[0] = y.sum()  # a device value written into a host tensor
        h = y.cpu()
    assert sc.by_kind == {"__float__": 1, "tolist": 1, "__bool__": 1, "__int__": 1,
                          "__getitem__[mask]": 1, "nonzero": 1, "unique": 1,
                          "repeat_interleave": 1, "__setitem__(host <- device)": 1, "cpu": 1}
    assert sc.syncs == 10 and sc.ops > 0


def test_counter_leaves_host_tensors_and_static_shapes_alone():
    x = torch.arange(10.0)
    with SyncCounter() as sc:
        h = x.cpu()  # one copy; the host copy is then read freely
        float(h[0]), h.tolist(), h[h > 2], bool(h.any())
        host = torch.tensor([1.0, 2.0])  # made on the host
        float(host.sum()), (host * 2).tolist()
        torch.repeat_interleave(x, torch.ones(10, dtype=torch.long), output_size=10)
        torch.nonzero_static(x > 3, size=4)
        up = torch.tensor([1, 2], device=x.device)  # an upload, not a sync
        x.to(torch.device("cpu"))  # the data's own device: no copy
    assert sc.syncs == 1 and sc.by_kind == {"cpu": 1}
    assert sc.uploads == 1 and up.numel() == 2


def test_the_script_counts_trees_and_a_round(count_syncs, capsys):
    order = kernels._AUTO_ORDER
    count_syncs.main(["--docs", "400", "--leaves", "5", "--rounds", "2", "--features", "6"])
    out = capsys.readouterr().out
    assert "tree n=" in out and "oblivious" in out and "outside the tree: syncs" in out
    assert kernels._AUTO_ORDER is order  # the chooser given back
