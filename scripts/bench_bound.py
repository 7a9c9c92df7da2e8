"""Benchmark: a loss with its labels bound (``loss.bind``) against the unbound calls.

A boosting driver evaluates its loss many times per round on the same labels. The unbound
calls ``loss(scores, labels, groups)`` and ``loss.grad_hess(scores, labels, groups, hess=...)``
re-validate the inputs and rebuild everything that does not depend on the scores (label
levels, ``(query, level)`` buckets, pair setups, normalisers, pair degrees) each time; the
bound object ``b = loss.bind(labels, groups)`` does that once, and
``b.value_grad_hess(scores)`` takes the value and the gradient from one pass of the kernels.

On one training set (MQ2008 Fold1 ``train`` by default, read with ``load_letor_fold``; any
LETOR fold folder with ``--fold``), float64 scores, this times per loss

* ``value``: ``loss(s, y, g)`` vs ``b(s)``;
* ``grad_hess(diag)`` and ``grad_hess(bound)``: ``loss.grad_hess(s, y, g, hess=h)`` vs
  ``b.grad_hess(s, hess=h)``;
* ``value_grad_hess``: the two unbound calls ``loss(s, y, g)`` + ``loss.grad_hess(s, y, g)``
  vs ``b.value_grad_hess(s)`` (``hess="diag"``);
* ``bind``: the one-off cost of ``loss.bind(y, g)``,

as the median of ``--repeats`` calls (at least 20) after warm-up calls, on
``--threads`` torch threads (default 1: the machine is shared). Prints a table with the
ratio unbound / bound.

    TORCHRANKBOOST_DATA=... python scripts/bench_bound.py
    python scripts/bench_bound.py --fold path/to/Fold1 --repeats 50 --losses exponential qbrank
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def losses():
    import torchrankboost.losses as L

    return {
        "exponential": ("ExponentialPairwiseLoss()", L.ExponentialPairwiseLoss),
        "exponential-normalize": ("ExponentialPairwiseLoss(normalize=True)",
                                  lambda: L.ExponentialPairwiseLoss(normalize=True)),
        "pnorm": ("PNormPushLoss(4)", lambda: L.PNormPushLoss(4.0)),
        "qbrank": ("QBRankLoss()", L.QBRankLoss),
        "qbrank-grade": ("QBRankLoss(tau='grade_difference')",
                         lambda: L.QBRankLoss(tau="grade_difference")),
        "hinge": ("PairwiseHingeLoss()", L.PairwiseHingeLoss),
        "squared-hinge": ("PairwiseHingeLoss(squared=True)",
                          lambda: L.PairwiseHingeLoss(squared=True)),
        "listmle": ("ListMLELoss()", L.ListMLELoss),
    }


DEFAULT = ["exponential", "qbrank", "hinge"]


def median_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def bench(loss, s, y, g, repeats):
    """``[(operation, unbound ms, bound ms)]`` for one loss."""
    b = loss.bind(y, g)
    rows = [("value", median_ms(lambda: loss(s, y, g), repeats),
             median_ms(lambda: b(s), repeats))]
    for hess in ("diag", "bound"):
        rows.append((f"grad_hess({hess})",
                     median_ms(lambda: loss.grad_hess(s, y, g, hess=hess), repeats),
                     median_ms(lambda: b.grad_hess(s, hess=hess), repeats)))

    def separate():
        loss(s, y, g)
        loss.grad_hess(s, y, g)

    rows.append(("value_grad_hess", median_ms(separate, repeats),
                 median_ms(lambda: b.value_grad_hess(s), repeats)))
    rows.append(("bind (once)", float("nan"), median_ms(lambda: loss.bind(y, g), repeats)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fold", default=None,
                    help="LETOR fold folder (default: mq2008/Fold1 under the data folder)")
    ap.add_argument("--losses", nargs="+", default=DEFAULT, choices=sorted(losses()))
    ap.add_argument("--repeats", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.repeats < 20:
        ap.error("--repeats must be at least 20")
    torch.set_num_threads(args.threads)

    from torchrankboost.data import load_letor_fold
    from torchrankboost.data import dataset_path

    fold = args.fold or dataset_path("mq2008", "Fold1")
    train, _, _ = load_letor_fold(fold)
    y, g = train.labels, train.groups
    s = torch.randn(y.shape[0], generator=torch.Generator().manual_seed(args.seed),
                    dtype=torch.float64)
    print(f"{fold}: train, {y.shape[0]} documents, {g.num_groups} queries, "
          f"{int(torch.unique(y).numel())} grades; float64 scores; "
          f"{args.threads} thread(s); median of {args.repeats} calls (ms)")
    table = losses()
    head = f"{'loss':<40} {'operation':<18} {'unbound':>9} {'bound':>9} {'ratio':>7}"
    print(head)
    print("-" * len(head))
    for name in args.losses:
        label, make = table[name]
        for op, t_u, t_b in bench(make(), s, y, g, args.repeats):
            ratio = "" if t_u != t_u else f"{t_u / t_b:6.2f}x"
            unb = "" if t_u != t_u else f"{t_u:9.2f}"
            print(f"{label:<40} {op:<18} {unb:>9} {t_b:9.2f} {ratio:>7}")
            label = ""


if __name__ == "__main__":
    main()
