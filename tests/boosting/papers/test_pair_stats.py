"""The RankBoost family's per-round pair statistics (``pair_stats.py``) and the candidates'
sums of a dictionary over them, against brute force over the materialised pairs."""

import pytest
import torch

from torchrankboost._pair_engine.levels import label_pairs
from torchrankboost.boosting.papers.dictionaries import CodesDictionary
from torchrankboost.boosting.papers.pair_stats import make_pair_stats
from torchrankboost.pairs import Bipartite, ExplicitPairs, Graded

from paper_fixtures import random_ragged

F64 = torch.float64


def brute_pairs(labels, groups, pairs):
    out = []
    off = groups.offsets.tolist()
    for g in range(groups.num_groups):
        for i in range(off[g], off[g + 1]):
            for j in range(off[g], off[g + 1]):
                li, lj = float(labels[i]), float(labels[j])
                if isinstance(pairs, Bipartite):
                    li, lj = float(li > pairs.threshold), float(lj > pairs.threshold)
                if li > lj:
                    out.append((i, j))
    return out


def brute_stats(pl, s, h):
    z = torch.stack([s[j] - s[i] for i, j in pl])  # log pair weights
    d = torch.softmax(z, 0)
    hi = torch.tensor([h[i] for i, _ in pl], dtype=F64)
    lo = torch.tensor([h[j] for _, j in pl], dtype=F64)
    return ((d * hi * (1 - lo)).sum(), (d * (1 - hi) * lo).sum(),
            (d * (hi * lo + (1 - hi) * (1 - lo))).sum(), torch.logsumexp(z, 0))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["graded", "bipartite", "explicit"])
@pytest.mark.parametrize("scale", [2.0, 400.0])  # 400: the log-domain path
def test_stats_kernels_match_brute_force(seed, kind, scale):
    g, labels, s, codes = random_ragged(seed, scale)
    if kind == "graded":
        spec = Graded()
        pl = brute_pairs(labels, g, spec)
    elif kind == "bipartite":
        spec = Bipartite(1.0)
        pl = brute_pairs(labels, g, spec)
    else:
        pl = brute_pairs(labels, g, Graded())
        pl = pl[::2] + [(j, i) for i, j in pl[1::4]]  # arbitrary (also non-transitive) list
        spec = ExplicitPairs([p[0] for p in pl], [p[1] for p in pl])
    st = make_pair_stats(labels, g, spec)
    assert st.num_pairs == len(pl)
    w = st.weights(s)
    cd = CodesDictionary(codes, torch.ones(3, 4, dtype=torch.bool))
    ep, em, e0 = cd.all_stats(st, w)
    r = cd.edges(st, w)
    for c in range(cd.num_candidates):
        h = cd.column(c)
        bp, bm, b0, blz = brute_stats(pl, s, h)
        tol = 1e-9
        assert abs(float(ep[c]) - float(bp)) < tol
        assert abs(float(em[c]) - float(bm)) < tol
        assert abs(float(e0[c]) - float(b0)) < tol
        assert abs(float(r[c]) - float(bp - bm)) < tol
        cp, cm, c0 = st.chosen_stats(w, h)
        assert abs(float(cp) - float(bp)) < 1e-12 and abs(float(cm) - float(bm)) < 1e-12
        assert abs(float(c0) - float(b0)) < 1e-12
    assert abs(float(w.log_loss) - float(blz)) < 1e-9 * max(1.0, abs(float(blz)))
    assert abs(float(st.log_loss(s)) - float(blz)) < 1e-9 * max(1.0, abs(float(blz)))
    mu = min(float(s[i] - s[j]) for i, j in pl)
    assert float(st.margin(s)) == pytest.approx(mu)


def test_label_pairs_materialisation():
    g, labels, _, _ = random_ragged(3)
    hi, lo, _ = label_pairs(labels, g, Graded())
    assert sorted(zip(hi.tolist(), lo.tolist())) == sorted(brute_pairs(labels, g, Graded()))
