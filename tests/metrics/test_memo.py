"""The memoised label side of NDCG (``metrics/_memo.py``) gives the values of the plain path:
recomputed after an in-place change inside a fit, never reused outside one."""

import torch

from torchrankboost import metrics as M
from torchrankboost.groups import Groups
from torchrankboost.metrics._memo import new_label_memo, remembering_label_side


def test_ndcg_label_side_is_recomputed_after_an_in_place_change():
    g = Groups.from_sizes(torch.tensor([5, 7, 3]))
    gen = torch.Generator().manual_seed(1)
    y = torch.randint(0, 3, (15,), generator=gen).double()
    s = torch.randn(15, generator=gen, dtype=torch.float64)
    with remembering_label_side(new_label_memo()):
        first = M.ndcg_at_k(s, y, g, k=3)
        assert torch.equal(M.ndcg_at_k(s, y, g, k=3), first)  # memoised: the same value
        y[0] = 2.0 - y[0]
        y[6] = 2.0 - y[6]
        fresh = M.ndcg_at_k(s, y.clone(), g, k=3)
        assert torch.equal(M.ndcg_at_k(s, y, g, k=3), fresh)


def test_ndcg_outside_a_fit_never_reuses_a_label_side():
    """A user's NumPy labels changed in place (memory shared, no version counter) between two
    calls: outside a fit's memo the second call sees the new labels."""
    import numpy as np

    g = Groups.from_sizes(torch.tensor([4, 4]))
    y = np.array([0, 1, 2, 0, 2, 1, 0, 0], dtype=np.float64)
    s = torch.arange(8, dtype=torch.float64)
    M.ndcg_at_k(s, torch.from_numpy(y), g, k=3)
    y[:] = y[::-1].copy()
    assert torch.equal(M.ndcg_at_k(s, torch.from_numpy(y), g, k=3),
                       M.ndcg_at_k(s, torch.from_numpy(y.copy()), g, k=3))
