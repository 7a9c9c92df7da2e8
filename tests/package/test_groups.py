import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from torchrankboost import Groups


def ragged(sizes, seed=0, dtype=torch.float64, device="cpu"):
    g = Groups.from_sizes(sizes, device=device)
    x = torch.randn(g.num_docs, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return g, x.to(device)


def per_group(g, x):
    off = g.offsets.tolist()
    return [x[off[i]:off[i + 1]] for i in range(g.num_groups)]


def test_basic_attributes():
    g = Groups.from_sizes([3, 0, 2])
    assert g.num_groups == 3 and g.num_docs == 5 and len(g) == 3
    assert g.offsets.tolist() == [0, 3, 3, 5]
    assert g.group_index.tolist() == [0, 0, 0, 2, 2]
    assert g.position.tolist() == [0, 1, 2, 0, 1]
    assert g.max_size == 3


def test_from_qid_contiguous_and_rejects_split_runs():
    g = Groups.from_qid(np.array([7, 7, 3, 3, 3, 9]))
    assert g.sizes.tolist() == [2, 3, 1]
    with pytest.raises(ValueError, match="not contiguous"):
        Groups.from_qid([1, 2, 1])


def test_from_unsorted_qid_permutation_is_stable():
    qid = torch.tensor([5, 2, 5, 9, 2, 5])
    g, perm = Groups.from_unsorted_qid(qid)
    assert qid[perm].tolist() == [5, 5, 5, 2, 2, 9]
    assert perm.tolist() == [0, 2, 5, 1, 4, 3]
    assert g.sizes.tolist() == [3, 2, 1]


def test_bad_offsets():
    with pytest.raises(ValueError, match="offsets\\[0\\]"):
        Groups([1, 2])
    with pytest.raises(ValueError, match="non-decreasing"):
        Groups([0, 3, 2])
    with pytest.raises(ValueError, match="non-negative"):
        Groups.from_sizes([2, -1])
    g = Groups.from_sizes([2, 2])
    with pytest.raises(ValueError, match="cover 4 documents"):
        g.segment_sum(torch.zeros(5))


@given(st.lists(st.integers(0, 7), min_size=1, max_size=8), st.integers(0, 1000))
def test_segment_reductions_match_loop(sizes, seed):
    g, x = ragged(sizes, seed)
    chunks = per_group(g, x)
    torch.testing.assert_close(g.segment_sum(x), torch.stack([c.sum() for c in chunks]))
    exp_max = torch.stack([c.max() if len(c) else torch.tensor(float("-inf"), dtype=x.dtype) for c in chunks])
    torch.testing.assert_close(g.segment_max(x), exp_max)
    exp_lse = torch.stack([torch.logsumexp(c, 0) if len(c) else torch.tensor(float("-inf"), dtype=x.dtype) for c in chunks])
    torch.testing.assert_close(g.segment_logsumexp(x), exp_lse)
    for exclusive in (False, True):
        for reverse in (False, True):
            ref = []
            for c in chunks:
                cc = c.flip(0) if reverse else c
                cs = torch.cumsum(cc.exp(), 0)
                if exclusive:
                    cs = torch.cat([cs.new_zeros(1), cs[:-1]])[: len(cc)]
                ref.append(cs.flip(0) if reverse else cs)
            ref = torch.cat(ref) if ref else x.new_zeros(0)
            torch.testing.assert_close(g.segment_cumsum(x.exp(), exclusive=exclusive, reverse=reverse), ref)
            torch.testing.assert_close(
                g.segment_logcumsumexp(x, exclusive=exclusive, reverse=reverse).exp(), ref
            )


def test_segment_logcumsumexp_extreme_values_exact():
    g = Groups.from_sizes([3, 2])
    x = torch.tensor([1e4, -1e4, -1e4 + 1, -5e3, 5e3], dtype=torch.float64)
    out = g.segment_logcumsumexp(x)
    assert out[3].item() == -5e3 and out[4].item() == 5e3
    assert out[1].item() == 1e4


def test_segment_logsumexp_gradient_no_nan_for_empty_and_inf():
    g = Groups.from_sizes([2, 0, 1])
    x = torch.tensor([0.5, float("-inf"), 2.0], requires_grad=True)
    g.segment_logsumexp(x).sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64])
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_matches_per_group_stable_sort(dtype, descending):
    gen = torch.Generator().manual_seed(3)
    g = Groups.from_sizes([5, 1, 0, 7, 4])
    key = torch.randint(-3, 4, (g.num_docs,), generator=gen).to(dtype)
    if dtype.is_floating_point:
        key[0] = -0.0
    perm = g.argsort(key, descending=descending)
    off = g.offsets.tolist()
    ref = []
    for i in range(g.num_groups):
        k = key[off[i]:off[i + 1]].double()
        ref.append(torch.argsort(k, descending=descending, stable=True) + off[i])
    assert perm.tolist() == torch.cat(ref).tolist()


def test_argsort_float32_extremes():
    g = Groups.from_sizes([6])
    key = torch.tensor([1e30, -1e30, float("inf"), float("-inf"), 0.0, -1e-30])
    perm = g.argsort(key)
    assert key[perm].tolist() == sorted(key.tolist())


def test_rank_within():
    g = Groups.from_sizes([3, 2])
    r = g.rank_within(torch.tensor([0.1, 0.9, 0.5, 2.0, 3.0]))
    assert r.tolist() == [2, 0, 1, 1, 0]


def test_pad_unpad_roundtrip_and_from_padded():
    g, x = ragged([3, 1, 0, 4])
    padded, mask = g.pad(x, fill=-1.0)
    assert padded.shape == (4, 4)
    assert torch.equal(g.unpad(padded), x)
    assert torch.equal(g.unpad(padded, mask), x)
    g2 = Groups.from_padded(mask)
    assert g2 == g
    # a mask with holes: values taken row-major
    m = torch.tensor([[True, False, True], [False, True, False]])
    v = torch.arange(6.0).view(2, 3)
    g3 = Groups.from_padded(m)
    assert g3.unpad(v, m).tolist() == [0.0, 2.0, 4.0]


def test_segment_ops_trailing_dims():
    g = Groups.from_sizes([2, 3])
    x = torch.arange(10.0).view(5, 2)
    assert g.segment_sum(x).tolist() == [[2.0, 4.0], [18.0, 21.0]]
    assert g.segment_max(x).tolist() == [[2.0, 3.0], [8.0, 9.0]]


def test_device(device):
    g, x = ragged([4, 2, 3], device=device)
    assert g.segment_sum(x).device.type == device.type
    assert g.argsort(x.float()).device.type == device.type


def test_segment_logsumexp_under_torch_func_vmap():
    """No data-dependent control flow: per-sample gradients by vmap(grad) equal the loop's."""
    g = Groups.from_sizes([3, 0, 2])
    f = lambda s: (s - g.broadcast(g.segment_logsumexp(s))).pow(2).sum()  # noqa: E731
    X = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batched = torch.func.vmap(torch.func.grad(f))(X)
    looped = torch.stack([torch.func.grad(f)(x) for x in X])
    torch.testing.assert_close(batched, looped)


def test_segment_cumsum_and_prefix_table_are_segment_local():
    """A group's prefix sums depend on its own values only: the same bits with the groups in
    another order or alone (no global prefix differenced at the group starts); ``prefix_table``
    gives each group's exclusive prefixes and its total at ``offsets[g] + g + k``."""
    import math

    gen = torch.Generator().manual_seed(0)
    sizes = torch.tensor([3, 0, 1, 17, 8, 2, 40, 1, 0, 33, 5])
    g = Groups.from_sizes(sizes)
    x = torch.randn(int(sizes.sum()), generator=gen, dtype=torch.float64) * torch.exp(
        6 * torch.randn(int(sizes.sum()), generator=gen, dtype=torch.float64))
    perm = torch.randperm(len(sizes), generator=gen).tolist()
    moved = torch.cat([x[g.offsets[q]:g.offsets[q + 1]] for q in perm])
    gm = Groups.from_sizes(sizes[perm])
    for kw in ({}, {"exclusive": True}, {"reverse": True}, {"exclusive": True, "reverse": True}):
        a, b = g.segment_cumsum(x, **kw), gm.segment_cumsum(moved, **kw)
        for i, q in enumerate(perm):
            mine = b[gm.offsets[i]:gm.offsets[i + 1]]
            assert torch.equal(mine, a[g.offsets[q]:g.offsets[q + 1]]), (kw, q)
            alone = Groups.single(int(sizes[q])).segment_cumsum(
                x[g.offsets[q]:g.offsets[q + 1]], **kw)
            assert torch.equal(alone, mine), (kw, q)
    tab = g.prefix_table(x)
    for q in range(len(sizes)):
        o, L = int(g.offsets[q]), int(sizes[q])
        ref = [math.fsum(x[o:o + k].tolist()) for k in range(L + 1)]
        assert tab[o + q:o + q + L + 1].tolist() == pytest.approx(ref, rel=1e-12, abs=1e-300)
        assert tab[o + q] == 0
