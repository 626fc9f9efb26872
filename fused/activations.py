"""The activations the kernels fuse, their pure-torch definitions, and how modules map onto them."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def check_activation(act: str) -> str:
    if act not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")
    return act


def apply_activation(y: torch.Tensor, act: str) -> torch.Tensor:
    if act == "none":
        return y
    if act == "relu":
        return F.relu(y)
    if act == "gelu":
        return F.gelu(y)
    if act == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if act == "silu":
        return F.silu(y)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {act!r}")


# transformers' ACT2FN classes by name (no import of transformers needed)
_BY_CLASS_NAME = {
    "ReLU": "relu",
    "SiLU": "silu",
    "SiLUActivation": "silu",
    "GELUActivation": "gelu",
    "NewGELUActivation": "gelu_tanh",
    "GELUTanh": "gelu_tanh",
    "PytorchGELUTanh": "gelu_tanh",
    "GELUPytorchTanh": "gelu_tanh",
    "FastGELUActivation": "gelu_tanh",
    "Identity": "none",
}


def activation_of(module) -> str | None:
    """The activation name a module (or function) computes, or None if it is not one we fuse."""
    if isinstance(module, nn.GELU):
        return "gelu_tanh" if module.approximate == "tanh" else "gelu"
    if module is F.relu or module is torch.relu:
        return "relu"
    if module is F.silu:
        return "silu"
    if module is F.gelu:
        return "gelu"
    return _BY_CLASS_NAME.get(type(module).__name__)
