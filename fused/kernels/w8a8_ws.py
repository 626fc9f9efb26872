"""W8A8 GEMM for Hopper as a warp-specialized Gluon kernel: y = act(x_q · W_qᵀ · (s_x ⊗ s_w) + b), or the gated form
act(gate) ⊙ up on a stacked gate | up weight; x_q quantized per token (act_quant) to the weights' format, e4m3 or
int8; bf16 or fp16 out.

Why: on the H200 the 8-bit blocks from M=1024 run at the 700 W power cap, so a block's sustained time is its joules
over ~690 W. The energy counter (thirty-fourth session, `.ci/energy_parts.py`) put Triton's gated fp8 GEMM (tl.dot
tiles, every tuner candidate, pointer or TMA loads) at 157-159 mJ per Llama gate/up product at M=1024 and 1229-1240
at 8192, against 132-133 and 1013-1069 for cuBLAS's plain GEMM of the same product (which then needs a SiLU-mul pass):
the down GEMM was even. The layout:

* a 1-warp TMA partition (w8a16_ws._load_partition, persistent: one program per SM) streams x [BLOCK_T tokens,
  BLOCK_K] and W [128 rows, BLOCK_K] tiles (gated: 64 gate rows and the same outputs' 64 up rows) into one ring of
  stages, tile after tile;
* two consumer warpgroups in ping-pong: each owns every other tile of the program (two 64-row accumulators: gate and
  up, or the tile's two row halves), issues yᵀ = W · xᵀ as wgmma with both operands in shared memory (one step's
  groups in flight while the next are issued), and runs its epilogue (s_w along rows, s_x along tokens, bias,
  activation, act(g) · u in registers) while the other consumer's K loop keeps the tensor cores busy. They take
  turns at the ring (`turn` barriers): a consumer a whole tile ahead of the loader would wait on a stage barrier
  whose parity still reads as the phase one ring cycle before and pass before its load (it hung or faulted whenever
  a tile had more K steps than the ring has stages).

COOP (config): 256-row tiles (gated: 128 gate rows and their 128 up rows), each consumer on half of them (gated: 64
gate rows and their up rows), both reading each stage's x tile and releasing the stage together; a quarter less
shared-memory traffic per product (Triton's faster fp8 down GEMM runs 128 x 256 tiles), no ping-pong (a long K makes
the epilogue small). On the H200 (thirty-sixth session) it took 1-4% fewer joules than the ping-pong form on the
Llama shapes (fp8 down at 8192: 509.8 mJ against 526.9, Triton's 505.4; gated route 1640.8 µs against 1681.0), so
dispatch times it beside the ping-pong form in both layers of a W8A8 block (dispatch.W8A8_WS_COOP = False: off).

A first form with both consumers on one 256-token tile and the up values handed over through shared memory spent
160.7 mJ at M=1024 (no better than Triton); this one 142.9 (207.7 µs sustained; 4 stages 144.9), 1087-1252 at 8192
(1 s windows, 4 / 6 stages); the down shape 70.6 against Triton's 66.1 (int8: 66.0 against 69.6, thirty-fifth), so
dispatch offers it to both layers of a W8A8 block as a timed route candidate, and to the per-layer W8A8 routes
(w8a8_ws_pair: gate and up in tensors of their own, torch.compile's gated_pair).

Grouped hand-off (thirty-sixth session): QUANT_OUT quantizes each accumulator's [64 outputs, tokens] tile of y per
token in the epilogue (h in 8 bits and its scales [groups of 64, M]: no bf16 h through memory, no act_quant pass);
X_GROUPS is the GEMM that reads it (_group_consumer): tiles of 128 tokens x 128 outputs, 64 tokens per consumer, each
K group's product from zero, waited for and added times its tokens' scales (TMA-loaded with the stage) into an fp32
sum; one K group a stage (BLOCK_K 64) or two (BLOCK_K 128: two products in flight). Groups of 128 outputs
(``group=128``: the gated COOP consumers trade their per-token absmaxes through shared memory) halve the promotions
per product, as DeepSeek-V3's GEMM. Measured forms were slower than the per-token hand-off (the Llama block at M=1024
477 and 423 µs against 314); these are not yet measured, so dispatch uses them only with dispatch._GROUPED_ENV = 1.

X_SPLIT (forty-first session): W8A16 on act_split's planes interleaved (token t's hi / lo as rows 2t / 2t + 1): one
8-bit GEMM of 2M rows whose accumulator holds a token's two sums in one thread, combined in the epilogue
(w8a16_ws_split). SPLIT_K: K in equal parts, each a work item of the persistent loop; the partials are summed in a
fixed order by the part that finishes last (as fused.kernels.splitk), for shapes with fewer tiles than SMs (the
down projection at M=128); compiled for sm_90 with no spill, opt-in until its cuda tests have run on the H200.

e4m3 products accumulate in fp32 with Hopper's fast accumulation (Triton's sm_90 default, as tl.dot and cuBLAS's
rowwise_fast), int8 ones in int32 (exact). (The first form's int8 build failed in triton 3.6, "WGMMA type or shape is
not supported" for its 256-token instruction; the 128-token one builds.) Gluon kernels do not run in Triton's
interpreter: tested on the GPU (tests/test_w8a8_ws.py, cuda; .ci/ws8_diag.py) and compiled for sm_90
on the CPU with the H200's triton (tests/test_triton36_compile.py).
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from fused.kernels import sm_count
from lowbit.quant import FP8_SPLIT_LO, MIN_SCALE
from fused.kernels.w8a16_ws import (_W_DTYPES, ACTS, _activation, _descriptor, _instr_n, _load_partition, _n_tiles,
                                    _tile_offsets, stage_ring, weight_shape_reason)

_MIN_SCALE = gl.constexpr(MIN_SCALE)
_NAN_ALL = gl.constexpr(triton.language.PropagateNan.ALL)
_FP8_LO = gl.constexpr(FP8_SPLIT_LO)
_GROUP = gl.constexpr(64)  # GROUP in kernels
GROUP = 64  # outputs per scale of a QUANT_OUT hand-off (an accumulator's rows), x's K per scale with X_GROUPS


@constexpr_function
def _acc_layout(BLOCK_T, num_warps):
    """A consumer's accumulators: yᵀ tiles [rows, BLOCK_T tokens] of wgmma, the rows across its warps."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                     instr_shape=[16, _instr_n(BLOCK_T), 32])


@constexpr_function
def _out_layout(num_warps):
    """The stores' layout: rows (y's columns) in 16-byte runs, tokens across the warps."""
    return gl.BlockedLayout([8, 1], [8, 4], [1, num_warps], [0, 1])


@gluon.jit
def _consumer(x_bufs, w8_bufs, ready, empty, turn, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr, x_desc,
              w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, PART: gl.constexpr,
              GROUP_N: gl.constexpr, GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
              INT8: gl.constexpr, QUANT_OUT: gl.constexpr, OUT_GROUP: gl.constexpr, X_SPLIT: gl.constexpr,
              SPLIT_K: gl.constexpr):
    """Consumer PART's tiles (every other one of the program's): the K loop on the stages the loader filled for it,
    then the epilogue, which runs while the other consumer's K loop keeps the tensor cores busy."""
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    ROWS: gl.constexpr = w8_bufs.type.shape[1] // 2
    acc_layout: gl.constexpr = _acc_layout(BLOCK_T, gl.num_warps())
    out_layout: gl.constexpr = _out_layout(gl.num_warps())
    nprog = gl.num_programs(0)
    j = PART  # the tile's place among the program's: its stages start at ring position j * k_tiles
    n = 0  # this consumer's tiles so far
    for v in range(gl.program_id(0) + PART * nprog, _n_tiles(M, N_OUT, x_desc, w_desc) * SPLIT_K, 2 * nprog):
        off_o, off_t = _tile_offsets(v // SPLIT_K, M, N_OUT, x_desc, w_desc, GROUP_N)
        it = j * k_tiles
        acc0 = gl.zeros((ROWS, BLOCK_T), dtype=gl.int32 if INT8 else gl.float32, layout=acc_layout)
        acc1 = gl.zeros((ROWS, BLOCK_T), dtype=gl.int32 if INT8 else gl.float32, layout=acc_layout)
        # the two take turns at the stage ring: a tile's K loop starts once the other consumer has waited on its
        # tile's last stage, so every wait is for the ring's next position (a consumer a tile ahead would wait on a
        # barrier whose parity still reads as a phase of one ring cycle before: it would pass before the load).
        # Consumer 0's first turn passes (a fresh barrier's phase before 0 counts as complete)
        mbarrier.wait(turn.index(PART), (n & 1) ^ (1 - PART))
        for k in range(k_tiles):
            s = (it + k) % STAGES
            mbarrier.wait(ready.index(s), ((it + k) // STAGES) & 1)
            xt = x_bufs.index(s).permute((1, 0))
            acc0 = warpgroup_mma(w8_bufs.index(s).slice(0, ROWS, dim=0), xt, acc0, is_async=True)
            acc1 = warpgroup_mma(w8_bufs.index(s).slice(ROWS, ROWS, dim=0), xt, acc1, is_async=True)
            # this step's two groups in flight; the step before is done, so its stage goes back to the loader
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=2, deps=(acc0, acc1))
            if k > 0:
                mbarrier.arrive(empty.index((it + k - 1) % STAGES), count=1)
        mbarrier.arrive(turn.index(1 - PART), count=1)
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
        mbarrier.arrive(empty.index((it + k_tiles - 1) % STAGES), count=1)

        m_out = M
        if SPLIT_K > 1:  # the tile's last K part to finish sums the parts and stores; the others store nothing
            acc0, acc1, m_out = _splitk_reduce(acc0, acc1, part_ptr, count_ptr, v // SPLIT_K, v % SPLIT_K, M, SPLIT_K)
        # gated: rows 0-63 are gate rows and 64-127 the same outputs' up rows
        # (a tile's outputs are all this consumer's: no absmax to trade, turn stands in for the exchange's operands)
        _epilogue(acc0, acc1, off_o, off_t, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr, turn,
                  turn.index(0), n, m_out, N_OUT, stride_ym, up_off, GATED, ACT, HAS_BIAS, QUANT_OUT, OUT_GROUP,
                  X_SPLIT, out_layout)
        j += 2
        n += 1


@gluon.jit
def _coop_consumer(x_bufs, w8_bufs, ready, empty, xchg, xbar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr,
                   x_desc, w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, PART: gl.constexpr,
                   GROUP_N: gl.constexpr, GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                   INT8: gl.constexpr, QUANT_OUT: gl.constexpr, OUT_GROUP: gl.constexpr, X_SPLIT: gl.constexpr,
                   SPLIT_K: gl.constexpr):
    """COOP: consumer PART's half of each 256-row tile, on every tile of the program (plain: rows 128·PART to
    128·PART + 127; gated, 128 gate rows then the same outputs' 128 up rows: gate rows 64·PART.. and their up rows, so
    act(g)·u stays in the consumer). Both consumers read each stage's x tile and release the stage together (its empty
    barrier counts two arrivals), so a stage carries 256 weight rows for one x tile: a quarter less shared-memory
    traffic per product than 128-row tiles. No ping-pong: the epilogue stalls the tensor cores, which a long K (a down
    projection's 14336, 112 steps) makes small, and the loader fills the ring meanwhile."""
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    ROWS: gl.constexpr = w8_bufs.type.shape[1] // 4
    ROW0: gl.constexpr = PART * ROWS if GATED else 2 * PART * ROWS  # acc0's first row in the stage's W tile
    ROW1: gl.constexpr = 2 * ROWS + PART * ROWS if GATED else 2 * PART * ROWS + ROWS  # acc1's
    acc_layout: gl.constexpr = _acc_layout(BLOCK_T, gl.num_warps())
    out_layout: gl.constexpr = _out_layout(gl.num_warps())
    it = 0  # the ring position of the tile's first K step (both consumers walk the same positions)
    n = 0  # tiles so far (both consumers walk the same tiles)
    for v in range(gl.program_id(0), _n_tiles(M, N_OUT, x_desc, w_desc) * SPLIT_K, gl.num_programs(0)):
        off_o, off_t = _tile_offsets(v // SPLIT_K, M, N_OUT, x_desc, w_desc, GROUP_N)
        acc0 = gl.zeros((ROWS, BLOCK_T), dtype=gl.int32 if INT8 else gl.float32, layout=acc_layout)
        acc1 = gl.zeros((ROWS, BLOCK_T), dtype=gl.int32 if INT8 else gl.float32, layout=acc_layout)
        for k in range(k_tiles):
            s = (it + k) % STAGES
            mbarrier.wait(ready.index(s), ((it + k) // STAGES) & 1)
            xt = x_bufs.index(s).permute((1, 0))
            acc0 = warpgroup_mma(w8_bufs.index(s).slice(ROW0, ROWS, dim=0), xt, acc0, is_async=True)
            acc1 = warpgroup_mma(w8_bufs.index(s).slice(ROW1, ROWS, dim=0), xt, acc1, is_async=True)
            acc0, acc1 = warpgroup_mma_wait(num_outstanding=2, deps=(acc0, acc1))
            if k > 0:
                mbarrier.arrive(empty.index((it + k - 1) % STAGES), count=1)
        acc0, acc1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc0, acc1))
        mbarrier.arrive(empty.index((it + k_tiles - 1) % STAGES), count=1)
        it += k_tiles

        m_out = M
        if SPLIT_K > 1:  # each consumer's half of the tile is a reduction of its own (slot 2·tile + PART)
            acc0, acc1, m_out = _splitk_reduce(acc0, acc1, part_ptr, count_ptr, 2 * (v // SPLIT_K) + PART,
                                               v % SPLIT_K, M, SPLIT_K)
        # (gated: acc0's rows are the outputs off_o + ROW0..)
        _epilogue(acc0, acc1, off_o + ROW0, off_t, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr, xchg,
                  xbar.index(0), n, m_out, N_OUT, stride_ym, up_off, GATED, ACT, HAS_BIAS, QUANT_OUT, OUT_GROUP,
                  X_SPLIT, out_layout)
        n += 1


@gluon.jit
def _group_consumer(x_bufs, w8_bufs, s_bufs, ready, empty, ws_ptr, b_ptr, y_ptr, x_desc, w_desc, M, N_OUT, stride_ym,
                    k_tiles, PART: gl.constexpr, GROUP_N: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
                    INT8: gl.constexpr):
    """X_GROUPS (x scaled per token and group of K, 64 or 128, xs [K / group, M], as a QUANT_OUT layer wrote it):
    tiles of 128 tokens x 128 outputs, consumer PART on tokens 64·PART.. of each, both reading each stage's W tile
    (DeepSeek-V3's fp8 GEMM layout). A stage holds G = 1 or 2 groups; each group's y = x · Wᵀ from zero (tokens along
    wgmma's M, so a thread's rows are 2 tokens and it reads 2 scales a group), all waited for, then scaled by the
    tokens' group scales into an fp32 sum ("promotion"); while one consumer scales, the other's product keeps the
    tensor cores busy. The stage's scales come with it (s_bufs [G, BLOCK_T], by TMA). The first forms computed
    yᵀ = W · xᵀ as the other consumers do: tokens along wgmma's N put 32 token scales in each thread, 16 KB of
    shared-memory reads per consumer and step beside the wgmma's 12 KB (the Llama block at M=1024 423 µs with them,
    477 with the scales read from global memory, 314 per token)."""
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    TOKENS: gl.constexpr = BLOCK_T // 2
    ROWS: gl.constexpr = w8_bufs.type.shape[1]
    acc_layout: gl.constexpr = _acc_layout(ROWS, gl.num_warps())
    G: gl.constexpr = s_bufs.type.shape[1]  # K groups a stage: 1, or 2 (two products in flight, half the waits)
    gl.static_assert(G == 1 or G == 2)
    # a stage's scales, [G, BLOCK_T] as TMA wrote them (no swizzle): group g of stage s is row s·G + g
    s_flat = s_bufs._reinterpret(gl.float32, [STAGES * G, BLOCK_T], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    sc_layout: gl.constexpr = gl.SliceLayout(1, acc_layout)
    part = gl.zeros((TOKENS, ROWS), dtype=gl.int32 if INT8 else gl.float32, layout=acc_layout)
    part1 = part
    it = 0
    for tile in range(gl.program_id(0), _n_tiles(M, N_OUT, x_desc, w_desc), gl.num_programs(0)):
        off_o, off_t = _tile_offsets(tile, M, N_OUT, x_desc, w_desc, GROUP_N)
        acc = gl.zeros((TOKENS, ROWS), dtype=gl.float32, layout=acc_layout)
        for k in range(k_tiles):
            s = (it + k) % STAGES
            mbarrier.wait(ready.index(s), ((it + k) // STAGES) & 1)
            xt = x_bufs.index(s).slice(PART * TOKENS, TOKENS, dim=0)
            if G == 1:
                part = warpgroup_mma(xt, w8_bufs.index(s).permute((1, 0)), part, use_acc=False, is_async=True)
                sc = s_flat.index(s).slice(PART * TOKENS, TOKENS).load(sc_layout)
                part = warpgroup_mma_wait(num_outstanding=0, deps=(part,))
                mbarrier.arrive(empty.index(s), count=1)
                acc += part.to(gl.float32) * sc[:, None]
            else:
                part = warpgroup_mma(xt.slice(0, _GROUP, dim=1),
                                     w8_bufs.index(s).slice(0, _GROUP, dim=1).permute((1, 0)), part, use_acc=False,
                                     is_async=True)
                part1 = warpgroup_mma(xt.slice(_GROUP, _GROUP, dim=1),
                                      w8_bufs.index(s).slice(_GROUP, _GROUP, dim=1).permute((1, 0)), part1,
                                      use_acc=False, is_async=True)
                sc = s_flat.index(2 * s).slice(PART * TOKENS, TOKENS).load(sc_layout)
                sc1 = s_flat.index(2 * s + 1).slice(PART * TOKENS, TOKENS).load(sc_layout)
                part, part1 = warpgroup_mma_wait(num_outstanding=0, deps=(part, part1))
                mbarrier.arrive(empty.index(s), count=1)
                acc += part.to(gl.float32) * sc[:, None]  # (two FMAs a value, not a product and a sum more)
                acc += part1.to(gl.float32) * sc1[:, None]
        it += k_tiles
        o = off_o + gl.arange(0, ROWS, layout=gl.SliceLayout(0, acc_layout))
        y = acc * gl.load(ws_ptr + o, mask=o < N_OUT, other=0.0)[None, :]
        if HAS_BIAS:
            y += gl.load(b_ptr + o, mask=o < N_OUT, other=0.0).to(gl.float32)[None, :]
        # y [tokens, outputs] into y's rows, outputs in 16-byte runs
        row_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [gl.num_warps(), 1], [1, 0])
        y = gl.convert_layout(_activation(y, ACT).to(y_ptr.dtype.element_ty), row_layout)
        t = off_t + PART * TOKENS + gl.arange(0, TOKENS, layout=gl.SliceLayout(1, row_layout))
        o = off_o + gl.arange(0, ROWS, layout=gl.SliceLayout(0, row_layout))
        gl.store(y_ptr + t[:, None] * stride_ym + o[None, :], y, mask=(t < M)[:, None] & (o < N_OUT)[None, :])


@gluon.jit
def _group_load(x_desc, w_desc, xs_desc, x_bufs, w8_bufs, s_bufs, ready, empty, M, N_OUT, k_tiles,
                GROUP_N: gl.constexpr):
    """X_GROUPS' TMA partition: w8a16_ws._load_tile's x and W tiles plus the stage's K groups' token scales [G,
    BLOCK_T]."""
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    G: gl.constexpr = xs_desc.block_type.shape[0]  # K groups a stage
    it = 0
    for tile in range(gl.program_id(0), _n_tiles(M, N_OUT, x_desc, w_desc), gl.num_programs(0)):
        off_o, off_t = _tile_offsets(tile, M, N_OUT, x_desc, w_desc, GROUP_N)
        for k in range(k_tiles):
            s = (it + k) % STAGES
            mbarrier.wait(empty.index(s), (((it + k) // STAGES) & 1) ^ 1)  # barriers start at phase 1 complete: free
            mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes
                            + xs_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [off_t, k * BLOCK_K], ready.index(s), x_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [off_o, k * BLOCK_K], ready.index(s), w8_bufs.index(s))
            tma.async_copy_global_to_shared(xs_desc, [k * G, off_t], ready.index(s), s_bufs.index(s))
        it += k_tiles


@gluon.jit
def _flat_index(acc):
    """Each accumulator value's place in a row-major [rows, tokens] partial tile (split-K)."""
    T: gl.constexpr = acc.shape[1]
    return (gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, acc.type.layout))[:, None] * T
            + gl.arange(0, T, layout=gl.SliceLayout(0, acc.type.layout))[None, :])


@gluon.jit
def _splitk_reduce(acc0, acc1, part_ptr, count_ptr, slot, ks, M, SPLIT_K: gl.constexpr):
    """Split-K as fused.kernels.splitk (no atomics on the data, deterministic): this K part's two accumulators to
    the slot's partials (int32 sums as their bits), a release on the slot's counter; the part that arrives last sums
    all SPLIT_K partials in a fixed order, resets the counter and gets M back to store with (the others get 0)."""
    BLOCK: gl.constexpr = acc0.shape[0] * acc0.shape[1]
    idx = _flat_index(acc0)
    base = part_ptr + slot.to(gl.int64) * (SPLIT_K * 2 * BLOCK)
    gl.store(base + (2 * ks) * BLOCK + idx, _part_bits(acc0))
    gl.store(base + (2 * ks + 1) * BLOCK + idx, _part_bits(acc1))
    gl.thread_barrier()  # every thread's partial is issued before the release below
    count = gl.atomic_add(count_ptr + slot, 1, sem="acq_rel")
    last = count == SPLIT_K - 1
    mask = (idx < BLOCK) & last
    acc0 = gl.zeros_like(acc0)
    acc1 = gl.zeros_like(acc1)
    for s in range(SPLIT_K):  # fixed order: the same bits every run
        acc0 += _part_value(gl.load(base + (2 * s) * BLOCK + idx, mask=mask, other=0.0, cache_modifier=".cg"), acc0)
        acc1 += _part_value(gl.load(base + (2 * s + 1) * BLOCK + idx, mask=mask, other=0.0, cache_modifier=".cg"),
                            acc1)
    gl.atomic_xchg(count_ptr + slot, 0, mask=last)  # ready for the next call
    return acc0, acc1, gl.where(last, M, 0)


@gluon.jit
def _part_bits(acc):
    if acc.dtype == gl.int32:
        bits = acc.to(gl.float32, bitcast=True)
    else:
        bits = acc
    return bits


@gluon.jit
def _part_value(v, like):
    if like.dtype == gl.int32:
        v = v.to(gl.int32, bitcast=True)
    return v


@gluon.jit
def _epilogue(acc0, acc1, o0, off_t, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr, xchg, xbar, n, M, N_OUT,
              stride_ym, up_off, GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
              QUANT_OUT: gl.constexpr, OUT_GROUP: gl.constexpr, X_SPLIT: gl.constexpr, out_layout: gl.constexpr):
    """A consumer's two accumulators (yᵀ tiles [rows, tokens]) out: s_w along rows, s_x along tokens, bias, act.
    o0: acc0's first row. Gated: acc1 holds the same outputs' up rows (row up_off + o of the scales and bias),
    y = act(gate) · up; else acc1 the next rows. QUANT_OUT: y quantized per token and group of OUT_GROUP outputs to
    y_ptr's int8 / e4m3, the group's scales to hs_ptr [groups, M]: 64 are an accumulator's rows; 128 both of a plain
    consumer's, or (gated, COOP) this consumer's 64 and the other's, their absmaxes traded through xchg (tile n).
    X_SPLIT: the tile's columns are act_split's planes interleaved (column 2t token t's hi plane, 2t + 1 its lo), M
    counts those rows: each pair is combined into its token first."""
    if X_SPLIT:
        acc0 = _unsplit(acc0)
        acc1 = _unsplit(acc1)
        off_t = off_t // 2
        M = M // 2
    BLOCK_T: gl.constexpr = acc0.shape[1]
    ROWS: gl.constexpr = acc0.shape[0]
    t_acc = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, acc0.type.layout))
    xs = gl.load(xs_ptr + t_acc, mask=t_acc < M, other=0.0)[None, :]
    t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out_layout))
    o = o0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc0.type.layout))
    y = _activation(_scaled(acc0, xs, o, o, ws_ptr, b_ptr, N_OUT, HAS_BIAS), ACT)
    WIDE: gl.constexpr = QUANT_OUT and OUT_GROUP == 2 * ROWS  # a group spans both 64-row halves
    if GATED:
        y = y * _scaled(acc1, xs, o, up_off + o, su_ptr, bu_ptr, N_OUT, HAS_BIAS)
        if WIDE:  # the tile's other 64 outputs are the other consumer's
            amax = _amax_exchange(_amax(y), xchg, xbar, (o0 // ROWS) % 2, n)
            _quant_store(y, amax, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, OUT_GROUP, out_layout)
        else:
            _out(y, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, QUANT_OUT, OUT_GROUP, out_layout)
    else:
        o1 = o + ROWS
        if WIDE:  # both accumulators' rows are one group: y and y1 live together
            y1 = _activation(_scaled(acc1, xs, o1, o1, ws_ptr, b_ptr, N_OUT, HAS_BIAS), ACT)
            amax = _max_nan(_amax(y), _amax(y1))
            _quant_store(y, amax, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, OUT_GROUP, out_layout)
            _quant_store(y1, amax, o1, o0 + ROWS, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, OUT_GROUP,
                         out_layout)
        else:  # y out before y1 is made: fewer values live at once
            _out(y, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, QUANT_OUT, OUT_GROUP, out_layout)
            y1 = _activation(_scaled(acc1, xs, o1, o1, ws_ptr, b_ptr, N_OUT, HAS_BIAS), ACT)
            _out(y1, o1, o0 + ROWS, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, QUANT_OUT, OUT_GROUP, out_layout)


@gluon.jit
def _unsplit(acc):
    """[rows, 2·tokens] of interleaved planes -> [rows, tokens] fp32 sums x·w: 256·hi + lo for int8 planes (int32
    sums, as w8_gemm combines them), hi + lo / 16 for e4m3 ones. wgmma's accumulator keeps columns 2t and 2t + 1 in
    one thread, so the pairs meet in registers."""
    hi, lo = gl.split(gl.reshape(acc, [acc.shape[0], acc.shape[1] // 2, 2]))
    if acc.dtype == gl.int32:
        return hi.to(gl.float32) * 256.0 + lo.to(gl.float32)
    return hi + lo * (1.0 / _FP8_LO)


@gluon.jit
def _out(y, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, QUANT_OUT: gl.constexpr, OUT_GROUP: gl.constexpr,
         out_layout: gl.constexpr):
    """y's rows o stored, or (QUANT_OUT) quantized as one group of their own."""
    if QUANT_OUT:
        _quant_store(y, _amax(y), o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, OUT_GROUP, out_layout)
    else:
        _store(y, o, t, y_ptr, M, N_OUT, stride_ym, out_layout)


@gluon.jit
def _max_nan(a, b):
    return gl.maximum(a, b, propagate_nan=_NAN_ALL)


@gluon.jit
def _amax(y):
    """Per token (column) absmax of a [rows, tokens] tile, NaN if one is NaN (rows past N_OUT are zeros: TMA fills
    their weights with zeros, their scales and biases load as 0)."""
    return gl.reduce(gl.abs(y), 0, _max_nan)


@gluon.jit
def _amax_exchange(amax, xchg, xbar, part, n):
    """This consumer's per-token absmax against the other COOP consumer's for the same tokens (tile n of both): each
    stores its own in xchg [2 tiles x 2 consumers, tokens], arrives on xbar (two arrivals a phase) and waits for the
    other's. A slot is written again two tiles later, after the other consumer has arrived for the tile between,
    which it does after reading."""
    slot = 2 * (n % 2)
    xchg.index(slot + part).store(amax)
    gl.thread_barrier()  # every thread's store before the one arrival
    mbarrier.arrive(xbar, count=1)
    mbarrier.wait(xbar, n & 1)
    return _max_nan(amax, xchg.index(slot + 1 - part).load(amax.type.layout))


@gluon.jit
def _quant_store(y, amax, o, o0, t_acc, t, y_ptr, hs_ptr, M, N_OUT, stride_ym, OUT_GROUP: gl.constexpr,
                 out_layout: gl.constexpr):
    """y's rows o (o0 the first, a multiple of 64) quantized as lowbit.quantize_activation_grouped with the group's
    per-token absmax (scale = max(absmax / qmax, MIN_SCALE), NaN if one is NaN; round(y · (1/scale)), ties to
    even) and stored; the scales to hs_ptr's group o0 // OUT_GROUP by the group's first rows."""
    QMAX: gl.constexpr = 127.0 if y_ptr.dtype.element_ty == gl.int8 else 448.0
    scale = gl.maximum(amax / QMAX, _MIN_SCALE, propagate_nan=_NAN_ALL)
    if o0 % OUT_GROUP == 0:
        gl.store(hs_ptr + (o0 // OUT_GROUP) * M + t_acc, scale, mask=t_acc < M)
    inv = gl.div_rn(gl.full(scale.shape, 1.0, gl.float32, layout=scale.type.layout), scale)
    y = gl.minimum(gl.maximum(y * inv[None, :], -QMAX), QMAX)
    if QMAX == 127.0:
        y = (y + 12582912.0) - 12582912.0  # ties to even (as torch.round): 1.5·2²³ leaves no fraction bits
    _store(y, o, t, y_ptr, M, N_OUT, stride_ym, out_layout)


@gluon.jit
def _scaled(acc, xs, o, so, s_ptr, b_ptr, N_OUT, HAS_BIAS: gl.constexpr):
    """An accumulator's rows o in fp32 with s_x along tokens, the weight scale and bias of rows so (o < N_OUT)."""
    y = acc.to(gl.float32) * xs * gl.load(s_ptr + so, mask=o < N_OUT, other=0.0)[:, None]
    if HAS_BIAS:
        y += gl.load(b_ptr + so, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
    return y


@gluon.jit
def _store(y, o, t, y_ptr, M, N_OUT, stride_ym, out_layout: gl.constexpr):
    """yᵀ's [rows, tokens] tile stored transposed (tokens along memory's slow axis, rows in 16-byte runs)."""
    y = gl.convert_layout(y.to(y_ptr.dtype.element_ty), out_layout)
    o = gl.convert_layout(o, gl.SliceLayout(1, out_layout))
    gl.store(y_ptr + t[None, :] * stride_ym + o[:, None], y, mask=(o < N_OUT)[:, None] & (t < M)[None, :])


@gluon.jit
def _w8a8_ws_kernel(x_desc, w_desc, wu_desc, xs_desc, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr, M, N_OUT, K,
                    stride_ym, up_off, part_ptr, count_ptr, GROUP_N: gl.constexpr, STAGES: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr,
                    GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, INT8: gl.constexpr,
                    COOP: gl.constexpr, X_GROUPS: gl.constexpr, QUANT_OUT: gl.constexpr, OUT_GROUP: gl.constexpr,
                    X_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr):
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]  # one TMA box: the tile's rows (gated: half of them)
    TILE_ROWS: gl.constexpr = 2 * W_ROWS if GATED else W_ROWS
    k_tiles = gl.cdiv(K, x_desc.block_type.shape[1]) // SPLIT_K  # K steps per work item (the launcher: divisible)
    off_o, off_t = _tile_offsets(gl.program_id(0), M, N_OUT, x_desc, w_desc, GROUP_N)  # (the loader walks from it)
    if X_GROUPS:  # 128-row tiles shared by the two consumers, x's scales per K step
        x_bufs, w8_bufs, ready, empty = stage_ring(x_desc, w_desc, STAGES, W_ROWS, 2)
        s_bufs = gl.allocate_shared_memory(gl.float32, [STAGES] + xs_desc.block_type.shape, xs_desc.layout)
        gl.warp_specialize([
            (_group_consumer, (x_bufs, w8_bufs, s_bufs, ready, empty, ws_ptr, b_ptr, y_ptr, x_desc, w_desc, M,
                               N_OUT, stride_ym, k_tiles, 0, GROUP_N, ACT, HAS_BIAS, INT8)),
            (_group_consumer, (x_bufs, w8_bufs, s_bufs, ready, empty, ws_ptr, b_ptr, y_ptr, x_desc, w_desc, M,
                               N_OUT, stride_ym, k_tiles, 1, GROUP_N, ACT, HAS_BIAS, INT8)),
            (_group_load, (x_desc, w_desc, xs_desc, x_bufs, w8_bufs, s_bufs, ready, empty, M, N_OUT, k_tiles,
                           GROUP_N)),
        ], [4, 1], [CONSUMER_REGS, 24])
    elif COOP:  # 256-row tiles shared by the two consumers
        x_bufs, w8_bufs, ready, empty = stage_ring(x_desc, w_desc, STAGES, TILE_ROWS, 2)
        if GATED and QUANT_OUT and OUT_GROUP > _GROUP:  # the consumers' per-token absmaxes, traded per tile
            xchg = gl.allocate_shared_memory(gl.float32, [4, x_desc.block_type.shape[0]],
                                             gl.SwizzledSharedLayout(1, 1, 1, [0]))
            xbar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
            mbarrier.init(xbar.index(0), count=2)
        else:  # (not used: the stage ring's barriers stand in)
            xchg, xbar = ready, ready
        gl.warp_specialize([
            (_coop_consumer, (x_bufs, w8_bufs, ready, empty, xchg, xbar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr,
                              hs_ptr, x_desc, w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, 0,
                              GROUP_N, GATED, ACT, HAS_BIAS, INT8, QUANT_OUT, OUT_GROUP, X_SPLIT, SPLIT_K)),
            (_coop_consumer, (x_bufs, w8_bufs, ready, empty, xchg, xbar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr,
                              hs_ptr, x_desc, w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, 1,
                              GROUP_N, GATED, ACT, HAS_BIAS, INT8, QUANT_OUT, OUT_GROUP, X_SPLIT, SPLIT_K)),
            (_load_partition, (x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, M, N_OUT, off_t, off_o,
                               up_off, k_tiles, GROUP_N, True, GATED, SPLIT_K)),
        ], [4, 1], [CONSUMER_REGS, 24])
    else:
        # a stage belongs to one tile, so to one consumer
        x_bufs, w8_bufs, ready, empty = stage_ring(x_desc, w_desc, STAGES, TILE_ROWS, 1)
        # turn[c]: consumer c may start its K loop
        turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(2):
            mbarrier.init(turn.index(i), count=1)
        gl.warp_specialize([
            (_consumer, (x_bufs, w8_bufs, ready, empty, turn, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr,
                         x_desc, w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, 0, GROUP_N, GATED,
                         ACT, HAS_BIAS, INT8, QUANT_OUT, OUT_GROUP, X_SPLIT, SPLIT_K)),
            (_consumer, (x_bufs, w8_bufs, ready, empty, turn, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, hs_ptr,
                         x_desc, w_desc, M, N_OUT, stride_ym, up_off, k_tiles, part_ptr, count_ptr, 1, GROUP_N, GATED,
                         ACT, HAS_BIAS, INT8, QUANT_OUT, OUT_GROUP, X_SPLIT, SPLIT_K)),
            (_load_partition, (x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, M, N_OUT, off_t, off_o, up_off,
                               k_tiles, GROUP_N, True, GATED, SPLIT_K)),
        ], [4, 1], [CONSUMER_REGS, 24])


def default_config(gated: bool = False, coop: bool = False, x_groups: bool = False, group: int = GROUP,
                   x_split: bool = False) -> dict:
    """128 tokens x 128 weight rows per tile (two 64 x 128 accumulators in the consumer that owns it), 128-byte K
    steps: 32 KB a stage; 6 stages, 4 gated. Why 4 gated: at M=8192 (Llama gate/up, 1 s windows at the cap, H200,
    thirty-fifth session, `bash .ci/h200_next.sh stages`) 6 / 5 / 4 stages took 1678 / 1644 / 1580 µs (fp8; 1248 /
    1232 / 1064 mJ, the deeper rings drawing 744-750 W) and int8 6 / 4 1578 / 1455 µs; at 1024 all within 1%. The
    down shape kept 6 (int8 490 vs 503 mJ at 8192, 64.7 vs 66.1 at 1024). COOP (256-row tiles, 48 KB a stage): 4.
    x_split (W8A16's plane rows, 2 a token): GROUP_N 4. The ping-pong form took 357.7 / 168.8 µs with it against
    377.5 / 189.7 with 8 on the Llama int8 gated / down layers at M=1024 (H100, forty-fourth session,
    .ci/wscfg_probe.py); COOP the same either way."""
    if x_groups:  # a K step is one group of x's scales: 64 K, 10 stages of 16 KB; 128, 6 of 32 KB (or 2 x 64)
        return dict(BLOCK_T=128, BLOCK_K=group, STAGES=10 if group == GROUP else 6, GROUP_N=8, CONSUMER_REGS=232)
    return dict(BLOCK_T=128, BLOCK_K=128, STAGES=4 if gated or coop else 6, GROUP_N=4 if x_split else 8,
                CONSUMER_REGS=232)


def supports(qweight: torch.Tensor, gated: bool = False) -> str | None:
    """None if w8a8_ws runs on these weights (x then comes from act_quant in their format), else why not (dispatch
    offers it only then)."""
    if not (qweight.is_cuda and torch.cuda.get_device_capability(qweight.device) == (9, 0)):
        return "Hopper (sm_90) only"
    if qweight.dtype not in _W_DTYPES:
        return "int8 or e4m3 weights"
    return weight_shape_reason(qweight, gated)


def auto_split(tiles: int, k_steps: int, programs: int, min_steps: int = 4) -> int:
    """SPLIT_K="auto": the most K parts (each an equal run of at least ``min_steps`` K steps) that keep tiles x parts
    within one wave of ``programs``; 1 where the tiles alone fill them (the M=128 down projections: 16-64 tiles of
    112 K steps on 132 SMs get 2-8 parts)."""
    best = 1
    for s in range(2, k_steps // min_steps + 1):
        if k_steps % s == 0 and tiles * s <= programs:
            best = s
    return best


def _w_rows(gated: bool, coop: bool, x_groups: bool) -> int:
    """Weight rows of one TMA box (gated: the gate rows; a tile's outputs); X_GROUPS: 128-row tiles, 64 a consumer."""
    return 128 if x_groups else (128 if gated else 256) if coop else 64 if gated else 128


def planned_split(rows: int, n_out: int, K: int, gated: bool, config: dict | None, device) -> int:
    """The K parts a launch with ``config`` takes for ``rows`` x rows (x_split: 2 a token) and n_out outputs (gated:
    the outputs, half the stacked rows), as _launch resolves them."""
    cfg = dict(default_config(gated, bool((config or {}).get("COOP"))), **(config or {}))
    split = cfg.get("SPLIT_K", 1)
    if split != "auto":
        return split
    tiles = triton.cdiv(rows, cfg["BLOCK_T"]) * triton.cdiv(n_out, _w_rows(gated, bool(cfg.get("COOP")), False))
    return auto_split(tiles, triton.cdiv(K, cfg["BLOCK_K"]), cfg.get("PROGRAMS") or sm_count(device))


def _launch(xq, x_scale, qweight, wscale, bias, act, gated, out_dtype, config, out, up=None, quant_out=False,
            group=GROUP, x_split=False):
    """Checks, output and launch of w8a8_ws / w8a8_ws_pair; ``up``: the pair's (wu, su, bu)."""
    if (xq.dim() != 2 or qweight.dtype not in _W_DTYPES or xq.dtype != qweight.dtype
            or qweight.shape[1] != xq.shape[1]):
        raise TypeError(f"w8a8_ws: xq [M, K] and qweight [N, K], both float8_e4m3fn or both int8; got {xq.dtype} "
                        f"{tuple(xq.shape)} and {qweight.dtype} {tuple(qweight.shape)}")
    if act not in ACTS:
        raise ValueError(f"w8a8_ws: act must be one of {ACTS}, got {act!r}")
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"w8a8_ws: out_dtype must be bfloat16 or float16, got {out_dtype}")
    if qweight.shape[1] % 16:
        raise ValueError(f"w8a8_ws: K must be a multiple of 16 (TMA rows), got {qweight.shape[1]}")
    if gated and up is None and qweight.shape[0] % 2:
        raise ValueError(f"w8a8_ws: a stacked gate | up weight needs an even row count, got {qweight.shape[0]}")
    scales = (x_scale, wscale) if up is None else (x_scale, wscale, up[1])
    K = xq.shape[1]
    x_groups = x_scale.dim() == 2  # [groups of `group` along K, M]: a scale per token and group
    if group not in (GROUP, 2 * GROUP):
        raise ValueError(f"w8a8_ws: group must be {GROUP} or {2 * GROUP}, got {group}")
    if x_scale.dim() not in (1, 2) or any(t.dtype != torch.float32 for t in scales):
        raise TypeError(f"w8a8_ws: x_scale [M] or [ceil(K / {group}), M] and the weight scales must be float32, got "
                        f"{x_scale.dtype} {tuple(x_scale.shape)} and {', '.join(str(t.dtype) for t in scales[1:])}")
    if x_groups and x_scale.shape[0] != triton.cdiv(K, group):
        raise ValueError(f"w8a8_ws: grouped x_scale needs ceil(K / {group}) = {triton.cdiv(K, group)} rows, got "
                         f"{tuple(x_scale.shape)}")
    if any(t is not None and t.shape != (qweight.shape[0],) for t in (wscale, bias) + (up[1:] if up else ())):
        raise ValueError(f"w8a8_ws: scales and biases need one value per weight row ({qweight.shape[0]})")
    M = x_scale.shape[-1]
    rows = 2 * M if x_split else M  # x_split: two interleaved plane rows per token
    if xq.shape[0] < rows:
        raise ValueError(f"w8a8_ws: {M} token scales for {xq.shape[0]} rows of xq{' (2 per token)' * x_split}")
    if x_split and (x_groups or quant_out):
        raise ValueError("w8a8_ws: x_split runs with one x scale per token and y in 16 bits")
    # the kernel reads the scales and the biases as dense vectors
    x_scale = x_scale if x_groups else x_scale.contiguous()  # (grouped: TMA-read, checked below)
    wscale = wscale.contiguous()
    bias = bias.contiguous() if bias is not None else None
    if up is not None:
        up = (up[0], up[1].contiguous(), up[2].contiguous() if up[2] is not None else None)
    cfg = dict(default_config(gated, bool((config or {}).get("COOP")), x_groups, group, x_split), **(config or {}))
    if x_groups and (cfg["BLOCK_K"] not in (group, 2 * group) or cfg["BLOCK_K"] > 2 * GROUP or cfg["BLOCK_T"] != 128
                     or gated or quant_out):
        raise ValueError(f"w8a8_ws: grouped x scales run the plain GEMM with BLOCK_T 128, BLOCK_K {GROUP} or "
                         f"{2 * GROUP} (one or two groups of {group}), y in 16 bits (got BLOCK_T {cfg['BLOCK_T']}, "
                         f"BLOCK_K {cfg['BLOCK_K']}, gated {gated}, quant_out {quant_out})")
    coop = bool(cfg.get("COOP"))
    if quant_out and group != GROUP and gated and not coop:
        raise ValueError(f"w8a8_ws: quant_out in groups of {group} outputs, gated, needs COOP (a ping-pong tile holds "
                         f"{GROUP} outputs)")
    N = qweight.shape[0]
    N_OUT = N // 2 if gated and up is None else N
    hs = None
    if quant_out:  # y quantized per token and `group` outputs to the weights' format, its scales [groups, M]
        if out is not None:
            raise ValueError("w8a8_ws: quant_out makes its own outputs (out must be None)")
        out = torch.empty((M, N_OUT), device=xq.device, dtype=qweight.dtype)
        # [groups, M] dense (the epilogue's row stride is M); a GEMM reading them by TMA pads rows where M % 4
        hs = torch.empty((triton.cdiv(N_OUT, group), M), device=xq.device, dtype=torch.float32)
    elif out is None:
        out = torch.empty((M, N_OUT), device=xq.device, dtype=out_dtype)
    elif out.shape != (M, N_OUT) or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{M}, {N_OUT}] {out_dtype} tensor")
    devices = {t.device for t in (xq, x_scale, qweight, wscale, bias, out) + (up or ()) if t is not None}
    if len(devices) > 1 or not xq.is_cuda:
        raise RuntimeError(f"w8a8_ws: every operand on one CUDA device, got {sorted(map(str, devices))}")
    if M == 0 or N_OUT == 0:
        return (out, hs) if quant_out else out
    xq = xq[:rows]
    # TMA wants 16-byte aligned rows and bases: other views are copied (the weight is contiguous from conversion)
    if xq.stride(1) != 1 or xq.stride(0) % 16 or xq.data_ptr() % 16:
        xq = xq.contiguous()
    bt, bk = cfg["BLOCK_T"], cfg["BLOCK_K"]
    w_rows = _w_rows(gated, coop, x_groups)
    w_desc = _descriptor(qweight.contiguous(), [w_rows, bk])
    b = wscale if bias is None else bias
    # the up rows (and scales, bias) at up_off + o: the stacked weight's second half, or a pair's own tensors
    wu_desc, su, bu, up_off = w_desc, wscale, b, N_OUT
    if up is not None:
        wu_desc, su, bu, up_off = _descriptor(up[0].contiguous(), [w_rows, bk]), up[1], up[2], 0
        bu = b if bu is None else bu
    xs_desc = x_desc = _descriptor(xq, [bt, bk])
    if x_groups:  # the scales travel with their K step's stage (TMA: 16-byte aligned rows)
        if x_scale.stride(1) != 1 or x_scale.stride(0) % 4 or x_scale.data_ptr() % 16:
            x_scale = torch.zeros((x_scale.shape[0], triton.cdiv(M, 4) * 4), device=xq.device,
                                  dtype=torch.float32)[:, :M].copy_(x_scale)
        xs_desc = TensorDescriptor.from_tensor(x_scale, [bk // group, bt], gl.NVMMASharedLayout(0, 32))
    tiles = triton.cdiv(rows, bt) * triton.cdiv(N_OUT, w_rows)
    split = cfg.get("SPLIT_K", 1)
    if split == "auto":
        split = auto_split(tiles, triton.cdiv(K, bk), cfg.get("PROGRAMS") or sm_count(xq.device))
    part = count = x_scale  # (unused without split-K)
    if split > 1:  # K cut into SPLIT_K equal runs of whole steps; partials and counters as fused.kernels.splitk
        if triton.cdiv(K, bk) % split or x_groups or quant_out:
            raise ValueError(f"w8a8_ws: SPLIT_K={split} needs ceil(K / BLOCK_K) = {triton.cdiv(K, bk)} divisible by "
                             "it, per-token x scales and y in 16 bits")
        from fused.kernels.splitk import buffers

        slots = tiles * (2 if coop else 1)  # a COOP tile's two consumers reduce their halves apart
        part, count = buffers(xq.device, slots * split * 2 * 64 * bt, slots)  # two 64-row accumulators a slot
    progs = min(tiles * split, cfg.get("PROGRAMS") or sm_count(xq.device))  # persistent: one program per SM
    _w8a8_ws_kernel[(progs, )](x_desc, w_desc, wu_desc, xs_desc, x_scale, wscale, su, b, bu, out,
                               x_scale if hs is None else hs, rows, N_OUT, K, out.stride(0), up_off, part, count,
                               GROUP_N=cfg["GROUP_N"], STAGES=cfg["STAGES"], CONSUMER_REGS=cfg["CONSUMER_REGS"],
                               GATED=gated, ACT=act, HAS_BIAS=bias is not None, INT8=qweight.dtype == torch.int8,
                               COOP=coop, X_GROUPS=x_groups, QUANT_OUT=quant_out, OUT_GROUP=group, X_SPLIT=x_split,
                               SPLIT_K=split, num_warps=4)
    return (out, hs) if quant_out else out


def w8a8_ws(xq: torch.Tensor, x_scale: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor,
            bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
            out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
            out: torch.Tensor | None = None, quant_out: bool = False, group: int = GROUP):
    """xq [M, K] float8_e4m3fn or int8 (act_quant's rows; rows past M are not read), x_scale [M] fp32 (or
    [ceil(K / group), M]: a scale per token and ``group`` of K, as quant_out writes them), qweight [N, K] of xq's dtype,
    wscale [N] fp32, bias [N] or None -> y [M, N] in ``out_dtype`` (bf16 or fp16); ``gated``: qweight, wscale and bias
    stack gate | up ([2H, K], [2H]) and y = act(gate) ⊙ up, [M, H]. Written into ``out`` if given (contiguous).
    ``quant_out``: y handed on quantized instead, (q [M, N] in qweight's dtype, scales [ceil(N / group), M] fp32), as
    lowbit.quantize_activation_grouped(y_fp32, group) — no bf16 round trip of y through memory. ``group``: 64 or 128
    (128 with a gated quant_out needs COOP: its two consumers trade their per-token absmaxes)."""
    return _launch(xq, x_scale, qweight, wscale, bias, act, gated, out_dtype, config, out, quant_out=quant_out,
                   group=group)


def w8a16_ws_split(planes: torch.Tensor, x_scale: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor,
                   bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
                   out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
                   out: torch.Tensor | None = None, up: tuple | None = None) -> torch.Tensor:
    """W8A16 through the 8-bit tensor cores: planes [2M, K] from act_split(x, interleave=True) (int8 planes for int8
    weights, x ≈ s·(256·hi + lo); e4m3 for e4m3 ones, x ≈ s·(hi + lo / 16)), x_scale [M] its scales; y as w8a8_ws
    gives it for x. The two planes are tokens of one 8-bit GEMM of 2M rows, combined per token in the epilogue (the
    Triton split GEMM's STACK tiles, in the warp-specialized TMA kernel). ``up`` = (wu, su, bu): gated with the up
    projection in tensors of its own, qweight the gate (as w8a8_ws_pair)."""
    if up is not None and (up[0].shape != qweight.shape or up[0].dtype != qweight.dtype
                           or (bias is None) != (up[2] is None)):
        raise ValueError("w8a16_ws_split: gate and up weights must match in shape and dtype, biases both or neither")
    return _launch(planes, x_scale, qweight, wscale, bias, act, gated or up is not None, out_dtype, config, out,
                   up=up, x_split=True)


def w8a8_ws_pair(xq: torch.Tensor, x_scale: torch.Tensor, wg: torch.Tensor, sg: torch.Tensor,
                 bg: torch.Tensor | None, wu: torch.Tensor, su: torch.Tensor, bu: torch.Tensor | None,
                 act: str = "silu", out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """w8a8_ws(gated=True) with gate (wg [H, K], sg, bg) and up (wu, su, bu) in tensors of their own (the pair that
    fused.compile_passes makes of two per-Linear modules): y = act(x·Wgᵀ·sg·s_x + bg) ⊙ (x·Wuᵀ·su·s_x + bu)."""
    if wu.shape != wg.shape or wu.dtype != wg.dtype or (bg is None) != (bu is None):
        raise ValueError("w8a8_ws_pair: gate and up weights must match in shape and dtype, biases both or neither")
    return _launch(xq, x_scale, wg, sg, bg, act, True, out_dtype, config, out, up=(wu, su, bu))
