"""Small-M (decode) weight-only kernel: y = epilogue(x · dequant(W)ᵀ) for M <= 64 (the dispatch uses it up to
fused.dispatch.GEMV_MAX_M, 16 by default), split over K.

x [M, K] bf16/fp16/fp32 (any strides); W [R, K] int8, or float8 e4m3 passed as uint8 (bitcast in
registers); s_w [R] fp32; optional bias [R]. Linear: R = N outputs. Gated: rows [0, H) are the gate,
[H, 2H) the up projection, and y = act(x·W_gᵀ + b_g) ⊙ (x·W_uᵀ + b_u) [M, H]; or (``up=``) W [H, K] is the
gate and the up projection comes in tensors of its own (fused.kernels.up_operands).
Reference: fused.reference.linear_ref / gated_ref with dynamic=False.

Decode is memory-bound: the weight is read once, in [BLOCK_N, BLOCK_K] tiles contiguous along K (wide
loads). Tall-K weights (the down projection) need more programs than N / BLOCK_N to fill 132 SMs, so K is
split SPLIT_K ways. Split-K without atomics on the data: each program stores its fp32 partial tile, bumps
a per-tile counter, and the program that arrives last sums the SPLIT_K partials in a fixed order and runs
the epilogue (scale, bias, activation, gate) — one launch, and bit-identical results from run to run.
The last program also resets the counter, so the workspace needs no memset between calls.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from fused.kernels import (GEMV_STAGES, INTERPRET, W_EVICT, cdiv, check_out, dot_mode, next_pow2, sm_count,
                           up_operands)
from fused.kernels.epilogue import activation, dot_8bit
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.splitk import buffers, splitk_reduce
from fused.kernels.tuning import m_bucket, pick

INTERPRET_C: tl.constexpr = tl.constexpr(INTERPRET)


@triton.jit
def prefetch_l2(p):
    """prefetch.global.L2 of each address in p (a hint: no result, no fault; the mma kernels use it too)."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0", "=r,l", [p], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _prefetch_tile(w_ptr, rows, R_END, K, k0, stride_wn, stride_wk, BLOCK_K: tl.constexpr):
    """prefetch.global.L2 of the weight tile [rows, k0:k0 + BLOCK_K]: one address per 128-byte line (8-bit weights),
    clamped inside the weight; nothing under the interpreter (inline PTX)."""
    LINES: tl.constexpr = BLOCK_K // 128 if BLOCK_K >= 128 else 1
    if not INTERPRET_C:
        cols = tl.minimum(k0 + 128 * tl.arange(0, LINES), K - 1)
        r = tl.minimum(rows, R_END - 1)
        prefetch_l2(w_ptr + r[:, None].to(tl.int64) * stride_wn + cols[None, :] * stride_wk)


@triton.jit
def _partial(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi,
             stride_xm, stride_xk, stride_wn, stride_wk,
             W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             DOT: tl.constexpr, CVT: tl.constexpr, PFD: tl.constexpr = 0):
    """fp32 [BLOCK_M, BLOCK_N] = x[offs_m, k_lo:k_hi] · W[row0 + offs_n, k_lo:k_hi]ᵀ (integer/fp8 W unscaled).
    Masks compare with K (specialized on divisibility by 16: the loads stay 16 bytes wide); a split's tiles
    never cross k_hi, which is K or a multiple of BLOCK_K. PFD > 0: each step first prefetches into L2 the tile PFD
    steps ahead (DRAM bytes in flight without registers or shared memory; what took sparse24_mma's layers 1-2 µs
    faster as a load's L2 prefetch size, twenty-third session)."""
    rows = row0 + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if PFD > 0:
            _prefetch_tile(w_ptr, rows, R_END, K, k0 + PFD * BLOCK_K, stride_wn, stride_wk, BLOCK_K)
        acc = _step(acc, k0, x_ptr, w_ptr, offs_m, rows, M, R_END, K, stride_xm, stride_xk, stride_wn, stride_wk,
                    W_FP8, BLOCK_M, BLOCK_K, DOT, CVT)
    return acc


@triton.jit
def _partial_staged(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi,
                    stride_xm, stride_xk, stride_wn, stride_wk,
                    W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    DOT: tl.constexpr, CVT: tl.constexpr, STAGES: tl.constexpr):
    """_partial with the loop software-pipelined by Triton (STAGES > 1): the x and weight tiles stream through
    shared memory (cp.async), STAGES - 1 steps ahead, without holding registers. A separate loop: the plain one
    must stay a Python range (its dot form is pipelined by the launch's num_stages; see NOTES on its exact form)."""
    rows = row0 + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=STAGES):
        acc = _step(acc, k0, x_ptr, w_ptr, offs_m, rows, M, R_END, K, stride_xm, stride_xk, stride_wn, stride_wk,
                    W_FP8, BLOCK_M, BLOCK_K, DOT, CVT)
    return acc


@triton.jit
def _step(acc, k0, x_ptr, w_ptr, offs_m, rows, M, R_END, K, stride_xm, stride_xk, stride_wn, stride_wk,
          W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr, CVT: tl.constexpr):
    """One K step of _partial: the masks are built here, inside the loop (see NOTES: hoisting them cost 50%)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    k_ok = offs_k < K
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
    w = tl.load(w_ptr + rows[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                mask=(rows[:, None] < R_END) & k_ok[None, :], other=0, eviction_policy=W_EVICT)
    return dot_8bit(acc, x, w, W_FP8, BLOCK_M, DOT, CVT)


@triton.jit
def _partial_prefetch(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi,
                      stride_xm, stride_xk, stride_wn, stride_wk,
                      W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      DOT: tl.constexpr, CVT: tl.constexpr):
    """_partial with the next weight tile loaded before this one is used (two tiles in flight)."""
    rows = row0 + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_k0 = k_lo + tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + rows[:, None] * stride_wn + offs_k0[None, :] * stride_wk,
                mask=(rows[:, None] < R_END) & (offs_k0 < K)[None, :], other=0, eviction_policy=W_EVICT)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        w_next = w
        if k0 + BLOCK_K < k_hi:  # not past the split's end (a uniform branch: the loads stay wide)
            nxt = offs_k + BLOCK_K
            w_next = tl.load(w_ptr + rows[:, None] * stride_wn + nxt[None, :] * stride_wk,
                             mask=(rows[:, None] < R_END) & (nxt < K)[None, :], other=0, eviction_policy=W_EVICT)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (offs_k < K)[None, :], other=0.0)
        acc = dot_8bit(acc, x, w, W_FP8, BLOCK_M, DOT, CVT)
        w = w_next
    return acc


@triton.jit
def _partial_k(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi, stride_xm, stride_xk, stride_wn, stride_wk,
               W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               DOT: tl.constexpr, CVT: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr,
               PFD: tl.constexpr = 0):
    if STAGES > 1:
        acc = _partial_staged(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi, stride_xm, stride_xk,
                              stride_wn, stride_wk, W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, STAGES)
    elif PREFETCH:
        acc = _partial_prefetch(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi, stride_xm, stride_xk,
                                stride_wn, stride_wk, W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT)
    else:
        acc = _partial(x_ptr, w_ptr, offs_m, offs_n, row0, M, R_END, K, k_lo, k_hi, stride_xm, stride_xk,
                       stride_wn, stride_wk, W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, PFD)
    return acc


@triton.jit
def _partial_pair(x_ptr, w_ptr, wu_ptr, offs_m, offs_n, u_row0, M, N, K, k_lo, k_hi,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk,
                  W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  DOT: tl.constexpr, CVT: tl.constexpr):
    """Gate and up partials in one K loop: both weight tiles are loaded per step (twice the bytes in
    flight of two loops, and x read once)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rows_u = u_row0 + offs_n
    for k0 in range(k_lo, k_hi, BLOCK_K):  # masks built in the loop, as in _partial (see NOTES: hoisting)
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < K
        w = tl.load(w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :] * stride_wk,
                    mask=(offs_n[:, None] < N) & k_ok[None, :], other=0, eviction_policy=W_EVICT)
        u = tl.load(wu_ptr + rows_u[:, None] * stride_un + offs_k[None, :] * stride_uk,
                    mask=(offs_n[:, None] < N) & k_ok[None, :], other=0, eviction_policy=W_EVICT)
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & k_ok[None, :], other=0.0)
        acc = dot_8bit(acc, x, w, W_FP8, BLOCK_M, DOT, CVT)
        acc_u = dot_8bit(acc_u, x, u, W_FP8, BLOCK_M, DOT, CVT)
    return acc, acc_u


@triton.jit
def _w8a16_gemv_kernel(
    x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, u_row0, TILES,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
    GATED: tl.constexpr, W_FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT: tl.constexpr, CVT: tl.constexpr, JOINT: tl.constexpr, PREFETCH: tl.constexpr, PERSISTENT: tl.constexpr,
    STAGES: tl.constexpr = 1, PFD: tl.constexpr = 0,
):
    if PERSISTENT:
        # a fixed grid (a few programs per SM) walks the (tile, split) items: no partial last wave
        for item in range(tl.program_id(0), TILES * SPLIT_K, tl.num_programs(0)):
            _gemv_item(item % TILES, item // TILES, x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr,
                       part_ptr, count_ptr, M, N, K, K_PER_SPLIT, u_row0,
                       stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
                       GATED, W_FP8, HAS_BIAS, ACT, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, JOINT, PREFETCH,
                       STAGES, PFD)
    else:
        _gemv_item(tl.program_id(0), tl.program_id(1), x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr,
                   part_ptr, count_ptr, M, N, K, K_PER_SPLIT, u_row0,
                   stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
                   GATED, W_FP8, HAS_BIAS, ACT, SPLIT_K, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, JOINT, PREFETCH, STAGES,
                   PFD)


@triton.jit
def _gemv_item(
    pid_n, pid_k, x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, u_row0,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
    GATED: tl.constexpr, W_FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT: tl.constexpr, CVT: tl.constexpr, JOINT: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr = 1,
    PFD: tl.constexpr = 0,
):
    """One (output tile, K split) item: partial dot, split-K finish, epilogue. Returns the split-K `live`."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    if GATED and JOINT:
        acc, acc_u = _partial_pair(x_ptr, w_ptr, wu_ptr, offs_m, offs_n, u_row0, M, N, K, k_lo, k_hi,
                                   stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk,
                                   W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT)
    else:
        acc = _partial_k(x_ptr, w_ptr, offs_m, offs_n, 0, M, N, K, k_lo, k_hi, stride_xm, stride_xk,
                         stride_wn, stride_wk, W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, PREFETCH, STAGES, PFD)
        if GATED:
            acc_u = _partial_k(x_ptr, wu_ptr, offs_m, offs_n, u_row0, M, u_row0 + N, K, k_lo, k_hi, stride_xm,
                               stride_xk, stride_un, stride_uk, W_FP8, BLOCK_M, BLOCK_N, BLOCK_K, DOT, CVT, PREFETCH,
                               STAGES, PFD)
        else:
            acc_u = acc

    tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    # `tile < live` masks the epilogue: all of it for the program that finishes the tile, none otherwise
    live = BLOCK_M * BLOCK_N
    if SPLIT_K > 1:
        acc, acc_u, live = splitk_reduce(acc, acc_u, part_ptr, count_ptr, pid_n, pid_k, SPLIT_K, GATED,
                                         BLOCK_M, BLOCK_N)

    n_ok = offs_n < N
    y = acc * tl.load(ws_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y = activation(y, ACT)
    if GATED:
        u = acc_u * tl.load(su_ptr + u_row0 + offs_n, mask=n_ok, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(bu_ptr + u_row0 + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        y = y * u
    out_mask = (offs_m[:, None] < M) & n_ok[None, :] & (tile < live)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=out_mask)
    return live  # > 0 where this program stored the tile (fused.kernels.decode_chain publishes it)


MAX_M = 64
# CVT="prmt" candidates (epilogue.int8_to_f32_prmt) for int8 weights at BLOCK_M=1 (w8a16_gemv.PRMT = False drops them).
# The gated 32x512 loop on sm_90: 745 -> 637 SASS instructions (fp8's: 539). H200, nineteenth session (`bash
# .ci/h200_next.sh prmt`): bit-equal to "magic" on every candidate; the retuner took prmt for both int8 M=1 layers,
# Llama block 64.6 -> 63.4 µs (predicted 63-65)
PRMT = True
# PFD candidates (in-loop L2 prefetch of the weight tiles ahead) at BLOCK_M=1: opt-in (w8a16_gemv.PFD_CANDIDATES = True). Twenty-fourth
# session, H200 tuner, M=1: the best PFD lost to the best other candidate on every Llama layer (int8 gate/up 44.7 vs
# 42.9 µs, down 27.9 vs 25.8; fp8 44.5 vs 41.2, 27.7 vs 25.4)
PFD_CANDIDATES = False
# w8a16_gemv.MMA_CANDIDATES = True: 8-bit weights at M <= 16 with 16-bit x also time act_split + w8_mma (dense decode on mma.sync: no
# per-weight widening in the int8 loop, the weights streamed by cp.async). Twenty-fourth session, H200: right (its
# cuda tests pass) but slower, M=1 int8 gate/up 45.0 vs 42.9 µs, down 28.8 vs 25.8; M=16 53.7 vs 44.5, 86.6 vs 25.8
# (every warp re-reads its K range of x: at M=16 that is as many L2 bytes as the weights). Opt-in
MMA_CANDIDATES = False
# finer M=1 work items against the last wave's imbalance (_fine_candidates); w8a16_gemv.FINE_CANDIDATES = False drops them
FINE_CANDIDATES = True
FINE16 = False


def _block_m(M: int) -> int:
    """The row tile: 1 (broadcast GEMV) at M=1, else the 16-row tensor-core tile, 32 or 64 rows above 16 (rows
    past M are masked; the weight is still read once, so time follows the weight bytes while the MMAs hide)."""
    return 1 if M == 1 else max(16, next_pow2(M))


def _split_for(tiles: int, K: int, bk: int, target: int = 264) -> int:
    """Smallest power-of-two split giving ~2 programs per SM (132 on the H200), K/split >= bk."""
    split = 1
    while tiles * split < target and K // (2 * split) >= bk and split < 16:
        split *= 2
    return split


def _candidates(M: int, N: int, K: int, gated: bool, int8: bool = False) -> list[dict]:
    """First entry: the heuristic default (used untuned with FUSED_TUNE=0). CVT: how int8 becomes
    float ("magic": integer ops, see epilogue.int8_to_f32; "native": the conversion unit; "prmt": fp16 pairs
    by byte permutes, epilogue.int8_to_f32_prmt, offered for int8 weights at BLOCK_M=1)."""
    out = []
    if M == 1:  # the 16-row tensor-core tile with 15 rows masked off competes too
        out += [c for c in _candidates(2, N, K, gated) if c["BLOCK_N"] == 32]
    bm = _block_m(M)
    bks = (256, 512) if bm == 1 else (128, 256)
    for bn in (32, 64):
        for bk in bks:
            if bm >= 16 and bn * bk > 64 * 256:
                continue
            split = _split_for(cdiv(N, bn), K, bk)
            base = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=4, CVT="magic")
            out += [base, dict(base, CVT="native")]
            if bm == 1:  # half the registers per thread for the widened tile: more loads in flight
                out.append(dict(base, num_warps=8))
                if GEMV_STAGES:  # the loop pipelined through shared memory (_partial_staged)
                    out += [dict(base, STAGES=3), dict(base, STAGES=3, num_warps=8)]
            if bm == 1 and int8 and PRMT:  # the cheaper widening (sm_90: 637 instead of 745 SASS instructions per
                # iteration of the gated 32x512 loop; fp8's is 539), prepared in the fifteenth session
                out += [dict(base, CVT="prmt"), dict(base, CVT="prmt", num_warps=8)]
            if bm == 1 and PFD_CANDIDATES:  # the weights 1 / 2 steps ahead prefetched into L2 (_partial's PFD)
                cvt = "prmt" if int8 and PRMT else "magic"
                out += [dict(base, CVT=cvt, num_warps=8, PFD=1), dict(base, CVT=cvt, num_warps=8, PFD=2)]
            # more weight bytes in flight per program: both gated tiles per step, or the next tile early
            if gated:
                out += [dict(base, JOINT=True)] + ([dict(base, JOINT=True, num_warps=8)] if bm == 1 else [])
            out += [dict(base, PREFETCH=True)] + ([dict(base, PREFETCH=True, num_warps=8)] if bm == 1 and not gated else [])
            # a fixed grid of 2 or 4 programs per SM looping over the items (no partial last wave)
            out += [dict(base, PERSISTENT=2), dict(base, PERSISTENT=4)]
    if FINE_CANDIDATES and (bm == 1 or (bm == 16 and FINE16)):
        out += _fine_candidates(bm, N, K, "prmt" if int8 and PRMT and bm == 1 else "magic")
    return out


def _fine_candidates(bm: int, N: int, K: int, cvt: str) -> list[dict]:
    """Items twice as fine at M <= 16 (16-row tiles, or the K split doubled). The Llama gate/up picks had 448 items
    (32- or 64-row tiles, split 1 / 2) on 132 SMs: some SMs run 4, most 3, so the kernel takes ~4/3.4 of an even
    share; 896 items run as 7 / 6.8. H200, twenty-fourth session (`fine`, tuner µs): int8 M=1 gate/up 16x512 41.4
    vs 43.6 (predicted ~39), the pick until the twenty-fifth session's retune under the L2 policy (64x256 split 2
    38.9 vs 40.0); fp8 41.5 vs 41.3 (a tie); down (512 items already) 27.4 vs 25.6, lost;
    at M=16 every fine candidate lost (gate/up 51.8 vs 45.4), so there they are opt-in (w8a16_gemv.FINE16 = True).
    32x512 with the split doubled (896 items too) lost (45.7), 16x256 too (48.3). sm_90 SASS: the 16x512 4-warp
    loop is per thread the 32x512 8-warp one (309 vs 301 instructions, 64 registers, the same loads), so what
    differs is the grain: 896 4-warp programs put at most 28 warps of work on an SM (average 27.2) where 448 8-warp
    ones put 32; the split-doubled form balances as well but pays split-K's partials and ticket. Consistent with
    the imbalance reading, not proven (ncu: `.ci/h200_next.sh ncufine`)."""
    out = []
    shapes = ((16, 512, 4), (16, 256, 4), (32, 512, 8), (32, 256, 8), (64, 256, 8)) if bm == 1 else (
        (16, 256, 4), (16, 128, 4), (32, 256, 4), (32, 128, 4))
    for bn, bk, w in shapes:
        split = _split_for(cdiv(N, bn), K, bk)
        if bn > 16:
            split *= 2  # the same tiles as the regular candidates, each split once more
        if K // split >= bk:
            out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, num_warps=w, CVT=cvt, FINE=True))
    return out


def _cvt(cfg: dict) -> str:
    """The config's CVT for a launch: "prmt" is inline PTX, which the interpreter cannot run; there it becomes
    "magic", which gives the same exact fp32 weights (so the same results)."""
    cvt = cfg.get("CVT", "magic")
    return "magic" if (cvt == "prmt" and INTERPRET) else cvt


def _interpret_config(M, N, K):
    return dict(BLOCK_M=_block_m(M), BLOCK_N=16, BLOCK_K=32, SPLIT_K=2 if K > 32 else 1, num_warps=4,
                CVT="magic")


def w8a16_gemv(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
               act: str = "none", gated: bool = False, config: dict | None = None,
               out: torch.Tensor | None = None, up: tuple | None = None) -> torch.Tensor:
    """Launch on a 2-D x [M <= 64, K]. Returns [M, N] (linear) or [M, R/2] (gated, stacked) in x's dtype;
    with ``up`` = (qweight, scale, bias) of the up projection (gated only), [M, R] with qweight the gate."""
    M, K = x.shape
    assert M <= MAX_M and qweight.shape[1] == K, (x.shape, qweight.shape)
    N, wu, su, bu, u_row0 = up_operands(qweight, wscale, bias, gated, up)
    w_fp8 = qweight.dtype == torch.float8_e4m3fn
    w = qweight.view(torch.uint8) if w_fp8 else qweight
    if w_fp8 and up is not None:
        wu = wu.view(torch.uint8)
    elif up is None:
        wu = w
    y = check_out(out, (M, N), x.dtype, x.device) if out is not None else empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0:
        return y
    mma_ok = (MMA_CANDIDATES and x.is_cuda and up is None and x.dtype in (torch.bfloat16, torch.float16)
              and M <= 16 and K % 128 == 0 and N % 16 == 0 and w.stride(1) == 1 and w.stride(0) % 32 == 0
              and w.data_ptr() % 32 == 0)

    def launch(cfg):
        if cfg.get("MMA"):  # act_split, then the mma kernel (its programs a programmatic dependent where sm_90 has it)
            _launch_mma(cfg, x, qweight, wscale, bias, act, gated, y)
            return
        bm, bn, bk, split = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
        tiles = cdiv(N, bn)
        k_per = cdiv(cdiv(K, split), bk) * bk
        split = cdiv(K, k_per)  # no empty splits
        part, count = buffers(x.device, tiles * split * (2 if gated else 1) * bm * bn, tiles)
        persistent = cfg.get("PERSISTENT", 0)
        grid = (min(tiles * split, persistent * (sm_count(x.device) if x.is_cuda else 4)),) if persistent else (tiles, split)
        launch_kernel(_w8a16_gemv_kernel, grid,
            x, w, wscale, bias if bias is not None else wscale, wu, su, bu if bu is not None else su, y, part, count,
            M, N, K, k_per, u_row0, tiles,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), wu.stride(0), wu.stride(1), y.stride(0), y.stride(1),
            GATED=gated, W_FP8=w_fp8, HAS_BIAS=bias is not None, ACT=act,
            SPLIT_K=split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, DOT=dot_mode(x.dtype), CVT=_cvt(cfg),
            JOINT=gated and cfg.get("JOINT", False), PREFETCH=cfg.get("PREFETCH", False), STAGES=cfg.get("STAGES", 1),
            PERSISTENT=persistent > 0, num_warps=cfg["num_warps"], **({"PFD": cfg["PFD"]} if cfg.get("PFD") else {}),
        )

    if config is None:
        cands = (lambda: [_interpret_config(M, N, K)]) if INTERPRET else (
            lambda: _candidates(M, N, K, gated, int8=not w_fp8) + (_mma_candidates(N, K, gated) if mma_ok else []))
        # the mma candidates' key apart: their picks never reach a call they cannot run
        config = pick("w8a16_gemv", (m_bucket(M), N, K, gated, qweight.dtype) + (("mma",) if mma_ok else ()),
                      cands, launch)
    launch(config)
    return y


def _mma_candidates(N: int, K: int, gated: bool) -> list[dict]:
    from fused.kernels.w8_mma import _candidates as mma_candidates

    return [dict(c, MMA=True) for c in mma_candidates(N, K, gated)]


def _launch_mma(cfg, x, qweight, wscale, bias, act, gated, y):
    from fused.kernels import sparse24_mma as sm
    from fused.kernels.act_split import act_split
    from fused.kernels.w8_mma import w8_mma

    pdl = sm.pdl_ok(x.device)
    q, xs = act_split(x, fp8=qweight.dtype == torch.float8_e4m3fn, pdl=pdl)
    w8_mma(q, xs, qweight, wscale, bias, act, gated, out_dtype=y.dtype, out=y, pdl=pdl,
           config={k: cfg[k] for k in ("W", "SPLIT_K", "STAGES", "num_warps")})
