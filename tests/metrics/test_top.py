"""Top-of-the-list metrics (``metrics/top.py``: positives above the first negative, below
the top negative) and the ranking margin (``metrics/margin.py``) against the per-query
references."""

import math

import torch
from hypothesis import given, settings

from torchrankboost import metrics as M

from metric_refs import close, from_hyp, ragged, ref_above_first_negative, ref_margin


@settings(max_examples=25)  # keeps this file well under its 40 s budget
@given(ragged)
def test_top_of_list_and_margin_vs_reference(qs):
    s, y, g, S, Y = from_hyp(qs)
    above = [ref_above_first_negative(a, b) for a, b in zip(S, Y)]
    npos = [sum(1 for l in b if l > 0) for b in Y]
    close(M.positives_above_first_negative(s, y, g, reduction="none"), above)
    close(M.positives_above_first_negative(s, y, g), sum(above) / len(above))
    close(M.positives_below_top_negative(s, y, g, reduction="none"),
          [p - a for p, a in zip(npos, above)])
    close(M.positives_above_first_negative(s, y, g, normalize=True, reduction="none"),
          [a / p if p else 0.0 for a, p in zip(above, npos)])
    mg = [ref_margin(a, b) for a, b in zip(S, Y)]
    close(M.ranking_margin(s, y, g, reduction="none"), mg)
    close(M.ranking_margin(s, y, g), min(mg))
    close(M.ranking_margin(s, y, g, scale=2.0, reduction="none"), [m / 2 for m in mg])
    fin = [m for m in mg if math.isfinite(m)]
    close(M.ranking_margin(s, y, g, reduction="mean"), sum(fin) / len(fin) if fin else float("nan"))


def test_positives_above_first_negative_tie_case():
    # top negative tied with a positive: the tied positive does not count
    s = torch.tensor([5.0, 4.0, 4.0, 3.0, 1.0])
    y = torch.tensor([1, 1, 0, 1, 0])
    assert float(M.positives_above_first_negative(s, y)) == 1.0
    assert float(M.positives_below_top_negative(s, y)) == 2.0
