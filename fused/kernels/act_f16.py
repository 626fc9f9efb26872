"""bf16 activations as fp16 with a per-token power-of-two scale, one pass: x [M, K] -> (h [M, K] fp16,
scale [M] fp32) with x ≈ scale · h.

Why: Triton widens fp8 e4m3 weights to fp16 with one packed instruction per two weights (F2FP), but to bf16
through more steps (an sm_90 compile of the decode GEMV's loop: 197–211 SASS instructions per 64 weight
bytes per thread with fp16 activations against 272–303 with bf16). bf16 has 3 more exponent bits than fp16, so x
is first brought into fp16's range: scale = 2^(e-14) with 2^(e-1) <= absmax < 2^e, so |x / scale| < 2^14.
Scaling by a power of two is exact and bf16's 8-bit mantissa fits fp16's 11 bits: h is exact except for
values below absmax · 2^-28 (fp16 subnormals), which lose bits. The GEMM multiplies each row by its scale
in the fp32 epilogue. A row holding Inf/NaN keeps scale 1 (its Inf/NaN go through). All-zero rows: scale 1.
Reference: ``act_f16_ref`` below. One program per token (rows up to MAX_ONE_PASS loaded once).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import next_pow2
from fused.kernels.act_quant import MAX_ONE_PASS, row_absmax
from fused.kernels.launch import empty, launch_kernel


def act_f16_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition: (h fp16 [..., K], scale fp32 [...])."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1)
    # the exponent field of absmax: absmax in [2^(E-127), 2^(E-126)); scale 2^(E-140) (E >= 14 keeps it normal)
    e = ((amax.view(torch.int32) >> 23) & 0xFF).clamp(min=14)
    scale = ((e - 13) << 23).view(torch.float32)
    inv = ((267 - e) << 23).view(torch.float32)  # 1 / scale, exact
    keep = torch.isfinite(amax) & (amax > 0)
    scale = torch.where(keep, scale, torch.ones_like(scale))
    inv = torch.where(keep, inv, torch.ones_like(inv))
    return (xf * inv[..., None]).to(torch.float16), scale


@triton.jit
def _scale_of(amax):
    """(scale, 1/scale) fp32 for a row's absmax, as act_f16_ref."""
    e = tl.maximum((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF, 14)
    keep = (amax < float("inf")) & (amax > 0)  # NaN compares false too
    scale = tl.where(keep, ((e - 13) << 23).to(tl.float32, bitcast=True), 1.0)
    inv = tl.where(keep, ((267 - e) << 23).to(tl.float32, bitcast=True), 1.0)
    return scale, inv


@triton.jit
def _act_f16_kernel(x_ptr, h_ptr, s_ptr, K, stride_xm, stride_xk, stride_hm,
                    BLOCK_K: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    x_row = x_ptr + row * stride_xm
    h_row = h_ptr + row * stride_hm
    x, amax, nan = row_absmax(x_row, stride_xk, K, BLOCK_K, ONE_PASS, False)
    scale, inv = _scale_of(tl.where(nan, float("nan"), amax))  # a NaN row keeps scale 1, as the reference
    if ONE_PASS:
        tl.store(h_row + offs, (x * inv).to(tl.float16), mask=offs < K)
    else:
        for k0 in range(0, K, BLOCK_K):
            xk = tl.load(x_row + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
            tl.store(h_row + k0 + offs, (xk * inv).to(tl.float16), mask=k0 + offs < K)
    tl.store(s_ptr + row, scale)


def act_f16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (any strides) -> (h [M, K] fp16 contiguous, scale [M] fp32), as act_f16_ref."""
    M, K = x.shape
    h = empty((M, K), device=x.device, dtype=torch.float16)
    s = empty((M,), device=x.device, dtype=torch.float32)
    if M == 0:
        return h, s
    block = min(next_pow2(K), MAX_ONE_PASS)
    launch_kernel(_act_f16_kernel, (M,), x, h, s, K, x.stride(0), x.stride(1), h.stride(0),
                  BLOCK_K=block, ONE_PASS=K <= block, num_warps=8 if block >= 4096 else 4)
    return h, s
