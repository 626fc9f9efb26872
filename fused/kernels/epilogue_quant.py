"""scale_epilogue and the per-token quantization of its output in one pass: the W8A8 hand-off between the
two layers of a block (fused.dispatch, "quantized hand-off").

When a block's first layer ends in a library GEMM (cuBLAS, cuSPARSELt) and its second layer is W8A8, the
two-step path writes h = scale_epilogue(y) in 16 bits and act_quant reads it back to quantize it per token.
Here one program per token computes its row of h (scales, bias, activation, gate: epilogue_tile), rounded to
h's dtype as the two-step path stores it, and writes q = round(h · (1/s)) with s = max(absmax / qmax,
MIN_SCALE) straight away: h never goes to memory (at M=8192 on a Llama block, 470 MB less traffic, but see
_candidates for why that did not pay yet).
Bit-identical to scale_epilogue followed by act_quant; where the tuner times those two passes faster (on
the H200 at large M, see _candidates), it runs them instead.

A row of up to MAX_ONE_PASS outputs can stay in registers, or be computed twice in chunks (absmax, then
quantize: the second read of y's row mostly hits L2) with more rows in flight per SM: the tuner times both
on first use. Padding rows (``rows`` > M) are written as zeros, as act_quant's.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, next_pow2
from fused.kernels.act_quant import MAX_ONE_PASS, _quantize, act_quant, reciprocal
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.scale_epilogue import check_epilogue_args, epilogue_tile, scale_epilogue, y_strides
from fused.kernels.tuning import m_bucket, pick
from lowbit.quant import MIN_SCALE


@triton.jit
def _h_chunk(y_ptr, xs, ws_ptr, b_ptr, row, n0, N, lo_off, stride_ym, stride_yn, up_off, HAS_XS: tl.constexpr,
             HAS_WS: tl.constexpr, HAS_BIAS: tl.constexpr, GATED: tl.constexpr, ACT: tl.constexpr,
             PLANES: tl.constexpr, HI_W: tl.constexpr, LO_W: tl.constexpr, H_DTYPE: tl.constexpr,
             BLOCK_N: tl.constexpr):
    """[1, BLOCK_N] of h's row from column n0, rounded to H_DTYPE (as stored by the two-step path), in fp32."""
    cols = n0 + tl.arange(0, BLOCK_N)
    ok = (cols < N)[None, :]
    yp = y_ptr + row * stride_ym + cols[None, :] * stride_yn
    h = epilogue_tile(yp, lo_off, ok, xs, ws_ptr, b_ptr, ws_ptr + N, b_ptr + N, cols, N, up_off, HAS_XS, HAS_WS,
                      HAS_BIAS, GATED, ACT, PLANES, HI_W, LO_W)
    return tl.where(ok, h.to(H_DTYPE).to(tl.float32), 0.0)


@triton.jit
def _epilogue_quant_kernel(y_ptr, xs_ptr, ws_ptr, b_ptr, q_ptr, s_ptr, M, N, lo_off, stride_ym, stride_yn, up_off,
                           stride_qm, HAS_XS: tl.constexpr, HAS_WS: tl.constexpr, HAS_BIAS: tl.constexpr,
                           GATED: tl.constexpr,
                           ACT: tl.constexpr, PLANES: tl.constexpr, HI_W: tl.constexpr, LO_W: tl.constexpr,
                           H_DTYPE: tl.constexpr, QMAX: tl.constexpr, MIN_S: tl.constexpr, FP8: tl.constexpr,
                           HAND_ROUND: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    q_row = q_ptr + row * stride_qm
    if row >= M:  # a padding row the caller asked for: zeros
        for n0 in range(0, N, BLOCK_N):
            tl.store(q_row + n0 + offs, tl.zeros((BLOCK_N,), dtype=q_ptr.dtype.element_ty), mask=n0 + offs < N)
    else:
        xs = tl.load(xs_ptr + row + tl.zeros((1, 1), dtype=tl.int32)) if HAS_XS else None
        if ONE_PASS:
            h = _h_chunk(y_ptr, xs, ws_ptr, b_ptr, row, 0, N, lo_off, stride_ym, stride_yn, up_off, HAS_XS, HAS_WS,
                         HAS_BIAS, GATED, ACT, PLANES, HI_W, LO_W, H_DTYPE, BLOCK_N)
            amax = tl.max(tl.abs(h))
            bad = tl.sum(tl.where(h == h, 0.0, 1.0)) > 0
        else:
            amax_v = tl.zeros((1, BLOCK_N), dtype=tl.float32)
            nans = tl.zeros((1, BLOCK_N), dtype=tl.float32)
            for n0 in range(0, N, BLOCK_N):
                hk = _h_chunk(y_ptr, xs, ws_ptr, b_ptr, row, n0, N, lo_off, stride_ym, stride_yn, up_off, HAS_XS,
                              HAS_WS, HAS_BIAS, GATED, ACT, PLANES, HI_W, LO_W, H_DTYPE, BLOCK_N)
                amax_v = tl.maximum(amax_v, tl.abs(hk))
                nans += tl.where(hk == hk, 0.0, 1.0)
            amax = tl.max(amax_v)
            bad = tl.sum(nans) > 0
        # as act_quant: a NaN makes the token's scale NaN (max() drops NaN, so they are counted)
        scale = tl.where(bad, float("nan"), tl.maximum(amax / QMAX, MIN_S))
        tl.store(s_ptr + row, scale)
        inv = reciprocal(scale)
        if ONE_PASS:
            tl.store(q_row + offs[None, :], _quantize(h, inv, QMAX, FP8, HAND_ROUND), mask=(offs < N)[None, :])
        else:
            for n0 in range(0, N, BLOCK_N):
                hk = _h_chunk(y_ptr, xs, ws_ptr, b_ptr, row, n0, N, lo_off, stride_ym, stride_yn, up_off, HAS_XS,
                              HAS_WS, HAS_BIAS, GATED, ACT, PLANES, HI_W, LO_W, H_DTYPE, BLOCK_N)
                tl.store(q_row + n0 + offs[None, :], _quantize(hk, inv, QMAX, FP8, HAND_ROUND),
                         mask=(n0 + offs < N)[None, :])


_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def epilogue_quant(y: torch.Tensor, x_scale: torch.Tensor | None, w_scale: torch.Tensor | None,
                   bias: torch.Tensor | None, act: str, gated: bool, h_dtype: torch.dtype, fp8: bool, m: int,
                   rows: int | None = None, planes: tuple[int, float, float] | None = None,
                   config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """scale_epilogue's arguments (``h_dtype``: its out_dtype, the dtype h is rounded to) -> (q [rows, N]
    int8 or float8_e4m3fn, s [m] fp32): act_quant(scale_epilogue(...), fp8, rows). ``config``: one of
    _candidates (default: the tuner's pick)."""
    N = check_epilogue_args("epilogue_quant", y, x_scale, w_scale, gated, m, planes)
    rows = m if rows is None else rows
    if rows < m:
        raise ValueError(f"epilogue_quant: rows={rows} is below the {m} rows of h")
    if h_dtype not in _TL:
        raise TypeError(f"epilogue_quant: h_dtype must be bfloat16, float16 or float32, got {h_dtype}")
    if rows == 0 or N == 0:
        q = empty((rows, N), device=y.device, dtype=torch.float8_e4m3fn if fp8 else torch.int8)
        return q, empty((m,), device=y.device, dtype=torch.float32)

    def launch(cfg):
        if cfg.get("UNFUSED"):  # the two passes this kernel replaces, where they are faster
            h = scale_epilogue(y, x_scale, w_scale, bias, act, gated, h_dtype, m=m, planes=planes)
            return act_quant(h, fp8, rows=rows)
        q = empty((rows, N), device=y.device, dtype=torch.float8_e4m3fn if fp8 else torch.int8)
        s = empty((m,), device=y.device, dtype=torch.float32)
        qv = q.view(torch.uint8) if fp8 else q
        launch_kernel(_epilogue_quant_kernel, (rows,),
                      y, x_scale if x_scale is not None else y, w_scale if w_scale is not None else y,
                      bias if bias is not None else y, qv, s, m, N, planes[0] * y.stride(0) if planes else 0,
                      *y_strides(y, N), qv.stride(0),
                      HAS_XS=x_scale is not None, HAS_WS=w_scale is not None, HAS_BIAS=bias is not None, GATED=gated,
                      ACT=act, PLANES=planes is not None, HI_W=float(planes[1]) if planes else 1.0,
                      LO_W=float(planes[2]) if planes else 1.0, H_DTYPE=_TL[h_dtype],
                      QMAX=448.0 if fp8 else 127.0, MIN_S=MIN_SCALE, FP8=fp8, HAND_ROUND=INTERPRET,
                      BLOCK_N=cfg["BLOCK_N"], ONE_PASS=cfg["ONE_PASS"], num_warps=cfg["num_warps"])
        return q, s

    key = (m_bucket(m), N, gated, planes is not None, fp8, bias is not None, act)
    return launch(config or pick("epilogue_quant", key, lambda: _candidates(N), launch))


def _candidates(N: int) -> list[dict]:
    """The whole row in registers (one read of y), or chunked (the row computed twice: the second read of
    y's row from L2 where it is still there, with more rows in flight per SM), or scale_epilogue then
    act_quant (UNFUSED). H200, Llama gate/up (H=14336), M=8192, tuner µs (2026-12-01, eighth session):
    fp8 out 300 chunked (1024, 8 warps), 311 whole row (16 warps); int8 out 407 whole row: ~1.5-2 TB/s, where
    scale_epilogue runs at ~3.8 and act_quant at ~3.5. The register file holds about one 14336-wide fp32 row
    per SM, and the chunked form reads y twice from HBM: neither beats the two passes there yet."""
    full = next_pow2(N)
    out = []
    if full <= MAX_ONE_PASS:
        out += [dict(BLOCK_N=full, ONE_PASS=True, num_warps=w) for w in ((4, 8) if full <= 4096 else (8, 16))]
    for bn in (1024, 2048, 4096):
        bn = min(bn, MAX_ONE_PASS)
        if bn < full:
            out += [dict(BLOCK_N=bn, ONE_PASS=False, num_warps=w) for w in (4, 8)]
    return (out or [dict(BLOCK_N=MAX_ONE_PASS, ONE_PASS=False, num_warps=8)]) + [dict(UNFUSED=True)]
