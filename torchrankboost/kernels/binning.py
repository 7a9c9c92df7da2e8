"""Quantile binning of dense features, done once per fit: the bin codes every kernel works on.

Every histogram-based learner (regression trees, stumps) works on small integer *bin codes*
instead of raw feature values. :func:`bin_features` picks, per feature, at most ``n_bins``
value bins from the (sub-sampled) training values and returns the codes of every row;
:func:`apply_bins` maps new raw values to codes with the same edges.

Layout and conventions
----------------------
* ``edges`` (F, B) holds the *upper edge* of every value bin, ascending per feature, padded on
  the right with ``+inf``; the last real bin of every feature has upper edge ``+inf``. A value
  ``x`` falls in bin ``b`` iff ``edges[f, b-1] < x <= edges[f, b]``, i.e.
  ``code = searchsorted(edges[f], x, side="left")``. Consequently, for every threshold bin
  ``t``: ``code <= t``  ⇔  ``x <= edges[f, t]`` — trees split on codes during training and on
  raw values at prediction time with identical results (same dtype).
* Missing values (NaN) get the dedicated code ``missing_code``: 255 when the codes are
  ``uint8`` (``n_bins <= 255``, value bins 0..254), otherwise the codes are ``int16`` and
  ``missing_code = n_bins`` (value bins 0..n_bins-1; stumps with many thresholds).
* A feature with at most ``n_bins`` distinct (non-NaN) values gets one bin per distinct value,
  thresholds at the midpoints between consecutive values (exact binning). Otherwise bin
  boundaries are placed at the ``k/n_bins`` quantiles of the value distribution (computed on the
  distinct values weighted by their counts, so a heavy value never straddles two bins; repeated
  boundaries are merged, which may leave fewer than ``n_bins`` bins).
* Midpoints are computed in float64 and rounded to the feature dtype; when rounding would reach
  the upper value the lower value is used instead, so ``lo <= edge < hi`` always holds.
* Above ``sample_count`` rows (default 200 000, like LightGBM's ``bin_construct_sample_cnt``)
  the edges are computed from a seeded uniform row sample; every row is still coded.

Everything runs as torch ops on the device of ``X`` (the sample permutation is drawn on the CPU
so the same seed gives the same bins on every device). The quantile step is vectorised over
blocks of features (sort of the transposed sample block, run starts by comparison, quantile runs
read from cumulative run counts; no per-feature loop). Coding (:func:`apply_bins`) runs in the
tree backend chosen by :func:`~torchrankboost.kernels.choose_backend` (the compiled binary
search on CPU, a batched ``torch.searchsorted`` chunked over rows elsewhere: the same codes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..parallel import get_context
from . import choose_backend

__all__ = ["BinnedFeatures", "bin_features", "apply_bins", "compute_bin_edges", "MAX_UINT8_BINS",
           "MAX_INT16_BINS", "attach_bins", "code_slots", "code_dtype", "check_features",
           "check_n_bins", "sample_rows", "edges_and_sample_codes"]

MAX_UINT8_BINS = 255
#: the most value bins of 2-byte codes: int16 codes 0..n_bins-1 and the missing code n_bins
MAX_INT16_BINS = 32766
_CODE_CHUNK = 1 << 16
_EDGE_BLOCK = 1 << 22  # features x sample rows per vectorised edge block


@dataclass
class BinnedFeatures:
    """Binned training features.

    Attributes:
        codes: (n, F) ``uint8`` (or ``int16``) bin code of every value.
        edges: (F, B) upper bin edges (dtype of X), ``+inf``-padded; ``B = max(num_bins)``.
        num_bins: (F,) int64 number of value bins of each feature (>= 1).
        has_missing: (F,) bool, whether the feature has NaNs in the training data.
        missing_code: int, the code of NaN.
        n_bins: the requested maximum number of value bins.
        cache: derived data that learners keep between fits (e.g. the all-rows count
            histogram of the codes); never part of equality or the repr.
        context: the :class:`~torchrankboost.parallel.DistContext` of the fit (the codes
            are this rank's rows, the edges those of all ranks' rows; the learners sum their
            histograms over the ranks through it; its collectives are identities in one
            process).
    """

    codes: Tensor
    edges: Tensor
    num_bins: Tensor
    has_missing: Tensor
    missing_code: int
    n_bins: int
    cache: dict = field(default_factory=dict, repr=False, compare=False)
    context: Any = field(default_factory=lambda: get_context(False), repr=False, compare=False)

    @property
    def num_rows(self) -> int:
        return self.codes.shape[0]

    @property
    def num_features(self) -> int:
        return self.codes.shape[1]

    @property
    def device(self):
        return self.codes.device


_ATTACHED = "_torchrankboost_bins"


def attach_bins(X: Tensor, binned: BinnedFeatures, *, key) -> Tensor:
    """Attach ready bins to ``X`` (the bin cache's stand-in features): :func:`bin_features`
    of ``X`` then returns them instead of binning, when its ``(n_bins, sample_count,
    seed)`` equal ``key`` (else ``ValueError``: never a silent re-binning). Returns ``X``."""
    setattr(X, _ATTACHED, (binned, tuple(key)))
    return X


def _attached(X: Tensor, key, context) -> "BinnedFeatures | None":
    found = getattr(X, _ATTACHED, None)
    if found is None:
        return None
    binned, have = found
    if have != tuple(key) or binned.codes.shape != X.shape:
        raise ValueError(f"X carries cached bins made with (n_bins, sample_count, seed) = "
                         f"{have}, the learner asks for {tuple(key)}; rebuild the bin cache")
    ctx = get_context(False) if context is None else context
    return BinnedFeatures(codes=binned.codes, edges=binned.edges, num_bins=binned.num_bins,
                          has_missing=binned.has_missing, missing_code=binned.missing_code,
                          n_bins=binned.n_bins, context=ctx)


def check_features(X) -> Tensor:
    """``X`` itself when it is a 2-D floating-point tensor (raw features (n, F)), else a
    one-line ``ValueError``."""
    if not isinstance(X, Tensor):
        raise ValueError(f"X: expected a torch.Tensor, got {type(X).__name__}")
    if X.dim() != 2:
        raise ValueError(f"X: expected a 2-D (n, F) tensor, got shape {tuple(X.shape)}")
    if not X.dtype.is_floating_point:
        raise ValueError(f"X: expected a floating-point tensor, got {X.dtype}")
    return X


def check_n_bins(n_bins: int, upper: int = MAX_UINT8_BINS) -> int:
    """``n_bins`` when it is an int in ``[2, upper]``, else a one-line ``ValueError``."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or not 2 <= n_bins <= upper:
        raise ValueError(f"n_bins: expected an int in [2, {upper}], got {n_bins!r}")
    return n_bins


def _safe_midpoints(lo: Tensor, hi: Tensor) -> Tensor:
    """Midpoints of lo < hi in float64 rounded to lo's dtype, clamped into [lo, hi)."""
    mid = ((lo.double() + hi.double()) * 0.5).to(lo.dtype)
    # (-inf + finite)/2 = -inf is fine (<= -inf goes left); (finite + inf)/2 = inf is replaced.
    return torch.where(mid >= hi, lo, torch.where(mid < lo, lo, mid))


def _edges_block(S: Tensor, n_bins: int):
    """Edges of a block of features from their sorted sample values.

    Args:
        S: (Fb, ns) sample values, each row sorted ascending (NaN last).
        n_bins: maximum number of value bins.

    Returns:
        ``(edges (Fb, n_bins) +inf-padded, num_bins (Fb,) int64)``.

    Vectorised form of, per feature: distinct values ``u`` with counts ``c``
    (``unique_consecutive``); ``k <= n_bins``: midpoints of consecutive ``u``; otherwise the
    runs ``j = searchsorted(cumsum(c), q·n/n_bins, side="left")`` clamped to ``k-2`` and
    de-duplicated, edges at the midpoints of ``u[j], u[j+1]``. ``searchsorted`` over the
    cumulative counts equals the run that contains sorted position ``ceil(target) - 1`` (the
    counts are integers), read from a cumulative count of run starts.
    """
    Fb, ns = S.shape
    dev = S.device
    Q = n_bins - 1
    n_valid = (~torch.isnan(S)).sum(1)  # (Fb,)
    new = torch.arange(ns, device=dev).unsqueeze(0) < n_valid.unsqueeze(1)  # valid positions
    new[:, 1:] &= S[:, 1:] != S[:, :-1]  # run starts (first element of each distinct value)
    k = new.sum(1)  # (Fb,) distinct values per feature
    u = S[new]  # distinct values, feature-major
    off = torch.cumsum(k, 0) - k
    run = torch.cumsum(new, 1)  # (Fb, ns) 1 + run index of each position
    q = torch.arange(1, n_bins, device=dev, dtype=torch.float64)
    targets = q.unsqueeze(0) * (n_valid.double() / n_bins).unsqueeze(1)  # (Fb, Q)
    p = torch.ceil(targets).to(torch.int64) - 1
    p = torch.minimum(p, (n_valid - 1).unsqueeze(1)).clamp_(min=0)
    jq = torch.minimum(run.gather(1, p) - 1, (k - 2).unsqueeze(1))
    del run
    jj = torch.arange(Q, device=dev).unsqueeze(0)
    exact = (k <= n_bins).unsqueeze(1)
    J = torch.where(exact, jj.expand(Fb, Q), jq)
    keep_q = torch.ones_like(jq, dtype=torch.bool)
    keep_q[:, 1:] = jq[:, 1:] != jq[:, :-1]
    keep = torch.where(exact, jj < (k - 1).unsqueeze(1), keep_q)
    count = keep.sum(1)
    edges = torch.full((Fb, n_bins), float("inf"), dtype=S.dtype, device=dev)
    if u.numel() > 0 and bool(keep.any()):
        gi = (off.unsqueeze(1) + J).clamp_(0, u.numel() - 1)
        lo = u[gi[keep]]
        hi = u[(gi[keep] + 1).clamp_(max=u.numel() - 1)]
        col = torch.cumsum(keep, 1) - 1
        row = torch.arange(Fb, device=dev).unsqueeze(1).expand(Fb, Q)
        edges[row[keep], col[keep]] = _safe_midpoints(lo, hi)
    return edges, count + 1


def compute_bin_edges(X: Tensor, *, n_bins: int = 255, sample_count: int = 200_000, seed: int = 0):
    """Upper bin edges per feature.

    Args:
        X: (n, F) float tensor, NaN = missing.
        n_bins: maximum number of value bins per feature.
        sample_count: rows used to place the edges (seeded uniform sample above this size).
        seed: seed of the row sample.

    Returns:
        ``(edges (F, B), num_bins (F,) int64)`` with ``B = max(num_bins)``.

    Features are processed in blocks (vectorised within a block; blocks bound the (block, ns)
    temporaries): each block is transposed to contiguous rows and sorted along them (faster
    than sorting along dim 0, same values).
    """
    edges, num_bins, _, _ = edges_and_sample_codes(X, n_bins, sample_count, seed, None, None)
    return edges, num_bins


def sample_rows(n: int, sample_count: int, seed: int, device):
    """The sorted int64 positions of the seeded uniform sample of ``sample_count`` of ``n``
    rows (drawn on the CPU: the same on every device), on ``device``; ``None`` (every row)
    when ``n <= sample_count``."""
    if n <= sample_count:
        return None
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(n, generator=g)[:sample_count].sort().values.to(device)


def edges_and_sample_codes(X: Tensor, n_bins: int, sample_count: int, seed: int, missing_code, dtype):
    """Edges (as :func:`compute_bin_edges`) and, when ``dtype`` is given, the codes of the
    sampled rows read off the sort: with ``b_j = #{i : S_(i) <= edge_j}`` (searchsorted of the
    few edges in the sorted column), the sorted value ``S_(i)`` has code
    ``#{j : edge_j < S_(i)} = #{j : b_j <= i}`` (a cumulative count), scattered back through the
    sort permutation. Equal to ``apply_bins`` on those rows, at a fraction of its cost.

    Returns ``(edges, num_bins, sample_idx or None (all rows), codes (ns, F) or None)``.
    """
    n, F = X.shape
    dev = X.device
    idx = sample_rows(n, sample_count, seed, dev)
    S = X if idx is None else X.index_select(0, idx)
    ns = S.shape[0]
    edges = torch.full((F, n_bins), float("inf"), dtype=X.dtype, device=dev)
    num_bins = torch.ones(F, dtype=torch.int64, device=dev)
    codes = torch.empty((ns, F), dtype=dtype, device=dev) if dtype is not None else None
    blk = max(1, min(F, _EDGE_BLOCK // max(ns, 1)))
    for f0 in range(0, F, blk):
        St, order = torch.sort(S[:, f0 : f0 + blk].t().contiguous(), dim=1)  # (Fb, ns), NaN last
        e, nb = _edges_block(St, n_bins)
        edges[f0 : f0 + blk] = e
        num_bins[f0 : f0 + blk] = nb
        if codes is not None:
            Fb = St.shape[0]
            nan = torch.isnan(St)
            # (searchsorted needs NaN-free rows: NaN -> +inf keeps them last; their codes are
            # overwritten with the missing code below)
            Sk = torch.where(nan, torch.full_like(St, float("inf")), St)
            bnd = torch.searchsorted(Sk, e, side="right")  # (Fb, n_bins) in [0, ns]
            del Sk
            cnt = torch.zeros((Fb, ns + 1), dtype=torch.int32, device=dev)
            cnt.scatter_add_(1, bnd, torch.ones_like(bnd, dtype=torch.int32))
            cs = torch.cumsum(cnt[:, :ns], 1, dtype=torch.int32)
            cs.masked_fill_(nan, missing_code)
            ct = torch.empty((Fb, ns), dtype=dtype, device=dev)
            ct.scatter_(1, order, cs.to(dtype))
            codes[:, f0 : f0 + blk] = ct.t()
    B = int(num_bins.max().item()) if F > 0 else 1
    return edges[:, :B].contiguous(), num_bins, idx, codes


def code_dtype(n_bins: int):
    """``(dtype, missing_code)`` of codes binned with ``n_bins``: ``(uint8, 255)`` up to 255
    bins, ``(int16, n_bins)`` above."""
    return (torch.uint8, 255) if n_bins <= MAX_UINT8_BINS else (torch.int16, n_bins)


def code_slots(n_bins: int) -> int:
    """Histogram slots per feature of codes binned with ``n_bins``: the missing code + 1
    (256 for uint8 codes, ``n_bins + 1`` for int16 ones)."""
    return code_dtype(n_bins)[1] + 1


def apply_bins(X: Tensor, edges: Tensor, *, missing_code: int = 255, dtype=torch.uint8) -> Tensor:
    """Bin codes of raw values: ``code[i, f] = #{b : edges[f, b] < X[i, f]}``, NaN → missing_code.

    Args:
        X: (n, F) float tensor (cast to ``edges.dtype``).
        edges: (F, B) upper edges from :func:`compute_bin_edges` / :func:`bin_features`.
        missing_code: code written for NaN.
        dtype: code dtype (``uint8`` for at most 255 value bins).

    Returns:
        (n, F) codes of dtype ``dtype`` on X's device.
    """
    check_features(X)
    if X.shape[1] != edges.shape[0]:
        raise ValueError(f"X: has {X.shape[1]} features, the bin edges have {edges.shape[0]}")
    X = X.to(edges.dtype)
    backend = choose_backend("auto", device=X.device, data_dtype=X.dtype, num_rows=X.shape[0],
                             announce=False)
    return backend.apply_bins(X, edges, missing_code=missing_code, dtype=dtype)


def bin_features(X: Tensor, *, n_bins: int = 255, sample_count: int = 200_000, seed: int = 0,
                 max_bins: int = MAX_UINT8_BINS, context=None, rows=None) -> BinnedFeatures:
    """Bin the training features once: edges from (sampled) quantiles, codes for every row.

    Args:
        X: (n, F) float tensor, NaN = missing.
        n_bins: maximum value bins per feature, in [2, max_bins]. ``<= 255`` gives uint8 codes
            with missing code 255; above that int16 codes with missing code ``n_bins``.
        sample_count: rows used to place the edges (seeded sample above this size).
        seed: seed of the row sample.
        max_bins: upper limit accepted for ``n_bins`` (trees use 255).
        context: the :class:`~torchrankboost.parallel.DistContext` of the fit (``X`` is
            this rank's shard; see below), or ``None`` (one process).
        rows: ``int64`` rows that place the edges and ``has_missing`` (the rows of positive
            weight; ``None``: all): the edges of ``X[rows]`` alone, every row coded.

    Returns:
        :class:`BinnedFeatures` (with the context). Features of the bin cache carry their
        bins (:func:`attach_bins`): those are returned as they are.

    **Data-parallel.** Every rank gets the edges of the whole data, ``N = Σ_r n_r`` rows with
    rank ``r``'s rows at global positions ``o_r .. o_r + n_r − 1`` (``o_r = Σ_{r' < r}
    n_{r'}``, the shards in rank order): the seeded sample of ``min(N, sample_count)`` global
    positions is drawn on every rank alike, each rank sends its sampled rows
    (``all_gather_rows``: about ``min(N, sample_count) · F`` values in all), and every rank
    computes the edges from the same rows — exactly the single-process edges of the
    concatenated data, whether or not it is sub-sampled. Each rank codes its own rows (its
    sampled rows read off the sort of the sample); ``has_missing`` is all-reduced. In one
    process the collectives are identities and this is the plain computation.
    """
    check_features(X)
    cached = _attached(X, (n_bins, sample_count, seed), context)
    if cached is not None:  # the bin cache's features: binned already, from the same rows
        return cached
    if rows is not None:
        return _bin_rows(X, rows, n_bins=n_bins, sample_count=sample_count, seed=seed,
                         max_bins=max_bins, context=context)
    check_n_bins(n_bins, min(max_bins, MAX_INT16_BINS))
    if isinstance(sample_count, bool) or not isinstance(sample_count, int) or sample_count < 2:
        raise ValueError(f"sample_count: expected an int >= 2, got {sample_count!r}")
    ctx = get_context(False) if context is None else context
    dtype, missing = code_dtype(n_bins)
    n = X.shape[0]
    counts = [int(c) for c in ctx.gather_values([n])[:, 0].tolist()]
    off, total = sum(counts[: ctx.rank]), sum(counts)
    idx = sample_rows(total, sample_count, seed, X.device)  # global positions, sorted
    if idx is None:
        mine, start = None, off
    else:
        start = int((idx < off).sum())  # this rank's sampled rows begin there in the sample
        mine = idx[(idx >= off) & (idx < off + n)] - off
    S = ctx.all_gather_rows(X if mine is None else X.index_select(0, mine))  # global row order
    edges, num_bins, _, scodes = edges_and_sample_codes(S, n_bins, max(S.shape[0], 2), seed,
                                                         missing, dtype)
    mine_codes = scodes[start : start + (n if mine is None else mine.numel())]
    codes = _code_rows(X, edges, missing, dtype, mine, mine_codes)
    has_missing = torch.zeros(X.shape[1], dtype=torch.bool, device=X.device)
    for s in range(0, n, _CODE_CHUNK):  # row chunks: no (n, F) boolean copy of X
        has_missing |= torch.isnan(X[s : s + _CODE_CHUNK]).any(0)
    ctx.all_reduce_max(has_missing)
    return BinnedFeatures(codes=codes, edges=edges, num_bins=num_bins, has_missing=has_missing,
                          missing_code=missing, n_bins=n_bins, context=ctx)


def _code_rows(X: Tensor, edges: Tensor, missing: int, dtype, sampled, scodes: Tensor) -> Tensor:
    """The codes of every row of ``X``: ``scodes`` (read off the sort) for the ``sampled``
    rows (``None``: all rows), :func:`apply_bins` for the others."""
    if torch.isnan(edges).any():  # degenerate edges (midpoint of -inf and +inf): code every row by search
        return apply_bins(X, edges, missing_code=missing, dtype=dtype)
    if sampled is None:  # every row was in the sample
        return scodes
    codes = torch.empty((X.shape[0], X.shape[1]), dtype=dtype, device=X.device)
    codes[sampled] = scodes
    rest = torch.ones(X.shape[0], dtype=torch.bool, device=X.device)
    rest[sampled] = False
    rest = rest.nonzero().squeeze(1)
    for s in range(0, rest.numel(), _CODE_CHUNK):  # chunks: no full copy of the other rows
        r = rest[s : s + _CODE_CHUNK]
        codes[r] = apply_bins(X.index_select(0, r), edges, missing_code=missing, dtype=dtype)
    return codes


def _bin_rows(X: Tensor, rows: Tensor, **kw) -> BinnedFeatures:
    """:func:`bin_features` of ``X[rows]`` (exactly the binning of those rows alone), with
    the other rows coded by those edges."""
    rows = rows.to(X.device)
    sub = bin_features(X.index_select(0, rows), **kw)
    codes = apply_bins(X, sub.edges, missing_code=sub.missing_code, dtype=sub.codes.dtype)
    codes[rows] = sub.codes
    sub.codes = codes
    return sub
