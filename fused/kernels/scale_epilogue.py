"""The epilogue after a library GEMM on 8-bit operands: the 2:4 cuSPARSELt route and the dense cuBLAS W8A8
route (see fused.dispatch, "cslt" and CUBLAS_W8A8).

cuSPARSELt's 2:4 tensor-core GEMM (torch._cslt_sparse_mm) takes 8-bit activations (W8A8: per-token
quantized; W8A16: the two split planes of each token, hi and lo, as extra rows) and the compressed 8-bit
weight, and gives the raw product y = x_q · W_qᵀ in bf16 (cuBLAS: bf16 for fp8, int32 for int8). Its alpha
vector could apply the per-channel weight scale, but on the H200 (torch 2.11) only int8 accepts it, and it
cannot apply a per-token scale or a SwiGLU-style gate. This kernel finishes the layer in one pass over y:

  linear:  out[m, n] = act(z[m, n] · s_x[m] · s_w[n] + b[n])
  gated:   out[m, h] = act(z[m, h] · s_x[m] · s_w[h] + b[h]) · (z[m, H + h] · s_x[m] · s_w[H + h] + b[H + h])

(gated: y [M, 2H], or [2, M, H] from two GEMMs of H columns each; s_w[H + h] and b[H + h] from the stacked vectors,
or from the up projection's own (``up=``)) with z = y, or with split planes
z = HI_W · y[m] + LO_W · y[lo_row + m] (int8 planes: 256 and 1, e4m3 planes: 1 and 1/16, see
lowbit.split_activation); s_x = 1 / s_w = 1 when absent.
fp32 math, output in out's dtype. Reference: fused.reference.scale_epilogue_ref.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, launch_kernel


@triton.jit
def _combined(yp, lo_off, ok, PLANES: tl.constexpr, HI_W: tl.constexpr, LO_W: tl.constexpr):
    z = tl.load(yp, mask=ok, other=0.0).to(tl.float32)
    if PLANES:
        z = z * HI_W + tl.load(yp + lo_off, mask=ok, other=0.0).to(tl.float32) * LO_W
    return z


@triton.jit
def epilogue_tile(yp, lo_off, ok, xs, ws_ptr, b_ptr, su_ptr, bu_ptr, cols, N, up_off, HAS_XS: tl.constexpr,
                  HAS_WS: tl.constexpr, HAS_BIAS: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr,
                  PLANES: tl.constexpr, HI_W: tl.constexpr, LO_W: tl.constexpr):
    """The fp32 outputs of a [rows, cols] tile at yp (xs: the rows' x scales, [rows, 1]; up_off: elements from a
    gate entry of y to its up entry; su_ptr / bu_ptr: the up projection's scales / bias); shared with
    epilogue_quant, so both round alike."""
    g = _combined(yp, lo_off, ok, PLANES, HI_W, LO_W)
    if HAS_XS:
        g = g * xs
    if HAS_WS:
        g = g * tl.load(ws_ptr + cols, mask=cols < N, other=0.0)[None, :]
    if HAS_BIAS:
        g += tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    g = activation(g, ACT)
    if GATED:
        u = _combined(yp + up_off, lo_off, ok, PLANES, HI_W, LO_W)
        if HAS_XS:
            u = u * xs
        if HAS_WS:
            u = u * tl.load(su_ptr + cols, mask=cols < N, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(bu_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        g = g * u
    return g


@triton.jit
def _scale_epilogue_kernel(y_ptr, xs_ptr, ws_ptr, b_ptr, su_ptr, bu_ptr, out_ptr, M, N, lo_off, stride_ym,
                          stride_yn, up_off, stride_om, stride_on, HAS_XS: tl.constexpr, HAS_WS: tl.constexpr,
                          HAS_BIAS: tl.constexpr, GATED: tl.constexpr, SEP_UP: tl.constexpr, ACT: tl.constexpr,
                          PLANES: tl.constexpr, HI_W: tl.constexpr, LO_W: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr):
    # N: output columns (H when gated); lo_off: where the lo plane's rows start, in elements of y; up_off: from a
    # gate entry to its up entry, in elements of y (y [M, 2H]: N·stride_yn; [2, M, H]: y.stride(0)); the up
    # projection's scales and bias follow the gate's (ws_ptr + N) or, SEP_UP, are tensors of their own
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (rows < M)[:, None] & (cols < N)[None, :]
    yp = y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn
    xs = tl.load(xs_ptr + rows, mask=rows < M, other=0.0)[:, None] if HAS_XS else None
    if not SEP_UP:
        su_ptr = ws_ptr + N
        bu_ptr = b_ptr + N
    g = epilogue_tile(yp, lo_off, ok, xs, ws_ptr, b_ptr, su_ptr, bu_ptr, cols, N, up_off, HAS_XS, HAS_WS, HAS_BIAS,
                      GATED, ACT, PLANES, HI_W, LO_W)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, g.to(out_ptr.dtype.element_ty),
             mask=ok)


def check_epilogue_args(name, y, x_scale, w_scale, gated, m, planes, bias=None, up=None) -> int:
    """The output column count N for y [R, N] (gated: [R, 2N] or [2, R, N]) and m rows; a clear error otherwise.
    ``up`` (gated: the up projection's scale and bias apart): w_scale and bias are then the gate's alone."""
    if y.dim() == 3:
        if not gated or y.shape[0] != 2 or planes is not None:
            raise ValueError(f"{name}: a 3-D y must be a gated [2, R, H] product without planes, got "
                             f"{tuple(y.shape)}, gated={gated}, planes={planes}")
        R, N2 = y.shape[1], 2 * y.shape[2]
    elif y.dim() == 2:
        R, N2 = y.shape
    else:
        raise ValueError(f"{name}: y must be [R, N] or (gated) [2, R, H], got {tuple(y.shape)}")
    if m > R or (planes is not None and not m <= planes[0] <= R - m):
        raise ValueError(f"{name}: {m} rows (lo plane from row {planes and planes[0]}) do not fit y's {R}")
    if gated and N2 % 2:
        raise ValueError(f"{name}: a gated y needs an even column count, got {N2}")
    if x_scale is not None and x_scale.shape != (m,):
        raise ValueError(f"{name}: x_scale must be [{m}], got {tuple(x_scale.shape)}")
    if up is not None:
        su, bu = up
        if not gated or (su is None) != (w_scale is None) or (bu is None) != (bias is None):
            raise ValueError(f"{name}: up=(scale, bias) goes with a gated y and the gate's own scale and bias "
                             f"(both given or both None), got gated={gated}")
        for what, t in (("w_scale", w_scale), ("up scale", su), ("bias", bias), ("up bias", bu)):
            if t is not None and t.shape != (N2 // 2,):
                raise ValueError(f"{name}: {what} must be [{N2 // 2}] with up=, got {tuple(t.shape)}")
    elif w_scale is not None and w_scale.shape != (N2,):
        raise ValueError(f"{name}: w_scale must be [{N2}], got {tuple(w_scale.shape)}")
    return N2 // 2 if gated else N2


def y_strides(y: torch.Tensor, n: int) -> tuple[int, int, int]:
    """(stride_ym, stride_yn, up_off) of a checked y for n output columns (see _scale_epilogue_kernel)."""
    if y.dim() == 3:
        return y.stride(1), y.stride(2), y.stride(0)
    return y.stride(0), y.stride(1), n * y.stride(1)


def scale_epilogue(y: torch.Tensor, x_scale: torch.Tensor | None, w_scale: torch.Tensor | None,
                  bias: torch.Tensor | None, act: str, gated: bool, out_dtype: torch.dtype, m: int | None = None,
                  planes: tuple[int, float, float] | None = None, up: tuple | None = None) -> torch.Tensor:
    """y [R, N] (or [R, 2H] gated, or [2, R, H] gated: gate and up products apart; any strides), x_scale [m]
    and w_scale [N] (or [2H]) fp32 (None: 1) -> [m, N] (or [m, H]) in ``out_dtype``, from y's first m rows
    (default R). ``planes`` (lo_row, hi_w, lo_w):
    y's rows [0, m) hold the hi plane's product and [lo_row, lo_row + m) the lo plane's, combined as
    hi_w·hi + lo_w·lo. ``up`` = (scale, bias) of the up projection in tensors of their own (gated_pair's, no
    concatenated copy); w_scale and bias are then the gate's [H]."""
    M = y.shape[-2] if m is None else m
    N = check_epilogue_args("scale_epilogue", y, x_scale, w_scale, gated, M, planes, bias, up)
    su, bu = up if up is not None else (None, None)
    out = empty((M, N), device=y.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return out
    bm, bn = 16, 256  # one row segment per warp: wide loads along N, where y is contiguous
    launch_kernel(_scale_epilogue_kernel, (cdiv(M, bm), cdiv(N, bn)),
                  y, x_scale if x_scale is not None else y, w_scale if w_scale is not None else y,
                  bias if bias is not None else y, su if su is not None else y, bu if bu is not None else y, out, M,
                  N, planes[0] * y.stride(0) if planes else 0, *y_strides(y, N), out.stride(0), out.stride(1),
                  HAS_XS=x_scale is not None, HAS_WS=w_scale is not None, HAS_BIAS=bias is not None, GATED=gated,
                  SEP_UP=up is not None, ACT=act, PLANES=planes is not None, HI_W=float(planes[1]) if planes else 1.0,
                  LO_W=float(planes[2]) if planes else 1.0,
                  BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    return out
