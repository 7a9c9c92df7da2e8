#!/usr/bin/env python
"""Our listwise Transformer (:class:`torchrankboost.nn.NeuralRanker`) beside allRank's, in
one run: the same data, network sizes, loss (ListNet), optimiser (Adam), epochs and batch of
queries; one thread. Prints each side's test NDCG@10 and seconds per epoch (training only:
no evaluation inside the timed epochs), alternating the two sides ``--repeats`` times.

allRank (``pip install allRank``; its last release, 1.4.3, pins old packages) is imported
from ``--allrank`` (a folder holding its ``allrank`` package, e.g. the unpacked wheel) or
from the installed package; what its model code imports but does not use here (``attr``,
``torchvision``, its Google-Cloud file reader) is stubbed in this script when missing. Its model is built with
``make_model`` (allRank's FC input block, Transformer encoder without positional encoding,
linear output) and trained as its ``train_utils`` does: padded slates of a fixed length
(the longest training query), ``listNet`` with ``-1`` on padding.

Example::

    python scripts/bench_neural.py --data "$TORCHRANKBOOST_DATA/mq2008/Fold1" --epochs 20
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np
import torch

from torchrankboost.data import load_data
from torchrankboost.metrics import ndcg_at_k
from torchrankboost.nn import NeuralRanker, pad_queries


def _stub_missing() -> None:
    """allRank's model code imports ``attr`` (config classes) and its data code
    ``torchvision``: stand-ins when they are not installed (nothing here uses them)."""
    try:
        import attr  # noqa: F401
    except ImportError:
        attr = types.ModuleType("attr")
        attr.attrs = lambda cls=None, **kw: cls if cls is not None else (lambda c: c)
        attr.attrib = lambda *a, **kw: kw.get("default")
        attr.asdict = lambda obj, **kw: dict(vars(obj))
        sys.modules["attr"] = attr
    fu = types.ModuleType("allrank.utils.file_utils")  # its cloud-storage file reader
    fu.open_local_or_gs = open
    fu.is_gs_path = lambda path: False
    fu.copy_file_to_local = lambda path, *a, **kw: path
    sys.modules.setdefault("allrank.utils.file_utils", fu)
    try:
        import torchvision  # noqa: F401
    except ImportError:
        tv = types.ModuleType("torchvision")
        tv.transforms = types.ModuleType("torchvision.transforms")
        tv.transforms.Compose = lambda fs: fs
        sys.modules["torchvision"] = tv
        sys.modules["torchvision.transforms"] = tv.transforms


def allrank_model(F: int, args):
    from allrank.models.model import make_model

    fc = types.SimpleNamespace(sizes=[args.d_model], input_norm=False, activation="ReLU",
                               dropout=args.dropout)
    tr = types.SimpleNamespace(N=args.layers, d_ff=args.d_ff, h=args.heads, dropout=args.dropout,
                               positional_encoding=None)
    return make_model(fc_model=vars(fc), transformer=tr,
                      post_model={"d_output": 1, "output_activation": None}, n_features=F)


def padded(data, length: int):
    """``(X (G, length, F), y (G, length) with -1 on padding, mask)``: allRank's slates."""
    g = data.groups.fix_sizes()
    X, mask = pad_queries(data.X.float(), g)
    y = torch.full(mask.shape, -1.0)
    y[mask] = data.labels.float()
    pad = length - X.shape[1]
    X = torch.nn.functional.pad(X, (0, 0, 0, pad))
    return X, torch.nn.functional.pad(y, (0, pad), value=-1.0), \
        torch.nn.functional.pad(mask, (0, pad))


def fit_allrank(tr, te, args):
    from allrank.models.losses import listNet

    torch.manual_seed(args.seed)
    length = int(tr.groups.sizes.max())
    X, y, mask = padded(tr, length)
    model = allrank_model(X.shape[2], args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    idx = torch.arange(X.shape[1]).expand(X.shape[0], -1)
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        model.train()
        for b in torch.randperm(X.shape[0], generator=gen).split(args.batch_queries):
            opt.zero_grad()
            s = model(X[b], ~mask[b], idx[b])  # allRank's mask: true on padding
            listNet(s, y[b]).backward()
            opt.step()
    seconds = (time.perf_counter() - t0) / args.epochs
    model.eval()
    Xt, _, mt = padded(te, int(te.groups.sizes.max()))
    with torch.no_grad():
        st = model.score(Xt, ~mt, torch.arange(Xt.shape[1]).expand(Xt.shape[0], -1))
    return float(ndcg_at_k(st[mt], te.labels, te.groups)), seconds


def fit_ours(tr, te, args):
    # the documents of batch_queries queries on average: as many steps as allRank's
    docs = int(round(tr.X.shape[0] / tr.groups.num_groups * args.batch_queries))
    ranker = NeuralRanker(model="transformer", loss="listnet", epochs=args.epochs,
                          learning_rate=args.lr, max_docs=docs, seed=args.seed, n_threads=1,
                          model_params=dict(d_model=args.d_model, n_heads=args.heads,
                                            n_layers=args.layers, d_ff=args.d_ff,
                                            dropout=args.dropout))
    t0 = time.perf_counter()
    model = ranker.fit(tr.X, tr.labels, tr.groups)
    seconds = (time.perf_counter() - t0) / args.epochs
    return float(ndcg_at_k(model.predict(te.X, te.groups), te.labels, te.groups)), seconds


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=os.path.join(os.environ.get("TORCHRANKBOOST_DATA", "data"),
                                                  "mq2008", "Fold1"))
    p.add_argument("--allrank", default=None, help="a folder holding allRank's package")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--batch-queries", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-ff", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    torch.set_num_threads(1)
    if args.allrank:
        sys.path.insert(0, args.allrank)
    _stub_missing()
    tr, _, te, name = load_data(args.data)
    print(f"{name}: {tr.groups.num_groups} train queries, {te.groups.num_groups} test; "
          f"{args.epochs} epochs, d_model {args.d_model}, {args.layers} layers, "
          f"{args.heads} heads, d_ff {args.d_ff}; load {os.getloadavg()[0]:.2f}")
    rows = {"ours": [], "allRank": []}
    for _ in range(args.repeats):
        rows["ours"].append(fit_ours(tr, te, args))
        rows["allRank"].append(fit_allrank(tr, te, args))
    for side, runs in rows.items():
        nd, sec = np.array(runs).T
        print(f"{side:8s} test NDCG@10 {nd.mean():.4f}  s/epoch median {np.median(sec):.3f} "
              f"(runs: {', '.join(f'{s:.3f}' for s in sec)})")
    ratio = np.median([r[1] for r in rows["ours"]]) / np.median([r[1] for r in rows["allRank"]])
    print(f"time per epoch, ours / allRank: {ratio:.2f}; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
