"""W8A8 GEMM for Hopper as a warp-specialized Gluon kernel: y = act(x_q · W_qᵀ · (s_x ⊗ s_w) + b), or the gated form
act(gate) ⊙ up on a stacked gate | up weight; x_q e4m3 quantized per token (act_quant), e4m3 weights, bf16 or fp16
out.

Why: on the H200 the 8-bit blocks from M=1024 run at the 700 W power cap, so a block's sustained time is its joules
over ~690 W. The energy counter (thirty-fourth session, `.ci/energy_parts.py`) put Triton's gated fp8 GEMM (tl.dot
tiles, every tuner candidate, pointer or TMA loads) at 157-159 mJ per Llama gate/up product at M=1024 and 1229-1240
at 8192, against 132-133 and 1013-1038 for cuBLAS's: ~20% more energy, ~35% more cycles per product under the cap.
The down GEMM was even. This is w8a16_ws's layout with both operands straight from shared memory:

* the same 1-warp TMA partition (w8a16_ws._load_partition) streams x [BLOCK_T tokens, BLOCK_K] and W [128 rows,
  BLOCK_K] (gated: 64 gate rows and their 64 up rows) into a ring of stages;
* two consumer warpgroups, 64 weight rows each, issue yᵀ = W · xᵀ as wgmma with A and B in shared memory (no
  register operand: nothing to widen), one group left in flight while the next stage's wgmma is issued, and release
  a stage once the group reading it is done;
* the epilogue scales by s_w (rows) and s_x (tokens), adds the bias, applies the activation; gated: the up consumer
  hands its values over through shared memory (as w8a16_ws).

The products accumulate in fp32 with Hopper's fast accumulation (Triton's sm_90 default, as tl.dot and cuBLAS's
rowwise_fast). int8 is not offered: triton 3.6 cannot lower an int8 wgmma with this B operand (the transposed x tile;
"WGMMA type or shape is not supported" at compile time). Gluon kernels do not run in Triton's interpreter: tested on the GPU
(tests/test_w8a8_ws.py, cuda) and compiled for sm_90 on the CPU with the H200's triton
(tests/test_triton36_compile.py).
"""
from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from fused.kernels.w8a16_ws import ACTS, _activation, _instr_n, _load_partition, _tile_offsets


@gluon.jit
def _consumer(x_bufs, w8_bufs, ready, empty, u_buf, u_bar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M, N_OUT,
              stride_ym, off_t, off_o, up_off, k_tiles, HALF: gl.constexpr, GATED: gl.constexpr, ACT: gl.constexpr,
              HAS_BIAS: gl.constexpr):
    STAGES: gl.constexpr = x_bufs.type.shape[0]
    BLOCK_T: gl.constexpr = x_bufs.type.shape[1]
    BLOCK_K: gl.constexpr = x_bufs.type.shape[2]
    ROWS: gl.constexpr = w8_bufs.type.shape[1] // 2
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, _instr_n(BLOCK_T), 32])
    acc = gl.zeros((ROWS, BLOCK_T), dtype=gl.float32, layout=acc_layout)
    for k in range(k_tiles):
        s = k % STAGES
        mbarrier.wait(ready.index(s), (k // STAGES) & 1)
        w8 = w8_bufs.index(s).slice(HALF * ROWS, ROWS, dim=0)
        acc = warpgroup_mma(w8, x_bufs.index(s).permute((1, 0)), acc, is_async=True)
        # one group in flight: the one just issued; the one before it is done, so its stage goes back to the loader
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if k > 0:
            mbarrier.arrive(empty.index((k - 1) % STAGES), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((k_tiles - 1) % STAGES), count=1)

    # epilogue on yᵀ's tile [rows, tokens]: s_w along rows, s_x along tokens, bias, act (gated: up handed over)
    rows_l: gl.constexpr = gl.SliceLayout(1, acc_layout)
    t_acc = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, acc_layout))
    xs = gl.load(xs_ptr + t_acc, mask=t_acc < M, other=0.0)[None, :]
    accf = acc * xs
    if GATED:
        o = off_o + gl.arange(0, ROWS, layout=rows_l)
        if HALF == 1:  # up: row up_off + o of (su, bu)
            y = accf * gl.load(su_ptr + up_off + o, mask=o < N_OUT, other=0.0)[:, None]
            if HAS_BIAS:
                y += gl.load(bu_ptr + up_off + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
            u_buf.store(y)
            mbarrier.arrive(u_bar, count=1)
        else:
            y = accf * gl.load(ws_ptr + o, mask=o < N_OUT, other=0.0)[:, None]
            if HAS_BIAS:
                y += gl.load(b_ptr + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
            mbarrier.wait(u_bar, 0)
            y = _activation(y, ACT) * u_buf.load(acc_layout)
    else:
        o = off_o + HALF * ROWS + gl.arange(0, ROWS, layout=rows_l)
        y = accf * gl.load(ws_ptr + o, mask=o < N_OUT, other=0.0)[:, None]
        if HAS_BIAS:
            y += gl.load(b_ptr + o, mask=o < N_OUT, other=0.0).to(gl.float32)[:, None]
        y = _activation(y, ACT)
    if HALF == 0 or not GATED:
        out_layout: gl.constexpr = gl.BlockedLayout([8, 1], [8, 4], [1, gl.num_warps()], [0, 1])
        y = gl.convert_layout(y.to(y_ptr.dtype.element_ty), out_layout)
        o = gl.convert_layout(o, gl.SliceLayout(1, out_layout))
        t = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, out_layout))
        gl.store(y_ptr + t[None, :] * stride_ym + o[:, None], y, mask=(o < N_OUT)[:, None] & (t < M)[None, :])


@gluon.jit
def _w8a8_ws_kernel(x_desc, w_desc, wu_desc, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M, N_OUT, K, stride_ym,
                    up_off, GROUP_N: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                    GATED: gl.constexpr, ACT: gl.constexpr, HAS_BIAS: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_T: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    W_ROWS: gl.constexpr = w_desc.block_type.shape[0]  # one TMA box: the tile's rows (gated: half of them)
    TILE_ROWS: gl.constexpr = 2 * W_ROWS if GATED else W_ROWS
    off_o, off_t = _tile_offsets(gl.program_id(0), M, N_OUT, x_desc, w_desc, GROUP_N)
    k_tiles = gl.cdiv(K, BLOCK_K)

    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BLOCK_T, BLOCK_K], x_desc.layout)
    w8_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, TILE_ROWS, BLOCK_K], w_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # each consumer releases a stage once its wgmma on it is done
    U_ROWS: gl.constexpr = TILE_ROWS // 2 if GATED else 1  # the gated hand-over buffer (fp32 up values)
    u_buf = gl.allocate_shared_memory(gl.float32, [U_ROWS, BLOCK_T], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    u_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(u_bar, count=1)

    gl.warp_specialize([
        (_consumer, (x_bufs, w8_bufs, ready, empty, u_buf, u_bar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M,
                     N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, 0, GATED, ACT, HAS_BIAS)),
        (_consumer, (x_bufs, w8_bufs, ready, empty, u_buf, u_bar, xs_ptr, ws_ptr, su_ptr, b_ptr, bu_ptr, y_ptr, M,
                     N_OUT, stride_ym, off_t, off_o, up_off, k_tiles, 1, GATED, ACT, HAS_BIAS)),
        (_load_partition, (x_desc, w_desc, wu_desc, x_bufs, w8_bufs, ready, empty, M, N_OUT, off_t, off_o, up_off,
                           k_tiles, GROUP_N, False, GATED)),
    ], [4, 1], [CONSUMER_REGS, 24])


def default_config() -> dict:
    """256 tokens x 128 weight rows per tile (a 64 x 256 accumulator per consumer), 128-byte K steps (48 KB a
    stage): 4 stages, 3 for the gated form (its 64 KB hand-over buffer)."""
    return dict(BLOCK_T=256, BLOCK_K=128, STAGES=4, GATED_STAGES=3, GROUP_N=8, CONSUMER_REGS=232)


def supports(xq: torch.Tensor, qweight: torch.Tensor, gated: bool = False) -> str | None:
    """None if w8a8_ws runs these operands, else why not (dispatch offers it only then)."""
    if not (xq.is_cuda and torch.cuda.get_device_capability(xq.device) == (9, 0)):
        return "Hopper (sm_90) only"
    if qweight.dtype != torch.float8_e4m3fn or xq.dtype != qweight.dtype:
        return "e4m3 weights and x quantized to e4m3"
    if qweight.shape[1] % 16:
        return "K a multiple of 16 (TMA rows)"
    if gated and qweight.shape[0] % 2:
        return "a stacked gate | up weight has an even row count"
    return None


def _descriptor(t: torch.Tensor, block):
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv))


def w8a8_ws(xq: torch.Tensor, x_scale: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor,
            bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
            out_dtype: torch.dtype = torch.bfloat16, config: dict | None = None,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """xq [M, K] float8_e4m3fn (act_quant's rows; rows past M are not read), x_scale [M] fp32, qweight [N, K]
    float8_e4m3fn, wscale [N] fp32, bias [N] or None -> y [M, N] in ``out_dtype`` (bf16 or fp16); ``gated``:
    qweight, wscale and bias stack gate | up ([2H, K], [2H]) and y = act(gate) ⊙ up, [M, H]. Written into ``out``
    if given (contiguous)."""
    if (xq.dim() != 2 or qweight.dtype != torch.float8_e4m3fn or xq.dtype != qweight.dtype
            or qweight.shape[1] != xq.shape[1]):
        raise TypeError("w8a8_ws: xq [M, K] and qweight [N, K], both float8_e4m3fn; got {xq.dtype} {tuple(xq.shape)} and {qweight.dtype} "
                        f"{tuple(qweight.shape)}")
    if act not in ACTS:
        raise ValueError(f"w8a8_ws: act must be one of {ACTS}, got {act!r}")
    if out_dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"w8a8_ws: out_dtype must be bfloat16 or float16, got {out_dtype}")
    if qweight.shape[1] % 16:
        raise ValueError(f"w8a8_ws: K must be a multiple of 16 (TMA rows), got {qweight.shape[1]}")
    if gated and qweight.shape[0] % 2:
        raise ValueError(f"w8a8_ws: a stacked gate | up weight needs an even row count, got {qweight.shape[0]}")
    M = x_scale.shape[0]
    if xq.shape[0] < M:
        raise ValueError(f"w8a8_ws: {M} token scales for {xq.shape[0]} rows of xq")
    K = xq.shape[1]
    cfg = dict(default_config(), **(config or {}))
    N = qweight.shape[0]
    N_OUT = N // 2 if gated else N
    if out is None:
        out = torch.empty((M, N_OUT), device=xq.device, dtype=out_dtype)
    elif out.shape != (M, N_OUT) or out.dtype != out_dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{M}, {N_OUT}] {out_dtype} tensor")
    if M == 0 or N_OUT == 0:
        return out
    xq = xq[:M]
    # TMA wants 16-byte aligned rows and bases: other views are copied (the weight is contiguous from conversion)
    if xq.stride(1) != 1 or xq.stride(0) % 16 or xq.data_ptr() % 16:
        xq = xq.contiguous()
    bt, bk = cfg["BLOCK_T"], cfg["BLOCK_K"]
    w_rows = 64 if gated else 128
    w_desc = _descriptor(qweight.contiguous(), [w_rows, bk])
    b = wscale if bias is None else bias
    tiles = triton.cdiv(M, bt) * triton.cdiv(N_OUT, w_rows)
    _w8a8_ws_kernel[(tiles, )](_descriptor(xq, [bt, bk]), w_desc, w_desc, x_scale, wscale, wscale, b, b, out, M,
                               N_OUT, K, out.stride(0), N_OUT, GROUP_N=cfg["GROUP_N"],
                               STAGES=cfg["GATED_STAGES" if gated else "STAGES"], CONSUMER_REGS=cfg["CONSUMER_REGS"],
                               GATED=gated, ACT=act, HAS_BIAS=bias is not None, num_warps=4)
    return out
