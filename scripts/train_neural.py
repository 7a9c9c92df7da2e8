#!/usr/bin/env python
"""Train an MLP scorer with any torchrankboost loss on LETOR data (default: built-in data).

The losses are ordinary ``torch.nn.Module``s over flat (ragged) scores, so a neural ranker
trains with them like with any PyTorch loss. Batches are whole queries packed up to a
document budget (:func:`torchrankboost.data.iterate_query_batches`), never padded. The run
is logged to TensorBoard with :class:`torchrankboost.tensorboard.TensorBoardLogger`.

Examples::

    python scripts/train_neural.py --epochs 2                 # built-in synthetic data
    python scripts/train_neural.py --loss pnorm_push --loss-param p=4 --epochs 30
    python scripts/train_neural.py --data "$TORCHRANKBOOST_DATA/mq2008/Fold1" --loss hinge
    python scripts/train_neural.py --data mq2008/Fold1 --device cuda
    python scripts/train_neural.py --data mq2008/Fold1 --normalize -o mlp.safetensors
    python scripts/train_neural.py score mlp.safetensors data/mq2008/Fold1/test.txt -o scores.txt
    python scripts/train_neural.py --clicks --debias dla --eta 1 --data mq2008/Fold1

``--data`` takes a built-in name (``synthetic``, the default, or ``wdbc``) or a LETOR fold
folder (``train.txt``/``vali.txt``/``test.txt``); see :func:`torchrankboost.data.data_root`
for where the project keeps real data sets.

Prints the test NDCG@10 of the untrained network and of the trained one (the epoch with the
best validation NDCG@10), and where the TensorBoard logs are.

**Clicks.** ``--clicks`` trains on simulated clicks (a production ranker on 1 % of the
training queries, its ``--top-k`` shown in ``--sessions`` position-based sessions with
examination ``(1/p)^--eta``) with the ``--debias`` correction (:mod:`torchrankboost.clicks.neural`:
``naive``, ``ipw`` with the true propensities, ``em``/``dla`` propensities re-estimated each
epoch, ``additive`` ``f(x) + g(position)``); validation and test use the true labels; the
propensities are logged per epoch (``diagnostics/propensity_p<k>``) and printed. One process.

**Saving and scoring.** ``-o PATH`` saves the kept network (the best epoch's) in the
library's model-file format (:mod:`torchrankboost._modelfile`: safetensors, no pickle): the
weights as tensors and, as JSON metadata, what rebuilds it — the architecture and its sizes,
the feature count, the preprocessing (``--normalize``, the feature numbering of the training
files) and the loss it was trained with (its ``get_params`` description). ``score MODEL FILE``
applies it to an SVMlight/LETOR file (features padded to the model's count, the stored
preprocessing applied) and writes one score per line, in file order (``-o`` a file, default
standard output). :func:`load_network` rebuilds the network in Python; it validates the file
(the tensors' names and shapes against the stored architecture, finite weights) and raises a
one-line ``ValueError`` naming the file.

**Several processes.** Launched by ``torchrun`` (``WORLD_SIZE`` in the environment) the
script trains data-parallel, one process per device::

    python -m torch.distributed.run --standalone --nproc-per-node 2 scripts/train_neural.py --epochs 2
    torchrun --standalone --nproc-per-node 4 scripts/train_neural.py --data mq2008/Fold1 --device cuda

It initialises the process group (gloo on CPU, NCCL with ``--device cuda``, each process
on the GPU of its ``LOCAL_RANK``), wraps the network in ``DistributedDataParallel``, deals
the training queries to the ranks with
:class:`~torchrankboost.data.DistributedQueryBatchSampler` (``--max-docs`` is the
budget of one rank's batch) and normalises each step's loss over the queries of all ranks
(the loss summed per rank, scaled by :func:`~torchrankboost.parallel.global_mean_loss`:
the gradient is that of the mean over all the step's queries). Validation and test metrics
are computed on each rank's shard and combined (:func:`~torchrankboost.parallel.global_metric`:
the all-reduced sum of per-query values over the all-reduced query count). Rank 0 alone
prints and writes TensorBoard (the per-epoch validation score histograms show rank 0's
shard; the test histogram and curves gather every rank's scores).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

DEFAULT_DATA = "synthetic"
#: the model-file metadata key of a saved network and its format version
NETWORK_KEY = "neural_ranker"
NETWORK_FORMAT = 1
#: per-query min-max feature scaling (:func:`torchrankboost.data.normalize_per_query`)
NORMALIZE = "per_query_min_max"


def build_mlp(n_features: int, hidden: int = 64, layers: int = 2, dropout: float = 0.1) -> nn.Module:
    """``n_features → hidden → … → 1`` with ReLU; returns per-document scores ``(n,)``."""
    mods, d = [], n_features
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.ReLU(), nn.Dropout(dropout)]
        d = hidden
    mods.append(nn.Linear(d, 1))
    return nn.Sequential(*mods)


def score(model: nn.Module, X: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return torch.cat([model(X[i:i + chunk]).squeeze(-1) for i in range(0, X.shape[0], chunk)]) \
            if X.shape[0] else X.new_zeros(0)


def evaluate(model, data, metrics, ctx=None):
    """``({metric: value}, scores)``; with an enabled context ``data`` is this rank's shard
    and the values are over every rank's queries."""
    s = score(model, data.X)
    if ctx is None or not ctx.enabled:
        return {m.name: m(s, data.labels, data.groups) for m in metrics}, s
    from torchrankboost.parallel import global_metric

    return {m.name: global_metric(m, s, data.labels, data.groups, context=ctx)
            for m in metrics}, s


def load(args):
    """``(train, valid, test)`` from ``--data``: a built-in name or a LETOR fold folder."""
    from torchrankboost.data import BUILTIN, load_builtin, load_data

    if args.data.strip().lower() in BUILTIN and not Path(args.data).exists():
        return load_builtin(args.data, seed=args.seed, n_queries=args.synthetic_queries,
                            docs_per_query=20, n_features=30)
    try:
        train, valid, test, _ = load_data(args.data, seed=args.seed)
    except (ValueError, OSError) as exc:
        sys.exit(f"train_neural.py: error: {exc}")
    if valid is None or test is None:
        sys.exit(f"train_neural.py: error: {args.data} is not a LETOR fold folder "
                 "(train.txt, vali.txt, test.txt)")
    return train, valid, test


def normalized(data):
    """``data`` with per-query min-max scaled features (as ``--normalize`` of the CLI)."""
    from dataclasses import replace

    from torchrankboost.data import normalize_per_query

    return replace(data, X=normalize_per_query(data.X, data.groups))


def slice_queries(data, n_queries: int):
    """The first ``n_queries`` queries of a RankingData (for quick runs)."""
    from torchrankboost.data import slice_queries as slice_range

    return slice_range(data, 0, min(n_queries, data.num_queries))


# ------------------------------------------------------------------ saving and scoring
def network_meta(args, n_features: int, entry, loss_params, loss_fn, zero_based) -> dict:
    """The JSON description stored beside the weights: what :func:`load_network` needs to
    rebuild the network and the file reader to prepare data as in training."""
    from torchrankboost.params import describe

    return {"format": NETWORK_FORMAT, "architecture": "mlp", "n_features": int(n_features),
            "hidden": int(args.hidden), "layers": int(args.layers),
            "dropout": float(args.dropout),
            "preprocessing": {"normalize": NORMALIZE if args.normalize else None,
                              "zero_based": zero_based},
            "loss": {"name": entry.name, "params": dict(loss_params),
                     "description": describe(loss_fn)},
            "trained": {"data": str(args.data), "epochs": int(args.epochs),
                        "seed": int(args.seed), "lr": float(args.lr)}}


def save_network(path, model: nn.Module, meta: dict) -> None:
    """Write ``model``'s weights and ``meta`` through the library's model-file writer
    (atomic; safetensors, no pickle)."""
    from torchrankboost._modelfile import write_model_file

    write_model_file(path, dict(model.state_dict()), NETWORK_KEY, meta, what="neural ranker")


def _int_field(meta: dict, key: str, low: int) -> int:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{key} must be an integer >= {low}, got {v!r}")
    return v


def _check_network_meta(meta: dict) -> None:
    """``ValueError(problem)`` unless ``meta`` describes a network this script builds."""
    if meta.get("format") != NETWORK_FORMAT:
        raise ValueError(f"unknown format {meta.get('format')!r} (this script reads "
                         f"{NETWORK_FORMAT})")
    if meta.get("architecture") != "mlp":
        raise ValueError(f"unknown architecture {meta.get('architecture')!r}")
    for key, low in (("n_features", 1), ("hidden", 1), ("layers", 0)):
        _int_field(meta, key, low)
    d = meta.get("dropout")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
        raise ValueError(f"dropout must be a number in [0, 1), got {d!r}")
    pre = meta.get("preprocessing")
    if not isinstance(pre, dict) or pre.get("normalize") not in (None, NORMALIZE) or \
            pre.get("zero_based") not in (None, True, False):
        raise ValueError(f"unknown preprocessing {pre!r}")


def load_network(path, *, device=None):
    """``(model, meta)``: the network saved by ``-o`` rebuilt from its metadata, in eval
    mode. The file is validated (format, architecture, preprocessing; the tensors' names
    and shapes against the architecture; finite weights): a bad file raises a one-line
    ``ValueError`` naming it."""
    from torchrankboost._modelfile import ModelFileError, read_model_file
    from torchrankboost.nn.model import check_state

    meta, tensors = read_model_file(path, NETWORK_KEY, "neural ranker", device="cpu")
    try:
        _check_network_meta(meta)
        model = build_mlp(meta["n_features"], meta["hidden"], meta["layers"],
                          float(meta["dropout"]))
        check_state(model, tensors)
    except ValueError as exc:
        raise ModelFileError(f"{path}: invalid model file: {exc}") from None
    model.load_state_dict(tensors)
    return model.to(device or "cpu").eval(), meta


def score_file(model_path, data_path, *, device="cpu"):
    """``(data, scores)``: the saved network applied to an SVMlight/LETOR file read as in
    training (the stored feature numbering, features padded to the stored count, the stored
    normalisation); scores ``(n,)`` in the order of the file's lines."""
    from torchrankboost.data import load_file, normalize_per_query, pad_features

    dev = torch.device(device)
    model, meta = load_network(model_path, device=dev)
    pre, F = meta["preprocessing"], meta["n_features"]
    zb = "auto" if pre.get("zero_based") is None else pre["zero_based"]
    data = load_file(data_path, zero_based=zb)
    if data.num_features > F:
        raise ValueError(f"{data_path}: has {data.num_features} features, the model "
                         f"{model_path} expects {F}")
    data = pad_features(data, F)
    X = data.X
    if pre.get("normalize") == NORMALIZE:
        X = normalize_per_query(X, data.groups)
    s = score(model, X.to(dev)).cpu()
    if data.row is not None:  # back to file order if the reader regrouped the rows
        s = torch.empty_like(s).index_copy_(0, data.row, s)
    return data, s


def score_main(argv) -> int:
    """``train_neural.py score MODEL FILE [-o OUT] [--device D]``: one score per line."""
    ap = argparse.ArgumentParser(prog="train_neural.py score",
                                 description="Score an SVMlight/LETOR file with a network "
                                             "saved by train_neural.py -o.")
    ap.add_argument("model")
    ap.add_argument("file")
    ap.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="output file (default: standard output)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    from torchrankboost._io import atomic_write

    try:
        _, s = score_file(args.model, args.file, device=args.device)
    except (ValueError, OSError, RuntimeError) as exc:
        sys.exit(f"train_neural.py score: error: {str(exc).splitlines()[0]}")
    text = "".join(f"{float(v)!r}\n" for v in s.tolist())
    if args.output:
        atomic_write(args.output, lambda fh: fh.write(text))
    else:
        sys.stdout.write(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from torchrankboost.clicks.neural import NAIVE, NEURAL_DEBIAS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help="a built-in data set (synthetic, wdbc) or a LETOR fold folder "
                         f"(default {DEFAULT_DATA})")
    ap.add_argument("--loss", default="exponential",
                    help="loss name (torchrankboost list losses), default exponential")
    ap.add_argument("--loss-param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    ap.add_argument("--max-docs", type=int, default=1024, help="documents per batch (budget)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-queries", type=int, default=None,
                    help="use only the first N training queries (quick runs)")
    ap.add_argument("--synthetic-queries", type=int, default=300)
    ap.add_argument("--normalize", action="store_true",
                    help="per-query min-max feature scaling (stored in a saved model)")
    ap.add_argument("--output", "-o", default=None, metavar="PATH",
                    help="save the kept network (safetensors + JSON metadata); score files "
                         "with: train_neural.py score PATH FILE")
    ap.add_argument("--clicks", action="store_true",
                    help="train on simulated clicks (position-based, a production ranker's "
                         "top --top-k) instead of the labels; evaluate on the labels")
    ap.add_argument("--debias", default=NAIVE, choices=NEURAL_DEBIAS,
                    help="with --clicks: naive (no correction) or a debiasing method (see "
                         "`torchrankboost list debias`; em and dla propensities per epoch)")
    ap.add_argument("--eta", type=float, default=1.0, help="--clicks: examination (1/p)^eta")
    ap.add_argument("--sessions", type=int, default=20_000, help="--clicks: sessions")
    ap.add_argument("--top-k", type=int, default=10, help="--clicks: positions shown")
    ap.add_argument("--logdir", default=None, help="default runs/neural-<loss>-<timestamp>")
    ap.add_argument("--no-tensorboard", action="store_true")
    ap.add_argument("--threads", type=int, default=1, metavar="N",
                    help="CPU threads of torch (default 1: small tensor operations stall with "
                         "more on a busy machine)")
    ap.add_argument("--quiet", "-q", action="store_true")
    return ap


def make_loss(args, distributed: bool = False):
    """``(registry entry, loss parameters, loss module)``; bad names exit with one line.
    Several processes: the loss is summed per rank (the global normalisation scales it)."""
    import inspect

    from torchrankboost import registry
    from torchrankboost.cli import parse_params

    try:
        loss_params = parse_params(args.loss_param, "--loss-param")
        entry = registry.lookup("loss", args.loss)
        kwargs = dict(loss_params)
        if distributed and kwargs.get("reduction", "sum") != "sum":
            raise ValueError("under torchrun the loss is normalised over the queries of all "
                             "ranks by the script; drop --loss-param reduction=...")
        if "reduction" in inspect.signature(entry.resolve()).parameters:
            # batch-size independent step sizes; several processes: sum, scaled globally
            kwargs.setdefault("reduction", "sum" if distributed else "mean")
        if entry.name == "smooth_margin":
            kwargs.setdefault("scale", 1.0)  # a network has no ‖λ‖₁: minimise ln F̃ itself
        return entry, loss_params, entry.create(**kwargs)
    except Exception as exc:  # one line, no traceback
        sys.exit(f"train_neural.py: error: {exc}")


def make_device(name: str, distributed: bool = False) -> torch.device:
    """The device; under torchrun ``cuda`` means the GPU of this process's ``LOCAL_RANK``."""
    try:
        device = torch.device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("CUDA is not available")
        if distributed and device.type == "cuda" and device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        if distributed and device.type == "cuda":
            torch.cuda.set_device(device)
    except (RuntimeError, ValueError) as exc:
        sys.exit(f"train_neural.py: error: bad --device {name!r}: {exc}")
    return device


def launched_by_torchrun() -> bool:
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def init_distributed(device: torch.device):
    """Initialise the process group of a torchrun launch (gloo on CPU, NCCL on CUDA) and
    return ``(context, owned)``: ``owned`` when this call created the group."""
    import torch.distributed as dist

    from torchrankboost.parallel import get_context

    owned = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        owned = True
    return get_context(True), owned


def make_logger(args, entry, loss_params, device, ctx=None):
    from torchrankboost.tensorboard import TensorBoardLogger, default_logdir

    if args.no_tensorboard or (ctx is not None and not ctx.is_main):
        return None
    logdir = args.logdir or default_logdir(f"neural-{entry.name}")
    # the same HParams columns as a boosting run (algorithm, loss, learner, learning rate,
    # rounds = epochs, seed, data), the network's settings as learner.<setting>
    return TensorBoardLogger(logdir, hparams={
        "algorithm": "neural", "loss": entry.name,
        **{f"loss.{k}": v for k, v in loss_params.items()},
        "learner": "mlp", "learner.hidden": args.hidden, "learner.layers": args.layers,
        "learner.dropout": args.dropout, "learning_rate": args.lr, "n_rounds": args.epochs,
        "seed": args.seed, "data": Path(str(args.data)).name,
        "weight_decay": args.weight_decay, "max_docs": args.max_docs,
        **({"world_size": ctx.world_size} if ctx is not None else {})})


def batches(args, train, epoch, sampler):
    """The epoch's training batches: this rank's (``sampler``) or, in one process, the
    loader-free shuffled batches."""
    from torchrankboost.data import iterate_query_batches, take_queries

    if sampler is None:
        yield from iterate_query_batches(train.X, train.labels, train.groups,
                                         max_docs=args.max_docs, shuffle=True,
                                         seed=args.seed * 100003 + epoch)
        return
    sampler.set_epoch(epoch)
    for queries in sampler:
        yield take_queries(train.X, train.labels, train.groups, queries)


def train_epochs(args, model, opt, loss_fn, train, valid, metrics, logger, best, ctx=None,
                 net=None):
    """The epoch loop; ``best`` = ``(valid NDCG@10, state dict, epoch)`` of the start.
    Several processes: ``net`` is the ``DistributedDataParallel`` wrapper of ``model``,
    ``valid`` this rank's shard. Returns ``(best, steps)``."""
    from torchrankboost.parallel import global_mean_loss
    from torchrankboost.data import DistributedQueryBatchSampler
    from torchrankboost.boosting.progress import ProgressCallback

    dist = ctx is not None and ctx.enabled
    net = model if net is None else net
    sampler = (DistributedQueryBatchSampler(train.groups, max_docs=args.max_docs,
                                            seed=args.seed * 100003) if dist else None)
    progress = ProgressCallback(total=args.epochs, quiet=args.quiet or not (ctx is None
                                                                          or ctx.is_main),
                                desc="epoch", every=1)
    progress.start()
    step, t0 = 0, time.perf_counter()
    per_query = getattr(loss_fn, "reduction", "sum") == "mean"  # already a mean over queries
    stop = False
    update = getattr(loss_fn, "epoch_update", None)  # --clicks em/dla: per epoch
    for epoch in range(args.epochs):
        if update is not None and update(score(model, train.X), epoch) and logger is not None:
            logger.log_step(step, {f"diagnostics/{k}": v
                                   for k, v in loss_fn.diagnostics().items()})
        model.train()
        ep_loss, nb = 0.0, 0
        for Xb, yb, gb in batches(args, train, epoch, sampler):
            s = net(Xb).squeeze(-1)
            if dist:  # the DDP-averaged gradient is that of the mean over all ranks' queries
                loss, mean = global_mean_loss(loss_fn(s, yb, gb), gb.num_groups, ctx,
                                              with_mean=True)
            else:
                loss = loss_fn(s, yb, gb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            step += 1
            # per query, like the boosting runs' metrics/loss_per_query
            per_q = (mean if dist else float(loss.detach()) if per_query
                     else float(loss.detach()) / max(gb.num_groups, 1))
            ep_loss += mean if dist else float(loss.detach())
            nb += 1
            if logger is not None:
                logger.log_step(step, {"metrics/loss_per_query": per_q,
                                       "round/grad_norm": gnorm})
            if args.max_steps is not None and step >= args.max_steps:
                stop = True
                break
        val, vs = evaluate(model, valid, metrics, ctx)
        scalars = {"train/epoch_loss": ep_loss / max(nb, 1),
                   **{f"valid/{k}": v for k, v in val.items()}}
        if logger is not None:
            logger.log_step(step, {"round/epoch_loss_per_query": scalars["train/epoch_loss"],
                                   **{f"metrics/valid/{k}": v for k, v in val.items()}})
            logger.log_step(step, {"metrics/seconds_per_epoch":
                                   (time.perf_counter() - t0) / (epoch + 1)})
            logger.log_histograms(step, {"scores/valid": vs})
        progress.update(epoch, scalars)
        if val["ndcg@10"] > best[0]:
            best = (val["ndcg@10"], copy.deepcopy(model.state_dict()), epoch + 1)
        if stop:
            break
    progress.finish()
    return best, step


def click_training(args, train, loss_fn, ctx):
    """``--clicks``: ``train`` with simulated clicks as its labels (``(n, 2)``: click-through
    rate, position; :mod:`torchrankboost.clicks.neural`) and the debiased loss around
    ``loss_fn``."""
    from dataclasses import replace

    from torchrankboost.clicks.neural import ClickLoss, simulate_training_clicks

    if ctx is not None:
        sys.exit("train_neural.py: error: --clicks runs in one process")
    labels, prop = simulate_training_clicks(train, eta=args.eta, n_sessions=args.sessions,
                                            top_k=args.top_k, seed=args.seed)
    try:
        click_loss = ClickLoss(loss_fn, args.debias, n_positions=args.top_k, propensity=prop)
    except ValueError as exc:
        sys.exit(f"train_neural.py: error: {exc}")
    train = replace(train, labels=labels.to(train.X.dtype))
    click_loss.bind_training(train.labels, train.groups)
    return train, click_loss


def shard_eval(data, ctx):
    """This rank's queries of an evaluation split (the whole split in one process)."""
    if ctx is None or not ctx.enabled:
        return data
    try:
        return data.shard(ctx.rank, ctx.world_size)
    except ValueError as exc:
        sys.exit(f"train_neural.py: error: {exc}")


def main(argv=None):
    """Train (the result as a dict) or, with ``score`` first, score a file (exit status)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["score"]:
        return score_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.threads < 1:
        sys.exit(f"train_neural.py: error: --threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    if args.output:  # before any work: a folder, read-only, an input...
        from torchrankboost.cli import CLIError
        from torchrankboost.cli.inputs import check_output

        try:
            check_output(args.output, [Path(args.data)] if Path(args.data).exists() else [])
        except CLIError as exc:
            sys.exit(f"train_neural.py: error: {exc}")
    distributed = launched_by_torchrun()
    entry, loss_params, loss_fn = make_loss(args, distributed)
    device = make_device(args.device, distributed)
    ctx, owned = init_distributed(device) if distributed else (None, False)
    if not owned:
        return run(args, entry, loss_params, loss_fn, device, ctx)
    import gc

    import torch.distributed as dist

    try:
        result = run(args, entry, loss_params, loss_fn, device, ctx)
        # the DDP wrapper (kept alive by reference cycles) must go before the process
        # group, and no rank may tear the group down while another still uses it
        gc.collect()
        ctx.barrier()
        return result
    finally:
        dist.destroy_process_group()


def run(args, entry, loss_params, loss_fn, device, ctx) -> dict:
    from torchrankboost import registry

    main_rank = ctx is None or ctx.is_main
    torch.manual_seed(args.seed)  # the same initial network on every rank
    train, valid, test = load(args)
    zero_based = getattr(train, "zero_based", None)
    if args.train_queries:
        train = slice_queries(train, args.train_queries)
    if args.normalize:
        train, valid, test = (normalized(d) for d in (train, valid, test))
    if args.clicks:
        train, loss_fn = click_training(args, train, loss_fn, ctx)
    valid, test = shard_eval(valid, ctx), shard_eval(test, ctx)
    train, valid, test = (d.to(device) for d in (train, valid, test))
    loss_fn = loss_fn.to(device) if isinstance(loss_fn, nn.Module) else loss_fn

    model = build_mlp(train.num_features, args.hidden, args.layers, args.dropout).to(device)
    net = None
    if ctx is not None:
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(model, device_ids=[device.index]
                                      if device.type == "cuda" else None)
    params = list(model.parameters())
    if args.clicks:  # the additive position term learns with the network (own step size)
        params = [{"params": params}, {"params": list(loss_fn.parameters()),
                                       "weight_decay": 0.0, "lr": max(args.lr, 0.01)}]
    opt = torch.optim.Adam(params, lr=args.lr, weight_decay=args.weight_decay)
    ndcg10 = registry.metric("ndcg@10")
    metrics = [ndcg10, registry.metric("map"), registry.metric("ndcg@5")]

    before, _ = evaluate(model, test, [ndcg10], ctx)
    valid0, _ = evaluate(model, valid, [ndcg10], ctx)
    logger = make_logger(args, entry, loss_params, device, ctx)
    if logger is not None:
        logger.log_step(0, {"metrics/valid/ndcg@10": valid0["ndcg@10"]})

    t0 = time.perf_counter()
    best, step = train_epochs(args, model, opt, loss_fn, train, valid, metrics, logger,
                              (valid0["ndcg@10"], copy.deepcopy(model.state_dict()), 0),
                              ctx, net)
    seconds = time.perf_counter() - t0
    model.load_state_dict(best[1])
    after, ts = evaluate(model, test, metrics, ctx)
    labels = test.labels
    if ctx is not None and ctx.enabled:  # the test curves over every rank's documents
        parts = ctx.all_gather_object((ts.cpu(), test.labels.cpu()))
        ts, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    if logger is not None:
        logger.log_histograms(step, {"scores/test": ts})
        logger.log_curves(step, labels, ts, tag="test")
        logger.log_hparams(None, {**{f"test/{k}": v for k, v in after.items()},
                                  "test/untrained_ndcg@10": before["ndcg@10"],
                                  "valid/ndcg@10": best[0], "best_round": best[2],
                                  "seconds": seconds}, step=step)
        logger.close()

    if args.output and main_rank:
        save_network(args.output, model, network_meta(args, train.num_features, entry,
                                                      loss_params, loss_fn, zero_based))
        print(f"network saved to {args.output}")
    if main_rank:
        where = f"{device}" if ctx is None else f"{device}, {ctx.world_size} processes"
        print(f"loss {entry.name}: test NDCG@10 before {before['ndcg@10']:.4f}  after "
              f"{after['ndcg@10']:.4f}  (best epoch {best[2]}, {step} steps, {seconds:.1f} s, "
              f"{where})")
    if logger is not None:
        print(f"TensorBoard logs in {logger.logdir}; view with: tensorboard --logdir "
              f"{Path(logger.logdir).parent}")
    clicks = loss_fn.diagnostics() if args.clicks else None
    if clicks and main_rank:
        print("clicks: " + " ".join(f"{k} {v:.3f}" for k, v in clicks.items()))
    return {"loss": entry.name, "before": before["ndcg@10"], "after": after["ndcg@10"],
            "clicks": clicks,
            "best_epoch": best[2], "steps": step, "seconds": seconds,
            "logdir": None if logger is None else logger.logdir,
            "world_size": 1 if ctx is None else ctx.world_size, "model": model,
            "output": args.output}


if __name__ == "__main__":
    out = main()
    sys.exit(out if isinstance(out, int) else 0)
