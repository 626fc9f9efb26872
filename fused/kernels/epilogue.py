"""Shared Triton epilogue pieces (inlined into every kernel)."""
import triton
import triton.language as tl

from fused.kernels import INTERPRET

# Triton's interpreter cannot run inline PTX: there the widening below takes the plain cast (same values)
_PTX: tl.constexpr = tl.constexpr(not INTERPRET)


@triton.jit
def activation(y, ACT: tl.constexpr):
    """Apply the activation named by ACT to an fp32 block; the names match fused.activations."""
    if ACT == "relu":
        y = tl.where(y < 0.0, 0.0, y)  # not tl.maximum: on the GPU it drops NaN (NaN in must give NaN out)
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


@triton.jit
def int8_to_f16(w):
    """int8 -> fp16 (exact), four weights per 32-bit register in five instructions: xor 0x80 makes each byte
    v + 128; two PRMTs put the bytes under an fp16 exponent of 2^10 (0x64XX = 1024 + XX); one packed
    subtraction of 1152 per pair leaves v. Triton's own int8 -> fp16 goes through I2F (the conversion unit,
    16 results/clk/SM on Hopper)."""
    if _PTX:
        return tl.inline_asm_elementwise(
            asm="""{
            .reg .b32 t, a, b, m, c;
            mov.b32 m, 0x64646464;
            mov.b32 c, 0x64806480;
            xor.b32 t, $2, 0x80808080;
            prmt.b32 a, t, m, 0x5140;
            prmt.b32 b, t, m, 0x7362;
            sub.f16x2 $0, a, c;
            sub.f16x2 $1, b, c;
            }""",
            constraints="=r,=r,r", args=[w], dtype=tl.float16, is_pure=True, pack=4)
    else:
        return w.to(tl.float32).to(tl.float16)


try:  # griddepcontrol (programmatic dependent launch), triton >= 3.3
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_GDC = True
except ImportError:  # pdl_ok() is then False and pdl_enter is never traced
    HAS_GDC = False
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def prefetch_l2(ptr, rows, R, k0, K, stride_n, stride_k, LINES: tl.constexpr):
    """Ask L2 for ``LINES`` 128-byte lines from column k0 of each of ``rows`` (8-bit weights: one line =
    128 weights). A hint with no result: clamped addresses, no masks."""
    r = tl.minimum(rows, R - 1)
    k = tl.minimum(k0 + tl.arange(0, LINES) * 128, K - 1)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n mov.u32 $0, 0;", "=r,l",
                              [ptr + r[:, None] * stride_n + k[None, :] * stride_k],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def pdl_enter(w_ptr, rows, R, wu_ptr, rows_u, R_U, k0, K, stride_wn, stride_wk, stride_un, stride_uk,
              GATED: tl.constexpr, LINES: tl.constexpr, MODE: tl.constexpr = 1):
    """Start of a kernel launched with PDL (launch_pdl=True): let the next kernel launch now (its programs
    wait in their own pdl_enter), pull this program's first weight lines into L2 (the weights do not depend
    on the kernel before; it may still be running), then wait until that kernel has finished and its writes
    are visible. Nothing written by an earlier kernel (x, split-K workspaces) may be read before the wait."""
    if MODE == 1 or MODE == 2:
        gdc_launch_dependents()
    if MODE != 2:
        prefetch_l2(w_ptr, rows, R, k0, K, stride_wn, stride_wk, LINES)
        if GATED:
            prefetch_l2(wu_ptr, rows_u, R_U, k0, K, stride_un, stride_uk, LINES)
    gdc_wait()


@triton.jit
def dot_8bit(acc, x, w, W_FP8: tl.constexpr, BLOCK_M: tl.constexpr, DOT: tl.constexpr, CVT: tl.constexpr):
    """acc += x [BLOCK_M, BLOCK_K] · w [BLOCK_N, BLOCK_K]ᵀ for the weight-only kernels (GEMV, decode block):
    w raw 8-bit (int8, or fp8 bits in uint8), widened in registers, unscaled; fp32 accumulator."""
    if W_FP8:
        wf = w.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    elif CVT == "magic":
        wf = int8_to_f32(w)
    else:
        wf = w.to(tl.float32)
    if BLOCK_M == 1:
        # GEMV: a broadcast multiply and a row sum beat a 16-row padded tensor-core dot
        acc += tl.sum(wf * x.to(tl.float32), axis=1)[None, :]
    elif DOT == "fp32":
        acc = tl.dot(x.to(tl.float32), tl.trans(wf), acc, input_precision="ieee")
    elif CVT == "asm16":  # fp16 x (act_f16, or fp16 activations), int8 w widened by int8_to_f16
        acc = tl.dot(x, tl.trans(int8_to_f16(w)), acc)
    elif W_FP8 or CVT == "magic":
        acc = tl.dot(x, tl.trans(wf.to(x.dtype)), acc)
    else:
        acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc
