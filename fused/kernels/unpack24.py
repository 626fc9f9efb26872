"""Packed 2:4 weight -> dense weight, bit for bit: the large-M route for 2:4 layers (unpack once per call,
then the dense kernels; the packed form stays what is stored).

values [N, K/2] (any 1- or 2-byte dtype, handled as integer bits) + meta [N, ceil(K/8)] uint8 in the layout
of sparsity.packing (or tiled as cuSPARSELt keeps it, [N/64, K/64, 512]) -> dense [N, K] of the values'
dtype. Each program takes BLOCK_R rows x BLOCK_B meta bytes: one byte holds the positions of two groups,
whose four kept values are contiguous, and gives 8 dense columns; values and meta are read with wide loads,
and the 8 columns are assembled in registers.
Tiled meta (cuSPARSELt's order, 8-bit values): _unpack24_tiled_kernel walks the meta bytes in their stored
order instead (one contiguous load), works out each byte's row and column from its offset, reads the byte's
4 kept values as one 32-bit word and writes its 8 dense columns as one 64-bit word: no reordering in registers.
Reference: sparsity.packing.unpack_24.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.sparse24_linear import meta_args


@triton.jit
def _group(nib, va, vb, p: tl.constexpr):
    """Dense column p (0..3) of a 2:4 group with positions nib (idx0 | idx1 << 2) and kept values va, vb."""
    return tl.where((nib & 3) == p, va, tl.where((nib >> 2) == p, vb, tl.zeros_like(va)))


@triton.jit
def _unpack24_kernel(v_ptr, m_ptr, out_ptr, N, K, KH, MB, stride_vn, stride_mn, stride_on,
                     BLOCK_R: tl.constexpr, BLOCK_B: tl.constexpr):
    # a tile of BLOCK_R rows x BLOCK_B meta bytes; byte b covers values 4b..4b+3 and dense columns 8b..8b+7
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    r_ok = rows[:, None] < N
    # masks against plain bounds (KH = K/2 values, MB meta bytes per row): contiguous, so the loads stay wide
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


@triton.jit
def _unpack24_tiled_kernel(v_ptr, m_ptr, out_ptr, TOTAL, KT, WORDS, BLOCK: tl.constexpr):
    # BLOCK meta bytes in stored order; byte w of 512-byte tile t = row tile t // KT, K tile t % KT has
    # (sparsity.packing) row 64·(t // KT) + (w>>4 & 7) + 8·(w & 1) + 16·(w>>7 & 3) and meta column
    # 8·(t % KT) + (w>>2 & 1) + 2·(w>>3 & 1) + 4·(w>>1 & 1)
    g = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = g < TOTAL
    t = g >> 9
    w = g & 511
    n = (t // KT) * 64 + ((w >> 4) & 7) + ((w & 1) << 3) + (((w >> 7) & 3) << 4)
    b = (t % KT) * 8 + ((w >> 2) & 1) + (((w >> 3) & 1) << 1) + (((w >> 1) & 1) << 2)
    m = tl.load(m_ptr + g, mask=ok, other=0).to(tl.int32)
    v = tl.load(v_ptr + n * WORDS + b, mask=ok, other=0)  # the byte's 4 kept values, one 32-bit word
    # group 2b -> dense bytes 0..3 (positions in m's low nibble), group 2b+1 -> bytes 4..7
    lo = ((v & 0xFF) << (8 * (m & 3))) | (((v >> 8) & 0xFF) << (8 * ((m >> 2) & 3)))
    hi = (((v >> 16) & 0xFF) << (8 * ((m >> 4) & 3))) | (((v >> 24) & 0xFF) << (8 * ((m >> 6) & 3)))
    d = (lo.to(tl.int64) & 0xFFFFFFFF) | (hi.to(tl.int64) << 32)
    tl.store(out_ptr + n.to(tl.int64) * WORDS + b, d, mask=ok)


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
    if tiled and values.element_size() == 1 and values.is_contiguous():
        total = meta.numel()  # one meta byte per 4 values (a 32-bit word) and 8 dense columns (a 64-bit word)
        launch_kernel(_unpack24_tiled_kernel, (cdiv(total, 1024),), values.view(torch.int32), meta,
                      out.view(torch.int64), total, K // 64, K // 8, BLOCK=1024, num_warps=4)
        return out
    if tiled:
        from sparsity.packing import untile_meta

        meta = untile_meta(meta)
        stride_m = meta.stride(0)
    v, o = values.view(bits), out.view(bits)
    launch_kernel(_unpack24_kernel, (cdiv(N, 16), cdiv(K, 256)), v, meta, o, N, K, half, (K // 4 + 1) // 2,
                  v.stride(0), stride_m, o.stride(0), BLOCK_R=16, BLOCK_B=32, num_warps=4)
    return out
