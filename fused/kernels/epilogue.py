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
    elif W_FP8 or CVT == "magic":
        acc = tl.dot(x, tl.trans(wf.to(x.dtype)), acc)
    else:
        acc = tl.dot(x, tl.trans(w.to(x.dtype)), acc)
    return acc
