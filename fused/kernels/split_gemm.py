"""W8A16 through split activations in ONE launch: act_split(x) and the split GEMM (w8_gemm with x_split) as one kernel;
and its W8A8 twin (`quant_gemm`): act_quant(x) and the W8A8 GEMM, the same kernel with SPLIT=False.

x [M, K] bf16/fp16 -> y [M, N] (gated: act(x·W_gᵀ) ⊙ (x·W_uᵀ)): the planes and scales act_split makes (int8 planes
for int8 weights, e4m3 planes for fp8), then w8_gemm's tile on them (w8_gemm.w8_tile: the same code, the same
config), so y equals the two launches act_split + w8_gemm(x_split=True) bit for bit. Reference: the same two
launches (and fused.reference's weight-only layer, which they approximate to bf16 rounding).

Why: W8A16 at SPLIT_MIN_M <= M <= SPLIT_MAX_M (17..1023) runs act_split before each GEMM: 4 launches per Llama block
under torch.compile and in eager calls, where issue 3 asks for 2, and each extra kernel costs a launch gap and a ramp
(~2-3 µs on the H200 at M=128). Making the planes inside the GEMM (w8_gemm quantize_x + x_split) was measured and lost
badly: every program re-reads its rows over the whole K for the token's scale (block at M=64 230.6 vs 86.6 µs).

How (fused.kernels.first_layer's pattern): one program per item, each numbered by a ticket taken from an atomic
counter in the order programs start. Tickets [0, M) split one x row each (act_split's program, split_row) and count
themselves done (release); the GEMM items (tile, K split) wait (acquire) until all M rows are done, then run w8_tile.
A program only waits on lower tickets, which programs already running hold: no deadlock, whatever order the hardware
starts programs in. The last program out resets the counters. In Triton's interpreter programs run one after
another and take the tickets in order, so CI runs this code.

quant_gemm is the same for W8A8 layers (per-token int8 / e4m3 x from act_quant's row, quantize_row): act_quant + the
W8A8 GEMM (2 launches per layer above M=16, 4 per block under torch.compile with per-Linear layers) in one.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, next_pow2, up_operands
from fused.kernels.act_quant import quantize_row
from fused.kernels.act_split import split_row
from fused.kernels.launch import empty, launch_kernel, persistent
from fused.kernels.splitk import buffers, wait_count
from fused.kernels.w8_gemm import w8_tile
from lowbit.quant import FP8_SPLIT_QMAX, MIN_SCALE, SPLIT_QMAX

_sync: dict = {}  # device -> int32 [3]: ticket, rows done, programs out
# The row phase's chunk: a kernel's registers are the most any of its phases holds, so the row is split in two passes
# over chunks of this many elements (x read twice, from L2) rather than held whole as act_split holds it: one pass over
# K=14336 took the STACK down tile from 77 to 165 registers (sm_90, triton 3.6), 2048 keeps it near the tile's own
ROW_BLOCK = 2048
# The row phase's chunk loops pipelined by Triton (act_quant.row_absmax's STAGES): the row programs are the GEMM's
# CTAs (8 warps, up to 192 KB of shared memory: one per SM), so a row read one chunk at a time is a chain of
# dependent loads (2 passes x 7 chunks for K=14336). The likely cause of the one-launch form's loss on the H200
# (seventeenth session, NOTES); 1: the plain loops. Not yet timed (`bash .ci/h200_next.sh splitrows`). split_gemm
# only: quant_gemm's fp8 down tile took 72 -> 104 registers with it (triton 3.9).
ROW_STAGES = 3


def _sync_buffer(device) -> torch.Tensor:
    buf = _sync.get(device)
    if buf is None:
        buf = _sync[device] = torch.zeros(3, device=device, dtype=torch.int32)
        persistent((buf,))
    return buf


@triton.jit
def _split_gemm_kernel(
    x_ptr, qb_ptr, q_ptr, xs_ptr, sync_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, u_row0, TILES,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
    GATED: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, FP8_AS_U8: tl.constexpr,
    SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, STACK: tl.constexpr, OUT_M: tl.constexpr,
    QMAX: tl.constexpr, MIN_S: tl.constexpr, HAND_ROUND: tl.constexpr, BLOCK_XK: tl.constexpr,
    XK_ONE_PASS: tl.constexpr, SPLIT: tl.constexpr = True, ROW_STAGES: tl.constexpr = 1,
):
    # qb_ptr / q_ptr: x prepared (SPLIT: the planes [2, M, K], else x quantized [M, K]) as written (int8, or e4m3
    # bits as uint8) and as the GEMM reads it
    t = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    if t < M:  # x row t: act_split's (act_quant's) program
        if SPLIT:
            split_row(x_ptr + t * stride_xm, stride_xk, qb_ptr + t * K, M * K, xs_ptr + t, K, QMAX, MIN_S, BLOCK_XK,
                      XK_ONE_PASS, FP8, HAND_ROUND, ROW_STAGES)
        else:
            quantize_row(x_ptr + t * stride_xm, stride_xk, qb_ptr + t * K, xs_ptr + t, K, QMAX, MIN_S, FP8, BLOCK_XK,
                         XK_ONE_PASS, HAND_ROUND, ROW_STAGES)
        tl.debug_barrier()
        tl.atomic_add(sync_ptr + 1, 1, sem="release")
    else:  # GEMM item (tile, K split) in w8_gemm's grid order, once every row is split
        wait_count(sync_ptr + 1, M)
        i = t - M
        w8_tile(i % TILES, i // TILES, q_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr,
                count_ptr, M, N, K, K_PER_SPLIT, u_row0, K, 1, stride_wn, stride_wk, stride_un, stride_uk, stride_ym,
                stride_yn, M * K, GATED, True, FP8, HAS_BIAS, ACT, "native", FP8_AS_U8, SPLIT_K, EVEN_K, BLOCK_M,
                BLOCK_N, BLOCK_K, GROUP_M, SPLIT, False, QMAX, MIN_S, HAND_ROUND, STACK, OUT_M)
    # leave; the last program out resets the counters for the next call (every other program has taken its ticket
    # and read the rows counter before it counted itself out)
    tl.debug_barrier()
    out = tl.atomic_add(sync_ptr + 2, 1, sem="acq_rel")
    if out == tl.num_programs(0) - 1:
        tl.atomic_xchg(sync_ptr, 0)
        tl.atomic_xchg(sync_ptr + 1, 0)
        tl.atomic_xchg(sync_ptr + 2, 0)


def gemm_config(M: int, N: int, K: int, gated: bool, wdtype: torch.dtype, split: bool = True) -> dict:
    """The config act_split + w8_gemm(x_split) (``split``; else act_quant + the W8A8 w8_gemm) takes for this shape
    (w8_gemm's own tuner, under its own key): the same tile, so the same bits."""
    from fused.kernels import tuning
    from fused.kernels.w8_gemm import _candidates

    if INTERPRET:
        return dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=1, num_warps=4)
    key = (tuning.m_bucket(M), N, K, gated, True, wdtype) + (("split",) if split else ())
    return tuning.known("w8_gemm", key) or _candidates(M, N, K, gated, True, split, False)[0]


def split_gemm(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
               act: str = "none", gated: bool = False, config: dict | None = None,
               up: tuple | None = None) -> torch.Tensor:
    """x [M, K] bf16/fp16, 8-bit weights (int8 or e4m3 [N, K] or stacked gate/up [2N, K], fp32 per-row scales) ->
    y [M, N] in x's dtype, in one launch (W8A16 through split planes); ``up`` = (qweight, scale, bias) of a separate
    up projection (gated). ``config``: a w8_gemm config for split planes (default: the one w8_gemm takes)."""
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"split_gemm: 2-D bf16/fp16 x expected, got {x.dtype} {tuple(x.shape)}")
    return _launch(x, qweight, wscale, bias, act, gated, config, up, True, "split_gemm")


def quant_gemm(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
               act: str = "none", gated: bool = False, config: dict | None = None,
               up: tuple | None = None) -> torch.Tensor:
    """split_gemm's W8A8 twin: x [M, K] float quantized per token (act_quant's rows) and the W8A8 GEMM, in one launch;
    equal to act_quant + w8_gemm(x_scale=...) with the same config, bit for bit."""
    if x.dim() != 2 or not x.dtype.is_floating_point:
        raise ValueError(f"quant_gemm: 2-D float x expected, got {x.dtype} {tuple(x.shape)}")
    return _launch(x, qweight, wscale, bias, act, gated, config, up, False, "quant_gemm")


def _launch(x, qweight, wscale, bias, act, gated, config, up, split: bool, name: str) -> torch.Tensor:
    M, K = x.shape
    if qweight.dtype not in (torch.int8, torch.float8_e4m3fn) or qweight.shape[1] != K:
        raise ValueError(f"{name}: 8-bit weights [N, {K}] expected, got {qweight.dtype} {tuple(qweight.shape)}")
    fp8 = qweight.dtype == torch.float8_e4m3fn
    N, wu, su, bu, u_row0 = up_operands(qweight, wscale, bias, gated, up)
    y = empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    cfg = config or gemm_config(M, N, K, gated, qweight.dtype, split)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    stack = cfg.get("STACK", False)
    out_m = bm // 2 if stack else bm
    tiles = cdiv(M, out_m) * cdiv(N, bn)
    k_per = cdiv(cdiv(K, cfg.get("SPLIT_K", 1)), bk) * bk
    k_splits = cdiv(K, k_per)  # no empty splits (as w8_gemm)
    part, count = (buffers(x.device, tiles * k_splits * (2 if gated else 1) * out_m * bn, tiles) if k_splits > 1
                   else (y, y))
    q = empty((2, M, K) if split else (M, K), device=x.device, dtype=torch.float8_e4m3fn if fp8 else torch.int8)
    xs = empty((M,), device=x.device, dtype=torch.float32)
    # fp8 goes in natively on the GPU; the interpreter cannot do masked fp8 loads (as in w8_gemm)
    as_u8 = fp8 and INTERPRET
    w = qweight.view(torch.uint8) if as_u8 else qweight
    wu = w if up is None else (wu.view(torch.uint8) if as_u8 else wu)
    qb = q.view(torch.uint8) if fp8 else q
    block_xk = min(next_pow2(K), ROW_BLOCK)
    launch_kernel(_split_gemm_kernel, (M + tiles * k_splits,),
        x, qb, qb if as_u8 else q, xs, _sync_buffer(x.device), w, wscale, bias if bias is not None else wscale,
        wu, su, bu if bu is not None else su, y, part, count,
        M, N, K, k_per, u_row0, tiles,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), wu.stride(0), wu.stride(1), y.stride(0), y.stride(1),
        GATED=gated, FP8=fp8, HAS_BIAS=bias is not None, ACT=act, FP8_AS_U8=as_u8, SPLIT_K=k_splits,
        EVEN_K=K % bk == 0, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], STACK=stack, OUT_M=out_m,
        QMAX=(FP8_SPLIT_QMAX if fp8 else float(SPLIT_QMAX)) if split else (448.0 if fp8 else 127.0), MIN_S=MIN_SCALE,
        HAND_ROUND=(fp8 and INTERPRET) if split else INTERPRET, BLOCK_XK=block_xk, XK_ONE_PASS=K <= block_xk,
        SPLIT=split, ROW_STAGES=ROW_STAGES if split else 1, num_stages=cfg["num_stages"], num_warps=cfg["num_warps"],
    )
    return y
