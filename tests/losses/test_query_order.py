"""Every loss the booster can use is segment-local: its per-query values, gradients and
curvatures depend on each query's own documents (in their order) only, bit for bit.

Moving whole queries (another order of the queries; a subset of them, as a rank of a
data-parallel fit holds) changes nothing once un-moved, and the reduced value is the same
float (the per-query values summed exactly). What used to break it: prefix sums taken
over the whole batch and differenced at the query starts, elementwise functions whose last
bit depended on the position of the value in its tensor (``torch.sigmoid``, ``log1p``,
``softplus``, ``exp2`` on the CPU), a one-query batch summed by another code path.
"""

import pytest
import torch

from torchrankboost import registry
from torchrankboost.exact import exact_sum
from torchrankboost.groups import Groups

F64 = torch.float64
#: the stochastic loss draws its noise over the documents of the whole batch (a seeded draw
#: in document order): a query's draws depend on where it sits, by definition
STOCHASTIC = {n for n in registry.names("loss")
              if getattr(registry.lookup("loss", n).resolve(), "stochastic", False)}
LOSSES = [n for n in registry.names("loss") if n not in STOCHASTIC]
#: losses whose batched (G, L) tables (L the longest query of the batch) sum a query's
#: pairs in an order that depends on L and on the row blocks: the same under another order
#: of the queries, not always on a subset of them (a rank's shard)
PADDED = {"ranknet"}


def batch(seed: int = 0):
    """Queries of 1 to 70 documents, grades 0-4, scores with exact ties, ``-0.0`` and a wide
    range of magnitudes, positive document weights."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 70, (37,), generator=gen)
    sizes[:3] = torch.tensor([1, 2, 9])
    n = int(sizes.sum())
    labels = torch.randint(0, 5, (n,), generator=gen).to(F64)
    scores = torch.randn(n, generator=gen, dtype=F64) * torch.exp(
        2 * torch.randn(n, generator=gen, dtype=F64))
    scores[::5] = torch.round(scores[::5])  # ties
    scores[::11] = -0.0
    weights = torch.rand(n, generator=gen, dtype=F64) + 0.1
    return Groups.from_sizes(sizes), labels, scores, weights


def take(groups: Groups, queries, *xs):
    """The documents of ``queries`` (in that order, each query's rows in their order)."""
    off = groups.offsets
    idx = torch.cat([torch.arange(int(off[q]), int(off[q + 1])) for q in queries])
    return Groups.from_sizes(groups.sizes[list(queries)]), [x[idx] for x in xs]


def per_query_docs(groups: Groups, x):
    return [x[int(groups.offsets[q]):int(groups.offsets[q + 1])] for q in range(len(groups))]


def evaluate(name: str, groups, labels, scores, weights):
    """Per-query values (``reduction="none"``), the summed value and its terms, and the
    gradient and curvature of every kind the loss has."""
    extra = {"scale": 2.0} if name == "smooth_margin" else {}
    loss = registry.create("loss", name, reduction="none", **extra)
    kw = {} if name in ("squared_error",) else {"weights": weights}
    try:
        bound = loss.bind(labels, groups, **kw)
    except ValueError:  # a loss without document weights
        bound = loss.bind(labels, groups)
    out = {"per": bound.value(scores).detach()}
    loss.reduction = "sum"
    bound = loss.bind(labels, groups, **kw) if "weights" in kw and bound.weights is not None \
        else loss.bind(labels, groups)
    out["value"] = bound.value(scores).detach()
    vt = bound.value_terms(scores)
    assert torch.equal(vt.value(exact_sum(vt.terms.detach())), out["value"])
    for hess in ("diag", "bound"):
        try:
            out["g_" + hess], out["h_" + hess] = bound.grad_hess(scores, hess=hess)
        except (ValueError, NotImplementedError):
            pass
    return out


def same(a, b) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int64), b.view(torch.int64)) \
        if a.dtype == F64 else torch.equal(a, b)


@pytest.mark.parametrize("name", LOSSES)
def test_queries_in_another_order_or_apart_give_the_same_bits(name):
    groups, labels, scores, weights = batch()
    G = len(groups)
    ref = evaluate(name, groups, labels, scores, weights)
    perm = torch.randperm(G, generator=torch.Generator().manual_seed(1)).tolist()
    subsets = [] if name in PADDED else [list(range(G // 2, G)), [G - 1]]
    for queries in [perm] + subsets:
        sub, xs = take(groups, queries, labels, scores, weights)
        got = evaluate(name, sub, *xs)
        for key, want in ref.items():
            if key == "value":
                if queries is perm:
                    assert same(got[key], want), key
                continue
            if key == "per":
                assert same(got[key], want[queries]), (key, queries[:3])
                continue
            mine = per_query_docs(sub, got[key])
            theirs = per_query_docs(groups, want)
            for q, m in zip(queries, mine):
                assert same(m, theirs[q]), (key, q)
