"""What every metric shares (``metrics/_common.py``): input checks and conversions, padded
input with a mask, option checks, edge cases, devices and score dtypes."""

import math

import numpy as np
import pytest
import torch

import torchrankboost.metrics as M
from torchrankboost import Groups
from torchrankboost.metrics import ndcg_at_k
from torchrankboost.pairs import Bipartite, ExplicitPairs

from metric_refs import (close, random_ragged, ref_ap, ref_auc, ref_margin, ref_ndcg,
                         ref_pair_counts, split)


# ----------------------------------------------------------------------------- padded input
PADDED = [
    ("auc", {}), ("pair_error", {"reduction": "mean"}), ("dcg_at_k", {"k": 3}),
    ("ndcg_at_k", {"k": 5}), ("mean_average_precision", {}), ("precision_at_k", {"k": 2}),
    ("reciprocal_rank", {}), ("positives_above_first_negative", {}),
    ("positives_below_top_negative", {}), ("precision_at_percent", {"percent": 50.0}),
    ("ranking_margin", {"reduction": "mean"}),
]


@pytest.mark.parametrize("name,kw", PADDED)
def test_padded_with_mask_equals_flat(name, kw):
    g = Groups.from_sizes([4, 0, 6, 3])
    gen = torch.Generator().manual_seed(1)
    s = torch.randn(13, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (13,), generator=gen).to(torch.float64)
    S, mask = g.pad(s, fill=-7.0)
    Y, _ = g.pad(y, fill=-1.0)  # allRank-style padding labels, masked out
    fn = getattr(M, name)
    torch.testing.assert_close(fn(S, Y, mask=mask, **kw), fn(s, y, g, **kw), equal_nan=True)


def test_padding_labels_without_a_mask_are_refused():
    s = torch.tensor([0.3, 0.2, 0.1, 0.0], dtype=torch.float64)
    y = torch.tensor([2.0, 1.0, -1.0, -1.0], dtype=torch.float64)  # padded slots flattened
    with pytest.raises(ValueError, match="mask="):
        ndcg_at_k(s, y)
    with pytest.raises(ValueError, match="mask="):
        M.pair_error(s, y)
    with pytest.raises(ValueError, match="mask="):
        ndcg_at_k(s.reshape(2, 2), y.reshape(2, 2))  # padded without a mask
    # threshold metrics read negative labels as non-relevant (+1/-1 labels work)
    assert float(M.auc(s, torch.tensor([1.0, -1, 1, -1]))) == pytest.approx(0.75)


def test_all_metrics_on_device(device):
    s, y, g, S, Y = random_ragged(0, G=50, device=device)
    assert s.device.type == device.type
    close(M.ndcg_at_k(s, y, g, k=5, reduction="none"), [ref_ndcg(a, b, 5) for a, b in zip(S, Y)])
    close(M.mean_average_precision(s, y, g, reduction="none"), [ref_ap(a, b) for a, b in zip(S, Y)])
    close(M.auc(s, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])
    c = [ref_pair_counts(a, b, 1.0) for a, b in zip(S, Y)]
    close(M.pair_error(s, y, g), sum(e for e, _ in c) / sum(p for _, p in c))
    close(M.ranking_margin(s, y, g, reduction="none"), [ref_margin(a, b) for a, b in zip(S, Y)])
    out = M.precision_at_k(s, y, g, k=3, reduction="none")
    assert out.device.type == device.type
    fpr, tpr, thr = M.roc_curve(s, y)
    assert fpr.device.type == device.type


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_score_dtypes(dtype):
    s, y, g, S, Y = random_ragged(1, G=20)
    sd = (s * 2).to(dtype)  # small integers: exact in every dtype
    S = split(sd.double().tolist(), g.sizes.tolist())
    close(M.ndcg_at_k(sd, y, g, reduction="none"), [ref_ndcg(a, b, 10) for a, b in zip(S, Y)])
    close(M.auc(sd, y, g, reduction="none"), [ref_auc(a, b) for a, b in zip(S, Y)])


def test_labels_continuous_and_int_inputs():
    s = [0.3, 0.1, 0.2, 0.2]
    y = [0.5, 1.25, 0.0, 3.0]
    assert M.pair_error(s, y).shape == ()
    close(M.pair_error(s, y), ref_pair_counts(s, y, 1.0)[0] / 6)
    close(M.ndcg_at_k(np.array(s), np.array(y), k=None, gain="linear"), ref_ndcg(s, y, None, "linear"))


ALL = [M.auc, M.pair_error, M.dcg_at_k, M.ndcg_at_k, M.mean_average_precision, M.precision_at_k,
       M.reciprocal_rank, M.positives_above_first_negative, M.positives_below_top_negative,
       M.precision_at_percent, M.ranking_margin]


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.__name__)
def test_bad_inputs(fn):
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="disagree in length"):
        fn(s, y[:2])
    with pytest.raises(ValueError, match="cover"):
        fn(s, y, Groups.from_sizes([1, 1]))
    with pytest.raises(ValueError, match="scores contain NaN"):
        fn(torch.tensor([0.1, float("nan"), 0.3]), y)
    with pytest.raises(ValueError, match="labels contain NaN"):
        fn(s, torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(ValueError, match="scores contain inf"):
        fn(torch.tensor([0.1, float("inf"), 0.3]), y)
    with pytest.raises(ValueError, match="1-D"):
        fn(s[None], y[None])


@pytest.mark.parametrize("fn", [M.dcg_at_k, M.ndcg_at_k, M.mean_average_precision,
                                M.precision_at_k, M.reciprocal_rank])
def test_bad_k(fn):
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="k must"):
            fn(s, y, k=k)
    with pytest.raises(ValueError, match="reduction"):
        fn(s, y, reduction="sum")


def test_bad_options():
    s = torch.tensor([0.1, 0.2, 0.3])
    y = torch.tensor([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="ties"):
        M.auc(s, y, ties="random")
    with pytest.raises(ValueError, match="ties"):
        M.pair_error(s, y, ties="correct")
    with pytest.raises(ValueError, match="gain"):
        M.ndcg_at_k(s, y, gain="cubic")
    with pytest.raises(ValueError, match="gain table"):
        M.ndcg_at_k(s, y, gain=[0.0, 1.0])  # label 2 out of range
    with pytest.raises(ValueError, match="integers"):
        M.ndcg_at_k(s, torch.tensor([0.0, 0.5, 1.0]), gain=[0.0, 1.0])
    with pytest.raises(ValueError, match="percent"):
        M.precision_at_percent(s, y, percent=0)
    with pytest.raises(ValueError, match="percent"):
        M.precision_at_percent(s, y, percent=[50, 120])
    with pytest.raises(ValueError, match="scale"):
        M.ranking_margin(s, y, scale=0.0)
    with pytest.raises(ValueError, match="denominator"):
        M.mean_average_precision(s, y, denominator="all")
    with pytest.raises(ValueError, match="pairs"):
        M.pair_error(s, y, pairs="listwise")
    with pytest.raises(ValueError, match="spans two"):
        M.pair_error(s, y, Groups.from_sizes([2, 1]), pairs=ExplicitPairs([0], [2]))
    with pytest.raises(ValueError, match="reduction"):
        M.pair_error(s, y, reduction="max")


def test_edge_cases():
    # no pairs / single class: NaN where undefined, never an exception
    s = torch.tensor([0.1, 0.2])
    y = torch.zeros(2)
    assert math.isnan(float(M.auc(s, y)))
    assert math.isnan(float(M.pair_error(s, y)))
    assert math.isnan(float(M.precision_at_percent(s, y, percent=50)))
    assert float(M.ranking_margin(s, y)) == math.inf
    assert float(M.ndcg_at_k(s, y)) == 1.0 and float(M.ndcg_at_k(s, y, empty=0.0)) == 0.0
    # empty inputs
    e = torch.zeros(0)
    assert float(M.ndcg_at_k(e, e)) == 1.0
    assert math.isnan(float(M.auc(e, e)))
    # groups with empty queries
    g = Groups.from_sizes([0, 2, 0])
    out = M.ndcg_at_k(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 0.0]), g, reduction="none")
    assert out.shape == (3,)
    close(out[1], 1.0 / math.log2(3))
    # bipartite threshold object
    close(M.pair_error(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 1.0, 0.0]), pairs=Bipartite(1.5)),
          1.0)
