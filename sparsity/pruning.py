"""2:4 pruning of nn.Linear weights, in place: magnitude, Wanda (activation-aware) or SparseGPT.

Magnitude and Wanda keep, in every group of 4 consecutive input channels of every output row, the 2 entries
of highest score:
  * magnitude: score = |W_ij|
  * Wanda (Sun et al. 2023, "A Simple and Effective Pruning Approach for LLMs"): score = |W_ij| · ‖X_j‖₂,
    ‖X_j‖₂ the L2 norm of input channel j over every calibration token. A small weight on a channel that
    carries large activations matters more than its magnitude says.
SparseGPT (sparsity.sparsegpt) also updates the kept weights to make up for the pruned ones, from the
calibration inputs' XᵀX.

The activation statistics come from one pass of the calibration inputs through the unpruned model (forward
pre-hooks on the selected Linears). Wanda's reference code instead prunes block by block, feeding each
block the outputs of the already pruned blocks before it; the one-pass form needs one forward per input
and no knowledge of the model's block structure.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import nn

from sparsity.masks import is_24_sparse, magnitude_mask_24
from sparsity.sparsegpt import sparsegpt_24

METHODS = ("magnitude", "wanda", "sparsegpt")


def _is_linear(module: nn.Module, fqn: str) -> bool:
    return isinstance(module, nn.Linear)


def _targets(model: nn.Module, filter_fn: Callable | None) -> dict[str, nn.Linear]:
    """The Linears to prune: ``filter_fn(module, fqn)`` selects (default: every nn.Linear). Selected
    modules that are not Linears, or whose in_features is not a multiple of 4, are refused loudly."""
    chosen, skipped = {}, []
    for fqn, mod in model.named_modules():
        if filter_fn is None:
            if not isinstance(mod, nn.Linear):
                continue
            if mod.in_features % 4:
                skipped.append(f"{fqn} (in_features={mod.in_features})")
                continue
        elif not filter_fn(mod, fqn):
            continue
        elif not isinstance(mod, nn.Linear):
            raise TypeError(f"prune_24_: filter_fn selected {fqn or '<root>'} ({type(mod).__name__}); "
                            "only nn.Linear weights are pruned")
        elif mod.in_features % 4:
            raise ValueError(f"prune_24_: {fqn}: 2:4 groups the input dim by 4, in_features="
                             f"{mod.in_features} is not a multiple of 4")
        chosen[fqn] = mod
    if skipped:
        warnings.warn("prune_24_: left dense (in_features not a multiple of 4): " + ", ".join(skipped), stacklevel=3)
    return chosen


def _call(model: nn.Module, batch) -> None:
    if isinstance(batch, Mapping):
        model(**batch)
    elif isinstance(batch, (tuple, list)):
        model(*batch)
    else:
        model(batch)


def activation_norms(model: nn.Module, calibration: Iterable, filter_fn: Callable | None = None) -> dict[str, torch.Tensor]:
    """Per-input-channel L2 norm ‖X_j‖₂ [in_features] (fp32) of the inputs of each selected Linear, over
    every token of every calibration batch. ``calibration`` is an iterable of model inputs: a tensor
    (``model(x)``), a tuple/list (``model(*x)``) or a dict (``model(**x)``).

    Runs under ``torch.no_grad()`` in eval mode (dropout off); the model's mode is restored after."""
    return _norms(model, _targets(model, filter_fn), calibration)


def run_calibration(model: nn.Module, targets: dict[str, nn.Linear], calibration: Iterable, observe: Callable,
                    who: str) -> None:
    """Run ``calibration`` (an iterable of model inputs, see `activation_norms`) through ``model`` in eval
    mode under no_grad, calling ``observe(fqn, x2d)`` with each target Linear's input as [tokens, in].
    The model's mode is restored after. Raises, naming ``who``, on empty calibration or a target the
    inputs never reach."""
    seen = set()

    def hook_for(fqn):
        def hook(module, args):
            x2 = args[0].detach().reshape(-1, args[0].shape[-1])
            if x2.shape[0]:  # a batch with no tokens tells nothing
                observe(fqn, x2)
                seen.add(fqn)
        return hook

    handles = [m.register_forward_pre_hook(hook_for(fqn)) for fqn, m in targets.items()]
    was_training = model.training
    model.eval()
    batches = 0
    try:
        with torch.no_grad():
            for batch in calibration:
                _call(model, batch)
                batches += 1
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if batches == 0:
        raise ValueError(f"{who}: calibration is empty; pass an iterable of model inputs")
    unseen = [fqn for fqn in targets if fqn not in seen]
    if unseen:
        raise ValueError(f"{who}: the calibration inputs never reached {', '.join(unseen)}; "
                         "exclude them with filter_fn or use inputs that run them")


def _norms(model: nn.Module, targets: dict[str, nn.Linear], calibration: Iterable) -> dict[str, torch.Tensor]:
    sums = {fqn: torch.zeros(m.in_features, dtype=torch.float64, device=m.weight.device) for fqn, m in targets.items()}

    def observe(fqn, x2):
        sums[fqn] += x2.double().pow(2).sum(0).to(sums[fqn].device)

    run_calibration(model, targets, calibration, observe, "activation_norms")
    return {fqn: s.sqrt().float() for fqn, s in sums.items()}


def hessians(model: nn.Module, targets: dict[str, nn.Linear], calibration: Iterable, who: str) -> dict[str, torch.Tensor]:
    """{fqn: XᵀX / tokens [in, in] fp32} of each target Linear's input over the calibration inputs (GPTQ,
    SparseGPT). Raises, naming ``who``, on NaN/Inf activations."""
    sums: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}

    def observe(fqn, x2):
        x = x2.float()
        sums[fqn] = x.T @ x if fqn not in sums else sums[fqn] + x.T @ x
        tokens[fqn] = tokens.get(fqn, 0) + x.shape[0]

    run_calibration(model, targets, calibration, observe, who)
    bad = [fqn for fqn, h in sums.items() if not torch.isfinite(h).all()]
    if bad:
        raise ValueError(f"{who}: NaN/Inf activations at the input of {', '.join(bad)}")
    return {fqn: sums[fqn] / tokens[fqn] for fqn in targets}


def _score(w: torch.Tensor, norms: torch.Tensor | None) -> torch.Tensor:
    s = w.detach().float().abs()
    if norms is None:
        return s
    norms = norms.to(s.device, torch.float32)
    if norms.shape != (w.shape[1],):
        raise ValueError(f"activation norms of shape {tuple(norms.shape)} for a weight of {w.shape[1]} inputs")
    # channels the calibration never excited (norm 0) still rank among themselves by magnitude
    top = norms.max()
    return s * (norms.clamp(min=1e-6 * top) if top > 0 else torch.ones_like(norms))[None, :]


def _energy(w: torch.Tensor, mask: torch.Tensor) -> float:
    w = w.detach().double()
    total = w.pow(2).sum().item()
    return 1.0 if total == 0 else (w * mask).pow(2).sum().item() / total


def prune_24_(model: nn.Module, method: str = "magnitude", calibration: Iterable | None = None,
              filter_fn: Callable[[nn.Module, str], bool] | None = None) -> dict[str, float]:
    """Prune the selected nn.Linear weights of ``model`` to 2:4 along the input dim, in place.

    method: "magnitude" (score |W|), "wanda" (score |W|·‖X_j‖₂) or "sparsegpt" (mask and kept values
    from XᵀX, sparsity.sparsegpt); the last two need ``calibration``, an iterable of model inputs (see
    `activation_norms`). filter_fn(module, fqn) -> bool selects the Linears (default: every nn.Linear; those
    with in_features % 4 != 0 are left dense with a warning).
    Returns {fqn: kept energy ‖W⊙mask‖²/‖W‖²} of the weights as they were before pruning."""
    if method not in METHODS:
        raise ValueError(f"prune_24_: method must be one of {METHODS}, got {method!r}")
    if method != "magnitude" and calibration is None:
        raise ValueError(f"prune_24_: method={method!r} needs calibration= (an iterable of model inputs: tensors, "
                         "tuples or dicts) to measure the activations; or use method='magnitude'")
    if method == "magnitude" and calibration is not None:
        warnings.warn("prune_24_: calibration is ignored by method='magnitude'", stacklevel=2)
    targets = _targets(model, filter_fn)
    norms = _norms(model, targets, calibration) if method == "wanda" else {}
    hs = hessians(model, targets, calibration, "prune_24_") if method == "sparsegpt" else {}
    report = {}
    with torch.no_grad():
        for fqn, mod in targets.items():
            w = mod.weight
            if method == "sparsegpt":
                pruned = sparsegpt_24(w, hs[fqn])
                report[fqn] = _energy(w, pruned != 0)
                w.copy_(pruned)
            else:
                mask = magnitude_mask_24(_score(w, norms.get(fqn)))
                report[fqn] = _energy(w, mask)
                w.mul_(mask.to(w.dtype))
            assert is_24_sparse(w), fqn
    return report


def kept_energy(model_or_weights, norms: Mapping[str, torch.Tensor] | None = None) -> dict[str, float]:
    """Fraction of each weight's energy a 2:4 mask keeps, ‖W⊙mask‖²/‖W‖² (1.0 for an all-zero weight).

    ``model_or_weights``: an nn.Module (every nn.Linear with in_features % 4 == 0), a dict {name: [N, K]
    weight}, or one weight tensor (key ""). The mask is the magnitude mask, or Wanda's where ``norms``
    (from `activation_norms`) has the name. Call it before pruning: a 2:4 weight keeps 1.0 of itself."""
    if isinstance(model_or_weights, nn.Module):
        weights = {fqn: m.weight for fqn, m in model_or_weights.named_modules()
                   if isinstance(m, nn.Linear) and m.in_features % 4 == 0}
    elif isinstance(model_or_weights, torch.Tensor):
        weights = {"": model_or_weights}
    elif isinstance(model_or_weights, Mapping):
        weights = dict(model_or_weights)
    else:
        raise TypeError(f"kept_energy: expected an nn.Module, a tensor or a dict of tensors, "
                        f"got {type(model_or_weights).__name__}")
    norms = norms or {}
    return {name: _energy(w, magnitude_mask_24(_score(w, norms.get(name)))) for name, w in weights.items()}
