r"""RankBoost+ (Connamacher, Pancha, Liu & Ray 2019, efficient Algorithm 2) over the
coordinate-boosting loop (:mod:`.coordinate`)."""

from __future__ import annotations

import math
from typing import Any, List, Sequence

import torch
from torch import Tensor

from ..._pair_engine.exponential import log_cosh as _logcosh
from ..._pair_engine.levels import label_pairs
from .coordinate import CoordinateBoosting, Step
from ...pairs import PairSpec

__all__ = ["RankBoostPlus"]


def _int8_vecmat(v: Tensor, M: Tensor, chunk: int = 1024) -> Tensor:
    """``v @ M`` for a float64 vector and an int8 matrix, widening ``chunk`` columns at a time."""
    out = torch.empty(M.shape[1], dtype=v.dtype, device=v.device)
    for c in range(0, M.shape[1], chunk):
        out[c:c + chunk] = v @ M[:, c:c + chunk].to(v.dtype)
    return out


class RankBoostPlus(CoordinateBoosting):
    r"""RankBoost+ (Connamacher, Pancha, Liu & Ray 2019), efficient Algorithm 2.

    Minimises ``Ê2(η) = (1/m) Σ_i exp(-Σ_s A_{is} η_s + Σ_s 1[A_{is}=0] ln cosh η_s)`` over
    a linearly independent (in pair space) set ``S`` of binary rankers, where
    ``A_{is} = h_s(hi_i) - h_s(lo_i)``. Each round computes ``δ_s = ε⁻ - ε⁺ + ε⁰ tanh η_s``
    for the members of ``S`` and ``|ε⁺ - ε⁻|`` for the new candidates; takes the larger;
    steps ``α = atanh(-δ)`` (eq. 34 with ``α′ = η_s``); reweights with the tie factor
    ``cosh(α + α′)/cosh α′`` (eq. 25). The first time the best new candidate lies in
    ``span(S)`` the candidate set is pruned once to an independent set containing ``S``
    (QR of ``[S, permute(R)]``, seeded) and ``S`` becomes static (greedy regime ends).

    Pairs are materialised (the tie factor is pair-specific): the candidate pair vectors
    ``(m, C)`` (int8 entries in {-1, 0, 1}, one byte each; at most ``max_pair_entries``
    entries, default 4e8 ≈ 400 MB, else ``ValueError``) are
    deduplicated first (identical or negated columns, zero columns). The span test uses an
    incrementally orthonormalised basis of ``S`` (Gram–Schmidt twice, float64, relative
    tolerance ``rank_tol``) instead of the paper's least squares; pruning adds the remaining
    candidates in a seeded random order whenever they are independent of the basis so far
    (the paper's QR of ``[S, permute(R)]``).
    Diagnostics: ``alpha``, ``alpha_prime``, ``eps_plus/minus/zero``, ``delta``,
    ``loss_e2`` = ``loss`` (ln Ê2 after the step, recomputed from η), ``loss_before``,
    ``greedy``, ``new_ranker``.
    """

    _algorithm = "rankboost_plus"

    def __init__(self, *, learner: Any = None, n_rounds: int = 100, pairs: PairSpec = None,
                 seed: int = 0, rank_tol: float = 1e-9, on_unbounded: str = "stop",
                 alpha_cap: float = 50.0, max_pair_entries: int = 400_000_000,
                 callbacks: Sequence[Any] = ()):
        super().__init__(learner=learner, n_rounds=n_rounds, pairs=pairs, callbacks=callbacks,
                         on_unbounded=on_unbounded, alpha_cap=alpha_cap)
        self.seed = int(seed)
        self.rank_tol = float(rank_tol)
        self.max_pair_entries = int(max_pair_entries)

    def _eval_objective(self, pairs):
        """None: Ê2 depends on each ranker's ties and accumulated weight, not on the scores
        alone (evaluate RankBoost+ with ranking metrics)."""
        return None

    def _begin(self, X, labels, groups, p, init_scores):
        D = self.source_.dictionary
        if not D.binary:
            raise ValueError("RankBoostPlus needs binary {0,1} rankers")
        R, self._cand, logD = self._pair_matrix(D, labels, groups, p, X.shape[0])
        self.num_candidates_ = R.shape[1]
        self._logD, self._log_d1 = logD, logD.clone()
        self._st = _PlusState(R, self.rank_tol)
        self._le2 = 0.0  # ln Ê2 at η = 0 (D_1 normalised)
        return None  # the state is the pair weights, not the scores

    def _step(self, s, l1):
        st, logD = self._st, self._logD
        choice = st.choose(torch.exp(logD), self.seed)
        if choice is None:
            self._halt("no candidate ranker")
        kind, k, col, (ep, em, e0), ap = choice
        arg = ep - em - e0 * math.tanh(ap)  # = -δ
        alpha = self._atanh(arg, "perfect ranker (atanh argument = ±1)")
        cidx = int(self._cand[st.commit(kind, k, col, alpha)])
        # reweight (eq. 25) in log space
        tie = (_logcosh(torch.tensor(alpha + ap, dtype=torch.float64))
               - _logcosh(torch.tensor(ap, dtype=torch.float64))).item()
        vals = torch.tensor([-alpha, alpha, tie], dtype=torch.float64, device=logD.device)
        logw = torch.where(col > 0, vals[0], torch.where(col < 0, vals[1], vals[2]))
        logD = logD + logw
        self._logD = logD - torch.logsumexp(logD, 0)
        return Step(delta=None, alpha=alpha, terms=[(cidx, alpha)],
                    carry=(cidx, ap, ep, em, e0, arg, kind))

    def _round_diag(self, step, s, l1):
        cidx, ap, ep, em, e0, arg, kind = step.carry
        st = self._st
        prev_le2, le2 = self._le2, st.log_e2(self._log_d1)
        self._le2 = le2
        return dict(self.source_.describe(cidx), candidate=cidx, alpha=step.alpha,
                    alpha_prime=ap, loss_before=prev_le2, loss=le2, eps_plus=ep,
                    eps_minus=em, eps_zero=e0, delta=-arg, loss_e2=le2, greedy=st.greedy,
                    new_ranker=kind == "new", basis_size=len(st.S))

    def _finish(self, builder, s):
        self.eta_ = self._st.eta
        self.basis_ = [int(self._cand[k]) for k in self._st.S]
        return super()._finish(builder, s)

    def _pair_matrix(self, D, labels, groups, p, n):
        """The pair × candidate matrix ``R`` (entries ``h(hi) - h(lo)`` in {-1, 0, 1}, int8:
        8x less memory than float64), its columns deduplicated up to sign and without zero
        columns; the candidates they stand for; ``log D_1`` (normalised pair weights)."""
        hi, lo, pw = label_pairs(labels, groups, p)
        m = hi.numel()
        if m == 0:
            raise ValueError("no crucial pairs")
        cand = torch.nonzero(D.valid).flatten()
        dev = cand.device
        cols = torch.stack([D.column(int(c)) for c in cand], 1) if cand.numel() else torch.zeros(n, 0)
        if m * cand.numel() > self.max_pair_entries:
            raise ValueError(
                f"RankBoostPlus materialises the pair x candidate matrix: {m} pairs x "
                f"{cand.numel()} candidates exceeds max_pair_entries={self.max_pair_entries}; "
                "use fewer thresholds (Stumps(max_thresholds=...)), per-query tasks as in the "
                "paper, or raise max_pair_entries")
        cols = cols.to(torch.int8)
        R = cols[hi] - cols[lo]  # (m, C) int8
        nz = (R != 0).any(0)
        R, cand = R[:, nz], cand[nz]
        first_nz = (R != 0).to(torch.int8).argmax(0)
        sgn = torch.gather(R, 0, first_nz[None]).squeeze(0)
        Rc = (R * sgn).to(torch.int8).T.contiguous()  # canonical orientation
        _, inv = torch.unique(Rc, dim=0, return_inverse=True)
        first = torch.full((int(inv.max()) + 1,), R.shape[1], dtype=torch.long, device=dev)
        first = first.scatter_reduce(0, inv, torch.arange(R.shape[1], device=dev), "amin")
        keep = torch.sort(first).values
        logD = torch.zeros(m, dtype=torch.float64, device=dev)
        if pw is not None:
            logD = torch.log(pw.to(torch.float64))
        return R[:, keep], cand[keep], logD - torch.logsumexp(logD, 0)


class _PlusState:
    """RankBoost+'s working set: the member rankers ``S`` (columns of ``R``) with their
    accumulated weights ``η``, an orthonormal basis of ``span(S)`` in pair space (Gram–Schmidt
    twice, float64), the candidates not tried yet, and the greedy/static regime."""

    def __init__(self, R: Tensor, rank_tol: float):
        self.R, self.rank_tol = R, rank_tol
        self.S: List[int] = []
        self.eta: List[float] = []
        self.Q = torch.zeros(R.shape[0], 0, dtype=torch.float64, device=R.device)
        self.available = torch.ones(R.shape[1], dtype=torch.bool, device=R.device)
        self.greedy = True

    def in_span(self, col) -> bool:
        if self.Q.shape[1] == 0:
            return False
        col = col.to(torch.float64)
        res = col - self.Q @ (self.Q.T @ col)
        return float(res.norm()) <= self.rank_tol * max(1.0, float(col.norm()))

    def add_basis(self, col) -> None:
        Q = self.Q
        col = col.to(torch.float64)
        v = col - Q @ (Q.T @ col)
        v = v - Q @ (Q.T @ v)
        self.Q = torch.cat([Q, (v / v.norm())[:, None]], 1)

    def member_stats(self, Dw):
        """``(ε⁺, ε⁻, ε⁰, δ)`` of every member (``δ = ε⁻ - ε⁺ + ε⁰ tanh η``)."""
        AS = self.R[:, self.S]
        ep = (Dw[:, None] * (AS > 0)).sum(0)
        em = (Dw[:, None] * (AS < 0)).sum(0)
        e0 = (Dw[:, None] * (AS == 0)).sum(0)
        eta = torch.tensor(self.eta, dtype=torch.float64, device=Dw.device)
        return ep, em, e0, em - ep + e0 * torch.tanh(eta)

    def prune(self, seed: int) -> None:
        """Add the remaining candidates in a seeded random order whenever independent of the
        basis so far (the paper's QR of ``[S, permute(R)]``); ``S`` becomes static."""
        gen = torch.Generator().manual_seed(seed)
        rest = torch.nonzero(self.available).flatten()
        rest = rest[torch.randperm(rest.numel(), generator=gen).to(rest.device)]
        for k in rest.tolist():
            if not self.in_span(self.R[:, k]):
                self.add_basis(self.R[:, k])
                self.S.append(k)
                self.eta.append(0.0)
        self.greedy = False

    def choose(self, Dw, seed: int):
        """The round's ranker: ``(kind, index, pair column, (ε⁺, ε⁻, ε⁰), α′)`` with kind
        ``"new"`` (a column of ``R``) or ``"S"`` (a member's position), ``None`` if none."""
        stats = self.member_stats(Dw) if self.S else None
        best_s = float(stats[3].abs().max()) if stats is not None else -1.0
        if self.greedy:
            gr = _int8_vecmat(Dw, self.R).abs()
            gr = torch.where(self.available, gr, torch.full_like(gr, -1.0))
            j = int(torch.argmax(gr))
            if float(gr[j]) > best_s and float(gr[j]) >= 0:
                self.available[j] = False
                col = self.R[:, j]
                if not self.in_span(col):
                    eps = (float(Dw[col > 0].sum()), float(Dw[col < 0].sum()),
                           float(Dw[col == 0].sum()))
                    return "new", j, col, eps, 0.0
                self.prune(seed)
                stats = self.member_stats(Dw)
        if not self.S:
            return None
        i = int(torch.argmax(stats[3].abs()))
        eps = (float(stats[0][i]), float(stats[1][i]), float(stats[2][i]))
        return "S", i, self.R[:, self.S[i]], eps, self.eta[i]

    def commit(self, kind: str, k: int, col, alpha: float) -> int:
        """Take the step; the chosen column of ``R``."""
        if kind == "new":
            self.add_basis(col)
            self.S.append(k)
            self.eta.append(alpha)
            return k
        self.eta[k] += alpha
        return self.S[k]

    def log_e2(self, log_d1) -> float:
        """ln Ê2 recomputed from η (log form)."""
        AS = self.R[:, self.S]
        et = torch.tensor(self.eta, dtype=torch.float64, device=log_d1.device)
        logl = -(AS * et).sum(1) + ((AS == 0).to(torch.float64) * _logcosh(et)).sum(1)
        return float(torch.logsumexp(logl + log_d1, 0))
