"""A W8A8 block's first layer in ONE launch, h handed on quantized: act_quant(x) + the tiled GEMM + act_quant(h).

x [M, K] float -> (hq [rows, N] int8 / e4m3, hs [M] fp32): per-token quantization of x, the 8-bit GEMM with its
epilogue (token and channel scales, bias, activation, gate), then per-token quantization of h, rows past M zero:
the QuantizedAct that fused.dispatch hands to a W8A8 second layer (HANDOFF). Reference: act_quant + w8_gemm
(x_scale) + act_quant(h, rows), which it equals bit for bit (the same formulas in the same order; see the test).

Why one launch: at M=128 the fp8 W8A8 Llama block runs 5 kernels in 75.7 µs on the H200, the first layer three
of them (52.0 µs in its route timing): two of the gaps between kernels go away.

How (after the decode chain, fused.kernels.decode_chain): one program per item, each numbered by a ticket from
an atomic counter in the order programs start. Tickets [0, M) quantize one x row each (act_quant's program); the
GEMM tiles wait until every row is done (acquire) and end with h in x's dtype plus a per-row atomic max of |h| (int32 bits,
NaN left out and flagged apart, as act_quant's absmax drops NaN and counts it); the last tickets quantize one h
row each once every tile is done. A program only waits on lower tickets, which programs already running hold: no
deadlock, whatever order the hardware starts programs in. In the interpreter programs run one after another and
take the tickets in order, so CI runs this code.
The last program out resets the counters and the row statistics for the next call.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, next_pow2, up_operands
from fused.kernels.act_quant import MAX_ONE_PASS, _quantize, quantize_row, reciprocal, token_scale, zero_row
from fused.kernels.launch import empty, launch_kernel, persistent
from fused.kernels.splitk import wait_count
from fused.kernels.w8_gemm import _load_tiles, _mma, grouped_tile, tile_epilogue
from lowbit.quant import MIN_SCALE

_stats: dict = {}  # device -> int32 [4 + 2·rows]: ticket, rows done, tiles done, programs out; |h| max bits, NaN flags


def _stats_buffer(device, M: int) -> torch.Tensor:
    buf = _stats.get(device)
    if buf is None or buf.numel() < 4 + 2 * M:
        new = torch.zeros(max(4 + 2 * M, 4 + 2 * 1024), device=device, dtype=torch.int32)
        persistent((new,), old=(buf,) if buf is not None else None)
        buf = _stats[device] = new
    return buf


@triton.jit
def _gemm_tile(tile, xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, h_ptr, st_ptr,
               M, N, K, u_row0, stride_wn, stride_wk, stride_un, stride_uk,
               GATED: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
               FP8_AS_U8: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    """One h tile from the quantized x (w8_gemm's A8 loop and epilogue, split-K 1), stored in h's dtype; its rows'
    |h| maxima (as stored) and NaN flags go to the row statistics."""
    pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    x_ptrs = xq_ptr + offs_m[:, None] * K + rk[None, :]
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + rk[None, :] * stride_wk
    u_ptrs = wu_ptr + (u_row0 + offs_n)[:, None] * stride_un + rk[None, :] * stride_uk
    ACC: tl.constexpr = tl.float32 if FP8 else tl.int32
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k0 in range(0, K, BLOCK_K):
        k_ok = rk < K - k0
        x, w = _load_tiles(x_ptrs, w_ptrs, m_ok[:, None] & k_ok[None, :], n_ok[:, None] & k_ok[None, :], True,
                           FP8_AS_U8)
        acc = _mma(x, w, acc, True, FP8, "native")
        if GATED:
            u = tl.load(u_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            if FP8_AS_U8:
                u = u.to(tl.float8e4nv, bitcast=True)
            acc_u = _mma(x, u, acc_u, True, FP8, "native")
            u_ptrs += BLOCK_K * stride_uk
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * stride_wk
    xs = tl.load(xs_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
    y = tile_epilogue(acc, acc_u, xs, offs_n, n_ok, ws_ptr, b_ptr, su_ptr, bu_ptr, u_row0, GATED, True, HAS_BIAS, ACT)
    ok = m_ok[:, None] & n_ok[None, :]
    hv = y.to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + offs_m[:, None] * N + offs_n[None, :], hv, mask=ok)
    hf = hv.to(tl.float32)
    nan = hf != hf
    bits = tl.where(ok & ~nan, tl.abs(hf), 0.0).to(tl.int32, bitcast=True)  # order-preserving for |h| >= 0
    tl.atomic_max(st_ptr + offs_m, tl.max(bits, axis=1), mask=m_ok)
    flag = tl.max(tl.where(ok & nan, 1, 0), axis=1)
    tl.atomic_max(st_ptr + M + offs_m, flag, mask=m_ok & (flag > 0))


@triton.jit
def _first_layer_kernel(
    x_ptr, xqb_ptr, xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, h_ptr, hq_ptr, hs_ptr, sync_ptr,
    M, N, K, ROWS, u_row0, stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk,
    GATED: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, QMAX: tl.constexpr,
    MIN_S: tl.constexpr, HAND_ROUND: tl.constexpr, FP8_AS_U8: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    BLOCK_XK: tl.constexpr, XK_ONE_PASS: tl.constexpr, BLOCK_HN: tl.constexpr,
):
    # xqb_ptr / xq_ptr: the quantized x as written (int8, or e4m3 bits as uint8) and as the GEMM reads it (e4m3)
    st_ptr = sync_ptr + 4  # [M] |h| max bits, then [M] NaN flags
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    total = M + tiles + ROWS
    # one item per program, numbered in the order programs start (a ticket, not the program id): an item only
    # waits on lower tickets, whose programs are already running. (A persistent loop over tickets held ~220
    # registers on sm_90 against 128 this way: 1 CTA per SM instead of 2.)
    t = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    if t < total:
        if t < M:  # x row t: act_quant's program
            quantize_row(x_ptr + t * stride_xm, stride_xk, xqb_ptr + t * K, xs_ptr + t, K, QMAX, MIN_S, FP8,
                         BLOCK_XK, XK_ONE_PASS, HAND_ROUND)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + 1, 1, sem="release")
        elif t < M + tiles:
            wait_count(sync_ptr + 1, M)
            _gemm_tile(t - M, xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, h_ptr, st_ptr,
                       M, N, K, u_row0, stride_wn, stride_wk, stride_un, stride_uk,
                       GATED, FP8, HAS_BIAS, ACT, FP8_AS_U8, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)
            tl.debug_barrier()
            tl.atomic_add(sync_ptr + 2, 1, sem="release")
        else:  # h row r quantized with its finished statistics (act_quant(h)'s program), or a zero padding row
            r = t - M - tiles
            if r >= M:
                zero_row(hq_ptr + r * N, N, BLOCK_HN)
            else:
                wait_count(sync_ptr + 2, tiles)
                amax = tl.atomic_add(st_ptr + r, 0, sem="relaxed").to(tl.float32, bitcast=True)
                bad = tl.atomic_add(st_ptr + M + r, 0, sem="relaxed") > 0
                scale = token_scale(amax, bad, QMAX, MIN_S)
                tl.store(hs_ptr + r, scale)
                inv = reciprocal(scale)
                offs = tl.arange(0, BLOCK_HN)
                for n0 in range(0, N, BLOCK_HN):
                    hk = tl.load(h_ptr + r * N + n0 + offs, mask=n0 + offs < N, other=0.0).to(tl.float32)
                    tl.store(hq_ptr + r * N + n0 + offs, _quantize(hk, inv, QMAX, FP8, HAND_ROUND),
                             mask=n0 + offs < N)
    # leave; the last program out resets the counters and the statistics (every ticket is taken and every item
    # finished reading them before its program counted itself out)
    tl.debug_barrier()
    out = tl.atomic_add(sync_ptr + 3, 1, sem="acq_rel")
    if out == tl.num_programs(0) - 1:
        offs = tl.arange(0, 1024)
        for i in range(0, 2 * M, 1024):
            tl.store(st_ptr + i + offs, tl.zeros((1024,), dtype=tl.int32), mask=i + offs < 2 * M)
        for i in range(4):
            tl.atomic_xchg(sync_ptr + i, 0)


def _interpret_config():
    return dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)


def default_config(M: int) -> dict:
    """The H200's M=128 pick of the W8A8 gated GEMM (fused/data/tuned_h200.json): a 128x64x128 tile, 3 stages, 8 warps, 2 CTAs
    per SM."""
    return dict(BLOCK_M=128 if M > 64 else 64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_stages=3, num_warps=8)


def gemm_config(M: int, N: int, K: int, gated: bool, wdtype: torch.dtype) -> dict | None:
    """The tile the W8A8 GEMM (act_quant + w8_gemm) takes for this shape, picked in this process or shipped in the
    tuned table, when this kernel can run it (no split-K, no stacked planes): the same sums in the same order, so
    h equals the three launches' bit for bit, fp8 too; else None."""
    from fused.kernels import tuning

    cfg = tuning.known("w8_gemm", (tuning.m_bucket(M), N, K, gated, True, wdtype))
    if cfg is None or cfg.get("SPLIT_K", 1) != 1 or cfg.get("STACK"):
        return None
    return {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps")}


def first_layer(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
                act: str = "none", gated: bool = False, rows: int | None = None, up: tuple | None = None,
                config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float, W8A8 weights (int8 or e4m3, per-row fp32 scales) -> (hq [rows, N], hs [M]): h =
    epilogue(x·Wᵀ) with x quantized per token, then quantized per token (``rows`` >= M: zero rows after M).
    Gated with ``up`` = (qweight, scale, bias) of the up projection, or stacked gate/up rows as in w8_gemm."""
    M, K = x.shape
    rows = M if rows is None else rows
    if rows < M:
        raise ValueError(f"first_layer: rows={rows} is below the {M} rows of x")
    if qweight.dtype not in (torch.int8, torch.float8_e4m3fn) or qweight.shape[1] != K:
        raise ValueError(f"first_layer: 8-bit weights [N, {K}] expected, got {qweight.dtype} {tuple(qweight.shape)}")
    fp8 = qweight.dtype == torch.float8_e4m3fn
    N, wu, su, bu, u_row0 = up_operands(qweight, wscale, bias, gated, up)
    qdt = torch.float8_e4m3fn if fp8 else torch.int8
    hq = empty((rows, N), device=x.device, dtype=qdt)
    hs = empty((M,), device=x.device, dtype=torch.float32)
    if M == 0:
        (hq.view(torch.uint8) if fp8 else hq).zero_()
        return hq, hs
    xq = empty((M, K), device=x.device, dtype=qdt)
    xs = empty((M,), device=x.device, dtype=torch.float32)
    h = empty((M, N), device=x.device, dtype=x.dtype)
    sync = _stats_buffer(x.device, M)
    cfg = config or (_interpret_config() if INTERPRET else gemm_config(M, N, K, gated, qweight.dtype)
                     or default_config(M))
    # fp8 goes in natively on the GPU; the interpreter cannot do masked fp8 loads (as in w8_gemm)
    as_u8 = fp8 and INTERPRET
    w = qweight.view(torch.uint8) if as_u8 else qweight
    wu = w if up is None else (wu.view(torch.uint8) if as_u8 else wu)
    bits = lambda t: t.view(torch.uint8) if fp8 else t  # noqa: E731 (quantized activations are written as bits)
    grid = (M + cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"]) + rows,)  # one program per item
    block_xk = min(next_pow2(K), MAX_ONE_PASS)
    launch_kernel(_first_layer_kernel, grid,
        x, bits(xq), xq.view(torch.uint8) if as_u8 else xq, xs, w, wscale, bias if bias is not None else wscale,
        wu, su, bu if bu is not None else su, h, bits(hq), hs, sync,
        M, N, K, rows, u_row0, x.stride(0), x.stride(1), w.stride(0), w.stride(1), wu.stride(0), wu.stride(1),
        GATED=gated, FP8=fp8, HAS_BIAS=bias is not None, ACT=act, QMAX=448.0 if fp8 else 127.0, MIN_S=MIN_SCALE,
        HAND_ROUND=INTERPRET, FP8_AS_U8=as_u8, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
        BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"], BLOCK_XK=block_xk, XK_ONE_PASS=K <= block_xk,
        BLOCK_HN=min(next_pow2(N), 4096), num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
    )
    return hq, hs
