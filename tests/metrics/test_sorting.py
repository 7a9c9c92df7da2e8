"""The metrics' one segmented sort (``metrics/_sorting.py``): its padded and global kernels
give the same orders."""

import pytest

from torchrankboost import metrics as M
from torchrankboost.metrics import _sorting as metrics_sorting

from metric_refs import close, random_ragged, ref_ap, ref_auc, ref_ndcg, ref_rr


@pytest.mark.parametrize("padded", [True, False])
def test_sort_kernels_agree(monkeypatch, padded):
    """The padded (topk / row sort) and the global segmented-sort kernels give the same
    orders; many label values take the sorting IDCG path."""
    if not padded:
        monkeypatch.setattr(metrics_sorting, "_PAD_FACTOR", 0)
        monkeypatch.setattr(metrics_sorting, "_PAD_MIN", 0)
    for levels in (5, 100):
        s, y, g, S, Y = random_ragged(11, G=30, max_size=40, levels=levels, score_levels=15)
        for k in (1, 3, 10, None):
            close(M.ndcg_at_k(s, y, g, k=k, reduction="none"), [ref_ndcg(a, b, k) for a, b in zip(S, Y)])
            close(M.ndcg_at_k(s.float(), y, g, k=k, reduction="none"), [ref_ndcg(a, b, k) for a, b in zip(S, Y)])
            close(M.mean_average_precision(s.float(), y, g, k=k, reduction="none"),
                  [ref_ap(a, b, k) for a, b in zip(S, Y)])
            close(M.reciprocal_rank(s.float(), y, g, k=k, reduction="none"),
                  [ref_rr(a, b, k) for a, b in zip(S, Y)])
        close(M.auc(s, y, g, threshold=2.0, reduction="none"), [ref_auc(a, b, 2.0) for a, b in zip(S, Y)])
