"""Widen an 8-bit weight (int8 or float8 e4m3) to bf16/fp16, exactly: every int8 and e4m3 value is a
bf16 and an fp16 value. Scales are NOT applied (they stay in the GEMM's fp32 epilogue).

Used by W8A16 at large M (dispatch.WIDEN_MIN_M): there the GEMM is compute-bound and Triton's
mixed-input Hopper GEMM (8-bit tile widened in registers every K step) runs at ~half of a bf16 GEMM's
rate, while widening the whole weight once per call costs one streaming pass (1 byte read, 2 written per
weight). The widened copy is a transient buffer of the caching allocator, not kept.
Reference: ``qweight.to(dtype)``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.launch import empty, launch_kernel

BLOCK = 8192


@triton.jit
def _widen_kernel(q_ptr, out_ptr, n, FP8: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    v = tl.load(q_ptr + offs, mask=ok, other=0)
    if FP8:  # loaded as uint8 (masked fp8 loads cannot take `other` everywhere), bitcast in registers
        v = v.to(tl.float8e4nv, bitcast=True)
    # through fp32 (exact): the interpreter casts int8 -> bf16 wrongly
    tl.store(out_ptr + offs, v.to(tl.float32).to(out_ptr.dtype.element_ty), mask=ok)


def widen(qweight: torch.Tensor, dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None) -> torch.Tensor:
    """[R, K] int8 / float8_e4m3fn (contiguous) -> [R, K] ``dtype`` (written into ``out`` if given: contiguous,
    same shape)."""
    if not qweight.is_contiguous():
        raise ValueError("widen expects a contiguous weight")
    fp8 = qweight.dtype == torch.float8_e4m3fn
    q = qweight.view(torch.uint8) if fp8 else qweight
    if out is None:
        out = empty(qweight.shape, device=qweight.device, dtype=dtype)
    elif out.shape != qweight.shape or not out.is_contiguous() or out.dtype != dtype:
        raise ValueError(f"widen: out must be a contiguous {tuple(qweight.shape)} {dtype} tensor")
    n = q.numel()
    if n:
        launch_kernel(_widen_kernel, (cdiv(n, BLOCK),), q, out, n, FP8=fp8, BLOCK=BLOCK, num_warps=8)
    return out
