"""Per-token 16-bit activations as two 8-bit planes, one pass: x [M, K] -> (planes [2, M, K], scale [M]).

int8 planes, x ≈ scale·(256·hi + lo): the split-activation W8A16 path runs two int8 tensor-core dots per
weight tile (weights straight from memory into the MMA, no per-weight conversion) instead of widening
every weight. Reference: lowbit.split_activation.
e4m3 planes (``fp8=True``, for fp8 weights), x ≈ scale·(hi + lo/16): two fp8 dots per tile, ~8 significant
bits per element. Reference: lowbit.split_activation_fp8.
Both bit-identical to their references (IEEE division, ties-to-even rounding). One program per token, the
row held in registers as in act_quant.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, next_pow2
from fused.kernels.act_quant import MAX_ONE_PASS, _rint, _round_e4m3, e4m3_bits, pdl_start, reciprocal, row_absmax
from fused.kernels.launch import empty, launch_kernel
from lowbit.quant import FP8_SPLIT_LO, FP8_SPLIT_QMAX, MIN_SCALE, SPLIT_QMAX


FP8_LO: tl.constexpr = tl.constexpr(FP8_SPLIT_LO)


@triton.jit
def split_planes(xf, inv, QMAX: tl.constexpr):
    """fp32 x and its per-row inv = reciprocal(scale) (broadcastable) -> (hi, lo) int8 with
    round(x · inv) = 256·hi + lo (ties to even): the one definition used by act_split and the kernels that
    split inside."""
    v = _rint(tl.minimum(tl.maximum(xf * inv, -QMAX), QMAX)).to(tl.int32)
    hi = (v + 128) >> 8
    return hi.to(tl.int8), (v - hi * 256).to(tl.int8)


@triton.jit
def split_planes_fp8(xf, inv, QMAX: tl.constexpr, LO: tl.constexpr, HAND_ROUND: tl.constexpr):
    """fp32 x and its per-row inv = reciprocal(scale) -> (hi, lo) e4m3 bits with x · inv = hi + lo / LO
    + (rounding of lo), as lowbit.split_activation_fp8."""
    v = tl.minimum(tl.maximum(xf * inv, -QMAX), QMAX)
    # hi's value rounded in fp32, not read back through its e4m3 bits: on the H200 (triton 3.6) the
    # fp32 -> e4m3 -> fp32 round trip in registers gave wrong values in two lanes of every four.
    hv = _round_e4m3(v)
    r = (v - hv) * LO  # exact
    return e4m3_bits(hv, False), e4m3_bits(r, HAND_ROUND)  # hv is an e4m3 value: its cast is exact


@triton.jit
def _split_store(q_row, lo_off, xk, offs, K, inv, QMAX: tl.constexpr, FP8: tl.constexpr, HAND_ROUND: tl.constexpr):
    if FP8:
        hi, lo = split_planes_fp8(xk, inv, QMAX, FP8_LO, HAND_ROUND)
    else:
        hi, lo = split_planes(xk, inv, QMAX)
    tl.store(q_row + offs, hi, mask=offs < K)
    tl.store(q_row + lo_off + offs, lo, mask=offs < K)


@triton.jit
def _act_split_kernel(x_ptr, q_ptr, s_ptr, M, K, stride_xm, stride_xk, stride_qm, lo_off,
                      QMAX: tl.constexpr, MIN_S: tl.constexpr, BLOCK_K: tl.constexpr, ONE_PASS: tl.constexpr,
                      FP8: tl.constexpr = False, HAND_ROUND: tl.constexpr = False, PDL: tl.constexpr = False):
    if PDL:
        pdl_start()
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    q_row = q_ptr + row * stride_qm
    if row >= M:  # a padding row the caller asked for: zeros in both planes (a branch: real rows pay nothing)
        zero = tl.zeros((BLOCK_K,), dtype=q_ptr.dtype.element_ty)
        for k0 in range(0, K, BLOCK_K):
            tl.store(q_row + k0 + offs, zero, mask=k0 + offs < K)
            tl.store(q_row + lo_off + k0 + offs, zero, mask=k0 + offs < K)
    else:
        split_row(x_ptr + row * stride_xm, stride_xk, q_row, lo_off, s_ptr + row, K, QMAX, MIN_S, BLOCK_K, ONE_PASS,
                  FP8, HAND_ROUND)


@triton.jit
def split_row(x_row, stride_xk, q_row, lo_off, s_row, K, QMAX: tl.constexpr, MIN_S: tl.constexpr, BLOCK_K: tl.constexpr,
              ONE_PASS: tl.constexpr, FP8: tl.constexpr, HAND_ROUND: tl.constexpr, STAGES: tl.constexpr = 1):
    """One token: its scale to s_row, its hi plane at q_row and lo plane at q_row + lo_off (act_split's program;
    shared with fused.kernels.split_gemm, which splits x in the GEMM's own launch)."""
    offs = tl.arange(0, BLOCK_K)
    x, amax, bad = row_absmax(x_row, stride_xk, K, BLOCK_K, ONE_PASS, True, STAGES)  # bad: NaN or ±Inf
    scale = tl.maximum(tl.math.div_rn(amax, QMAX), MIN_S)  # IEEE, as the reference
    inv = reciprocal(scale)
    if ONE_PASS:
        _split_store(q_row, lo_off, tl.where(bad, 0.0, x), offs, K, inv, QMAX, FP8, HAND_ROUND)
    else:
        for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
            xk = tl.load(x_row + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
            _split_store(q_row + k0, lo_off, tl.where(bad, 0.0, xk), offs, K - k0, inv, QMAX, FP8, HAND_ROUND)
    tl.store(s_row, tl.where(bad, float("nan"), scale))


def act_split(x: torch.Tensor, fp8: bool = False, rows: int | None = None,
              pdl: bool = False, interleave: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float -> (planes [2, rows, K] int8 (or float8_e4m3fn with ``fp8``): hi then lo, scale [M] fp32).
    A row holding NaN/Inf gets a NaN scale (its outputs are NaN, as in the unquantized layer) and zero
    planes. ``rows`` >= M (default M): each plane's rows past M are zeros (padding for a GEMM that wants a
    row multiple; [2, rows, K] then views as one [2·rows, K] operand). ``pdl``: see act_quant.pdl_start.
    ``interleave``: planes [2·rows, K] instead, row 2t token t's hi plane and 2t + 1 its lo (the operand of
    w8a8_ws's x_split, whose accumulator then holds a token's two sums in one thread)."""
    M, K = x.shape
    rows = M if rows is None else rows
    if rows < M:
        raise ValueError(f"act_split: rows={rows} is below the {M} rows of x")
    q = empty((rows, 2, K) if interleave else (2, rows, K), device=x.device,
              dtype=torch.float8_e4m3fn if fp8 else torch.int8)
    stride_qm, lo_off = (q.stride(0), q.stride(1)) if interleave else (q.stride(1), q.stride(0))
    planes = q.view(2 * rows, K) if interleave else q
    s = empty((M,), device=x.device, dtype=torch.float32)
    if M == 0:
        (q.view(torch.uint8) if fp8 else q).zero_()
        return planes, s
    block = min(next_pow2(K), MAX_ONE_PASS)
    qv = q.view(torch.uint8) if fp8 else q
    launch_kernel(_act_split_kernel, (rows,), x, qv, s, M, K, x.stride(0), x.stride(1), stride_qm, lo_off,
                  QMAX=FP8_SPLIT_QMAX if fp8 else float(SPLIT_QMAX), MIN_S=MIN_SCALE, BLOCK_K=block,
                  ONE_PASS=K <= block, FP8=fp8, HAND_ROUND=fp8 and INTERPRET, num_warps=8 if block >= 4096 else 4,
                  **(dict(PDL=True, launch_pdl=True) if pdl and not INTERPRET else {}))
    return planes, s
