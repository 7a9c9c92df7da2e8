"""The pieces of a neural training step and of its checkpoints (used by
:class:`~torchrankboost.nn.NeuralRanker`).

* **Precision**: ``"fp32"``, ``"bf16"`` or ``"fp16"`` — the network runs under
  ``torch.autocast`` in the half type, the loss in float32 on the float32 copy of the
  scores; ``"fp16"`` also scales the loss (``torch.amp.GradScaler``: its overflow test
  reads one value per step, the only host synchronisation of such a step; bf16 needs no
  scaler).
* **Optimisers**: ``"adam"`` and ``"adamw"`` (``torch.optim``), ``"sgd"`` (momentum 0.9).
* **Checkpoint state** as tensors and JSON (no pickle): the optimiser's per-parameter
  state (:func:`optimizer_state` / :func:`load_optimizer_state`), the random generators
  (torch's CPU generator and, on CUDA, every device's: dropout's), the gradient scaler's.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from ..groups import Groups

__all__ = ["PRECISIONS", "OPTIMIZERS", "Scorer", "make_optimizer", "autocast", "make_scaler",
           "optimizer_state", "load_optimizer_state", "rng_state", "load_rng_state"]

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
OPTIMIZERS = ("adam", "adamw", "sgd")


class Scorer(nn.Module):
    """``forward(X (n, F), groups) -> (n,)``: a network's flat entry point as a module's
    forward (what ``DistributedDataParallel`` wraps)."""

    def __init__(self, network: nn.Module):
        super().__init__()
        self.network = network

    def forward(self, X: Tensor, groups: Groups) -> Tensor:
        return self.network.score(X, groups)


def make_optimizer(name: str, params, *, lr: float, weight_decay: float):
    """The optimiser ``name`` (:data:`OPTIMIZERS`) over ``params``."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")


def autocast(device: torch.device, precision: str):
    """The step's autocast context (a no-op for ``"fp32"``)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(device: torch.device, precision: str):
    """A gradient scaler for ``"fp16"`` (else ``None``)."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type)


# ------------------------------------------------------------------ checkpoint state
def optimizer_state(opt: torch.optim.Optimizer) -> Tuple[Dict[str, Tensor], dict]:
    """``(tensors, meta)`` of the optimiser: each parameter's state tensors as
    ``opt.<param index>.<name>`` and the parameter groups' settings as JSON."""
    sd = opt.state_dict()
    tensors = {}
    for i, st in sd["state"].items():
        for k, v in st.items():
            t = v if isinstance(v, Tensor) else torch.tensor(v)
            tensors[f"opt.{i}.{k}"] = t.detach().cpu().contiguous()
    groups = [{k: v for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups}


def load_optimizer_state(opt: torch.optim.Optimizer, tensors: Dict[str, Tensor],
                         meta: dict) -> None:
    """Put :func:`optimizer_state`'s ``(tensors, meta)`` back into ``opt`` (built over the
    same parameters)."""
    state: Dict[int, Dict[str, Tensor]] = {}
    for name, t in tensors.items():
        if name.startswith("opt."):
            _, i, k = name.split(".", 2)
            state.setdefault(int(i), {})[k] = t
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def rng_state(device: torch.device) -> Dict[str, Tensor]:
    """The random generators' states (``uint8`` tensors): torch's CPU generator and, on
    CUDA, the device's."""
    out = {"rng.cpu": torch.get_rng_state()}
    if device.type == "cuda":
        out["rng.cuda"] = torch.cuda.get_rng_state(device)
    return out


def load_rng_state(tensors: Dict[str, Tensor], device: torch.device) -> None:
    """Restore :func:`rng_state`'s generators."""
    torch.set_rng_state(tensors["rng.cpu"].to("cpu", torch.uint8))
    if device.type == "cuda" and "rng.cuda" in tensors:
        torch.cuda.set_rng_state(tensors["rng.cuda"].to("cpu", torch.uint8), device)


def scaler_state(scaler) -> Optional[dict]:
    """The gradient scaler's state (JSON), ``None`` without one."""
    if scaler is None:
        return None
    return {k: (float(v) if isinstance(v, (int, float, Tensor)) else v)
            for k, v in scaler.state_dict().items()}
