"""Benchmark: torchrankboost's ranking losses vs a dense padded implementation.

For every loss torchrankboost exports at run time (exponential pairwise, p-norm push, smooth
margin, AdaBoost, the pairwise hinge and squared hinge, QBRank with the grade-difference
margin, and the listwise ListNet / ListMLE and RankNet, when present), measure
forward + backward wall time (median of ``--repeats`` after one warm-up) and peak memory,
for query lists of 100, 1,000 and 10,000 documents at a fixed total (100k documents by
default), plus one query of 10^6 documents with 5 grades (10^12 pairs: infeasible densely).

The dense baseline is written the way allRank / pytorchltr / PT-Ranking do it: scores padded
to ``(B, L)`` with a mask, all pair differences materialised as a ``(B, L, L)`` tensor, a
pair mask from label differences, then the elementwise pair loss and a masked sum. The
peers themselves are run when importable (a row "vs <peer>" under our loss, with our speed-up
and memory ratio): pytorchltr's ``PairwiseHingeLoss`` against our pairwise hinge (the same
loss), allRank's ``rankNet`` against our RankNet (the same logistic pair loss: allRank averages
over pairs, we sum) and against our exponential pair loss (the closest factorised pair loss),
allRank's ``listNet``/``listMLE`` against ours. RankNet has no sort/prefix factorisation: it
costs O(L^2) per list in bounded memory, and runs only up to ``--max-quadratic`` documents.
Neither is a dependency; on this machine ``pip install allRank`` imports only with
torchvision, and pytorchltr 0.2.1 builds no wheel for Python 3.11, but its pure-Python loss
modules import from an unpacked sdist on ``PYTHONPATH``.

Memory: each case runs in a fresh subprocess; the reported figure is the increase of the
process's peak resident set size (``VmHWM`` in ``/proc/self/status``, reset through
``/proc/self/clear_refs`` once the inputs are built) during the timed loss computations, over
the resident size at that point. ``tracemalloc`` does not see torch's allocator; the RSS
does, and a subprocess per case keeps peaks independent. (``ru_maxrss`` is not used: Linux
carries it over from the forking parent, hiding any growth below the parent's size.) A dense
case whose estimated footprint (``B·L²`` elements × 4 bytes × 8 live temporaries) exceeds
``--mem-cap-gb`` is not run and reported as ``OOM-skipped``.

Threads: ``torch.set_num_threads(--threads)`` (default 1) for both implementations, because the
machine is shared and multi-threaded timings are noisy; medians are quoted.

    python scripts/bench_losses.py                  # full run (a few minutes)
    python scripts/bench_losses.py --quick          # smaller totals, for a smoke test
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch


# ----------------------------------------------------------------------------- losses
def our_losses():
    """``name -> (factory, dense_fn or None)`` for every loss exported at run time."""
    import torchrankboost.losses as L

    out = {}
    if hasattr(L, "ExponentialPairwiseLoss"):
        out["exponential"] = (lambda: L.ExponentialPairwiseLoss(), dense_exponential)
    if hasattr(L, "PNormPushLoss"):
        out["pnorm_p4_log"] = (lambda: L.PNormPushLoss(4.0, log=True), dense_pnorm_log)
    if hasattr(L, "SmoothMarginLoss"):
        out["smooth_margin"] = (lambda: L.SmoothMarginLoss(1.0), dense_smooth_margin)
    if hasattr(L, "AdaBoostLoss"):
        out["adaboost"] = (lambda: L.AdaBoostLoss(threshold=1.5), None)
    if hasattr(L, "PairwiseHingeLoss"):
        out["pairwise_hinge"] = (lambda: L.PairwiseHingeLoss(), dense_hinge)
        out["sq_hinge"] = (lambda: L.PairwiseHingeLoss(squared=True), dense_squared_hinge)
    if hasattr(L, "QBRankLoss"):
        out["qbrank_gd"] = (lambda: L.QBRankLoss(tau="grade_difference"), dense_qbrank)
    if hasattr(L, "ListNetLoss"):
        out["listnet"] = (lambda: L.ListNetLoss(), dense_listnet)
        out["listmle"] = (lambda: L.ListMLELoss(), dense_listmle)
        out["ranknet"] = (lambda: L.RankNetLoss(), dense_ranknet)
    try:
        from torchrankboost.losses.approx import ApproxNDCGLoss, NeuralNDCGLoss
    except ImportError:
        return out
    out["approx_ndcg"] = (lambda: ApproxNDCGLoss(), dense_approx_ndcg)
    out["neural_ndcg"] = (lambda: NeuralNDCGLoss(), dense_neural_ndcg)
    # the metric-weighted pair losses (no dense twin here: their tests hold the oracles)
    if hasattr(L, "LambdaRankExpLoss"):
        out["lambdarank_exp"] = (lambda: L.LambdaRankExpLoss(), None)
        out["lambdaloss"] = (lambda: L.LambdaLoss(), None)
    if hasattr(L, "YetiRankLoss"):
        out["yetirank"] = (lambda: L.YetiRankLoss(), None)
    return out


# Losses whose own cost is quadratic in the list length (no factorisation): run only up to
# --max-quadratic documents per list, and never on the one-query case.
QUADRATIC = {"ranknet", "approx_ndcg", "neural_ndcg", "lambdaloss"}
# Losses whose padded twins (and peers) hold (B, L) tensors, not (B, L, L) pair tensors.
LISTWISE = {"listnet", "listmle"}


def padded_gb(name: str, B: int, L: int, live: int) -> float:
    """Estimated footprint of a padded implementation: ``live`` temporaries of ``(B, L, L)``
    float64 pair tensors (``(4 · 50 + 8)`` of them for NeuralNDCG's 50 Sinkhorn rounds), or
    of ``(B, L)`` for the listwise losses."""
    live = 208 if name == "neural_ndcg" else live
    return B * L * (1 if name in LISTWISE else L) * 8 * live / 2 ** 30


def _dense_pairs(sp, yp, mask):
    """``(B, L, L)`` margins ``s_i − s_j`` and the crucial-pair mask ``y_i > y_j``."""
    diff = sp.unsqueeze(2) - sp.unsqueeze(1)
    pm = (yp.unsqueeze(2) > yp.unsqueeze(1)) & mask.unsqueeze(2) & mask.unsqueeze(1)
    return diff, pm


def dense_exponential(sp, yp, mask):
    diff, pm = _dense_pairs(sp, yp, mask)
    return torch.where(pm, torch.exp(-diff), torch.zeros_like(diff)).sum()


def dense_pnorm_log(sp, yp, mask, p=4.0):
    diff, pm = _dense_pairs(sp, yp, mask)
    t = torch.where(pm, -diff, torch.full_like(diff, -1e30))  # finite sentinel (no 0·inf)
    logL = torch.logsumexp(t, dim=1)                            # (B, L): per lower doc j
    has = pm.any(dim=1)
    per = torch.logsumexp(torch.where(has, p * logL, torch.full_like(logL, -1e30)), dim=1)
    return torch.where(has.any(1), per, torch.zeros_like(per)).sum()


def dense_smooth_margin(sp, yp, mask):
    diff, pm = _dense_pairs(sp, yp, mask)
    t = torch.where(pm, -diff, torch.full_like(diff, -1e30)).flatten(1)
    per = torch.logsumexp(t, dim=1)
    return torch.where(pm.flatten(1).any(1), per, torch.zeros_like(per)).sum()


def dense_hinge(sp, yp, mask):
    diff, pm = _dense_pairs(sp, yp, mask)
    return torch.where(pm, torch.relu(1 - diff), torch.zeros_like(diff)).sum()


def dense_squared_hinge(sp, yp, mask):
    diff, pm = _dense_pairs(sp, yp, mask)
    r = torch.relu(1 - diff)
    return torch.where(pm, r * r, torch.zeros_like(diff)).sum()


def dense_qbrank(sp, yp, mask, w=0.5, c=1.0):
    """QBRank (Zheng et al.) with the grade-difference margin ``τ_ij = c (l_i − l_j)``:
    ``w/2 Σ_{l_i > l_j} max(0, τ_ij − (s_i − s_j))² + (1 − w)/2 Σ (l − s)²``."""
    diff, pm = _dense_pairs(sp, yp, mask)
    tau = c * (yp.unsqueeze(2) - yp.unsqueeze(1))
    r = torch.relu(tau - diff)
    pair = torch.where(pm, r * r, torch.zeros_like(diff)).sum()
    point = torch.where(mask, (yp - sp) ** 2, torch.zeros_like(sp)).sum()
    return (w / 2) * pair + ((1 - w) / 2) * point


def dense_ranknet(sp, yp, mask):
    diff, pm = _dense_pairs(sp, yp, mask)
    return torch.where(pm, torch.nn.functional.softplus(-diff), torch.zeros_like(diff)).sum()


def dense_listnet(sp, yp, mask):
    """Padded ListNet as allRank writes it: softmax over masked rows (O(B·L), no pairs)."""
    neg = torch.finfo(sp.dtype).min
    p = torch.softmax(torch.where(mask, yp, torch.full_like(yp, neg)), dim=1)
    logq = torch.log_softmax(torch.where(mask, sp, torch.full_like(sp, neg)), dim=1)
    return -(torch.where(mask, p * logq, torch.zeros_like(sp))).sum()


def dense_listmle(sp, yp, mask):
    """Padded ListMLE: sort each row by label, reverse logcumsumexp (allRank's listMLE without
    its random tie shuffle; rows here are full, so the mask is all true)."""
    order = torch.sort(yp, dim=1, descending=True, stable=True)[1]
    s = torch.gather(sp, 1, order)
    tail = torch.logcumsumexp(s.flip(1), dim=1).flip(1)
    return (tail - s).sum()


def dense_approx_ndcg(sp, yp, mask, alpha=1.0):
    """Padded ApproxNDCG as allRank writes it (full rows): (B, L, L) sigmoids, autograd."""
    gain = 2.0 ** yp - 1
    ideal = torch.sort(gain, 1, descending=True)[0]
    disc = 1.0 / torch.log2(torch.arange(sp.shape[1], dtype=sp.dtype) + 2.0)
    idcg = (ideal * disc).sum(1).clamp_min(1e-10)
    pos = 0.5 + torch.sigmoid(alpha * (sp.unsqueeze(1) - sp.unsqueeze(2))).sum(2)
    return -((gain / torch.log2(1 + pos)).sum(1) / idcg).sum()


def dense_neural_ndcg(sp, yp, mask, tau=1.0, n_iter=50, tol=1e-6):
    """Padded NeuralNDCG as allRank writes it (full rows): NeuralSort, Sinkhorn, autograd."""
    B, L = sp.shape
    A = (sp.unsqueeze(2) - sp.unsqueeze(1)).abs().sum(2)
    scale = L + 1 - 2 * (torch.arange(L, dtype=sp.dtype) + 1)
    P = torch.softmax((scale[None, :, None] * sp[:, None, :] - A[:, None, :]) / tau, -1)
    for _ in range(n_iter):
        P = P / P.sum(1, keepdim=True).clamp_min(1e-10)
        P = P / P.sum(2, keepdim=True).clamp_min(1e-10)
        if (P.sum(1) - 1).abs().max() < tol and (P.sum(2) - 1).abs().max() < tol:
            break
    gain = 2.0 ** yp - 1
    disc = 1.0 / torch.log2(torch.arange(L, dtype=sp.dtype) + 2.0)
    idcg = (torch.sort(gain, 1, descending=True)[0] * disc).sum(1)
    return -(((P @ gain.unsqueeze(2)).squeeze(2) * disc).sum(1) / (idcg + 1e-10)).sum()


# Peer implementations, run when importable: (peer label, impl key, which of our losses it
# is set against). pytorchltr's PairwiseHingeLoss is RankSVM's hinge with margin 1, the same
# loss as ours; allRank's rankNet is the logistic pair loss (not factorisable, so not one of
# ours): it is set against our exponential pair loss, the closest factorised pair loss.
PEERS = [("pytorchltr PairwiseHingeLoss", "pytorchltr", "pairwise_hinge"),
         ("allRank rankNet", "allrank", "exponential"),
         ("allRank rankNet", "allrank", "ranknet"),
         ("allRank listNet", "allrank_listnet", "listnet"),
         ("allRank listMLE", "allrank_listmle", "listmle")]


def peer_fn(impl):
    """``fn(scores (B, L), labels (B, L)) -> scalar`` of a peer library (raises if not
    importable)."""
    if impl == "pytorchltr":
        from pytorchltr.loss import PairwiseHingeLoss

        mod = PairwiseHingeLoss()

        def fn(sp, yp):
            n = torch.full((sp.shape[0],), sp.shape[1], dtype=torch.long)
            return mod(sp, yp.long(), n).sum()
        return fn
    if impl == "allrank":
        from allrank.models.losses import rankNet

        return lambda sp, yp: rankNet(sp, yp)
    if impl == "allrank_listnet":
        from allrank.models.losses import listNet

        return lambda sp, yp: listNet(sp, yp)
    if impl == "allrank_listmle":
        from allrank.models.losses import listMLE

        return lambda sp, yp: listMLE(sp, yp)
    raise ValueError(impl)


def peer_status():
    """``impl -> None`` when importable, else the reason it is skipped."""
    out = {}
    for _, impl, _ in PEERS:
        try:
            peer_fn(impl)
            out[impl] = None
        except Exception as exc:  # noqa: BLE001
            out[impl] = f"not importable ({type(exc).__name__}: {str(exc)[:60]}) - skipped"
    return out


# ----------------------------------------------------------------------------- one case
def _status_mb(field: str):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return None


def reset_peak_rss() -> float:
    """Reset the peak RSS (``VmHWM``) to the current RSS where Linux allows it
    (``/proc/self/clear_refs``) and return the current RSS in MB. ``ru_maxrss`` cannot be
    used: Linux carries it over from the parent across fork + exec, so a child forked from
    a large parent would report no growth at all."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    cur = _status_mb("VmRSS")
    return maxrss_mb() if cur is None else cur


def maxrss_mb() -> float:
    """Peak RSS in MB: ``VmHWM`` (resettable), else ``ru_maxrss``."""
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def make_data(n_queries: int, length: int, grades: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    n = n_queries * length
    s = torch.randn(n, generator=g, dtype=torch.float64)
    y = torch.randint(0, grades, (n,), generator=g).to(torch.float64)
    return s, y


def run_case(loss: str, impl: str, n_queries: int, length: int, grades: int, repeats: int,
             threads: int) -> dict:
    torch.set_num_threads(threads)
    from torchrankboost import Groups

    factory, dense = our_losses()[loss]
    s, y = make_data(n_queries, length, grades)
    groups = Groups.from_sizes([length] * n_queries)
    if impl in ("pytorchltr", "allrank", "allrank_listnet", "allrank_listmle"):
        fn = peer_fn(impl)
        sp = s.view(n_queries, length)
        yp = y.view(n_queries, length)

        def step():
            x = sp.clone().requires_grad_()
            fn(x, yp).backward()
            return x.grad
    elif impl == "dense":
        sp = s.view(n_queries, length)
        yp = y.view(n_queries, length)
        mask = torch.ones(n_queries, length, dtype=torch.bool)

        def step():
            x = sp.clone().requires_grad_()
            dense(x, yp, mask).backward()
            return x.grad
    else:
        mod = factory()

        def step():
            x = s.clone().requires_grad_()
            mod(x, y, groups).backward()
            return x.grad

    base = reset_peak_rss()
    step()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gr = step()
        times.append(time.perf_counter() - t0)
    ok = bool(torch.isfinite(gr).all())
    out = {"median_s": statistics.median(times), "min_s": min(times),
           "peak_mb": max(0.0, maxrss_mb() - base), "finite_grad": ok}
    if impl == "pytorchltr":  # the same loss as ours: check that the values agree
        ref = float(fn(sp.double(), yp))
        mine = float(our_losses()[loss][0]()(s.double(), y, groups))
        out["rel_diff"] = abs(ref - mine) / max(abs(ref), 1e-300)
    return out


def child(args) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps(args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": f"rc={r.returncode}: {tail[0][:120]}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main
def fmt_t(r):
    if "skipped" in r:
        return r["skipped"]
    if "error" in r:
        return "ERROR " + r["error"]
    return f"{r['median_s'] * 1e3:9.1f} ms {r['peak_mb']:8.0f} MB"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total", type=int, default=100_000)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--grades", type=int, default=5)
    ap.add_argument("--big", type=int, default=1_000_000, help="single-query size (0: skip)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="thread counts, each a full table in the same run (default 1 2)")
    ap.add_argument("--losses", nargs="+", default=None, help="only these of our losses")
    ap.add_argument("--mem-cap-gb", type=float, default=2.5)
    ap.add_argument("--max-quadratic", type=int, default=1000,
                    help="longest list for the O(L^2) losses (RankNet)")
    ap.add_argument("--quick", action="store_true", help="total 20k, big 200k, 3 repeats")
    ap.add_argument("--child", type=str, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        print(json.dumps(run_case(**json.loads(a.child))))
        return
    if a.quick:
        a.total, a.big, a.repeats = 20_000, 200_000, 3
    for t in list(a.threads):
        a.threads = t
        run_table(a)
        print()


def run_table(a):
    """One table (all losses, sizes, peers) at ``a.threads`` threads."""
    losses = our_losses()
    if a.losses:
        losses = {k: v for k, v in losses.items() if k in a.losses}
    print(f"torch {torch.__version__}, threads={a.threads}, total={a.total} docs, "
          f"grades={a.grades}, repeats={a.repeats} (median of forward+backward)")
    peers_ok = peer_status()
    for label, impl, ours_name in PEERS:
        why = peers_ok[impl]
        print(f"peer {label} (against our {ours_name}): {why or 'importable - run'}")
    print(f"losses: {', '.join(losses)}\n")
    print(f"{'loss':16s} {'L':>7s} {'B':>6s} | {'torchrankboost':>24s} | "
          f"{'padded torch':>24s} | speed-up  mem ratio  ours/padded")
    rows = []
    for name, (_, dense) in losses.items():
        for L in a.sizes:
            B = max(1, a.total // L)
            if name in QUADRATIC and L > a.max_quadratic:
                print(f"{name:16s} {L:7d} {B:6d} | skipped: O(L^2) per list (--max-quadratic)")
                continue
            common = dict(loss=name, n_queries=B, length=L, grades=a.grades,
                          repeats=a.repeats, threads=a.threads)
            ours = child(dict(common, impl="ours"))
            if dense is None:
                dn = {"skipped": "n/a (no dense twin)"}
            else:
                est_gb = padded_gb(name, B, L, 8)
                if est_gb > a.mem_cap_gb:
                    dn = {"skipped": f"OOM-skipped (~{est_gb:.0f} GB)"}
                else:
                    dn = child(dict(common, impl="dense",
                                    repeats=max(1, min(a.repeats, 3 if L >= 1000 else a.repeats))))
            sp = mr = rr = ""
            if "median_s" in ours and "median_s" in dn:
                sp = f"{dn['median_s'] / ours['median_s']:8.1f}x"
                mr = f"{dn['peak_mb'] / max(ours['peak_mb'], 1.0):8.1f}x"
                rr = f"{ours['median_s'] / dn['median_s']:8.2f}x"
            print(f"{name:16s} {L:7d} {B:6d} | {fmt_t(ours):>24s} | {fmt_t(dn):>24s} | {sp} {mr} "
                  f"{rr}")
            rows.append((name, L, ours, dn))
            for label, impl, ours_name in PEERS:
                if ours_name != name or peers_ok[impl] is not None:
                    continue
                est_gb = padded_gb(name, B, L, 16)  # pair tensors of (B, L, L, 2)
                if est_gb > a.mem_cap_gb:
                    pr = {"skipped": f"OOM-skipped (~{est_gb:.0f} GB)"}
                else:
                    pr = child(dict(common, impl=impl,
                                    repeats=max(1, min(a.repeats, 3 if L >= 1000 else a.repeats))))
                ratio = ""
                if "median_s" in pr and "median_s" in ours:
                    ratio = (f"{pr['median_s'] / ours['median_s']:8.1f}x "
                             f"{pr['peak_mb'] / max(ours['peak_mb'], 1.0):8.1f}x")
                same = (f"  (same value: rel. diff {pr['rel_diff']:.0e})"
                        if "rel_diff" in pr else "")
                print(f"{'  vs ' + label:40s} | {fmt_t(pr):>24s} | {ratio}{same}")
    if a.big:
        n = a.big
        print(f"\none query of {n:,} documents, {a.grades} grades "
              f"(~{n * n * (1 - 1 / a.grades) / 2:.1e} crucial pairs; dense infeasible):")
        small = max(n // 10, 1)
        for name in losses:
            if name in QUADRATIC:
                print(f"{name:16s} n={n:,}: skipped (O(n^2) pairs, no factorisation)")
                continue
            r = child(dict(loss=name, impl="ours", n_queries=1, length=n, grades=a.grades,
                           repeats=a.repeats, threads=a.threads))
            r10 = child(dict(loss=name, impl="ours", n_queries=1, length=small,
                             grades=a.grades, repeats=a.repeats, threads=a.threads))
            lin = ""
            if "peak_mb" in r and "peak_mb" in r10 and r10["peak_mb"] > 0:
                lin = (f"  memory x{r['peak_mb'] / r10['peak_mb']:.1f} and time "
                       f"x{r['median_s'] / r10['median_s']:.1f} for 10x documents "
                       f"(n={small:,}: {fmt_t(r10).strip()})")
            ok = "" if r.get("finite_grad", True) else "  [non-finite gradient]"
            print(f"{name:16s} n={n:,}: {fmt_t(r)}{lin}{ok}")


if __name__ == "__main__":
    main()
