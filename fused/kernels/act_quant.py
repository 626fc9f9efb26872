"""Per-token dynamic activation quantization in one pass: x [M, K] -> (q [M, K] int8 | e4m3, scale [M] fp32).

scale = max(absmax(row) / qmax, MIN_SCALE); q = round(x · (1/scale)), to nearest int8 or e4m3 value, ties
to even, with 1/scale rounded once per token (IEEE): bit-identical to the reference.
Reference: lowbit.quantize_activation. One program per token; a row up to MAX_ONE_PASS elements is
loaded once into registers (absmax and cast from the same registers: one read of x, one write of q).
Longer rows take a second read (K > 16384 does not occur in the MLPs this targets).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from fused.kernels import INTERPRET, next_pow2
from fused.kernels.launch import empty, launch_kernel
from lowbit.quant import MIN_SCALE

MAX_ONE_PASS = 16384


@triton.jit
def pdl_start():
    """First thing in a small kernel launched with launch_pdl=True (programmatic dependent launch) whose consumer is
    launched the same way: wait for the kernel before (its output may be our input), then let the consumer's
    programs start, so they issue their weight loads while this kernel runs. In this order the consumer never
    shares the SMs with the kernel before us (that lost when the dense GEMVs tried it: NOTES, first sessions)."""
    gdc_wait()
    gdc_launch_dependents()


@triton.jit
def _rint(t):
    """Round half to even (as torch.round) for |t| < 2²²: adding 1.5·2²³ leaves no fraction bits."""
    return (t + 12582912.0) - 12582912.0


@triton.jit
def _round_e4m3(v):
    """Round |v| <= 448 to the nearest e4m3 value (ties to even) in fp32, so the cast that follows is
    exact. Used under the interpreter, which truncates in its fp32→fp8 cast (124.3 -> 64), and where the
    rounded value itself is needed (act_split's fp8 residual)."""
    e = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    e = tl.maximum(e, -6)  # e4m3 subnormals share the quantum 2^-9
    quantum = ((e - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    inv = ((127 - (e - 3)) << 23).to(tl.float32, bitcast=True)  # 1/quantum, exact (a power of two)
    r = _rint(v * inv) * quantum
    return tl.where(r == 0.0, v * 0.0, r)  # keep the sign of a zero, as the cast does (-0.0 for tiny v < 0)


@triton.jit
def e4m3_bits(v, HAND_ROUND: tl.constexpr):
    """fp32 |v| <= 448 -> e4m3 bits (uint8), nearest, ties to even. On the GPU the cast is
    cvt.rn.satfinite (as torch's; a third of the ALU work of rounding by hand); the interpreter's cast
    truncates, so there the value is rounded by hand first and the cast is exact."""
    if HAND_ROUND:
        v = _round_e4m3(v)
    return v.to(tl.float8e4nv).to(tl.uint8, bitcast=True)


@triton.jit
def reciprocal(scale):
    """1/scale, IEEE-rounded as torch's reciprocal (`/` on fp32 is the approximate div.full on the GPU):
    once per token, so the per-element work is one multiply (an IEEE divide per element was ~20 of
    act_quant's ~27 SASS instructions per element on sm_90)."""
    return tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)


@triton.jit
def _quantize(x, inv, QMAX: tl.constexpr, FP8: tl.constexpr, HAND_ROUND: tl.constexpr):
    # inv = reciprocal(scale), as the reference's x · (1/scale)
    v = tl.minimum(tl.maximum(x * inv, -QMAX), QMAX)
    if FP8:
        q = e4m3_bits(v, HAND_ROUND)
    else:
        q = _rint(v).to(tl.int8)
    return q


@triton.jit
def row_absmax(x_row, stride_xk, K, BLOCK_K: tl.constexpr, ONE_PASS: tl.constexpr, INF_BAD: tl.constexpr,
               STAGES: tl.constexpr = 1):
    """The statistics pass of the per-token kernels (act_quant, act_split) over one row:
    (x: the row in fp32 when ONE_PASS, kept in registers for the second pass; absmax; bad: the row holds a
    NaN, or with INF_BAD a NaN or ±Inf). max() drops NaN, so they are counted. STAGES > 1: the chunk loop
    pipelined by Triton (chunks streamed through shared memory, STAGES - 1 ahead), for a row phase run by one
    heavy program per SM (split_gemm), where one chunk in flight at a time leaves the row latency-bound."""
    offs = tl.arange(0, BLOCK_K)
    if ONE_PASS:  # the whole row stays in registers: x is read once
        x = tl.load(x_row + offs * stride_xk, mask=offs < K, other=0.0).to(tl.float32)
        amax = tl.abs(x)
        nans = tl.where(tl.abs(x) < float("inf"), 0.0, 1.0) if INF_BAD else tl.where(x == x, 0.0, 1.0)
    else:
        x = tl.zeros((BLOCK_K,), dtype=tl.float32)  # unused: the caller re-reads the row
        amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
        nans = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
            xk = tl.load(x_row + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(xk))
            if INF_BAD:
                nans += tl.where(tl.abs(xk) < float("inf"), 0.0, 1.0)
            else:
                nans += tl.where(xk == xk, 0.0, 1.0)
    return x, tl.max(amax, axis=0), tl.sum(nans, axis=0) > 0


@triton.jit
def token_scale(amax, bad, QMAX: tl.constexpr, MIN_S: tl.constexpr):
    """A token's scale from its row's absmax (NaN excluded) and whether the row holds a NaN: NaN must survive
    (NaN in -> NaN out, as in the unquantized layer)."""
    return tl.where(bad, float("nan"), tl.maximum(amax / QMAX, MIN_S))


@triton.jit
def zero_row(q_row, K, BLOCK_K: tl.constexpr):
    """A padding row a caller asked for: zeros."""
    offs = tl.arange(0, BLOCK_K)
    for k0 in range(0, K, BLOCK_K):
        tl.store(q_row + k0 + offs, tl.zeros((BLOCK_K,), dtype=q_row.dtype.element_ty), mask=k0 + offs < K)


@triton.jit
def quantize_row(x_row, stride_xk, q_row, s_out, K, QMAX: tl.constexpr, MIN_S: tl.constexpr, FP8: tl.constexpr,
                 BLOCK_K: tl.constexpr, ONE_PASS: tl.constexpr, HAND_ROUND: tl.constexpr, STAGES: tl.constexpr = 1):
    """One token: its scale to s_out, its quantized row to q_row (act_quant's program; fused.kernels.first_layer
    runs it as an item)."""
    offs = tl.arange(0, BLOCK_K)
    x, amax, bad = row_absmax(x_row, stride_xk, K, BLOCK_K, ONE_PASS, False, STAGES)
    scale = token_scale(amax, bad, QMAX, MIN_S)
    tl.store(s_out, scale)
    inv = reciprocal(scale)
    if ONE_PASS:
        tl.store(q_row + offs, _quantize(x, inv, QMAX, FP8, HAND_ROUND), mask=offs < K)
    else:
        for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
            xk = tl.load(x_row + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
            tl.store(q_row + k0 + offs, _quantize(xk, inv, QMAX, FP8, HAND_ROUND), mask=k0 + offs < K)


@triton.jit
def _act_quant_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_xk, stride_qm,
                      QMAX: tl.constexpr, MIN_S: tl.constexpr, FP8: tl.constexpr, BLOCK_K: tl.constexpr,
                      ONE_PASS: tl.constexpr, HAND_ROUND: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:
        pdl_start()
    row = tl.program_id(0)
    q_row = q_ptr + row * stride_qm
    if row >= M:  # a padding row (a branch, so real rows pay no select)
        zero_row(q_row, K, BLOCK_K)
    else:
        quantize_row(x_ptr + row * stride_xm, stride_xk, q_row, s_ptr + row, K, QMAX, MIN_S, FP8, BLOCK_K, ONE_PASS,
                     HAND_ROUND)


def act_quant(x: torch.Tensor, fp8: bool, rows: int | None = None,
              pdl: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q [rows, K], scale [M]); ``rows`` >= M (default M): q's rows past M are zeros (padding
    for a GEMM that wants a row multiple, written here instead of by a separate copy). ``pdl``: see pdl_start
    (the kernel after must then wait before reading q and scale, as sparse24_mma(pdl=True) does)."""
    M, K = x.shape
    rows = M if rows is None else rows
    if rows < M:
        raise ValueError(f"act_quant: rows={rows} is below the {M} rows of x")
    q = empty((rows, K), device=x.device, dtype=torch.float8_e4m3fn if fp8 else torch.int8)
    s = empty((M,), device=x.device, dtype=torch.float32)
    if M == 0:
        (q.view(torch.uint8) if fp8 else q).zero_()
        return q, s
    block = min(next_pow2(K), MAX_ONE_PASS)
    qv = q.view(torch.uint8) if fp8 else q
    launch_kernel(_act_quant_kernel, (rows,), x, qv, s, M, K, x.stride(0), x.stride(1), qv.stride(0),
                  QMAX=448.0 if fp8 else 127.0, MIN_S=MIN_SCALE, FP8=fp8, BLOCK_K=block,
                  ONE_PASS=K <= block, HAND_ROUND=INTERPRET, num_warps=8 if block >= 4096 else 4,
                  **(dict(PDL=True, launch_pdl=True) if pdl and not INTERPRET else {}))
    return q, s
