"""A whole narrow MLP on the CPU ("cpu:narrow_addmm", fused.narrow): fp32 layers unpacked once and cached, one fp32 GEMM
per layer with the bias inside, activation in place."""
from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from fused.cpu import _linear
# packed weights -> (weights version, params, params version, dims, [(W fp32 [N, K], b fp32 [N])])
_narrow_cache: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _narrow_layers(weights: torch.Tensor, params: torch.Tensor, dims) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The dequantized fp32 layers of a packed narrow MLP, unpacked once and reused until either buffer is
    modified in place (at most 8 x 128 x 128 x 4 B = 512 KiB; `narrow_cached_bytes`)."""
    from fused.narrow_pack import unpack_narrow

    if type(weights) is not torch.Tensor or weights.is_inference() or params.is_inference():
        return unpack_narrow(weights, params, dims)
    stamp = (weights._version, params._version, tuple(dims))
    entry = _narrow_cache.get(weights)
    if entry is None or entry[0] is not params or entry[1] != stamp:
        layers = [(w.contiguous(), b.contiguous()) for w, b in unpack_narrow(weights, params, dims)]
        entry = _narrow_cache[weights] = (params, stamp, layers)
    return entry[2]


def narrow_cached_bytes(weights: torch.Tensor) -> int:
    """Bytes of the fp32 layers cached for these packed narrow weights (what `explain` adds)."""
    entry = _narrow_cache.get(weights)
    return 0 if entry is None else sum(w.numel() * 4 + b.numel() * 4 for w, b in entry[2])


def narrow_mlp(x: torch.Tensor, weights, params, dims, acts) -> torch.Tensor:
    """A whole narrow MLP ("cpu:narrow_addmm"): per layer one fp32 GEMM with the bias added inside (`_linear`: oneDNN
    with the activation as a post-op, or F.linear and the activation in place), in fp32 like the reference
    (fused.reference.narrow_mlp_ref), on the cached fp32 layers; the output in x's dtype."""
    if torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):  # fp32 whatever the caller's autocast, as the reference
            return narrow_mlp(x, weights, params, dims, acts)
    h = x.reshape(-1, dims[0]).float()
    for (w, b), act in zip(_narrow_layers(weights, params, dims), acts):
        h = _linear(h, w, b, act)
    return h.to(x.dtype).reshape(*x.shape[:-1], dims[-1])
