r"""Linear rankers: RankSVM (the chapter's SVM ranking, Mohri et al. ch. 10 / spec B.4) and the
:class:`LinearRanker` model it returns.

RankSVM's primal without offset (``b`` cancels in pair differences)::

    min_w  ½‖w‖² + C Σ_{(i,j) ∈ P} φ(1 - w·(x_i - x_j))

with ``φ(z) = max(0, z)`` (hinge, the textbook SVM) or ``max(0, z)²`` (``loss="squared_hinge"``,
the L2-SVM: differentiable, so L-BFGS converges cleanly; the default). The pair sum is the
O(n log n) sorted-prefix-sum kernel of :class:`~torchrankboost.losses.PairwiseHingeLoss` (no
pair materialisation for label-induced pairs); the minimisation is full-batch L-BFGS with a
strong-Wolfe line search in float64. With the plain hinge, L-BFGS runs on a non-smooth
objective and stops at an approximate minimiser (documented, use it only as a baseline).

Features are standardised with the training mean and standard deviation (``standardize=True``)
so that one ``C`` suits all features; the model folds the scaling back into ``w``.
"""

from __future__ import annotations

import json
from typing import Optional

import torch
from torch import Tensor

from .groups import as_groups

__all__ = ["LinearRanker", "RankSVM"]

FORMAT = "torchrankboost.LinearRanker"


class LinearRanker:
    """``score(x) = w·x + b`` (NaN features count as 0). ``weight`` (F,) float64, ``bias``.

    Saves as safetensors with a JSON description (no pickle); :meth:`predict` returns float64
    scores on ``X``'s device.
    """

    def __init__(self, weight: Tensor, bias: float = 0.0, *, info: Optional[dict] = None):
        weight = torch.as_tensor(weight, dtype=torch.float64)
        if weight.dim() != 1:
            raise ValueError(f"weight must be 1-D, got shape {tuple(weight.shape)}")
        self.weight = weight
        self.bias = float(bias)
        self.info = dict(info or {})

    @property
    def num_features(self) -> int:
        return self.weight.numel()

    def predict(self, X) -> Tensor:
        if not isinstance(X, Tensor):
            X = torch.as_tensor(X)
        if X.dim() != 2 or X.shape[1] != self.num_features:
            raise ValueError(f"X must have shape (n, {self.num_features}), got {tuple(X.shape)}")
        Xd = torch.nan_to_num(X.to(torch.float64), nan=0.0)
        return Xd @ self.weight.to(Xd.device) + self.bias

    def save(self, path) -> None:
        from safetensors.torch import save_file

        meta = {"format": FORMAT, "bias": self.bias.hex(), "info": self.info}
        save_file({"weight": self.weight.contiguous()}, str(path),
                  metadata={"linear": json.dumps(meta)})

    @classmethod
    def load(cls, path, *, device=None) -> "LinearRanker":
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as fh:
            md = fh.metadata() or {}
        if "linear" not in md:
            raise ValueError(f"{path}: not a torchrankboost LinearRanker file")
        meta = json.loads(md["linear"])
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: unknown format {meta.get('format')!r}")
        t = load_file(str(path), device=str(device) if device is not None else "cpu")
        return cls(t["weight"], float.fromhex(meta["bias"]), info=meta.get("info"))

    def __repr__(self):
        return f"LinearRanker(num_features={self.num_features}, bias={self.bias:.4g})"


class RankSVM:
    r"""Linear RankSVM trained by L-BFGS on the primal.

    Args:
        C: weight of the pair-loss sum (``> 0``).
        loss: ``"squared_hinge"`` (default, smooth) or ``"hinge"``.
        pairs: ``"graded"`` (default), ``"bipartite"`` or ``ExplicitPairs``.
        standardize: z-score features with training statistics first.
        max_iter: L-BFGS iterations; ``tol``: gradient tolerance.

    ``fit(X, labels, groups=None)`` returns a :class:`LinearRanker`; ``objective_`` holds the
    final primal value and ``n_iter_`` the iterations used.
    """

    def __init__(self, C: float = 1.0, *, loss: str = "squared_hinge", pairs=None,
                 standardize: bool = True, max_iter: int = 200, tol: float = 1e-9):
        if not (isinstance(C, (int, float)) and C > 0):
            raise ValueError(f"C must be a positive number, got {C!r}")
        if loss not in ("squared_hinge", "hinge"):
            raise ValueError(f"loss must be 'squared_hinge' or 'hinge', got {loss!r}")
        self.C = float(C)
        self.loss = loss
        self.pairs = pairs
        self.standardize = bool(standardize)
        self.max_iter = int(max_iter)
        self.tol = float(tol)

    def objective(self, w: Tensor, Z: Tensor, labels, groups) -> Tensor:
        from .losses import PairwiseHingeLoss

        lf = PairwiseHingeLoss(margin=1.0, squared=self.loss == "squared_hinge")
        return 0.5 * (w * w).sum() + self.C * lf(Z @ w, labels, groups, pairs=self.pairs)

    def fit(self, X, labels, groups=None) -> LinearRanker:
        if not isinstance(X, Tensor) or X.dim() != 2:
            raise ValueError("X must be a 2-D tensor (n, F)")
        n, F = X.shape
        groups = as_groups(groups, n, device=X.device)
        labels = torch.as_tensor(labels, device=X.device)
        Xd = torch.nan_to_num(X.to(torch.float64), nan=0.0)
        if self.standardize:
            mu = Xd.mean(0)
            sd = Xd.std(0, unbiased=False)
            sd = torch.where(sd > 0, sd, torch.ones_like(sd))
        else:
            mu = torch.zeros(F, dtype=torch.float64, device=X.device)
            sd = torch.ones(F, dtype=torch.float64, device=X.device)
        Z = (Xd - mu) / sd
        w = torch.zeros(F, dtype=torch.float64, device=X.device, requires_grad=True)
        opt = torch.optim.LBFGS([w], lr=1.0, max_iter=self.max_iter, tolerance_grad=self.tol,
                                tolerance_change=1e-12, history_size=20,
                                line_search_fn="strong_wolfe")
        state = {"n": 0}

        def closure():
            opt.zero_grad()
            v = self.objective(w, Z, labels, groups)
            v.backward()
            state["n"] += 1
            return v

        opt.step(closure)
        with torch.no_grad():
            self.objective_ = float(self.objective(w, Z, labels, groups))
        self.n_iter_ = state["n"]
        wd = w.detach() / sd
        b = -float((wd * mu).sum())
        return LinearRanker(wd, b, info={"C": self.C, "loss": self.loss,
                                         "objective": self.objective_})
