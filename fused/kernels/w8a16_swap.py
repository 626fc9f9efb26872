"""W8A16 GEMM for large M with the product transposed: yᵀ = W · xᵀ, so the 8-bit weight tile, widened in registers,
is the tensor cores' register operand and the bf16/fp16 activations stream through shared memory untouched.

y = epilogue(x · Wᵀ) as in fused.kernels.w8_gemm (per-channel scale, bias, activation; gated: act(gate) ⊙ up, the up
rows at ``u_row0`` of the stacked weight or in tensors of their own), for x [M, K] bf16/fp16 and W [R, K] int8 or
float8 e4m3. Reference: fused.reference.linear_ref / gated_ref (weight-only).

Why: Hopper's wgmma reads operand A from registers or shared memory but B only from shared memory. w8_gemm's mixed
form (x · Wᵀ) makes the widened weight B, so every K step stores the widened tile to shared memory and waits for the
previous step's wgmmas to finish before it may overwrite it (sm_90 PTX with triton 3.6: `wgmma.wait_group 0` in the
loop, plus STS / BAR): the tensor cores idle while the next tile widens. That form runs at about half of a 16-bit
GEMM's rate, which is why W8A16 at M >= dispatch.WIDEN_MIN_M widens the whole weight first (~130 µs of memory traffic
per Llama block at M=1024). Here the widened tile goes from registers into wgmma directly (A in registers, checked in
the PTX: no shared-memory store of it, `wgmma.wait_group 3`: wgmmas stay in flight while the next tile widens; sm_90
loop ~220 instructions per thread and K step against ~1000 cycles of MMA work). A swapped form was tried in the first
session inside w8_gemm (same candidates as the unswapped tiles, small-M tiles) and lost; this kernel is sized for the
large-M tiles (up to 256 tokens per tile) and is timed per shape against the widening routes (dispatch.W8A16_SWAP).

Tiles: each program owns BLOCK_N weight rows × BLOCK_M tokens, in grouped order over the weight tiles (GROUP_N weight
tiles walk the token tiles together, so a weight tile is read from memory about once while x stays in L2). Below
M=1024 the candidates add split-K (fused.kernels.splitk: partials summed in a fixed order by the program that finishes
the tile), since a few token tiles leave most SMs idle on a long K (the down projection at M=128: 32-64 tiles);
there the kernel competes with split activations (dispatch._swap_route). Gated: two accumulators, or IL tiles (one
accumulator whose rows interleave gate and up by 8, so the gated layer runs the down's tile sizes).

Measured (H200, twenty-ninth session, `.ci/swap_probe.py`, graph µs, int8; fp8 within 2%): right everywhere, slower
than the shipped routes everywhere, so the route is off. Llama down M=1024 212.8 vs widen+cuBLAS 204.8-211.6 (8192:
1801 vs 1453); gate/up M=1024 two accumulators 661 / IL 533-542 vs 440-467 (ncu: the IL grid idles at CTA barriers,
tensor pipe 48% against the down's 66%); M=128 against split activations gate/up 91.3 vs 74.6, down 51.0 vs 46.4.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, check_out, sm_count, up_operands
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.splitk import plan_split, splitk_reduce
from fused.kernels.tuning import m_bucket, pick
from fused.kernels.w8_gemm import grouped_tile


@triton.jit
def _widened(w, x, FP8_AS_U8: tl.constexpr, DOT: tl.constexpr):
    """The weight tile in the dot's operand dtype (exact: every int8 and e4m3 value is a bf16 and an fp16 value)."""
    if FP8_AS_U8:  # interpreter only: fp8 loaded as uint8
        w = w.to(tl.float8e4nv, bitcast=True)
    if DOT == "fp32":  # the interpreter (through fp32: it casts int8 -> bf16 wrongly)
        return w.to(tl.float32)
    return w.to(x.dtype)


@triton.jit
def _w8a16_swap_kernel(
    x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr, M, N, K, K_PER_SPLIT, u_row0,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
    GATED: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, DOT: tl.constexpr, FP8_AS_U8: tl.constexpr,
    EVEN_K: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr, IL: tl.constexpr, NUM_PROGS: tl.constexpr = 0,
):
    # NUM_PROGS > 0 (no split-K): a persistent grid, each program looping over tiles with the K loop flattened into
    # the tile loop (Triton's persistent matmul), so the next tile's loads start under this tile's epilogue. Why:
    # ncu of the IL gate/up at M=1024 (twenty-ninth session) found its 896 tiles, one CTA per SM, idling at CTA
    # barriers (tensor pipe 48%) where the down's 128 tiles in one wave reached 66% with the same loop
    if NUM_PROGS > 0:
        OUT_N: tl.constexpr = BLOCK_N // 2 if IL else BLOCK_N
        tiles = tl.cdiv(N, OUT_N) * tl.cdiv(M, BLOCK_M)
        for tile_id in tl.range(tl.program_id(0), tiles, NUM_PROGS, flatten=True):
            _swap_tile(tile_id, 0, x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr,
                       M, N, K, K_PER_SPLIT, u_row0, stride_xm, stride_xk, stride_wn, stride_wk, stride_un,
                       stride_uk, stride_ym, stride_yn, GATED, HAS_BIAS, ACT, DOT, FP8_AS_U8, EVEN_K, 1, BLOCK_N,
                       BLOCK_M, BLOCK_K, GROUP_N, IL)
    else:
        _swap_tile(tl.program_id(0), tl.program_id(1), x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr,
                   part_ptr, count_ptr, M, N, K, K_PER_SPLIT, u_row0, stride_xm, stride_xk, stride_wn, stride_wk,
                   stride_un, stride_uk, stride_ym, stride_yn, GATED, HAS_BIAS, ACT, DOT, FP8_AS_U8, EVEN_K, SPLIT_K,
                   BLOCK_N, BLOCK_M, BLOCK_K, GROUP_N, IL)


@triton.jit
def _swap_tile(
    tile_id, pid_k, x_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    K_PER_SPLIT, u_row0, stride_xm, stride_xk, stride_wn, stride_wk, stride_un, stride_uk, stride_ym, stride_yn,
    GATED: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, DOT: tl.constexpr, FP8_AS_U8: tl.constexpr,
    EVEN_K: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr, IL: tl.constexpr,
):
    """One output tile (``tile_id``, grouped order) and K split ``pid_k`` (SPLIT_K > 1 where the tiles alone leave
    SMs idle: small M, long K)."""
    # IL (gated): one accumulator whose rows interleave gate and up, 8 gate rows then the same outputs' 8 up rows in
    # every 16 (a wgmma thread holds rows g and g+8 of each 16: a gate value and its up value); BLOCK_N rows give
    # BLOCK_N / 2 outputs
    OUT_N: tl.constexpr = BLOCK_N // 2 if IL else BLOCK_N
    pid_n, pid_m = grouped_tile(tile_id, N, M, OUT_N, BLOCK_M, GROUP_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # tokens: the accumulator's columns
    k_lo = pid_k * K_PER_SPLIT  # a multiple of BLOCK_K
    rk = k_lo + tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    if IL:
        r = tl.arange(0, BLOCK_N)
        is_up = (r // 8) % 2 == 1
        offs_n = pid_n * OUT_N + (r // 16) * 8 + r % 8  # each accumulator row's output
        n_ok = offs_n < N
        rows = tl.where(is_up, wu_ptr + (u_row0 + offs_n) * stride_un, w_ptr + offs_n * stride_wn)
        w_ptrs = rows[:, None] + rk[None, :] * stride_wk  # the launcher checks both strides along K agree
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows: the accumulator's rows
        n_ok = offs_n < N
        w_ptrs = w_ptr + offs_n[:, None] * stride_wn + rk[None, :] * stride_wk
        u_ptrs = wu_ptr + (u_row0 + offs_n)[:, None] * stride_un + rk[None, :] * stride_uk  # gated, two accumulators
    xt_ptrs = x_ptr + offs_m[None, :] * stride_xm + rk[:, None] * stride_xk  # xᵀ tile [BLOCK_K, BLOCK_M]
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_M) if GATED and not IL else (1, 1), dtype=tl.float32)
    for k in range(0, tl.cdiv(tl.minimum(K_PER_SPLIT, K - k_lo), BLOCK_K)):
        if EVEN_K:
            w_mask = n_ok[:, None]
            x_mask = m_ok[None, :]
        else:
            k_ok = rk < K - k * BLOCK_K
            w_mask = n_ok[:, None] & k_ok[None, :]
            x_mask = m_ok[None, :] & k_ok[:, None]
        xt = tl.load(xt_ptrs, mask=x_mask, other=0.0)
        w = tl.load(w_ptrs, mask=w_mask, other=0.0)  # a float other: int 0 cannot be cast to fp8 on triton 3.6
        if DOT == "fp32":
            acc = tl.dot(_widened(w, xt, FP8_AS_U8, DOT), xt.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(_widened(w, xt, FP8_AS_U8, DOT), xt, acc)
        if GATED and not IL:
            wu = tl.load(u_ptrs, mask=w_mask, other=0.0)
            if DOT == "fp32":
                acc_u = tl.dot(_widened(wu, xt, FP8_AS_U8, DOT), xt.to(tl.float32), acc_u, input_precision="ieee")
            else:
                acc_u = tl.dot(_widened(wu, xt, FP8_AS_U8, DOT), xt, acc_u)
            u_ptrs += BLOCK_K * stride_uk
        w_ptrs += BLOCK_K * stride_wk
        xt_ptrs += BLOCK_K * stride_xk

    live = 1
    if SPLIT_K > 1:  # the program that finishes the tile sums the partials in a fixed order (fused.kernels.splitk)
        acc, acc_u, live = splitk_reduce(acc, acc_u, part_ptr, count_ptr, tile_id, pid_k, SPLIT_K, GATED and not IL,
                                         BLOCK_N, BLOCK_M)  # live: 0 but for the program that finished the tile
    if IL:
        # the epilogue in the transposed layout (per-row channel scale and bias), in w8_gemm.tile_epilogue's order of
        # operations; then each output's gate and up rows paired (registers of one thread) and the product stored
        s_row = tl.where(is_up, su_ptr + u_row0 + offs_n, ws_ptr + offs_n)
        y = acc * tl.load(s_row, mask=n_ok, other=0.0)[:, None]
        if HAS_BIAS:
            b_row = tl.where(is_up, bu_ptr + u_row0 + offs_n, b_ptr + offs_n)
            y += tl.load(b_row, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        g, u = tl.split(tl.permute(tl.reshape(y, (BLOCK_N // 16, 2, 8, BLOCK_M)), (0, 2, 3, 1)))
        h = tl.reshape(activation(g, ACT) * u, (OUT_N, BLOCK_M))
        offs_o = pid_n * OUT_N + tl.arange(0, OUT_N)
        out = tl.trans(h.to(y_ptr.dtype.element_ty))  # [BLOCK_M, OUT_N]
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_o[None, :] * stride_yn, out,
                 mask=m_ok[:, None] & (offs_o < N)[None, :] & (tl.zeros((BLOCK_M, OUT_N), tl.int32) < live))
        return
    # the epilogue in the transposed layout (per-row channel scale and bias), in w8_gemm.tile_epilogue's order of
    # operations; only the finished tile, in the output dtype, is transposed for the store
    out_mask = m_ok[:, None] & n_ok[None, :] & (tl.zeros((BLOCK_M, BLOCK_N), tl.int32) < live)
    y = acc * tl.load(ws_ptr + offs_n, mask=n_ok, other=0.0)[:, None]
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    y = activation(y, ACT)
    if GATED:
        u = acc_u * tl.load(su_ptr + u_row0 + offs_n, mask=n_ok, other=0.0)[:, None]
        if HAS_BIAS:
            u += tl.load(bu_ptr + u_row0 + offs_n, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        y = y * u
    out = tl.trans(y.to(y_ptr.dtype.element_ty))  # [BLOCK_M, BLOCK_N]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, out, mask=out_mask)


def _candidates(M: int, N: int, K: int, gated: bool) -> list[dict]:
    """Large M: big tiles, no split. Below dispatch.WIDEN_MIN_M: tiles of 64 or 128 tokens and weight rows, with
    split-K where the tiles alone would leave most of the 132 SMs idle (the down projection at M=128: 32-64 tiles).
    The accumulators take BLOCK_N·BLOCK_M·(2 if gated) fp32 values over the program's threads (<= 128 registers a
    thread); 8 warps are two warpgroups, each owning 64 weight rows of the tile or half its tokens."""
    if M >= 1024:
        # gated: IL tiles (one accumulator, the down's tiles; measured first) before two-accumulator ones, which
        # lost by ~50% at M=1024 / 8192 on the H200 (register-bound to 64-128 token tiles)
        tiles = ([(128, 256, 64, 3, 8, True), (128, 256, 64, 4, 8, True), (256, 128, 64, 3, 8, True),
                  (128, 128, 64, 4, 8, True), (128, 128, 64, 3, 8, False)] if gated else
                 [(128, 256, 64, 3, 8, False), (128, 256, 64, 4, 8, False), (128, 128, 64, 4, 8, False),
                  (256, 128, 64, 3, 8, False), (128, 256, 128, 3, 8, False), (64, 256, 64, 4, 4, False)])
        out = [dict(BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, GROUP_N=8, SPLIT_K=1, num_stages=st, num_warps=wp, IL=il)
               for bn, bm, bk, st, wp, il in tiles]
        # the first two again as persistent grids (the tile loop flattened with the K loop; twenty-ninth session)
        return out + [dict(c, PERSIST=True) for c in out[:2]]
    out = []
    for bn, bm, bk, st, wp in [(64, 64, 128, 4, 4), (64, 128, 128, 3, 4), (128, 64, 128, 3, 8), (128, 128, 64, 3, 8),
                               (64, 128, 64, 4, 4)]:
        if bm > max(64, M):  # no tile wider than M
            continue
        for il in ([True, False] if gated else [False]):
            if not il and gated and bn * bm > 64 * 128:  # two accumulators
                continue
            tiles = -(-N // (bn // 2 if il else bn)) * -(-M // bm)
            for split in sorted({1, min(8, max(1, 132 // tiles)), min(16, max(1, 264 // tiles))}):
                if split == 1 or K // split >= 4 * bk:
                    out.append(dict(BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, GROUP_N=8, SPLIT_K=split, num_stages=st,
                                    num_warps=wp, IL=il))
    return out


def w8a16_swap(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
               act: str = "none", gated: bool = False, config: dict | None = None, out: torch.Tensor | None = None,
               up: tuple | None = None) -> torch.Tensor:
    """2-D x [M, K] bf16/fp16 (any strides), W [R, K] int8 / float8_e4m3fn -> y [M, N] in x's dtype (gated: N = R/2,
    or ``up`` = (qweight, scale, bias) of the up projection, see fused.kernels.up_operands)."""
    if x.dim() != 2 or qweight.dim() != 2 or qweight.shape[1] != x.shape[1]:
        raise ValueError(f"w8a16_swap: x [M, K] and W [R, K] expected, got {tuple(x.shape)} and {tuple(qweight.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"w8a16_swap: bf16 or fp16 activations expected (the 16-bit tensor cores), got {x.dtype}")
    if qweight.dtype not in (torch.int8, torch.float8_e4m3fn):
        raise TypeError(f"w8a16_swap: int8 or float8_e4m3fn weights expected, got {qweight.dtype}")
    M, K = x.shape
    N, wu, su, bu, u_row0 = up_operands(qweight, wscale, bias, gated, up)
    y = check_out(out, (M, N), x.dtype, x.device) if out is not None else empty((M, N), device=x.device,
                                                                                dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    as_u8 = qweight.dtype == torch.float8_e4m3fn and INTERPRET  # masked fp8 loads fail in the interpreter
    w = qweight.view(torch.uint8) if as_u8 else qweight
    wu = w if up is None else (wu.view(torch.uint8) if as_u8 else wu)

    il_ok = gated and wu.stride(1) == w.stride(1)  # IL tiles read gate and up rows with one K stride

    def launch(cfg):
        bn, bm, bk = cfg["BLOCK_N"], cfg["BLOCK_M"], cfg["BLOCK_K"]
        il = cfg.get("IL", False)
        if il and not il_ok:
            raise ValueError("w8a16_swap: IL tiles need a gated launch whose gate and up weights share a K stride")
        tiles = cdiv(N, bn // 2 if il else bn) * cdiv(M, bm)
        k_per, split, part, count = plan_split(x.device, K, cfg.get("SPLIT_K", 1), bk, tiles, bn * bm,
                                               gated and not il, y)
        progs = 0
        if cfg.get("PERSIST") and split == 1:  # the interpreter: two programs, so tiles are strided
            progs = max(1, min(tiles, sm_count(x.device) if x.is_cuda else 2))
        launch_kernel(_w8a16_swap_kernel, (progs or tiles, split),
                      x, w, wscale, bias if bias is not None else wscale, wu, su, bu if bu is not None else su, y,
                      part, count, M, N, K, k_per, u_row0, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                      wu.stride(0), wu.stride(1), y.stride(0), y.stride(1), GATED=gated, HAS_BIAS=bias is not None,
                      ACT=act, DOT="fp32" if INTERPRET else "native", FP8_AS_U8=as_u8, EVEN_K=K % bk == 0,
                      SPLIT_K=split, BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, GROUP_N=cfg["GROUP_N"], IL=il,
                      NUM_PROGS=progs, num_stages=cfg["num_stages"], num_warps=cfg["num_warps"])

    if config is None:
        if INTERPRET:
            cands = lambda: [dict(BLOCK_N=16, BLOCK_M=16, BLOCK_K=32, GROUP_N=2, num_stages=1, num_warps=4)]  # noqa
        else:
            cands = lambda: [c for c in _candidates(M, N, K, gated) if il_ok or not c.get("IL")]  # noqa: E731
        config = pick("w8a16_swap", (m_bucket(M), N, K, gated, qweight.dtype, x.dtype), cands, launch)
    launch(config)
    return y
