"""The CPU's derived weight data: cast copies, packed copies kept beside a weight, and `pack_weight`'s stand-ins whose
only data is the packed weight (fused.pack_for_cpu). Every copy is made once per tensor and remade after the tensor is
modified in place (its version counter); `cached_bytes` reports what is held, `clear_cache` drops it.

Packed forms: oneDNN's reordered weight (`qlinear_prepack`) where oneDNN's u8 sums are exact (VNNI / AMX x86), else
fbgemm's packed weight (`FbgemmWeight`), run on 7-bit planes by `fused.cpu_fbgemm`."""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from torch.utils.weak import WeakIdKeyDictionary

from fused import cpu_isa

# oneDNN sums u8 * s8 products (u = q + 128 <= 255) in int32 before subtracting the zero point's share: exact while
# 255 * 127 * K < 2^31
ONEDNN_MAX_K = (2**31 - 1) // (255 * 127)

# tensor -> (version, {dtype: cast copy})
_cache: WeakIdKeyDictionary = WeakIdKeyDictionary()
# int8 weight -> (version, oneDNN's reordered copy, unit scales, zero points)
_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()
# int8 weight -> (version, fbgemm's packed copy)
_fbgemm: WeakIdKeyDictionary = WeakIdKeyDictionary()
# pack_weight's stand-in -> (oneDNN's copy, unit scales, zero points) or FbgemmWeight: the weight's only data
# (clear_cache keeps it)
_only: WeakIdKeyDictionary = WeakIdKeyDictionary()


class FbgemmWeight(NamedTuple):
    """fbgemm's packed copy of an int8 weight (cpu_isa.fbgemm_prepack), kept beside it or a `pack_weight` stand-in's
    data. ``act_bits`` 7: W8A8 layers run on 7-bit per-token activations (one fbgemm pass instead of two; see
    `fused.cpu_fbgemm`), with ``colsum`` [N] fp32 = Σ_k w[n, k] for their zero point."""
    packed: object
    act_bits: int = 8
    colsum: torch.Tensor | None = None


def cast_cached(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``t.to(dtype)``, computed once per (tensor, dtype) and reused until ``t`` is modified in place."""
    if t is None or t.dtype == dtype:
        return t
    if type(t) is not torch.Tensor or t.is_inference():
        # fake/functional tensors while tracing, or inference tensors (no version counter): no cache
        return t.to(dtype)
    entry = _cache.get(t)
    if entry is None or entry[0] != t._version:
        entry = (t._version, {})
        _cache[t] = entry
    out = entry[1].get(dtype)
    if out is None:
        out = entry[1][dtype] = t.to(dtype).contiguous()
    return out


def cacheable(t: torch.Tensor | None) -> bool:
    """Whether a copy derived from ``t`` can be kept and invalidated with it: a plain tensor with a version counter
    (not an inference tensor, not a fake or functional one while tracing)."""
    return type(t) is torch.Tensor and not t.is_inference()


def onednn_ok() -> bool:
    """oneDNN's int8 matmul ops are in this torch build, the CPU is x86 (where they are measured), and their u8·s8
    sums are exact here (not on x86 without VNNI: `cpu_isa.onednn_u8_exact`)."""
    return cpu_isa.onednn_u8_exact()


def fbgemm_here() -> bool:
    """Whether the int8 CPU paths run on fbgemm here (`cpu_isa.int8_backend`)."""
    return cpu_isa.int8_backend() == "fbgemm"


def fbgemm_cached(w: torch.Tensor):
    """fbgemm's packed copy of the int8 [N, K] weight, made once per tensor and remade after it is modified in place;
    a `pack_weight` stand-in's own copy."""
    only = _only.get(w) if type(w) is torch.Tensor else None
    if only is not None:
        if not isinstance(only, FbgemmWeight):
            raise RuntimeError("this weight is packed for oneDNN, not fbgemm")
        return only
    entry = _fbgemm.get(w)
    if entry is None or entry[0] != w._version:
        entry = _fbgemm[w] = (w._version, FbgemmWeight(cpu_isa.fbgemm_prepack(w)))
    return entry[1]


def pack_weight(w: torch.Tensor, act_bits: int = 8) -> torch.Tensor:
    """oneDNN's reordered copy of the int8 [N, K] CPU weight ``w``, kept, and a stand-in for ``w`` in its place: an
    [N, K] int8 tensor with one byte of storage (expanded), so the layer holds 1 B/weight (the copy) instead of 2.
    The qlinear paths run on the copy at every M; other paths get the plain weight rebuilt for the call
    (`unpack_weight`). `fused.pack_for_cpu` swaps it into a model's layers; their state_dict, load_state_dict and
    device moves go through the plain weight. ``act_bits`` 7 (W8A8 layers, CPUs without VNNI only): 7-bit
    per-token activations, one fbgemm pass instead of two (`fused.pack_for_cpu`'s ``activation_bits``)."""
    if w.dtype != torch.int8 or w.dim() != 2 or w.device.type != "cpu":
        raise ValueError(f"pack_weight takes an int8 [N, K] CPU tensor, got {w.dtype} {tuple(w.shape)} on {w.device}")
    if act_bits not in (7, 8):
        raise ValueError(f"pack_weight: act_bits must be 8 or 7, got {act_bits!r}")
    if act_bits == 7 and not fbgemm_here():
        raise RuntimeError("7-bit activations are for x86 CPUs without VNNI, where exact 8-bit activations take two "
                           f"int8 passes; on this CPU 8-bit ones take one ({cpu_isa.summary()})")
    if fbgemm_here():  # x86 without VNNI: fbgemm's copy, run on 7-bit planes (fused.cpu_fbgemm)
        colsum = w.sum(1, dtype=torch.int64).float() if act_bits == 7 else None
        data = FbgemmWeight(cpu_isa.fbgemm_prepack(w), act_bits, colsum)
    else:
        if not onednn_ok():
            raise RuntimeError(f"cannot pack int8 weights on this CPU: no exact int8 GEMM with a packed weight here "
                               f"({cpu_isa.summary()})")
        if w.shape[1] > ONEDNN_MAX_K:
            raise RuntimeError(f"cannot pack for oneDNN: K={w.shape[1]} > {ONEDNN_MAX_K} (its uint8 sums could "
                               "overflow int32)")
        data = _reorder(w)
    stand_in = torch.full((), -128, dtype=torch.int8).expand(w.shape)  # -128: never a quantized weight value
    _only[stand_in] = data
    return stand_in


def _reorder(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(oneDNN's reordered copy of the int8 [N, K] weight, unit weight scales [N], zero points [N])."""
    return (torch.ops.onednn.qlinear_prepack(w.contiguous(), None), *_unit_params(w.shape[0]))


@functools.lru_cache(maxsize=64)
def _unit_params(N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit weight scales and zero points [N] for qlinear_pointwise (read only), shared by the layers of one width."""
    return torch.ones(N), torch.zeros(N, dtype=torch.int64)


@functools.lru_cache(maxsize=64)
def _unit_bf16(N: int) -> torch.Tensor:
    """Unit bf16 scales [N] for _weight_int8pack_mm (read only)."""
    return torch.ones(N, dtype=torch.bfloat16)


def packed_act_bits(w) -> int:
    """The activation bits a `pack_weight` stand-in runs its W8A8 layer with (8 for anything else)."""
    data = _only.get(w) if type(w) is torch.Tensor else None
    return data.act_bits if isinstance(data, FbgemmWeight) else 8


def packed_only(w) -> bool:
    """Whether ``w`` is a stand-in from `pack_weight` (its data lives only in oneDNN's copy)."""
    return type(w) is torch.Tensor and w in _only


def unpack_weight(w: torch.Tensor) -> torch.Tensor:
    """The plain int8 [N, K] weight of a `pack_weight` stand-in (a new tensor), or ``w`` itself."""
    if not packed_only(w):
        return w
    data = _only[w]
    if isinstance(data, FbgemmWeight):
        return cpu_isa.fbgemm_unpack(data.packed)
    return data[0].to_dense().t().contiguous()


def packed_cached(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(oneDNN's reordered copy of the int8 [N, K] weight, unit weight scales [N], zero points [N]), made once per
    tensor and remade after it is modified in place; a `pack_weight` stand-in's own copy."""
    if packed_only(w):
        if isinstance(_only[w], FbgemmWeight):
            raise RuntimeError("this weight is packed for fbgemm, not oneDNN")
        return _only[w]
    entry = _packed.get(w)
    if entry is None or entry[0] != w._version:
        entry = _packed[w] = (w._version, *_reorder(w))
    return entry[1:]


def cached_bytes(*tensors: torch.Tensor | None) -> int:
    """Bytes held in the CPU caches for these tensors (what `explain` adds to a module's bytes): cast copies, and
    oneDNN's reordered weights, kept beside a weight or a `pack_weight` stand-in's (1 byte per weight)."""
    total = 0
    for t in tensors:
        entry = _cache.get(t) if t is not None else None
        if entry is not None and entry[0] == t._version:
            total += sum(c.numel() * c.element_size() for c in entry[1].values())
        kept = [] if t is None else [d.get(t) for d in (_packed, _fbgemm)]
        if any(e is not None and e[0] == t._version for e in kept) or packed_only(t):
            total += t.numel()  # the packed copy (oneDNN's unit scales and zero points are shared by a width's layers)
    return total


def clear_cache() -> None:
    _cache.clear()
    _packed.clear()
    _fbgemm.clear()
