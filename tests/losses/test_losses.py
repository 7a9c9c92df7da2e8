"""Every registered loss as a neural ranker's training loss (``torchrankboost.losses``):

* **no host synchronisation after bind**: ``loss.bind(labels, groups)`` reads what it
  needs on the host once; then the forward (``bound(scores)``) and its backward make no
  host synchronisation — no ``item``/``tolist``/``bool`` of a device tensor, no
  data-dependent shape (``nonzero``, boolean-mask indexing, ``unique``, ``bincount``...) —
  counted on the CPU by :class:`SyncCounter` (``tests/sync_counter.py``), which treats every
  tensor not made on the host as a device tensor: what a GPU run would wait for;
* **mixed precision**: under ``torch.autocast`` (bfloat16 on the CPU) every loss gives a
  finite value and gradient, close to the float32 ones at the same (bf16-rounded) scores.
"""

import pytest
import torch

from sync_counter import SyncCounter
from torchrankboost import Groups, registry

#: constructor options of the registered losses that need some (the others: defaults)
OPTIONS = {"smooth_margin": {"scale": 1.0}}
#: option variants whose kernels take other paths
VARIANTS = [("lambdaloss", {"k": 3}), ("lambdaloss", {"scheme": "ndcgLoss1"}),
            ("listnet", {"targets": "gain"}), ("exponential", {"log": True}),
            ("hinge", {"squared": True}), ("ranknet", {"reduction": "mean"}),
            ("lambdaloss", {"block_pairs": 16})]
CASES = [(name, OPTIONS.get(name, {})) for name in registry.names("loss")] + VARIANTS
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in CASES]


def _batch(sizes, grades=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(torch.tensor(sizes))
    y = torch.randint(0, grades, (g.num_docs,), generator=gen).double()
    return y, g, gen


def _counted_step(name, kw, sizes, dtype):
    y, g, gen = _batch(sizes)
    loss = registry.create("loss", name, **kw)
    bound = loss.bind(y, g)
    s = torch.randn(g.num_docs, generator=gen, dtype=dtype).requires_grad_()
    with SyncCounter(where=True) as c:
        value = bound(s)
        value.sum().backward()
    return c, value, s.grad


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_no_host_sync_after_bind(name, kw, dtype):
    """Forward + backward of a bound loss, without a warm-up call: zero synchronisations
    (a ragged batch with an empty query and a one-document query)."""
    c, value, grad = _counted_step(name, kw, [5, 1, 8, 3, 12, 7, 0, 9], dtype)
    assert c.syncs == 0, f"{name}: {dict(c.by_site)}"
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()


@pytest.mark.parametrize("name,kw", [c for c in CASES if c[0] not in
                                     ("ranknet", "lambdaloss", "approx_ndcg", "neural_ndcg")],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] not in
                              ("ranknet", "lambdaloss", "approx_ndcg", "neural_ndcg")])
def test_no_host_sync_on_the_ragged_path(name, kw):
    """A batch too ragged for the padded tables (one long query among many short ones:
    the segmented kernels); the O(n²) losses are left to the small batch."""
    c, value, grad = _counted_step(name, kw, [1500] + [2] * 600, torch.float32)
    assert c.syncs == 0, f"{name}: {dict(c.by_site)}"
    assert torch.isfinite(value).all() and torch.isfinite(grad).all()


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_autocast_bf16_is_finite_and_close(name, kw):
    """A linear scorer's scores under ``torch.autocast("cpu", bfloat16)``: the loss and the
    weights' gradient are finite and within bf16's precision of float32 at the same
    scores."""
    y, g, gen = _batch([6, 1, 9, 4, 12, 0, 7], seed=1)
    X = torch.randn(g.num_docs, 5, generator=gen)
    w0 = torch.randn(5, generator=gen) * 0.5
    bound = registry.create("loss", name, **kw).bind(y, g)

    def run(autocast):
        w = w0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            s = X @ w if not autocast else (X.bfloat16() @ w.bfloat16())
            value = bound(s).sum()
        value.backward()
        return value.detach().float(), w.grad, s.detach()

    v16, g16, s16 = run(True)
    assert s16.dtype == torch.bfloat16
    assert torch.isfinite(v16) and torch.isfinite(g16).all()
    # the float32 reference at the same (bf16-rounded) scores
    s = s16.float().requires_grad_()
    v = bound(s).sum()
    v.backward()
    v32 = v.detach()
    ref_g = X.t() @ s.grad
    tol = 0.03 * (1 + abs(float(v32)))
    assert abs(float(v16) - float(v32)) <= tol, (float(v16), float(v32))
    scale = 1 + float(ref_g.abs().max())
    assert float((g16 - ref_g).abs().max()) <= 0.05 * scale, (g16, ref_g)
