"""SmoothQuant-style smoothing factors for W8A8 (Xiao et al. 2023, "SmoothQuant").

A few input channels of a Linear often carry activations far larger than the rest; per-token int8
activation scales then spend their range on those channels and round the others coarsely. Since
x·Wᵀ = (x / s)·(W * s)ᵀ for any per-input-channel s > 0, dividing x by s and multiplying the weight's
columns by s moves the difficulty from the activations into the weights (quantized per output row,
which absorbs it better). With alpha in [0, 1]:

    s_j = max|X_j|^alpha / max|W_{:,j}|^(1 - alpha)

`calibrate_smoothing` measures max|X_j| with forward pre-hooks over calibration inputs and returns
{linear fqn: s [in_features] fp32}; ``FusedInt8MLP(weight_only=False, smoothing=s)`` (or FusedFloat8MLP)
then quantizes W * s and the converted module multiplies its input by 1/s (buffer ``smooth_inv``).

gate_proj / up_proj of a gated block read the same x, and the converter stacks them into one weight fed
by one x: they get one vector, computed from the max over both weights' columns.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from sparsity.pruning import run_calibration

# s outside this range would push x / s or W * s toward fp32/bf16 over- or underflow
S_MIN, S_MAX = 1e-5, 1e5


def _targets(model: nn.Module, filter_fn: Callable | None, who: str = "calibrate_smoothing") -> dict[str, nn.Linear]:
    from fused.matching import _linear

    chosen = {}
    for fqn, mod in model.named_modules():
        if filter_fn is None:
            if _linear(mod):  # the Linears the converter's default filter replaces
                chosen[fqn] = mod
        elif filter_fn(mod, fqn):
            if not isinstance(mod, nn.Linear):
                raise TypeError(f"{who}: filter_fn selected {fqn or '<root>'} "
                                f"({type(mod).__name__}); only nn.Linear layers are calibrated")
            chosen[fqn] = mod
    if not chosen:
        raise ValueError(f"{who}: {type(model).__name__} has no nn.Linear to calibrate"
                         + (" (filter_fn selected none)" if filter_fn is not None else ""))
    return chosen


def factors(x_absmax: torch.Tensor, w_absmax: torch.Tensor, alpha: float) -> torch.Tensor:
    """s = x_absmax^alpha / w_absmax^(1-alpha), fp32, clamped to [S_MIN, S_MAX]. A channel whose
    activations or weights are all zero has nothing to balance: s = 1 there."""
    x, w = x_absmax.float(), w_absmax.float()
    s = x.pow(alpha) / w.pow(1.0 - alpha)
    s = torch.where((x > 0) & (w > 0), s, torch.ones_like(s))
    return s.clamp(S_MIN, S_MAX)


def calibrate_smoothing(model: nn.Module, calibration: Iterable, alpha: float = 0.5,
                        filter_fn: Callable | None = None) -> dict[str, torch.Tensor]:
    """Smoothing factors {fqn: s [in_features] fp32} for the selected Linears of ``model``.

    ``calibration``: an iterable of model inputs, each a tensor (``model(x)``), a tuple/list
    (``model(*x)``) or a dict (``model(**x)``, e.g. a tokenizer's output). ``filter_fn(module, fqn)``
    selects Linears (default: every nn.Linear the converter replaces). Runs in eval mode under
    no_grad; the model's mode is restored after. Pass the result to the config before converting:
    ``fused.quantize(model, fused.FusedInt8MLP(weight_only=False, smoothing=s))``."""
    from fused.matching import mlp_kind

    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise ValueError(f"calibrate_smoothing: alpha must be a number in [0, 1], got {alpha!r}")
    targets = _targets(model, filter_fn)
    absmax: dict[str, torch.Tensor] = {}

    def observe(fqn, x2):
        m = x2.abs().amax(0).float()
        absmax[fqn] = m if fqn not in absmax else torch.maximum(absmax[fqn], m)

    run_calibration(model, targets, calibration, observe, "calibrate_smoothing")
    bad = [fqn for fqn, m in absmax.items() if not torch.isfinite(m).all()]
    if bad:
        raise ValueError(f"calibrate_smoothing: NaN/Inf activations at the input of {', '.join(bad)}")

    w_absmax = {fqn: m.weight.detach().abs().amax(0).float().to(absmax[fqn].device) for fqn, m in targets.items()}
    # gate and up of a gated block share x and become one stacked weight: one s for both
    for fqn, mod in model.named_modules():
        if mlp_kind(mod) == "gated":
            g, u = (f"{fqn}.{n}" if fqn else n for n in ("gate_proj", "up_proj"))
            if g in w_absmax and u in w_absmax:
                w_absmax[g] = w_absmax[u] = torch.maximum(w_absmax[g], w_absmax[u])
                absmax[g] = absmax[u] = torch.maximum(absmax[g], absmax[u])
    return {fqn: factors(absmax[fqn], w_absmax[fqn], float(alpha)) for fqn in targets}


def check_fqn_tensors(table, owner: str, field_name: str, source: str, shape_ok: Callable, shape: str) -> None:
    """Config-time check of a calibrated {module fqn: tensor} dict (``smoothing``, ``gptq``): a dict, str
    keys, floating tensors whose shape passes ``shape_ok`` (``shape`` describes them in the error)."""
    if not isinstance(table, dict):
        raise TypeError(f"{owner}.{field_name} must be a dict {{linear fqn: tensor}} ({source}), "
                        f"got {type(table).__name__}")
    for k, t in table.items():
        if not isinstance(k, str):
            raise TypeError(f"{owner}.{field_name}: keys must be module fqns (str), got {k!r}")
        if not isinstance(t, torch.Tensor) or not shape_ok(t) or not t.is_floating_point():
            raise TypeError(f"{owner}.{field_name}[{k!r}] must be a {shape}, got "
                            f"{type(t).__name__}{'' if not isinstance(t, torch.Tensor) else f' {t.dtype} {tuple(t.shape)}'}")


def check_smoothing(smoothing, owner: str) -> None:
    """Config-time check of a smoothing dict: str keys, 1-D positive finite floating tensors."""
    check_fqn_tensors(smoothing, owner, "smoothing", "fused.calibrate_smoothing", lambda t: t.dim() == 1,
                      "1-D floating tensor [in_features]")
    for k, s in smoothing.items():
        if not (torch.isfinite(s).all() and (s > 0).all()):
            raise ValueError(f"{owner}.smoothing[{k!r}] must be finite and > 0")
