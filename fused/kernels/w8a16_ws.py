"""W8A16 GEMMs for Hopper as warp-specialized Gluon kernels (thirtieth session, prototypes): y = (x · Wᵀ) · s.

Three forms of one experiment, kept in one file until the H200 picks one (then the losers go, as the swap route did):
w8a16_ws (the widening in a partition of its own, below), w8a16_ws_swap (transposed, the widening in the wgmma warps'
registers) and w8a16_ws_pp (transposed, each warpgroup a partition of its own; also gated). They share the TMA
partition, the grouped tile order and the operand checks.

Why: at M >= 1024 W8A16 widens the 8-bit weights to bf16 once per call (~130 µs per Llama block, ~20% of it) and runs
cuBLAS on the copy; a Triton GEMM that widens its tiles in the K loop waits for each wgmma before widening the next
tile (the mixed-input GEMM ran at about half of cuBLAS's rate), and the transposed product (weights as the register
operand) ran 15-30% below it. Triton 3.6 cannot put the widening in warps of its own; Gluon (its explicit dialect)
can: here a 1-warp partition streams x and W tiles by TMA into a ring of shared-memory stages, a 4-warp partition
widens each int8 W tile into a bf16 copy in shared memory, and the default partition (two warpgroups) only issues
wgmma on (x, widened W) stages as they become ready. The stages' mbarriers hand them around:
ready (TMA landed) -> conv (W widened) -> empty (consumed by both the widening and the wgmma).

Gluon kernels do not run in Triton's interpreter: these are tested on the GPU (tests/test_w8a16_ws.py, cuda) and
compiled for sm_90 on the CPU with the H200's triton (tests/test_triton36_compile.py). Not in dispatch: measured on
the H200 (thirtieth session, `.ci/ws_probe.py`, Llama layers, do_bench µs) both are right and both are slower than
widen + cuBLAS: this form ~470 TFLOP/s at every M (down M=1024 246 vs 197-201 µs), the transposed one below 533-567
with 256-token tiles (down M=1024 212 vs 201; gate/up 451 vs 428-436); bf16 cuBLAS on a bf16 copy runs 700-800.
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.runtime.jit import constexpr_function
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


@gluon.jit
def _load_partition(x_desc, w_desc, x_bufs, w8_bufs, ready, empty, off_m, off_n, k_tiles):
    # off_m: the x tile's first row (tokens), off_n: the W tile's (weight rows); both forms stream the same tiles
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(empty.index(s), ((k // STAGES) & 1) ^ 1)  # barriers start at phase 1 complete: free
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(x_desc, [off_m, k * BLOCK_K], ready.index(s), x_bufs.index(s))
        tma.async_copy_global_to_shared(w_desc, [off_n, k * BLOCK_K], ready.index(s), w8_bufs.index(s))


@gluon.jit
def _widen_partition(w8_bufs, wbf_bufs, ready, conv, empty, k_tiles):
    STAGES: gl.constexpr = w8_bufs.type.shape[0]
    BLOCK_K: gl.constexpr = w8_bufs.type.shape[2]
    # 16 int8 (one 16-byte shared load) per thread along K
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BLOCK_K // 16), BLOCK_K // 16], [gl.num_warps(), 1],
                                            [1, 0])
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        w = w8_bufs.index(s).load(layout)
        wbf_bufs.index(s).store(w.to(gl.bfloat16))
        fence_async_shared()  # the generic-proxy stores before the wgmma's async-proxy reads
        mbarrier.arrive(conv.index(s), count=1)
        mbarrier.arrive(empty.index(s), count=1)


@gluon.jit
def _mma_partition(x_bufs, wbf_bufs, conv, empty, k_tiles, acc_layout: gl.constexpr):
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_M: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = wbf_bufs.type.shape[1]
    acc = gl.zeros((BLOCK_M, BLOCK_N), dtype=gl.float32, layout=acc_layout)
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(conv.index(s), (k // STAGES) & 1)
        acc = warpgroup_mma(x_bufs.index(s), wbf_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        # the wgmma of step k - 1 has completed: its stage may be refilled
        mbarrier.arrive(empty.index((k + STAGES - 1) % STAGES), count=1, pred=k > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    return (acc, )  # warp_specialize takes the default partition's results as a tuple


@gluon.jit
def _grouped(pid, tiles_a, tiles_b, GROUP: gl.constexpr):
    """(tile along a, tile along b) of program ``pid``: GROUP consecutive a tiles per b tile."""
    per_group = GROUP * tiles_b
    first = (pid // per_group) * GROUP
    rows = gl.minimum(tiles_a - first, GROUP)
    return first + (pid % per_group) % rows, (pid % per_group) // rows


@constexpr_function
def _instr_n(BLOCK_N):
    n = 256
    while BLOCK_N % n:
        n -= 8
    return n


@gluon.jit
def _w8a16_ws_kernel(x_desc, w_desc, ws_ptr, y_ptr, M, N, K, stride_ym, GROUP_M: gl.constexpr,
                     wbf_layout: gl.constexpr, STAGES: gl.constexpr, WIDEN_WARPS: gl.constexpr,
                     WIDEN_REGS: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    # grouped tile order: GROUP_M row tiles share each W column tile while it is in L2
    pid_m, pid_n = _grouped(gl.program_id(0), gl.cdiv(M, BLOCK_M), gl.cdiv(N, BLOCK_N), GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    k_tiles = gl.cdiv(K, BLOCK_K)

    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w8_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    wbf_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, BLOCK_K], wbf_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    conv = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(conv.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # the widening and the wgmma both release a stage

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, _instr_n(BLOCK_N), 16])
    acc, = gl.warp_specialize([
        (_mma_partition, (x_bufs, wbf_bufs, conv, empty, k_tiles, acc_layout)),
        # the widening first, so its warps are a warpgroup of their own (registers are reassigned per warpgroup)
        (_widen_partition, (w8_bufs, wbf_bufs, ready, conv, empty, k_tiles)),
        (_load_partition, (x_desc, w_desc, x_bufs, w8_bufs, ready, empty, off_m, off_n, k_tiles)),
    ], [WIDEN_WARPS, 1], [WIDEN_REGS, 24])

    # epilogue: per-output-channel scale, bf16 out (K tails are zero-filled by TMA, so they add nothing)
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    acc = gl.convert_layout(acc, out_layout)
    rows_i = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, out_layout))
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, out_layout))
    ws = gl.load(ws_ptr + cols, mask=cols < N, other=0.0)
    y = (acc * ws[None, :]).to(gl.bfloat16)
    mask = (rows_i < M)[:, None] & (cols < N)[None, :]
    gl.store(y_ptr + rows_i[:, None] * stride_ym + cols[None, :], y, mask=mask)


def _check(name, x, qweight):
    """The operands TMA descriptors can describe: 2-D, last stride 1, rows and base 16-byte aligned."""
    if x.dim() != 2 or x.dtype != torch.bfloat16 or qweight.dtype != torch.int8 or qweight.shape[1] != x.shape[1]:
        raise TypeError(f"{name}: bf16 x [M, K] and int8 qweight [N, K] expected")
    for t in (x, qweight):
        if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            raise ValueError(f"{name}: operands need a last stride of 1 and 16-byte aligned rows (TMA), got strides "
                             f"{tuple(t.stride())}")


def _out(out, M, N, device):
    if out is None:
        return torch.empty((M, N), device=device, dtype=torch.bfloat16)
    if out.shape != (M, N) or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{M}, {N}] bf16 tensor")
    return out


def default_config() -> dict:
    # 128x256 tiles do not compile in this 13-warp kernel (ptxas fits the accumulator in .maxnreg 128)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, STAGES=4, GROUP_M=8, num_warps=8, WIDEN_WARPS=4, WIDEN_REGS=88,
                maxnreg=128)


def layouts(cfg: dict):
    """(x, int8 W, widened W) shared layouts of a config's tiles."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    return (gl.NVMMASharedLayout.get_default_for([bm, bk], gl.bfloat16),
            gl.NVMMASharedLayout.get_default_for([bn, bk], gl.int8),
            gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16))


def w8a16_ws(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, config: dict | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] bf16 (K-contiguous, 16-byte aligned rows), qweight [N, K] int8, wscale [N] fp32 -> y [M, N] bf16
    (written into ``out`` if given: contiguous [M, N] bf16)."""
    cfg = config or default_config()
    _check("w8a16_ws", x, qweight)
    M, K = x.shape
    N = qweight.shape[0]
    y = _out(out, M, N, x.device)
    if M == 0 or N == 0:
        return y
    xl, wl, bl = layouts(cfg)
    x_desc = TensorDescriptor.from_tensor(x, [cfg["BLOCK_M"], cfg["BLOCK_K"]], xl)
    w_desc = TensorDescriptor.from_tensor(qweight, [cfg["BLOCK_N"], cfg["BLOCK_K"]], wl)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), )
    _w8a16_ws_kernel[grid](x_desc, w_desc, wscale, y, M, N, K, y.stride(0), GROUP_M=cfg["GROUP_M"], wbf_layout=bl,
                           STAGES=cfg["STAGES"], WIDEN_WARPS=cfg["WIDEN_WARPS"], WIDEN_REGS=cfg["WIDEN_REGS"],
                           num_warps=cfg["num_warps"], maxnreg=cfg["maxnreg"])
    return y


# The transposed form (yᵀ = W · xᵀ): the int8 weight tile is the wgmma's A operand, loaded from shared memory into
# registers and widened there (no bf16 copy written to and read back from shared memory: the shared-memory traffic
# per weight is the TMA's 1-byte write and one 1-byte read), x's tile is B. A 1-warp partition streams both by TMA;
# the default partition's two warpgroups (64 weight rows each) widen and issue wgmma, so one warpgroup's widening
# overlaps the other's tensor-core work.
@gluon.jit
def _transposed_stages(x_desc, w_desc, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """The transposed forms' stage ring: x and int8 W tiles, a ready barrier (the TMA landed) and an empty one
    (released by each of CONSUMERS) per stage."""
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w8_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    return x_bufs, w8_bufs, ready, empty


@gluon.jit
def _swap_mma_partition(x_bufs, w8_bufs, ready, empty, k_tiles, acc_layout: gl.constexpr):
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_N: gl.constexpr = w8_bufs.type.shape[1]
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    acc = gl.zeros((BLOCK_N, BLOCK_T), dtype=gl.float32, layout=acc_layout)
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        a = w8_bufs.index(s).load(a_layout).to(gl.bfloat16)
        acc = warpgroup_mma(a, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc, a = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a))
        mbarrier.arrive(empty.index((k + STAGES - 1) % STAGES), count=1, pred=k > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    return (acc, )


@gluon.jit
def _w8a16_ws_swap_kernel(x_desc, w_desc, ws_ptr, y_ptr, M, N, K, stride_ym, GROUP_N: gl.constexpr,
                          STAGES: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_T: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    # grouped order: GROUP_N weight tiles share each token tile while it is in L2
    pid_n, pid_t = _grouped(gl.program_id(0), gl.cdiv(N, BLOCK_N), gl.cdiv(M, BLOCK_T), GROUP_N)
    off_n = pid_n * BLOCK_N
    off_t = pid_t * BLOCK_T
    k_tiles = gl.cdiv(K, BLOCK_K)

    x_bufs, w8_bufs, ready, empty = _transposed_stages(x_desc, w_desc, STAGES, 1)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, _instr_n(BLOCK_T), 16])
    acc, = gl.warp_specialize([
        (_swap_mma_partition, (x_bufs, w8_bufs, ready, empty, k_tiles, acc_layout)),
        (_load_partition, (x_desc, w_desc, x_bufs, w8_bufs, ready, empty, off_t, off_n, k_tiles)),
    ], [1], [24])

    # epilogue: acc is yᵀ's tile [weight rows, tokens]; stored transposed, tokens along memory's slow axis
    out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, num_warps], [0, 1])
    acc = gl.convert_layout(acc, out_layout)
    n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, out_layout))
    t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out_layout))
    ws = gl.load(ws_ptr + n, mask=n < N, other=0.0)
    y = (acc * ws[:, None]).to(gl.bfloat16)
    gl.store(y_ptr + t[None, :] * stride_ym + n[:, None], y, mask=(n < N)[:, None] & (t < M)[None, :])


def _transposed_descs(x, qweight, cfg):
    """TMA descriptors of the transposed forms' x [BLOCK_T, BLOCK_K] and W [BLOCK_N, BLOCK_K] tiles, and the grid."""
    bt, bn, bk = cfg["BLOCK_T"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    x_desc = TensorDescriptor.from_tensor(x, [bt, bk], gl.NVMMASharedLayout.get_default_for([bt, bk], gl.bfloat16))
    w_desc = TensorDescriptor.from_tensor(qweight, [bn, bk], gl.NVMMASharedLayout.get_default_for([bn, bk], gl.int8))
    return x_desc, w_desc, (triton.cdiv(x.shape[0], bt) * triton.cdiv(qweight.shape[0], bn), )


def swap_config() -> dict:
    return dict(BLOCK_N=128, BLOCK_T=128, BLOCK_K=64, STAGES=4, GROUP_N=8, num_warps=8, maxnreg=None)


def w8a16_ws_swap(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, config: dict | None = None,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """w8a16_ws's product in the transposed form (see above): the same arguments and result."""
    cfg = config or swap_config()
    _check("w8a16_ws_swap", x, qweight)
    M, K = x.shape
    N = qweight.shape[0]
    y = _out(out, M, N, x.device)
    if M == 0 or N == 0:
        return y
    x_desc, w_desc, grid = _transposed_descs(x, qweight, cfg)
    _w8a16_ws_swap_kernel[grid](x_desc, w_desc, wscale, y, M, N, K, y.stride(0), GROUP_N=cfg["GROUP_N"],
                                STAGES=cfg["STAGES"], num_warps=cfg["num_warps"], maxnreg=cfg["maxnreg"])
    return y


# The transposed form with its two warpgroups as partitions of their own (thirtieth session, compiled, not yet run):
# in w8a16_ws_swap both warpgroups are one 8-warp partition, whose barriers keep them in step, so both widen at the
# same time and then both wait on the tensor cores. Here each warpgroup owns 64 weight rows of the tile, its
# accumulator and its epilogue, and runs its own loop: the two drift apart, one widening while the other's wgmma runs.
@gluon.jit
def _pp_consumer(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles,
                 HALF: gl.constexpr, GATED: gl.constexpr):
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    ROWS: gl.constexpr = w8_bufs.type.shape[1] // 2
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, _instr_n(BLOCK_T), 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    acc = gl.zeros((ROWS, BLOCK_T), dtype=gl.float32, layout=acc_layout)
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        a = w8_bufs.index(s).slice(HALF * ROWS, ROWS, dim=0).load(a_layout).to(gl.bfloat16)
        acc = warpgroup_mma(a, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc, a = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a))
        mbarrier.arrive(empty.index((k + STAGES - 1) % STAGES), count=1, pred=k > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    if GATED:
        # rows interleave gate and up by 8 (interleave_gate_up): a wgmma thread holds rows r and r + 8 of every 16,
        # an output's gate and up value, so SiLU(g)·u pairs them in registers; N counts weight rows (2 per output)
        pair_layout: gl.constexpr = gl.BlockedLayout([16, 1], [4, 8], [1, gl.num_warps()], [0, 1])
        accp = gl.convert_layout(acc, pair_layout)  # each thread: 16 consecutive rows (8 gate, their 8 up)
        n = off_n + HALF * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, pair_layout))
        y = accp * gl.load(ws_ptr + n, mask=n < N, other=0.0)[:, None]
        g, u = gl.split(gl.permute(gl.reshape(y, (ROWS // 16, 2, 8, BLOCK_T)), (0, 2, 3, 1)))
        h = gl.reshape(g / (1.0 + gl.exp(-g)) * u, (ROWS // 2, BLOCK_T)).to(gl.bfloat16)
        out_layout: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, gl.num_warps()], [0, 1])
        h = gl.convert_layout(h, out_layout)
        o = (off_n + HALF * ROWS) // 2 + gl.arange(0, ROWS // 2, layout=gl.SliceLayout(1, out_layout))
        t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out_layout))
        gl.store(y_ptr + t[None, :] * stride_ym + o[:, None], h, mask=(o < N // 2)[:, None] & (t < M)[None, :])
    else:
        lin_layout: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, gl.num_warps()], [0, 1])
        accb = gl.convert_layout(acc, lin_layout)
        nl = off_n + HALF * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, lin_layout))
        tl_ = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, lin_layout))
        yl = (accb * gl.load(ws_ptr + nl, mask=nl < N, other=0.0)[:, None]).to(gl.bfloat16)
        gl.store(y_ptr + tl_[None, :] * stride_ym + nl[:, None], yl, mask=(nl < N)[:, None] & (tl_ < M)[None, :])


# one function per (warpgroup, gated): a constexpr passed through warp_specialize's argument tuples arrives as a
# runtime value (triton 3.6), so the choices are made in the callee's body
@gluon.jit
def _pp_consumer0(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles):
    _pp_consumer(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles, 0, False)


@gluon.jit
def _pp_consumer1(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles):
    _pp_consumer(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles, 1, False)


@gluon.jit
def _pp_gated0(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles):
    _pp_consumer(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles, 0, True)


@gluon.jit
def _pp_gated1(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles):
    _pp_consumer(x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles, 1, True)


@gluon.jit
def _w8a16_ws_pp_kernel(x_desc, w_desc, ws_ptr, y_ptr, M, N, K, stride_ym, GROUP_N: gl.constexpr,
                        STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, GATED: gl.constexpr,
                        num_warps: gl.constexpr):
    BLOCK_T: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0]
    pid_n, pid_t = _grouped(gl.program_id(0), gl.cdiv(N, BLOCK_N), gl.cdiv(M, BLOCK_T), GROUP_N)
    off_n = pid_n * BLOCK_N
    off_t = pid_t * BLOCK_T
    k_tiles = gl.cdiv(K, BLOCK_K)

    # each consumer releases a stage once its wgmma on it is done
    x_bufs, w8_bufs, ready, empty = _transposed_stages(x_desc, w_desc, STAGES, 2)
    args = (x_bufs, w8_bufs, ready, empty, ws_ptr, y_ptr, M, N, stride_ym, off_t, off_n, k_tiles)
    loads = (x_desc, w_desc, x_bufs, w8_bufs, ready, empty, off_t, off_n, k_tiles)
    if GATED:
        gl.warp_specialize([(_pp_gated0, args), (_pp_gated1, args), (_load_partition, loads)], [4, 1],
                           [CONSUMER_REGS, 24])
    else:
        gl.warp_specialize([(_pp_consumer0, args), (_pp_consumer1, args), (_load_partition, loads)], [4, 1],
                           [CONSUMER_REGS, 24])


def pp_config() -> dict:
    return dict(BLOCK_N=128, BLOCK_T=256, BLOCK_K=64, STAGES=4, GROUP_N=8, num_warps=4, CONSUMER_REGS=232,
                maxnreg=None)


def interleave_gate_up(t: torch.Tensor) -> torch.Tensor:
    """A stacked gate | up tensor ([2H, ...] weights or [2H] scales) with its rows interleaved by 8 (8 gate rows,
    then the same outputs' 8 up rows), the layout w8a16_ws_pp(gated=True) reads; H a multiple of 8. Done once, at
    conversion time: the weights are constant."""
    H = t.shape[0] // 2
    if t.shape[0] % 16:
        raise ValueError(f"interleave_gate_up: 2H = {t.shape[0]} rows, H must be a multiple of 8")
    g, u = t[:H].reshape(H // 8, 8, *t.shape[1:]), t[H:].reshape(H // 8, 8, *t.shape[1:])
    return torch.stack((g, u), 1).reshape(t.shape).contiguous()


def w8a16_ws_pp(x: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, config: dict | None = None,
                out: torch.Tensor | None = None, gated: bool = False) -> torch.Tensor:
    """w8a16_ws_swap's product with its warpgroups as partitions of their own (see above). ``gated``: qweight and
    wscale are a gate | up pair through interleave_gate_up ([2H, K], [2H]) and
    y = SiLU(x·Wgᵀ·sg) ⊙ (x·Wuᵀ·su), [M, H]."""
    cfg = config or pp_config()
    _check("w8a16_ws_pp", x, qweight)
    M, K = x.shape
    N = qweight.shape[0]
    if gated and N % 16:
        raise ValueError("w8a16_ws_pp: a gated weight has 2H rows, H a multiple of 8")
    y = _out(out, M, N // 2 if gated else N, x.device)
    if M == 0 or N == 0:
        return y
    x_desc, w_desc, grid = _transposed_descs(x, qweight, cfg)
    _w8a16_ws_pp_kernel[grid](x_desc, w_desc, wscale, y, M, N, K, y.stride(0), GROUP_N=cfg["GROUP_N"],
                              STAGES=cfg["STAGES"], CONSUMER_REGS=cfg["CONSUMER_REGS"], GATED=gated,
                              num_warps=cfg["num_warps"], maxnreg=cfg["maxnreg"])
    return y
