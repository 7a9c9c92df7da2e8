"""Per-round statistics of the RankBoost family without materialising label-induced pairs.

Notation (Freund, Iyer, Schapire & Singer 2003; Rudin & Schapire 2009; Connamacher,
Pancha, Liu & Ray 2019). With current scores ``s`` the distribution over crucial pairs ``(i, j)`` (``i``
preferred to ``j``) is

    D(i, j) = exp(s_j - s_i) / F̃(s),      F̃(s) = Σ_{(i,j)} exp(-(s_i - s_j))   (RankBoost's loss).

For a binary weak ranker ``h`` the pair outcomes give

    ε⁺ = Σ D 1[h_i = 1, h_j = 0],  ε⁻ = Σ D 1[h_i = 0, h_j = 1],  ε⁰ = 1 - ε⁺ - ε⁻,
    r  = Σ D (h_i - h_j) = ε⁺ - ε⁻                         (also defined for real-valued h).

**Label-induced pairs factorise.** Within query ``g`` and label level ``k`` let
``A_{gk} = Σ_{l_i = k} e^{-s_i}`` and ``B_{g,<k} = Σ_{l_j < k} e^{s_j}``; then
``F̃ = Σ_{g,k} A_{gk} B_{g,<k}`` (O(n), computed in log space). The per-document masses
``U_i = Σ_j D(i, j)`` (as the preferred member) and ``L_j = Σ_i D(i, j)`` give the linear
statistics ``P1 = Σ U_i h_i``, ``N1 = Σ L_i h_i``, ``r = P1 - N1``. The only bilinear term is
``Q = Σ D(i, j) h_i h_j``; then ``ε⁺ = P1 - Q`` and ``ε⁻ = N1 - Q``.

For threshold rankers ``h = 1[code_f > t]`` the product ``h_i h_j = 1[min(code_i, code_j) > t]``
so ``Q(f, t) = Σ_i m_{if} 1[code_{if} > t]`` with ``m_{if}`` the mass of the pairs whose
*smaller* member in feature ``f``'s order (ties broken by position) is ``i``:
``m_i = u_i Σ_{j after i, l_j < l_i} v_j + v_i Σ_{j after i, l_j > l_i} u_j`` (per query, with
``D(i, j) = ρ_g u_i v_j``). One sort per feature at fit time, then per round a few gathers,
segmented suffix sums over ``(n, F)`` and one histogram — O(n·F·K) per round for *all*
(feature, threshold) candidates, independent of the number of thresholds.

Explicit pair lists cost O(#pairs) per round (``ExplicitPairStats``).

**Data-parallel** (``LabelPairStats(..., context=ctx)``, each rank holding whole queries):
every pair lies inside one query, so ``F̃ = Σ_r F̃_r`` over the ranks and every statistic
above is a per-rank sum divided by the global ``F̃``. There is one path: the context's
collectives are identities in one process (the default context), so one process is the
case ``W = 1``. ``weights`` combines the ranks' normalisers (one all-reduce of ``W`` pairs:
each rank's ``F̃_r`` and whether its linear-domain path applies; the linear path is kept
when it applies on every rank and to the sum, else every rank takes the log path, whose
``ln F̃_r`` a second all-reduce combines by log-sum-exp, the masses scaled by
``F̃_r / F̃``); ``chosen_stats`` all-reduces ``(ε⁺, ε⁻, ε⁰)``, ``log_loss`` combines
``ln F̃_r`` by log-sum-exp and ``margin`` takes the minimum over the ranks; the
dictionaries all-reduce their per-candidate sums (:class:`~.dictionaries.CodesDictionary`
``reduce``).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import Tensor

from ..._pair_engine.exponential import level_terms, pooled_log_loss
from ..._pair_engine.levels import label_levels, level_cells, levels_from_cells, pairs_per_group
from ..._pair_engine.margin import explicit_margin, label_margin
from ..._pair_engine.segment import excl_cumsum
from ...parallel import get_context
from ...groups import Groups
from ...pairs import ExplicitPairs
from ...parallel.checks import check_data_parallel

__all__ = ["PairWeights", "LabelPairStats", "ExplicitPairStats", "make_pair_stats"]


def _row_sum_matrix(rows: Tensor, num_rows: int, dtype=torch.float64):
    """A sparse CSR (num_rows × n) 0/1 matrix with a one at (rows[i], i): ``M @ x`` sums the
    rows of ``x`` per index (4x faster than ``index_add_`` on CPU). None off the CPU, where
    the callers fall back to ``index_add_``/``scatter_add_``."""
    if rows.device.type != "cpu":
        return None
    import warnings

    n = rows.numel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idx = torch.stack([rows, torch.arange(n, device=rows.device)])
        m = torch.sparse_coo_tensor(idx, torch.ones(n, dtype=dtype), (num_rows, n)).coalesce()
        return m.to_sparse_csr()


def _sum_rows(M, rows: Tensor, num_rows: int, x: Tensor) -> Tensor:
    """``out[r] = Σ_{rows[i] == r} x[i]`` for (n,) or (n, k) ``x``."""
    if M is not None and x.dtype == torch.float64:
        return M @ x if x.dim() == 2 else (M @ x[:, None])[:, 0]
    out = torch.zeros((num_rows,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    return out.index_add_(0, rows, x)


class PairWeights:
    """The pair distribution at the current scores (all float64, on the scores' device).

    ``log_loss`` = ln F̃ (scalar tensor); ``U``/``L`` (n,) normalised masses as upper/lower
    member (``U - L = -∂ ln F̃/∂s``); ``u``, ``v`` (n,) and ``rho`` (n,) the factors with
    ``D(i, j) = rho_i u_i v_j`` for label-induced pairs (None for explicit pairs); ``d``
    (P,) the pair distribution for explicit pairs (None otherwise).
    """

    def __init__(self, log_loss, U=None, L=None, u=None, v=None, rho=None, *, d=None, rho_g=None,
                 stats=None, linear=None):
        self.log_loss, self._U, self._L = log_loss, U, L
        self._u, self._v, self._rho, self.d, self._rho_g = u, v, rho, d, rho_g
        self._stats = stats
        self.linear = linear  # (a, b, A, B, Blt, Z) of the linear-domain path, or None

    def _factors(self):
        a, b, A, B, Blt, Z = self.linear
        st = self._stats
        self._u = torch.where(st.can_upper, a, torch.zeros_like(a))
        self._v = torch.where(st.can_lower, b, torch.zeros_like(b))
        self._rho_g = torch.full((st.G,), 1.0 / float(Z), dtype=a.dtype, device=a.device)
        self._rho = self._rho_g[st.gi]

    def _factor(name):  # noqa: N805 - a property factory used in the class body
        def get(self):
            if getattr(self, name) is None and self.linear is not None:
                self._factors()
            return getattr(self, name)
        return property(get)

    u, v, rho, rho_g = _factor("_u"), _factor("_v"), _factor("_rho"), _factor("_rho_g")
    del _factor

    def _doc_masses(self):
        st = self._stats
        self._U = torch.zeros(st.n, dtype=self.d.dtype, device=self.d.device).index_add_(0, st.hi, self.d)
        self._L = torch.zeros(st.n, dtype=self.d.dtype, device=self.d.device).index_add_(0, st.lo, self.d)

    @property
    def U(self):
        if self._U is None:
            self._doc_masses()
        return self._U

    @property
    def L(self):
        if self._L is None:
            self._doc_masses()
        return self._L


class LabelPairStats:
    """Crucial pairs induced by labels inside each query (graded or bipartite).

    Args:
        labels: ``(n,)`` labels. groups: :class:`Groups`. pairs: :class:`Graded` or
        :class:`Bipartite`. context: the
        :class:`~torchrankboost.parallel.DistContext` of the fit (the queries are this
        rank's; see the module docstring); ``None``: this process alone.
    """

    #: the round whose scores the kept per-query centre of the linear path was taken from
    #: (``None``: not tracked or not taken yet; see :meth:`track_centre`)
    centre_round: Optional[int] = None

    def __init__(self, labels: Tensor, groups: Groups, pairs, context=None):
        self.ctx = get_context(False) if context is None else context
        labels = torch.as_tensor(labels)
        dev = groups.device
        lev, K, _ = label_levels(labels.to(dev), groups, pairs)
        self.groups = groups
        self.n = groups.num_docs
        self.K = max(K, 1)
        self.G = groups.num_groups
        self.level = lev
        self.gi = groups.group_index
        self.bucket = level_cells(lev, self.K, groups)  # (query, level) cell, dense (G, K)
        self.levels = levels_from_cells(self.bucket, self.G, self.K)  # non-empty cells
        self.pairs_per_group = pairs_per_group(self.bucket, self.G, self.K)
        self.num_pairs = int(self.pairs_per_group.sum())
        lmin = torch.full((self.G,), self.K, dtype=torch.long, device=dev).scatter_reduce(
            0, self.gi, lev, "amin", include_self=True)
        lmax = torch.full((self.G,), -1, dtype=torch.long, device=dev).scatter_reduce(
            0, self.gi, lev, "amax", include_self=True)
        self.can_upper = lev > lmin[self.gi]
        self.can_lower = lev < lmax[self.gi]
        self.active = torch.nonzero(self.can_upper | self.can_lower).flatten()
        self._bucket_M = _row_sum_matrix(self.bucket, self.G * self.K)
        self.local_pairs = self.num_pairs  # a rank may hold no pair; all ranks together must
        self.num_pairs = int(self.ctx.all_reduce_sum(
            torch.tensor([self.num_pairs], dtype=torch.int64))[0])
        if self.num_pairs == 0:
            raise ValueError("labels: no crucial pairs (every query has a single label level)")
        self.is_explicit = False

    # ------------------------------------------------------------------ loss
    def log_loss(self, s: Tensor) -> Tensor:
        """ln F̃(s) in O(n log K): the pair engine's exponential family at ``p = 1``, over
        all ranks' pairs (a log-sum-exp of the ranks' values; a float64 value, no gradient)."""
        mine = (float(pooled_log_loss(s, self.levels, self.groups, 1.0)[0])
                if self.local_pairs else -math.inf)
        logs = self.ctx.gather_values([mine])[:, 0]
        return torch.logsumexp(logs, 0).to(s.device)

    def weights(self, s: Tensor) -> PairWeights:
        """The pair distribution at the scores ``s`` (see the module docstring): the
        linear-domain path when it applies on every rank and to ``F̃``, else the log path."""
        s = s.to(torch.float64)
        has = self.local_pairs > 0
        parts = self._linear_parts(s) if has else None
        z_r = float(parts[-1]) if parts is not None else 0.0
        lin = parts is not None and 0.0 < z_r < math.inf
        rows = self.ctx.gather_values([z_r if lin else 0.0, 1.0 if (lin or not has) else 0.0])
        Z = float(rows[:, 0].sum())
        if bool((rows[:, 1] > 0).all()) and 1e-250 < Z < 1e250:
            Zt = torch.tensor(Z, dtype=torch.float64, device=s.device)
            if not has:
                return self._no_pair_weights(s, float(torch.log(Zt)))
            return self._linear_weights(parts, Zt)
        return self._weights_log_all(s, has)

    def _weights_log_all(self, s: Tensor, has: bool) -> PairWeights:
        """The log-path weights over every rank's pairs: this rank's, scaled by ``F̃_r / F̃``
        (``ln F̃`` a log-sum-exp of the ranks' ``ln F̃_r``; the scale is 1 in one process)."""
        wl = self._weights_log(s) if has else None
        log_r = float(wl.log_loss) if has else -math.inf
        logZ = float(torch.logsumexp(self.ctx.gather_values([log_r])[:, 0], 0))
        if not has:
            return self._no_pair_weights(s, logZ)
        if log_r == logZ:  # one process (or every other rank without pairs): scale 1
            return wl
        scale = math.exp(log_r - logZ)
        return PairWeights(torch.tensor(logZ, dtype=torch.float64, device=s.device),
                           wl.U * scale, wl.L * scale, wl.u, wl.v, wl.rho * scale,
                           rho_g=wl.rho_g * scale)

    def _no_pair_weights(self, s: Tensor, logZ: float) -> PairWeights:
        """The weights of a rank whose queries hold no crucial pair (all masses 0)."""
        z = torch.zeros_like(s)
        return PairWeights(torch.tensor(logZ, dtype=torch.float64, device=s.device), z, z, z,
                           z, z, rho_g=torch.zeros(self.G, dtype=s.dtype, device=s.device))

    def _tri(self, like: Tensor) -> Tensor:
        """(K, K) matrix ``T[k', k] = 1[k' < k]``: ``B @ T`` sums the lower label levels."""
        t = getattr(self, "_tri_cache", None)
        if t is None or t.dtype != torch.float64 or t.device != like.device:
            t = self._tri_cache = torch.ones(self.K, self.K, dtype=torch.float64,
                                             device=like.device).triu(1)
        return t

    def track_centre(self, clock: Callable[[], int]) -> None:
        """Note in :attr:`centre_round`, each time the per-query centre is taken again,
        the round ``clock()`` gives (a checkpoint keeps it: a resume rebuilds that centre)."""
        self._clock = clock

    def restore_centre(self, s: Tensor, rnd: int) -> None:
        """Keep the per-query centre of ``s``, the scores of round ``rnd`` (a resume)."""
        self._c = self._centre(s)
        self.centre_round = rnd

    def _retake_centre(self, s: Tensor) -> Tensor:
        clock = getattr(self, "_clock", None)
        if clock is not None:
            self.centre_round = clock()
        c = self._c = self._centre(s)
        return c

    def _centre(self, s: Tensor, *, span: bool = False):
        """Per-document query centre ``(max + min)/2`` of the scores (``(n,)``); with
        ``span=True`` also the largest query span ``max − min`` (a float)."""
        G = self.G
        inf = float("inf")
        smax = torch.full((G,), -inf, dtype=s.dtype, device=s.device).scatter_reduce(
            0, self.gi, s, "amax", include_self=True)
        smin = torch.full((G,), inf, dtype=s.dtype, device=s.device).scatter_reduce(
            0, self.gi, s, "amin", include_self=True)
        c = torch.where(torch.isfinite(smax), (smax + smin) / 2, torch.zeros_like(smax))[self.gi]
        if not span:
            return c
        d = smax - smin
        return c, (float(torch.where(torch.isfinite(d), d, torch.zeros_like(d)).max()) if G else 0.0)

    def _linear_parts(self, s: Tensor):
        """The linear-domain path's ``(e, A, B, Blt, Agt, Z)`` (``Z`` = this rank's ``F̃``):
        ``e = [a, b]`` with ``a = e^{c - s}``, ``b = e^{s - c}`` for a per-query centre ``c``
        (the pair weights ``a_i b_j = e^{s_j - s_i}`` do not depend on it; it is kept between
        rounds and recomputed when ``|s - c|`` exceeds 300), and the (query, level) bucket
        sums; None when a query's scores span more than 600 (log path)."""
        G, K = self.G, self.K
        c = getattr(self, "_c", None)
        if c is None or c.shape != s.shape or c.dtype != s.dtype or c.device != s.device:
            c = self._retake_centre(s)
        x = s - c
        if float(x.abs().max()) > 300:
            c = self._retake_centre(s)
            x = s - c
            if float(x.abs().max()) > 300:
                return None
        e = torch.exp(torch.stack([-x, x], 1))  # (n, 2) = [a, b]
        AB = _sum_rows(self._bucket_M, self.bucket, G * K, e).view(G, K, 2)
        A, B = AB[..., 0], AB[..., 1]
        lt = self._tri(s)
        Blt = B @ lt  # Σ over lower levels
        Agt = A @ lt.T  # Σ over higher levels
        Z = (A * Blt).sum()
        return e, A, B, Blt, Agt, Z

    def _linear_weights(self, parts, Z: Tensor) -> PairWeights:
        """The linear-domain :class:`PairWeights` from :meth:`_linear_parts`, normalised by
        ``Z`` (``F̃``: this process's, or all ranks')."""
        G, K = self.G, self.K
        e, A, B, Blt, Agt, _ = parts
        UL = e * (torch.stack([Blt, Agt], -1) / Z).view(G * K, 2)[self.bucket]
        w = PairWeights(torch.log(Z), UL[:, 0], UL[:, 1], stats=self,
                        linear=(e[:, 0], e[:, 1], A, B, Blt, Z))
        w.e = e
        return w

    def _weights_log(self, s: Tensor) -> PairWeights:
        # the engine's level terms: per-query ln F̃_q and each document's gradient shares
        # as the lower (lo) and upper (hi) member, so that U = e^{hi}/F̃ and L = e^{lo}/F̃
        t = level_terms(s, None, self.levels, self.groups, 1.0, parts="grad")
        lam = t["logF"]  # (G,) log pair mass per query
        logZ = torch.logsumexp(lam, 0)
        U = torch.exp(t["hi"] - logZ)
        L = torch.exp(t["lo"] - logZ)
        # balanced per-query factorisation D(i,j) = rho_g u_i v_j; u only on documents with a
        # lower partner, v only on documents with an upper partner (others are exactly 0)
        G = self.G
        up, lo = self.can_upper, self.can_lower
        inf = float("inf")
        mn_up = torch.full((G,), inf, dtype=s.dtype, device=s.device).scatter_reduce(
            0, self.gi, torch.where(up, s, torch.full_like(s, inf)), "amin", include_self=True)
        mx_lo = torch.full((G,), -inf, dtype=s.dtype, device=s.device).scatter_reduce(
            0, self.gi, torch.where(lo, s, torch.full_like(s, -inf)), "amax", include_self=True)
        ok = torch.isfinite(lam)
        lam0 = torch.where(ok, lam, torch.zeros_like(lam))
        c = torch.where(ok, (mn_up + mx_lo - lam0) / 2, torch.zeros_like(lam))
        cg, lg = c[self.gi], lam0[self.gi]
        okd = ok[self.gi]
        u = torch.where(okd & up, torch.exp(-s + cg), torch.zeros_like(s))
        v = torch.where(okd & lo, torch.exp(s - cg - lg), torch.zeros_like(s))
        rho_g = torch.where(ok, torch.exp(lam0 - logZ), torch.zeros_like(lam))
        return PairWeights(logZ, U, L, u, v, rho_g[self.gi], rho_g=rho_g)

    # ------------------------------------------------------------------ line search
    def line_function(self, s: Tensor, h: Tensor):
        """``α ↦ (φ, φ', φ'')`` of the convex ``φ(α) = ln F̃(s + α h)``, for
        :func:`~torchrankboost.boosting.line_search`'s ``evaluate``, ~12 ops per call: bucket
        sums of ``[e^{-x}, -h e^{-x}, h² e^{-x}, e^{x}, h e^{x}, h² e^{x}]`` at ``x = s + αh``
        centred per query give ``F = Σ_k A_k B_{<k}`` and its first two derivatives
        (``F' = Σ A' B_{<k} + A B'_{<k}``, ``F'' = Σ A'' B_{<k} + 2 A' B'_{<k} + A B''_{<k}``),
        so ``φ' = F'/F`` and ``φ'' = F''/F − φ'²``. The log-domain path (without ``φ''``) is
        used when the centred exponentials would overflow. This rank's pairs only: a
        data-parallel fit takes binary rankers (closed-form steps, see
        :func:`~torchrankboost.parallel.checks.check_data_parallel`)."""
        s = s.to(torch.float64)
        h = h.to(torch.float64)
        G, K = self.G, self.K
        c, span = self._centre(s, span=True)
        x0 = s - c
        hmax = float(h.abs().max()) if h.numel() else 0.0

        def dphi(a):
            if span / 2 + abs(a) * hmax > 600:
                w = self.weights(s + a * h)
                return float(w.log_loss), float(-((w.U - w.L) * h).sum())
            x = x0 + a * h
            ea, eb = torch.exp(-x), torch.exp(x)
            hea, heb = h * ea, h * eb
            z = torch.zeros(G * K, 6, dtype=s.dtype, device=s.device).index_add_(
                0, self.bucket, torch.stack([ea, -hea, h * hea, eb, heb, h * heb], 1))
            A, dA, d2A, B, dB, d2B = z.view(G, K, 6).unbind(-1)
            Blt, dBlt, d2Blt = excl_cumsum(B), excl_cumsum(dB), excl_cumsum(d2B)
            F = float((A * Blt).sum())
            d1 = float((dA * Blt + A * dBlt).sum()) / F
            d2 = float((d2A * Blt + 2 * dA * dBlt + A * d2Blt).sum()) / F - d1 * d1
            return math.log(F), d1, d2

        return dphi

    # ------------------------------------------------------------------ one candidate
    def chosen_stats(self, w: PairWeights, h: Tensor):
        """(ε⁺, ε⁻, ε⁰) of one binary ranker ``h`` (n,) in {0, 1}; exact bucket sums (over
        every rank's pairs when data-parallel: one all-reduce of the three)."""
        ep, em, e0 = self._chosen_stats(w, h)
        t = self.ctx.all_reduce_sum(torch.stack([ep, em, e0]).to(torch.float64))
        return t[0], t[1], t[2]

    def _chosen_stats(self, w: PairWeights, h: Tensor):
        G, K = self.G, self.K
        h = h.to(torch.float64)
        if w.linear is not None:
            a, b, A, B, Blt, Z = w.linear
            z = _sum_rows(self._bucket_M, self.bucket, G * K, w.e * h[:, None]).view(G, K, 2)
            A1, B1 = z[..., 0], z[..., 1]
            B1lt = B1 @ self._tri(h)
            ep = (A1 * (Blt - B1lt)).sum() / Z
            em = ((A - A1) * B1lt).sum() / Z
            e0 = (A1 * B1lt + (A - A1) * (Blt - B1lt)).sum() / Z
            return ep, em, e0
        nb = G * K
        z = torch.zeros(nb, 4, dtype=torch.float64, device=h.device)
        vals = torch.stack([w.u * h, w.u, w.v * h, w.v], 1)
        z.index_add_(0, self.bucket, vals)
        z = z.view(G, K, 4)
        A1, A, B1, B = z.unbind(-1)
        B1lt = excl_cumsum(B1)
        Blt = excl_cumsum(B)
        rho = w.rho_g
        ep = (rho[:, None] * A1 * (Blt - B1lt)).sum()
        em = (rho[:, None] * (A - A1) * B1lt).sum()
        e0 = (rho[:, None] * (A1 * B1lt + (A - A1) * (Blt - B1lt))).sum()
        return ep, em, e0

    def margin(self, s: Tensor) -> Tensor:
        """min over crucial pairs of s_i - s_j (O(n + GK), the pair engine's margin; over
        every rank's pairs when data-parallel; float64)."""
        m = (label_margin(s, self.level, self.K, self.groups, many=False).min()
             if self.local_pairs else torch.tensor(math.inf, dtype=s.dtype, device=s.device))
        return self.ctx.all_reduce_min(m.reshape(1).to(torch.float64))[0]

    # ------------------------------------------------------------------ all candidates
    def prepare_codes(self, codes: Tensor):
        """Per-feature orders by (query, code, position) for the bilinear Q kernel."""
        n, F = codes.shape
        key = self.gi[:, None] * (int(codes.max()) + 2 if codes.numel() else 1) + codes.long()
        perm = torch.argsort(key, dim=0, stable=True)
        lev_s = self.level[perm]
        # the sorted layout keeps each query's rows in place, so positions are shared
        rem = self.groups.sizes[self.gi] - 1 - self.groups.position
        G, L = self.G, self.groups.max_size
        pad = (self.gi, self.groups.position + 1, G, L) if G * (L + 1) <= 2 * max(self.n, 1) else None
        return {"perm": perm, "lev_s": lev_s, "rem": rem, "max_size": self.groups.max_size,
                "pad_index": pad,
                "codes_s": torch.gather(codes.long(), 0, perm)}

    def q_values(self, w: PairWeights, cp) -> Tensor:
        """``m`` (n, F) in the sorted layout: mass of pairs whose smaller member is the doc."""
        perm, lev_s = cp["perm"], cp["lev_s"]
        u_s = (w.u * w.rho)[perm]
        v_s = w.v[perm]
        K = self.K
        SV = [None] * (K + 1)
        SU = [None] * (K + 1)
        for k in range(1, K):
            SV[k] = _seg_suffix_excl(torch.where(lev_s < k, v_s, 0.0), cp)   # lower partners
            SU[k] = _seg_suffix_excl(torch.where(lev_s >= k, u_s, 0.0), cp)  # upper partners
        m = torch.zeros_like(u_s)
        for lv in range(K):
            term = torch.zeros_like(u_s)
            if lv >= 1:
                term = term + u_s * SV[lv]
            if lv + 1 <= K - 1:
                term = term + v_s * SU[lv + 1]
            m = torch.where(lev_s == lv, term, m)
        return m


def _seg_suffix_excl(x: Tensor, cp) -> Tensor:
    """Exclusive suffix sums ``Σ_{j > i, same group} x_j`` of (n, F) ``x`` within contiguous
    groups, adding non-negative terms only — no global-prefix subtraction, so no cancellation
    when the magnitudes differ by hundreds of orders between queries. Padded per-query
    reverse cumsum when the padded size is at most 2·n, else a segmented Hillis–Steele scan
    (``ceil(log2 L)`` shifted adds)."""
    if cp.get("pad_index") is not None:
        gi, pos1, G, L = cp["pad_index"]
        F = x.shape[1]
        buf = x.new_zeros(G, L + 1, F)
        buf[gi, pos1 - 1] = x
        suf = torch.flip(torch.cumsum(torch.flip(buf, [1]), 1), [1])  # inclusive suffix
        return suf[gi, pos1]  # the suffix after i (the padding column L is 0)
    rem = cp["rem"]  # (n,) documents after i in its group
    masks = cp.get("scan_masks")
    if masks is None or masks[0].dtype != x.dtype:
        masks = []
        step = 1
        masks.append((rem >= 1).to(x.dtype)[:, None])
        while step < cp["max_size"]:
            masks.append((rem > step).to(x.dtype)[:, None])
            step *= 2
        cp["scan_masks"] = masks
    n = x.shape[0]
    y = torch.zeros_like(x)
    if n > 1:
        y[:-1] = x[1:] * masks[0][:-1]
    step = 1
    for m in masks[1:]:
        if step >= n:
            break
        y[: n - step] += y[step:] * m[: n - step]  # the product is a temporary: old values
        step *= 2
    return y


class ExplicitPairStats:
    """Statistics over an explicit pair list (``hi`` preferred to ``lo``, optional weights)."""

    def __init__(self, pairs: ExplicitPairs, groups: Groups):
        p = pairs.validate(groups)
        self.hi, self.lo = p.hi, p.lo
        self.logw = None if p.weight is None else torch.log(p.weight.to(torch.float64))
        keep = None
        if self.logw is not None:
            keep = torch.isfinite(self.logw)
            self.hi, self.lo, self.logw = self.hi[keep], self.lo[keep], self.logw[keep]
        self.n = groups.num_docs
        self.groups = groups
        self.num_pairs = self.hi.numel()
        self.active = torch.unique(torch.cat([self.hi, self.lo]))
        if self.num_pairs == 0:
            raise ValueError("pairs: no crucial pairs with positive weight")
        self.is_explicit = True

    def _logits(self, s):
        z = s[self.lo] - s[self.hi]
        return z if self.logw is None else z + self.logw

    def log_loss(self, s: Tensor) -> Tensor:
        return torch.logsumexp(self._logits(s), 0)

    def weights(self, s: Tensor) -> PairWeights:
        s = s.to(torch.float64)
        z = self._logits(s)
        logZ = torch.logsumexp(z, 0)
        d = torch.exp(z - logZ)
        return PairWeights(logZ, d=d, stats=self)

    def line_function(self, s: Tensor, h: Tensor):
        """``α ↦ (φ, φ', φ'')`` of ``φ(α) = ln F̃(s + α h)`` over the explicit pairs
        (``φ' = −E_D[Δh]``, ``φ'' = Var_D(Δh)`` under the pair distribution ``D``)."""
        z0 = self._logits(s.to(torch.float64))
        h = h.to(torch.float64)
        dh = h[self.hi] - h[self.lo]

        def dphi(a):
            z = z0 - a * dh
            lz = torch.logsumexp(z, 0)
            d = torch.exp(z - lz)
            m1 = float((d * dh).sum())
            return float(lz), -m1, float((d * dh * dh).sum()) - m1 * m1

        return dphi

    def chosen_stats(self, w: PairWeights, h: Tensor):
        h = h.to(torch.float64)
        a, b = h[self.hi], h[self.lo]
        ep = (w.d * a * (1 - b)).sum()
        em = (w.d * (1 - a) * b).sum()
        e0 = (w.d * (a * b + (1 - a) * (1 - b))).sum()
        return ep, em, e0

    def margin(self, s: Tensor) -> Tensor:
        return explicit_margin(s, self.hi, self.lo, self.groups).min()

    def prepare_codes(self, codes: Tensor):
        c = codes.long()
        ch, cl = c[self.hi], c[self.lo]  # (P, F)
        # the smaller member in (code, index) order carries the pair's mass
        hi_smaller = (ch < cl) | ((ch == cl) & (self.hi < self.lo)[:, None])
        owner = torch.where(hi_smaller, self.hi[:, None], self.lo[:, None])  # (P, F)
        F = c.shape[1]
        flat = (owner * F + torch.arange(F, device=c.device)).flatten()
        return {"flat": flat, "F": F, "perm": None}

    def q_values(self, w: PairWeights, cp) -> Tensor:
        F = cp["F"]
        m = torch.zeros(self.n * F, dtype=torch.float64, device=w.d.device)
        m.index_add_(0, cp["flat"], w.d[:, None].expand(-1, F).reshape(-1))
        return m.view(self.n, F)


def make_pair_stats(labels, groups: Groups, pairs, context=None):
    """The pair statistics of ``pairs`` (explicit or label-induced) over ``groups``;
    ``context``: the fit's :class:`~torchrankboost.parallel.DistContext` (``None``: this
    process alone)."""
    ctx = get_context(False) if context is None else context
    check_data_parallel(ctx, pairs=pairs)
    if isinstance(pairs, ExplicitPairs):
        return ExplicitPairStats(pairs, groups)
    return LabelPairStats(labels, groups, pairs, context=ctx)
