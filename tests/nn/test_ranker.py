"""NeuralRanker: it learns, stops early on the best epoch, resumes a checkpoint bit for bit,
takes the global batches of several ranks in one process, runs a step without any host
synchronisation, under autocast, and refuses bad options in one line."""

import pytest
import torch

from torchrankboost.boosting.checkpoint import Checkpoint
from torchrankboost.data import make_letor
from torchrankboost.metrics import ndcg_at_k
from torchrankboost.nn import NeuralModel, NeuralRanker, train
from torchrankboost.nn import ranker as ranker_module

from sync_counter import SyncCounter


def host_tensor(t):
    """Mark ``t`` as a tensor a GPU run holds on the host (see ``sync_counter``)."""
    setattr(t, "_sync_counter_host", True)


@pytest.fixture(scope="module")
def data():
    tr = make_letor(40, 12, 6, seed=1)
    va = make_letor(15, 12, 6, seed=2)
    return tr, va


def _fit(data, **options):
    tr, va = data
    small = {"d_model": 16} if options.get("model", "transformer") == "transformer" else {}
    ranker = NeuralRanker(**{"epochs": 4, "max_docs": 128, "model_params": small, **options})
    return ranker, ranker.fit(tr.X, tr.labels, tr.groups,
                              eval_set=[(va.X, va.labels, va.groups)])


def _same(a: NeuralModel, b: NeuralModel) -> bool:
    sa, sb = a.network.state_dict(), b.network.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("arch", ["mlp", "transformer"])
def test_fit_learns_and_records_every_epoch(data, arch):
    tr, va = data
    untrained = NeuralRanker(model=arch, epochs=1, learning_rate=1e-9, max_docs=128).fit(
        tr.X, tr.labels, tr.groups)
    ranker, model = _fit(data, model=arch, epochs=8, learning_rate=3e-3)
    assert isinstance(model, NeuralModel) and model.architecture == arch
    assert [r.round for r in ranker.history_] == list(range(1, 9))
    before = ndcg_at_k(untrained.predict(va.X, va.groups), va.labels, va.groups)
    after = ndcg_at_k(model.predict(va.X, va.groups), va.labels, va.groups)
    assert after > before


def test_early_stopping_returns_the_best_epoch(data):
    tr, va = data
    ranker = NeuralRanker(model="mlp", epochs=30, learning_rate=3e-2, max_docs=64)
    model = ranker.fit(tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)],
                       early_stopping_rounds=2)
    best = ranker.best_round_
    assert best is not None and len(ranker.history_) <= 30
    assert model.info["epochs"] == best
    again = NeuralRanker(model="mlp", epochs=best, learning_rate=3e-2, max_docs=64).fit(
        tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)])
    assert _same(model, again)


@pytest.mark.parametrize("batch_ranks", [1, 2])
def test_resume_is_bit_for_bit(data, tmp_path, batch_ranks):
    """Dropout, Adam's moments, the best epoch: a resumed fit ends where the uninterrupted
    one does, bit for bit."""
    opts = dict(model="transformer", batch_ranks=batch_ranks, epochs=4,
                model_params={"d_model": 16, "dropout": 0.2})
    _, full = _fit(data, **opts)
    path = tmp_path / "ck.safetensors"
    tr, va = data
    NeuralRanker(**{**opts, "epochs": 2, "max_docs": 128}).fit(
        tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)],
        callbacks=[Checkpoint(path, every=1)])
    resumed = NeuralRanker(**{**opts, "max_docs": 128}).fit(
        tr.X, tr.labels, tr.groups, eval_set=[(va.X, va.labels, va.groups)], resume=path)
    assert _same(full, resumed)
    with pytest.raises(ValueError, match="another fit"):
        NeuralRanker(**{**opts, "max_docs": 128, "seed": 5}).fit(
            tr.X, tr.labels, tr.groups, resume=path)


def test_global_batches_of_several_ranks_in_one_process(data):
    """batch_ranks=2 takes twice the documents a step (the global batch of two processes):
    half the steps of batch_ranks=1."""
    r1, _ = _fit(data, model="mlp", epochs=1)
    r2, _ = _fit(data, model="mlp", epochs=1, batch_ranks=2)
    steps = [r.extra["steps"] for r in (r1.history_[0], r2.history_[0])]
    assert steps[1] < steps[0]
    assert r1.history_[0].extra["queries"] == r2.history_[0].extra["queries"] == 40


@pytest.mark.parametrize("arch", ["mlp", "transformer"])
@pytest.mark.parametrize("loss", ["listnet", "lambdaloss", "yetirank"])
def test_a_step_makes_no_host_synchronisation(data, monkeypatch, arch, loss):
    """After the first epoch (the batches bound), a training step reads nothing on the
    host: the network, the loss, backward, Adam."""
    counts = []
    real = ranker_module.NeuralRanker._step

    def counted(self, run, *args):
        if run.epoch == 0:  # the first epoch binds each batch's loss
            return real(self, run, *args)
        for state in run.opt.state.values():  # Adam's step count lives on the host on a
            host_tensor(state["step"])          # GPU too (torch's non-capturable mode)
        with SyncCounter(where=True) as c:
            out = real(self, run, *args)
        counts.append((c.syncs, dict(c.by_site)))
        return out

    monkeypatch.setattr(ranker_module.NeuralRanker, "_step", counted)
    _fit(data, model=arch, loss=loss, epochs=2)
    assert counts and all(n == 0 for n, _ in counts), counts[0][1]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_close_to_float32(data, precision):
    _, full = _fit(data, model="transformer", epochs=2)
    ranker, half = _fit(data, model="transformer", epochs=2, precision=precision)
    tr, _ = data
    a, b = full.predict(tr.X, tr.groups), half.predict(tr.X, tr.groups)
    assert torch.isfinite(b).all() and half.info["precision"] == precision
    assert torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.9


def test_one_call_train_and_a_loss_object(data):
    from torchrankboost.losses import ListNetLoss

    tr, _ = data
    model = train(tr.X, tr.labels, tr.groups, model="mlp", epochs=1,
                  loss=ListNetLoss(reduction="sum"))
    assert model.predict(tr.X, tr.groups).shape == (tr.X.shape[0],)


@pytest.mark.parametrize("options, match", [
    ({"model": "cnn"}, "model must be"),
    ({"epochs": 0}, "epochs"),
    ({"learning_rate": -1.0}, "learning_rate"),
    ({"precision": "fp8"}, "precision"),
    ({"optimizer": "lbfgs"}, "optimizer"),
    ({"shuffle": "docs"}, "shuffle"),
    ({"max_docs": 1.5}, "max_docs"),
    ({"batch_ranks": 0}, "batch_ranks"),
])
def test_bad_options(options, match):
    with pytest.raises(ValueError, match=match):
        NeuralRanker(**options)


def test_bad_fit_arguments(data):
    tr, _ = data
    with pytest.raises(ValueError, match="sample_weight"):
        NeuralRanker().fit(tr.X, tr.labels, tr.groups, sample_weight=torch.ones(len(tr.X)))
    with pytest.raises(ValueError, match="reduction"):
        NeuralRanker(loss="listnet", loss_params={"reduction": "mean"}, epochs=1).fit(
            tr.X, tr.labels, tr.groups)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_fit_never_synchronises_in_a_step(data, monkeypatch, precision):
    """On a GPU: data moved once, every step after the first epoch free of synchronisation
    (torch's sync debug mode turns one into an error), scores as the CPU's of the same
    weights."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    real = ranker_module.NeuralRanker._step

    def strict(self, run, *args):
        if run.epoch == 0:
            return real(self, run, *args)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real(self, run, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(ranker_module.NeuralRanker, "_step", strict)
    tr, va = data
    ranker, model = _fit(data, model="transformer", epochs=3, device="cuda",
                         precision=precision)
    assert model.device.type == "cuda"
    on_gpu = model.predict(va.X, va.groups).cpu()
    on_cpu = model.to("cpu").predict(va.X, va.groups)
    assert (on_gpu - on_cpu).abs().max() < 1e-4
