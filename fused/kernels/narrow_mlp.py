"""Narrow fully-fused MLP (tiny-cuda-nn style): every layer of a narrow MLP in ONE launch.

y = f_L(… f_2(f_1(x))),  f_i(h) = act_i(h · W_iᵀ · s_i + b_i),  widths <= 128, depth <= 8 Linear layers.
W_i fp16 / bf16 (s_i = 1) or int8 with a per-output-channel fp32 scale s_i. fp32 accumulation; between
layers the activations are rounded to the input dtype (they feed the next tensor-core dot in that dtype,
as in tiny-cuda-nn). Reference: fused.reference.narrow_mlp_ref.

Design
------
* Each program owns BLOCK_M rows of the batch: it loads its [BLOCK_M, K_in] input tile once (masked
  rows and columns, any strides), runs every layer on it with the activations in registers, and stores
  only the final [BLOCK_M, N_out] tile (masked). HBM traffic is the input and the output, nothing else.
* Weights are packed once at conversion time (fused.narrow.pack_narrow) into ONE buffer: layer i as W_i
  zero-padded to [D_{i+1}, D_i] (row-major, so a program loads it with contiguous, unmasked rows), layers
  back to back; the dot takes its transpose (a K-major wgmma B operand, as in a Linear). D_i = the width
  padded to a power of two >= 16 (tl.dot's minimum). The zero padding
  makes padded hidden units exactly act(0 + 0) and, since the next layer's padded rows are zero too,
  they contribute nothing whatever the activation. One fp32 buffer holds, per layer, [scale(D_{i+1}),
  bias(D_{i+1})] (scale 1 for 16-bit weights, bias 0 when the Linear has none).
* sm_90 fault (H200, 2026-12-01): an 8-layer network of widths 5-17-33-128-16-3-20-31-6 read shared
  memory out of bounds (compute-sanitizer: 512-byte wgmma reads) at BLOCK_M 128 and gave 9.8 dB at
  BLOCK_M 64, with the layers packed N-major ([D_i, D_{i+1}], the first version) and again K-major.
  Triton's wgmma path has a known shared-memory fault on sm_90 when two or more dots of a kernel have
  dimensions of 16 or 32 (IMA or silent corruption; Helion avoids those block sizes, pytorch/helion#1905).
  So a network with any padded width below 64 (``MMA_V2_BELOW``) compiles with Triton's mma.sync path
  (DISABLE_MMA_V3 set while it compiles); networks of widths 64 / 128 keep wgmma.
* The layer loop must be unrolled at compile time (each layer has its own tile shapes), so the
  architecture is passed as constexprs: NUM_LAYERS, the padded widths D0..D8 (unused ones 16) and the
  activations A0..A7 (unused "none"), plus K_IN / N_OUT, the real input / output widths (for the
  masks). The kernel body is a chain of ``if NUM_LAYERS > i:`` blocks, which Triton resolves at compile
  time, so the activation tile may change shape from one layer to the next. One compiled kernel per
  (architecture, dtypes, BLOCK_M, num_warps); the batch size M is a runtime argument.
* Weights are re-read from global memory for every row tile: a full MLP is at most 8·128·128·2 B =
  256 KiB of fp16 (40 KiB for width 64 x 5 layers), so after the first tile they come from L1/L2, while
  the input tile is the only HBM read. With a persistent grid (``programs`` < number of tiles, a grid-
  stride loop over tiles) each SM re-reads the same weights from its L1, or, with ``hoist``, loads
  them once before the loop into shared memory (where the dots read them).
* The input tiles of the hoisted, persistent candidates may come by TMA (``tma``; a descriptor made on the
  device, zero fill past M and past K_IN) into shared memory, 2-5 stages that Triton pipelines across the tile
  loop: the next tiles are in flight while this one runs its layers, without holding registers. On the H200
  these win from about 2**18 rows (width 64 x 5 at 2**21: 195 vs 217 µs).
* int8 weights are widened to the activation dtype in registers (exact: |q| <= 127) and their scale is
  applied to the fp32 accumulator in the epilogue, with the bias and the activation, as in w8_gemm.
"""
from __future__ import annotations


import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, check_out, dot_mode, sm_count
from fused.kernels.epilogue import activation
from fused.kernels.launch import empty, ensure_scratch_allocator, launch_kernel
from fused.kernels.tuning import m_bucket, pick
from fused.narrow_pack import MAX_LAYERS, MAX_WIDTH, MIN_PAD, packed_sizes, padded_width

_HAS_DESC = hasattr(tl, "make_tensor_descriptor")  # older triton: the TMA candidates run pointer loads


@triton.jit
def _weight(w_ptr, K: tl.constexpr, N: tl.constexpr, dt, DOT: tl.constexpr):
    """One layer's W [N, K] (padded at pack time: no mask), widened to the dot's operand dtype."""
    offs_k = tl.arange(0, K)
    offs_n = tl.arange(0, N)
    w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :])
    if DOT == "fp32":
        return w.to(tl.float32)
    return w.to(dt)


@triton.jit
def _relu16(v, RELU16: tl.constexpr):
    """relu on a 16-bit tile, two values per instruction: RELU16 1 max.NaN.f16x2 (fp16), 3 max.NaN.bf16x2
    (bf16); NaN stays NaN, as in torch. relu commutes with the rounding to 16 bits (both keep sign and
    order), so rounding first gives the values of the fp32 relu. 2: tl.where (the interpreter runs no asm)."""
    if RELU16 == 1:
        r = tl.inline_asm_elementwise("max.NaN.f16x2 $0, $1, $2;", "=r,r,r", [v, tl.zeros_like(v)],
                                      dtype=tl.float16, is_pure=True, pack=2)
    elif RELU16 == 3:
        r = tl.inline_asm_elementwise("max.NaN.bf16x2 $0, $1, $2;", "=r,r,r", [v, tl.zeros_like(v)],
                                      dtype=tl.bfloat16, is_pure=True, pack=2)
    else:  # through fp32 (exact): the interpreter keeps bf16 as raw bits, which do not compare as numbers
        f = v.to(tl.float32)
        r = tl.where(f < 0.0, 0.0, f).to(v.dtype)
    return r


@triton.jit
def _layer(h, w, p_ptr, N: tl.constexpr, ACT: tl.constexpr, SCALED: tl.constexpr, DOT: tl.constexpr, dt,
           RELU16: tl.constexpr):
    """act(h · Wᵀ + b) for one layer, rounded to dt: h [BLOCK_M, K] in the activation dtype, w = W [N, K] in
    that dtype. RELU16 (16-bit dt only): a relu runs after the rounding, on packed pairs (_relu16)."""
    offs_n = tl.arange(0, N)
    if DOT == "fp32":
        acc = tl.dot(h.to(tl.float32), tl.trans(w), input_precision="ieee")
    else:
        acc = tl.dot(h, tl.trans(w))
    if SCALED:
        acc = acc * tl.load(p_ptr + offs_n)[None, :]
    acc = acc + tl.load(p_ptr + N + offs_n)[None, :]
    if RELU16 != 0 and ACT == "relu":
        return _relu16(acc.to(dt), RELU16)
    return activation(acc, ACT).to(dt)


@triton.jit
def _load_tile(x_ptr, tile, M, stride_xm, stride_xk, K_IN: tl.constexpr, D0: tl.constexpr, BLOCK_M: tl.constexpr):
    """Rows tile·BLOCK_M … of x, columns padded to D0 with zeros (masked: rows >= M, columns >= K_IN)."""
    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, D0)
    return tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                   mask=(offs_m < M)[:, None] & (offs_k < K_IN)[None, :], other=0.0)


@triton.jit
def _narrow_mlp_kernel(
    x_ptr, w_ptr, p_ptr, y_ptr,
    M,
    stride_xm, stride_xk, stride_ym, stride_yn,
    K_IN: tl.constexpr, N_OUT: tl.constexpr, NUM_LAYERS: tl.constexpr,
    D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr, D3: tl.constexpr, D4: tl.constexpr,
    D5: tl.constexpr, D6: tl.constexpr, D7: tl.constexpr, D8: tl.constexpr,
    A0: tl.constexpr, A1: tl.constexpr, A2: tl.constexpr, A3: tl.constexpr,
    A4: tl.constexpr, A5: tl.constexpr, A6: tl.constexpr, A7: tl.constexpr,
    D_OUT: tl.constexpr, SCALED: tl.constexpr, DOT: tl.constexpr, BLOCK_M: tl.constexpr,
    PREFETCH: tl.constexpr, HOIST: tl.constexpr, RELU16: tl.constexpr = 0, TMA_X: tl.constexpr = False,
    TMA_Y: tl.constexpr = False,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    num_tiles = tl.cdiv(M, BLOCK_M)
    dt = x_ptr.dtype.element_ty
    # weight offsets of each layer in the packed buffer, params likewise
    W1: tl.constexpr = D0 * D1
    W2: tl.constexpr = W1 + D1 * D2
    W3: tl.constexpr = W2 + D2 * D3
    W4: tl.constexpr = W3 + D3 * D4
    W5: tl.constexpr = W4 + D4 * D5
    W6: tl.constexpr = W5 + D5 * D6
    W7: tl.constexpr = W6 + D6 * D7
    P1: tl.constexpr = 2 * D1
    P2: tl.constexpr = P1 + 2 * D2
    P3: tl.constexpr = P2 + 2 * D3
    P4: tl.constexpr = P3 + 2 * D4
    P5: tl.constexpr = P4 + 2 * D5
    P6: tl.constexpr = P5 + 2 * D6
    P7: tl.constexpr = P6 + 2 * D7
    if HOIST:
        # every layer's weights once per program, before the tile loop: Triton keeps them in shared memory
        # (the dots' B operands) for the whole loop, so a persistent program reads them once instead of
        # once per tile (40 KB per 128-row tile at width 64 x 5 layers, 2.5x the tile's own HBM traffic)
        w0 = _weight(w_ptr, D0, D1, dt, DOT)
        if NUM_LAYERS > 1:
            w1 = _weight(w_ptr + W1, D1, D2, dt, DOT)
        if NUM_LAYERS > 2:
            w2 = _weight(w_ptr + W2, D2, D3, dt, DOT)
        if NUM_LAYERS > 3:
            w3 = _weight(w_ptr + W3, D3, D4, dt, DOT)
        if NUM_LAYERS > 4:
            w4 = _weight(w_ptr + W4, D4, D5, dt, DOT)
        if NUM_LAYERS > 5:
            w5 = _weight(w_ptr + W5, D5, D6, dt, DOT)
        if NUM_LAYERS > 6:
            w6 = _weight(w_ptr + W6, D6, D7, dt, DOT)
        if NUM_LAYERS > 7:
            w7 = _weight(w_ptr + W7, D7, D8, dt, DOT)
    if TMA_X:
        # made on the device (128 bytes of launcher-allocated scratch per program), not on the host: the launch
        # then takes only pointers and ints, so the cached launcher and eager replays keep working
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K_IN], strides=[stride_xm, 1], block_shape=[BLOCK_M, D0])
    if TMA_Y:
        # the output tile through shared memory and one TMA store (clipped at M and N_OUT), issued asynchronously:
        # the next tile's layers run while it drains, instead of per-thread stores from the MMA layout
        y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N_OUT], strides=[stride_ym, 1], block_shape=[BLOCK_M, D_OUT])
    if PREFETCH:
        nxt = _load_tile(x_ptr, pid, M, stride_xm, stride_xk, K_IN, D0, BLOCK_M)
    # grid-stride loop: one iteration per program unless the launcher chose a persistent grid
    for tile in range(pid, num_tiles, nprog):
        if PREFETCH:
            # issue the next tile's load before this tile's layers (Triton does not pipeline this loop
            # itself): the HBM read overlaps the dots; past the end it is fully masked
            h = nxt
            nxt = _load_tile(x_ptr, tile + nprog, M, stride_xm, stride_xk, K_IN, D0, BLOCK_M)
        elif TMA_X:
            # a TMA load into shared memory (rows past M and columns past K_IN come back zero): with
            # num_stages >= 2 Triton issues the next tile's copy before this tile's layers, without
            # holding it in registers
            h = x_desc.load([tile * BLOCK_M, 0])
        else:
            h = _load_tile(x_ptr, tile, M, stride_xm, stride_xk, K_IN, D0, BLOCK_M)
        offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
        offs_out = tl.arange(0, D_OUT)
        if not HOIST:
            w0 = _weight(w_ptr, D0, D1, dt, DOT)
        y = _layer(h, w0, p_ptr, D1, A0, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 1:
            if not HOIST:
                w1 = _weight(w_ptr + W1, D1, D2, dt, DOT)
            y = _layer(y, w1, p_ptr + P1, D2, A1, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 2:
            if not HOIST:
                w2 = _weight(w_ptr + W2, D2, D3, dt, DOT)
            y = _layer(y, w2, p_ptr + P2, D3, A2, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 3:
            if not HOIST:
                w3 = _weight(w_ptr + W3, D3, D4, dt, DOT)
            y = _layer(y, w3, p_ptr + P3, D4, A3, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 4:
            if not HOIST:
                w4 = _weight(w_ptr + W4, D4, D5, dt, DOT)
            y = _layer(y, w4, p_ptr + P4, D5, A4, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 5:
            if not HOIST:
                w5 = _weight(w_ptr + W5, D5, D6, dt, DOT)
            y = _layer(y, w5, p_ptr + P5, D6, A5, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 6:
            if not HOIST:
                w6 = _weight(w_ptr + W6, D6, D7, dt, DOT)
            y = _layer(y, w6, p_ptr + P6, D7, A6, SCALED, DOT, dt, RELU16)
        if NUM_LAYERS > 7:
            if not HOIST:
                w7 = _weight(w_ptr + W7, D7, D8, dt, DOT)
            y = _layer(y, w7, p_ptr + P7, D8, A7, SCALED, DOT, dt, RELU16)
        if TMA_Y:
            y_desc.store([tile * BLOCK_M, 0], y.to(y_ptr.dtype.element_ty))
        else:
            tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_out[None, :] * stride_yn,
                     y.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & (offs_out < N_OUT)[None, :])


# ------------------------------------------------------------------------------------------ launching

def candidates(max_width: int, hoist_bytes: int | None = None, tma: bool = True, tma_out: bool = True) -> list[dict]:
    """Configs to time, the heuristic default first: (BLOCK_M, num_warps, num_stages, programs_per_sm,
    prefetch, hoist). ``programs_per_sm`` 0: one program per row tile (the hardware overlaps one program's
    loads with another's dots); k > 0: a persistent grid of k programs per SM looping over tiles, where
    ``prefetch`` loads the next tile before computing this one and ``hoist`` loads the weights once before
    the loop (kept in shared memory: offered when ``hoist_bytes``, their size in 16 bits, plus the input
    tiles fit, see ``weight_smem_bytes``); num_stages 2 lets Triton pipeline the hoisted loop's input loads. BLOCK_M is large so the weights read per tile are amortised
    over many rows. Registers, from ptxas for sm_90, 5 fp16 layers: width 64 (128, 4) 194/thread, (256, 8)
    190, (128, 8) 162, (64, 4) 138, (256, 4) spills; width 128: (128, 8) 220, everything else tried
    spills; width 16 (512, 8) 128."""
    if max_width <= 16:
        t = [(256, 4, 2, 4), (256, 4, 3, 2), (256, 4, 4, 2), (512, 8, 3, 1)]
        c = [(256, 4, 1, 0, 0), (512, 8, 1, 0, 0), (128, 4, 1, 0, 0), (256, 8, 1, 0, 0), (256, 4, 1, 4, 1),
             (512, 8, 1, 2, 1)]
        h = [(256, 4, 1, 4, 0), (256, 4, 2, 4, 0), (512, 8, 1, 2, 1)]
    elif max_width <= 32:
        t = [(256, 4, 2, 3), (128, 4, 2, 4), (256, 4, 3, 2), (128, 4, 3, 3), (128, 4, 4, 2)]
        c = [(256, 4, 1, 0, 0), (128, 4, 1, 0, 0), (512, 8, 1, 0, 0), (256, 8, 1, 0, 0), (256, 4, 1, 4, 1),
             (128, 4, 1, 8, 1), (256, 8, 1, 2, 1)]
        h = [(256, 4, 1, 4, 0), (256, 4, 2, 2, 0), (128, 4, 2, 4, 0), (256, 4, 1, 4, 1)]
    elif max_width <= 64:
        # H200, width 64 x 5, 2**21 rows (eleventh session): `narrowtma2` (explicit configs) (128, 4, 3 stages, 2 per
        # SM) 195.2 µs, bits equal to the pointer-load pick's 216.7; 2 stages 244.3 (2 per SM) / 305.6 (3 per SM).
        # Tuner with device-made descriptors (`eleventh2`): (128, 4, 3, 2) 194.0, (64, 4, 3, 3) 194.3, (128, 8, 3, 2)
        # 194.4, (128, 4, 4, 2) 194.9; best pointer-load config 214.7
        t = [(128, 4, 3, 2), (64, 4, 3, 3), (128, 8, 3, 2), (128, 4, 4, 2), (128, 4, 2, 2), (128, 4, 5, 1),
             (128, 4, 3, 1), (128, 4, 2, 3)]
        c = [(128, 4, 1, 0, 0), (256, 8, 1, 0, 0), (128, 8, 1, 0, 0), (64, 4, 1, 0, 0), (128, 4, 1, 2, 1),
             (128, 4, 1, 2, 0), (256, 8, 1, 1, 1), (128, 8, 1, 2, 1), (64, 4, 1, 4, 1)]
        # hoisted, BM 128 / 4 warps, 1 stage: 142 registers and 57 KB of shared memory (sm_90), so 3 programs
        # fit per SM as for the non-persistent grid, with the weights read once per program (2 stages: 82 KB,
        # only 2 fit)
        h = [(128, 4, 1, 2, 0), (128, 4, 2, 2, 0), (128, 4, 1, 2, 1), (128, 8, 2, 2, 0), (64, 4, 2, 4, 0),
             (128, 4, 3, 1, 0), (128, 4, 1, 3, 0)]
    else:  # width 128: only BLOCK_M 128 with 8 warps compiles without spills
        t = [(64, 4, 2, 1), (64, 8, 2, 1)]
        c = [(128, 8, 1, 0, 0), (128, 8, 1, 1, 1), (128, 8, 1, 1, 0), (128, 8, 2, 0, 0), (64, 8, 1, 0, 0)]
        h = [(128, 8, 1, 1, 0), (128, 8, 2, 1, 0)]
    out = [dict(BLOCK_M=bm, num_warps=w, num_stages=s, programs_per_sm=p, prefetch=bool(f), hoist=False)
           for bm, w, s, p, f in c]
    # Rows in flight per SM bound this kernel (each program runs its layers one after another with no
    # loads in flight): H200, width 64 x 5, 2**21 rows, 2026-12-01: 128 rows x 3 programs (BM 128, 4 warps,
    # 144 registers) 248.7 µs; 64 x 4 (BM 64, 110 registers) 295.6; 128 x 2 (BM 128, 8 warps) 297.9;
    # 256 x 1 357.3. A register cap fits 4 programs of BM 128 (or 2 of BM 256 / 8 warps) per SM, at the cost
    # of a few spills (ptxas, sm_90: maxnreg 128: 33 spill stores, 112: 16)
    if 32 < max_width <= 64:
        out += [dict(BLOCK_M=bm, num_warps=w, num_stages=1, programs_per_sm=0, prefetch=False, hoist=False,
                     maxnreg=r) for bm, w, r in ((128, 4, 128), (128, 4, 112), (256, 8, 128))]
    if hoist_bytes is not None:
        # the hoisted weights plus num_stages input tiles (16-bit, max_width wide: a bound) must fit in
        # shared memory (sm_90: 227 KB) with room for Triton's layout-conversion scratch (sm_90 compiles
        # of width 128 x 5 layers: 196 KB at 1 stage, 262 KB at 2)
        out += [dict(BLOCK_M=bm, num_warps=w, num_stages=s, programs_per_sm=p, prefetch=bool(f), hoist=True)
                for bm, w, s, p, f in h if hoist_bytes + s * bm * max_width * 2 <= SMEM_BUDGET]
    if hoist_bytes is not None and TMA and tma:
        # ncu of the hoisted pick (H200, tenth session, 215 µs): DRAM 49%, 0.42 eligible warps per scheduler,
        # long-scoreboard stalls on the input loads, 3 programs per SM (154 registers). Hoisted, with the
        # input tiles brought by TMA into shared memory and pipelined (num_stages >= 2): the next tile's copy
        # is in flight during this tile's layers, holding no registers, and no layout-conversion scratch.
        # Measured: see TMA.
        tc = [dict(BLOCK_M=bm, num_warps=w, num_stages=s, programs_per_sm=p, prefetch=False, hoist=True, tma=True)
              for bm, w, s, p in t if hoist_bytes + s * bm * max_width * 2 <= SMEM_BUDGET]
        out += tc
        if tma_out:
            # the first three also with the output tile by TMA store (one more tile of shared memory; see TMA_OUT)
            out += [dict(c, tma_out=True) for c in tc[:3] if TMA_OUT and hoist_bytes + (c["num_stages"] + 1)
                    * c["BLOCK_M"] * max_width * 2 <= SMEM_BUDGET]
    return out


SMEM_BUDGET = 200 * 1024

# relu on packed 16-bit pairs after the rounding (_relu16: one max.NaN.f16x2 per two values) instead of a
# compare and a select per fp32 value: sm_90 loop of width 64 x 5 layers, hoisted BM 128 / 4 warps, 1226 -> 839
# instructions per thread and tile, 150 -> 162 registers (triton 3.9 compile; 3 programs per SM fit up to 168).
# H200, tenth session (`bash .ci/h200_next.sh relu16`, one call, same pick): 237.3 -> 215.5 µs at 2**21 rows
# (predicted 195-215). narrow_mlp.RELU16 = False: the fp32 relu.
RELU16 = True


# The TMA candidates above (narrow_mlp.TMA = False: none). H200, eleventh session (width 64 x 5, 2**21 rows): 3 stages,
# 2 programs of 128 rows per SM 195.2 µs against 216.7 for the pointer-load pick in the same call, bit-equal; the
# module call 197.4 (eager 1229.3, compiled 1399.3). Triton pipelines the descriptor loads (the next tiles' copies
# are in flight in shared memory during this tile's layers, holding no registers).
TMA = True
# Output tiles by TMA store (see candidates; narrow_mlp.TMA_OUT = False: none). Thirteenth session, `.ci/diag.py
# narrowtmaout` (width 64 x 5, 2**21, explicit configs, bit-equal to the pointer-store pick): (128 rows, 4 warps,
# 3 stages, 2 per SM) 194.3 -> 162.2 µs, (64, 4, 3, 3) 193.9 -> 166.5, (128, 8, 3, 2) 194.6 -> 172.8. Fourteenth
# session (`bash .ci/h200_next.sh fourteenth2`): the narrow cuda file passed whole (25), and with them offered
# the tuner's top three were the TMA-store configs (161.8 / 165.5 / 172.2 vs 193.2 without); the module call
# 165.1 µs (eager 1244.6, compiled 1416.0). On by default.
TMA_OUT = True


def _relu16_mode(dtype: torch.dtype) -> int:
    """The kernel's RELU16 constexpr for activations of ``dtype`` (0: relu in fp32)."""
    if not RELU16 or dtype not in (torch.float16, torch.bfloat16):
        return 0
    return 2 if INTERPRET else (1 if dtype == torch.float16 else 3)


def weight_smem_bytes(pads) -> int:
    """Shared memory the hoisted weights take: every layer in 16 bits (int8 is widened before the dot)."""
    return 2 * sum(a * b for a, b in zip(pads[:-1], pads[1:]))


# a network with a padded width below this compiles without wgmma (see the module docstring)
MMA_V2_BELOW = 64


def tma_ok(x: torch.Tensor, d0: int) -> bool:
    """x can be read through a TMA descriptor with [BLOCK_M, d0] boxes: 16-bit, unit column stride, 16-byte
    aligned base and row stride (a candidate asking for TMA on another x runs the pointer loads)."""
    es = x.element_size()
    return (x.dtype in (torch.float16, torch.bfloat16) and x.stride(1) == 1 and x.data_ptr() % 16 == 0
            and (x.stride(0) * es) % 16 == 0 and d0 * es >= 16 and _HAS_DESC)


def rows_bucket(M: int) -> int:
    """The tuning key's row bucket: m_bucket's powers of two, continued past its 8192 cap up to 2**24. The pick
    depends on the number of row tiles per SM (at 2**14 rows launch cost dominates, at 2**21 rows in flight do)."""
    b = m_bucket(M)
    while b < M and b < 1 << 24:
        b *= 2
    return b


def _programs(device: torch.device, per_sm: int, tiles: int) -> int:
    if per_sm <= 0 or device.type != "cuda":
        return tiles
    return max(1, min(tiles, per_sm * sm_count(device)))


def narrow_mlp(x: torch.Tensor, weights: torch.Tensor, params: torch.Tensor, dims, acts,
               config: dict | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch on 2-D x [M, dims[0]] (any strides: the kernel loads through them) -> [M, dims[-1]] in x's
    dtype (fp16 / bf16 / fp32). ``dims``: real widths [K_in, N_1, ..., N_L]; ``acts``: one per layer."""
    M, K = x.shape
    L = len(dims) - 1
    if K != dims[0] or len(acts) != L or not 1 <= L <= MAX_LAYERS:
        raise ValueError(f"narrow_mlp: x [{M}, {K}], dims {list(dims)}, acts {list(acts)} do not agree")
    if max(dims) > MAX_WIDTH:
        raise ValueError(f"narrow_mlp: widths must be <= {MAX_WIDTH}, got {list(dims)}")
    nw, np_ = packed_sizes(dims)
    if weights.numel() != nw or params.numel() != np_ or params.dtype != torch.float32:
        raise ValueError(f"narrow_mlp: packed buffers have {weights.numel()} weights / {params.numel()} "
                         f"{params.dtype} params, dims {list(dims)} need {nw} / {np_} float32")
    y = check_out(out, (M, dims[-1]), x.dtype, x.device) if out is not None else empty(
        (M, dims[-1]), device=x.device, dtype=x.dtype)
    if M == 0:
        return y
    pads = [padded_width(d) for d in dims]
    relu16 = _relu16_mode(x.dtype) if "relu" in acts else 0
    D = pads + [MIN_PAD] * (MAX_LAYERS + 1 - len(pads))
    A = list(acts) + ["none"] * (MAX_LAYERS - L)
    # whether a descriptor can take x / y (a TMA config on another x or y loads / stores by pointers; the tuning
    # key tells them apart, so no pick silently runs as something it was not timed as)
    x_tma, y_tma = tma_ok(x, pads[0]), tma_ok(y, pads[-1])

    def launch(cfg):
        tiles = cdiv(M, cfg["BLOCK_M"])
        # "programs" (an absolute grid size; tests use it to run the persistent loop on the CPU) wins
        grid = (min(tiles, cfg.get("programs") or _programs(x.device, cfg.get("programs_per_sm", 0), tiles)),)
        tma = bool(cfg.get("tma")) and x_tma
        tma_y = bool(cfg.get("tma_out")) and y_tma
        if (tma or tma_y) and x.is_cuda:
            ensure_scratch_allocator()
        launch_kernel(_narrow_mlp_kernel, grid,
            x, weights, params, y, M,
            x.stride(0), x.stride(1), y.stride(0), y.stride(1),
            K_IN=dims[0], N_OUT=dims[-1], NUM_LAYERS=L,
            D0=D[0], D1=D[1], D2=D[2], D3=D[3], D4=D[4], D5=D[5], D6=D[6], D7=D[7], D8=D[8],
            A0=A[0], A1=A[1], A2=A[2], A3=A[3], A4=A[4], A5=A[5], A6=A[6], A7=A[7],
            D_OUT=pads[-1], SCALED=weights.dtype == torch.int8, DOT=dot_mode(x.dtype), BLOCK_M=cfg["BLOCK_M"],
            PREFETCH=cfg.get("prefetch", False), HOIST=cfg.get("hoist", False), RELU16=relu16, TMA_X=tma, TMA_Y=tma_y,
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
            **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}),
            compile_env={"DISABLE_MMA_V3": "1"} if min(pads) < MMA_V2_BELOW else None,
        )

    if config is None:
        if INTERPRET:
            cands = lambda: [dict(BLOCK_M=16, num_warps=4, num_stages=1, programs_per_sm=0, prefetch=False)]  # noqa: E731
        else:
            cands = lambda: candidates(max(pads), weight_smem_bytes(pads), x_tma, y_tma)  # noqa: E731
        key = (rows_bucket(M), tuple(dims), tuple(acts), weights.dtype, x.dtype, relu16, x_tma, y_tma)
        config = pick("narrow_mlp", key, cands, launch)
    launch(config)
    return y
