"""W8A16 GEMM for Hopper as a warp-specialized Gluon kernel: y = act(x · Wᵀ · s + b), or the gated form
act(x · Wgᵀ · sg + bg) ⊙ (x · Wuᵀ · su + bu) on a stacked gate | up weight. int8 or e4m3 weights, bf16 activations
and out.

Why: at M >= 1024 W8A16 is compute-bound; widening the int8 weight into a bf16 copy for cuBLAS costs the Llama block
~130 µs of memory traffic per call, and Triton 3.6's mixed-input GEMM waits for each wgmma before widening the next
tile (about half of cuBLAS's rate). Gluon (Triton's explicit dialect) puts the work in partitions of their own:

* a 1-warp TMA partition streams x [BLOCK_T tokens, BLOCK_K] and int8 W [128 rows, BLOCK_K] tiles into a ring of
  shared-memory stages (ready / empty mbarriers per stage);
* two consumer warpgroups, each a partition with 64 weight rows of the tile, its own accumulator and epilogue. The
  product is transposed (yᵀ = W · xᵀ) so that the weight is the wgmma's A operand: each consumer loads its int8 rows
  from shared memory into registers, widens them there (int8: PRMT + HADD2, no conversion unit) and issues wgmma on them
  with x's tile as B. The two drift apart: one widens while the other's wgmma runs.

Gated: the tile's 128 rows are 64 gate rows and the same 64 outputs' up rows (two TMA loads per stage from the stacked
[2H, K] weight, or from two tensors: w8a16_ws_pair), so consumer 0 holds gate and consumer 1 up values of the same
outputs; the up consumer hands its scaled values over through shared memory, the gate one applies act(g) · u and
stores.

Config switches (the cuda tests cover each): A_HALVES (each K step's A widened in two halves; on), FP8_BITS (e4m3
widened by bit placement; off: slower), U_PAD (the gated hand-over buffer's rows padded against 8-way bank conflicts;
off: no clear gain), PERSIST (one program per SM walking the tiles; off: slower gated, down unchanged), 128-token
tiles below M=1024 (default_config(M); a route only from dispatch.W8A16_WS_MIN_M, off: split activations win there).

H200 (thirty-first session, `.ci/h200_next.sh ppwait` / `ppturn`, do_bench µs, Llama layers): down M=1024 175-183
(bf16 cuBLAS on a bf16 copy 149, widen + cuBLAS 198-200), gated gate/up 375-393 (widen + cuBLAS + scale_epilogue
422-424); at M=8192 it loses (down 1507-1595 vs 1369-1380), so dispatch times it per shape beside the other W8A16
routes. Gluon kernels do not run in Triton's interpreter: tested on the GPU (tests/test_w8a16_ws.py, cuda) and
compiled for sm_90 on the CPU with the H200's triton (tests/test_triton36_compile.py).
"""
from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from fused.kernels import sm_count

ACTS = ("none", "relu", "gelu", "gelu_tanh", "silu")


@gluon.jit
def _load_partition(x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, M, N_OUT, off_t, off_o, up_off, k_tiles,
                    GROUP_N: gl.constexpr, PERSIST: gl.constexpr, GATED: gl.constexpr, SPLIT_K: gl.constexpr = 1):
    # PERSIST: this program's tiles one after another, the stage ring's position (it) carried across them, so the
    # next tile's loads run under this one's epilogue; else the program's one tile at (off_t, off_o). SPLIT_K (w8a8_ws):
    # SPLIT_K work items per tile, item v the K steps [(v % SPLIT_K) · k_tiles, + k_tiles) of tile v // SPLIT_K.
    if PERSIST:
        it = 0
        for v in range(gl.program_id(0), _n_tiles(M, N_OUT, x_desc, w_desc) * SPLIT_K, gl.num_programs(0)):
            off_o, off_t = _tile_offsets(v // SPLIT_K, M, N_OUT, x_desc, w_desc, GROUP_N)
            it = _load_tile(x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, off_t, off_o, up_off, k_tiles,
                            it, GATED, (v % SPLIT_K) * k_tiles)
    else:
        _load_tile(x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, off_t, off_o, up_off, k_tiles, 0, GATED, 0)


@gluon.jit
def _load_tile(x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, off_t, off_o, up_off, k_tiles, it,
               GATED: gl.constexpr, k_first):
    # off_t: the x tile's first token; off_o: the W tile's first row (gated: the gate rows', their up rows at
    # off_o + up_off of wu_desc fill the tile's second half: the stacked weight's H + o, or a pair's own tensor's o);
    # it: the stage ring's position at the tile's start (returned at its end); k_first: the first K step
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]
    for k in range(k_tiles):
        s = (it + k) % STAGES
        mbarrier.wait(empty.index(s), (((it + k) // STAGES) & 1) ^ 1)  # barriers start at phase 1 complete: free
        kk = (k_first + k) * BLOCK_K
        if GATED:
            mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + 2 * w_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [off_t, kk], ready.index(s), x_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [off_o, kk], ready.index(s),
                                            w8_bufs.index(s).slice(0, W_ROWS, dim=0))
            tma.async_copy_global_to_shared(wu_desc, [off_o + up_off, kk], ready.index(s),
                                            w8_bufs.index(s).slice(W_ROWS, W_ROWS, dim=0))
        else:
            mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [off_t, kk], ready.index(s), x_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [off_o, kk], ready.index(s), w8_bufs.index(s))
    return it + k_tiles


@gluon.jit
def _n_tiles(M, N_OUT, x_desc, w_desc):
    return gl.cdiv(N_OUT, w_desc.block_type.shape[0]) * gl.cdiv(M, x_desc.block_type.shape[0])


@gluon.jit
def _tile_offsets(tile, M, N_OUT, x_desc, w_desc, GROUP_N: gl.constexpr):
    """(first output, first token) of a tile, in grouped order: GROUP_N output tiles share each token tile while it
    is in L2 (outputs per tile: the W box's rows, 128; gated 64, each with its gate and up row)."""
    BLOCK_O: gl.constexpr = w_desc.block_type.shape[0]
    BLOCK_T: gl.constexpr = x_desc.block_type.shape[0]
    pid_o, pid_t = _grouped(tile, gl.cdiv(N_OUT, BLOCK_O), gl.cdiv(M, BLOCK_T), GROUP_N)
    return pid_o * BLOCK_O, pid_t * BLOCK_T


@constexpr_function
def _instr_n(BLOCK_T):
    n = 256
    while BLOCK_T % n:
        n -= 8
    return n


@gluon.jit
def _activation(y, ACT: gl.constexpr):
    """fused.kernels.epilogue.activation in Gluon (the same formulas)."""
    if ACT == "relu":
        y = gl.where(y < 0.0, 0.0, y)
    elif ACT == "gelu":
        y = 0.5 * y * (1.0 + gl.erf(y * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        z = 0.7978845608028654 * (y + 0.044715 * y * y * y)
        y = y / (1.0 + gl.exp(-2.0 * z))
    elif ACT == "silu":
        y = y / (1.0 + gl.exp(-y))
    return y


@gluon.jit
def _widen(w, FP8_BITS: gl.constexpr):
    """An 8-bit A fragment (int8 or e4m3) as bf16, exactly."""
    if FP8_BITS:
        # e4m3 bits placed in bf16's fields are the value times 2^-120 (normals and subnormals alike): two logic ops
        # and one bf16 multiply by 2^120 (exact), where .to() takes the conversion unit twice
        u = w.to(gl.uint8, bitcast=True).to(gl.uint16)
        return ((u & 0x7F) << 4 | (u & 0x80) << 8).to(gl.bfloat16, bitcast=True) * 1.329227995784916e36
    return w.to(gl.bfloat16)


@gluon.jit
def _consumer(x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, x_desc, w_desc,
              M, N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, HALF: gl.constexpr, GROUP_N: gl.constexpr,
              PERSIST: gl.constexpr, GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr,
              FP8_BITS: gl.constexpr, A_HALVES: gl.constexpr):
    if PERSIST:  # as _load_partition; n: tiles done, the gated hand-over barriers' phase
        it = 0
        n = 0
        for tile in range(gl.program_id(0), _n_tiles(M, N_OUT, x_desc, w_desc), gl.num_programs(0)):
            off_o, off_t = _tile_offsets(tile, M, N_OUT, x_desc, w_desc, GROUP_N)
            it = _consumer_tile(x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr,
                                y_ptr, M, N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, it, n & 1, HALF, PERSIST,
                                GATED, ACT, HAS_BIAS, FP8_BITS, A_HALVES)
            n += 1
    else:
        _consumer_tile(x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M,
                       N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, 0, 0, HALF, PERSIST, GATED, ACT, HAS_BIAS,
                       FP8_BITS, A_HALVES)


@gluon.jit
def _consumer_tile(x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M, N_OUT,
                   stride_ym, off_t, off_o, up_off, k_tiles, it, u_phase, HALF: gl.constexpr, PERSIST: gl.constexpr,
                   GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, FP8_BITS: gl.constexpr,
                   A_HALVES: gl.constexpr):
    """One tile's K loop and epilogue; ``it``: the stage ring's position at its start; returns it at its end."""
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    ROWS: gl.constexpr = w8_bufs.type.shape[1] // 2
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, _instr_n(BLOCK_T), 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    acc = gl.zeros((ROWS, BLOCK_T), dtype=gl.float32, layout=acc_layout)
    for k in range(k_tiles):
        s = (it + k) % STAGES
        mbarrier.wait(ready.index(s), ((it + k) // STAGES) & 1)
        w8 = w8_bufs.index(s).slice(HALF * ROWS, ROWS, dim=0)
        if A_HALVES:
            # the step as two halves of K: the second half's A loaded and widened while the first half's wgmma run
            # (each half's registers stay live to the wait, so ptxas keeps them apart)
            KH: gl.constexpr = x_bufs.type.shape[2] // 2
            a0 = _widen(w8.slice(0, KH, dim=1).load(a_layout), FP8_BITS)
            acc = warpgroup_mma(a0, x_bufs.index(s).slice(0, KH, dim=1).permute((1, 0)), acc, is_async=True)
            a1 = _widen(w8.slice(KH, KH, dim=1).load(a_layout), FP8_BITS)
            acc = warpgroup_mma(a1, x_bufs.index(s).slice(KH, KH, dim=1).permute((1, 0)), acc, is_async=True)
            acc, a0, a1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a0, a1))
        else:
            a = _widen(w8.load(a_layout), FP8_BITS)
            acc = warpgroup_mma(a, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
            # wait for this step's group before the next step widens into registers: with a group left in flight
            # (num_outstanding=1) ptxas cannot tell the next step's A registers from the running group's and waits
            # after every k16 wgmma instead (SASS: DEPBAR 0 after each HGMMA; 607 -> 663-686 TFLOP/s at down M=1024)
            acc, a = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a))
        mbarrier.arrive(empty.index(s), count=1)

    # epilogue on yᵀ's tile [rows, tokens]: scale, bias (gated: up values handed to the gate consumer), act, stored
    # transposed (tokens along memory's slow axis)
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_layout)
    if GATED:
        o = off_o + gl.arange(0, ROWS, layout=rows_l)
        if HALF == 1:  # up: row up_off + o of (su, bu), the stacked vectors' H + o or a pair's own o
            y = acc * gl.load(su_ptr + up_off + o, mask=o < N_OUT, other=0.0)[:, None]
            if HAS_BIAS:
                y += gl.load(bu_ptr + up_off + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
        else:
            y = acc * gl.load(ws_ptr + o, mask=o < N_OUT, other=0.0)[:, None]
            if HAS_BIAS:
                y += gl.load(b_ptr + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
        if HALF == 1:
            if PERSIST:
                mbarrier.wait(u_free, u_phase ^ 1)  # the last tile's u read (starts at phase 1 complete: free)
            u_buf.store(y)
            mbarrier.arrive(u_bar, count=1)
        else:
            mbarrier.wait(u_bar, u_phase)
            y = _activation(y, ACT) * u_buf.load(acc_layout)
            if PERSIST:
                mbarrier.arrive(u_free, count=1)
    else:
        o = off_o + HALF * ROWS + gl.arange(0, ROWS, layout=rows_l)
        y = acc * gl.load(ws_ptr + o, mask=o < N_OUT, other=0.0)[:, None]
        if HAS_BIAS:
            y += gl.load(b_ptr + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
        y = _activation(y, ACT)
    if HALF == 0 or not GATED:
        out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, gl.num_warps()], [0, 1])
        y = gl.convert_layout(y.to(gl.bfloat16), out_layout)
        o = gl.convert_layout(o, gl.SliceLayout(1, out_layout))
        t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out_layout))
        gl.store(y_ptr + t[None, :] * stride_ym + o[:, None], y, mask=(o < N_OUT)[:, None] & (t < M)[None, :])
    return it + k_tiles


@gluon.jit
def stage_ring(x_desc, w_desc, STAGES: gl.constexpr, TILE_ROWS: gl.constexpr, RELEASES: gl.constexpr):
    """The shared-memory ring a TMA partition fills: STAGES x tiles and W tiles of TILE_ROWS rows, a ready mbarrier
    per stage (the loads' bytes) and an empty one that RELEASES consumer arrivals complete."""
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w8_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, TILE_ROWS, x_desc.block_type.shape[1]], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=RELEASES)
    return x_bufs, w8_bufs, ready, empty


@gluon.jit
def _grouped(pid, tiles_a, tiles_b, GROUP: gl.constexpr):
    """(tile along a, tile along b) of program ``pid``: GROUP consecutive a tiles per b tile."""
    per_group = GROUP * tiles_b
    first = (pid // per_group) * GROUP
    rows = gl.minimum(tiles_a - first, GROUP)
    return first + (pid % per_group) % rows, (pid % per_group) // rows


@gluon.jit
def _w8a16_ws_kernel(x_desc, w_desc, wu_desc, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M, N_OUT, K, stride_ym, up_off,
                     GROUP_N: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, GATED: gl.constexpr,
                     ACT: gl.constexpr, HAS_BIAS: gl.constexpr, FP8_BITS: gl.constexpr, U_PAD: gl.constexpr,
                     A_HALVES: gl.constexpr, PERSIST: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_T: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]  # one TMA box: the tile's rows (gated: half of them)
    TILE_ROWS: gl.constexpr = 2 * W_ROWS if GATED else W_ROWS
    # the program's tile (PERSIST: its first; the partitions walk the rest)
    off_o, off_t = _tile_offsets(gl.program_id(0), M, N_OUT, x_desc, w_desc, GROUP_N)
    k_tiles = gl.cdiv(K, BLOCK_K)

    # each consumer releases a stage once its wgmma on it is done
    x_bufs, w8_bufs, ready, empty = stage_ring(x_desc, w_desc, STAGES, TILE_ROWS, 2)
    U_ROWS: gl.constexpr = TILE_ROWS // 2 if GATED else 1  # the gated hand-over buffer (fp32 up values)
    if U_PAD:
        # rows padded by U_PAD fp32: a warp's accumulator store covers 8 rows x 4 column pairs, all in the same 8
        # banks without it (8-way conflicts on the store and the load: ~8k cycles a tile); 4 spreads them to 2-way
        u_layout: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[BLOCK_T, U_PAD]], [U_ROWS, BLOCK_T], [1, 0])
    else:
        u_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    u_buf = gl.allocate_shared_memory(gl.float32, [U_ROWS, BLOCK_T], u_layout)
    u_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())  # u written
    mbarrier.init(u_bar, count=1)
    u_free = u_bar  # u read (PERSIST: the buffer is reused by the next tile)
    if PERSIST:
        u_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(u_free, count=1)

    gl.warp_specialize([
        (_consumer, (x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, x_desc,
                     w_desc, M, N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, 0, GROUP_N, PERSIST, GATED, ACT,
                     HAS_BIAS, FP8_BITS, A_HALVES)),
        (_consumer, (x_bufs, w8_bufs, ready, empty, u_buf, u_bar, u_free, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, x_desc,
                     w_desc, M, N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, 1, GROUP_N, PERSIST, GATED, ACT,
                     HAS_BIAS, FP8_BITS, A_HALVES)),
        (_load_partition, (x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, M, N_OUT, off_t, off_o, up_off,
                           k_tiles, GROUP_N, PERSIST, GATED)),
    ], [4, 1], [CONSUMER_REGS, 24])


def default_config(M: int | None = None) -> dict:
    """The launch config; ``M`` below SMALL_T_MAX_M: 128-token tiles (for M < 1024, where 256-token tiles leave SMs
    idle; timed on the H200 in the thirty-third session, slower there than split activations)."""
    # 64 x 256 accumulator per consumer (128 registers of the 168 a 9-warp kernel gets), 4 stages of 40 KB; the
    # gated form's hand-over buffer (64 KB) leaves room for 3
    # A_HALVES: each K step's A widened in two halves, the second under the first half's wgmma (thirty-second session,
    # `bash .ci/h200_next.sh wspair`, Llama M=1024 in one process: down 180.0 -> 177.0 µs, gated 419.7 -> 401.5).
    # FP8_BITS (e4m3 widened by bit placement, ALU only) ran slower there (fp8 down 177.7 -> 183.7, gated 409.5 ->
    # 444.5): the conversion unit is not what limits a K step; U_PAD (the gated hand-over buffer's rows padded): 409.8
    # alone, 404.3 with A_HALVES (401.5 without): within the run's spread. Both off.
    # PERSIST: one program per SM walking the tiles, the next tile's loads under this one's epilogue (the gated layer
    # at M=1024 runs 6.8 waves of 896 tiles). Predicted gated 401 -> ~385 µs; measured (thirty-third session, H200, two
    # probes in one call, `.ci/ws_probe.py 1024`): gated 405.7 / 401.5 -> 415.9 / 414.8, down 175.1 / 176.5 -> 176.0 /
    # 176.4 (one wave of 128 tiles: nothing to overlap). Its gated form keeps more live state across the tile loop
    # (336-byte stack frame against 144 on sm_90) and the consumers' epilogue still runs between their K loops. Off.
    # 128-token tiles (M < 1024) lost their route timings at M=512 to split activations (gated 228 vs 169 µs, down 123
    # vs 113) and at 768 (414 vs 361, 246 vs 193): the mid route stays off (dispatch.W8A16_WS_MIN_M).
    if M is not None and M <= SMALL_T_MAX_M:  # 24 KB stages, a 32 KB hand-over buffer
        return dict(BLOCK_T=128, BLOCK_K=64, STAGES=6, GATED_STAGES=5, GROUP_N=8, CONSUMER_REGS=232, FP8_BITS=False,
                    U_PAD=0, A_HALVES=True, PERSIST=False)
    return dict(BLOCK_T=256, BLOCK_K=64, STAGES=4, GATED_STAGES=3, GROUP_N=8, CONSUMER_REGS=232, FP8_BITS=False,
                U_PAD=0, A_HALVES=True, PERSIST=False)


SMALL_T_MAX_M = 1023


def supports(x: torch.Tensor, qweight: torch.Tensor, gated: bool = False) -> str | None:
    """None if w8a16_ws runs these operands, else why not (dispatch offers it only then)."""
    if not (x.is_cuda and torch.cuda.get_device_capability(x.device) == (9, 0)):
        return "Hopper (sm_90) only"
    if x.dtype != torch.bfloat16 or qweight.dtype not in _W_DTYPES:
        return "bf16 activations and int8 / e4m3 weights only"
    return weight_shape_reason(qweight, gated)


def weight_shape_reason(qweight: torch.Tensor, gated: bool) -> str | None:
    """Why TMA tiles of this weight cannot run (rows of K bytes 16-byte aligned; a stacked gate | up pair), or None."""
    if qweight.shape[1] % 16:
        return "K a multiple of 16 (TMA rows)"
    if gated and qweight.shape[0] % 2:
        return "a stacked gate | up weight has an even row count"
    return None


_W_DTYPES = {torch.int8: gl.int8, torch.float8_e4m3fn: gl.float8e4nv}


@functools.lru_cache(maxsize=None)
def _smem_layout(block: tuple, dt):
    # NVMMASharedLayout.get_default_for costs ~6 µs of Python a call (triton 3.6), a Gluon launch takes 2-4 of them
    return gl.NVMMASharedLayout.get_default_for(list(block), dt)


def _descriptor(t: torch.Tensor, block):
    dt = gl.bfloat16 if t.dtype == torch.bfloat16 else _W_DTYPES[t.dtype]
    return TensorDescriptor.from_tensor(t, block, _smem_layout(tuple(block), dt))


def _launch(x, w, wscale, bias, act, gated, config, out, up=None):
    """Checks, output and launch of w8a16_ws / w8a16_ws_pair; ``up``: the pair's (wu, su, bu)."""
    if x.dim() != 2 or x.dtype != torch.bfloat16 or w.dtype not in _W_DTYPES or w.shape[1] != x.shape[1]:
        raise TypeError("w8a16_ws: bf16 x [M, K] and int8 / e4m3 qweight [N, K] expected")
    if act not in ACTS:
        raise ValueError(f"w8a16_ws: act must be one of {ACTS}, got {act!r}")
    if w.shape[1] % 16:
        raise ValueError(f"w8a16_ws: K must be a multiple of 16 (TMA rows), got {w.shape[1]}")
    if gated and up is None and w.shape[0] % 2:
        raise ValueError(f"w8a16_ws: a stacked gate | up weight needs an even row count, got {w.shape[0]}")
    M, K = x.shape
    cfg = dict(default_config(M), **(config or {}))
    N = w.shape[0]
    N_OUT = N // 2 if gated and up is None else N
    if out is None:
        out = torch.empty((M, N_OUT), device=x.device, dtype=torch.bfloat16)
    elif out.shape != (M, N_OUT) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{M}, {N_OUT}] bf16 tensor")
    if M == 0 or N_OUT == 0:
        return out
    # TMA wants 16-byte aligned rows and bases: other views are copied (the weight is contiguous from conversion)
    if x.stride(1) != 1 or (x.stride(0) * 2) % 16 or x.data_ptr() % 16:
        x = x.contiguous()
    bt, bk = cfg["BLOCK_T"], cfg["BLOCK_K"]
    w_rows = 64 if gated else 128
    w_desc = _descriptor(w.contiguous(), [w_rows, bk])
    # the up rows (and scales, bias) at up_off + o: the stacked weight's second half, or a pair's own tensors
    wu_desc, su, bu, up_off = w_desc, wscale, bias, N_OUT
    if up is not None:
        wu_desc, su, bu, up_off = _descriptor(up[0].contiguous(), [w_rows, bk]), up[1], up[2], 0
    b = wscale if bias is None else bias
    tiles = triton.cdiv(M, bt) * triton.cdiv(N_OUT, w_rows)
    persist = cfg["PERSIST"]  # True: one program per SM; an int: that many programs (tests: several tiles each)
    grid = (min(tiles, sm_count(x.device) if persist is True else int(persist)) if persist else tiles, )
    _w8a16_ws_kernel[grid](_descriptor(x, [bt, bk]), w_desc, wu_desc, wscale, su, b, b if bu is None else bu, out, M,
                           N_OUT, K, out.stride(0), up_off, GROUP_N=cfg["GROUP_N"],
                           STAGES=cfg["GATED_STAGES" if gated else "STAGES"], CONSUMER_REGS=cfg["CONSUMER_REGS"],
                           GATED=gated, ACT=act, HAS_BIAS=bias is not None,
                           FP8_BITS=w.dtype == torch.float8_e4m3fn and cfg["FP8_BITS"],
                           U_PAD=cfg["U_PAD"] if gated else 0, A_HALVES=cfg["A_HALVES"], PERSIST=bool(persist),
                           num_warps=4)
    return out


def w8a16_ws(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, bias: torch.Tensor | None = None,
             act: str = "none", gated: bool = False, config: dict | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] bf16, qweight [N, K] int8 or float8_e4m3fn, wscale [N] fp32, bias [N] or None -> y [M, N] bf16;
    ``gated``: qweight, wscale and bias stack gate | up ([2H, K], [2H]) and y = act(gate) ⊙ up, [M, H]. Written into
    ``out`` if given (contiguous, bf16)."""
    return _launch(x, qweight, wscale, bias, act, gated, config, out)


def w8a16_ws_pair(x: torch.Tensor, wg: torch.Tensor, sg: torch.Tensor, bg: torch.Tensor | None, wu: torch.Tensor,
                  su: torch.Tensor, bu: torch.Tensor | None, act: str = "silu", config: dict | None = None,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """w8a16_ws(gated=True) with gate (wg [H, K], sg, bg) and up (wu, su, bu) in tensors of their own (the pair that
    fused.compile_passes makes of two per-Linear modules): y = act(x·Wgᵀ·sg + bg) ⊙ (x·Wuᵀ·su + bu), [M, H]."""
    if wu.shape != wg.shape or wu.dtype != wg.dtype or (bg is None) != (bu is None):
        raise ValueError("w8a16_ws_pair: gate and up weights must match in shape and dtype, biases both or neither")
    return _launch(x, wg, sg, bg, act, True, config, out, up=(wu, su, bu))
