"""The W8A8 GEMM (int8 / e4m3 x quantized per token, 8-bit weights) as persistent tiles fed by TMA: w8_gemm's
candidate for large M (`w8a8_tma.W8_TMA = True`; built in the seventeenth session, timed in the eighteenth).

Why: at M=8192 the fp8 W8A8 Llama block takes cuBLAS for gate/up (H200, seventeenth session): its bf16 y of
8192 x 28672 (470 MB) is written, then read back by epilogue_quant, ~110 µs of traffic that w8_gemm's fused
epilogue would not pay, but w8_gemm's pointer-load tiles run below cuBLAS's rate there. Triton's persistent
matmul (tutorial 09) streams both operands by TMA into shared memory from one program per SM (the tile loop
flattened with the K loop, so the next tile's copies start under this tile's epilogue). (`warp_specialize=True` on
that loop gave the identical PTX on triton 3.6 for sm_90: no producer warps there, so it is not offered.) Same tile
arithmetic as w8_gemm (w8_gemm._mma, w8_gemm.tile_epilogue, grouped order): int8 products are exact, so int8
outputs equal w8_gemm's with the same tile bit for bit.

TMA needs 16-byte aligned rows: K a multiple of 16 (1-byte operands) and unit stride along K (`tma_ok`).

Measured (H200, eighteenth session, layer alone in a graph, `.ci/diag.py w8tma`), pointer pick -> best TMA tile:
int8 gate/up 233.6 -> 217.9 (M=1024), 1858 -> 1730 (8192); down 92.9 -> 103.8, 808 -> 775; fp8 gate/up 215.9 ->
234.3, 1750 -> 1876; down 89.9 -> 89.5, ~835 -> 717. Gated fp8 tiles lose (cause not measured; 255 registers a thread).
A retune of whole blocks with these candidates took one (fp8 down at 8192) into the shipped H200 table (fused/data/tuned_h200.json).
"""
from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl

from fused.kernels import cdiv, sm_count, strict
from fused.kernels.launch import launch_kernel
from fused.kernels.w8_gemm import _mma, grouped_tile, tile_epilogue

# Offered to the tuner only with w8a8_tma.W8_TMA = True (each candidate costs a compile on first use of a shape); a shipped
# pick with "TMA" runs whatever the switch.
W8_TMA = False
_HAS_DESC = hasattr(tl, "make_tensor_descriptor")


@triton.jit
def _w8a8_tma_kernel(
    x_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, wu_ptr, su_ptr, bu_ptr, y_ptr,
    M, N, K, RW, RU, u_row0, stride_xm, stride_wn, stride_un, stride_ym, stride_yn,
    GATED: tl.constexpr, FP8: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, AS_U8: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_PROGS: tl.constexpr, TMA_Y: tl.constexpr = False,
):
    # descriptors made on the device (launcher-allocated scratch): the launch takes only pointers and ints, so
    # the cached launcher, eager replays and CUDA graphs work as for every other kernel. Rows past M (and the
    # gate tile's rows past N, which are up rows or past the tensor) load as data or zeros and are never stored
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[RW, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    u_desc = tl.make_tensor_descriptor(wu_ptr, shape=[RU, K], strides=[stride_un, 1], block_shape=[BLOCK_N, BLOCK_K])
    if TMA_Y:  # the output tile through shared memory and one TMA store, clipped at M and N
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[stride_ym, 1], block_shape=[BLOCK_M, BLOCK_N])
    ACC: tl.constexpr = tl.float32 if FP8 else tl.int32
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)  # columns past K load as zeros
    for tile in tl.range(tl.program_id(0), tiles, NUM_PROGS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
        for ki in range(k_tiles):
            x = x_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            w = w_desc.load([pid_n * BLOCK_N, ki * BLOCK_K])
            if AS_U8:  # the interpreter: e4m3 bits travel as uint8
                x = x.to(tl.float8e4nv, bitcast=True)
                w = w.to(tl.float8e4nv, bitcast=True)
            acc = _mma(x, w, acc, True, FP8, "native")
            if GATED:
                u = u_desc.load([u_row0 + pid_n * BLOCK_N, ki * BLOCK_K])
                if AS_U8:
                    u = u.to(tl.float8e4nv, bitcast=True)
                acc_u = _mma(x, u, acc_u, True, FP8, "native")
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok = offs_m < M
        n_ok = offs_n < N
        xs = tl.load(xs_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
        y = tile_epilogue(acc, acc_u, xs, offs_n, n_ok, ws_ptr, b_ptr, su_ptr, bu_ptr, u_row0, GATED, True,
                          HAS_BIAS, ACT)
        if TMA_Y:
            y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], y.to(y_ptr.dtype.element_ty))
        else:
            tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, y.to(y_ptr.dtype.element_ty),
                     mask=m_ok[:, None] & n_ok[None, :])


def tma_ok(x: torch.Tensor, w: torch.Tensor, wu: torch.Tensor) -> bool:
    """Whether the operands can go through TMA descriptors: 1-byte elements, unit stride along K, row strides and
    base addresses 16-byte aligned."""
    return _HAS_DESC and all(t.element_size() == 1 and _rows_ok(t) for t in (x, w, wu))


def _rows_ok(t: torch.Tensor) -> bool:
    # what a 2-D TMA descriptor needs: unit stride along the last dim, 16-byte aligned rows and base
    return t.stride(-1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


_warned: set = set()


def warn_pointer_form(cfg: dict) -> None:
    """Once per config: a tuned TMA pick met operands TMA cannot read, so w8_gemm runs the same tile by pointers
    (FUSED_STRICT=1: an error instead). Only direct w8_gemm callers can get here: the dispatch hands it act_quant's
    fresh rows and the modules' contiguous weights."""
    why = (f"w8_gemm: the TMA tile {cfg} cannot read these operands (rows not 16-byte aligned); the same tile runs "
           "with pointer loads")
    if strict():
        raise RuntimeError(f"fused strict mode: {why}")
    key = tuple(sorted(cfg.items()))
    if key not in _warned:
        _warned.add(key)
        warnings.warn(why, stacklevel=4)


def candidates(M: int, N: int, K: int, gated: bool) -> list[dict]:
    """Persistent TMA tiles for large M. sm_90 compile, triton 3.6, no spills: gated 128x128 (two accumulators)
    255 registers, 180 / 229 / 131 KB of shared memory for 128x128x128 x 3 / x 4 stages and 128x128x64 x 4; the
    down shape 128x256x128 x 3 205 registers (fp8), 128x128x128 x 4 126."""
    if not W8_TMA or M <= 256 or N == 0 or K < 16 or K % 16:
        return []
    bn = 128 if gated else 256
    out = []
    for bm, n, bk, stages, warps in ((128, bn, 128, 3, 8), (128, 128, 128, 4, 8), (128, bn, 64, 4, 8)):
        out.append(dict(TMA=True, BLOCK_M=bm, BLOCK_N=n, BLOCK_K=bk, GROUP_M=8, num_stages=stages, num_warps=warps,
                        SPLIT_K=1))
    # the first tile again with its output by TMA store (the narrow MLP's stores gained that way on the H200)
    out.append(dict(out[0], TMA_Y=True))
    return list({tuple(sorted(d.items())): d for d in out}.values())


def launch(x, x_scale, w, wscale, bias, wu, su, bu, y, M, N, K, u_row0, gated, fp8, act, as_u8, cfg) -> None:
    """One launch of the persistent kernel with ``cfg`` (a `candidates` entry); operands as w8_gemm prepared them."""
    if M == 0 or N == 0:
        return
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    sms = sm_count(x.device) if x.is_cuda else 2  # the interpreter: two programs, so tiles are strided
    progs = max(1, min(cdiv(M, bm) * cdiv(N, bn), sms))
    launch_kernel(_w8a8_tma_kernel, (progs,),
                  x, x_scale, w, wscale, bias if bias is not None else wscale, wu, su, bu if bu is not None else su, y,
                  M, N, K, w.shape[0], wu.shape[0], u_row0, x.stride(0), w.stride(0), wu.stride(0), y.stride(0),
                  y.stride(1),
                  GATED=gated, FP8=fp8, HAS_BIAS=bias is not None, ACT=act, AS_U8=as_u8, BLOCK_M=bm, BLOCK_N=bn,
                  BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"], NUM_PROGS=progs,
                  # an unaligned y stores the same tile by pointers (the same values; only how they reach memory)
                  TMA_Y=cfg.get("TMA_Y", False) and _rows_ok(y), num_stages=cfg["num_stages"], num_warps=cfg["num_warps"])
