"""Quantize / dequantize in pure torch.

Weights: symmetric, one fp32 scale per output channel (row of an [N, K] weight), scale = absmax / qmax.
Activations: symmetric, one fp32 scale per token (row of an [M, K] input), computed at run time.

A zero row would give scale 0 and 0/0 = NaN; the scale is clamped to a tiny positive value so the row
quantizes to zeros and dequantizes to exact zeros.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from lowbit.formats import Format, get_format

# Smallest scale: keeps 0/scale finite for all-zero rows; far below any real absmax / qmax.
MIN_SCALE = 1e-12


def _cast(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    if fmt.integer:
        return t.round().clamp_(-fmt.qmax, fmt.qmax).to(fmt.dtype)
    # clamp first: e4m3fn has no inf, an out-of-range cast would give NaN
    return t.clamp(-fmt.qmax, fmt.qmax).to(fmt.dtype)


def quantize_rowwise(t: torch.Tensor, fmt: str | Format, reciprocal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize the last dim of ``t`` with one scale per row. Returns (qdata, scale[..., 1] fp32).
    ``reciprocal``: t · (1/scale) instead of t / scale (see quantize_activation)."""
    fmt = get_format(fmt)
    t32 = t.float()
    amax = t32.abs().amax(dim=-1, keepdim=True)
    # a Python-number divisor: CUDA torch multiplies by its reciprocal, as act_quant's `amax / QMAX` does
    # (bit-identical on the H200); split_activation below divides in IEEE, as act_split's div_rn
    scale = (amax / fmt.qmax).clamp(min=MIN_SCALE)
    return _cast(t32 * scale.reciprocal() if reciprocal else t32 / scale, fmt), scale


def quantize_activation(x: torch.Tensor, fmt: str | Format) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token dynamic quantization of activations [..., K]: (qdata [..., K], scale [..., 1] fp32).

    NaN/Inf in a token make that token's scale non-finite, so the token's output is NaN, as in the
    unquantized layer.

    q = x · (1/scale), the reciprocal rounded once per token (IEEE), then one fp32 multiply per element:
    what the kernels compute (an IEEE divide per element was most of act_quant's instructions)."""
    if x.numel() == 0:
        fmt = get_format(fmt)
        return x.to(fmt.dtype), x.new_empty(*x.shape[:-1], 1, dtype=torch.float32)
    return quantize_rowwise(x, fmt, reciprocal=True)


def quantize_activation_grouped(x: torch.Tensor, fmt: str | Format, group: int = 64
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_activation per token and run of ``group`` values along K (DeepSeek-V3's 1x128 activation groups,
    here what one tile of a layer's outputs holds): (qdata [..., K], scale [..., ceil(K / group)] fp32). Finer than
    per token, and a GEMM epilogue can write it from its own tile: no pass over the whole row first."""
    fmt = get_format(fmt)
    K = x.shape[-1]
    G = -(-K // group)
    xp = torch.nn.functional.pad(x.float(), (0, G * group - K)).reshape(*x.shape[:-1], G, group)
    q, scale = quantize_activation(xp, fmt)
    return q.reshape(*x.shape[:-1], G * group)[..., :K], scale.squeeze(-1)


def dequantize_activation_grouped(q: torch.Tensor, scale: torch.Tensor, group: int = 64) -> torch.Tensor:
    """fp32 values of quantize_activation_grouped's (qdata, scale)."""
    K = q.shape[-1]
    return (q.float() * scale.repeat_interleave(group, dim=-1)[..., :K])


SPLIT_QMAX = 127 * 256 + 127  # 32639: v = 256·hi + lo with hi, lo both in int8


def split_activation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token 16-bit activations as two int8 planes: (hi, lo [..., K] int8, scale [..., 1] fp32) with
    x ≈ scale·(256·hi + lo), scale = max(absmax / 32639, MIN_SCALE), v = round(x · (1/scale)) ties to even
    (the reciprocal rounded once per token, as quantize_activation),
    hi = (v + 128) >> 8, lo = v - 256·hi. Two int8 tensor-core dots then give x·Wᵀ for int8 W to 15 bits
    per token (finer than bf16's 8-bit mantissa for values within 2⁻⁷ of the row's absmax)."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = (amax / torch.full_like(amax, SPLIT_QMAX)).clamp_min(MIN_SCALE)  # IEEE on CUDA too (see above)
    scale = torch.where(torch.isfinite(xf).all(dim=-1, keepdim=True), scale, torch.full_like(scale, float("nan")))
    v = torch.round(torch.nan_to_num(xf * scale.reciprocal()).clamp(-SPLIT_QMAX, SPLIT_QMAX)).to(torch.int32)
    hi = (v + 128) >> 8
    return hi.to(torch.int8), (v - 256 * hi).to(torch.int8), scale


FP8_SPLIT_QMAX = 448.0  # e4m3's largest finite value
FP8_SPLIT_LO = 16.0  # lo = e4m3(16·(v − hi)): |v − hi| <= 16 (half an e4m3 step at 448), so |16·r| <= 256


def split_activation_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token 16-bit activations as two e4m3 planes: (hi, lo [..., K] float8_e4m3fn, scale [..., 1] fp32)
    with x ≈ scale·(hi + lo/16), scale = max(absmax / 448, MIN_SCALE) (IEEE division), v = x · (1/scale),
    hi = e4m3(v), lo = e4m3(16·(v − hi)), both rounded to nearest, ties to even (v − hi is exact in fp32).
    About 8 significant bits per element, bf16's precision, for two fp8 tensor-core dots per weight tile
    with fp8 weights. NaN/Inf in a token: NaN scale, zero planes (its outputs are NaN, as unquantized)."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = (amax / torch.full_like(amax, FP8_SPLIT_QMAX)).clamp_min(MIN_SCALE)
    scale = torch.where(torch.isfinite(xf).all(dim=-1, keepdim=True), scale, torch.full_like(scale, float("nan")))
    v = torch.nan_to_num(xf * scale.reciprocal(), nan=0.0, posinf=0.0, neginf=0.0).clamp(-FP8_SPLIT_QMAX, FP8_SPLIT_QMAX)
    hi = v.to(torch.float8_e4m3fn)
    lo = ((v - hi.float()) * FP8_SPLIT_LO).to(torch.float8_e4m3fn)
    return hi, lo, scale


def quantize_weight(w: torch.Tensor, fmt: str | Format) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel quantization of a [N, K] weight: (qdata [N, K], scale [N] fp32)."""
    if w.dim() != 2:
        raise ValueError(f"quantize_weight expects a 2-D [out, in] weight, got shape {tuple(w.shape)}")
    q, s = quantize_rowwise(w, fmt)
    return q, s.squeeze(-1).contiguous()


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of quantize_*: q * scale, with scale [N] (weights) or [..., 1] (activations)."""
    if scale.dim() == 1 and q.dim() == 2:
        scale = scale[:, None]
    return (q.float() * scale).to(dtype)


@dataclass
class QuantizedWeight:
    """An [N, K] weight as 8-bit qdata + fp32 per-row scale.

    A plain container, not a tensor subclass: the modules in `fused` keep ``qdata`` and ``scale`` as
    ordinary buffers, so ``state_dict`` holds plain tensors (loads with ``weights_only=True``), ``.to()``
    and ``deepcopy`` need nothing special, and an eager call pays no ``__torch_dispatch__`` overhead
    (the eager host-overhead budget is ~20 µs per MLP block).
    """

    qdata: torch.Tensor
    scale: torch.Tensor
    fmt: Format

    @classmethod
    def from_float(cls, w: torch.Tensor, fmt: str | Format) -> "QuantizedWeight":
        fmt = get_format(fmt)
        q, s = quantize_weight(w, fmt)
        return cls(q, s, fmt)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self.qdata, self.scale, dtype)

    @property
    def shape(self) -> torch.Size:
        return self.qdata.shape

    def nbytes(self) -> int:
        return self.qdata.numel() * self.qdata.element_size() + self.scale.numel() * self.scale.element_size()
