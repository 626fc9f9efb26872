"""2:4-sparse fused linear: y = act((x · Wᵀ) · s_w + b), W stored packed (sparsity.packing) and expanded
in registers; the gated form h = act(x·W_gᵀ·s_g + b_g) ⊙ (x·W_uᵀ·s_u + b_u) on a stacked [2H, K] weight.

x [M, K] (fp16/bf16/fp32, any strides); values [N, K/2] int8 / float8_e4m3fn / bfloat16 (the kept entries),
meta [N, ceil(K/8)] uint8 (2-bit positions) or the same bytes tiled as cuSPARSELt keeps them, [N/64, K/64, 512]
(sparsity.packing.tile_meta: one buffer then serves cuSPARSELt and these kernels; the loads go through
meta_row_off / meta_col_off), s_w [N] fp32 or None (bf16 values), b [N] or None
-> y [M, N] (gated: [M, N/2]) in x's dtype.
Reference: fused.reference.sparse24_linear_ref / sparse24_gated_ref (unpack -> dense -> linear_ref).

Each program owns a BLOCK_M × BLOCK_N output tile and streams K in BLOCK_K steps. Per step and row it
reads BLOCK_K/2 contiguous values and BLOCK_K/8 contiguous meta bytes (the packed weight is 0.625 bytes per
weight for 8-bit values: the decode win is fewer bytes), decodes the 2-bit positions with a broadcast
shift, builds the dense [BLOCK_N, BLOCK_K] tile and dots it with the x tile. Weight-only with 8-bit values and
16-bit x (`_expand_24_16`): the kept values are widened to x's dtype first (exact: |int8| <= 127 and every
e4m3 value are bf16 and fp16 values) and each 2:4 group is assembled as two 32-bit words of two 16-bit
entries by shifts and ORs (sm_90: 1193 instead of 2311 instructions per gated 64×64×128 step, no layout
round trip through shared memory). Otherwise (W8A8, bf16 values, fp32 x) two `tl.where`s on the raw value
bits (`_expand_24`). For small M (decode) there is one M tile: each program streams its BLOCK_N rows once.

Weight-only (DOT "native"/"fp32") or dynamic W8A8 (DOT "int8"/"fp8": x quantized per token by the launcher
with lowbit.quantize_activation, the dot in int8 -> int32 or fp8 -> fp32, scaled by s_x·s_w).
"""

import torch
import triton
import triton.language as tl

from fused.kernels import INTERPRET, cdiv, dot_mode
from fused.kernels.epilogue import activation, int8_to_f32
from fused.kernels.launch import empty, launch_kernel
from fused.kernels.tuning import m_bucket, pick

VALUE_DTYPES = (torch.int8, torch.float8_e4m3fn, torch.bfloat16)


@triton.jit
def meta_row_off(rows, stride_mn, TILED: tl.constexpr):
    """Offset of row ``rows``' meta bytes: rows · stride for row-major meta; for tiled meta (stride = one row
    tile of 64 rows) the row's place in cuSPARSELt's bit-interleaved 512-byte tiles (sparsity.packing)."""
    if TILED:
        return (rows >> 6) * stride_mn + ((rows >> 3) & 1) + ((rows & 7) << 4) + (((rows >> 4) & 3) << 7)
    else:
        return rows * stride_mn


@triton.jit
def meta_col_off(b, TILED: tl.constexpr):
    """Offset of meta byte ``b`` of a row (row-major: b; tiled: its place among the row's 512-byte tiles).
    Row and column offsets add up, so tiles and loops keep their row-major shape."""
    if TILED:
        return ((b >> 3) << 9) + (((b >> 2) & 1) << 1) + ((b & 1) << 2) + (((b >> 1) & 1) << 3)
    else:
        return b


@triton.jit
def meta_chunks(m_ptr, row0, k0, K, stride_mn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """[BLOCK_N, BLOCK_K/8] meta bytes of rows row0.. (row0 % BLOCK_N == 0, BLOCK_N 16 / 32 / 64) from tiled meta:
    in cuSPARSELt's tiles those rows' bytes for 64 columns of K are one contiguous run of BLOCK_N·8 bytes, so the
    load is BLOCK_K/64 wide runs and the bytes are put in row order in registers (the in-tile offset's bits,
    low to high: n3, b2, b0, b1, n0..n2, n4, n5; see sparsity.packing)."""
    T: tl.constexpr = BLOCK_K // 64
    t = tl.arange(0, T)
    offs = ((row0 >> 6) * stride_mn + (k0 // 64) * 512 + (row0 & 63) * 8
            + t[:, None] * 512 + tl.arange(0, BLOCK_N * 8)[None, :])
    if EVEN_K:
        m = tl.load(m_ptr + offs)
    else:
        m = tl.load(m_ptr + offs, mask=(k0 // 64 + t < K // 64)[:, None], other=0)
    m = tl.reshape(m, (T, BLOCK_N // 16, 8, 2, 2, 2, 2))  # t, n5n4, n2n1n0, b1, b0, b2, n3
    m = tl.permute(m, (1, 6, 2, 0, 5, 3, 4))               # n5n4, n3, n2n1n0, t, b2, b1, b0
    return tl.reshape(m, (BLOCK_N, BLOCK_K // 8))


def meta_args(meta: torch.Tensor, rows: int, k: int, where: str) -> tuple[int, bool]:
    """(row stride, TILED) for a kernel launch; a ValueError when meta fits neither form for [rows, k]."""
    if meta.dtype != torch.uint8:
        raise ValueError(f"{where}: meta must be uint8, got {meta.dtype}")
    if meta.dim() == 3:
        if rows % 64 or k % 64 or tuple(meta.shape) != (rows // 64, k // 64, 512) or not meta.is_contiguous():
            raise ValueError(f"{where}: tiled meta must be a contiguous [{rows // 64}, {k // 64}, 512] for a "
                             f"[{rows}, {k}] weight (both multiples of 64), got {tuple(meta.shape)}")
        return meta.stride(0), True
    if meta.dim() != 2 or tuple(meta.shape) != (rows, (k // 4 + 1) // 2) or meta.stride(1) != 1:
        raise ValueError(f"{where}: meta must be [{rows}, {(k // 4 + 1) // 2}] contiguous along K (or tiled "
                         f"[{rows // 64}, {k // 64}, 512]), got {tuple(meta.shape)}")
    return meta.stride(0), False


@triton.jit
def _expand_24(v, meta, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """v [BLOCK_N, BLOCK_K/2] kept values, meta [BLOCK_N, BLOCK_K/8] uint8 -> dense [BLOCK_N, BLOCK_K].

    Meta byte b holds the positions of values 4b..4b+3 in bit pairs (0-1, 2-3, 4-5, 6-7); values 2g, 2g+1
    belong to group g, at columns 4g + position. Positions within a group are distinct (pack_24 ensures it)."""
    shifts = 2 * tl.arange(0, 4)
    pos = (meta.to(tl.int32)[:, :, None] >> shifts[None, None, :]) & 3           # [BN, BK/8, 4]
    i0, i1 = tl.split(tl.reshape(pos, (BLOCK_N, BLOCK_K // 4, 2)))              # [BN, BK/4] each
    v0, v1 = tl.split(tl.reshape(v, (BLOCK_N, BLOCK_K // 4, 2)))
    col = tl.arange(0, 4)[None, None, :]
    zero = tl.zeros((BLOCK_N, BLOCK_K // 4, 4), dtype=v.dtype)
    w = tl.where(col == i0[:, :, None], v0[:, :, None], tl.where(col == i1[:, :, None], v1[:, :, None], zero))
    return tl.reshape(w, (BLOCK_N, BLOCK_K))


# EXPAND="prmt" (8-bit dots, W8A8): each 2:4 group becomes its 4 dense bytes in ONE prmt.b32 from the group's two
# kept values (bytes 0, 1 of a word) and zero bytes (the second source is 0): the selector starts as 0x4444 (every
# entry a zero byte) and XORs entry p0 to 0 (0x4 << 4·p0) and entry p1 to 1 (0x5 << 4·p1). sm_90, W8A8 int8 tiled
# kernel: see the SASS counts in examples/results/h200/NOTES.md (nineteenth session, triton 3.6, not yet run on a
# GPU). Tuner candidates only with sparse24_linear.S24_PRMT = True until the cuda test (bit-equal to the byte selects) has passed
# on the H200; the interpreter runs its Triton twin (_group_word with ASM off: the same bytes by selects).
S24_PRMT = False


@triton.jit
def _group_word(pair, nib, ASM: tl.constexpr):
    """A 2:4 group's 4 dense bytes as one int32 (byte j = entry j) from its kept values (pair: bytes 0, 1) and
    positions (nib: p0 | p1 << 2). ASM: one prmt.b32 (CUDA); else the same bytes by selects (the interpreter)."""
    if ASM:
        return tl.inline_asm_elementwise("""{
            .reg .b32 s0, s1, t0, t1, sel;
            and.b32 s0, $2, 3;
            shl.b32 s0, s0, 2;
            and.b32 s1, $2, 12;
            shl.b32 t0, 4, s0;
            shl.b32 t1, 5, s1;
            xor.b32 sel, t0, t1;
            xor.b32 sel, sel, 0x4444;
            prmt.b32 $0, $1, 0, sel;
            }""", "=r,r,r", [pair, nib], dtype=tl.int32, is_pure=True, pack=1)
    p0 = nib & 3
    p1 = (nib >> 2) & 3
    v0 = pair & 0xFF
    v1 = (pair >> 8) & 0xFF
    word = tl.zeros_like(pair)
    for j in tl.static_range(4):
        word |= tl.where(p0 == j, v0, tl.where(p1 == j, v1, 0)) << (8 * j)
    return word


@triton.jit
def _expand_24_prmt(v, meta, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ASM: tl.constexpr):
    """_expand_24 by one PRMT per group: v [BLOCK_N, BLOCK_K/2] 8-bit kept values (int8 or uint8 bits), meta
    [BLOCK_N, BLOCK_K/8] -> dense int8 bits [BLOCK_N, BLOCK_K]."""
    G: tl.constexpr = BLOCK_K // 4
    v0, v1 = tl.split(tl.reshape(v, (BLOCK_N, G, 2)))
    pair = (v0.to(tl.int32) & 0xFF) | ((v1.to(tl.int32) & 0xFF) << 8)
    nib = tl.reshape((meta.to(tl.int32)[:, :, None] >> (4 * tl.arange(0, 2))[None, None, :]) & 0xF, (BLOCK_N, G))
    word = _group_word(pair, nib, ASM)
    # byte j of the word is dense entry j of the group; the joins keep a group's 4 entries in one thread, in order
    # (sm_90: the compiler then keeps the word's bytes as they are)
    b0 = word.to(tl.int8)
    b1 = (word >> 8).to(tl.int8)
    b2 = (word >> 16).to(tl.int8)
    b3 = (word >> 24).to(tl.int8)
    return tl.reshape(tl.join(tl.join(b0, b2), tl.join(b1, b3)), (BLOCK_N, BLOCK_K))


@triton.jit
def _expand_24_16(v, meta, VALUE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, dt):
    """_expand_24 for 8-bit values and a 16-bit dot: the kept values are widened first (half the
    conversions), then each 2:4 group is built as two 32-bit words of two 16-bit entries each (positions 0-1
    and 2-3) with shifts and ORs, where the byte-wise selects of _expand_24 cost ~19 sm_90 instructions per
    dense weight (PRMT for every byte). Exact: every int8 and e4m3 value is a bf16 / fp16 value."""
    G: tl.constexpr = BLOCK_K // 4
    pos = (meta.to(tl.int32)[:, :, None] >> (2 * tl.arange(0, 4))[None, None, :]) & 3   # [BN, BK/8, 4]
    p0, p1 = tl.split(tl.reshape(pos, (BLOCK_N, G, 2)))                                  # [BN, G] each
    if VALUE == "fp8":
        w = v.to(tl.float8e4nv, bitcast=True).to(dt)
    else:
        w = int8_to_f32(v).to(dt)
    w0, w1 = tl.split(tl.reshape(w.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF, (BLOCK_N, G, 2)))
    t0 = w0 << ((p0 & 1) * 16)
    t1 = w1 << ((p1 & 1) * 16)
    hi0 = p0 >= 2
    hi1 = p1 >= 2
    lo_pair = tl.where(hi0, 0, t0) | tl.where(hi1, 0, t1)        # entries 0, 1 of the group
    hi_pair = tl.where(hi0, t0, 0) | tl.where(hi1, t1, 0)        # entries 2, 3
    d0 = lo_pair.to(tl.int16).to(dt, bitcast=True)
    d1 = (lo_pair >> 16).to(tl.int16).to(dt, bitcast=True)
    d2 = hi_pair.to(tl.int16).to(dt, bitcast=True)
    d3 = (hi_pair >> 16).to(tl.int16).to(dt, bitcast=True)
    return tl.reshape(tl.join(tl.join(d0, d2), tl.join(d1, d3)), (BLOCK_N, BLOCK_K))


@triton.jit
def _load_dense_tile(v_ptrs, meta, j_ok, VALUE: tl.constexpr, DOT: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, x_dtype, EXPAND: tl.constexpr = "select"):
    """Load one row tile of packed weights (its [BLOCK_N, BLOCK_K/8] meta bytes already loaded) and return it
    dense, transposed [BLOCK_K, BLOCK_N], ready for the dot in DOT's dtype. Masked-off values and meta are 0:
    their columns contribute nothing."""
    v = tl.load(v_ptrs, mask=j_ok, other=0)   # fp8 arrives as uint8 (interpreter: masked fp8 loads fail)
    if VALUE != "float" and DOT != "int8" and DOT != "fp8" and x_dtype != tl.float32:
        # weight-only, 8-bit values, 16-bit x: expand in x's dtype (the interpreter's "fp32" dot widens it)
        w = _expand_24_16(v, meta, VALUE, BLOCK_N, BLOCK_K, x_dtype)
        if DOT == "fp32":
            w = w.to(tl.float32)
        return tl.trans(w)
    if EXPAND != "select" and VALUE != "float":  # "prmt" (asm) or "prmt_ref" (its Triton twin: the interpreter)
        w = _expand_24_prmt(v, meta, BLOCK_N, BLOCK_K, EXPAND == "prmt")
    else:
        w = _expand_24(v, meta, BLOCK_N, BLOCK_K)
    if VALUE == "fp8":
        w = w.to(tl.float8e4nv, bitcast=True)  # 0x00 is +0.0, so the zero fill is exact
    if DOT == "fp32":
        w = w.to(tl.float32)
    elif DOT == "native":
        w = w.to(x_dtype)
    return tl.trans(w)


@triton.jit
def _dot_acc(x, w, acc, DOT: tl.constexpr):
    """acc += x·w with the accumulator dtype named explicitly: int8 dots accumulate in int32, every other
    one in fp32. (triton 3.6 defaults out_dtype to fp32 and asserts it matches acc: an int32 acc without
    out_dtype fails to compile there; 3.9 infers it from acc.)"""
    if DOT == "int8":
        acc = tl.dot(x, w, acc, out_dtype=tl.int32)
    elif DOT == "fp32":
        acc = tl.dot(x, w, acc, input_precision="ieee", out_dtype=tl.float32)
    else:
        acc = tl.dot(x, w, acc, out_dtype=tl.float32)
    return acc


@triton.jit
def _sparse24_kernel(
    x_ptr, xs_ptr, v_ptr, m_ptr, ws_ptr, b_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_vn, stride_mn,
    stride_ym, stride_yn,
    VALUE: tl.constexpr,       # "int8" | "fp8" | "float" (bf16): how to read the value bits
    DOT: tl.constexpr,         # "native" | "fp32" (weight-only) | "int8" | "fp8" (dynamic W8A8)
    GATED: tl.constexpr,       # rows n (gate) and N + n (up) of the stacked weight -> act(gate) * up
    HAS_SCALE: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    TILED: tl.constexpr = False,  # meta in cuSPARSELt's tiles (BLOCK_K a multiple of 64)
    EXPAND: tl.constexpr = "select",  # 8-bit dots: "prmt" builds each group's dense bytes with one PRMT ("prmt_ref":
    # its Triton twin)
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row-tiles share the same weight rows while they are in L2
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, BLOCK_K // 2)   # kept values of the tile
    offs_b = tl.arange(0, BLOCK_K // 8)   # meta bytes of the tile
    m_ok = offs_m < M
    n_ok = offs_n < N
    half_k = K // 2
    meta_k = (K // 4 + 1) // 2

    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    v_ptrs = v_ptr + offs_n[:, None] * stride_vn + offs_j[None, :]
    m_cols = meta_col_off(offs_b, TILED)[None, :]
    m_ptrs = m_ptr + meta_row_off(offs_n, stride_mn, TILED)[:, None] + m_cols
    # a K step moves BLOCK_K/8 bytes along a row-major meta row, BLOCK_K/64 whole tiles along a tiled one
    M_STEP: tl.constexpr = BLOCK_K * 8 if TILED else BLOCK_K // 8
    if GATED:
        vu_ptrs = v_ptrs + N * stride_vn
        mu_ptrs = m_ptr + meta_row_off(N + offs_n, stride_mn, TILED)[:, None] + m_cols

    if DOT == "int8":
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)

    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        k0 = kt * BLOCK_K
        # x is float, int8, or fp8 passed as uint8: an integer 0 fill is valid for every one of them
        x = tl.load(x_ptrs, mask=m_ok[:, None] & (offs_k[None, :] < K - k0), other=0)
        if DOT == "fp8":
            x = x.to(tl.float8e4nv, bitcast=True)
        elif DOT == "fp32":
            x = x.to(tl.float32)
        j_ok = n_ok[:, None] & (offs_j[None, :] < half_k - k0 // 2)
        b_ok = n_ok[:, None] & (offs_b[None, :] < meta_k - k0 // 8)
        w = _load_dense_tile(v_ptrs, tl.load(m_ptrs, mask=b_ok, other=0), j_ok, VALUE, DOT, BLOCK_N, BLOCK_K,
                             x_ptr.dtype.element_ty, EXPAND)
        acc = _dot_acc(x, w, acc, DOT)
        if GATED:
            wu = _load_dense_tile(vu_ptrs, tl.load(mu_ptrs, mask=b_ok, other=0), j_ok, VALUE, DOT, BLOCK_N, BLOCK_K,
                                  x_ptr.dtype.element_ty, EXPAND)
            acc_u = _dot_acc(x, wu, acc_u, DOT)
            vu_ptrs += BLOCK_K // 2
            mu_ptrs += M_STEP
        x_ptrs += BLOCK_K * stride_xk
        v_ptrs += BLOCK_K // 2
        m_ptrs += M_STEP

    y = acc.to(tl.float32)
    if DOT == "int8" or DOT == "fp8":
        xs = tl.load(xs_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
        y = y * xs
    if HAS_SCALE:
        y = y * tl.load(ws_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y = activation(y, ACT)
    if GATED:
        u = acc_u.to(tl.float32)
        if DOT == "int8" or DOT == "fp8":
            u = u * xs
        if HAS_SCALE:
            u = u * tl.load(ws_ptr + N + offs_n, mask=n_ok, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(b_ptr + N + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        y = y * u
    y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def _dot_for(x: torch.Tensor, values: torch.Tensor, dynamic: bool) -> str:
    if dynamic:
        return "int8" if values.dtype == torch.int8 else "fp8"
    mode = dot_mode(x.dtype)
    # bf16 values with fp16 activations: neither casts exactly to the other, so dot in fp32
    if mode == "native" and values.is_floating_point() and values.element_size() == 2 and values.dtype != x.dtype:
        return "fp32"
    return mode


def _expand_for(cfg: dict) -> str:
    """The config's EXPAND for a launch: the interpreter runs no asm, so "prmt" becomes its Triton twin there."""
    ex = cfg.get("EXPAND", "select")
    return "prmt_ref" if (ex == "prmt" and INTERPRET) else ex


def _launch(x, values, meta, wscale, bias, act, dynamic, gated, out, x_scale=None, out_dtype=None):
    from lowbit import quantize_activation

    assert x.dim() == 2 and values.dim() == 2, (x.shape, values.shape, meta.shape)
    assert values.dtype in VALUE_DTYPES, values.dtype
    assert x.shape[1] == 2 * values.shape[1], (x.shape, values.shape)
    assert values.stride(1) == 1
    stride_m, tiled = meta_args(meta, values.shape[0], x.shape[1], "sparse24_linear")
    assert wscale is None or wscale.dtype == torch.float32
    assert not dynamic or values.dtype != torch.bfloat16, "dynamic activations need 8-bit values"
    M, K = x.shape
    rows = values.shape[0]
    N = rows // 2 if gated else rows
    # x_scale: x already quantized per token (W8A8: int8 / e4m3 as the values), the output in out_dtype
    assert x_scale is None or (dynamic and x.dtype == values.dtype and out_dtype is not None), (x.dtype, values.dtype)
    out_dtype = out_dtype or x.dtype
    if out is None:
        out = empty((M, N), device=x.device, dtype=out_dtype)
    assert out.shape == (M, N) and out.dtype == out_dtype, (out.shape, out.dtype)
    if M == 0 or N == 0:
        return out
    dot = _dot_for(x, values, dynamic)
    xs = x_scale
    if dynamic and xs is None:
        x, xs = quantize_activation(x, "int8" if values.dtype == torch.int8 else "float8_e4m3")
        xs = xs.reshape(M).contiguous()
    if dynamic and x.dtype == torch.float8_e4m3fn:
        x = x.view(torch.uint8)
    value = {torch.int8: "int8", torch.float8_e4m3fn: "fp8"}.get(values.dtype, "float")
    v = values.view(torch.uint8) if values.dtype == torch.float8_e4m3fn else values
    dummy = v  # never read when the HAS_* flag is off

    def launch(cfg):
        grid = (cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"]),)
        launch_kernel(_sparse24_kernel, grid,
            x, xs if xs is not None else dummy, v, meta,
            wscale if wscale is not None else dummy, bias if bias is not None else dummy, out,
            M, N, K,
            x.stride(0), x.stride(1),
            v.stride(0), stride_m,
            out.stride(0), out.stride(1),
            VALUE=value, DOT=dot, GATED=gated,
            HAS_SCALE=wscale is not None, HAS_BIAS=bias is not None, ACT=act,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=8, TILED=tiled,
            EXPAND=_expand_for(cfg),
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )

    def cands():
        c = _candidates(M, N, K)
        return c + [dict(cfg, EXPAND="prmt") for cfg in c] if S24_PRMT and dot in ("int8", "fp8") else c

    key = (m_bucket(M), N, K, gated, values.dtype, dot)
    launch(pick("sparse24_linear", key, cands, launch))
    return out


def _candidates(M: int, N: int, K: int) -> list[dict]:
    """The first entry is the untuned default (the one tile this kernel had before it was tuned). Larger
    tiles for M > 64, where the 16-bit word expansion (~9 sm_90 instructions per dense weight per tile
    step) is shared by more rows; sm_90 compiles of each (int8 and fp8, gated and not): no spills."""
    bk = 64 if K <= 64 else 128
    c = [(16 if M <= 16 else (32 if M <= 32 else 64), 64 if N > 32 else 32, bk, 3, 4)]
    if M > 64:
        c += [(128, 64, bk, 3, 8), (64, 128, bk, 3, 8), (128, 128, 64, 3, 8), (64, 64, bk, 4, 4)]
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=k, num_stages=s, num_warps=w) for bm, bn, k, s, w in c]


def sparse24_linear(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, wscale: torch.Tensor | None,
                    bias: torch.Tensor | None = None, act: str = "none", dynamic: bool = False,
                    out: torch.Tensor | None = None, x_scale: torch.Tensor | None = None,
                    out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Launch on a 2-D x [M, K] with packed values [N, K/2] / meta [N, ceil(K/8)]; returns y [M, N].
    ``x_scale`` [M] (dynamic only): x is already quantized per token (act_quant), y in ``out_dtype``."""
    return _launch(x, values, meta, wscale, bias, act, dynamic, False, out, x_scale, out_dtype)


def sparse24_gated(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, wscale: torch.Tensor | None,
                   bias: torch.Tensor | None = None, act: str = "silu", dynamic: bool = False,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """Gated form on a stacked packed weight [2H, K/2]: returns act(gate) ⊙ up, [M, H]."""
    assert values.shape[0] % 2 == 0, values.shape
    return _launch(x, values, meta, wscale, bias, act, dynamic, True, out)
