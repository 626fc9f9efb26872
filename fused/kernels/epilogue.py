"""Shared Triton epilogue pieces (inlined into every kernel)."""
import triton
import triton.language as tl


@triton.jit
def activation(y, ACT: tl.constexpr):
    """Apply the activation named by ACT to an fp32 block; the names match fused.activations."""
    if ACT == "relu":
        # not tl.maximum: on the GPU it drops NaN (NaN in must give NaN out). Not max.NaN either
        # (propagate_nan=ALL): one instruction instead of two, yet the H200 narrow MLP went 247.5 -> 281.5 µs
        y = tl.where(y < 0.0, 0.0, y)
    elif ACT == "gelu":
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        # tanh(z) = 2·sigmoid(2z) − 1, so 0.5·y·(1 + tanh(z)) = y·sigmoid(2z)
        z = 0.7978845608028654 * (y + 0.044715 * y * y * y)
        y = y * tl.sigmoid(2.0 * z)
    elif ACT == "silu":
        y = y * tl.sigmoid(y)
    return y


@triton.jit
def int8_to_f32(w):
    """int8 -> fp32 without the I2F conversion unit (16 results/clk/SM on Hopper: at one conversion per
    weight byte that caps a GEMV near the HBM rate). (v + 128) is written into the mantissa of 2²³:
    float bits 0x4B000000 + v + 128 = 2²³ + 128 + v, then one subtraction gives v exactly."""
    return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


# int8 -> fp32 through fp16 pairs, four weights per asm block (CVT="prmt", CUDA only: the interpreter runs no asm, and
# launchers give it "magic" instead, which yields the same exact values). The four bytes, xor 0x80 (one LOP3: u = w +
# 128), are placed as the low bytes of fp16 words 0x64uu = 1024 + u (two PRMT with the constant 0x64 bytes), one
# sub.f16x2 of 1152 per pair gives w exactly, and a cvt per value widens it: ~2.25 instructions per weight where
# int8_to_f32 takes 3 (byte extract, integer add, float subtract), against fp8's ~2 (F2FP per pair + widening).
PRMT_SEL = (0x4140, 0x4342)  # bytes (t0, c, t1, c) and (t2, c, t3, c) of {t, c}: prmt.b32 selectors
F16_BIAS = 0x6480  # fp16 1152.0 = 1024 (the 0x64 high byte) + 128 (the xor)
_PRMT_ASM: tl.constexpr = tl.constexpr(f"""{{
        .reg .b32 t, lo, hi, c;
        .reg .b16 h0, h1, h2, h3;
        xor.b32 t, $4, 0x80808080;
        mov.b32 c, 0x64646464;
        prmt.b32 lo, t, c, {PRMT_SEL[0]:#06x};
        prmt.b32 hi, t, c, {PRMT_SEL[1]:#06x};
        mov.b32 c, {F16_BIAS << 16 | F16_BIAS:#010x};
        sub.rn.f16x2 lo, lo, c;
        sub.rn.f16x2 hi, hi, c;
        mov.b32 {{h0, h1}}, lo;
        mov.b32 {{h2, h3}}, hi;
        cvt.f32.f16 $0, h0;
        cvt.f32.f16 $1, h1;
        cvt.f32.f16 $2, h2;
        cvt.f32.f16 $3, h3;
        }}""")


@triton.jit
def int8_to_f32_prmt(w):
    """int8 -> fp32 exactly, by fp16 pairs built with PRMT (see above). CUDA only."""
    return tl.inline_asm_elementwise(_PRMT_ASM, "=r,=r,=r,=r,r", [w], dtype=tl.float32, is_pure=True, pack=4)


@triton.jit
def dot_8bit(acc, x, w, W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, DOT: tl.constexpr, CVT: tl.constexpr):
    """acc += x [BLOCK_M, BLOCK_K] · w [BLOCK_N, BLOCK_K]ᵀ for the weight-only kernels (GEMV, decode block):
    w raw 8-bit (int8, or fp8 bits in uint8), widened in registers, unscaled; fp32 accumulator."""
    if W_FP8:
        wf = w.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    elif CVT == "magic":
        wf = int8_to_f32(w)
    elif CVT == "prmt":
        wf = int8_to_f32_prmt(w)
    else:
        wf = w.to(tl.float32)
    if BLOCK_M == 1:
        # GEMV: a broadcast multiply and a row sum beat a 16-row padded tensor-core dot
        acc += tl.sum(wf * x.to(tl.float32), axis=1)[None, :]
    elif DOT == "fp32":
        acc = tl.dot(x.to(tl.float32), tl.trans(wf), acc, input_precision="ieee")
    elif W_FP8 or CVT == "magic":
        acc = tl.dot(x, tl.trans(wf.to(x.dtype)), acc)
    else:
        acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc
