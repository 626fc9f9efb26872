"""Tiled 8-bit-weight GEMM for M > 16, weight-only (W8A16) or with quantized activations (W8A8).

y = epilogue(x · Wᵀ): per-channel weight scale (× per-token activation scale for W8A8), bias, activation,
and for gated weights act(gate) ⊙ up. x [M, K]: bf16/fp16/fp32 for W8A16; int8 or float8 e4m3 (as uint8)
with an fp32 per-token scale [M] for W8A8 (made by fused.kernels.act_quant). W [R, K] int8 or e4m3 (uint8);
gated: gate rows [0, R/2), up rows [R/2, R), or (``up=``) the up projection in tensors of its own
(fused.kernels.up_operands).
Reference: fused.reference.linear_ref / gated_ref.

Tutorial-03 structure: each program owns a BLOCK_M × BLOCK_N output tile (for gated: the gate tile and
the matching up tile, both accumulated in the same K loop so x is loaded once for both), grouped tile
order for L2 reuse of the weight. W8A16 converts the 8-bit tile to the activation dtype in registers
(exact: int8 and e4m3 values are all representable in bf16/fp16); W8A8 feeds int8·int8→int32 or
fp8·fp8→fp32 tensor-core dots directly.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, check_out, dot_mode, up_operands
from fused.kernels.act_quant import _quantize, reciprocal
from fused.kernels.act_split import FP8_LO, split_planes
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.splitk import plan_split, splitk_reduce
from fused.kernels.tuning import m_bucket, pick
from lowbit.quant import MIN_SCALE, SPLIT_QMAX


@triton.jit
def _load_tiles(x_ptrs, w_ptrs, x_mask, w_mask, A8: tl.constexpr, FP8_AS_U8: tl.constexpr):
    x = tl.load(x_ptrs, mask=x_mask, other=0.0)  # a float: int 0 cannot be cast to fp8 on triton 3.6
    w = tl.load(w_ptrs, mask=w_mask, other=0.0)
    if FP8_AS_U8:  # interpreter only: fp8 loaded as uint8, bitcast in registers
        w = w.to(tl.float8e4nv, bitcast=True)
        if A8:
            x = x.to(tl.float8e4nv, bitcast=True)
    return x, w


@triton.jit
def _mma(x, w, acc, A8: tl.constexpr, FP8: tl.constexpr, DOT: tl.constexpr):
    """acc += x · wᵀ with w a [BLOCK_N, BLOCK_K] tile. (A swapped product, accᵀ += w · xᵀ, so that the
    widened weight is wgmma's register operand, was measured on the H200 and lost everywhere.)"""
    if A8:
        if FP8:
            acc = tl.dot(x, tl.trans(w), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc, out_dtype=tl.int32)
    elif DOT == "fp32":
        acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
    else:
        acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc


@triton.jit
def _unstack(acc, OUT_M: tl.constexpr, BLOCK_N: tl.constexpr, FP8: tl.constexpr):
    """A stacked [2·OUT_M, BLOCK_N] accumulator (hi-plane rows, then lo-plane rows) -> hi·256 + lo in fp32
    (hi + lo/16 for e4m3 planes): the same two products and one sum as the unstacked combine, so the same bits."""
    a = tl.reshape(acc.to(tl.float32), (2, OUT_M, BLOCK_N))
    first = tl.arange(0, 2) == 0
    wt = tl.where(first, 1.0, 1.0 / FP8_LO) if FP8 else tl.where(first, 256.0, 1.0)
    return tl.sum(a * wt[:, None, None], axis=0)


@triton.jit
def grouped_tile(tile, M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of a tile index in grouped order (Triton's matmul tutorial): GROUP_M row tiles
    share the same weight columns while those are in L2."""
    num_pid_m = tl.cdiv(M, ROWS)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (tile // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group_size) % rows_in_group, (tile % group_size) // rows_in_group


@triton.jit
def tile_epilogue(acc, acc_u, xs, offs_n, n_ok, ws_ptr, b_ptr, su_ptr, bu_ptr, u_row0, GATED: tl.constexpr,
                  A8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr):
    """fp32 y of a tile from its accumulators: token scale xs [rows, 1] (A8), channel scale, bias, activation,
    and for gated tiles the up accumulator's product (the same order of operations wherever it runs)."""
    y = acc.to(tl.float32)
    if A8:
        y = y * xs
    y = y * tl.load(ws_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y = activation(y, ACT)
    if GATED:
        u = acc_u.to(tl.float32)
        if A8:
            u = u * xs
        u = u * tl.load(su_ptr + u_row0 + offs_n, mask=n_ok, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(bu_ptr + u_row0 + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        y = y * u
    return y


@triton.jit
def w8_tile(
    pid, pid_k, x_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, u_row0,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn, stride_xlo,
    GATED: tl.constexpr, A8: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    DOT: tl.constexpr, FP8_AS_U8: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    X_LO: tl.constexpr, QX: tl.constexpr = False, QMAX: tl.constexpr = 127.0, MIN_S: tl.constexpr = 1e-12,
    HAND_ROUND: tl.constexpr = False, STACK: tl.constexpr = False, OUT_M: tl.constexpr = 16,
):
    """One (output tile, K split) item of the kernel below: ``pid`` the tile (grouped order), ``pid_k`` the split.
    A jit function so that kernels which make the GEMM's input in the same launch (fused.kernels.split_gemm) run
    the very same tile."""
    # STACK (split planes from act_split, OUT_M = BLOCK_M / 2): the tile's first OUT_M rows are hi-plane rows,
    # the last OUT_M the same tokens' lo-plane rows, so one dot covers both planes (see STACK below for why).
    # Otherwise OUT_M = BLOCK_M.
    pid_m, pid_n = grouped_tile(pid, M, N, OUT_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * OUT_M + tl.arange(0, OUT_M)  # output rows
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_k * K_PER_SPLIT  # a multiple of BLOCK_K
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    rk = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    if STACK:
        r = tl.arange(0, BLOCK_M)
        x_rows = pid_m * OUT_M + r % OUT_M
        xm_ok = x_rows < M
        x_ptrs = (x_ptr + x_rows[:, None] * stride_xm + (r // OUT_M)[:, None] * stride_xlo
                  + (k_lo + rk)[None, :] * stride_xk)
    else:
        xm_ok = m_ok
        x_ptrs = x_ptr + offs_m[:, None] * stride_xm + (k_lo + rk)[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + (k_lo + rk)[None, :] * stride_wk
    u_ptrs = wu_ptr + (u_row0 + offs_n)[:, None] * stride_un + (k_lo + rk)[None, :] * stride_uk

    if QX:
        # W8A8 at small M in one launch: x arrives in its float dtype; each program finds its rows' per-token
        # scale over the whole K (a few KB from L2 at decode sizes) and quantizes its x tiles in registers,
        # exactly as act_quant would (same formula, same rounding): bit-identical to act_quant + this kernel.
        amax = tl.zeros((OUT_M,), dtype=tl.float32)
        nans = tl.zeros((OUT_M,), dtype=tl.float32)
        for kq in range(0, K, BLOCK_K):
            xt = tl.load(x_ptr + offs_m[:, None] * stride_xm + (kq + rk)[None, :] * stride_xk,
                         mask=m_ok[:, None] & (kq + rk < K)[None, :], other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(xt), axis=1))
            if X_LO:  # as act_split: ±Inf too makes the row's scale NaN (and its planes zero)
                nans += tl.sum(tl.where(tl.abs(xt) < float("inf"), 0.0, 1.0), axis=1)
            else:
                nans += tl.sum(tl.where(xt == xt, 0.0, 1.0), axis=1)
        if X_LO:  # split activations inside (as act_split: IEEE division)
            qscale = tl.maximum(tl.math.div_rn(amax, QMAX), MIN_S)
        else:
            qscale = tl.maximum(amax / QMAX, MIN_S)
        bad = nans > 0
        qscale = tl.where(bad, float("nan"), qscale)
        qinv = reciprocal(qscale)
    ACC: tl.constexpr = tl.int32 if (A8 and not FP8) else tl.float32
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    # X_LO (split activations from act_split, int8 planes for int8 W, e4m3 planes for fp8 W): x holds the
    # hi plane, x + stride_xlo the lo plane
    acc_lo = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_u_lo = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:  # K a multiple of BLOCK_K: no K mask
            x_mask = xm_ok[:, None]
            w_mask = n_ok[:, None]
        else:
            k_ok = rk < k_hi - k0
            x_mask = xm_ok[:, None] & k_ok[None, :]
            w_mask = n_ok[:, None] & k_ok[None, :]
        x, w = _load_tiles(x_ptrs, w_ptrs, x_mask, w_mask, A8 and not QX, FP8_AS_U8)
        if QX and X_LO:  # x = s·(256·hi + lo), as act_split
            x, x_lo = split_planes(tl.where(bad[:, None], 0.0, x.to(tl.float32)), qinv[:, None], QMAX)
        elif QX:
            x = _quantize(x.to(tl.float32), qinv[:, None], QMAX, FP8, HAND_ROUND)
            if FP8:
                x = x.to(tl.float8e4nv, bitcast=True)
        acc = _mma(x, w, acc, A8, FP8, DOT)
        if X_LO and not STACK:
            if not QX:
                x_lo = tl.load(x_ptrs + stride_xlo, mask=x_mask, other=0.0)
                if FP8_AS_U8:
                    x_lo = x_lo.to(tl.float8e4nv, bitcast=True)
            acc_lo = _mma(x_lo, w, acc_lo, A8, FP8, DOT)
        if GATED:
            u = tl.load(u_ptrs, mask=w_mask, other=0.0)
            if FP8_AS_U8:
                u = u.to(tl.float8e4nv, bitcast=True)
            acc_u = _mma(x, u, acc_u, A8, FP8, DOT)
            if X_LO and not STACK:
                acc_u_lo = _mma(x_lo, u, acc_u_lo, A8, FP8, DOT)
            u_ptrs += BLOCK_K * stride_uk
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    if STACK:  # the same sums as below, rows [0, OUT_M) · 256 (1 for fp8) + rows [OUT_M, 2·OUT_M) (/16 for fp8)
        acc = _unstack(acc, OUT_M, BLOCK_N, FP8)
        if GATED:
            acc_u = _unstack(acc_u, OUT_M, BLOCK_N, FP8)
    elif X_LO and FP8:  # x·w = hi·w + (lo·w)/16 (lowbit.split_activation_fp8), fp32 sums
        acc = acc + acc_lo * (1.0 / FP8_LO)
        acc_u = acc_u + acc_u_lo * (1.0 / FP8_LO)
    elif X_LO:  # x·w = 256·(hi·w) + lo·w; the int32 sums combined in fp32 (24 bits: below bf16's rounding)
        acc = acc.to(tl.float32) * 256.0 + acc_lo.to(tl.float32)
        acc_u = acc_u.to(tl.float32) * 256.0 + acc_u_lo.to(tl.float32)
    live = OUT_M * BLOCK_N
    if SPLIT_K > 1:
        acc, acc_u, live = splitk_reduce(acc, acc_u, part_ptr, count_ptr, pid, pid_k, SPLIT_K, GATED,
                                         OUT_M, BLOCK_N)
    if QX:
        xs = qscale[:, None]
    elif A8:
        xs = tl.load(xs_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
    else:
        xs = tl.zeros((OUT_M, 1), dtype=tl.float32)  # unused
    y = tile_epilogue(acc, acc_u, xs, offs_n, n_ok, ws_ptr, b_ptr, su_ptr, bu_ptr, u_row0, GATED, A8, HAS_BIAS, ACT)
    out_mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K > 1:  # only the program that finished the tile stores it
        tile = tl.arange(0, OUT_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        out_mask = out_mask & (tile < live)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _w8_gemm_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, u_row0,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn, stride_xlo,
    GATED: tl.constexpr, A8: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    DOT: tl.constexpr, FP8_AS_U8: tl.constexpr, SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    X_LO: tl.constexpr, QX: tl.constexpr = False, QMAX: tl.constexpr = 127.0, MIN_S: tl.constexpr = 1e-12,
    HAND_ROUND: tl.constexpr = False, STACK: tl.constexpr = False, OUT_M: tl.constexpr = 16,
):
    w8_tile(tl.program_id(0), tl.program_id(1), x_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr,
            part_ptr, count_ptr, M, N, K, K_PER_SPLIT, u_row0, stride_xm, stride_xk, stride_wn, stride_wk, stride_un,
            stride_uk, stride_ym, stride_yn, stride_xlo, GATED, A8, FP8, HAS_BIAS, ACT, DOT, FP8_AS_U8, SPLIT_K,
            EVEN_K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, X_LO, QX, QMAX, MIN_S, HAND_ROUND, STACK, OUT_M)


# STACK candidates (both split planes in one tile) offered to the tuner at M <= 128: one >= 64-row wgmma per weight
# tile where two dots of BLOCK_M rows ran (at M <= 32 mostly padding rows, or 16/32-row mma.sync, which for e4m3
# converts on sm_90). H200, fourteenth session (`bash .ci/h200_next.sh fourteenth1`, Llama block, graph µs, off ->
# on, M = 17 / 32 / 64): fp8 W8A16 81.2 / 81.8 / 80.0 -> 77.2 / 77.7 / 77.8, int8 74.9 / 75.6 / 84.0 -> 75.0 / 75.3 /
# 78.0 (at M <= 32 the int8 loop runs at the weight-stream rate either way). w8_gemm.STACK = False leaves them out.
STACK = True


def _split_fit(bm: int, bn: int, bk: int, stages: int, warps: int, gated: bool,
               stack: bool = False) -> tuple[int, int, int]:
    """(bn, stages, warps) for split activations: two x planes per stage and two accumulators per weight
    (four when gated). At most 128 accumulator registers per thread and ~220 KB of shared memory: an sm_90
    compile of the gated 64x128 tile with 4 warps spills (144 STL), and 128x128 x 4 stages asks for 256 KB.
    ``stack``: bm rows hold both planes (bm / 2 tokens), so one accumulator per weight and bm x rows."""
    acc = (2 if gated else 1) * (1 if stack else 2)
    x_rows = bm if stack else 2 * bm
    while acc * bm * bn // (32 * warps) > 128:
        if warps < 8:
            warps = 8
        else:
            bn //= 2
    while stages > 2 and stages * (x_rows + (2 if gated else 1) * bn) * bk > 220 * 1024:
        stages -= 1
    return bn, stages, warps


def _candidates(M: int, N: int, K: int, gated: bool, a8: bool, split: bool = False,
                quantize_x: bool = False) -> list[dict]:
    """First entry: the heuristic default for this M (used untuned with FUSED_TUNE=0). ``quantize_x``: x's
    tile stays in its float dtype (2 bytes) in shared memory, so deep pipelines are cut to fit."""
    bk = 128 if a8 else 64
    if M <= 64:
        c = [(32, 128, 128, 4, 4), (16, 128, 128, 4, 4), (64, 128, bk, 4, 4), (32, 64, 128, 4, 4)]
    elif M <= 256:
        c = [(64, 128, bk, 4, 4), (128, 128, bk, 4, 8), (64, 256, bk, 3, 8), (128, 64, bk, 4, 4)]
        if not a8:  # the widened weight tile goes through registers: deeper K tiles, fewer warps per tile
            c += [(128, 64, 128, 3, 8), (64, 64, 128, 4, 4), (128, 32, 128, 4, 4)]
        # Memory-bound here (weights streamed once): ncu on the H200 showed the M=128 gate/up picks at one CTA
        # per SM (164 KB smem) in 1.7 waves, DRAM 59%. Shallower pipelines fit 2-4 CTAs per SM, so the whole
        # grid is resident at once (one wave) with as many weight bytes in flight.
        c += [(128, 64, 128, 3, 8), (64, 128, 128, 2, 4), (128, 64, 128, 2, 4), (64, 128, 128, 3, 4)]
        # (a 128 x 256 W8A8 tile with split-K up to 8 was offered here in the thirty-ninth session: ~88 MB from L2 per
        # down call instead of ~176; on the H200 it lost, fp8 down at M=128 45.9 vs 33.9 µs for the 128 x 64 split-4
        # pick, int8 48.8 vs 34.5; L2 bytes do not rank these tiles: the W8A16 split down pick, under ncu, waits at
        # CTA barriers at 12% occupancy with L2 at 69%)
    else:
        c = [(128, 256, bk, 3, 8), (128, 128, bk, 4, 8), (64, 256, bk, 3, 8), (128, 128, bk, 3, 4),
             (128, 64, bk, 4, 4)]
        if a8:  # 2 CTAs per SM (<= 113 KB of shared memory): one CTA's epilogue overlaps the other's loop
            c += [(128, 128, 64, 4, 8), (128, 256, 64, 3, 8), (128, 64, 128, 3, 8)]
    out = []
    stacked = []
    if split and STACK and M <= 128:
        # both planes in one tile (STACK): 64 rows = 32 tokens x 2 planes, one wgmma-sized dot per weight tile
        # where two dots of >= 64 rows (mostly padding rows at M <= 32) ran before; 128-row tiles from M=33
        # (at M=128 the stacked 128x64 down tile won, fifteenth session: block int8 W8A16 116.2 -> 114.1 µs,
        # fp8 111.4 -> 108.5)
        stacked = ([(64, 128, 128, 4, 4), (64, 64, 128, 4, 4), (64, 128, 128, 3, 4)] if M <= 64 else []) + (
            [(128, 128, 128, 3, 8), (128, 64, 128, 4, 4)] if M > 32 else []) + (
            # 128 tokens' planes in one tile (thirty-ninth session, H200, FUSED_RETUNE=w8_gemm at M=128): the gated
            # 256 x 64 tile won (int8 70.85 -> 68.58 µs, fp8 65.95 -> 64.11; shipped); for the down projection, whose
            # 128-row pick reads ~352 MB from L2 per call, the 256-row tiles lost (int8 48.6 vs 40.3 µs): it waits at
            # CTA barriers at 12% occupancy (ncu), L2 bytes are not its limit
            [(256, 64, 128, 4, 8), (256, 128, 128, 3, 8)] if M > 64 else [])
        # (forty-first session, H200, `bash .ci/h200_next.sh deep128` at f1fa86c: BLOCK_K 64 tiles with 8 stages, the
        # same shared memory as the 4-stage BLOCK_K 128 ones with 7/8 of the ring in flight, lost at M=128 in every
        # family: int8 gated 83.0 vs 68.5 µs, down 51.5 vs 40.1; fp8 71.5 vs 64.4, 50.5 vs 38.2. Twice the K steps
        # cost more than the deeper ring hides)
        # (fortieth session, H200, `bash .ci/h200_next.sh occ128` at 7a6823c: a 2-stage 256 x 32 gated tile and a
        # 2-stage 128 x 64 one, for 2+ CTAs per SM, lost at M=128: int8 gated 110.2 vs 68.3 µs, down 70.2 vs 47.1; the
        # stages, not the occupancy, hide these loops' waits; with them the stacked cuda test hit a misaligned address
        # at M=100)
    for i, (bm, bn, k, stages, warps) in enumerate(c + stacked):
        stack = i >= len(c)
        if split:
            bn, stages, warps = _split_fit(bm, bn, k, stages, warps, gated, stack)
        else:
            if gated and bm * bn > 128 * 128:
                bn //= 2  # two accumulators
            xb = 2 if (quantize_x or not a8) else 1  # x's bytes per element in shared memory
            while stages > 2 and stages * (xb * bm + (2 if gated else 1) * bn) * k > 220 * 1024:
                stages -= 1  # the H200 gives a CTA 227 KB (a 128x128x128 gated quantize_x tile x 4 = 256 KB)
        base = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=k, GROUP_M=8, num_stages=stages, num_warps=warps)
        if stack:
            base["STACK"] = True
        # too few tiles to fill 132 SMs (a down projection at M <= 256): split K as well
        tiles = cdiv(M, bm // 2 if stack else bm) * cdiv(N, bn)
        splits = [1]
        while tiles * splits[-1] < 264 and K // (2 * splits[-1]) >= 4 * k and splits[-1] < 8:
            splits.append(2 * splits[-1])
        for s in dict.fromkeys([splits[-1]] + splits[-2:-1] + [1]):  # the one that fills the GPU first
            out.append(dict(base, SPLIT_K=s))
    return list({tuple(sorted(d.items())): d for d in out}.values())


def w8_gemm(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
            act: str = "none", gated: bool = False, x_scale: torch.Tensor | None = None,
            out_dtype: torch.dtype | None = None, config: dict | None = None,
            out: torch.Tensor | None = None, up: tuple | None = None, x_split: bool = False,
            quantize_x: bool = False) -> torch.Tensor:
    """Launch on 2-D x [M, K]. W8A8 when ``x_scale`` [M] is given (x then int8 / e4m3 from act_quant).
    Gated with ``up`` = (qweight, scale, bias) of the up projection: qweight is the gate, output [M, R].
    ``x_split``: x is act_split's [2, M, K] planes: int8 for int8 W (x·Wᵀ = 256·(hi·Wᵀ) + lo·Wᵀ), e4m3 for
    fp8 W (x·Wᵀ = hi·Wᵀ + (lo·Wᵀ)/16).
    ``quantize_x``: W8A8 with x in its float dtype, quantized per token inside the kernel (one launch; for
    small M, where every program re-reads its rows to find the scale); with ``x_split`` too, x (float) is
    split into the two int8 planes inside the kernel, as act_split would."""
    planes = x if (x_split and not quantize_x) else None
    if x_split:
        if quantize_x and qweight.dtype != torch.int8:
            raise ValueError("x_split with quantize_x (planes made inside) needs int8 weights")
        if planes is not None and (x_scale is None or planes.dim() != 3 or planes.shape[0] != 2
                                   or planes.dtype != qweight.dtype):
            raise ValueError("x_split needs act_split's [2, M, K] planes of the weights' dtype (int8 planes for "
                             f"int8 weights, e4m3 for fp8) and their scale; got {planes.dtype} "
                             f"{tuple(planes.shape)} planes for {qweight.dtype} weights")
        if planes is not None:
            x = planes[0]
    M, K = x.shape
    assert qweight.shape[1] == K, (x.shape, qweight.shape)
    a8 = x_scale is not None or quantize_x
    fp8 = qweight.dtype == torch.float8_e4m3fn
    N, wu, su, bu, u_row0 = up_operands(qweight, wscale, bias, gated, up)
    out_dtype = out_dtype or x.dtype
    y = check_out(out, (M, N), out_dtype, x.device) if out is not None else empty((M, N), device=x.device, dtype=out_dtype)
    if M == 0:
        return y
    # fp8 goes in natively on the GPU (TMA-friendly loads straight into the tensor-core pipeline); the
    # interpreter cannot do masked fp8 loads, so there it is passed as uint8 and bitcast
    as_u8 = fp8 and INTERPRET
    w = qweight.view(torch.uint8) if as_u8 else qweight
    wu = w if up is None else (wu.view(torch.uint8) if as_u8 else wu)
    xk = x.view(torch.uint8) if (a8 and as_u8 and not quantize_x) else x

    tma = a8 and planes is None and not quantize_x
    explicit = config is not None  # a caller's config (else the tuner's pick)

    def launch(cfg):
        if cfg.get("TMA"):  # the persistent TMA tiles (fused.kernels.w8a8_tma, large M)
            from fused.kernels import w8a8_tma

            if not tma:
                raise ValueError(f"w8_gemm: a TMA config needs W8A8 operands (x quantized, no planes): {cfg}")
            if not w8a8_tma.tma_ok(xk, w, wu):
                if explicit:
                    raise ValueError(f"w8_gemm: a TMA config needs operands TMA can read (16-byte rows): {cfg}")
                # a tuned TMA pick met operands it cannot read (an unaligned view): the same tile by pointers
                w8a8_tma.warn_pointer_form(cfg)
                return launch({k: v for k, v in cfg.items() if k != "TMA"})
            return w8a8_tma.launch(xk, x_scale, w, wscale, bias, wu, su, bu, y, M, N, K, u_row0, gated, fp8, act,
                                   as_u8, cfg)
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        stack = cfg.get("STACK", False)
        if stack and planes is None:
            raise ValueError(f"w8_gemm: a STACK config needs act_split's planes (x_split, not quantize_x): {cfg}")
        out_m = bm // 2 if stack else bm  # output rows per tile
        tiles = cdiv(M, out_m) * cdiv(N, bn)
        k_per, split, part, count = plan_split(x.device, K, cfg.get("SPLIT_K", 1), bk, tiles, out_m * bn, gated, y)
        launch_kernel(_w8_gemm_kernel, (tiles, split),
            xk, x_scale if x_scale is not None else wscale, w, wscale, bias if bias is not None else wscale,
            wu, su, bu if bu is not None else su, y, part, count,
            M, N, K, k_per, u_row0,
            xk.stride(0), xk.stride(1), w.stride(0), w.stride(1), wu.stride(0), wu.stride(1), y.stride(0), y.stride(1),
            planes.stride(0) if planes is not None else 0,
            GATED=gated, A8=a8, FP8=fp8, HAS_BIAS=bias is not None, ACT=act,
            DOT=dot_mode(x.dtype) if not a8 else "native", FP8_AS_U8=as_u8, SPLIT_K=split, EVEN_K=K % bk == 0,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
            X_LO=x_split, QX=quantize_x, QMAX=float(SPLIT_QMAX) if x_split else (448.0 if fp8 else 127.0),
            MIN_S=MIN_SCALE, HAND_ROUND=INTERPRET, STACK=stack, OUT_M=out_m,
            num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
        )

    if config is None:
        if INTERPRET:
            cands = lambda: [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)]  # noqa: E731
        else:
            def cands():
                out = _candidates(M, N, K, gated, a8, x_split, quantize_x)
                if tma:
                    from fused.kernels import w8a8_tma

                    if w8a8_tma.tma_ok(xk, w, wu):
                        out += w8a8_tma.candidates(M, N, K, gated)
                return out
        key = (m_bucket(M), N, K, gated, a8, qweight.dtype) + (("split",) if x_split else ()) + (
            ("qx",) if quantize_x else ())
        config = pick("w8_gemm", key, cands, launch)
    launch(config)
    return y
