"""The synthetic part of ``bench_boost.py`` at Istella scale (``--sizes 10M``): data made in
chunks, never held as one float matrix.

Data (Istella-like): ``F = 220`` features, query sizes ~ round(LogNormal) with mean 300
(log-sd 0.5, at least 5), made by :class:`ChunkedLetor` in chunks of about 250k documents,
each chunk seeded by its index (the same values every time it is made); the relevance
function (informative columns, their weights, the tied and sparse columns, the grade cuts)
is drawn once, so every chunk follows it (``make_letor``'s story, chunk by chunk).

Each side runs in its own process (its peak RSS: ``VmHWM``) and makes every chunk twice,
in order — once for the binning sample, once to bin or push it:

* **ours**: :func:`~torchrankboost.data.binned_read.bin_row_chunks` (codes straight from
  the chunks: uint8, ``n · F`` bytes), then ``Booster(ExponentialPairwiseLoss(),
  RegressionTree(31 leaves))`` on the stand-in features carrying the bins;
* **LightGBM**: ``lightgbm.Dataset`` from one ``lightgbm.Sequence`` per chunk (sampling row
  by row in order, then pushing batches), ``objective="lambdarank"``, ``force_row_wise``;
* **ours, 2 processes**: the bin cache written once from the chunks
  (:func:`~torchrankboost.data.cache.write_cache`), then two ranks (gloo) each mapping its
  half (``load_cache(context=...)``) and growing the same trees data-parallel.

Reported: the time to make all chunks once (part of both sides' load: twice; estimated from
the first chunk), load + bin time, the time per tree (the median after the first tree) (``--rounds`` trees, ``--leaves`` leaves, ``--threads`` threads), the peak RSS.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

F_ISTELLA, DOCS_PER_QUERY, CHUNK_DOCS = 220, 300, 250_000


class ChunkedLetor:
    """``n`` documents in chunks of whole queries, made on demand (see the module docstring)."""

    def __init__(self, n: int, F: int = F_ISTELLA, dpq: float = DOCS_PER_QUERY, seed: int = 0,
                 chunk_docs: int = CHUNK_DOCS):
        g = torch.Generator().manual_seed(seed)
        self.F, self.seed = F, seed
        n_q = max(1, round(n / dpq))
        mu = math.log(dpq) - 0.125
        sizes = torch.exp(mu + 0.5 * torch.randn(n_q, generator=g, dtype=torch.float64))
        self.sizes = sizes.round().long().clamp_min(5)
        k = max(1, F // 4)
        self.inf = torch.randperm(F, generator=g)[:k].sort().values
        w = torch.randn(k, generator=g)
        self.w = w / w.norm()
        self.a = torch.randint(0, k, (3,), generator=g)
        kinds = torch.randperm(F, generator=g)
        self.ties, self.sparse = kinds[:F // 5], kinds[F // 5:2 * (F // 5)]
        # chunks of whole queries
        qcum = torch.cumsum(self.sizes, 0)
        targets = torch.tensor(list(range(chunk_docs, int(qcum[-1]), chunk_docs)),
                               dtype=torch.long)
        cuts = torch.searchsorted(qcum, targets, right=True)
        self.qbounds = [0] + sorted(set(int(c) + 1 for c in cuts if int(c) + 1 < n_q)) + [n_q]
        self.rows = [int(self.sizes[a:b].sum()) for a, b in zip(self.qbounds, self.qbounds[1:])]
        self.n = int(qcum[-1])
        r0 = self._relevance(0)[1]  # grade cuts from chunk 0 (proportions 8:4:2:1:.5)
        p = torch.tensor([0.5 ** j for j in range(5)], dtype=torch.float64)
        cum = torch.cumsum(p / p.sum(), 0)[:-1]
        self.cuts = torch.quantile(r0.double(), cum).float()

    def _relevance(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 100_003 + i + 1)
        sizes = self.sizes[self.qbounds[i]:self.qbounds[i + 1]]
        gi = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
        Z = torch.randn(int(sizes.sum()), self.F, generator=g)
        Zi = Z[:, self.inf]
        r = Zi @ self.w + 0.5 * (torch.tanh(Zi[:, self.a[0]] * Zi[:, self.a[1]])
                                 + Zi[:, self.a[2]].abs() - math.sqrt(2 / math.pi))
        r += 0.5 * torch.randn(r.numel(), generator=g)
        r += 0.5 * torch.randn(sizes.numel(), generator=g)[gi]
        return (Z, r, gi, g, sizes)

    def chunk(self, i: int):
        """``(X (m, F) float32 ndarray, labels (m,) float32, query sizes)`` of chunk ``i``."""
        Z, r, gi, g, sizes = self._relevance(i)
        Z += 0.5 * torch.randn(sizes.numel(), self.F, generator=g)[gi]
        Z[:, self.ties] = torch.round(Z[:, self.ties] * 2) / 2
        Z[:, self.sparse] = Z[:, self.sparse].clamp_min(0)
        labels = torch.bucketize(r, self.cuts, right=True).float()
        return Z.numpy(), labels.numpy(), sizes.numpy()


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _Chunks:
    """``chunk(i)`` of a :class:`ChunkedLetor` that also keeps the labels (pass 2)."""

    def __init__(self, gen: ChunkedLetor):
        self.gen, self.labels = gen, [None] * len(gen.rows)

    def __call__(self, i: int):
        X, y, _ = self.gen.chunk(i)
        self.labels[i] = y
        return X


def _ours_binned(gen: ChunkedLetor, tree):
    from torchrankboost.data.binned_read import bin_row_chunks

    src = _Chunks(gen)
    b = bin_row_chunks(src, gen.rows, n_bins=tree.n_bins, sample_count=tree.bin_sample_count,
                       seed=tree.seed)
    return b, torch.from_numpy(np.concatenate(src.labels))


def _fit_ours(X, labels, groups, args, distributed=None):
    from torchrankboost.boosting import Booster, HistoryCallback
    from torchrankboost.losses import ExponentialPairwiseLoss
    from bench_boost import tree

    hist = HistoryCallback()
    b = Booster(ExponentialPairwiseLoss(), tree(args), n_rounds=args.rounds,
                learning_rate=args.lr, seed=0, n_threads=args.threads, distributed=distributed)
    t = time.perf_counter()
    b.fit(X, labels.double(), groups, callbacks=[hist])
    fit_s = time.perf_counter() - t
    return fit_s, _per_tree(hist["seconds"]), len(hist.rounds)


def _per_tree(seconds) -> float:
    """Median seconds of the trees after the first (the first carries one-off setup)."""
    s = list(seconds)
    return float(np.median(s[1:] if len(s) > 1 else s))


def worker_ours(n: int, args) -> dict:
    from torchrankboost.kernels.binning import attach_bins
    from torchrankboost.groups import Groups
    from bench_boost import tree

    gen = ChunkedLetor(n)
    t = time.perf_counter()
    b, labels = _ours_binned(gen, tree(args))
    load_s = time.perf_counter() - t
    rss_loaded = _peak_mib()
    tr = tree(args)
    X = attach_bins(torch.zeros((), dtype=b.edges.dtype).expand(b.codes.shape), b,
                    key=(tr.n_bins, tr.bin_sample_count, tr.seed))
    fit_s, tree_s, trees = _fit_ours(X, labels, Groups.from_sizes(gen.sizes), args)
    return {"load_s": load_s, "fit_s": fit_s, "tree_s": tree_s, "trees": trees,
            "peak_load_mib": rss_loaded, "peak_mib": _peak_mib(), "n": gen.n}


def worker_lgb(n: int, args) -> dict:
    import lightgbm as lgb

    gen = ChunkedLetor(n)

    labels = {}

    class Seq(lgb.Sequence):  # one chunk, made on demand; the last chunk made is kept
        cache: dict = {}

        def __init__(self, i):
            self.i, self.batch_size = i, 4096

        def __len__(self):
            return gen.rows[self.i]

        def __getitem__(self, idx):
            if Seq.cache.get("i") != self.i:
                Seq.cache.clear()
                X, labels[self.i], _ = gen.chunk(self.i)
                Seq.cache.update(i=self.i, X=X)
            return np.asarray(Seq.cache["X"][idx], dtype=np.float64)  # LightGBM takes doubles

    from bench_boost import lgb_params

    t = time.perf_counter()
    ds = lgb.Dataset([Seq(i) for i in range(len(gen.rows))], group=gen.sizes.numpy(),
                     params={"max_bin": 255, "verbose": -1, "num_threads": args.threads},
                     free_raw_data=True)
    ds.construct()  # the labels come with the chunks (pushed in order), as ours do
    ds.set_label(np.concatenate([labels[i] for i in range(len(gen.rows))]))
    Seq.cache.clear()
    load_s = time.perf_counter() - t
    rss_loaded = _peak_mib()
    times = []

    def clock(env):
        times.append(time.perf_counter())

    t = time.perf_counter()
    lgb.train(lgb_params(args, objective="lambdarank"), ds, num_boost_round=args.rounds,
              callbacks=[clock])
    fit_s = time.perf_counter() - t
    return {"load_s": load_s, "fit_s": fit_s, "tree_s": _per_tree(np.diff([t] + times)),
            "trees": len(times), "peak_load_mib": rss_loaded, "peak_mib": _peak_mib(),
            "n": gen.n}


def worker_cache(n: int, args) -> dict:
    """Write the bin cache of the chunks (for the data-parallel run)."""
    from torchrankboost.data.cache import BinSpec, write_cache
    from torchrankboost.data.dataset import RankingData
    from torchrankboost.groups import Groups
    from bench_boost import tree

    gen = ChunkedLetor(n)
    tr = tree(args)
    t = time.perf_counter()
    b, labels = _ours_binned(gen, tr)
    groups = Groups.from_sizes(gen.sizes)
    data = RankingData(torch.zeros((), dtype=torch.float32).expand(b.codes.shape), labels,
                       groups, groups.group_index.clone(), None, False)
    spec = BinSpec(n_bins=tr.n_bins, sample_count=tr.bin_sample_count, seed=tr.seed)
    write_cache(args.cache_path, b, data, None, spec=spec, sources=[])
    return {"build_s": time.perf_counter() - t, "peak_mib": _peak_mib(), "n": gen.n}


def worker_rank(n: int, args) -> dict:
    """One rank of the data-parallel run on the cache (under RANK/WORLD_SIZE)."""
    from torchrankboost.data.cache import load_cache
    from torchrankboost.parallel import get_context
    from torchrankboost.parallel.launch import end_process_group, start_process_group

    start_process_group("cpu")
    try:
        ctx = get_context(True)
        t = time.perf_counter()
        c = load_cache(args.cache_path, values=False, context=ctx)
        load_s = time.perf_counter() - t
        fit_s, tree_s, trees = _fit_ours(c.data.X, c.data.labels, c.data.groups, args,
                                         distributed=ctx)
    finally:
        end_process_group()
    return {"load_s": load_s, "fit_s": fit_s, "tree_s": tree_s, "trees": trees,
            "peak_mib": _peak_mib(), "rows": int(c.data.labels.numel())}


WORKERS = {"ours": worker_ours, "lightgbm": worker_lgb, "cache": worker_cache,
           "rank": worker_rank}


def _argv(which: str, size: str, args) -> list:
    return [sys.executable, str(Path(__file__).with_name("bench_boost.py")), "--chunked-worker",
            which, "--sizes", size, "--threads", str(args.threads), "--rounds", str(args.rounds),
            "--lr", str(args.lr), "--leaves", str(args.leaves), "--cache-path", args.cache_path]


def _child(which: str, size: str, args, env=None) -> subprocess.Popen:
    return subprocess.Popen(_argv(which, size, args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _result(p: subprocess.Popen, which: str) -> dict:
    out, err = p.communicate()
    if p.returncode != 0:
        raise RuntimeError(f"{which} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _two_ranks(size: str, args) -> list:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS=str(args.threads))
        procs.append(_child("rank", size, args, env))
    return [_result(p, "rank") for p in procs]


def run(size: str, n: int, args) -> dict:
    """The three runs at ``n`` documents, printed; returns the figures."""
    import tempfile

    gen = ChunkedLetor(n)
    t = time.perf_counter()
    gen.chunk(0)
    make_s = (time.perf_counter() - t) * gen.n / gen.rows[0]
    print(f"\nsynthetic {size} (Istella-like, in chunks): {gen.n:,} docs, {gen.F} features, "
          f"{gen.sizes.numel():,} queries, {len(gen.rows)} chunks; making every chunk once: "
          f"~{make_s:.0f} s (from the first); {args.rounds} trees x {args.leaves} leaves, "
          f"{args.threads} "
          f"thread(s); load average {os.getloadavg()[0]:.1f}", flush=True)
    res = {"make_s": make_s, "n": gen.n}
    for which in ("ours", "lightgbm"):
        r = res[which] = _result(_child(which, size, args), which)
        print(f"  {which:9s} load+bin {r['load_s']:7.1f} s (peak {r['peak_load_mib']:7,.0f} MiB)"
              f"  {r['tree_s']:7.2f} s/tree  fit {r['fit_s']:7.1f} s  peak RSS "
              f"{r['peak_mib']:7,.0f} MiB  (load average {os.getloadavg()[0]:.1f})", flush=True)
    o, lg = res["ours"], res["lightgbm"]
    print(f"  ours/LightGBM: load+bin {o['load_s'] / lg['load_s']:.2f}x, time per tree "
          f"{o['tree_s'] / lg['tree_s']:.2f}x, peak RSS {o['peak_mib'] / lg['peak_mib']:.2f}x")
    if args.nproc2:
        folder = tempfile.mkdtemp(prefix="bench_chunked_")
        args.cache_path = str(Path(folder) / "data.trbin")
        try:
            res["cache"] = c = _result(_child("cache", size, args), "cache")
            print(f"  bin cache written in {c['build_s']:.1f} s (peak {c['peak_mib']:,.0f} MiB)",
                  flush=True)
            ranks = res["ranks"] = _two_ranks(size, args)
            peaks = ", ".join(f"{r['peak_mib']:,.0f}" for r in ranks)
            tree_s = ranks[0]["tree_s"]  # the trees' clock is rank 0's (callbacks run there)
            print(f"  ours, 2 processes on the cache: load {max(r['load_s'] for r in ranks):.2f} s"
                  f", {tree_s:.2f} s/tree (1 process: {o['tree_s']:.2f})"
                  f", peak RSS per rank {peaks} MiB (load average {os.getloadavg()[0]:.1f})",
                  flush=True)
        finally:
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
    return res


def worker_main(which: str, size: str, args) -> None:
    from bench_boost import parse_size

    torch.set_num_threads(args.threads)
    print(json.dumps(WORKERS[which](parse_size(size), args)))
