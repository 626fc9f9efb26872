"""Packed 2:4 weight -> dense weight, bit for bit: the large-M route for 2:4 layers (unpack once per call,
then the dense kernels; the packed form stays what is stored).

values [N, K/2] (any 1- or 2-byte dtype, handled as integer bits) + meta [N, ceil(K/8)] uint8 in the layout
of sparsity.packing -> dense [N, K] of the values' dtype. Each program writes a [BLOCK_R, BLOCK_C] tile of
dense columns; column c belongs to group g = c // 4, whose two kept values sit at values[:, 2g : 2g+2]
and whose positions are the nibble g % 2 of meta byte g // 2. Reference: sparsity.packing.unpack_24.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.launch import empty, launch_kernel


@triton.jit
def _unpack24_kernel(v_ptr, m_ptr, out_ptr, N, K, stride_vn, stride_mn, stride_on,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (rows[:, None] < N) & (cols[None, :] < K)
    g = cols // 4
    nib = (tl.load(m_ptr + rows[:, None] * stride_mn + (g // 2)[None, :], mask=ok, other=0).to(tl.int32)
           >> (4 * (g % 2))[None, :]) & 15
    p = (cols % 4)[None, :]
    v0 = tl.load(v_ptr + rows[:, None] * stride_vn + (2 * g)[None, :], mask=ok, other=0)
    v1 = tl.load(v_ptr + rows[:, None] * stride_vn + (2 * g + 1)[None, :], mask=ok, other=0)
    zero = tl.zeros_like(v0)
    out = tl.where(p == (nib & 3), v0, tl.where(p == (nib >> 2), v1, zero))
    tl.store(out_ptr + rows[:, None] * stride_on + cols[None, :], out, mask=ok)


_BITS = {1: torch.uint8, 2: torch.int16}


def unpack24(values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Dense [N, 2·values.shape[1]] weight of values' dtype (a transient: the caller's call uses it once)."""
    N, half = values.shape
    K = 2 * half
    bits = _BITS[values.element_size()]
    out = empty((N, K), device=values.device, dtype=values.dtype)
    if N == 0 or K == 0:
        return out
    v, o = values.view(bits), out.view(bits)
    launch_kernel(_unpack24_kernel, (cdiv(N, 16), cdiv(K, 256)), v, meta, o, N, K, v.stride(0), meta.stride(0),
                  o.stride(0), BLOCK_R=16, BLOCK_C=256, num_warps=4)
    return out
