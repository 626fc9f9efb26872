"""The epilogue of the cuSPARSELt route for 2:4 layers (see fused.dispatch, "cslt").

cuSPARSELt's 2:4 tensor-core GEMM (torch._cslt_sparse_mm) takes the activations (8-bit for W8A8, 16-bit
for W8A16) and the compressed weight and gives the raw product y [M, N] = x · W_qᵀ in 16 bits. Its alpha
vector could apply the per-channel weight scale, but on the H200 (torch 2.11) only int8 accepts it, and it
cannot apply a W8A8 per-token scale or a SwiGLU-style gate. This kernel finishes the layer in one pass over y:

  linear:  out[m, n] = act(y[m, n] · s_x[m] · s_w[n] + b[n])
  gated:   out[m, h] = act(y[m, h] · s_x[m] · s_w[h] + b[h]) · (y[m, H + h] · s_x[m] · s_w[H + h] + b[H + h])

(gated: y [M, 2H]) with s_x = 1 when there is no activation scale (W8A16), s_w = 1 when there is none.
fp32 math, output in out's dtype. Reference: fused.reference.cslt_epilogue_ref.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, launch_kernel


@triton.jit
def _cslt_epilogue_kernel(y_ptr, xs_ptr, ws_ptr, b_ptr, out_ptr, M, N, stride_ym, stride_yn, stride_om, stride_on,
                          HAS_XS: tl.constexpr, HAS_WS: tl.constexpr, HAS_BIAS: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # N: output columns (H when gated: the up half of y starts at column N)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (rows < M)[:, None] & (cols < N)[None, :]
    yp = y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn
    g = tl.load(yp, mask=ok, other=0.0).to(tl.float32)
    if HAS_XS:
        xs = tl.load(xs_ptr + rows, mask=rows < M, other=0.0)[:, None]
        g = g * xs
    if HAS_WS:
        g = g * tl.load(ws_ptr + cols, mask=cols < N, other=0.0)[None, :]
    if HAS_BIAS:
        g += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    g = activation(g, ACT)
    if GATED:
        u = tl.load(yp + N * stride_yn, mask=ok, other=0.0).to(tl.float32)
        if HAS_XS:
            u = u * xs
        if HAS_WS:
            u = u * tl.load(ws_ptr + N + cols, mask=cols < N, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(b_ptr + N + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        g = g * u
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, g.to(out_ptr.dtype.element_ty),
             mask=ok)


def cslt_epilogue(y: torch.Tensor, x_scale: torch.Tensor | None, w_scale: torch.Tensor | None,
                  bias: torch.Tensor | None, act: str, gated: bool, out_dtype: torch.dtype) -> torch.Tensor:
    """y [M, N] (or [M, 2H] gated, any strides), x_scale [M] and w_scale [N] (or [2H]) fp32 (None: 1) ->
    [M, N] (or [M, H]) in ``out_dtype``."""
    M, N2 = y.shape
    if gated and N2 % 2:
        raise ValueError(f"cslt_epilogue: a gated y needs an even column count, got {N2}")
    N = N2 // 2 if gated else N2
    if x_scale is not None and x_scale.shape != (M,):
        raise ValueError(f"cslt_epilogue: x_scale must be [{M}], got {tuple(x_scale.shape)}")
    if w_scale is not None and w_scale.shape != (N2,):
        raise ValueError(f"cslt_epilogue: w_scale must be [{N2}], got {tuple(w_scale.shape)}")
    out = empty((M, N), device=y.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return out
    bm, bn = 16, 256  # one row segment per warp: wide loads along N, where y is contiguous
    launch_kernel(_cslt_epilogue_kernel, (cdiv(M, bm), cdiv(N, bn)),
                  y, x_scale if x_scale is not None else y, w_scale if w_scale is not None else y, bias if bias is not None else y, out, M, N,
                  y.stride(0), y.stride(1), out.stride(0), out.stride(1),
                  HAS_XS=x_scale is not None, HAS_WS=w_scale is not None, HAS_BIAS=bias is not None, GATED=gated, ACT=act,
                  BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    return out
