"""Warm start (``init_model``, ``warm_start``, ``--init-model``), checkpoints and exact resume
(``Checkpoint``, ``resume=``, ``--checkpoint-every``/``--resume``, on 2 processes too)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from torchrankboost import Booster, RegressionTree
from torchrankboost.boosting.checkpoint import Checkpoint, load_checkpoint
from torchrankboost.boosting.papers import AdaBoost, PNormPush, RankBoost
from torchrankboost.losses import ExponentialPairwiseLoss

ROOT = Path(__file__).resolve().parents[2]


def _data(n=240, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 5, generator=g)
    y = ((X[:, 0] + torch.randn(n, generator=g) > 0).long()
         + (X[:, 1] + torch.randn(n, generator=g) > 0.5).long())
    return X, y, torch.arange(n) // 8


def _booster(n_rounds, **kw):
    return Booster(ExponentialPairwiseLoss(), RegressionTree(max_leaves=4, feature_fraction=0.6),
                   n_rounds=n_rounds, verbose=False, **kw)


class _InterruptAt:
    def __init__(self, rnd):
        self.rnd = rnd

    def on_round_end(self, ranker, record):
        if record.round == self.rnd:
            raise KeyboardInterrupt


def _same_model(a, b):
    ta, ma = a.state()
    tb, mb = b.state()
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert a.base_score == b.base_score and a.weights == b.weights


@pytest.mark.parametrize("make", [
    lambda n: _booster(n), lambda n: RankBoost(n_rounds=n), lambda n: PNormPush(n_rounds=n)],
    ids=["booster", "rankboost", "pnorm_push"])
def test_continuing_k_rounds_by_m_equals_a_k_plus_m_round_run(make):
    X, y, q = _data()
    full = make(9).fit(X, y, q)
    first = make(4).fit(X, y, q)
    algo = make(5)
    cont = algo.fit(X, y, q, init_model=first)
    assert cont.n_rounds == 9 and first.n_rounds == 4  # the given model is left as it was
    assert [r.round for r in algo.history_] == [5, 6, 7, 8, 9]
    assert torch.allclose(cont.predict(X), full.predict(X), rtol=0, atol=1e-9)


def test_init_model_from_a_path_with_early_stopping_counts_every_round(tmp_path):
    X, y, q = _data()
    first = _booster(3).fit(X, y, q)
    first.save(tmp_path / "m.safetensors")
    b = _booster(6)
    m = b.fit(X, y, q, init_model=tmp_path / "m.safetensors", eval_set=[(X, y, q)],
              early_stopping_rounds=50)
    assert m.n_rounds == b.best_round_ and 3 < b.best_round_ <= 9
    assert m.info["init_rounds"] == 3 and len(b.evals_result_["valid_0"]["ndcg@10"]) == 6


def test_init_model_refusals_are_one_line_value_errors(tmp_path):
    X, y, q = _data()
    first = _booster(2).fit(X, y, q)
    with pytest.raises(ValueError, match="AdaBoost cannot continue a model"):
        AdaBoost(n_rounds=2).fit(X, (y > 0).long(), q, init_model=first)
    with pytest.raises(ValueError, match="not both"):
        _booster(2).fit(X, y, q, init_model=first, resume=tmp_path / "c.safetensors")
    with pytest.raises(ValueError, match="init_score cannot be given"):
        _booster(2).fit(X, y, q, init_model=first, init_score=0.5)
    with pytest.raises(ValueError, match="init_model must be an Ensemble"):
        _booster(2).fit(X, y, q, init_model=3.0)
    with pytest.raises(ValueError, match="features"):
        _booster(2).fit(X[:, :4], y, q, init_model=first)


def test_estimator_warm_start_adds_the_missing_rounds():
    from torchrankboost import BoostedRanker

    X, y, q = (t.numpy() for t in _data())
    r = BoostedRanker(n_rounds=4, warm_start=True, seed=1, max_leaves=4).fit(X, y, qid=q)
    r.set_params(n_rounds=7)
    r.fit(X, y, qid=q)
    once = BoostedRanker(n_rounds=7, seed=1, max_leaves=4).fit(X, y, qid=q)
    assert r.n_rounds_ == 7 and len(r.history_) == 3
    assert np.abs(np.asarray(r.predict(X)) - np.asarray(once.predict(X))).max() <= 1e-9
    r.set_params(n_rounds=5)
    with pytest.raises(ValueError, match="must be at least the 7 rounds"):
        r.fit(X, y, qid=q)


@pytest.mark.parametrize("make", [
    lambda: _booster(10, subsample=0.5), lambda: RankBoost(n_rounds=10)],
    ids=["booster-subsample-feature-fraction", "rankboost"])
def test_interrupted_fit_resumed_from_its_checkpoint_is_the_same_model_bit_for_bit(
        tmp_path, make):
    X, y, q = _data()
    Xv, yv, qv = _data(80, seed=1)
    kw = dict(eval_set=[(Xv, yv, qv)], early_stopping_rounds=50)
    alone = make()
    whole = alone.fit(X, y, q, **kw)
    path = tmp_path / "ck.safetensors"
    with pytest.raises(KeyboardInterrupt):
        make().fit(X, y, q, callbacks=[Checkpoint(path, every=3), _InterruptAt(8)], **kw)
    assert load_checkpoint(path).round == 6
    again = make()
    resumed = again.fit(X, y, q, resume=path, **kw)
    _same_model(whole, resumed)
    assert torch.equal(whole.predict(X), resumed.predict(X))
    assert again.evals_result_ == alone.evals_result_
    assert (again.best_round_, again.best_score_) == (alone.best_round_, alone.best_score_)
    assert [r.round for r in again.history_] == list(range(1, 11))


def test_resume_refuses_the_checkpoint_of_another_fit(tmp_path):
    X, y, q = _data()
    path = tmp_path / "ck.safetensors"
    _booster(4, subsample=0.5).fit(X, y, q, callbacks=[Checkpoint(path, every=2)])
    with pytest.raises(ValueError, match="checkpoint is of another fit .seed"):
        _booster(4, subsample=0.5, seed=3).fit(X, y, q, resume=path)
    with pytest.raises(ValueError, match="n_docs was 240"):
        _booster(4, subsample=0.5).fit(X[:200], y[:200], q[:200], resume=path)
    with pytest.raises(ValueError, match="not a torchrankboost checkpoint"):
        m = tmp_path / "m.safetensors"
        _booster(1).fit(X, y, q).save(m)
        _booster(4).fit(X, y, q, resume=m)
    with pytest.raises(ValueError, match="every must be a positive integer"):
        Checkpoint(path, every=0)


# ------------------------------------------------------------------ the command line
def _write_letor(path, n_queries, seed):
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for qid in range(n_queries):
            for _ in range(8):
                x = rng.normal(size=5)
                y = int(np.clip(np.round(x[0] + x[1] + rng.normal()), 0, 2))
                f.write(f"{y} qid:{qid} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in
                                                     enumerate(x)) + "\n")


def _train(cwd, extra, *, background=False):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, "-m", "torchrankboost", "train", "--data", "train.txt", "--valid",
           "valid.txt", "--rounds", "40", "--max-leaves", "4", "--no-tensorboard", "-q",
           "-p", "subsample=0.5", "--learner-param", "feature_fraction=0.6",
           "--early-stopping", "100", "--nproc", "2"] + extra
    if background:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _kill_workers_in(folder: Path) -> None:
    """SIGKILL the processes (this test's training workers) whose working folder is
    ``folder``, by their ids."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder.resolve():
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                continue


@pytest.mark.slow
def test_cli_run_killed_after_a_checkpoint_resumes_to_the_same_model_on_2_processes(
        tmp_path):
    """``train --nproc 2 --checkpoint-every 3`` stopped (SIGTERM, then SIGKILL to any
    worker left) once a checkpoint is on disk, then ``--resume`` from it: the model of the run left alone, bit
    for bit (query subsampling, feature fraction and early-stopping state on)."""
    from torchrankboost.factory import load_model

    _write_letor(tmp_path / "train.txt", 30, 0)
    _write_letor(tmp_path / "valid.txt", 8, 1)
    alone = _train(tmp_path, ["-o", "alone.safetensors"])
    assert alone.returncode == 0, alone.stderr
    ck = tmp_path / "cut.checkpoint.safetensors"
    proc = _train(tmp_path, ["-o", "cut.safetensors", "--checkpoint-every", "3"],
                  background=True)
    try:
        t0 = time.monotonic()
        while not ck.exists() and proc.poll() is None and time.monotonic() - t0 < 240:
            time.sleep(0.002)
        os.killpg(proc.pid, signal.SIGTERM)  # torchrun passes it on to its workers
        proc.wait(timeout=60)
    finally:
        _kill_workers_in(tmp_path)  # workers run in sessions of their own: none may outlive
    assert not (tmp_path / "cut.safetensors").exists(), "the run ended before the kill"
    rnd = load_checkpoint(ck).round
    assert 3 <= rnd < 40 and rnd % 3 == 0
    res = _train(tmp_path, ["-o", "cut.safetensors", "--resume", str(ck)])
    assert res.returncode == 0, res.stderr
    a, b = load_model(tmp_path / "alone.safetensors"), load_model(tmp_path / "cut.safetensors")
    _same_model(a, b)
    X = torch.randn(50, 5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.predict(X), b.predict(X))


def load_damaged_checkpoint(case, mark):
    """Fuzz child: a damaged checkpoint is one-line ValueError, or loads exactly the clean
    checkpoint (its round, state and predictions)."""
    from torchrankboost.boosting.checkpoint import load_checkpoint as load

    mark("load")
    try:
        got = load(case["path"])
    except ValueError as exc:
        return {"outcome": "refused" if "\n" not in str(exc).strip() else "multi-line"}
    ref = load(case["clean"])
    X = torch.linspace(-3, 3, 50).reshape(10, 5)
    same = (got.meta == ref.meta and got.tensors.keys() == ref.tensors.keys()
            and all(torch.equal(got.tensors[k], ref.tensors[k]) for k in ref.tensors)
            and torch.equal(got.ensemble.predict(X), ref.ensemble.predict(X)))
    return {"outcome": "same" if same else "different"}


def test_fuzzed_checkpoints_are_refused_or_load_the_same(tmp_path):
    """Seeded byte damage of a checkpoint (flipped bits, truncation, inserted and deleted
    bytes), each load in a child process: one-line ValueError or the clean checkpoint,
    never a crash or a different state."""
    from fuzz_runner import damaged, run_cases

    X, y, q = _data()
    path = tmp_path / "ck.safetensors"
    _booster(4).fit(X, y, q, callbacks=[Checkpoint(path, every=2)])
    clean = path.read_bytes()
    rng = np.random.default_rng(37)
    cases = []
    for i in range(120):
        (tmp_path / f"d{i}.safetensors").write_bytes(damaged(clean, i, rng))
        cases.append({"path": str(tmp_path / f"d{i}.safetensors"), "clean": str(path)})
    results = run_cases(f"{__file__}:load_damaged_checkpoint", cases)
    bad = [(i, r) for i, r in enumerate(results) if r.get("outcome") not in ("refused", "same")]
    assert not bad, bad[:10]
    assert sum(r["outcome"] == "refused" for r in results) >= 100
