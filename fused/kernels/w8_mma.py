"""Dense 8-bit decode on the tensor cores (M <= 16 tokens): y = epilogue(x · Wᵀ) with `mma.sync` m16n8k32, int8
(s8, int32 accumulators) or e4m3 (fp32 accumulators; native on sm_89+, unlike e4m3 mma.sp on sm_90).

The 8-bit weight goes straight from memory into the MMA's A operand (no per-weight widening, which is most of the
GEMV's instructions: fused.kernels.w8a16_gemv); x arrives as 8-bit planes of the weight's type, act_split's two
(W8A16: x ≈ s·(256·hi + lo) for int8, s·(hi + lo/16) for e4m3) or act_quant's one (W8A8). The B operand's 8
columns are tokens (a column set per plane and token tile of 8) or, with two planes and M <= 4, (token, plane)
pairs: column 2·token + plane, so one mma serves both planes (as PAIRS in fused.kernels.sparse24_mma). A warp's
step is 16 rows x 128 columns (4 mma per column set); within the step the K order is permuted (the same for A and
B) so that each lane's A words are ONE 32-byte run per row: logical (mma m, half h) of lane t is physical word
8t + 2m + h of the step's 32, and the lane's B words are x
words 8t .. 8t+7 of its column's plane. The loop loads the weights as
[32·W, 4] word tiles (one 16-byte run per lane and thread) in a `tl.range` with num_stages: Triton 3.6's pipeliner
streams them through shared memory (cp.async), so the bytes in flight do not sit in registers (3.9 leaves them
plain loads).

Fragments (PTX ISA, mma.m16n8k32 with 8-bit types), lane L = 4g + t:
  A (4 words)   a0: row g, K 4t..4t+3;  a1: row g+8, the same;  a2: row g, K 16+4t..+3;  a3: row g+8, the same
  B (2 words)   b0: column g, K 4t..4t+3;  b1: column g, K 16+4t..+3
  D (4 accumulators)  d0 / d1: row g, columns 2t / 2t+1;  d2 / d3: row g+8, columns 2t / 2t+1
Lanes are the physical ones (%tid.x, fused.kernels.sparse24_mma._thread_ids); the interpreter has no tensor cores:
there _mma_emu forms the warp product from the same lane registers by the rules above (the addressing's oracle).
Split-K and the epilogue as sparse24_mma (deterministic partial sums, token and channel scales, bias, activation,
gate). Reference: fused.reference.linear_ref / gated_ref on the planes' values.
Prepared in the twenty-third session without a GPU: opt-in (w8a16_gemv.MMA_CANDIDATES = True offers it to w8a16_gemv's tuner).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from fused.kernels import INTERPRET, cdiv
from fused.kernels.launch import launch_kernel
from fused.kernels.sparse24_mma import (_byte_value, _words, add_d_frags, check_runs, mma_epilogue, mma_output,
                                       warp_setup, zero_accs)
from fused.kernels.splitk import buffers
from fused.kernels.tuning import m_bucket, pick
from fused.kernels.w8a16_gemv import _split_for

_OPS = "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
_ASM_I8: tl.constexpr = tl.constexpr("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 " + _OPS)
_ASM_F8: tl.constexpr = tl.constexpr("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 " + _OPS)
_CONS: tl.constexpr = tl.constexpr("=r,=r,=r,=r," + ",".join(["r"] * 10))


@triton.jit
def _sbyte(w, i: tl.constexpr, VALUE: tl.constexpr):
    """Byte i of an int32 word as its value: int8 sign-extended, or e4m3 as fp32."""
    return _byte_value((w >> (8 * i)) & 0xFF, VALUE)


@triton.jit
def _mma_emu(c, a0, a1, a2, a3, b0, b1, W: tl.constexpr, VALUE: tl.constexpr):
    """The warp product of one m16n8k32 mma (s8 or e4m3) from the lanes' registers (interpreter only; small
    shapes)."""
    L = tl.arange(0, 32)
    g = L >> 2
    t = L & 3
    kk = tl.arange(0, 32)
    # dense A [W, 16, 32] and B [W, 32, 8] gathered from the lanes by one-hot sums
    rows = tl.arange(0, 16)
    dt: tl.constexpr = tl.int32 if VALUE == "int8" else tl.float32
    A = tl.zeros((W, 16, 32), dtype=dt)
    B = tl.zeros((W, 32, 8), dtype=dt)
    regs = (tl.reshape(a0, (W, 32)), tl.reshape(a1, (W, 32)), tl.reshape(a2, (W, 32)), tl.reshape(a3, (W, 32)))
    for r in tl.static_range(4):
        for i in tl.static_range(4):
            v = _sbyte(regs[r], i, VALUE)                                       # [W, 32] (lanes)
            row = g + 8 * (r & 1)
            col = 4 * t + i + 16 * (r >> 1)
            hit = (row[:, None, None] == rows[None, :, None]) & (col[:, None, None] == kk[None, None, :])  # [32,16,32]
            A += tl.sum(tl.where(hit[None], v[:, :, None, None], 0), axis=1)
    bregs = (tl.reshape(b0, (W, 32)), tl.reshape(b1, (W, 32)))
    nn = tl.arange(0, 8)
    for r in tl.static_range(2):
        for i in tl.static_range(4):
            v = _sbyte(bregs[r], i, VALUE)
            k = 4 * t + i + 16 * r
            hit = (k[:, None, None] == kk[None, :, None]) & (g[:, None, None] == nn[None, None, :])  # [32, 32, 8]
            B += tl.sum(tl.where(hit[None], v[:, :, None, None], 0), axis=1)
    D = tl.sum(A[:, :, :, None] * B[:, None, :, :], axis=2)                      # [W, 16, 8]
    return add_d_frags(c, D, W)


@triton.jit
def _mma(c, a0, a1, a2, a3, b0, b1, W: tl.constexpr, ASM: tl.constexpr, VALUE: tl.constexpr):
    if not ASM:
        r = _mma_emu(c, a0, a1, a2, a3, b0, b1, W, VALUE)
    elif VALUE == "int8":
        r = tl.inline_asm_elementwise(_ASM_I8, _CONS, (a0, a1, a2, a3, b0, b1) + c,
                                      dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)
    else:
        r = tl.inline_asm_elementwise(_ASM_F8, _CONS, (a0, a1, a2, a3, b0, b1) + c,
                                      dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    return r


@triton.jit
def _run8(p, off):
    """Each lane's 8 words at p + off (off: [32·W] word offsets, 32-byte aligned) as two 16-byte tiles [32·W, 4],
    one row per thread (a [32·W, 8] tile was split over two threads per row by Triton 3.9, then converted back)."""
    o = tl.multiple_of(off, 8)
    j = tl.arange(0, 4)[None, :]
    return _words(tl.load(p + o[:, None] + j), 4) + _words(tl.load(p + (o + 4)[:, None] + j), 4)


@triton.jit
def _step4(acc, wg, wg8, xb, ASM: tl.constexpr, W: tl.constexpr, VALUE: tl.constexpr):
    """One 16-row x 128-column step for one B column set: 4 mma; mma m's A words are physical words 2m, 2m+1 of each
    row's run."""
    for m in tl.static_range(4):
        acc = _mma(acc, wg[2 * m], wg8[2 * m], wg[2 * m + 1], wg8[2 * m + 1], xb[2 * m], xb[2 * m + 1], W, ASM,
                   VALUE)
    return acc


@triton.jit
def _step(acc, wg, wg8, xb, NB: tl.constexpr, ASM: tl.constexpr, W: tl.constexpr, VALUE: tl.constexpr):
    """The step for NB column sets (accumulators 4s .. 4s+3 and x runs xb[8s .. 8s+7] for set s)."""
    r = _step4((acc[0], acc[1], acc[2], acc[3]), wg, wg8, xb, ASM, W, VALUE)
    if NB >= 2:
        r = r + _step4((acc[4], acc[5], acc[6], acc[7]), wg, wg8, xb[8:16], ASM, W, VALUE)
    if NB == 4:
        r = r + _step4((acc[8], acc[9], acc[10], acc[11]), wg, wg8, xb[16:24], ASM, W, VALUE)
        r = r + _step4((acc[12], acc[13], acc[14], acc[15]), wg, wg8, xb[24:32], ASM, W, VALUE)
    return r


@triton.jit
def _w8_mma_kernel(
    xq_ptr, xs_ptr, w_ptr, ws_ptr, b_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT, stride_xp, stride_xm, stride_wn, stride_ym, stride_yn,
    PLANES: tl.constexpr, NT: tl.constexpr, PAIRS: tl.constexpr, GATED: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr, SPLIT_K: tl.constexpr, W: tl.constexpr, STAGES: tl.constexpr, ASM: tl.constexpr,
    VALUE: tl.constexpr, PDL: tl.constexpr = False,
):
    """NT token tiles of 8 (M <= 8: 1, else 2); PAIRS (two planes, M <= 4): one column set of (token, plane) pairs,
    else one column set per plane and token tile, plane-major (sparse24_mma's accumulator order)."""
    NB: tl.constexpr = 1 if PAIRS else PLANES * NT
    pid_n, pid_k, tid, g, t, row0, k_lo, k_hi = warp_setup(K, K_PER_SPLIT, W, ASM)
    ww = w_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xw = xq_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    # column g of B: token g // 2 of plane g % 2 (PAIRS) or token 8·tile + g; past M: token M - 1 (never stored)
    xp = stride_xp // 4
    if PAIRS:
        xrow = (g & 1) * xp + tl.minimum(g >> 1, M - 1) * (stride_xm // 4) + 8 * t
    else:
        xrow = tl.minimum(g, M - 1) * (stride_xm // 4) + 8 * t
    xrow1 = tl.minimum(8 + g, M - 1) * (stride_xm // 4) + 8 * t  # the second token tile (NT = 2)
    rg = (row0 + g).to(tl.int64) * (stride_wn // 4) + 8 * t
    rg8 = rg + 8 * (stride_wn // 4)
    gacc = zero_accs(NB, W, VALUE)
    uacc = gacc
    ru = rg + N * (stride_wn // 4)
    ru8 = rg8 + N * (stride_wn // 4)
    for k0 in tl.range(k_lo, k_hi, 128, num_stages=STAGES):
        kw = k0 // 4
        wg = _run8(ww, rg + kw)
        wg8 = _run8(ww, rg8 + kw)
        if GATED:
            ug = _run8(ww, ru + kw)
            ug8 = _run8(ww, ru8 + kw)
        if PDL:  # the planes come from the launch before (act_split / act_quant with pdl_start)
            gdc_wait()
        xb = _run8(xw, xrow + kw)  # the column sets, plane-major
        if NT == 2:
            xb = xb + _run8(xw, xrow1 + kw)
        if NB > NT:  # the lo plane (no PAIRS)
            xb = xb + _run8(xw, xp + xrow + kw)
            if NT == 2:
                xb = xb + _run8(xw, xp + xrow1 + kw)
        gacc = _step(gacc, wg, wg8, xb, NB, ASM, W, VALUE)
        if GATED:
            uacc = _step(uacc, ug, ug8, xb, NB, ASM, W, VALUE)
    if PDL:
        gdc_wait()

    mma_epilogue(gacc, uacc, part_ptr, count_ptr, xs_ptr, ws_ptr, b_ptr, y_ptr, pid_n, pid_k, tid, row0, M, N,
                 stride_ym, stride_yn, NT, PLANES, VALUE, PAIRS, GATED, HAS_BIAS, ACT, SPLIT_K, W, False)


def check_w8_mma_args(xq, xs, w, where="w8_mma"):
    """Why (planes xq, token scales xs, int8 weight w) cannot run on w8_mma, or None."""
    if xq.dim() != 3 or w.dim() != 2:
        return f"{where}: planes [P, M, K] and weight [R, K] expected"
    P, M, K = xq.shape
    if P not in (1, 2) or not 1 <= M <= 16:
        return f"{where}: 1 or 2 planes of M <= 16 tokens expected, got {tuple(xq.shape)}"
    if w.dtype not in (torch.int8, torch.float8_e4m3fn) or xq.dtype != w.dtype:
        return f"{where}: int8 or float8_e4m3fn weight and planes of its dtype expected, got {w.dtype}, {xq.dtype}"
    if K % 128 or w.shape[1] != K or w.shape[0] % 16:
        return f"{where}: K a multiple of 128 and rows of 16, got planes {tuple(xq.shape)}, weight {tuple(w.shape)}"
    return check_runs(where, w, "weight", xq, xs, M, 32)  # each lane's 32-byte runs


def _candidates(N: int, K: int, gated: bool) -> list[dict]:
    """Warps per program (16 rows each), K split, pipeline stages; the first is the heuristic default."""
    s = _split_for(N // 16 * (2 if gated else 1), K, 128, target=4224)
    out = []
    for w, sp, st in ((4, s, 4), (4, s, 3), (1, s, 4), (2, s, 4), (4, s // 2, 4), (4, 2 * s, 3), (4, s, 1)):
        cfg = dict(W=w, SPLIT_K=max(1, min(sp, K // 128)), STAGES=st, num_warps=w)
        if N % (16 * w) == 0 and cfg not in out:
            out.append(cfg)
    return out or [dict(W=1, SPLIT_K=1, STAGES=1, num_warps=1)]


def w8_mma(xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, wscale: torch.Tensor,
           bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
           out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None, out: torch.Tensor | None = None,
           pdl: bool = False) -> torch.Tensor:
    """y [M, N] = epilogue((Σ planes) · Wᵀ) for 8-bit planes xq [P, M <= 16, K] with token scales xs [M] (P = 2
    act_split's (hi, lo), P = 1 act_quant's), w [R, K] of the planes' dtype (int8: x ≈
    s·(256·hi + lo); e4m3: x ≈ s·(hi + lo/16)), wscale [R] fp32; gated: rows [0, N) gate, [N, 2N) up, y = act(g)·u.
    ``pdl``: a programmatic dependent of the launch that made xq (see sparse24_mma)."""
    why = check_w8_mma_args(xq, xs, w)
    if why:
        raise ValueError(why)
    P, M, K = xq.shape
    dev = xq.device
    N, y = mma_output("w8_mma", wscale, w.shape[0], gated, 16, M, out, out_dtype, dev)
    pdl = pdl and not INTERPRET
    value = "int8" if w.dtype == torch.int8 else "fp8"
    nt = 1 if M <= 8 else 2
    pairs = P == 2 and M <= 4
    wv, xv = (w, xq) if value == "int8" else (w.view(torch.uint8), xq.view(torch.uint8))

    def launch(cfg):
        wp, split = cfg["W"], cfg["SPLIT_K"]
        assert N % (16 * wp) == 0, cfg
        k_per = cdiv(cdiv(K, split), 128) * 128
        split = cdiv(K, k_per)
        tiles = N // (16 * wp)
        part, count = buffers(dev, tiles * split * (4 * nt * (2 if gated else 1)) * 32 * wp, tiles)
        launch_kernel(_w8_mma_kernel, (tiles, split), xv, xs, wv, wscale, bias if bias is not None else wscale, y,
                      part, count, M, N, K, k_per, xq.stride(0), xq.stride(1), w.stride(0), y.stride(0), y.stride(1),
                      PLANES=P, NT=nt, PAIRS=pairs, GATED=gated, HAS_BIAS=bias is not None, ACT=act, SPLIT_K=split,
                      W=wp,
                      STAGES=cfg.get("STAGES", 1), ASM=not INTERPRET, num_warps=wp, VALUE=value,
                      **(dict(PDL=True, launch_pdl=True) if pdl else {}))

    if config is None:
        cands = (lambda: [dict(W=2 if N % 32 == 0 else 1, SPLIT_K=2 if K >= 256 else 1, STAGES=1,
                               num_warps=2 if N % 32 == 0 else 1)]) if INTERPRET else (
            lambda: _candidates(N, K, gated))
        config = pick("w8_mma", (m_bucket(M), N, K, gated, P, w.dtype), cands, launch)
    launch(config)
    return y
