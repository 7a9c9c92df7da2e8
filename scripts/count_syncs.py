"""Count the host synchronisations and tensor ops of tree growth and of a boosting round.

The counter is the tests' :class:`SyncCounter` (``tests/sync_counter.py``: a
``TorchFunctionMode`` that counts, on CPU tensors, the calls that would make the host wait for
a GPU). Everything runs on the pure-torch tree backend, the path a GPU takes (the compiled CPU
kernels are taken out of the backend chooser for the run, predictions included).

* per tree: ``RegressionTree.fit`` (and ``ObliviousTree.fit``) on a synthetic LETOR-shaped set
  of ``--docs`` documents x ``--features`` features, random gradients, ``--leaves`` leaves;
* per round: the default round (``ExponentialPairwiseLoss``, the surrogate step,
  ``RegressionTree``, an evaluation set with NDCG@10), split into the weak learner's fit and
  the rest of the round ("outside the tree"), the last of ``--rounds`` rounds.

    python scripts/count_syncs.py --docs 50000 200000 --leaves 31 255
    python scripts/count_syncs.py --docs 50000 --sites      # where the syncs are
    python scripts/count_syncs.py --device-chunks           # the ops of the GPU path
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sync_counter import SyncCounter  # noqa: E402

import torchrankboost.boosting.booster as booster_mod  # noqa: E402
import torchrankboost.kernels as kernels  # noqa: E402
from torchrankboost import Booster  # noqa: E402
from torchrankboost.boosting.learners import ObliviousTree, RegressionTree  # noqa: E402
from torchrankboost.data import make_letor  # noqa: E402
import importlib  # noqa: E402

from torchrankboost.kernels.torch_backend import TorchBackend  # noqa: E402
from torchrankboost.losses import ExponentialPairwiseLoss  # noqa: E402


def show(label: str, c: SyncCounter, sites: bool) -> None:
    print(f"{label}: syncs {c.syncs}, ops {c.ops} (kernels {c.ops - c.views}), uploads "
          f"{c.uploads}  {dict(c.by_kind)}")
    if sites:
        for (site, kind), k in c.by_site.most_common(25):
            print(f"      {k:5d}  {site}  {kind}")


def per_tree(data, learner, sites: bool, label: str) -> None:
    prep = learner.prepare(data.X)
    g = torch.randn(data.X.shape[0], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0))
    learner.fit(prep, g)  # warm caches (bin counts, candidate tables)
    with SyncCounter(where=sites) as c:
        model = learner.fit_predict(prep, g)[0]
    show(f"{label} ({model.num_leaves} leaves, depth {model.depth})", c, sites)


def per_round(data, valid, leaves: int, rounds: int, sites: bool) -> None:
    fits, totals = [], []
    fit_learner, run_round = booster_mod.fit_learner, Booster._round

    def counted_fit(*args, **kw):
        with SyncCounter(where=sites) as c:
            out = fit_learner(*args, **kw)
        fits.append(c)
        return out

    def counted_round(self, run, rnd):
        with SyncCounter(where=sites) as c:
            out = run_round(self, run, rnd)
        totals.append(c)
        return out

    booster_mod.fit_learner, Booster._round = counted_fit, counted_round
    try:
        Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=leaves), n_rounds=rounds,
                verbose=False).fit(data.X, data.labels, data.groups,
                                   eval_set=[(valid.X, valid.labels, valid.groups)],
                                   eval_metric="ndcg@10")
    finally:
        booster_mod.fit_learner, Booster._round = fit_learner, run_round
    tree, total = fits[-1], totals[-1]
    outside = SyncCounter()
    outside.syncs, outside.ops = total.syncs - tree.syncs, total.ops - tree.ops
    outside.uploads = total.uploads - tree.uploads
    outside.views = total.views - tree.views
    outside.by_kind = total.by_kind - tree.by_kind
    outside.by_site = total.by_site - tree.by_site
    n = data.X.shape[0]
    show(f"round {len(totals) - 1}, n={n}, {leaves} leaves: the tree (fit_learner)", tree, False)
    show(f"round {len(totals) - 1}, n={n}, {leaves} leaves: outside the tree", outside, sites)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, nargs="+", default=[50_000])
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--leaves", type=int, nargs="+", default=[31, 255])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sites", action="store_true", help="list where the syncs are")
    ap.add_argument("--no-round", action="store_true")
    ap.add_argument("--device-chunks", action="store_true",
                    help="the chunks of a GPU (2^20 rows per histogram scatter, 2^24 cells per "
                         "split search) on the CPU too: the ops of the device path")
    a = ap.parse_args(argv)
    saved = [(kernels, "_AUTO_ORDER", kernels._AUTO_ORDER)]
    if a.device_chunks:  # the GPU's chunks
        for name in ("torch_backend", "histogram", "frontier"):
            mod = importlib.import_module(f"torchrankboost.kernels.{name}")
            for cpu, dev in (("_CPU_CHUNK", "_DEV_CHUNK"), ("_CPU_BUDGET", "_DEV_BUDGET")):
                if hasattr(mod, dev):
                    saved.append((mod, cpu, getattr(mod, cpu)))
                    setattr(mod, cpu, getattr(mod, dev))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _run(a)
    finally:
        torch.set_num_threads(threads)
        for mod, name, value in saved:
            setattr(mod, name, value)


def _run(a) -> None:
    """The counts of :func:`main`'s options ``a`` (on the torch backend alone)."""
    kernels._AUTO_ORDER = (TorchBackend(),)  # the path of a device without compiled kernels
    for docs in a.docs:
        data = make_letor(max(1, docs // 20), 20, a.features, seed=1)
        valid = make_letor(max(1, min(200, docs // 100)), 20, a.features, seed=2)
        n = data.X.shape[0]
        for leaves in a.leaves:
            per_tree(data, RegressionTree(max_leaves=leaves), a.sites,
                     f"tree n={n} F={a.features} max_leaves={leaves}")
        per_tree(data, ObliviousTree(depth=6), a.sites, f"oblivious n={n} depth=6")
        if not a.no_round:
            for leaves in a.leaves:
                per_round(data, valid, leaves, a.rounds, a.sites)


if __name__ == "__main__":
    main()
