"""Which modules a config converts: Linears and the MLP block forms this package fuses (pure nn inspection), and the
fqn of the module torchao's walker is converting. Imported by configs, smoothing and narrow, importing none of them."""
from __future__ import annotations

import sys

from torch import nn

from fused.activations import activation_of


def _linear(m) -> bool:
    return isinstance(m, nn.Linear) and not isinstance(m, nn.modules.linear.NonDynamicallyQuantizableLinear)


def _act_attr(module) -> str | None:
    for name in ("act_fn", "activation_fn", "act", "activation"):
        fn = getattr(module, name, None)
        if fn is not None:
            return activation_of(fn)
    return None


def mlp_kind(module: nn.Module) -> str | None:
    """'sequential', 'gated', 'gate_up' (Phi-3), 'fc' or None: which MLP form ``module`` is."""
    if isinstance(module, nn.Sequential):
        layers = [m for m in module if not isinstance(m, nn.Dropout)]
        if (len(layers) == 3 and _linear(layers[0]) and _linear(layers[2])
                and activation_of(layers[1]) is not None
                and layers[0].out_features == layers[2].in_features):
            return "sequential"
        return None
    has = lambda *names: all(_linear(getattr(module, n, None)) for n in names)  # noqa: E731
    if _act_attr(module) is None:
        return None
    if has("gate_proj", "up_proj", "down_proj"):
        return "gated"
    if has("gate_up_proj", "down_proj"):
        return "gate_up"
    if has("fc1", "fc2"):
        return "fc"
    return None


def is_mlp(module: nn.Module, fqn: str = "") -> bool:
    """Filter for ``quantize_``: True for MLP blocks this package converts into one fused module.

    Recognised: ``nn.Sequential(Linear, act, Linear)`` (Dropout ignored); HF gated blocks with
    ``gate_proj``/``up_proj``/``down_proj`` + ``act_fn`` (LlamaMLP, MistralMLP, Qwen2MLP); Phi-3's
    ``gate_up_proj``/``down_proj`` + ``activation_fn``; ``fc1``/``fc2`` + an activation attribute.
    The activation must be one we fuse (relu, gelu, gelu_tanh, silu)."""
    return mlp_kind(module) is not None


def _caller_fqn() -> str | None:
    # torchao's handler signature carries no fqn; its walkers hold it in a local (`cur_fqn` in the
    # filter walk, `fqn` in FqnToConfig). Names the module in error messages and keys the smoothing lookup.
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        for name in ("cur_fqn", "module_fqn", "fqn"):
            v = f.f_locals.get(name)
            if isinstance(v, str):
                return v.rstrip(".") or "<root>"
        f = f.f_back
    return None
