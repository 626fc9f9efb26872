"""A kernel that only reads a matrix: the memory floor a weight-streaming kernel is measured against
(`python -m fused bench --floor`). out[r] = xor of row r's 32-bit words, so every word must be loaded.

The loads carry the decode kernels' L2 policy (fused.kernels.W_EVICT) unless told otherwise, so the floor and the
kernels it is compared with stream under the same rules (.ci/evict_probe.py times both policies). Reference:
read_rows_ref.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import W_EVICT, cdiv, check_out
from fused.kernels.launch import launch_kernel

# (BLOCK_R, BLOCK_C, num_warps): the tiles the floor takes the best of. H200, 2026-12-03 (.ci/evict_probe.py): the
# 4 x 1024 tile was best for the 117 MB and 176 MB reads, 8 x 512 / 16 x 512 for the 59 MB one.
CONFIGS = ((8, 512, 4), (16, 256, 4), (16, 512, 8), (32, 256, 8), (4, 1024, 4))


@triton.jit
def _read_rows_kernel(w_ptr, o_ptr, R, C, stride_r, EVICT: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.int32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        acc ^= tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_r + cols[None, :],
                       mask=r_ok[:, None] & (cols < C)[None, :], other=0, eviction_policy=EVICT)
    tl.store(o_ptr + rows, tl.xor_sum(acc, axis=1), mask=r_ok)


def read_rows(w: torch.Tensor, config=CONFIGS[0], out: torch.Tensor | None = None,
              evict: str | None = None) -> torch.Tensor:
    """int32 [R] = xor of each row of ``w`` (int32 [R, C], unit stride along C) with ``config`` (one of CONFIGS);
    ``evict``: the loads' L2 policy ("" or "evict_first"; default the decode kernels' W_EVICT)."""
    if w.dtype != torch.int32 or w.dim() != 2 or w.stride(1) != 1:
        raise ValueError(f"read_rows takes a 2-D int32 tensor with unit column stride, got {w.dtype} "
                         f"{tuple(w.shape)} strides {w.stride()}")
    R, C = w.shape
    out = torch.empty(R, dtype=torch.int32, device=w.device) if out is None else check_out(out, (R,), torch.int32,
                                                                                           w.device)
    if R == 0:
        return out
    if C == 0:
        return out.zero_()
    br, bc, nw = config
    launch_kernel(_read_rows_kernel, (cdiv(R, br),), w, out, R, C, w.stride(0),
                  EVICT=W_EVICT.value if evict is None else evict, BLOCK_R=br, BLOCK_C=bc, num_warps=nw)
    return out


def read_rows_ref(w: torch.Tensor) -> torch.Tensor:
    """The reference: the xor of each row, by halving the columns."""
    x = w
    while x.shape[1] > 1:
        if x.shape[1] % 2:
            x = torch.cat([x, torch.zeros_like(x[:, :1])], dim=1)
        x = x[:, 0::2] ^ x[:, 1::2]
    return x[:, 0] if x.shape[1] else torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
