"""Pure-torch reference ops: the test oracle for every kernel and the CPU path.

linear:  y = act((x · dequant(W)ᵀ) + b)                     weight-only (W8A16)
         y = act((q(x) · Wqᵀ) · s_x · s_w + b)              dynamic activations (W8A8)
gated:   y = act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u)        W_g, W_u stacked as one [2H, K] weight
gated_pair: the same with W_g, W_u (scales, biases) in separate tensors
sparse24_*: the same ops on a 2:4 weight packed by sparsity.pack_24 (unpacked to dense first); values
         int8 / float8_e4m3 with per-row scales, or bfloat16 with no scale (wscale None)
narrow_mlp: a whole narrow MLP (fused.narrow) on its packed buffers, every layer in fp32
mlp_block: a whole gated or fc1-act-fc2 block, weight-only: the two layers composed, h rounded to x's dtype

Accumulation in fp32; the output has the activation's dtype. Inputs may be N-D and strided.
"""
from __future__ import annotations

import torch

from fused.activations import apply_activation
from lowbit import get_format, quantize_activation
from sparsity.packing import unpack_24


def _matmul_fp32(x2: torch.Tensor, qweight: torch.Tensor, wscale: torch.Tensor, dynamic: bool) -> torch.Tensor:
    """[M, K] x, [N, K] 8-bit weight -> fp32 [M, N] with all scales applied (a bf16 weight: wscale None)."""
    dev = x2.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        # autocast would run these fp32 matmuls in bf16 and round the accumulator: the oracle must not
        # depend on the caller's autocast state (the modules already cast x to the autocast dtype).
        with torch.autocast(dev, enabled=False):
            return _matmul_fp32(x2, qweight, wscale, dynamic)
    if wscale is None:
        return x2.float() @ qweight.float().t()
    if dynamic:
        fmt = "int8" if qweight.dtype == torch.int8 else "float8_e4m3"
        xq, xs = quantize_activation(x2, fmt)
        # int8·int8 products summed in fp32 are exact while K·127² < 2²⁴; past that the rounding
        # is far below the quantization error.
        return (xq.float() @ qweight.float().t()) * xs * wscale
    return (x2.float() @ qweight.float().t()) * wscale


def linear_ref(x, qweight, wscale, bias=None, act="none", dynamic=False):
    """Reference fused linear: dequant → matmul → bias → activation."""
    get_format("int8" if qweight.dtype == torch.int8 else "float8_e4m3")
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    y = _matmul_fp32(x2, qweight, wscale, dynamic)
    if bias is not None:
        y = y + bias.float()
    y = apply_activation(y, act)
    return y.to(x.dtype).reshape(*x.shape[:-1], qweight.shape[0])


def gated_ref(x, qweight, wscale, bias=None, act="silu", dynamic=False):
    """Reference gated MLP up-projection: act(gate) ⊙ up with gate/up stacked in ``qweight`` [2H, K]."""
    K = x.shape[-1]
    H = qweight.shape[0] // 2
    x2 = x.reshape(-1, K)
    y = _matmul_fp32(x2, qweight, wscale, dynamic)
    if bias is not None:
        y = y + bias.float()
    h = apply_activation(y[:, :H], act) * y[:, H:]
    return h.to(x.dtype).reshape(*x.shape[:-1], H)


def smooth_input(x, smooth_inv):
    """x·(1/s) of SmoothQuant smoothing as the modules apply it: in fp32, rounded once to x's dtype."""
    return x if smooth_inv is None else (x.float() * smooth_inv).to(x.dtype)


def mlp_block_ref(x, w1, s1, b1, w2, s2, b2, act="silu", gated=True, smooth1=None, smooth2=None):
    """Reference whole block (the decode block's oracle): h = gated_ref (w1 [2H, K] stacked gate/up) or
    linear_ref(act) (w1 [H, K]) on x·(1/s_1), in x's dtype (the two-launch path stores h so), then
    y = linear_ref(h·(1/s_2)) with w2 [D, H]. Weight-only; smooth1/smooth2: smooth_inv or None."""
    h = (gated_ref if gated else linear_ref)(smooth_input(x, smooth1), w1, s1, b1, act)
    return linear_ref(smooth_input(h, smooth2), w2, s2, b2)


def gated_pair_ref(x, wg, sg, bg, wu, su, bu, act="silu", dynamic=False):
    """Reference for gate and up projections held in separate tensors: ``gated_ref`` on them stacked."""
    b = None if bg is None else torch.cat([bg, bu])
    return gated_ref(x, torch.cat([wg, wu]), torch.cat([sg, su]), b, act, dynamic)


def scale_epilogue_ref(y, x_scale, w_scale, bias, act, gated, out_dtype, m=None, planes=None):
    """Reference of fused.kernels.scale_epilogue: act(z·s_x·s_w + b) (gated: ⊙ the up half, likewise scaled)
    over y's first m rows, z = y, or with planes (lo_row, hi_w, lo_w) hi_w·y[:m] + lo_w·y[lo_row:lo_row + m];
    x_scale / w_scale None: 1; a gated y may also be [2, R, H] (gate and up products apart)."""
    if y.dim() == 3:
        y = torch.cat([y[0], y[1]], 1)
    N = y.shape[1] // 2 if gated else y.shape[1]
    m = y.shape[0] if m is None else m
    z = y[:m].float()
    if planes is not None:
        z = z * planes[1] + y[planes[0]:planes[0] + m].float() * planes[2]
    z = z if x_scale is None else z * x_scale.float()[:, None]
    if w_scale is not None:
        z = z * w_scale.float()
    if bias is not None:
        z = z + bias.float()
    h = apply_activation(z[:, :N], act)
    if gated:
        h = h * z[:, N:]
    return h.to(out_dtype)


def epilogue_quant_ref(y, x_scale, w_scale, bias, act, gated, h_dtype, fp8, m, rows=None, planes=None):
    """Reference of fused.kernels.epilogue_quant: scale_epilogue_ref's h (rounded to h_dtype) quantized per
    token (lowbit.quantize_activation) -> (q [rows, N] with zero padding rows, s [m])."""
    h = scale_epilogue_ref(y, x_scale, w_scale, bias, act, gated, h_dtype, m=m, planes=planes)
    q, s = quantize_activation(h, "float8_e4m3" if fp8 else "int8")
    pad = torch.zeros((0 if rows is None else rows - m, q.shape[1]), dtype=q.dtype)
    return torch.cat([q, pad.to(q.device)]), s[:, 0]


def sparse24_linear_ref(x, values, meta, wscale=None, bias=None, act="none", dynamic=False):
    """Reference 2:4 linear: unpack the packed weight to dense, then ``linear_ref``."""
    return linear_ref(x, unpack_24(values, meta), wscale, bias, act, dynamic)


def sparse24_gated_ref(x, values, meta, wscale=None, bias=None, act="silu", dynamic=False):
    """Reference 2:4 gated up-projection on a stacked packed [2H, K] weight: unpack, then ``gated_ref``."""
    return gated_ref(x, unpack_24(values, meta), wscale, bias, act, dynamic)


def narrow_mlp_ref(x, weights, params, dims, acts):
    """Reference narrow MLP on the packed buffers of fused.narrow.pack_narrow: every layer
    act(h · dequant(W)ᵀ + b) in fp32 (no rounding between layers), output in x's dtype."""
    from fused.narrow_pack import unpack_narrow

    K = x.shape[-1]
    dev = x.device.type
    if dev in ("cpu", "cuda") and torch.is_autocast_enabled(dev):
        with torch.autocast(dev, enabled=False):  # fp32 oracle whatever the caller's autocast
            return narrow_mlp_ref(x, weights, params, dims, acts)
    h = x.reshape(-1, K).float()
    for (w, b), act in zip(unpack_narrow(weights, params, dims), acts):
        h = apply_activation(h @ w.t() + b, act)
    return h.to(x.dtype).reshape(*x.shape[:-1], dims[-1])
