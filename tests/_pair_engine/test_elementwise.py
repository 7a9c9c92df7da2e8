"""The position-free elementwise functions (:mod:`torchrankboost._pair_engine.elementwise`):
a value's result does not depend on where it sits in its tensor (the vectorised body or the
scalar tail of a CPU kernel), and it is within a few units in the last place of torch's."""

import torch

from torchrankboost._pair_engine.elementwise import exp2, pow2, sigmoid, softplus

F64 = torch.float64


def _values():
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(3001, generator=gen, dtype=F64) * 8,
                   torch.randn(3001, generator=gen, dtype=F64) * 60,
                   torch.arange(-40, 41, dtype=F64), torch.tensor([0.0, -0.0, 1e-300])])
    return x


def test_the_same_bits_anywhere_in_the_tensor():
    x = _values()
    for fn in (sigmoid, softplus, exp2):
        whole = fn(x)
        for length in (1, 2, 3, 5, 7, 9, 17):  # short tensors: all in the scalar tail
            m = (x.numel() // length) * length
            parts = torch.cat([fn(c.clone()) for c in x[:m].view(-1, length)])
            assert torch.equal(parts, whole[:m]), (fn.__name__, length)


def test_close_to_torch():
    x = _values()
    tiny = torch.finfo(F64).tiny
    for mine, ref, ulps in ((sigmoid, torch.sigmoid, 4), (exp2, torch.exp2, 2)):
        a, b = mine(x), ref(x)
        assert bool(((a - b).abs() <= ulps * torch.finfo(F64).eps * b.abs() + tiny).all())
    s = softplus(x)  # torch's softplus returns x itself above 20 (its threshold)
    ref = torch.where(x > 20, x + torch.exp(-x), torch.nn.functional.softplus(x))
    assert bool(((s - ref).abs() <= 4 * torch.finfo(F64).eps * ref.abs() + tiny).all())
    assert exp2(torch.arange(-3, 12)).tolist() == [2.0 ** k for k in range(-3, 12)]
    assert pow2(torch.tensor([-1074, -1022, 0, 1023])).tolist() == [
        2.0 ** -1074, 2.0 ** -1022, 1.0, 2.0 ** 1023]


def test_differentiable_twice():
    x = torch.linspace(-5, 5, 11, dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(softplus(x).sum(), x, create_graph=True)
    assert torch.allclose(g, torch.sigmoid(x.detach()), rtol=1e-14)
    (h,) = torch.autograd.grad(g.sum(), x)
    p = torch.sigmoid(x.detach())
    assert torch.allclose(h, p * (1 - p), rtol=1e-12)
