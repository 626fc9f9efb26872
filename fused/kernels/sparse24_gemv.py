"""2:4-sparse decode kernel (M <= 16, weight-only): y = epilogue(x · Wᵀ) with W read packed, split over K.

x [M, K] bf16/fp16/fp32 (any strides); values [R, K/2] int8 / float8_e4m3fn (passed as uint8) / bfloat16,
meta [R, ceil(K/8)] uint8 (sparsity.packing: kept value j of a row sits at column 4·(j//2) + its 2-bit
position, bits 2·(j%4).. of meta byte j//4) or the same bytes in cuSPARSELt's tiles [R/64, K/64, 512]
(sparsity.packing.tile_meta; BLOCK_K a multiple of 64; vsel / dot load each 64-column tile's rows as one
contiguous run, meta_chunks, the other forms gather bytes);
s_w [R] fp32 or None (bf16 values); optional bias [R].
Linear: R = N outputs. Gated: rows [0, H) are the gate, [H, 2H) the up projection, and
y = act(x·W_gᵀ·s_g + b_g) ⊙ (x·W_uᵀ·s_u + b_u) [M, H].
Reference: fused.reference.sparse24_linear_ref / sparse24_gated_ref (weight-only).

Decode is bound by the weight bytes: 0.625 per weight for 8-bit values. Four ways to consume them (MODE):
  "gather"  never builds the dense tile. Per K step a program loads, for BLOCK_N rows, BLOCK_K/2 kept values
            as a [BLOCK_N, BLOCK_K/8, 4] tile (quad q = the 4 values whose positions share meta byte q) and
            the [BLOCK_N, BLOCK_K/8] meta bytes, decodes each value's column k = 8q + 4·(s//2) + pos with
            a broadcast shift, gathers x[m, k] with a per-element load (x is a few KiB: L1/L2-resident),
            and multiply-accumulates in fp32: half the multiplies of the dense product, no expansion.
            Any BLOCK_M (the gather and the products scale with M: meant for M = 1 and very small M).
  "vsel"    (any BLOCK_M) the values and meta load as 2-D rows (16-byte loads; the 3-D tiles of "gather"
            compile to 1-4-byte loads on sm_90) and are viewed per 2:4 group in registers; x arrives as
            [groups, 4] and each kept value selects its x by position (`tl.where`: ALU instead of
            gathered loads). With BLOCK_M > 1 the select and products run per row on the shared decode
            of the tile. H200, Llama block at M=1: 107.2 µs with "gather" -> 72.9.
  "quad"    (BLOCK_M = 1, int8 / fp8 values, bf16 / fp16 x, K % BLOCK_K == 0) works per meta byte: the byte's
            4 kept values load as one int32 word, x as bf16 pairs (int32 words), and one inline-asm block per
            byte builds a PRMT selector from the 4 positions, picks both groups' x pairs with 2 PRMT, widens the
            values and chains 4 FMAs into the accumulator (_quad_fma: ~26 instructions per 4 values where
            "vsel" spends ~50; ncu on the H200 found vsel bound by per-SM work, not bytes).
            The interpreter runs the same arithmetic in Triton (_quad_fma_ref: equal bits).
  "dot"     (BLOCK_M = 16, for 2 <= M <= 16) expands the tile to dense in registers
            (sparse24_linear._load_dense_tile) and runs tl.dot: the expansion is paid once for all M rows
            (sm_90, 64×128 int8 tile: 594 instructions per thread and step; 1330 with byte selects).
Split-K exactly as in w8a16_gemv (and sharing its workspace): each program stores an fp32 partial, bumps a
per-tile counter, and the last to arrive sums the SPLIT_K partials in a fixed order and runs the epilogue
(scale, bias, activation, gate): one launch, bit-identical results from run to run, counters reset by the
kernel itself.

NaN/inf in x: "gather"/"vsel" multiply only kept positions, so a non-finite x[m, k] reaches the outputs whose kept
positions include k (exact zeros kept by the packing count as kept); the dense reference and "dot" spread it to
every output of row m (0·NaN). Finite inputs agree to fp32 rounding.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fused.kernels import GEMV_STAGES, INTERPRET, W_EVICT, cdiv, check_out, next_pow2, strict
from fused.kernels.epilogue import activation, int8_to_f32
from fused.kernels.launch import counts, empty, launch_kernel
from fused.kernels.sparse24_linear import (VALUE_DTYPES, _dot_acc, _dot_for, _load_dense_tile, meta_args,
                                           meta_chunks, meta_col_off, meta_row_off)
from fused.kernels.splitk import buffers, splitk_reduce
from fused.kernels.tuning import m_bucket, pick
from fused.kernels.w8a16_gemv import _split_for

MODES = ("gather", "vsel", "quad", "dot")
# "quad" candidates in the tuner (explicit configs run regardless); QUAD = False leaves them out
QUAD = True
QUAD16_RUNS = False


@triton.jit
def _values_f32(v, VALUE: tl.constexpr):
    """Stored value bits -> fp32 (exact: int8, e4m3 and bf16 all fit in fp32)."""
    if VALUE == "fp8":
        v = v.to(tl.float8e4nv, bitcast=True)  # loaded as uint8: masked fp8 loads with a fill fail on 3.6
    return v.to(tl.float32)


@triton.jit
def _vsel_tile(v_ptr, m_ptr, rows, row0, r_ok, k0, K, half_k, stride_vn, stride_mn, VALUE: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, TILED: tl.constexpr):
    """One K step of "vsel": (positions int32, values fp32), both [BLOCK_N, BLOCK_K/4, 2] per 2:4 group,
    from [BLOCK_N, BLOCK_K/2] values and [BLOCK_N, BLOCK_K/8] meta loaded as plain rows."""
    G: tl.constexpr = BLOCK_K // 4
    # k0 is a multiple of BLOCK_K (K_PER_SPLIT is): with BLOCK_K >= 128 the row tiles start 16-byte aligned
    j = tl.multiple_of(k0 // 2, BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    b = tl.multiple_of(k0 // 8, BLOCK_K // 8) + tl.arange(0, BLOCK_K // 8)
    if EVEN_K:  # K % BLOCK_K == 0: row masks only (a K mask would cap the load width)
        j_ok = r_ok[:, None]
        b_ok = r_ok[:, None]
    else:
        j_ok = r_ok[:, None] & (j < half_k)[None, :]
        b_ok = r_ok[:, None] & (4 * b < half_k)[None, :]
    v = tl.load(v_ptr + rows[:, None] * stride_vn + j[None, :], mask=j_ok, other=0, eviction_policy=W_EVICT)
    if TILED == 2:
        meta = meta_chunks(m_ptr, row0, k0, K, stride_mn, BLOCK_N, BLOCK_K, EVEN_K)
    else:
        meta = tl.load(m_ptr + meta_row_off(rows, stride_mn, TILED != 0)[:, None]
                       + meta_col_off(b, TILED != 0)[None, :], mask=b_ok, other=0, eviction_policy=W_EVICT)
    pos = (meta.to(tl.int32)[:, :, None] >> (2 * tl.arange(0, 4))[None, None, :]) & 3  # [BN, BK/8, 4]: value 4b+s
    if VALUE == "int8":
        w = int8_to_f32(v)  # integer ops: Triton's cast goes through I2F, a quarter-rate unit
    else:
        w = _values_f32(v, VALUE)
    return tl.reshape(pos, (BLOCK_N, G, 2)), tl.reshape(w, (BLOCK_N, G, 2))  # value 2g + s


@triton.jit
def _vsel_partial(x_ptr, v_ptr, m_ptr, rows, row0, R_END, K, k_lo, k_hi, stride_xk, stride_vn, stride_mn,
                  VALUE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                  TILED: tl.constexpr, STAGES: tl.constexpr):
    """"vsel" (BLOCK_M = 1). The values and meta tiles load as plain 2-D rows ([BLOCK_N, BLOCK_K/2] and
    [BLOCK_N, BLOCK_K/8], contiguous: 16-byte loads, where the 3-D tiles of "gather" compile to 1-4-byte
    loads) and are viewed as [BLOCK_N, G, 2] per 2:4 group in registers (_vsel_tile); x arrives as [G, 4]
    (G = BLOCK_K/4 groups, shared by all rows), split into its 4 columns, and each kept value picks its x
    by its 2-bit position. Returns [1, BLOCK_N] fp32.
    STAGES > 1: Triton's pipeliner streams the value, meta and x tiles through shared memory (cp.async),
    STAGES - 1 steps ahead (see STAGES in _candidates); 1: plain loads (the same SASS as a Python range)."""
    G: tl.constexpr = BLOCK_K // 4
    half_k = K // 2
    offs_g = tl.arange(0, G)
    r_ok = rows < R_END
    acc3 = tl.zeros((BLOCK_N, G, 2), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=STAGES):
        pos, w = _vsel_tile(v_ptr, m_ptr, rows, row0, r_ok, k0, K, half_k, stride_vn, stride_mn, VALUE, BLOCK_N,
                            BLOCK_K, EVEN_K, TILED)
        col = k0 + 4 * offs_g
        xg = tl.load(x_ptr + (col[:, None] + tl.arange(0, 4)[None, :]) * stride_xk, mask=(col < K)[:, None],
                     other=0.0).to(tl.float32)                              # [G, 4]: group g's 4 entries
        xe, xo = tl.split(tl.reshape(xg, (G, 2, 2)))                       # [G, 2]: x[4g + 2a], x[4g + 2a + 1]
        x0, x2 = tl.split(xe)
        x1, x3 = tl.split(xo)
        x0 = x0[None, :, None]
        x1 = x1[None, :, None]
        x2 = x2[None, :, None]
        x3 = x3[None, :, None]
        lo = (pos & 1) != 0
        xv = tl.where((pos & 2) != 0, tl.where(lo, x3, x2), tl.where(lo, x1, x0))
        acc3 += w * xv
    return tl.sum(tl.sum(acc3, axis=2), axis=1)[None, :]


# "quad": one meta byte = 4 kept values = 2 groups of 4 columns. Its 2-bit positions are spread into bytes (two
# shift-or-mask steps), times 0x22 plus 0x10 per byte gives prmt selectors (2p, 2p+1) per value: the low 16 bits
# pick group a's two bf16 x from its 4 (x01 = bytes 0-3, x23 = bytes 4-7), the high 16 bits group b's. Values:
# int8 through the 2**23 mantissa (PRMT into 0x4B0000uu, u = w + 128, one subtraction), fp8 through cvt e4m3x2.
def _quad_asm(value: str, xdt: str) -> str:
    if value == "int8":
        widen = """xor.b32 u, $1, 0x80808080;
        mov.b32 c, 0x4B000000;
        prmt.b32 w0, u, c, 0x7540;
        prmt.b32 w1, u, c, 0x7541;
        prmt.b32 w2, u, c, 0x7542;
        prmt.b32 w3, u, c, 0x7543;
        sub.rn.f32 w0, w0, 0f4B000080;
        sub.rn.f32 w1, w1, 0f4B000080;
        sub.rn.f32 w2, w2, 0f4B000080;
        sub.rn.f32 w3, w3, 0f4B000080;"""
    else:
        widen = """mov.b32 {l16, h16}, $1;
        cvt.rn.f16x2.e4m3x2 u, l16;
        cvt.rn.f16x2.e4m3x2 c, h16;
        mov.b32 {e0, e1}, u;
        mov.b32 {e2, e3}, c;
        cvt.f32.f16 w0, e0;
        cvt.f32.f16 w1, e1;
        cvt.f32.f16 w2, e2;
        cvt.f32.f16 w3, e3;"""
    if xdt == "bf16":
        unpack = """shl.b32 a0, xa, 16;
        and.b32 a1, xa, 0xFFFF0000;
        shl.b32 b0, xb, 16;
        and.b32 b1, xb, 0xFFFF0000;"""
    else:
        unpack = """mov.b32 {e0, e1}, xa;
        mov.b32 {e2, e3}, xb;
        cvt.f32.f16 a0, e0;
        cvt.f32.f16 a1, e1;
        cvt.f32.f16 b0, e2;
        cvt.f32.f16 b1, e3;"""
    return f"""{{
        .reg .b32 t, s, sb, xa, xb, u, c, w0, w1, w2, w3, a0, a1, b0, b1;
        .reg .b16 l16, h16, e0, e1, e2, e3;
        shl.b32 t, $2, 12;
        or.b32 t, t, $2;
        and.b32 t, t, 0x000F000F;
        shl.b32 s, t, 6;
        or.b32 s, s, t;
        and.b32 s, s, 0x03030303;
        mad.lo.u32 s, s, 0x22, 0x10101010;
        shr.b32 sb, s, 16;
        prmt.b32 xa, $3, $4, s;
        prmt.b32 xb, $5, $6, sb;
        {unpack}
        {widen}
        fma.rn.f32 $0, w0, a0, $7;
        fma.rn.f32 $0, w1, a1, $0;
        fma.rn.f32 $0, w2, b0, $0;
        fma.rn.f32 $0, w3, b1, $0;
        }}"""


_QUAD_I8_BF16: tl.constexpr = tl.constexpr(_quad_asm("int8", "bf16"))
_QUAD_I8_F16: tl.constexpr = tl.constexpr(_quad_asm("int8", "fp16"))
_QUAD_F8_BF16: tl.constexpr = tl.constexpr(_quad_asm("fp8", "bf16"))
_QUAD_F8_F16: tl.constexpr = tl.constexpr(_quad_asm("fp8", "fp16"))


@triton.jit
def _quad_x(p, w01, w23, X_F16: tl.constexpr):
    """x at position p (0..3) of a group given as two words of 16-bit pairs, as fp32."""
    word = tl.where(p >= 2, w23, w01)
    half = tl.where((p & 1) != 0, (word >> 16) & 0xFFFF, word & 0xFFFF)
    if X_F16:
        return half.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return (half << 16).to(tl.float32, bitcast=True)


@triton.jit
def _quad_value(vw, i: tl.constexpr, VALUE: tl.constexpr):
    """Byte i of the values word as fp32 (int8 or e4m3 bits)."""
    if VALUE == "int8":
        return int8_to_f32((vw << (24 - 8 * i)) >> 24)
    return ((vw >> (8 * i)) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float32)


@triton.jit
def _quad_fma_ref(acc, vw, m, xa01, xa23, xb01, xb23, VALUE: tl.constexpr, X_F16: tl.constexpr):
    """_quad_fma's arithmetic in Triton (the interpreter's form; the same fp32 operations in the same order)."""
    acc = tl.fma(_quad_value(vw, 0, VALUE), _quad_x(m & 3, xa01, xa23, X_F16), acc)
    acc = tl.fma(_quad_value(vw, 1, VALUE), _quad_x((m >> 2) & 3, xa01, xa23, X_F16), acc)
    acc = tl.fma(_quad_value(vw, 2, VALUE), _quad_x((m >> 4) & 3, xb01, xb23, X_F16), acc)
    return tl.fma(_quad_value(vw, 3, VALUE), _quad_x((m >> 6) & 3, xb01, xb23, X_F16), acc)


@triton.jit
def _quad_fma(acc, vw, m, xa01, xa23, xb01, xb23, VALUE: tl.constexpr, X_F16: tl.constexpr, ASM: tl.constexpr):
    """acc + the 4 products of one meta byte m (int32) with its values word vw: fp32, elementwise."""
    if not ASM:
        return _quad_fma_ref(acc, vw, m, xa01, xa23, xb01, xb23, VALUE, X_F16)
    if VALUE == "int8":
        asm: tl.constexpr = _QUAD_I8_F16 if X_F16 else _QUAD_I8_BF16
    else:
        asm: tl.constexpr = _QUAD_F8_F16 if X_F16 else _QUAD_F8_BF16
    return tl.inline_asm_elementwise(asm, "=r,r,r,r,r,r,r,r", [vw, m, xa01, xa23, xb01, xb23, acc],
                                     dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _quad_partial(x_ptr, v_ptr, m_ptr, rows, row0, R_END, K, k_lo, k_hi, stride_vn, stride_mn,
                  VALUE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TILED: tl.constexpr,
                  STAGES: tl.constexpr, X_F16: tl.constexpr, ASM: tl.constexpr):
    """"quad" (BLOCK_M = 1, K % BLOCK_K == 0, x contiguous and 4-byte aligned, values rows 4-byte aligned):
    [BLOCK_N, BLOCK_K/8] values words and meta bytes per step, x as [BLOCK_K/8, 4] words; one _quad_fma per
    (row, meta byte). Returns [1, BLOCK_N] fp32."""
    Q: tl.constexpr = BLOCK_K // 8
    offs_q = tl.arange(0, Q)
    r_ok = rows < R_END
    vw_ptr = v_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    xw_ptr = x_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    acc = tl.zeros((BLOCK_N, Q), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=STAGES):
        q = tl.multiple_of(k0 // 8, Q) + offs_q
        vw = tl.load(vw_ptr + rows[:, None] * (stride_vn // 4) + q[None, :], mask=r_ok[:, None], other=0,
                     eviction_policy=W_EVICT)
        if TILED == 2:
            meta = meta_chunks(m_ptr, row0, k0, K, stride_mn, BLOCK_N, BLOCK_K, True)
        else:
            meta = tl.load(m_ptr + meta_row_off(rows, stride_mn, TILED != 0)[:, None]
                           + meta_col_off(q, TILED != 0)[None, :], mask=r_ok[:, None], other=0,
                           eviction_policy=W_EVICT)
        xw = tl.load(xw_ptr + 4 * q[:, None] + tl.arange(0, 4)[None, :])       # [Q, 4]: 2 words per group
        even, odd = tl.split(tl.reshape(xw, (Q, 2, 2)))                         # words 4q + 2g (+ 1), g = a, b
        xa01, xb01 = tl.split(even)
        xa23, xb23 = tl.split(odd)
        acc = _quad_fma(acc, vw, meta.to(tl.int32), xa01[None, :], xa23[None, :], xb01[None, :], xb23[None, :],
                        VALUE, X_F16, ASM)
    if TILED == 2 and BLOCK_N == 16:
        # meta_chunks' layout at 16 rows puts a 64-column tile's quads and the tiles on non-adjacent lanes (bits 0
        # and 4); Triton 3.6's reduce assumes the reduced lanes adjacent and shuffled wrong lanes (fixed in 3.9,
        # triton#9192). Per tile first, then over tiles: each step's lanes are adjacent (tests/reduce_audit.py).
        # 32 rows (one lane bit on the axis, right on the H200) keep the plain sum
        return tl.sum(tl.sum(tl.reshape(acc, (BLOCK_N, Q // 8, 8)), axis=2), axis=1)[None, :]
    return tl.sum(acc, axis=1)[None, :]


@triton.jit
def _vsel_rows_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, row0, M, R_END, K, k_lo, k_hi,
                       stride_xm, stride_xk, stride_vn, stride_mn, VALUE: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
                       TILED: tl.constexpr):
    """"vsel" for BLOCK_M >= 2 (a few tokens: speculative decoding, small batches): the loads and the
    position decode of _vsel_partial, once per tile for all rows; the select and the products per row
    ([BLOCK_M, BLOCK_N, G, 2] per step, summed over K once after the loop). Returns [BLOCK_M, BLOCK_N] fp32."""
    G: tl.constexpr = BLOCK_K // 4
    half_k = K // 2
    offs_g = tl.arange(0, G)
    r_ok = rows < R_END
    m_ok = offs_m < M
    acc4 = tl.zeros((BLOCK_M, BLOCK_N, G, 2), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        pos, w = _vsel_tile(v_ptr, m_ptr, rows, row0, r_ok, k0, K, half_k, stride_vn, stride_mn, VALUE, BLOCK_N,
                            BLOCK_K, EVEN_K, TILED)
        pos = pos[None]
        w = w[None]                                                        # [1, BN, G, 2]
        col = k0 + 4 * offs_g
        xg = tl.load(x_ptr + offs_m[:, None, None] * stride_xm + (col[None, :, None] + tl.arange(0, 4)[None, None, :])
                     * stride_xk, mask=m_ok[:, None, None] & (col < K)[None, :, None], other=0.0).to(tl.float32)
        xe, xo = tl.split(tl.reshape(xg, (BLOCK_M, G, 2, 2)))              # [BM, G, 2]
        x0, x2 = tl.split(xe)
        x1, x3 = tl.split(xo)
        lo = (pos & 1) != 0
        xv = tl.where((pos & 2) != 0, tl.where(lo, x3[:, None, :, None], x2[:, None, :, None]),
                      tl.where(lo, x1[:, None, :, None], x0[:, None, :, None]))  # [BM, BN, G, 2]
        acc4 += w * xv
    return tl.sum(tl.sum(acc4, axis=3), axis=2)


@triton.jit
def _gather_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, M, R_END, K, k_lo, k_hi,
                    stride_xm, stride_xk, stride_vn, stride_mn,
                    VALUE: tl.constexpr, MODE: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TILED: tl.constexpr):
    """fp32 [BLOCK_M, BLOCK_N] = x[offs_m, k_lo:k_hi] · W[rows, k_lo:k_hi]ᵀ from the packed form (unscaled)."""
    Q: tl.constexpr = BLOCK_K // 8           # quads (meta bytes) per step and row
    half_k = K // 2
    offs_q = tl.arange(0, Q)
    s = tl.arange(0, 4)[None, None, :]       # slot in the quad
    r_ok = rows < R_END
    # column of the first entry of the slot's 2:4 group, relative to the quad's first column
    group_col = 4 * (s >> 1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # BLOCK_M == 1: products accumulate per element and are reduced once after the loop
    acc3 = tl.zeros((BLOCK_N, Q, 4), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        q = k0 // 8 + offs_q
        j = 4 * q[None, :, None] + s                                   # kept-value index [1, Q, 4]
        j_ok = r_ok[:, None, None] & (j < half_k)                     # [BN, Q, 4]
        v = tl.load(v_ptr + rows[:, None, None] * stride_vn + j, mask=j_ok, other=0, eviction_policy=W_EVICT)
        meta = tl.load(m_ptr + meta_row_off(rows, stride_mn, TILED != 0)[:, None]
                       + meta_col_off(q, TILED != 0)[None, :], mask=r_ok[:, None] & (4 * q[None, :] < half_k), other=0,
                       eviction_policy=W_EVICT)
        pos = (meta.to(tl.int32)[:, :, None] >> (2 * s)) & 3           # [BN, Q, 4]
        base = 8 * q[None, :, None] + group_col                        # [1, Q, 4]
        w = _values_f32(v, VALUE)
        if BLOCK_M == 1:
            xv = tl.load(x_ptr + (base + pos) * stride_xk, mask=j_ok, other=0.0)
            acc3 += w * xv.to(tl.float32)
        else:
            xv = tl.load(x_ptr + offs_m[:, None, None, None] * stride_xm + (base + pos)[None] * stride_xk,
                         mask=(offs_m < M)[:, None, None, None] & j_ok[None], other=0.0)
            acc += tl.sum(tl.sum(w[None] * xv.to(tl.float32), axis=3), axis=2)
    if BLOCK_M == 1:
        acc = tl.sum(tl.sum(acc3, axis=2), axis=1)[None, :]
    return acc


@triton.jit
def _dot_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, row0, M, R_END, K, k_lo, k_hi,
                 stride_xm, stride_xk, stride_vn, stride_mn,
                 VALUE: tl.constexpr, DOT: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TILED: tl.constexpr):
    """Same contract as _gather_partial, through a dense register tile and tl.dot (BLOCK_M >= 16)."""
    half_k = K // 2
    offs_kk = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, BLOCK_K // 2)
    offs_b = tl.arange(0, BLOCK_K // 8)
    r_ok = rows < R_END
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + offs_kk
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
                    mask=(offs_m < M)[:, None] & (offs_k < K)[None, :], other=0.0)
        if DOT == "fp32":
            x = x.to(tl.float32)
        j = k0 // 2 + offs_j
        b = k0 // 8 + offs_b
        if TILED == 2:
            meta = meta_chunks(m_ptr, row0, k0, K, stride_mn, BLOCK_N, BLOCK_K, False)
        else:
            meta = tl.load(m_ptr + meta_row_off(rows, stride_mn, TILED != 0)[:, None]
                           + meta_col_off(b, TILED != 0)[None, :], mask=r_ok[:, None] & (4 * b < half_k)[None, :],
                           other=0, eviction_policy=W_EVICT)
        w = _load_dense_tile(v_ptr + rows[:, None] * stride_vn + j[None, :], meta,
                             r_ok[:, None] & (j < half_k)[None, :], VALUE, DOT, BLOCK_N, BLOCK_K,
                             x_ptr.dtype.element_ty, "select")  # explicit: a str default breaks the sm_90 compile
        acc = _dot_acc(x, w, acc, DOT)
    return acc


@triton.jit
def _partial(x_ptr, v_ptr, m_ptr, offs_m, rows, row0, M, R_END, K, k_lo, k_hi,
             stride_xm, stride_xk, stride_vn, stride_mn,
             VALUE: tl.constexpr, MODE: tl.constexpr, DOT: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
             TILED: tl.constexpr, STAGES: tl.constexpr, X_F16: tl.constexpr, ASM: tl.constexpr):
    if MODE == "dot":
        acc = _dot_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, row0, M, R_END, K, k_lo, k_hi,
                           stride_xm, stride_xk, stride_vn, stride_mn, VALUE, DOT, BLOCK_M, BLOCK_N, BLOCK_K, TILED)
    elif MODE == "quad":
        acc = _quad_partial(x_ptr, v_ptr, m_ptr, rows, row0, R_END, K, k_lo, k_hi, stride_vn, stride_mn, VALUE,
                            BLOCK_N, BLOCK_K, TILED, STAGES, X_F16, ASM)
    elif MODE == "vsel" and BLOCK_M == 1:
        acc = _vsel_partial(x_ptr, v_ptr, m_ptr, rows, row0, R_END, K, k_lo, k_hi, stride_xk, stride_vn, stride_mn,
                            VALUE, BLOCK_N, BLOCK_K, EVEN_K, TILED, STAGES)
    elif MODE == "vsel":
        acc = _vsel_rows_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, row0, M, R_END, K, k_lo, k_hi, stride_xm, stride_xk,
                                 stride_vn, stride_mn, VALUE, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, TILED)
    else:
        acc = _gather_partial(x_ptr, v_ptr, m_ptr, offs_m, rows, M, R_END, K, k_lo, k_hi,
                              stride_xm, stride_xk, stride_vn, stride_mn, VALUE, MODE, BLOCK_M, BLOCK_N, BLOCK_K,
                              TILED)
    return acc


@triton.jit
def _sparse24_gemv_kernel(
    x_ptr, v_ptr, m_ptr, ws_ptr, b_ptr, y_ptr, part_ptr, count_ptr,
    M, N, K, K_PER_SPLIT,
    stride_xm, stride_xk, stride_vn, stride_mn, stride_ym, stride_yn,
    VALUE: tl.constexpr, MODE: tl.constexpr, DOT: tl.constexpr,
    GATED: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr = False,
    TILED: tl.constexpr = 0,  # meta: 0 row-major; tiled (cuSPARSELt's order): 1 byte gathers, 2 contiguous runs
    STAGES: tl.constexpr = 1,  # vsel / quad at BLOCK_M = 1: software-pipelined K loop (see _candidates)
    X_F16: tl.constexpr = False,  # quad: x is fp16 (else bf16)
    ASM: tl.constexpr = False,  # quad: the inline-asm form (CUDA), else its Triton twin (the interpreter)
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_k * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    acc = _partial(x_ptr, v_ptr, m_ptr, offs_m, offs_n, pid_n * BLOCK_N, M, N, K, k_lo, k_hi, stride_xm, stride_xk,
                   stride_vn, stride_mn, VALUE, MODE, DOT, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, TILED, STAGES, X_F16, ASM)
    if GATED:
        acc_u = _partial(x_ptr, v_ptr, m_ptr, offs_m, N + offs_n, N + pid_n * BLOCK_N, M, 2 * N, K, k_lo, k_hi,
                         stride_xm, stride_xk,
                         stride_vn, stride_mn, VALUE, MODE, DOT, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, TILED, STAGES,
                         X_F16, ASM)
    else:
        acc_u = acc

    tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    # `tile < live` masks the epilogue: all of it for the program that finishes the tile, none otherwise
    live = BLOCK_M * BLOCK_N
    if SPLIT_K > 1:
        acc, acc_u, live = splitk_reduce(acc, acc_u, part_ptr, count_ptr, pid_n, pid_k, SPLIT_K, GATED,
                                         BLOCK_M, BLOCK_N)

    n_ok = offs_n < N
    y = acc
    if HAS_SCALE:
        y = y * tl.load(ws_ptr + offs_n, mask=n_ok, other=0.0)[None, :]
    if HAS_BIAS:
        y += tl.load(b_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y = activation(y, ACT)
    if GATED:
        u = acc_u
        if HAS_SCALE:
            u = u * tl.load(ws_ptr + N + offs_n, mask=n_ok, other=0.0)[None, :]
        if HAS_BIAS:
            u += tl.load(b_ptr + N + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        y = y * u
    out_mask = (offs_m[:, None] < M) & n_ok[None, :] & (tile < live)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=out_mask)


def _cfg(mode, bm, bn, bk, warps, stages=1):
    cfg = dict(MODE=mode, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return dict(cfg, STAGES=stages) if stages > 1 else cfg


def _candidates(M: int, N: int, K: int, gated: bool, quad: bool = True) -> list[dict]:
    """At most 8 configs (each one is a compile on the GPU); the first is the heuristic default.

    M = 1: vsel and quad tiles (quad where K % BLOCK_K == 0 and ``quad``: 8-bit values), and one gather tile.
    2 <= M <= 16: expand + tl.dot (the expansion is shared by the 16 rows); for M <= 4 also vsel and gather with
    BLOCK_M = next power of two (their cost grows with M)."""
    if M == 1:
        # vsel beats gather on the H200 (gate/up 50.2 vs 62.1 µs); STAGES pipelines the loads through shared memory
        # (16x512 gate/up 41.8 µs against 53.5), which left the loop bound by per-SM work (ncu: L1 78%, issue 66%),
        # hence "quad" (int8 gate/up: 275 SASS instructions per iteration instead of 399, 8 CTAs per SM)
        out = [_cfg("vsel", 1, 32, 256, 4)]
        if GEMV_STAGES:
            out.append(_cfg("vsel", 1, 16, 512, 4, 4))
            # quad's plain loop too: at 62 registers 8 programs fit per SM, ~48 KB of loads in flight without staging
            quads = [(16, 512, 4, 4), (16, 512, 4, 3), (16, 1024, 4, 3), (16, 512, 4, 1), (32, 512, 4, 4)]
            spare = [_cfg("vsel", 1, 16, 512, 4, 3), _cfg("vsel", 1, 32, 512, 8, 4)]
        else:
            out += [_cfg("vsel", 1, 16, 512, 4), _cfg("vsel", 1, 32, 512, 8), _cfg("vsel", 1, 64, 256, 8)]
            quads = [(16, 512, 4, 1), (32, 512, 4, 1)]
            spare = [_cfg("vsel", 1, 64, 128, 4)]
        if quad:
            out += [_cfg("quad", 1, bn, bk, w, st) for bn, bk, w, st in quads if K % bk == 0]
        out = (out + spare)[:7] + [_cfg("gather", 1, 16, 256, 4)]
    else:
        out = [_cfg("dot", 16, 64, 128, 4), _cfg("dot", 16, 32, 128, 4), _cfg("dot", 16, 64, 256, 8),
               _cfg("dot", 16, 32, 256, 4)]
        bm = next_pow2(M)
        if M <= 4:
            out += [_cfg("gather", bm, 32, 64, 4), _cfg("gather", bm, 16, 128, 4), _cfg("vsel", bm, 16, 128, 4),
                    _cfg("vsel", bm, 32, 128, 4)]
        # vsel with BLOCK_M 8 / 16 loses on the H200: its per-row select costs about one M=1 GEMV per row
    for c in out:
        c["SPLIT_K"] = _split_for(cdiv(N, c["BLOCK_N"]), K, c["BLOCK_K"])
    return out


def _tiled_mode(tiled: bool, mode: str, bn: int, N: int, gated: bool) -> int:
    """TILED for a launch: 0 row-major meta; tiled meta as contiguous runs (2) where vsel / dot row tiles fall on
    16-row boundaries of cuSPARSELt's tiles (gated: the up rows start at N, so N % BLOCK_N == 0 too), else as
    byte gathers (1)."""
    if not tiled:
        return 0
    if mode == "quad" and bn == 16 and not QUAD16_RUNS:
        # quad 16-row tiles on contiguous-run meta summed wrong on the H200 (SQNR -1 dB: Triton 3.6's reduce over
        # their layout, now reduced in two steps, see _quad_partial); byte gathers until that form has passed its
        # cuda test (QUAD16_RUNS = True takes the runs)
        return 1
    return 2 if mode in ("vsel", "quad", "dot") and bn in (16, 32, 64) and (not gated or N % bn == 0) else 1


def _interpret_config(M, N, K, tiled=False):
    bk = 64 if tiled else 32  # tiled meta: whole 64-column tiles per K step
    cfg = _cfg("gather", 1, 16, bk, 4) if M == 1 else _cfg("dot", 16, 16, bk, 4)
    cfg["SPLIT_K"] = 2 if K > bk else 1
    return cfg


def sparse24_gemv(x: torch.Tensor, values: torch.Tensor, meta: torch.Tensor, wscale: torch.Tensor | None = None,
                  bias: torch.Tensor | None = None, act: str = "none", gated: bool = False,
                  config: dict | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Launch on a 2-D x [M <= 16, K] with packed values [R, K/2] / meta [R, ceil(K/8)] (weight-only).
    Returns [M, R] (linear) or [M, R/2] (gated) in x's dtype. ``config``: one of ``_candidates`` (tests)."""
    if x.dim() != 2 or values.dim() != 2 or meta.dim() not in (2, 3):
        raise ValueError(f"sparse24_gemv: 2-D x, values, meta (or tiled meta) expected, got {tuple(x.shape)}, "
                         f"{tuple(values.shape)}, {tuple(meta.shape)}")
    M, K = x.shape
    R = values.shape[0]
    if M > 16:
        raise ValueError(f"sparse24_gemv is the decode kernel (M <= 16), got M={M}: use sparse24_linear")
    if values.dtype not in VALUE_DTYPES or meta.dtype != torch.uint8:
        raise ValueError(f"sparse24_gemv: values must be one of {VALUE_DTYPES} and meta uint8, got "
                         f"{values.dtype}, {meta.dtype}")
    if K % 4 or values.shape[1] * 2 != K:
        raise ValueError(f"sparse24_gemv: x [M, {K}] needs values [R, {K // 2}] (K % 4 == 0), got "
                         f"{tuple(values.shape)}")
    if values.stride(1) != 1:
        raise ValueError("sparse24_gemv: values must be contiguous along K")
    stride_m, tiled = meta_args(meta, R, K, "sparse24_gemv")
    if wscale is not None and (wscale.dtype != torch.float32 or wscale.shape != (R,)):
        raise ValueError(f"sparse24_gemv: wscale must be fp32 [{R}], got {wscale.dtype} {tuple(wscale.shape)}")
    if gated and R % 2:
        raise ValueError(f"sparse24_gemv: a gated (stacked gate/up) weight needs an even row count, got {R}")
    N = R // 2 if gated else R
    y = check_out(out, (M, N), x.dtype, x.device) if out is not None else empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    value = {torch.int8: "int8", torch.float8_e4m3fn: "fp8"}.get(values.dtype, "float")
    v = values.view(torch.uint8) if values.dtype == torch.float8_e4m3fn else values
    dot = _dot_for(x, values, False)

    def quad_ok() -> bool:  # asked only where a quad config is in play (not on every call's host path)
        # "quad" reads x and the values as 32-bit words: x one contiguous, 4-byte aligned bf16 / fp16 row
        return (M == 1 and value != "float" and x.dtype in (torch.bfloat16, torch.float16) and x.stride(1) == 1
                and x.data_ptr() % 4 == 0 and v.stride(0) % 4 == 0 and v.data_ptr() % 4 == 0)

    def launch(cfg):
        mode, bm, bn, bk, split = cfg["MODE"], cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
        if mode == "quad" and not (quad_ok() and K % bk == 0):
            # a shape's pick serves every x of that shape: an fp32 or unaligned x takes the same tile as "vsel"
            # (the same products; counted, see launch.counts)
            if strict():
                raise RuntimeError(f"fused strict mode: sparse24_gemv's quad pick {cfg} cannot read this x as aligned "
                                   f"32-bit words ({x.dtype}, stride {x.stride(1)}); it would run as vsel")
            mode = "vsel"
            counts["quad_as_vsel"] += 1
        assert mode in MODES and bm >= M and bk % (64 if tiled else 8) == 0, cfg
        tiles = cdiv(N, bn)
        k_per = cdiv(cdiv(K, split), bk) * bk  # split bounds on BLOCK_K (so meta-byte) edges
        split = cdiv(K, k_per)  # no empty splits
        part, count = buffers(x.device, tiles * split * (2 if gated else 1) * bm * bn, tiles)
        launch_kernel(_sparse24_gemv_kernel, (tiles, split),
            x, v, meta, wscale if wscale is not None else v, bias if bias is not None else v, y, part, count,
            M, N, K, k_per,
            x.stride(0), x.stride(1), v.stride(0), stride_m, y.stride(0), y.stride(1),
            VALUE=value, MODE=mode, DOT=dot, GATED=gated, HAS_SCALE=wscale is not None,
            HAS_BIAS=bias is not None, ACT=act, SPLIT_K=split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            EVEN_K=K % bk == 0, TILED=_tiled_mode(tiled, mode, bn, N, gated), STAGES=cfg.get("STAGES", 1),
            X_F16=x.dtype == torch.float16, ASM=not INTERPRET,
            num_warps=cfg["num_warps"], **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}),
        )

    if config is None:
        cands = (lambda: [_interpret_config(M, N, K, tiled)]) if INTERPRET else (
            lambda: _candidates(M, N, K, gated, quad=QUAD and quad_ok()))
        # tiled meta is timed apart (its loads differ, so other tiles may win)
        key = (m_bucket(M), N, K, gated, values.dtype) + (("tiled",) if tiled else ())
        config = pick("sparse24_gemv", key, cands, launch)
    launch(config)
    return y
