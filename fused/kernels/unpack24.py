"""Packed 2:4 weight -> dense weight, bit for bit: the large-M route for 2:4 layers (unpack once per call,
then the dense kernels; the packed form stays what is stored).

values [N, K/2] (any 1- or 2-byte dtype, handled as integer bits) + meta [N, ceil(K/8)] uint8 in the layout
of sparsity.packing (or tiled as cuSPARSELt keeps it, [N/64, K/64, 512]) -> dense [N, K] of the values' dtype. Each program takes BLOCK_R rows x BLOCK_B meta
bytes: one byte holds the positions of two groups, whose four kept values are contiguous, and gives 8
dense columns; values and meta are read with wide loads, and the 8 columns are assembled in registers.
Reference: sparsity.packing.unpack_24.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.sparse24_linear import meta_args, meta_chunks


@triton.jit
def _group(nib, va, vb, p: tl.constexpr):
    """Dense column p (0..3) of a 2:4 group with positions nib (idx0 | idx1 << 2) and kept values va, vb."""
    return tl.where((nib & 3) == p, va, tl.where((nib >> 2) == p, vb, tl.zeros_like(va)))


@triton.jit
def _unpack24_kernel(v_ptr, m_ptr, out_ptr, N, K, KH, MB, stride_vn, stride_mn, stride_on,
                     BLOCK_R: tl.constexpr, BLOCK_B: tl.constexpr, TILED: tl.constexpr = False):
    # a tile of BLOCK_R rows x BLOCK_B meta bytes; byte b covers values 4b..4b+3 and dense columns 8b..8b+7
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    r_ok = rows[:, None] < N
    # masks against plain bounds (KH = K/2 values, MB meta bytes per row): contiguous, so the loads stay wide
    if TILED:  # cuSPARSELt's tiles: BLOCK_R rows x 64 columns are one contiguous run per tile
        m = meta_chunks(m_ptr, tl.program_id(0) * BLOCK_R, tl.program_id(1) * (8 * BLOCK_B), K, stride_mn,
                        BLOCK_R, 8 * BLOCK_B, False)
    else:
        m = tl.load(m_ptr + rows[:, None] * stride_mn + b[None, :], mask=r_ok & (b < MB)[None, :], other=0)
    m = m.to(tl.int32)
    j = tl.program_id(1) * (4 * BLOCK_B) + tl.arange(0, 4 * BLOCK_B)  # values, contiguous: wide loads
    v = tl.load(v_ptr + rows[:, None] * stride_vn + j[None, :], mask=r_ok & (j < KH)[None, :], other=0)
    v02, v13 = tl.split(tl.reshape(v, (BLOCK_R, BLOCK_B, 2, 2)))  # [.., i] = value 2i / 2i + 1 of the byte
    v0, v2 = tl.split(v02)
    v1, v3 = tl.split(v13)
    lo, hi = m & 15, m >> 4  # groups 2b and 2b + 1
    # dense column 8b + c, c = 0..7, assembled by interleaving (bit 0 of c innermost)
    even = tl.interleave(tl.interleave(_group(lo, v0, v1, 0), _group(hi, v2, v3, 0)),
                         tl.interleave(_group(lo, v0, v1, 2), _group(hi, v2, v3, 2)))
    odd = tl.interleave(tl.interleave(_group(lo, v0, v1, 1), _group(hi, v2, v3, 1)),
                        tl.interleave(_group(lo, v0, v1, 3), _group(hi, v2, v3, 3)))
    out = tl.interleave(even, odd)
    cols = tl.program_id(1) * (8 * BLOCK_B) + tl.arange(0, 8 * BLOCK_B)
    tl.store(out_ptr + rows[:, None] * stride_on + cols[None, :], out, mask=r_ok & (cols < K)[None, :])


_BITS = {1: torch.uint8, 2: torch.int16}


def unpack24(values: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    """Dense [N, 2·values.shape[1]] weight of values' dtype (a transient: the caller's call uses it once)."""
    N, half = values.shape
    K = 2 * half
    bits = _BITS[values.element_size()]
    out = empty((N, K), device=values.device, dtype=values.dtype)
    if N == 0 or K == 0:
        return out
    stride_m, tiled = meta_args(meta, N, K, "unpack24")
    v, o = values.view(bits), out.view(bits)
    launch_kernel(_unpack24_kernel, (cdiv(N, 16), cdiv(K, 256)), v, meta, o, N, K, half, (K // 4 + 1) // 2,
                  v.stride(0), stride_m, o.stride(0), BLOCK_R=16, BLOCK_B=32, TILED=tiled, num_warps=4)
    return out
