"""The one place that decides which implementation runs a fused op.

Per call: the device, M, the weight format, weight-only vs dynamic activations and the op pick a path.
  * CPU                -> "cpu:<kernel>" (aten kernels, fused/cpu.py; rules in `_plan_cpu`)
  * CUDA, M <= 16      -> split-K GEMV, weight-only (also for W8A8 configs: see GEMV_MAX_M)
  * CUDA, M > 16       -> tiled GEMM: W8A16, or per-token activation quantization + W8A8 GEMM
2:4-sparse ops ("sparse24_linear", "sparse24_gated") take packed weights (sparsity.packing): on the CPU the
reference unpacks them to dense and runs the dense reference; on CUDA the Triton kernels read them packed
(int8 / fp8 / bf16 values), by M like the dense ops:
  * M <= 16 -> split-K sparse GEMV (sparse24_gemv), weight-only (also for W8A8 configs: see GEMV_MAX_M)
  * M > 16  -> tiled sparse kernel (sparse24_linear), weight-only or dynamic W8A8 for 8-bit values
"narrow_mlp" (a whole narrow MLP, fused.narrow) runs every layer in one Triton launch on CUDA at any M.
Every call is counted in ``stats`` so `explain`/profile output shows what really ran.
"""
from __future__ import annotations

import contextlib
import os
from collections import Counter

import torch

from fused import cpu, reference

# (op, path) -> calls. Read by fused.explain and the profiler report.
stats: Counter = Counter()
_strict = os.environ.get("FUSED_STRICT") == "1"
_forced: str | None = None


def set_strict(on: bool = True) -> None:
    """Strict mode: a CUDA call that would fall back to the slow reference raises instead."""
    global _strict
    _strict = on


@contextlib.contextmanager
def force_path(path: str | None):
    """Force "reference" or "triton" for every call (tests; "triton" on CPU needs TRITON_INTERPRET=1)."""
    global _forced
    if path not in (None, "reference", "triton"):
        raise ValueError(f"path must be None, 'reference' or 'triton', got {path!r}")
    old, _forced = _forced, path
    try:
        yield
    finally:
        _forced = old


# At M <= GEMV_MAX_M the weight-only split-K GEMV runs (dense: w8a16_gemv, 2:4: sparse24_gemv), also for
# W8A8 configs: decode is bound by the weight bytes, and skipping the activation quantization is faster
# and no less accurate.
GEMV_MAX_M = 16
SPARSE_OPS = ("sparse24_linear", "sparse24_gated")


def _fmt(qweight: torch.Tensor) -> str:
    if qweight.dtype == torch.bfloat16:
        return "bfloat16"
    return "int8" if qweight.dtype == torch.int8 else "float8_e4m3"


def triton_kernel_for(op: str, fmt: str, dynamic: bool, M: int | None) -> str:
    """The Triton kernel(s) for (op, format, mode) at batch size M (None: both, "small|large")."""
    if op in SPARSE_OPS:
        small, large = "sparse24_gemv", "sparse24_linear"
    elif op == "narrow_mlp":
        return "narrow_mlp"
    else:
        small = "w8a16_gemv"
        large = "w8_gemm_w8a8" if dynamic else "w8_gemm_w8a16"
    if M is None:
        return f"{small}|{large}"
    return small if M <= GEMV_MAX_M else large


def plan(op: str, fmt: str, dynamic: bool, device: torch.device | str, M: int | None = None,
         dtype: torch.dtype | None = None, k: int | None = None, weight_aligned: bool = True) -> tuple[str, str]:
    """(path, why) for a call of ``op`` on ``device`` at batch size M: what `explain` prints.

    On the CPU the path also depends on the activation dtype, M (rows of x), K and the weight buffer's
    alignment; left out, they default to what `explain` describes: bf16 activations, M=1 (decode)."""
    device = torch.device(device)
    if _forced == "reference":
        return "reference", "forced"
    if device.type == "cuda" or _forced == "triton":
        kernel = triton_kernel_for(op, fmt, dynamic, M)
        if "|" in kernel and op in SPARSE_OPS:
            why = f"fused Triton 2:4 ({fmt} values): split-K sparse GEMV at M<={GEMV_MAX_M} (weight-only), tiled sparse kernel above"
            if dynamic:
                why += " with per-token activation quantization (W8A8)"
        elif "|" in kernel:
            why = f"fused Triton: split-K GEMV at M<={GEMV_MAX_M} (weight-only), tiled GEMM above"
            if dynamic:
                why += " with fused per-token activation quantization (W8A8)"
        else:
            why = f"fused Triton ({op}, {fmt})"
        return f"triton:{kernel}", why
    if op in SPARSE_OPS:
        return "reference", "CPU path (pure torch: unpacks the 2:4 weight to dense)"
    if op == "narrow_mlp":
        return "reference", "CPU path (pure torch, layer by layer)"
    if device.type == "cpu":
        return _plan_cpu(fmt, dynamic, dtype, M, k, weight_aligned)
    return "reference", f"{device.type}: no kernels, pure-torch reference"


def _plan_cpu(fmt, dynamic, dtype, m, k, weight_aligned) -> tuple[str, str]:
    described = dtype is None and m is None  # explain: no call at hand, describe decode in bf16
    dtype = torch.bfloat16 if dtype is None else dtype
    m = 1 if m is None else m
    cdt = str(cpu.compute_dtype(dtype)).removeprefix("torch.")
    if fmt == "float8_e4m3":
        return "cpu:fp8_dequant_mm", f"fp8 emulated: exact fp8->bf16 per 4 MiB tile + {cdt} GEMM (no fp8 GEMM on CPU)"
    if dynamic:
        return "cpu:int_mm", "W8A8: per-token int8 activations, torch._int_mm (int32), fp32 epilogue"
    if dtype == torch.bfloat16 and m <= cpu.INT8PACK_MAX_M and weight_aligned and (k is None or cpu.int8pack_ok(k)):
        why = f"torch._weight_int8pack_mm (bf16, M <= {cpu.INT8PACK_MAX_M})"
        if described:
            why += "; larger M or fp32/fp16 activations: cpu:int8_dequant_mm"
        return "cpu:int8pack", why
    if dtype != torch.bfloat16:
        why = f"{str(dtype).removeprefix('torch.')} activations: int8pack is a scalar loop outside bf16"
    elif m > cpu.INT8PACK_MAX_M:
        why = f"M={m} > {cpu.INT8PACK_MAX_M}: GEMM beats int8pack's GEMV"
    elif not weight_aligned:
        why = "weight buffer not contiguous/64-byte aligned: int8pack would read out of bounds"
    else:
        why = f"K={k} not a multiple of {cpu.INT8PACK_K_MULTIPLE}: int8pack would read out of bounds"
    return "cpu:int8_dequant_mm", f"{why}; per-tile dequant + {cdt} GEMM"


def _check(x: torch.Tensor, qweight: torch.Tensor, name: str) -> None:
    if not x.is_floating_point():
        raise TypeError(f"{name}: activations must be float16/bfloat16/float32, got {x.dtype}")
    if x.device != qweight.device:
        raise RuntimeError(
            f"{name}: device mismatch: activations on {x.device}, weights on {qweight.device}; "
            f"move the input or the model (model.to({x.device.type!r}))")
    if x.shape[-1] != qweight.shape[1]:
        raise ValueError(f"{name}: input has {x.shape[-1]} features, weight expects {qweight.shape[1]}")


_cuda_paths: dict = {}
_kernels = None


def _triton_kernels():
    """The launchers, imported on first use (importing triton is slow; CPU-only users never need it)."""
    global _kernels
    if _kernels is None:
        from types import SimpleNamespace

        from fused.kernels.act_quant import act_quant
        from fused.kernels.w8_gemm import w8_gemm
        from fused.kernels.w8a16_gemv import w8a16_gemv

        _kernels = SimpleNamespace(act_quant=act_quant, w8_gemm=w8_gemm, w8a16_gemv=w8a16_gemv)
    return _kernels


def _run(op: str, x, qweight, wscale, bias, act, dynamic):
    _check(x, qweight, op)
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    if x.is_cuda and _forced is None:
        # the eager hot path (budget ~10 µs per launch): the same choice as plan(), without its strings
        small = M <= GEMV_MAX_M
        path = _cuda_paths.get((op, dynamic, small))
        if path is None:
            path = _cuda_paths[(op, dynamic, small)] = "triton:" + triton_kernel_for(op, "int8", dynamic, M)
    else:
        path, why = plan(op, _fmt(qweight), dynamic, x.device, M, dtype=x.dtype, k=K,
                         weight_aligned=x.device.type != "cpu" or cpu.aligned(qweight))
    stats[(op, path)] += 1
    if path.startswith("cpu:"):
        return cpu.run(path, op, x, qweight, wscale, bias, act, dynamic)
    if path == "reference":
        if _strict and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        ref = reference.linear_ref if op == "linear" else reference.gated_ref
        return ref(x, qweight, wscale, bias, act, dynamic)
    gated = op == "gated"
    k = _triton_kernels()
    if M <= GEMV_MAX_M:
        y = k.w8a16_gemv(x2, qweight, wscale, bias, act, gated)
    elif dynamic:
        xq, xs = k.act_quant(x2, fp8=qweight.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(xq, qweight, wscale, bias, act, gated, x_scale=xs, out_dtype=x.dtype)
    else:
        y = k.w8_gemm(x2, qweight, wscale, bias, act, gated)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def linear(x, qweight, wscale, bias=None, act="none", dynamic=False):
    """y = act(x · dequant(W)ᵀ + b) through the chosen implementation."""
    return _run("linear", x, qweight, wscale, bias, act, dynamic)


def gated(x, qweight, wscale, bias=None, act="silu", dynamic=False):
    """y = act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u) with W_g/W_u stacked in qweight [2H, K]."""
    return _run("gated", x, qweight, wscale, bias, act, dynamic)


def gated_pair(x, wg, sg, bg, wu, su, bu, act="silu", dynamic=False):
    """``gated`` with the gate (wg, sg, bg) and up (wu, su, bu) projections in separate tensors: the same
    kernels, reading both weights where they are (no copy). fused.compile_passes rewrites
    act(linear(x, W_g)) * linear(x, W_u) of two per-Linear modules into this op."""
    op = "gated_pair"
    _check(x, wg, op)
    if wu.shape != wg.shape or wu.dtype != wg.dtype or su.shape != sg.shape:
        raise ValueError(f"{op}: gate and up weights differ: {wg.dtype} {tuple(wg.shape)} / scale {tuple(sg.shape)} "
                         f"vs {wu.dtype} {tuple(wu.shape)} / scale {tuple(su.shape)}")
    if (bg is None) != (bu is None):
        raise ValueError(f"{op}: gate and up projections must both have a bias or both have none")
    if wu.device != wg.device:
        raise RuntimeError(f"{op}: gate weights on {wg.device}, up weights on {wu.device}")
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    if x.is_cuda and _forced is None:
        small = M <= GEMV_MAX_M
        path = _cuda_paths.get((op, dynamic, small))
        if path is None:
            path = _cuda_paths[(op, dynamic, small)] = "triton:" + triton_kernel_for(op, "int8", dynamic, M)
    else:
        path, why = plan(op, _fmt(wg), dynamic, x.device, M, dtype=x.dtype, k=K,
                         weight_aligned=x.device.type != "cpu" or (cpu.aligned(wg) and cpu.aligned(wu)))
    stats[(op, path)] += 1
    if path.startswith("cpu:"):
        return cpu.run_pair(path, x, wg, sg, bg, wu, su, bu, act, dynamic)
    if path == "reference":
        if _strict and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        return reference.gated_pair_ref(x, wg, sg, bg, wu, su, bu, act, dynamic)
    k = _triton_kernels()
    up = (wu, su, bu)
    if M <= GEMV_MAX_M:
        y = k.w8a16_gemv(x2, wg, sg, bg, act, True, up=up)
    elif dynamic:
        xq, xs = k.act_quant(x2, fp8=wg.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(xq, wg, sg, bg, act, True, x_scale=xs, out_dtype=x.dtype, up=up)
    else:
        y = k.w8_gemm(x2, wg, sg, bg, act, True, up=up)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def _run_sparse(op: str, x, values, meta, wscale, bias, act, dynamic):
    if not x.is_floating_point():
        raise TypeError(f"{op}: activations must be float16/bfloat16/float32, got {x.dtype}")
    if x.device != values.device:
        raise RuntimeError(
            f"{op}: device mismatch: activations on {x.device}, weights on {values.device}; "
            f"move the input or the model (model.to({x.device.type!r}))")
    if x.shape[-1] != 2 * values.shape[1]:
        raise ValueError(f"{op}: input has {x.shape[-1]} features, the packed 2:4 weight expects {2 * values.shape[1]}")
    x2 = x.reshape(-1, x.shape[-1])
    M = x2.shape[0]
    path, why = plan(op, _fmt(values), dynamic, x.device, M)
    stats[(op, path)] += 1
    if path == "reference":
        if _strict and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        ref = reference.sparse24_linear_ref if op == "sparse24_linear" else reference.sparse24_gated_ref
        return ref(x, values, meta, wscale, bias, act, dynamic)
    if M <= GEMV_MAX_M:
        # decode: weight-only even for a W8A8 config (dynamic ignored), as for the dense ops
        from fused.kernels.sparse24_gemv import sparse24_gemv

        y = sparse24_gemv(x2, values, meta, wscale, bias, act, gated=op == "sparse24_gated")
    else:
        from fused.kernels.sparse24_linear import sparse24_gated, sparse24_linear

        kernel = sparse24_linear if op == "sparse24_linear" else sparse24_gated
        y = kernel(x2, values, meta, wscale, bias, act, dynamic)
    return y.reshape(*x.shape[:-1], y.shape[-1])


def sparse24_linear(x, values, meta, wscale=None, bias=None, act="none", dynamic=False):
    """y = act(x · Wᵀ + b) with W 2:4, packed as (values, meta) + per-row scales (None for bf16 values)."""
    return _run_sparse("sparse24_linear", x, values, meta, wscale, bias, act, dynamic)


def sparse24_gated(x, values, meta, wscale=None, bias=None, act="silu", dynamic=False):
    """act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u) with W_g/W_u stacked in one packed 2:4 [2H, K] weight."""
    return _run_sparse("sparse24_gated", x, values, meta, wscale, bias, act, dynamic)


def narrow_mlp(x, weights, params, dims, acts):
    """A whole narrow MLP (packed by fused.narrow.pack_narrow): one fused launch on CUDA, the reference on CPU."""
    op = "narrow_mlp"
    if not x.is_floating_point():
        raise TypeError(f"{op}: activations must be float16/bfloat16/float32, got {x.dtype}")
    if x.device != weights.device:
        raise RuntimeError(
            f"{op}: device mismatch: activations on {x.device}, weights on {weights.device}; "
            f"move the input or the model (model.to({x.device.type!r}))")
    if x.shape[-1] != dims[0]:
        raise ValueError(f"{op}: input has {x.shape[-1]} features, the MLP expects {dims[0]}")
    fmt = {torch.int8: "int8", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(weights.dtype)
    if fmt is None:
        raise TypeError(f"{op}: packed weights must be int8/float16/bfloat16, got {weights.dtype}")
    path, why = plan(op, fmt, False, x.device)
    stats[(op, path)] += 1
    if path == "reference":
        if _strict and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        return reference.narrow_mlp_ref(x, weights, params, dims, acts)
    from fused.kernels.narrow_mlp import narrow_mlp as kernel

    # 2-D views keep their strides (the kernel loads through them); N-D inputs are flattened, which
    # copies only when the leading dims cannot be merged
    y = kernel(x.reshape(-1, x.shape[-1]), weights, params, dims, acts)
    return y.reshape(*x.shape[:-1], dims[-1])
