"""Calibration for GPTQ rounding (lowbit.gptq): the Hessian XᵀX of every selected Linear's input.

``h = fused.calibrate_gptq(model, calibration)`` runs the calibration inputs through the unconverted model
and returns {linear fqn: H [in, in] fp32} (XᵀX / tokens); ``FusedFloat8MLP(gptq=h)`` (or FusedInt8MLP) then
rounds each weight with GPTQ on the usual per-row scales instead of round-to-nearest. Only the rounding
changes: the same codes, scales, kernels and speed. Works with weight-only and W8A8, and with smoothing
(the Hessian is rescaled to the smoothed input). Memory: one in×in fp32 matrix per Linear.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from fused.smoothing import _targets, check_fqn_tensors
from sparsity.pruning import hessians


def calibrate_gptq(model: nn.Module, calibration: Iterable, filter_fn: Callable | None = None) -> dict[str, torch.Tensor]:
    """{fqn: XᵀX / tokens [in_features, in_features] fp32} for the selected Linears of ``model``.

    ``calibration``: an iterable of model inputs (a tensor, a tuple/list or a dict, as for
    fused.calibrate_smoothing); ``filter_fn(module, fqn)`` selects Linears (default: every nn.Linear the
    converter replaces). Runs in eval mode under no_grad; the model's mode is restored after."""
    return hessians(model, _targets(model, filter_fn, "calibrate_gptq"), calibration, "calibrate_gptq")


def check_gptq(gptq, owner: str) -> None:
    """Config-time check: a dict {str fqn: square 2-D finite floating tensor}."""
    check_fqn_tensors(gptq, owner, "gptq", "fused.calibrate_gptq",
                      lambda t: t.dim() == 2 and t.shape[0] == t.shape[1], "square 2-D floating tensor [in, in]")
    for k, h in gptq.items():
        if not torch.isfinite(h).all():
            raise ValueError(f"{owner}.gptq[{k!r}] holds NaN/Inf")
