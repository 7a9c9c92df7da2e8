"""GPU check: the one call (at most 10 minutes) that a session lent a GPU runs first.

On a machine with a CUDA device, these sections, each added to ``<out>/gpu_check.json`` and
the table ``<out>/README.md`` as soon as it ends (a run cut short keeps what it finished),
each with its wall time:

1. **trees**: per tree at ``--rows`` x ``--features`` (2.27M x 136: MSLR-WEB30K's size) with
   each of ``--leaves`` (31 and 255), on a synthetic LETOR-shaped set and the same random
   gradients: our GPU (``kernel="triton"``, the Triton backend; ``kernel="torch"``, the
   pure-torch backend), our CPU (the compiled kernels, ``--threads`` = every core) and
   LightGBM on the CPU (every core; the same leaves, 255 bins, no L2); the median seconds of
   up to ``--trees`` fits after one warm-up (fewer when one fit is slow: ``--cap`` seconds per
   implementation). With it the **identity**: the GPU trees, fitted on the CPU's prepared
   data moved to the GPU with the same gradients, against the CPU trees, every ``TreeModel``
   tensor bit for bit; and the GPU's bin codes against the CPU's.
2. **kernels**: the Triton kernels at the same size: ``batch_histograms`` with global int64
   atomics and with sorted runs, for the root (every row in one slot) and a batch (16 slots,
   half of the rows in none), the two checked equal (and equal to the torch backend's
   ``batch_histograms`` where it has one); ``route_rows``; ``apply_bins`` (checked equal to
   the torch backend's codes). Median milliseconds.
3. **losses**: forward + backward of the pairwise / listwise losses on ``--lists`` lists of
   ``--docs`` documents (5 grades) on CUDA and on the CPU.
4. **tests**: ``pytest -m cuda`` in a subprocess, given the time left of ``--budget``; its
   log in ``<out>/cuda_tests.log``.

Budget (H100 / H200, 16 cores; ``--budget`` 540 s by default, so that the call with its
start and a wheel's install ends well inside 10 minutes). Estimates, from runs at a tenth of
the size on a 2-core machine scaled by rows and cores: making 2.27M x 136 about 10 s, binning
it on the CPU 10-20 s and on the GPU a few seconds; LightGBM's dataset (built once) 10-20 s;
per leaf count, the CPU and LightGBM about 0.3-1.5 s a tree with every core, so under 10 s
each for a warm-up and ``--trees`` 5 fits, and each GPU backend at most ``--cap`` 45 s of
fits (an implementation whose tree took over ``cap / 4`` is not run at the next leaf count):
trees typically 1-2 minutes, at most about 4; kernels about 20 s (mostly compiling the
sorted-histogram kernel); losses about 20 s; the CUDA tests (about 100 small tests) get the
rest, 3-5 minutes (a timeout is reported as such, with what passed). A section that would
start with less than ``--reserve`` seconds left is skipped, and says so.

LightGBM is not installed on the lent machines, which have no internet: carry its wheel
(``pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux_2_28_x86_64 lightgbm`` into an ignored folder, ``pip install --no-index --no-deps
--target`` it there and put that folder on ``PYTHONPATH``); without it the table says
"LightGBM not installed" and the ratios to it are left out.

Without a CUDA device it prints "no CUDA device: nothing to check", writes nothing and exits
0. ``--dry-run-cpu`` runs the same code on the CPU with tiny sizes (no pytest run), the
"GPU" side on the CPU: the torch backend, and the Triton backend under Triton's interpreter
(``TRITON_INTERPRET=1``, set by the dry run when ``triton`` is not imported yet).

    python scripts/gpu_check.py                       # on a CUDA machine
    python scripts/gpu_check.py --leaves 31 --no-tests
    python scripts/gpu_check.py --dry-run-cpu --out gpu_check_dry_run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench_losses import make_data, our_losses  # scripts/ is on sys.path
from gpu_check_report import markdown

ROOT = Path(__file__).resolve().parents[1]
LOSSES = {"exponential": "ExponentialPairwiseLoss", "pairwise_hinge": "PairwiseHingeLoss",
          "qbrank_gd": "QBRankLoss", "listnet": "ListNetLoss", "ranknet": "RankNetLoss",
          "listmle": "ListMLELoss", "approx_ndcg": "ApproxNDCGLoss",
          "neural_ndcg": "NeuralNDCGLoss", "lambdaloss": "LambdaLoss",
          "lambdarank_exp": "LambdaRankExpLoss", "yetirank": "YetiRankLoss"}
TINY = {"rows": 2000, "features": 8, "leaves": [7, 15], "trees": 2, "lists": 4, "docs": 50,
        "repeats": 2, "cap": 30.0, "nn_queries": 20, "nn_epochs": 2}
GPU_KERNELS = ("triton", "torch")


class Clock:
    """Seconds since the start, and what is left of the budget."""

    def __init__(self, budget: float):
        self.t0, self.budget = time.perf_counter(), budget

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget - self.elapsed()


def timed(fn, repeats: int, device: torch.device, cap: float = float("inf")):
    """``(median seconds, number timed, last result)`` of ``fn()`` over up to ``repeats`` calls
    after one warm-up (synchronised), fewer when they would pass ``cap`` seconds in all (the
    warm-up alone when it took that long: then its time, 0 timed)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    out = fn()
    sync()
    warm = time.perf_counter() - t0
    times = []
    while len(times) < repeats and (warm + sum(times)) + (times[-1] if times else warm) <= cap:
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return (statistics.median(times) if times else warm), len(times), out


def run_cuda_tests(timeout: float, log: Path) -> dict:
    """``pytest -m cuda``, every test's outcome written to ``log`` as it runs (a run cut short
    at ``timeout`` still counts what passed)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-vv", "-rfE", "-p", "no:cacheprovider",
           "--continue-on-collection-errors"]
    t0 = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, text=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    passed = sum(" PASSED" in ln for ln in lines)
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    if rc is None:
        summary = f"timed out after {timeout:.0f} s with {passed} passed"
        failed = [ln for ln in lines if ln.endswith(("FAILED", "ERROR")) or " FAILED " in ln]
    else:
        summary = lines[-1].strip("= ") if lines else "no output"
    return {"command": " ".join(cmd[1:]), "returncode": rc, "summary": summary,
            "passed": passed, "failed": failed[:40], "log": log.name,
            "seconds": time.perf_counter() - t0}


def tree_data(rows: int, features: int):
    """Raw features (float32, NaNs), gradients and curvatures of a LETOR-shaped set."""
    from torchrankboost import make_letor

    d = make_letor(max(1, rows // 100), 100, features, seed=0, size_spread=0.0)
    g = torch.Generator().manual_seed(0)
    X = d.X.float()
    grad = torch.randn(X.shape[0], generator=g) + 0.5 * torch.nan_to_num(X[:, 0])
    hess = torch.rand(X.shape[0], generator=g) + 0.1
    return X, grad, hess


def moved(prepared, device):
    """``prepared`` (``BinnedFeatures``) with its tensors on ``device``."""
    from torchrankboost.kernels.binning import BinnedFeatures

    return BinnedFeatures(codes=prepared.codes.to(device), edges=prepared.edges.to(device),
                          num_bins=prepared.num_bins.to(device),
                          has_missing=prepared.has_missing.to(device),
                          missing_code=prepared.missing_code, n_bins=prepared.n_bins)


def learner(leaves: int, kernel: str):
    from torchrankboost import RegressionTree

    return RegressionTree(max_leaves=leaves, min_samples_leaf=20, kernel=kernel)


def compare_trees(gpu, cpu) -> dict:
    """Every ``TreeModel`` tensor of the GPU tree against the CPU tree's, bit for bit."""
    differs = [k for k in cpu._tensor_names
               if not (getattr(gpu, k).dtype == getattr(cpu, k).dtype
                       and torch.equal(getattr(gpu, k).cpu(), getattr(cpu, k)))]
    if gpu.depth != cpu.depth:
        differs.append("depth")
    return {"identical": not differs, "differs": differs, "leaves": cpu.num_leaves}


def lightgbm_params(leaves: int, threads: int) -> dict:
    return {"num_leaves": leaves, "min_data_in_leaf": 20, "min_sum_hessian_in_leaf": 1e-3,
            "lambda_l2": 0.0, "learning_rate": 1.0, "num_threads": threads, "verbose": -1,
            "max_bin": 255, "objective": "none", "deterministic": True}


def lightgbm_booster(X, leaves: int, threads: int, cache: dict):
    """``(booster, note)`` on LightGBM's dataset of ``X`` (built once, kept in ``cache``), or
    ``(None, why)`` when LightGBM cannot be had here."""
    try:
        import lightgbm as lgb
        import numpy as np
    except Exception as exc:  # ImportError, or a missing libgomp (OSError)
        return None, f"LightGBM not installed ({type(exc).__name__}: {exc}); carry its wheel"
    params = lightgbm_params(leaves, threads)
    t0 = time.perf_counter()
    if "lgb_dataset" not in cache:
        cache["lgb_dataset"] = lgb.Dataset(X.numpy(), label=np.zeros(X.shape[0]), params=params,
                                           free_raw_data=False).construct()
        cache["lgb_note"] = f"its dataset built in {time.perf_counter() - t0:.1f} s"
    return lgb.Booster(params=params, train_set=cache["lgb_dataset"]), cache["lgb_note"]


def time_lightgbm(data: dict, leaves: int, args) -> tuple:
    """``(seconds, timed, note)`` per LightGBM tree, or ``(None, 0, why)``."""
    booster, note = lightgbm_booster(data["X"], leaves, args.threads, data)
    if booster is None:
        return None, 0, note
    gn, hn = data["grad"].double().numpy(), data["hess"].double().numpy()
    sec, k, _ = timed(lambda: booster.update(fobj=lambda p, d: (gn, hn)), args.trees,
                      torch.device("cpu"), args.cap)
    return sec, k, note


def too_slow(name: str, prev: dict | None, cap: float) -> str | None:
    """Why ``name`` is not run at the next leaf count: its seconds per tree at the previous
    one passed a quarter of ``cap`` (a fit is not interrupted: the budget must hold)."""
    sec = None if prev is None else prev.get("seconds_per_tree", {}).get(name)
    if sec is not None and sec > cap / 4:
        return f"skipped: {sec:.1f} s per tree at {prev['leaves']} leaves"
    return None


def time_gpu(leaves: int, data: dict, args, device, clock, prev, ref, row) -> None:
    """The GPU fits of each backend into ``row``, with their identity to the CPU tree ``ref``."""
    tg, hg = (-data["grad"] / data["hess"]).to(device), data["hess"].to(device)
    for kernel in GPU_KERNELS:
        name = f"ours {device.type} ({kernel})"
        why = too_slow(name, prev, args.cap)
        if clock.left() < args.reserve:
            why = f"skipped: {clock.left():.0f} s left of the budget"
        if why is not None:
            row["notes"][name] = why
            continue
        tree = learner(leaves, kernel)
        try:
            sec, row["timed"][kernel], model = timed(lambda: tree.fit(data["gpu"], tg, hg),
                                                     args.trees, device, args.cap)
        except RuntimeError as exc:  # a backend that cannot run here says why
            row["notes"][name] = str(exc).splitlines()[0][:300]
            continue
        row["seconds_per_tree"][name] = sec
        row["identity"][f"{kernel} {device.type} vs cpu"] = compare_trees(model, ref)


def trees_at(leaves: int, data: dict, args, device, clock, prev) -> dict:
    """One leaf count: the seconds per tree of each implementation and the identity."""
    row = {"leaves": leaves, "seconds_per_tree": {}, "timed": {}, "notes": {}, "identity": {}}
    target, h = -data["grad"] / data["hess"], data["hess"]
    cpu_tree = learner(leaves, "auto")
    sec, row["timed"]["cpu"], ref = timed(lambda: cpu_tree.fit(data["cpu"], target, h),
                                          args.trees, torch.device("cpu"), args.cap)
    row["seconds_per_tree"][f"ours cpu ({cpu_tree.kernel_}, {args.threads} threads)"] = sec
    time_gpu(leaves, data, args, device, clock, prev, ref, row)
    sec, row["timed"]["lightgbm"], note = time_lightgbm(data, leaves, args)
    if sec is not None:
        row["seconds_per_tree"][f"lightgbm cpu ({args.threads} threads)"] = sec
    row["notes"]["lightgbm cpu"] = note
    return row


def check_trees(args, device, clock, data, r: dict) -> dict:
    """Every leaf count of ``args.leaves`` in turn, ``r`` written after each."""
    out = r["trees"] = {"rows": int(data["X"].shape[0]), "features": int(data["X"].shape[1]),
                        "trees": args.trees, "cap_seconds": args.cap,
                        "binning": data["binning"], "by_leaves": []}
    prev = None
    for leaves in args.leaves:
        if clock.left() < args.reserve:
            out["by_leaves"].append({"leaves": leaves, "skipped":
                                     f"{clock.left():.0f} s left of the budget"})
            continue
        prev = trees_at(leaves, data, args, device, clock, prev)
        out["by_leaves"].append(prev)
        write(r, args.out)
    return out


def build_data(args, device) -> dict:
    """The raw features, gradients, the CPU's prepared data and its copy on ``device``; the
    GPU's own binning compared with the CPU's."""
    t0 = time.perf_counter()
    X, grad, hess = tree_data(args.rows, args.features)
    t1 = time.perf_counter()
    pc = learner(31, "auto").prepare(X)
    t2 = time.perf_counter()
    own = learner(31, "auto").prepare(X.to(device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    binning = {"codes_identical": bool(torch.equal(own.codes.cpu(), pc.codes)),
               "edges_identical": bool(torch.equal(own.edges.cpu(), pc.edges)),
               "seconds": {"data": t1 - t0, "cpu": t2 - t1, "device": t3 - t2}}
    del own
    return {"X": X, "grad": grad, "hess": hess, "cpu": pc, "gpu": moved(pc, device),
            "binning": binning}


def histogram_cases(n: int, device) -> dict:
    """``case -> (slot (n,) int32, num_slots)``: the root; a batch of 16 slots, half the rows
    in none."""
    i = torch.arange(n, device=device)
    return {"root": (torch.zeros(n, dtype=torch.int32, device=device), 1),
            "batch16": ((i % 32 - 16).clamp(min=-1).to(torch.int32), 16)}


def check_histograms(backends: dict, prepared, args, device) -> tuple:
    """Median ms of each backend's ``batch_histograms`` on each case; whether all agree."""
    n = prepared.codes.shape[0]
    g = torch.Generator().manual_seed(1)
    q = torch.randint(-2 ** 40, 2 ** 40, (n, 2), generator=g).to(device)
    ms, agree = {}, {}
    for case, (slot, k) in histogram_cases(n, device).items():
        first = None
        for name, b in backends.items():
            sec, _, h = timed(lambda: b.batch_histograms(prepared, q, slot, k), args.repeats,
                              device, args.cap)
            ms[f"batch_histograms {name} {case}"] = sec * 1e3
            first = h if first is None else first
            agree[f"{name} {case}"] = bool(torch.equal(h, first))
            del h
    return ms, agree


def check_kernels(args, device, data) -> dict:
    """The Triton kernels one by one (see the module docstring)."""
    from torchrankboost.kernels.torch_backend import TorchBackend
    from torchrankboost.kernels.triton_backend import TritonBackend, kernels

    pg = data["gpu"]
    n = pg.codes.shape[0]
    why = TritonBackend().unavailable(device=device, data_dtype=pg.codes.dtype, num_rows=n)
    if why is not None:
        return {"note": why.reason}
    backends = {"atomic": TritonBackend(histogram="atomic")}
    notes = {}
    if kernels().INTERPRETED:
        notes["sorted"] = "not timed under the interpreter (its sort is slow)"
    else:
        backends["sorted"] = TritonBackend(histogram="sorted")
    if hasattr(TorchBackend, "batch_histograms"):
        backends["torch"] = TorchBackend()
    ms, agree = check_histograms(backends, pg, args, device)
    b = backends["atomic"]
    dev_i = lambda *v, dt=torch.int64: torch.tensor(v, dtype=dt, device=device)  # noqa: E731
    leaf = torch.zeros(n, dtype=torch.int32, device=device)
    route = (leaf, dev_i(0), dev_i(3), dev_i(True, dt=torch.bool), dev_i(1, dt=torch.int32))
    ms["route_rows (one split, every row)"] = timed(lambda: b.route_rows(pg, *route), args.repeats,
                                                    device, args.cap)[0] * 1e3
    Xd = data["X"].to(device)
    edges = pg.edges.to(Xd.dtype)
    sec, _, codes = timed(lambda: b.apply_bins(Xd, edges, missing_code=pg.missing_code,
                                               dtype=pg.codes.dtype), args.repeats, device, args.cap)
    ms["apply_bins"] = sec * 1e3
    ref = TorchBackend().apply_bins(Xd, edges, missing_code=pg.missing_code, dtype=pg.codes.dtype)
    agree["apply_bins vs torch"] = bool(torch.equal(codes, ref))
    return {"rows": n, "features": int(pg.codes.shape[1]), "ms": ms, "agree": agree,
            "notes": notes}


def check_losses(args, device) -> dict:
    from torchrankboost import Groups

    factories = our_losses()
    s, y = make_data(args.lists, args.docs, 5)
    out = {"lists": args.lists, "docs": args.docs, "grades": 5, "repeats": args.repeats,
           "seconds": {}}
    for key, cls in LOSSES.items():
        if key not in factories:
            out["seconds"][cls] = {"note": "not exported"}
            continue
        row = {}
        for dev in dict.fromkeys([device, torch.device("cpu")]):
            loss = factories[key][0]()
            sd, yd = s.to(dev), y.to(dev)
            g = Groups.from_sizes([args.docs] * args.lists, device=dev)

            def step():
                x = sd.clone().requires_grad_()
                loss(x, yd, g).backward()

            row[dev.type] = timed(step, args.repeats, dev)[0]
        if "cuda" in row:
            row["cpu_over_cuda"] = row["cpu"] / row["cuda"]
        out["seconds"][cls] = row
    return out


def check_neural(args, device) -> dict:
    """The neural trainer (a listwise Transformer, ListNet): seconds per epoch on the device
    (fp32 and bf16) and on the CPU, and how far the device's scores are from the CPU's
    model of the same weights."""
    from torchrankboost.data import make_letor
    from torchrankboost.nn import NeuralRanker

    d = make_letor(args.nn_queries, args.docs / 10, args.features, seed=0)
    out = {"queries": args.nn_queries, "documents": int(d.X.shape[0]),
           "features": args.features, "epochs": args.nn_epochs, "seconds_per_epoch": {}}
    for dev, precision in dict.fromkeys([(device, "fp32"), (device, "bf16"),
                                         (torch.device("cpu"), "fp32")]):
        ranker = NeuralRanker(model="transformer", epochs=args.nn_epochs, device=dev,
                              precision=precision, n_threads=args.threads)
        model = ranker.fit(d.X, d.labels, d.groups)
        per = [r.seconds for r in ranker.history_]
        key = f"{dev.type}_{precision}"
        out["seconds_per_epoch"][key] = statistics.median(per[1:] or per)
        if dev.type == "cuda" and precision == "fp32":
            on_dev = model.predict(d.X.to(dev), d.groups.to(dev)).cpu()
            out["predict_max_diff_vs_cpu"] = float(
                (on_dev - model.to("cpu").predict(d.X, d.groups)).abs().max())
    return out


def environment(device, args) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    versions = {}
    for mod in ("triton", "lightgbm", "numpy"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception as exc:  # not installed, or a broken install
            versions[mod] = f"not installed ({type(exc).__name__})"
    return {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cpu_count": os.cpu_count(), "threads": args.threads, "dry_run": args.dry_run_cpu,
            "versions": versions, "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def write(r: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(r, indent=2) + "\n")
    (out / "README.md").write_text(markdown(r))


def section(r: dict, key: str, fn, clock: Clock, args) -> None:
    """``r[key] = fn()`` with its wall time, or why it was skipped; then the files."""
    t0 = time.perf_counter()
    if clock.left() < args.reserve:
        r[key] = {"skipped": f"{clock.left():.0f} s left of the budget"}
    else:
        r[key] = fn()
    r.setdefault("seconds", {})[key] = time.perf_counter() - t0
    write(r, args.out)
    print(f"{key}: done in {r['seconds'][key]:.1f} s ({clock.elapsed():.0f} s in all)", flush=True)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_270_000)
    ap.add_argument("--features", type=int, default=136)
    ap.add_argument("--leaves", type=int, nargs="+", default=[31, 255])
    ap.add_argument("--trees", type=int, default=5, help="trees timed (median per tree)")
    ap.add_argument("--cap", type=float, default=45.0,
                    help="seconds of fits per implementation and leaf count, at most")
    ap.add_argument("--lists", type=int, default=100)
    ap.add_argument("--docs", type=int, default=1000, help="documents per list")
    ap.add_argument("--repeats", type=int, default=5, help="kernel and loss repeats (median)")
    ap.add_argument("--nn-queries", type=int, default=2000,
                    help="queries of the neural section (docs/10 documents each on average)")
    ap.add_argument("--nn-epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads of LightGBM and of torch on the CPU")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--reserve", type=float, default=30.0,
                    help="a section starts only with this many seconds left")
    ap.add_argument("--no-tests", action="store_true", help="skip pytest -m cuda")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu")
    ap.add_argument("--dry-run-cpu", action="store_true",
                    help="the same code on the CPU with tiny sizes, no pytest run")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.dry_run_cpu:
        for k, v in TINY.items():
            setattr(args, k, v)
        args.threads, device = 1, torch.device("cpu")
        if "triton" not in sys.modules:  # the Triton backend under its interpreter
            os.environ.setdefault("TRITON_INTERPRET", "1")
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    else:
        device = torch.device("cuda")
    clock = Clock(args.budget)
    torch.set_num_threads(args.threads)
    r = {"environment": environment(device, args)}
    data = build_data(args, device)
    r.setdefault("seconds", {})["data"] = clock.elapsed()
    section(r, "trees", lambda: check_trees(args, device, clock, data, r), clock, args)
    section(r, "kernels", lambda: check_kernels(args, device, data), clock, args)
    del data
    if device.type == "cuda":
        torch.cuda.empty_cache()
    section(r, "losses", lambda: check_losses(args, device), clock, args)
    section(r, "neural", lambda: check_neural(args, device), clock, args)
    skip = "dry run" if args.dry_run_cpu else "--no-tests" if args.no_tests else None
    section(r, "tests", lambda: ({"skipped": skip} if skip else
                                 run_cuda_tests(max(30.0, clock.left() - 10),
                                                args.out / "cuda_tests.log")), clock, args)
    print(markdown(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
