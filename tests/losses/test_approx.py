"""ApproxNDCG and NeuralNDCG (``losses/approx.py``) against allRank's padded formulas
(re-written here in float64 as the reference) and per-query dense oracles; gradcheck."""

import math

import pytest
import torch

from torchrankboost import Groups, registry
from torchrankboost.losses.approx import ApproxNDCGLoss, NeuralNDCGLoss

EPS = 1e-10  # allRank's DEFAULT_EPS


def make_case(seed, sizes=(5, 3, 7, 1), levels=4):
    gen = torch.Generator().manual_seed(seed)
    g = Groups.from_sizes(list(sizes))
    n = g.num_docs
    s = torch.randn(n, generator=gen, dtype=torch.float64) * 1.5
    y = torch.randint(0, levels, (n,), generator=gen).to(torch.float64)
    return s, y, g


# ----------------------------------------------------------------- allRank, re-written (float64)
def allrank_approx_ndcg(y_pred, y_true, alpha=1.0, pad=-1):
    y_pred, y_true = y_pred.clone(), y_true.clone()
    padded = y_true == pad
    y_pred[padded] = float("-inf")
    y_true[padded] = float("-inf")
    y_pred_sorted, idx = y_pred.sort(descending=True, dim=-1)
    y_true_sorted, _ = y_true.sort(descending=True, dim=-1)
    tsp = torch.gather(y_true, 1, idx)
    mask = torch.isfinite(tsp[:, :, None] - tsp[:, None, :])
    mask.diagonal(dim1=-2, dim2=-1).zero_()
    tsp = tsp.clamp(min=0.0)
    y_true_sorted = y_true_sorted.clamp(min=0.0)
    D = torch.log2(1.0 + torch.arange(1, y_pred.shape[1] + 1, dtype=torch.float64))[None, :]
    maxDCG = torch.sum((2 ** y_true_sorted - 1) / D, -1).clamp(min=EPS)
    G = (2 ** tsp - 1) / maxDCG[:, None]
    diffs = y_pred_sorted[:, :, None] - y_pred_sorted[:, None, :]
    diffs[~mask] = 0.0
    pos = 1.0 + torch.sum(mask * torch.sigmoid(-alpha * diffs).clamp(min=EPS), -1)
    return -torch.mean(torch.sum(G / torch.log2(1.0 + pos), -1))


def allrank_neural_ndcg(y_pred, y_true, temperature=1.0, powered=True, k=None, pad=-1):
    """allRank's deterministic neuralNDCG for ONE query (its Sinkhorn stops on the whole
    batch; ours per query)."""
    n = y_true.shape[1]
    k = n if k is None else k
    mask = y_true == pad
    s = y_pred.unsqueeze(-1).masked_fill(mask[:, :, None], -1e8)
    A = torch.abs(s - s.permute(0, 2, 1)).masked_fill(mask[:, :, None] | mask[:, None, :], 0.0)
    one = torch.ones((n, 1), dtype=torch.float64)
    B = A @ (one @ one.T)
    m = int(mask.sum())
    t = (n - m + 1 - 2 * (torch.arange(n - m) + 1)).to(torch.float64)
    scaling = torch.cat([t, torch.zeros(m, dtype=torch.float64)])[None]
    C = s.masked_fill(mask[:, :, None], 0.0) @ scaling.unsqueeze(-2)
    P = (C - B).permute(0, 2, 1)
    P = P.masked_fill(mask[:, :, None] | mask[:, None, :], -math.inf)
    P = P.masked_fill(mask[:, :, None] & mask[:, None, :], 1.0)
    P = torch.softmax(P / temperature, -1)
    P = P.masked_fill(mask[:, None, :] | mask[:, :, None], 0.0)
    P = P.masked_fill(mask[:, None, :] & mask[:, :, None], 1.0)
    for _ in range(50):
        P = P / P.sum(1, keepdim=True).clamp(min=EPS)
        P = P / P.sum(2, keepdim=True).clamp(min=EPS)
        if (P.sum(2) - 1).abs().max() < 1e-6 and (P.sum(1) - 1).abs().max() < 1e-6:
            break
    P = P.masked_fill(mask[:, None, :] | mask[:, :, None], 0.0)
    yt = y_true.masked_fill(mask, 0.0).unsqueeze(-1)
    gains = 2.0 ** yt - 1.0 if powered else yt
    disc = 1.0 / torch.log2(torch.arange(n, dtype=torch.float64) + 2.0)
    dcg = ((P @ gains).squeeze(-1) * disc)[:, :k].sum(-1)
    ideal = torch.sort((2.0 ** yt - 1.0 if powered else yt).squeeze(-1), -1, descending=True)[0]
    idcg = (ideal * disc)[:, :k].sum(-1)
    if float(idcg) == 0:
        return torch.zeros((), dtype=torch.float64)
    return -(dcg / (idcg + EPS)).sum()


def padded_allrank(s, y, g):
    S, mask = g.pad(s)
    Y, _ = g.pad(y, fill=-1.0)
    return S, Y, mask


# ----------------------------------------------------------------- ApproxNDCG
@pytest.mark.parametrize("alpha", [0.5, 1.0, 10.0])
def test_approx_ndcg_equals_allrank(alpha):
    s, y, g = make_case(1)
    S, Y, mask = padded_allrank(s, y, g)
    ref = allrank_approx_ndcg(S, Y, alpha)
    ours = ApproxNDCGLoss(alpha=alpha)(s, y, g) / g.num_groups  # allRank: mean over lists
    assert abs(float(ours) - float(ref)) < 1e-6
    padded = ApproxNDCGLoss(alpha=alpha)(S, torch.where(mask, Y, 0.0), mask=mask)
    torch.testing.assert_close(padded / g.num_groups, ours)


def approx_oracle(s, y, g, alpha):
    out = []
    for a, b in zip(g.offsets[:-1].tolist(), g.offsets[1:].tolist()):
        sq, yq = s[a:b], y[a:b]
        n = b - a
        pos = torch.stack([sq[i] * 0 + 1 + sum(torch.sigmoid(alpha * (sq[j] - sq[i]))
                                   for j in range(n) if j != i) for i in range(n)])
        ideal = torch.sort(2 ** yq - 1, descending=True)[0]
        idcg = (ideal / torch.log2(torch.arange(n, dtype=s.dtype) + 2)).sum()
        val = ((2 ** yq - 1) / torch.log2(1 + pos)).sum() / idcg if idcg > 0 else sq.sum() * 0
        out.append(-val)
    return torch.stack(out)


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_approx_ndcg_dense_oracle_and_gradcheck(block):
    s, y, g = make_case(2, sizes=(4, 6, 2, 1))
    y[-3:-1] = 0.0  # the size-2 query has no relevant document
    loss = ApproxNDCGLoss(alpha=2.0, block_pairs=block, reduction="none")
    x1, x2 = s.clone().requires_grad_(), s.clone().requires_grad_()
    v, ref = loss(x1, y, g), approx_oracle(x2, y, g, 2.0)
    torch.testing.assert_close(v, ref, rtol=1e-12, atol=1e-12)
    (g1,), (g2,) = torch.autograd.grad(v.sum(), x1), torch.autograd.grad(ref.sum(), x2)
    torch.testing.assert_close(g1, g2, rtol=1e-10, atol=1e-12)
    mean = ApproxNDCGLoss(alpha=2.0, reduction="mean")(s, y, g)
    torch.testing.assert_close(mean, ref.sum() / int((ref != 0).sum()))
    x = s.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: loss(z, y, g), (x,))


# ----------------------------------------------------------------- NeuralNDCG
@pytest.mark.parametrize("kw", [{}, {"temperature": 0.5, "k": 3},
                                {"powered_relevancies": False}])
def test_neural_ndcg_equals_allrank_per_query(kw):
    s, y, g = make_case(3)
    loss = NeuralNDCGLoss(reduction="none", **kw)
    ours = loss(s, y, g)
    S, Y, mask = padded_allrank(s, y, g)
    ak = {"temperature": kw.get("temperature", 1.0), "k": kw.get("k"),
          "powered": kw.get("powered_relevancies", True)}
    for q in range(g.num_groups):  # allRank's padding kept: one padded row per query
        ref = allrank_neural_ndcg(S[q:q + 1], Y[q:q + 1], **ak)
        assert abs(float(ours[q]) - float(ref)) < 1e-6, (q, float(ours[q]), float(ref))
    padded = NeuralNDCGLoss(reduction="none", **kw)(S, torch.where(mask, Y, 0.0), mask=mask)
    torch.testing.assert_close(padded, ours)


def test_neural_ndcg_blocks_budget_and_gradcheck():
    s, y, g = make_case(4, sizes=(3, 4, 2))
    x = s.clone().requires_grad_()
    small = NeuralNDCGLoss(max_bytes=NeuralNDCGLoss()._query_bytes(4, 8), reduction="mean")
    whole = NeuralNDCGLoss(reduction="mean")
    torch.testing.assert_close(small(s, y, g), whole(s, y, g))
    few = NeuralNDCGLoss(n_iter=3, max_bytes=NeuralNDCGLoss(n_iter=3)._query_bytes(4, 8))
    assert torch.autograd.gradcheck(lambda z: few(z, y, g), (x,))
    with pytest.raises(ValueError, match="max_bytes"):
        NeuralNDCGLoss(max_bytes=1000)(s, y, g)


def test_registry_names_and_refusals():
    assert isinstance(registry.create("loss", "approx_ndcg"), ApproxNDCGLoss)
    assert isinstance(registry.create("loss", "neural_ndcg", k=5), NeuralNDCGLoss)
    s, y, g = make_case(5)
    with pytest.raises(ValueError, match="weights"):
        ApproxNDCGLoss()(s, y, g, weights=torch.ones_like(s))
    with pytest.raises(ValueError, match="alpha"):
        ApproxNDCGLoss(alpha=0)
    bound = NeuralNDCGLoss().bind(y, g)
    torch.testing.assert_close(bound(s), NeuralNDCGLoss()(s, y, g))
