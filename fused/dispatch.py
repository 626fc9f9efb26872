"""The one place that decides which implementation runs a fused op.

Per call: the device, M, the weight format, weight-only vs dynamic activations and the op pick a path.
  * CPU                -> "cpu:<kernel>" (aten kernels, fused/cpu.py; rules in `_plan_cpu`)
  * CUDA, M <= GEMV_MAX_M (16) -> split-K GEMV, weight-only (also for W8A8 configs: see A8_GEMV_MAX_M)
  * CUDA, larger M      -> tiled GEMM: W8A16 (from WIDEN_MIN_M on a transient 16-bit copy of the weight), or
                          per-token activation quantization + W8A8 GEMM (inside the GEMM at M <= QX_MAX_M)
  * W8A16 int8 (bf16/fp16 x) at SPLIT_MIN_M <= M <= SPLIT_MAX_M through split activations
    (act_split + two int8 MMAs per weight tile); the same for fp8 weights with bf16 x (FP8_SPLIT, on by
    default: e4m3 planes, two fp8 MMAs); W8A8 at M <= 16 through the MMA GEMM (A8_GEMV_MAX_M = 0)
  * dense W8A8 above the GEMV range, with CUBLAS_W8A8, under CUDA-graph capture: a route timed per shape,
    the Triton GEMM or cuBLAS's (torch._scaled_mm / _int_mm) + scale_epilogue (eager calls: Triton)
2:4-sparse ops ("sparse24_linear", "sparse24_gated") take packed weights (sparsity.packing): on the CPU the
dense CPU kernels run on one tile of rows at a time, expanded from the packed weight ("cpu:s24+<kernel>"); on CUDA, 8-bit values take a route measured
per shape on the first call (SPARSE_ROUTE), one pick for eager calls and one for CUDA-graph capture:
the packed kernels, by M like the dense ops
  * M <= 16 -> split-K sparse GEMV (sparse24_gemv), weight-only (also for W8A8 configs)
  * M > 16  -> tiled sparse kernel (sparse24_linear), weight-only or dynamic W8A8 for 8-bit values
or unpack24 to a transient dense copy + the dense path above, or cuSPARSELt's 2:4 tensor cores on a kept
compressed copy (_cslt: 8-bit operands, W8A16 as split planes) + scale_epilogue, or (M <= 16, int8; sparse24_mma.MMA = False:
off) sparse24_mma on the same buffer (mma.sp; W8A16 after act_split, W8A8 after act_quant), whichever is faster.
"narrow_mlp" (a whole narrow MLP, fused.narrow) runs every layer in one Triton launch on CUDA at any M.
"sparse24_mlp_block" / "mlp_block" with both layers W8A8, above M=16: the first layer hands h to the second
already quantized per token (HANDOFF).
"mlp_block" (a whole FusedGatedMLP / FusedMLP with dense 8-bit weights):
  * CUDA, M <= DECODE_BLOCK_MAX_M (default 0: off) -> decode_block: both layers in ONE launch, weight-only,
    where the first call of the shape measures it faster than the two launches
  * otherwise                     -> "per_layer": each layer through its own dispatch (as above)
Eager CUDA calls of the converted modules replay their recorded launches from the third call of an input
signature (`eager`). Every call is counted in ``stats`` so `explain`/profile output shows what really ran.
"""
from __future__ import annotations

import contextlib
import importlib
import math
import os
import warnings
from collections import Counter
from typing import NamedTuple

import torch

from fused import cpu, cpu_narrow, cpu_routes, reference
from fused import kernels as _kernels_pkg
from fused.kernels import launch
from fused.kernels.tuning import m_bucket
from lowbit.quant import FP8_SPLIT_LO

# (op, path) -> calls. Read by fused.explain and the profiler report.
stats: Counter = Counter()
_forced: str | None = None


def set_strict(on: bool = True) -> None:
    """Strict mode (also FUSED_STRICT=1): a CUDA call that would fall back to the slow reference, or a kernel
    that would run a slower form of its tuned pick, raises instead."""
    _kernels_pkg.set_strict(on)


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
# dispatch.GEMV_MAX_M = 32 or 64 (opt-in, measured and slower): the dense GEMV up to that M, with 32- / 64-row tiles (split
# activations then start above it), meant for the step at M=17, where the tiled GEMM takes over (+16% for +6% of
# the rows). Predicted 67-72 µs at M=17..32 (the weight is still read once); measured on the H200 (2026-12-01,
# twelfth session, `bash .ci/h200_next.sh gemv32`, Llama block, graph µs, bound 16 -> 64): int8 W8A16 M=17 77.5 ->
# 88.8, M=32 75.9 -> 87.9, M=48 80.2 -> 123.6; fp8 W8A16 91.5 -> 88.2, 90.7 -> 86.1, 98.3 -> 123.6; fp8 W8A8 M=17
# 69.5 -> 87.6. The GEMV's FMA work grows with the rows (gate/up 61 µs and down 31 at 32 rows, against ~41 and 25
# at 16): past 16 rows it is no longer bound by the weight stream. The 2:4 decode kernel stays at M <= 16.
SPARSE_GEMV_MAX_M = 16
# The same bound for dense W8A8 configs (dispatch.A8_GEMV_MAX_M = 0: act_quant + the tiled W8A8 GEMM from M=1,
# whose weights go through cp.async into int8/fp8 MMAs, ~0.8 SASS instructions per weight byte vs the
# GEMV's ~6; to be measured on the H200).
A8_GEMV_MAX_M = GEMV_MAX_M
# W8A8 tiled GEMM at M <= QX_MAX_M (reached when A8_GEMV_MAX_M is lowered): the per-token quantization runs
# inside the GEMM (w8_gemm quantize_x, bit-identical to act_quant + GEMM): one launch per layer.
QX_MAX_M = 16
# W8A16 from this M up (bf16/fp16 activations): widen the 8-bit weight to the activation dtype once per call
# and run the tiled kernel on 16-bit operands. Compute-bound there, and Triton's mixed-input Hopper GEMM
# runs at about half the rate of a 16-bit one (H200, 2026-11-30: gate/up at M=8192 4503 µs mixed vs
# 322 widen + 3126); the widened copy is transient.
WIDEN_MIN_M = 1024
SPARSE_OPS = ("sparse24_linear", "sparse24_gated")
# W8A16 with int8 weights and bf16/fp16 activations at M <= SPLIT_MAX_M: the activations as two int8 planes
# (act_split: x ≈ s·(256·hi + lo), 15 bits per token, finer than bf16's 8-bit mantissa near the row's
# absmax) and two int8 tensor-core dots per weight tile (w8_gemm x_split): the weights go from memory into
# the MMA untouched, where the GEMV spends ~6 instructions per weight byte widening them (sm_90 SASS).
# On for SPLIT_MIN_M <= M <= SPLIT_MAX_M. H200, 2026-12-01, Llama-3-8B block, tuned, CUDA-graph µs, mixed-input
# GEMM -> split: M=17 76.8 -> 77.8, 32 75.7 -> 78.7, 64 113.4 -> 86.7, 128 142.0 -> 125.2, 256 264.9 -> 219.1,
# 512 476.8 -> 364.9; M=1024 widen path 695.1, split 718.9. At M <= 16 the GEMV wins (split inside the GEMM:
# 178 vs 66 µs at M=1, every program re-reading its rows over the whole K for the token's scale). From M=17 since
# the thirteenth session (`bash .ci/h200_next.sh thirteenth1`, same day, graph µs, split from 33 -> from 17): int8
# W8A16 M=17 77.7 -> 74.3, M=32 76.0 -> 74.3; fp8 W8A16 91.9 -> 80.2, 90.5 -> 81.0 (bf16 eager 109-110).
# dispatch.SPLIT_MAX_M = 0 turns it off.
SPLIT_MIN_M = GEMV_MAX_M + 1
SPLIT_MAX_M = WIDEN_MIN_M - 1
# Split activations made inside the GEMM (w8_gemm quantize_x + x_split, one launch per layer: every program
# re-reads its rows over the whole K for the token's scale) for SPLIT_MIN_M <= M <= SPLIT_QX_MAX_M; above it
# act_split runs first (two launches per layer). 0 (default): act_split everywhere. To be measured on the H200
# (dispatch.SPLIT_QX_MAX_M = 1023 A/B).
SPLIT_QX_MAX_M = 0
# The same for fp8 weights with bf16 activations: two e4m3 planes per token (act_split fp8=True:
# x ≈ s·(hi + lo/16), ~8 significant bits, bf16's precision; 64 dB against x vs 60 for bf16 rounding) and two
# fp8 tensor-core dots per weight tile, where the mixed-input GEMM converts every weight. fp16 activations
# (11 bits) keep the mixed-input GEMM. H200, 2026-12-01, Llama-3-8B block, tuned, CUDA-graph µs, mixed-input
# -> split (dispatch.FP8_SPLIT = 0/1, `.ci/h200_next.sh abqx`): M=64 122.6 -> 81.2, 128 156.8 -> 112.8,
# 256 284.4 -> 187.5, 512 498.8 -> 335.2. dispatch.FP8_SPLIT = False turns it off.
FP8_SPLIT = True
# act_split and the split GEMM in ONE launch (fused.kernels.split_gemm: a ticketed kernel whose first programs split
# x's rows and whose GEMM items wait for them, then run w8_gemm's own tile with its own config: bit-identical to the
# two launches). Why: 4 launches per W8A16 block at 17 <= M <= 1023 where issue 3 asks 2 (2 per block with it, under
# torch.compile too), and two kernel gaps fewer. Predicted W8A16 M=128 114.1 -> ~110 µs; measured on the H200
# (2026-12-02, seventeenth session, `bash .ci/h200_next.sh sixteenth5`, Llama block, graph µs, off -> on): int8
# M = 17 / 128 / 512 75.2 / 113.8 / 345.9 -> 77.8 / 127.0 / 391.0, fp8 76.4 / 107.3 / 345.4 -> 79.4 / 121.5 / 380.0.
# It loses everywhere, so it stays off (dispatch.SPLIT_ONE_LAUNCH = True: on). Likely cause, not yet measured: its row phase
# runs on the GEMM's heavy CTAs, one per SM (NOTES, seventeenth); split_gemm.ROW_STAGES is the prepared remedy.
SPLIT_ONE_LAUNCH = False
_SPLIT_KERNEL = {False: "act_split+w8_gemm_split", True: "split_gemm"}
# The same for W8A8 layers above the GEMV range: act_quant and the W8A8 GEMM in one launch (split_gemm.quant_gemm),
# bit-identical; 4 -> 2 launches per block under torch.compile with per-Linear layers, and a first layer whose h is
# handed on quantized then takes 2 launches instead of 3. Prepared in the sixteenth session, not yet timed
# (dispatch.QUANT_ONE_LAUNCH = True, `bash .ci/h200_next.sh sixteenth6`); its twin above lost 3-45 µs on the H200, and so did
# first_layer below, so it stays off.
QUANT_ONE_LAUNCH = False


def _is_split(kernel: str) -> bool:
    return "w8_gemm_split" in kernel or kernel == "split_gemm"


# At M <= DECODE_BLOCK_MAX_M a whole dense 8-bit MLP block may run as one decode_block launch (weight-only,
# as the GEMV), when a measurement on the first call of the shape says it is faster than the two launches.
# Off by default (0): on the H200 (2026-11-30, Llama-3-8B block, tuned) it lost at both M=1 (81-85 µs vs
# 68-70 µs for the two GEMV launches) and M=16 (116 vs 66-77 µs): the fp32 atomics of the per-slice
# down-projection partials and the strided [D, BLOCK_H] reads of W2 cost more than the saved launch.
# The eleventh session added a second design to the same tuner, the deterministic decode chain (both layers' GEMV
# tiles as one chain of work items): slower too, e.g. int8 M=1 73.1 vs 66.9 µs for the two launches in one bench
# run, best candidates 63.6-77.2 against 61.5-66.7 (fused.kernels.decode_chain gives the pairs and says why).
# Set it to 16 (or dispatch.DECODE_BLOCK_MAX_M = 16) to let the measurement decide; int8 blocks then also try
# the int8-MMA (split activations) configs.
DECODE_BLOCK_MAX_M = 0


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
        if not dynamic and fmt == "int8" and M is not None and SPLIT_MIN_M <= M <= SPLIT_MAX_M:
            # the planes made inside the GEMM at small M (one launch), by act_split above
            return "w8_gemm_split" if M <= SPLIT_QX_MAX_M else _SPLIT_KERNEL[SPLIT_ONE_LAUNCH]
        if not dynamic and fmt == "float8_e4m3" and FP8_SPLIT and M is not None and SPLIT_MIN_M <= M <= SPLIT_MAX_M:
            return _SPLIT_KERNEL[SPLIT_ONE_LAUNCH]
        large = ("quant_gemm_w8a8" if QUANT_ONE_LAUNCH else "w8_gemm_w8a8") if dynamic else "w8_gemm_w8a16"
        if dynamic and M is not None and M <= QX_MAX_M:
            large = "w8_gemm_w8a8_qx"
        if not dynamic and M is not None and M >= WIDEN_MIN_M:
            large = "widen+w8_gemm_bf16"
    if M is None:
        return f"{small}|{large}"
    if op in SPARSE_OPS:
        bound = SPARSE_GEMV_MAX_M
    else:
        bound = A8_GEMV_MAX_M if dynamic else GEMV_MAX_M
    return small if M <= bound else large


def plan(op: str, fmt: str, dynamic: bool, device: torch.device | str, M: int | None = None,
         dtype: torch.dtype | None = None, k: int | None = None, weight_aligned: bool = True,
         weight_cacheable: bool = True, weight_packed: bool = False, n: int | None = None,
         weight_act_bits: int = 8) -> tuple[str, str]:
    """(path, why) for a call of ``op`` on ``device`` at batch size M: what `explain` prints.

    On the CPU the path also depends on the activation dtype, M (rows of x), K, N (the weight's rows: its size) and
    the weight buffer's alignment, whether a copy derived from it can be kept (`cpu.cacheable`) and whether it is
    packed for the CPU (`fused.pack_for_cpu`: oneDNN's copy is its only data); left out, they default to what
    `explain` describes: bf16 activations, M=1 (decode)."""
    device = torch.device(device)
    if op == "mlp_block":
        return _plan_block(device, M)
    if _forced == "reference":
        return "reference", "forced"
    if device.type == "cuda" or _forced == "triton":
        kernel = triton_kernel_for(op, fmt, dynamic, M)
        # int8 planes (15 bits) would lose to fp32's 24 bits, e4m3 planes (~8) to fp16's 11 too
        if _is_split(kernel) and (dtype == torch.float32 or (fmt == "float8_e4m3" and dtype == torch.float16)):
            kernel = triton_kernel_for(op, "any", dynamic, M)
        if "|" in kernel and op in SPARSE_OPS:
            why = f"fused Triton 2:4 ({fmt} values): split-K sparse GEMV at M<={SPARSE_GEMV_MAX_M} (weight-only), tiled sparse kernel above"
            if fmt != "bfloat16":
                why += ("; per shape, the first call also times unpacking to dense (transient) + the dense kernels "
                        "and, on CUDA, cuSPARSELt's 2:4 tensor cores (8-bit operands: W8A8 per-token, W8A16 split "
                        "planes; on a kept compressed copy), and keeps the fastest for eager calls and for "
                        "CUDA-graph capture (SPARSE_ROUTE; the picks: sparse_route_picks)")
            if dynamic:
                why += " with per-token activation quantization (W8A8)"
        elif "|" in kernel:
            why = f"fused Triton: split-K GEMV at M<={GEMV_MAX_M} (weight-only), tiled GEMM above"
            if dynamic:
                why += " with fused per-token activation quantization (W8A8)"
                if CUBLAS_W8A8:
                    why += ("; per shape the first call also times cuBLAS's GEMM + scale_epilogue, which CUDA-graph "
                            "capture takes where faster (CUBLAS_W8A8; eager calls keep Triton)")
            else:
                if fmt in ("int8", "any") and SPLIT_MIN_M <= SPLIT_MAX_M:
                    why += (f"; int8 with bf16/fp16 activations at {SPLIT_MIN_M}<=M<={SPLIT_MAX_M}: activations split "
                            "into two int8 planes, two int8 tensor-core dots per weight tile")
                if fmt in ("float8_e4m3", "any") and FP8_SPLIT and SPLIT_MIN_M <= SPLIT_MAX_M:
                    why += (f"; fp8 with bf16 activations at {SPLIT_MIN_M}<=M<={SPLIT_MAX_M}: activations split into "
                            "two e4m3 planes, two fp8 tensor-core dots per weight tile (off: dispatch.FP8_SPLIT = False)")
                why += f"; from M={WIDEN_MIN_M} the weight is widened to bf16/fp16 once per call (transient copy)"
                if CUBLAS_W8A16:
                    why += (" and, with bf16 activations, each shape's first call also times cuBLAS's bf16 GEMM on it "
                            "+ scale_epilogue against the Triton GEMM, eager and CUDA-graph picks (CUBLAS_W8A16)")
                    if W8A16_WS:
                        why += ("; on Hopper also the warp-specialized Gluon GEMM that widens the weight tiles in "
                                "registers, no widened copy (W8A16_WS)")
                        if W8A16_WS_MIN_M < WIDEN_MIN_M:
                            why += f", timed against split activations from M={W8A16_WS_MIN_M} (W8A16_WS_MIN_M)"
                        if WS_SPLIT_MIN_M <= SPLIT_ROUTE_MAX_M:
                            why += (f"; from M={WS_SPLIT_MIN_M} to {SPLIT_ROUTE_MAX_M} the split planes also through "
                                    "the Gluon 8-bit GEMM (2M rows, combined per token in its epilogue), timed per "
                                    "shape (WS_SPLIT_MIN_M)")
        elif _is_split(kernel) and fmt == "float8_e4m3":
            why = (f"W8A16 at {SPLIT_MIN_M}<=M<={SPLIT_MAX_M}: bf16 activations split into two e4m3 planes per token "
                   "(~8 significant bits), two fp8 tensor-core dots per weight tile (off: dispatch.FP8_SPLIT = False)")
        elif _is_split(kernel):
            why = (f"W8A16 at {SPLIT_MIN_M}<=M<={SPLIT_MAX_M}: bf16/fp16 activations split into two int8 planes per token "
                   "(15 bits), two int8 tensor-core dots per weight tile")
        elif kernel.startswith("widen"):
            why = f"M>={WIDEN_MIN_M}: weight widened to 16 bits once per call (transient), 16-bit tiled GEMM"
        else:
            why = f"fused Triton ({op}, {fmt})"
        if kernel == "split_gemm":
            why += "; the split and the GEMM in one launch (SPLIT_ONE_LAUNCH)"
        return f"triton:{kernel}", why
    if op == "narrow_mlp":
        if device.type == "cpu":
            return "cpu:narrow_addmm", ("layer by layer: one fp32 GEMM with the bias inside (oneDNN's linear, or "
                                        "addmm) + in-place activation, on fp32 layers unpacked once and cached")
        return "reference", f"{device.type}: no kernels, pure-torch reference"
    if device.type == "cpu":
        if cpu_routes.applies(fmt) and fmt == "int8" and op not in SPARSE_OPS:
            return cpu_routes.plan(dynamic, torch.bfloat16 if dtype is None else dtype, 1 if M is None else M, k, n,
                                   weight_aligned, weight_cacheable, weight_packed, weight_act_bits)
        if weight_packed and fmt == "int8" and op not in SPARSE_OPS:
            return _plan_cpu_packed(dynamic, dtype, M, k)
        return _plan_cpu(fmt, dynamic, dtype, M, k, weight_aligned, sparse=op in SPARSE_OPS,
                         weight_cacheable=weight_cacheable, n=n)
    return "reference", f"{device.type}: no kernels, pure-torch reference"


def cpu_weight_facts(device: torch.device, *weights: torch.Tensor) -> dict:
    """plan()'s keyword facts about the weight buffers a CPU call reads (all of them must qualify); none elsewhere."""
    if device.type != "cpu":
        return {}
    return dict(weight_aligned=all(cpu.aligned(w) for w in weights),
                weight_cacheable=all(cpu.cacheable(w) for w in weights),
                weight_packed=all(cpu.packed_only(w) for w in weights),
                weight_act_bits=min(cpu.packed_act_bits(w) for w in weights))


def _plan_block(device: torch.device, M: int | None) -> tuple[str, str]:
    """A whole dense 8-bit block: "triton:decode_block" (one launch) or "per_layer" (each layer's own path)."""
    per_layer = "per_layer", "each layer takes its own path (see its row)"
    if _forced == "reference":
        return "per_layer", "forced reference: each layer runs the reference"
    if device.type != "cuda" and _forced != "triton":
        return per_layer
    if DECODE_BLOCK_MAX_M < 1:
        return "per_layer", ("each layer its own kernel (the one-launch decode block is off: measured slower "
                             "on the H200; dispatch.DECODE_BLOCK_MAX_M = 16 lets a per-shape measurement decide)")
    one = (f"whole block in one launch at M<={DECODE_BLOCK_MAX_M} (weight-only; 2 launches, bit-stable, under "
           "torch.use_deterministic_algorithms)")
    if M is None:
        return "triton:decode_block|per_layer", one + ", each layer's own kernel above"
    return ("triton:decode_block", one) if M <= DECODE_BLOCK_MAX_M else per_layer


def _plan_cpu_packed(dynamic, dtype, m, k) -> tuple[str, str]:
    """An int8 weight packed for the CPU (fused.pack_for_cpu): oneDNN's copy is its only data, so every M runs on it."""
    only = "oneDNN's reordered copy, the layer's only weight (fused.pack_for_cpu: 1 B/weight)"
    if dynamic:
        return "cpu:qlinear", f"W8A8: per-token int8 activations, oneDNN int8 matmul (int32 sums) on {only}"
    why = "x as two int8 planes (15 bits per token) in one oneDNN int8 matmul on " + only
    if dtype is None or dtype == torch.bfloat16:
        return "cpu:split_qlinear", "bf16 " + why
    # rebuilding the plain weight for fp32 math would cost ~2 ns per weight per call: 15 bits per token instead
    # (~85 dB against fp32 math, far above the int8 weights' ~40)
    return "cpu:split_qlinear", f"{str(dtype).removeprefix('torch.')} {why} (not exact fp32 math: ~85 dB)"


def _plan_cpu(fmt, dynamic, dtype, m, k, weight_aligned, sparse=False, weight_cacheable=True,
              n=None) -> tuple[str, str]:
    if sparse:  # the dense path's kernel on tiles expanded from the packed weight (always fresh, aligned, not kept)
        if fmt == "bfloat16":
            path, why = "cpu:bf16_mm", "bf16 values: per-tile F.linear"
        else:
            path, why = (cpu_routes.plan(dynamic, torch.bfloat16 if dtype is None else dtype, 1 if m is None else m, k,
                                         n, True, None) if cpu_routes.applies(fmt) else
                         _plan_cpu(fmt, dynamic, dtype, m, k, True, weight_cacheable=None))  # None: nothing kept
        return "cpu:s24+" + path.removeprefix("cpu:"), (
            "2:4: each tile of rows expanded exactly from values + 2-bit positions (integer shifts; the dense "
            f"weight never exists at once), then {why}. On the CPU 2:4 saves memory, not time: the expansion "
            "runs on every call")
    described = dtype is None and m is None  # explain: no call at hand, describe decode in bf16
    dtype = torch.bfloat16 if dtype is None else dtype
    m = 1 if m is None else m
    cdt = str(cpu.compute_dtype(dtype)).removeprefix("torch.")
    if fmt == "float8_e4m3":
        return "cpu:fp8_dequant_mm", f"fp8 emulated: exact fp8->bf16 per 4 MiB tile + {cdt} GEMM (no fp8 GEMM on CPU)"
    no_onednn = "2:4 tiles" if weight_cacheable is None else cpu.onednn_route(k, weight_cacheable, n, dynamic)
    onednn = no_onednn is None and m >= cpu.ONEDNN_MIN_M
    kept = "the weight reordered once into oneDNN's layout and kept (1 B/weight more)"
    offer = ("; faster at 2 <= M <= 128 (W8A8 up to 1.8x, W8A16 1.9x on an AVX512 x86; W8A16 prefill slower): "
             "oneDNN's int8 matmul on a reordered weight, either "
             "fused.pack_for_cpu(model) (the reordered weight instead of the plain one, 1 B/weight) "
             "or FUSED_CPU_ONEDNN=1 (a kept copy beside it, +1 B/weight)")
    if weight_cacheable is None:  # 2:4
        later = ""
    elif no_onednn == "off":
        later = offer
    elif no_onednn:
        later = f" (no oneDNN copy: {no_onednn})"
    else:
        later = f"; {cpu.ONEDNN_MIN_M} <= M: cpu:qlinear on {kept}" if described else ""
    if dynamic:
        if onednn and m < cpu.TILE_MIN_M:
            return "cpu:qlinear", f"W8A8: per-token int8 activations, oneDNN int8 matmul (int32 sums) on {kept}"
        why = "W8A8: per-token int8 activations, torch._int_mm (int32), fp32 epilogue"
        if no_onednn is None and m >= cpu.TILE_MIN_M:
            return "cpu:int_mm", why + f" per weight tile (M >= {cpu.TILE_MIN_M})"
        return "cpu:int_mm", why + later
    # bf16 x only: fp16 / fp32 activations compute in fp32 on the CPU, finer than 15 bits per token
    if dtype == torch.bfloat16 and m <= cpu.SPLIT_QLINEAR_MAX_M and onednn:
        return "cpu:split_qlinear", ("bf16 x as two int8 planes (15 bits per token) in one oneDNN int8 matmul "
                                     f"(M <= {cpu.SPLIT_QLINEAR_MAX_M}) on {kept}")
    if described and no_onednn is None:
        later = (f"; {cpu.ONEDNN_MIN_M} <= M <= {cpu.SPLIT_QLINEAR_MAX_M}: cpu:split_qlinear, bf16 x as two int8 "
                 f"planes on {kept}")
    pack_max = cpu.int8pack_max_m(n, k)  # larger for a weight that stays in L2
    # such a weight past int8pack's M: one bf16 GEMM on its dequantized copy, not two int8 planes
    dequant_in_l2 = cpu.in_l2(n, k) and m > pack_max
    if dtype == torch.bfloat16 and m <= pack_max and weight_aligned and (k is None or cpu.int8pack_ok(k)):
        why = f"torch._weight_int8pack_mm (bf16, M <= {pack_max}" + (
            ": a weight that stays in L2)" if pack_max > cpu.INT8PACK_MAX_M else
            f": its first 4-row pass on a weight of {cpu.INT8PACK_LARGE_BYTES >> 20} MiB or more)"
            if pack_max < cpu.INT8PACK_MAX_M else ")")
        if described:
            split = f"; {pack_max} < M <= {cpu.SPLIT_MAX_M}: cpu:split_int_mm" if (
                cpu.SPLIT_MAX_M > pack_max and not cpu.in_l2(n, k)) else ""
            why += (later if no_onednn is None else split) + (
                "; larger M or fp32 activations: cpu:int8_dequant_mm") + (later if no_onednn else "")
            return "cpu:int8pack", why
        return "cpu:int8pack", why + later
    if dtype == torch.bfloat16 and m <= cpu.SPLIT_MAX_M and not dequant_in_l2:
        return "cpu:split_int_mm", (f"bf16 x as two int8 planes (15 bits per token) in one torch._int_mm "
                                    f"(M <= {cpu.SPLIT_MAX_M}, where int8pack does not run){later}")
    if dtype != torch.bfloat16:
        why = f"{str(dtype).removeprefix('torch.')} activations: int8pack is a scalar loop outside bf16"
    elif m > max(pack_max, cpu.SPLIT_MAX_M):
        why = f"M={m} > {max(pack_max, cpu.SPLIT_MAX_M)}: one bf16 GEMM beats int8pack and two int8 planes"
    elif dequant_in_l2:
        why = (f"M={m} > {pack_max} on a weight that stays in L2: one bf16 GEMM on its dequantized copy beats int8pack "
               "and two int8 planes")
    elif not weight_aligned:
        why = "weight buffer not contiguous/64-byte aligned: int8pack would read out of bounds"
    else:
        why = f"K={k} not a multiple of {cpu.INT8PACK_K_MULTIPLE}: int8pack would read out of bounds"
    if dtype == torch.bfloat16 and m <= cpu.SPLIT_QLINEAR_MAX_M:
        why += later
    return "cpu:int8_dequant_mm", f"{why}; per-tile dequant + {cdt} GEMM"


def _check_input(x: torch.Tensor, weight: torch.Tensor, name: str) -> None:
    """Float activations on the weights' device (the checks every op shares)."""
    if not x.is_floating_point():
        raise TypeError(f"{name}: activations must be float16/bfloat16/float32, got {x.dtype}")
    if x.device != weight.device:
        raise RuntimeError(
            f"{name}: device mismatch: activations on {x.device}, weights on {weight.device}; "
            f"move the input or the model (model.to({x.device.type!r}))")


def _check(x: torch.Tensor, qweight: torch.Tensor, name: str) -> None:
    _check_input(x, qweight, name)
    if x.shape[-1] != qweight.shape[1]:
        raise ValueError(f"{name}: input has {x.shape[-1]} features, weight expects {qweight.shape[1]}")


_cuda_paths: dict = {}


def _size_class(M: int, dynamic: bool, wdtype, xdtype) -> int:
    """The hot path's cache key for M: every M of a class takes the same kernel(s) (see triton_kernel_for)."""
    if not dynamic and SPLIT_MIN_M <= M <= SPLIT_MAX_M and wdtype == torch.int8 and xdtype != torch.float32:
        return 3 if M <= SPLIT_QX_MAX_M else 5  # split activations, inside the GEMM / by act_split
    if (not dynamic and FP8_SPLIT and SPLIT_MIN_M <= M <= SPLIT_MAX_M and wdtype == torch.float8_e4m3fn
            and xdtype == torch.bfloat16):
        return 5  # e4m3 planes by act_split
    if M <= (A8_GEMV_MAX_M if dynamic else GEMV_MAX_M):
        return 0  # GEMV
    if dynamic:
        return 4 if M <= QX_MAX_M else 1  # W8A8 tiled, quantizing x inside / act_quant first
    return 2 if M >= WIDEN_MIN_M and xdtype != torch.float32 else 1


def _class_m(size: int, dynamic: bool) -> int:
    """An M of the class (what triton_kernel_for names the kernels by)."""
    if size == 1:
        return max(A8_GEMV_MAX_M, QX_MAX_M) + 1 if dynamic else GEMV_MAX_M + 1
    return {0: 1, 2: WIDEN_MIN_M, 3: max(1, SPLIT_MIN_M), 4: QX_MAX_M, 5: max(SPLIT_QX_MAX_M + 1, SPLIT_MIN_M)}[size]


def _cuda_path(op: str, M: int, dynamic: bool, wdtype, xdtype) -> str:
    """plan()'s CUDA path for a dense op, without its strings: the eager hot path (cached per size class)."""
    size = _size_class(M, dynamic, wdtype, xdtype)
    path = _cuda_paths.get((op, dynamic, size))
    if path is None:
        path = _cuda_paths[(op, dynamic, size)] = "triton:" + triton_kernel_for(
            op, "int8" if size in (3, 5) else "any", dynamic, _class_m(size, dynamic))
    return path


_kernels = None


def _triton_kernels():
    """The launchers, imported on first use (importing triton is slow; CPU-only users never need it)."""
    global _kernels
    if _kernels is None:
        from types import SimpleNamespace

        from fused.kernels.act_quant import act_quant
        from fused.kernels.act_split import act_split
        from fused.kernels.decode_block import decode_block
        from fused.kernels.split_gemm import quant_gemm, split_gemm
        from fused.kernels.w8_gemm import w8_gemm
        from fused.kernels.w8a16_gemv import w8a16_gemv
        from fused.kernels.widen import widen

        _kernels = SimpleNamespace(act_quant=act_quant, act_split=act_split, decode_block=decode_block, w8_gemm=w8_gemm,
                                   w8a16_gemv=w8a16_gemv, widen=widen, split_gemm=split_gemm, quant_gemm=quant_gemm)
    return _kernels


def _run(op: str, x, qweight, wscale, bias, act, dynamic):
    _check(x, qweight, op)
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    if x.is_cuda and _forced is None:
        # the eager hot path (budget ~10 µs per launch): the same choice as plan(), without its strings
        path = _cuda_path(op, M, dynamic, qweight.dtype, x.dtype)
        if CUBLAS_W8A8 and dynamic and M > A8_GEMV_MAX_M and _cublas_ok(qweight):
            path = _cublas_route(op, x2, qweight, wscale, bias, act, path)
        elif CUBLAS_W8A16 and not dynamic and M >= WIDEN_MIN_M and x.dtype == torch.bfloat16 and _cublas_ok(qweight):
            path = _cublas_w8a16_route(op, x2, qweight, wscale, bias, act, path)
        elif M <= GEMV_ROUTE_MAX_M and path in (SPLIT_PATH, SPLIT_ONE_PATH):
            path = _gemv_route(op, x2, qweight, wscale, bias, act, path)
        elif min(W8A16_WS_MIN_M, WS_SPLIT_MIN_M) <= M < WIDEN_MIN_M and path == SPLIT_PATH and W8A16_WS:
            path = _ws_mid_route(op, x2, qweight, wscale, bias, act, path)
    else:
        path, why = plan(op, _fmt(qweight), dynamic, x.device, M, dtype=x.dtype, k=K, n=qweight.shape[0],
                         **cpu_weight_facts(x.device, qweight))
    stats[(op, path)] += 1
    if path.startswith("cpu:"):
        return cpu.run(path, op, x, qweight, wscale, bias, act, dynamic)
    if path == "reference":
        if _kernels_pkg.strict() and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        ref = reference.linear_ref if op == "linear" else reference.gated_ref
        return ref(x, qweight, wscale, bias, act, dynamic)
    if path == CUBLAS_PATH:
        y = _cublas_w8a8(x2, qweight, wscale, bias, act, op == "gated")
    elif path == CUBLAS_W8A16_PATH:
        y = _cublas_w8a16(x2, qweight, wscale, bias, act, op == "gated")
    elif path == WS_PATH:
        y = _w8a16_ws(x2, qweight, wscale, bias, act, op == "gated")
    elif path in _WS_SPLIT_CONFIG:
        y = _w8a16_ws_split(x2, qweight, wscale, bias, act, op == "gated", path)
    elif path in _WS_CONFIG:
        y = _w8a8_ws_y(x2, qweight, wscale, bias, act, op == "gated", config=_WS_CONFIG[path])
    else:
        y = _triton_dense(path, x2, qweight, wscale, bias, act, op == "gated", dynamic)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def _triton_dense(path, x2, qweight, wscale, bias, act, gated, dynamic):
    """The Triton launches of a dense 8-bit CUDA path (triton_kernel_for) on 2-D x."""
    M = x2.shape[0]
    k = _triton_kernels()
    if path == "triton:w8_gemm_split":  # see SPLIT_MAX_M
        y = k.w8_gemm(x2, qweight, wscale, bias, act, gated, quantize_x=True, x_split=True)
    elif path == SPLIT_ONE_PATH:
        y = k.split_gemm(x2, qweight, wscale, bias, act, gated)
    elif path == QUANT_ONE_PATH:
        y = k.quant_gemm(x2, qweight, wscale, bias, act, gated)
    elif path == "triton:act_split+w8_gemm_split":
        planes, xs = k.act_split(x2, fp8=qweight.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(planes, qweight, wscale, bias, act, gated, x_scale=xs, out_dtype=x2.dtype, x_split=True)
    elif path.endswith("w8a16_gemv"):
        y = k.w8a16_gemv(x2, qweight, wscale, bias, act, gated)
    elif path.endswith("_qx"):
        y = k.w8_gemm(x2, qweight, wscale, bias, act, gated, quantize_x=True)
    elif dynamic:
        xq, xs = k.act_quant(x2, fp8=qweight.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(xq, qweight, wscale, bias, act, gated, x_scale=xs, out_dtype=x2.dtype)
    elif M >= WIDEN_MIN_M and x2.dtype != torch.float32:  # see WIDEN_MIN_M
        y = k.w8_gemm(x2, k.widen(qweight, x2.dtype), wscale, bias, act, gated)
    else:
        y = k.w8_gemm(x2, qweight, wscale, bias, act, gated)
    return y


# Dense W8A8 above the GEMV range can also run its GEMM on cuBLAS(Lt) (torch._scaled_mm for fp8 with unit
# scales, torch._int_mm for int8) with the scales, bias, activation and gate in one Triton pass after it
# (scale_epilogue). Its probe on the H200 (graph replays, 2026-12-01): fp8 gate/up [28672, 4096] 35.3 µs at
# M=128, 206.0 at 1024, 1696.6 at 8192; down [4096, 14336] 22.6 / 95.0 / 776.0, against our Triton gate/up
# 45.5 µs at M=128. Each shape's first eager call times both, replayed from CUDA graphs.
# H200 A/B (2026-12-01, seventh session; Llama block, graph): fp8 W8A8 M=128 84.4 -> 79.5 µs (cuBLAS
# takes the down projection), even at 32, 1024 and 8192; int8's cuBLAS GEMM (int32 out) lost every shape.
# Only CUDA graphs take it below CUBLAS_EAGER_MIN_M: an eager call on it cannot be replayed (the product is no
# kernel's output), and the per-candidate eager timing cannot see that: with eager picks, plain calls at M=32 went
# 78 -> 390 µs. dispatch.CUBLAS_W8A8 = False: off.
CUBLAS_W8A8 = True
CUBLAS_PATH = "cublas+triton:scale_epilogue"
# How the fp8 product runs on cuBLAS(Lt): "unit" (tensorwise unit scales, bf16 out; the token and channel scales
# in our epilogue), "rowwise" (the scales inside the GEMM: torch._scaled_mm with [rows, 1] x [1, N] scales, the
# CUTLASS rowwise kernel on sm_90 that torchao's Float8 rowwise config runs), "rowwise_fast" (the same with
# use_fast_accum, torchao's default: no periodic fp32 promotion in the tensor-core accumulator). Why: torchao's fp8
# rowwise block takes 2417 µs at M=8192 where ours takes 2774 with the same structure (quantize, GEMM, SiLU·mul
# with h's quantization, GEMM): its GEMMs are faster than our unit-scale ones (1697 + 776 µs, seventh session).
# Rowwise needs the rows of x unpadded (M a multiple of 16): other M keep "unit".
# H200, 2026-12-02 (seventeenth session, `bash .ci/h200_next.sh sixteenth4`, .ci/diag.py rowwise), fp8 W8A8 Llama
# block, graph µs, unit / rowwise / rowwise_fast: M=1024 320.1 / 321.0 / 321.3, M=8192 2683.1 / 2684.7 / 2469.9
# (torchao fp8 rowwise + compile 333.3 and 2603.5 in the same run; SQNR 23.6 dB for all). Raw GEMMs at M <= 128 lose
# with rowwise scales (down at M=128: 22.5 unit, 37.8 rowwise_fast), where cuBLAS takes the down layer today, so the
# rowwise form runs from CUBLAS_FP8_MIN_M (1025: the M buckets 2048 and up; 2048 / 4096 not measured, 1024 is even).
CUBLAS_FP8 = "rowwise_fast"
if CUBLAS_FP8 not in ("unit", "rowwise", "rowwise_fast"):
    raise ValueError(f"dispatch.CUBLAS_FP8 must be unit, rowwise or rowwise_fast, got {CUBLAS_FP8!r}")
CUBLAS_FP8_MIN_M = 1025
# W8A8 eager (plain) calls take the eager route pick, cuBLAS included, from this M bucket (M >= 1025), as W8A16 does
# from WIDEN_MIN_M: such a call is not replayed from a recording (cuBLAS's product is no kernel's output), which at
# these M costs only host time that runs ahead of a GPU busy for 0.3-2.5 ms. Why: plain fp8 W8A8 calls at M=8192
# ran the Triton route (2813 µs in the README's run) where CUDA graphs take cuBLAS (2434, seventeenth session).
# Predicted: plain fp8 W8A8 M=8192 within ~2% of its graph time; measured (H200, 2026-12-02, eighteenth session,
# `bash .ci/h200_next.sh eagerbig` / `eighteenth3`): plain 2813 -> 2452.7 / 2391.8 µs (graph 2533.5 / 2466.3 in the
# same runs). dispatch.CUBLAS_EAGER_MIN_M = 0 would take eager picks everywhere (loses replays).
CUBLAS_EAGER_MIN_M = 2048
_dense_routes: dict = {}
_unit_scales: dict = {}


def _offer(cands: dict, name: str, trial, use, op: str, what: str) -> str | None:
    """Adds ``use`` to a route's candidates as ``name`` if ``trial()`` runs (a library may refuse a dtype
    or shape); else warns and returns why."""
    try:
        trial()
    except RuntimeError as e:
        why = str(e).splitlines()[0][:200]
        warnings.warn(f"{op}: the {what} route is left out for this shape: {why}", stacklevel=5)
        return why
    cands[name] = use
    return None


def _cublas_ok(qweight) -> bool:
    # _scaled_mm: K and N multiples of 16; _int_mm: of 8; both read W_qᵀ as a column-major view of W_q
    return qweight.is_contiguous() and qweight.shape[0] % 16 == 0 and qweight.shape[1] % 16 == 0


def _unit_scale(device) -> torch.Tensor:
    """A cached fp32 1 on ``device`` (the unit scales of torch._scaled_mm's tensorwise form)."""
    one = _unit_scales.get(device)
    if one is None:
        one = _unit_scales[device] = torch.ones((), device=device)
    return one


def _library_rows(m: int, fp8: bool) -> int:
    """Rows the cuBLAS / cuSPARSELt 8-bit products want of their dense operand: a multiple of 16, and more
    than 16 for int8 (zero rows, written by act_quant / act_split, sliced off after)."""
    return max(-(-m // 16) * 16, 16 if fp8 else 32)


def _cublas_w8a8(x2, qweight, wscale, bias, act, gated, q_in=None, q_rows=None):
    """x quantized per token (act_quant; rows padded with zeros to a multiple of 16, and past 16 for
    _int_mm), y = x_q · W_qᵀ on cuBLAS (fp8: bf16 out; int8: int32 out), then scale_epilogue. ``q_in``: x
    already quantized (a QuantizedAct); ``q_rows``: return the output quantized (epilogue_quant, a
    QuantizedAct with that many rows) instead of in x's dtype."""
    from fused.kernels.scale_epilogue import scale_epilogue

    fp8 = qweight.dtype == torch.float8_e4m3fn
    if q_in is not None:
        xq, xs, M, dtype = q_in
    else:
        M, dtype = x2.shape[0], x2.dtype
        xq, xs = _triton_kernels().act_quant(x2, fp8=fp8, rows=_library_rows(M, fp8))
    if fp8 and CUBLAS_FP8 != "unit" and M >= CUBLAS_FP8_MIN_M and xq.shape[0] == M:  # scales inside (CUBLAS_FP8)
        # a plain layer in bf16 (a block's down projection) is then finished by the GEMM itself (its bias too where
        # it is bf16): one launch, no epilogue pass
        done = (q_rows is None and not gated and act == "none" and dtype == torch.bfloat16
                and (bias is None or bias.dtype == torch.bfloat16))
        y = torch._scaled_mm(xq, qweight.t(), xs[:, None], wscale[None, :], bias=bias if done else None,
                             out_dtype=torch.bfloat16, use_fast_accum=CUBLAS_FP8 == "rowwise_fast")
        if done:
            return y
        xs = wscale = None  # applied
    elif fp8:
        one = _unit_scale(xq.device)
        y = torch._scaled_mm(xq, qweight.t(), one, one, out_dtype=torch.bfloat16)
    else:
        y = torch._int_mm(xq, qweight.t())
    if q_rows is not None:
        from fused.kernels.epilogue_quant import epilogue_quant

        return QuantizedAct(*epilogue_quant(y, xs, wscale, bias, act, gated, dtype, fp8, M, rows=q_rows), M, dtype)
    return scale_epilogue(y, xs, wscale, bias, act, gated, dtype, m=M)


def dense_route_picks(op: str, qweight: torch.Tensor) -> dict:
    """The CUDA-graph picks measured so far for a dense layer's shape (CUBLAS_W8A8, CUBLAS_W8A16, GEMV_ROUTE_MAX_M):
    {(M bucket, x dtype, bias None, act, tag): "triton" or "cublas" ("split" or "gemv" for tag "gemv")} (what
    `explain` lists; W8A8 eager calls run Triton below CUBLAS_EAGER_MIN_M). tag: "" for a plain W8A8 call, "h out" /
    "h in" for a block's layers passing h quantized (QuantizedAct; "h out" from BLOCK_ROUTE_MIN_M timed as whole
    blocks), "w8a16" for the weight-only route from WIDEN_MIN_M, "gemv" for the weight-only split-or-GEMV route at
    small M, "ws mid" for the weight-only split-or-Gluon route below WIDEN_MIN_M (W8A16_WS_MIN_M)."""
    return {(k[1], k[4], k[5], k[6], k[7] if len(k) > 7 else ""): v[1] for k, v in _dense_routes.items()
            if k[0] == op and k[2] == tuple(qweight.shape) and k[3] == qweight.dtype and v is not None}


def _graph_pick(key, triton, cublas, op, w8a16=False, others=None) -> str:
    """"triton" or "cublas" (or a name of ``others``, more Triton routes {name: fn}) for a dense shape, all timed on
    the shape's first eager call: under CUDA-graph capture the graph pick (Triton if never timed); eager calls a
    Triton route for W8A8 below CUBLAS_EAGER_MIN_M (replayable by `eager`: the graph pick, or the fastest Triton one
    in a graph where cuBLAS won), the eager pick for W8A16 from WIDEN_MIN_M (``w8a16``) and for W8A8 from
    CUBLAS_EAGER_MIN_M (at those M host time does not matter). ``cublas`` None: not a candidate."""
    routes = _dense_routes.get(key)
    capturing = torch.cuda.is_current_stream_capturing()
    what = "W8A16" if w8a16 else "W8A8"
    kind = f"dense_{what.lower()}_route"
    if routes is None and not capturing:
        cands = {"triton": triton, **(others or {})}
        if cublas is not None:
            _offer(cands, "cublas", cublas, cublas, op, f"cuBLAS {what}")
        routes = _dense_routes[key] = measure_route(kind, key, cands, graph=True)
    if routes is None:
        return "triton"
    if capturing:
        return routes[1]
    if w8a16 or key[1] >= CUBLAS_EAGER_MIN_M:
        pick = routes[0]
    elif routes[1] != "cublas":
        pick = routes[1]
    else:
        from fused.kernels import tuning

        # only routes a recording can replay: cuBLAS is not, nor a Gluon form (its launch is not recorded, so the
        # call would run the Python path: 60-250 µs of host time per Gluon layer at M=128 on an H100, forty-third
        # session, where the fp8 W8A8 block's plain call then took 438-542 µs against 96 in a graph)
        timed = [t for t in tuning.timings.get((kind + "_graph",) + key, []) if t[1] != "cublas"
                 and not t[1].startswith("gluon")]
        pick = min(timed)[1] if timed else "triton"
    _note_gain(kind, key, pick, routes[1])
    return pick


# W8A16 from WIDEN_MIN_M, bf16 activations: the weight widened to bf16 (exact), cuBLAS's bf16 GEMM on it (bf16
# out), then the scales, bias, activation and gate in one pass (scale_epilogue), timed per shape against the
# Triton GEMM on the same widened copy, for eager calls and for CUDA-graph capture (at these M a call that is
# not replayed from a recording costs nothing that matters). H200, 2026-12-01 (tenth session, `bash
# .ci/h200_next.sh tenth`), Llama block, graph µs, off -> on: int8 W8A16 M=1024 706.6 -> 673.4, M=8192 4946 ->
# 4516 (bf16 eager 4578 in the same run); fp8 W8A16 685.1 -> 665.6, 4800 -> 4580. cuBLAS won every route
# timing but one (fp8 down at M=1024, eager: 215.6 vs 214.4). Parts at M=8192: widen 92 + 48 µs, stacked gate|up
# GEMM 2791, down 1397, epilogues 178 + 39. Widening on a side stream beside the GEMM lost (the widen kernel takes
# the GEMM's SMs: 2906 / 3201 µs in 2 / 4 chunks against 2838 serial). fp16 x keeps Triton (a raw 16-bit product
# of 8-bit weights could overflow fp16). dispatch.CUBLAS_W8A16 = False: off.
CUBLAS_W8A16 = True
CUBLAS_W8A16_PATH = "triton:widen+cublas+triton:scale_epilogue"


def _cublas_w8a16(x2, qweight, wscale, bias, act, gated):
    """y = epilogue(x · W_qᵀ) with the product on cuBLAS: W_q widened to x's dtype (exact for int8 and e4m3),
    torch.mm in x's dtype, then scale_epilogue (weight scales, bias, activation, gate)."""
    from fused.kernels.scale_epilogue import scale_epilogue

    w = _triton_kernels().widen(qweight, x2.dtype)
    return scale_epilogue(torch.mm(x2, w.t()), None, wscale, bias, act, gated, x2.dtype)


# W8A16 at WIDEN_MIN_M <= M <= SPLIT_ROUTE_MAX_M: split activations (the path below WIDEN_MIN_M: act_split, then
# two int8 / e4m3 dots per weight tile, no widened copy) as a third candidate of the route above, timed per shape
# beside the widened weight on Triton and on cuBLAS. Why: the widening costs the Llama block ~130 µs of memory
# traffic at M=1024 (H200, twenty-seventh session: int8 W8A16 699.5 µs vs bf16 eager 584.1, fp8 702.5), while
# split doubles the MMA work on 8-bit operands (2x bf16's rate): M=512 took 364.9 (int8) / 335.2 (fp8) through split
# (first sessions), so ~650-730 at 1024 is a near tie that only a timing can settle; at M=8192 split's doubled
# work loses (2x the W8A8 block's ~2500 µs against ~4470 widened). Measured (H200, twenty-eighth session, `bash
# .ci/h200_next.sh sustain`, graph µs at M=1024): split won only the GPT fp8 first layer (233.5 vs 254.3 Triton /
# 259.2 cuBLAS; GPT fp8 W8A16 block 550.7 -> 501.3); elsewhere the widened copy stays (Llama int8 gate/up: split 475
# vs 424 cuBLAS). The split planes on the Gluon GEMM (forty-first session) changed that: on an H100 (forty-fourth
# session, `bash .ci/h200_next.sh big8192`) the Llama int8 gate/up at M=8192 took 2774.8 µs on "ws split coop"
# against 3103.3 for cuBLAS on the widened copy, the GPT first layer 1716.6 against 1812.8 (the down layers and fp8
# kept cuBLAS): int8 W8A16 Llama block 4314.5 against bf16 eager 4425.2 in the same run. Hence up to M=8192 (was
# 2048). dispatch.SPLIT_ROUTE_MAX_M = 0: off.
SPLIT_ROUTE_MAX_M = 8192


def _may_time(key, x2) -> bool:
    """Whether this call may time the routes of ``key``, not measured yet: routes are timed unless FUSED_TUNE=0, and
    never under CUDA-graph capture."""
    return (key not in _dense_routes and os.environ.get("FUSED_TUNE") != "0"
            and not (x2.is_cuda and torch.cuda.is_current_stream_capturing()))


def _split_applies(wdtype, xdtype) -> bool:
    """Whether split activations serve this weight and activation dtype (see SPLIT_MAX_M and FP8_SPLIT)."""
    if wdtype == torch.int8:
        return xdtype != torch.float32
    return FP8_SPLIT and wdtype == torch.float8_e4m3fn and xdtype == torch.bfloat16


def _cublas_w8a16_route(op, x2, qweight, wscale, bias, act, path) -> str:
    """``path`` (Triton), CUBLAS_W8A16_PATH or (to SPLIT_ROUTE_MAX_M) SPLIT_PATH for this W8A16 shape (_graph_pick:
    eager and graph picks)."""
    key = (op, m_bucket(x2.shape[0]), tuple(qweight.shape), qweight.dtype, x2.dtype, bias is None, act, "w8a16")
    gated = op == "gated"
    others = {}
    timing = _may_time(key, x2)  # candidates offered once per key (an M bucket)
    if timing and key[1] <= SPLIT_ROUTE_MAX_M and _split_applies(qweight.dtype, x2.dtype):
        split = lambda: _triton_dense(SPLIT_PATH, x2, qweight, wscale, bias, act, gated, False)  # noqa: E731
        _offer(others, "split", split, split, op, "split-activation W8A16")
    if timing and W8A16_WS and key[1] <= W8A16_WS_MAX_M and _ws_supports(x2, qweight, gated) is None:
        _offer_ws(others, op, lambda: _w8a16_ws(x2, qweight, wscale, bias, act, gated))
    if timing and W8A16_WS and key[1] <= SPLIT_ROUTE_MAX_M and _split_applies(qweight.dtype, x2.dtype):
        _offer_ws_split(others, op, x2, qweight, wscale, bias, act)
    pick = _graph_pick(key, lambda: _triton_dense(path, x2, qweight, wscale, bias, act, gated, False),
                       lambda: _cublas_w8a16(x2, qweight, wscale, bias, act, gated), op, w8a16=True,
                       others=others or None)
    return {"cublas": CUBLAS_W8A16_PATH, "split": SPLIT_PATH, "ws": WS_PATH, **_WS_SPLIT}.get(pick, path)


# W8A16 from WIDEN_MIN_M, bf16 activations, Hopper: a fourth candidate of the route above, the
# warp-specialized Gluon GEMM (fused.kernels.w8a16_ws: TMA partition, two consumer warpgroups widening their weight
# rows in registers for wgmma; gated: gate and up rows of the same outputs in one tile, act(g)·u in its epilogue),
# no widened copy. H200, thirty-first session (`bash .ci/h200_next.sh ppturn`, Llama block, graph µs, gated + down
# forced on it against the shipped route): M=1024 603-619 vs 675-684 (bf16 eager 553-571), 2048 1199-1209 vs
# 1229-1236, 4096 2447-2470 vs 2360-2417, 8192 4858-4947 vs 4473-4478: timed per shape, it wins to ~2048.
# dispatch.W8A16_WS = False: off.
W8A16_WS = True
WS_PATH = "gluon:w8a16_ws"
# Offered up to this M bucket: at 8192 it lost every layer by 5-10% (wsroute), and a route timing there costs seconds
# (sustained windows, LONG_ROUTE_US). Again on an H100 (forty-fifth session, `bash .ci/h200_next.sh ws8192`, µs): int8
# down 1550.6 against cuBLAS on the widened copy 1408.0, gated 3217.1 against the split planes' 2716.6; fp8 alike.
W8A16_WS_MAX_M = 4096


# The Gluon GEMM below WIDEN_MIN_M too, with 128-token tiles (w8a16_ws.default_config(M)), timed per shape against
# split activations (the W8A16 path there). Why: at M=512 a Llama int8 W8A16 block runs split at 346-365 µs, above bf16
# eager; 128-token Gluon tiles at the 256-token form's rate (~660 TFLOP/s) would take it to ~300. Measured (H200,
# thirty-third session, `bash .ci/h200_next.sh wsmid`, route timings µs split / Gluon): M=512 gated 169.0 / 227.8, down
# 112.6 / 123.3; M=768 361.3 / 415.8, 192.3 / 244.2 (fp8 weights alike): the 128-token tiles run at 430-480 TFLOP/s,
# not 660, and split wins every shape, so the block is unchanged (M=512 346.2, 768 554.9). Off (dispatch.W8A16_WS_MIN_M
# =512 turns it on from M=512).
W8A16_WS_MIN_M = WIDEN_MIN_M


# The split planes through the Gluon W8A8 GEMM (w8a8_ws.w8a16_ws_split: act_split's planes interleaved as 2M rows of
# one 8-bit GEMM with TMA loads and warp-specialized consumers, each token's two sums combined in the epilogue), timed
# per shape against Triton's split tiles from this M, and from WIDEN_MIN_M to SPLIT_ROUTE_MAX_M beside the widened
# weight and the Gluon W8A16 GEMM. Both forms: ping-pong 128-row tiles and COOP 256-row ones. Why: at M=128 Triton's
# split picks wait at CTA barriers (ncu, thirty-ninth session: 40-51% of cycles). Measured (H200, forty-first session,
# `bash .ci/h200_next.sh splitws`, Llama, route graph µs Triton / ping-pong / COOP): M=128 gated int8 72.6 / 69.7 /
# 60.4, fp8 67.9 / 69.6 / 60.6; down int8 46.4 / 49.6 / 79.0 (64 tiles on 132 SMs, no split-K: Triton stays); M=1024
# gated int8 355.0 ping-pong against 408.3 for the Gluon W8A16 GEMM and 442.9 cuBLAS on the widened weight, down 178.4
# COOP against 181.6. Block, graph µs: int8 W8A16 M=128 111.8 -> 101.7, fp8 106.7 -> 100.1; M=1024 int8 601.8 ->
# 564.6 (bf16 eager 572.2 in that run), fp8 618.1 -> 608.6. Eager calls keep Triton at M=128: a Gluon launch costs
# ~90 µs of host time there (do_bench of the layer alone: 93-150 µs). dispatch.WS_SPLIT_MIN_M = 99999: off.
WS_SPLIT_MIN_M = 65
# the 64-row-tile forms (t64) only to this M: made for the M=128 down projection's 64 tiles; from M=1024 they lost
# every layer by 25-75% on an H100 (forty-fourth session), so timing them there only costs the first call
WS_SPLIT_T64_MAX_M = 256
WS_SPLIT_PATH = "triton:act_split+gluon:w8a16_ws_split"
WS_SPLIT_COOP_PATH = "triton:act_split+gluon:w8a16_ws_split_coop"  # 256-row weight tiles (w8a8_ws's COOP)
_WS_SPLIT = {"ws split": WS_SPLIT_PATH, "ws split coop": WS_SPLIT_COOP_PATH,
             "ws split t64": WS_SPLIT_PATH + "_t64", "ws split coop t64": WS_SPLIT_COOP_PATH + "_t64"}
_WS_SPLIT_CONFIG = {WS_SPLIT_PATH: None, WS_SPLIT_COOP_PATH: dict(COOP=True), WS_SPLIT_PATH + "_t64": dict(BLOCK_T=64),
                    WS_SPLIT_COOP_PATH + "_t64": dict(COOP=True, BLOCK_T=64)}
# each path's w8a8_ws config: t64, tiles of 64 plane rows (32 tokens), twice the tiles where M=128 leaves the down
# projection 64 of them on 132 SMs; sk, K in as many equal parts as keep tiles x parts within one wave (SPLIT_K
# "auto": the M=128 down 2 parts ping-pong, 4 COOP) for the same reason (forty-first / forty-second sessions; to be
# measured; split-K offered only with dispatch.WS_SPLITK = True: on an H100 (forty-third / forty-fourth sessions) within 1-3%
# of the forms without it, both ways). A stream-K COOP form was removed in the forty-fourth session: it lost
# everywhere on an H100 (M=128 gated 117.6 vs 69.9 µs, down 69.2 vs 48.3; M=1024 349.5 vs 337.0, 252.3 vs 157.3).
_WS_SPLIT.update({name + " sk": path + "_sk" for name, path in list(_WS_SPLIT.items())})
_WS_SPLIT_CONFIG.update({path + "_sk": dict(cfg or {}, SPLIT_K="auto") for path, cfg in list(_WS_SPLIT_CONFIG.items())})
WS_SPLITK = False


def _offer_ws_split(others: dict, op, x2, qweight, wscale, bias, act, up=None) -> None:
    """The split-plane Gluon GEMM's forms as route candidates, where w8a8_ws takes the weights (``up``: gated_pair's
    up projection, (wu, su, bu))."""
    gated = op == "gated"
    if x2.shape[0] < WS_SPLIT_MIN_M or any(_ws_supports(x2, w, gated, "w8a8_ws") is not None
                                           for w in (qweight,) + ((up[0],) if up else ())):
        return
    for name, path in _WS_SPLIT.items():
        if "_t64" in path and x2.shape[0] > WS_SPLIT_T64_MAX_M:
            continue
        if path.endswith("_sk") and not _splits(2 * x2.shape[0], qweight, gated, gated or up is not None,
                                                _WS_SPLIT_CONFIG[path]):
            continue
        _offer_ws(others, op, lambda p=path: _w8a16_ws_split(x2, qweight, wscale, bias, act, gated, p, up), name,
                  f"Gluon split-plane W8A16 ({name})")


# "ws mid" route keys whose first timed call had no Gluon candidate to offer (no sm_90 / Gluon here, weights TMA cannot
# read): their eager calls keep the split path without asking again on the hot path
_nothing_offered: set = set()


def _ws_mid_route(op, x2, qweight, wscale, bias, act, path) -> str:
    """``path`` (split activations), WS_PATH or WS_SPLIT_PATH for a W8A16 shape below WIDEN_MIN_M (_graph_pick: eager
    and graph picks; the Gluon GEMMs offered from W8A16_WS_MIN_M / WS_SPLIT_MIN_M where their supports() take the
    operands)."""
    key = (op, m_bucket(x2.shape[0]), tuple(qweight.shape), qweight.dtype, x2.dtype, bias is None, act, "ws mid")
    if key in _nothing_offered:
        return path
    gated = op == "gated"
    others = {}
    if _may_time(key, x2):
        if x2.shape[0] >= W8A16_WS_MIN_M and _ws_supports(x2, qweight, gated) is None:
            _offer_ws(others, op, lambda: _w8a16_ws(x2, qweight, wscale, bias, act, gated))
        _offer_ws_split(others, op, x2, qweight, wscale, bias, act)
        if not others:
            _nothing_offered.add(key)
    if not others and key not in _dense_routes:
        return path
    pick = _graph_pick(key, lambda: _triton_dense(path, x2, qweight, wscale, bias, act, gated, False), None, op,
                       w8a16=True, others=others or None)
    return {"ws": WS_PATH, **_WS_SPLIT}.get(pick, path)


def _w8a16_ws_split(x2, qweight, wscale, bias, act, gated, path=WS_SPLIT_PATH, up=None):
    from fused.kernels.w8a8_ws import w8a16_ws_split

    planes, xs = _triton_kernels().act_split(x2, fp8=qweight.dtype == torch.float8_e4m3fn, interleave=True)
    return w8a16_ws_split(planes, xs, qweight, wscale, bias, act, gated, out_dtype=x2.dtype,
                          config=_WS_SPLIT_CONFIG[path], up=up)


def _ws_supports(x2, w, gated=False, kernel: str = "w8a16_ws") -> str | None:
    """``kernel``'s supports() (w8a16_ws: x and the weight; w8a8_ws: the weight), or why not where this triton has no
    Gluon (the kernels need triton >= 3.6's)."""
    try:
        supports = importlib.import_module(f"fused.kernels.{kernel}").supports
    except (ImportError, AttributeError) as e:
        return f"no Gluon in this triton ({type(e).__name__}: {e})"
    return supports(x2, w, gated) if kernel == "w8a16_ws" else supports(w, gated)


def _splits(rows: int, w, stacked: bool, gated: bool, config: dict) -> bool:
    """Whether the Gluon W8A8 GEMM's SPLIT_K "auto" ``config`` cuts K for x of ``rows`` rows on the weight ``w``
    (``stacked``: gate | up, half its rows are outputs); split-K forms are offered with dispatch.WS_SPLITK = True, where it
    does."""
    if not WS_SPLITK:
        return False
    from fused.kernels.w8a8_ws import planned_split

    n_out = w.shape[0] // 2 if stacked else w.shape[0]
    return planned_split(rows, n_out, w.shape[1], gated, config, w.device) > 1


def _offer_ws(others: dict, op: str, run, name: str = "ws", what: str = "Gluon W8A16") -> None:
    """Adds the Gluon GEMM ``run`` to a route's candidates as ``name`` (_offer); its trial turns a Gluon compile error,
    no RuntimeError, into one, so the candidate is left out with a warning like a library refusing a shape."""
    def trial():
        try:
            run()
        except Exception as e:
            raise RuntimeError(f"{type(e).__name__}: {e}") from e

    _offer(others, name, trial, run, op, what)


def _w8a16_ws(x2, qweight, wscale, bias, act, gated):
    from fused.kernels.w8a16_ws import w8a16_ws

    return w8a16_ws(x2, qweight, wscale, bias, act, gated)


# W8A16 at SPLIT_MIN_M <= M <= GEMV_ROUTE_MAX_M: each layer shape's first call times the split-activation path
# (act_split + the split GEMM, two launches) against the dense GEMV with 32-row tiles (one launch, every weight widened
# in registers) and takes the one faster in a CUDA graph, for eager calls too (both are Triton launches a recording
# replays). Why: the step from M=16 to 17 (int8 W8A16 66.4 -> 75.0 µs, fp8 66.1 -> 77.2 on the Llama block). The
# tuner's times at the 32 bucket (H200, L2 flushed): the down projection [4096, 14336] 30.8 (int8) / 30.6 (fp8) µs on the
# GEMV against 29.3 / 30.1 for the split GEMM, which also needs act_split(h) before it (a second launch, h written
# and read again); gate/up [28672, 4096] 61 µs on the GEMV against 43.7 / 45.1 split, so there split stays.
# Measured (H200, fifteenth session, `bash .ci/h200_next.sh fifteenth3`, one process, Llama block, graph µs, bound
# 0 -> 32): the route took the GEMV for the down projection (graph 31.2 vs 34.1 µs with act_split(h), int8; 31.1 vs
# 35.5 fp8) and kept split for gate/up (46.3 vs 60.9); block int8 W8A16 M=17 74.0 -> 74.1, M=32 74.9 -> 74.0, fp8
# 75.8 -> 75.0, 76.4 -> 75.2 (bf16 eager 106.0 / 109.9). Predicted ~3 µs, got 0-1.2 (a guess, not checked: in the
# block act_split(h) reads h from L2, where the route timing flushed it); one launch fewer per block (3) where the
# route takes the GEMV, under torch.compile too. dispatch.GEMV_ROUTE_MAX_M = 0: off (split activations as before).
GEMV_ROUTE_MAX_M = 32
SPLIT_PATH = "triton:act_split+w8_gemm_split"
SPLIT_ONE_PATH = "triton:split_gemm"
QUANT_ONE_PATH = "triton:quant_gemm_w8a8"
GEMV_PATH = "triton:w8a16_gemv"


def _gemv_route(op, x2, qweight, wscale, bias, act, path) -> str:
    """``path`` (split activations) or GEMV_PATH for this W8A16 shape at M <= GEMV_ROUTE_MAX_M, decided on CUDA-graph
    time (see GEMV_ROUTE_MAX_M); untimed (under capture before any eager call, FUSED_TUNE=0) the split path."""
    key = (op, m_bucket(x2.shape[0]), tuple(qweight.shape), qweight.dtype, x2.dtype, bias is None, act, "gemv")
    routes = _dense_routes.get(key)
    if routes is None and not torch.cuda.is_current_stream_capturing():
        gated = op == "gated"
        routes = _dense_routes[key] = measure_route(
            "dense_gemv_route", key,
            {"split": lambda: _triton_dense(path, x2, qweight, wscale, bias, act, gated, False),
             "gemv": lambda: _triton_dense(GEMV_PATH, x2, qweight, wscale, bias, act, gated, False)}, graph=True)
    return GEMV_PATH if routes is not None and routes[1] == "gemv" else path


def _cublas_route(op, x2, qweight, wscale, bias, act, path) -> str:
    """``path`` (the Triton one), CUBLAS_PATH or W8A8_WS_PATH for this dense W8A8 shape (_graph_pick)."""
    key = (op, m_bucket(x2.shape[0]), tuple(qweight.shape), qweight.dtype, x2.dtype, bias is None, act)
    gated = op == "gated"
    others = {}
    for name, wpath in _layer_ws_paths(x2.shape[0]):
        _offer_w8a8_ws(others, key, op, x2, qweight, gated, lambda c=_WS_CONFIG[wpath]: _w8a8_ws_y(
            x2, qweight, wscale, bias, act, gated, config=c), x2.dtype, name=name)
    pick = _graph_pick(key, lambda: _triton_dense(path, x2, qweight, wscale, bias, act, gated, True),
                       lambda: _cublas_w8a8(x2, qweight, wscale, bias, act, gated), op, others=others or None)
    return {"cublas": CUBLAS_PATH, **dict(_layer_ws_paths())}.get(pick, path)


# The quantized hand-off: in a block whose layers are both W8A8, above the GEMV range (where both quantize
# their input per token anyway), the first layer gives h already quantized (q padded to _handoff_rows, s)
# and the second takes it as is. Bit-identical to the two layers called one after the other. After a library
# GEMM (cuBLAS, cuSPARSELt) the first layer ends in epilogue_quant, whose tuner picks the fused pass or
# scale_epilogue + act_quant (the latter won at M >= 1024 on the H200, eighth session); after a Triton GEMM,
# act_quant. Each layer's route is timed in that form. dispatch.HANDOFF = False: off.
HANDOFF = True
HANDOFF_MIN_M = max(GEMV_MAX_M, A8_GEMV_MAX_M) + 1


class QuantizedAct(NamedTuple):
    """h quantized per token for a W8A8 layer: q [rows, K] int8 / float8_e4m3fn (rows >= m, padding rows
    zero), s [m] fp32, m tokens, and h's own dtype (the output dtype of the layer that takes it)."""
    q: torch.Tensor
    s: torch.Tensor
    m: int
    dtype: torch.dtype


def _handoff_rows(m: int) -> int:
    return _library_rows(m, fp8=False)  # what every library route wants, int8's being the stricter


def _quantized(h2: torch.Tensor, fp8: bool) -> QuantizedAct:
    M = h2.shape[0]
    return QuantizedAct(*_triton_kernels().act_quant(h2, fp8=fp8, rows=_handoff_rows(M)), M, h2.dtype)


# The first layer of a handed-off block in ONE launch (fused.kernels.first_layer: act_quant(x), the tiled GEMM with
# its epilogue, act_quant(h), bit-equal for int8 to the three launches with the same tile), a third candidate of
# the "h out" route beside the three Triton launches and cuBLAS + epilogue_quant. Why: at M=128 the fp8 W8A8 Llama
# block runs 5 kernels in 75.7 µs on the H200 (target 70), three of them this layer's. Predicted -4-6 µs at M=128
# (two kernel gaps); measured (H200, 2026-12-02, `bash .ci/h200_next.sh sixteenth2`, the route's graph µs, three
# launches / cuBLAS / first_layer): fp8 M=128 52.3 / 52.8 / 58.7, int8 54.0 / 71.3 / 58.8; M=1024 fp8 220.3 / 229.5 /
# 325.8, int8 252.6 / 334.6 / 320.0. It never wins, so it stays off (dispatch.FIRST_LAYER = True: a route candidate).
FIRST_LAYER = False
# The first layer on the Gluon W8A8 GEMM (fused.kernels.w8a8_ws: persistent, ping-pong consumers, wgmma from shared
# memory; e4m3 or int8), a fourth candidate of the "h out" route: act_quant(x), the GEMM with its epilogue,
# act_quant(h). Why: from M=1024 the fp8 blocks run at the 700 W cap, where time is joules / ~690 W. Joules per Llama
# gate/up product at M=1024 (H200, thirty-fourth session, `.ci/energy_parts.py`, 1-2 s of graph replays each):
# Triton's gated tiles 157-159 mJ (every tuner candidate), Gluon 142.9, cuBLAS 133.5 without the SiLU-mul pass it
# then needs (+16 mJ); at 8192 Triton 1229, Gluon 1087 (4 stages), cuBLAS 1013-1069 + 122 for scale_epilogue.
# Predicted fp8 W8A8 Llama block at the cap: M=1024 ~339 -> ~315 µs (217.5 mJ), 8192 ~2490 -> ~2430 (int8's joules
# not measured: it compiled only after the session's device time). Measured in the block (H200, thirty-fifth session,
# `bash .ci/h200_next.sh wsblock1` / `wsblock2`, off -> on): fp8 W8A8 Llama M=1024 325.0 -> 314.5 graph µs (bench),
# 239.5 -> 223.3 mJ (344.9 -> 323.1 µs sustained), M=8192 2498.5 -> 2543.7 µs, 1800 -> 1786 mJ (route timings within 1%
# of cuBLAS's there); int8 W8A8 M=1024 236.6 -> 216.7 mJ (342.7 -> 312.7 µs), M=8192 1858 -> 1717-1801 mJ (2728 ->
# 2530 µs). Sustained route timing (dispatch.LONG_ROUTE_US = 150) picked the same. The second layer (h in) takes it as a
# candidate too: int8 down 66.0 vs Triton 69.6 mJ at M=1024, 504 vs 556 at 8192 (fp8: 70.6 vs 66.1, 541 vs 511,
# thirty-fourth). Offered on sm_90 where this triton has Gluon; dispatch.W8A8_WS = False: off.
W8A8_WS = True
# Offered to the per-layer W8A8 routes too (a layer outside a block, torch.compile's per-Linear ops and gated_pair
# through w8a8_ws_pair): act_quant(x), then the GEMM with its epilogue, bf16 / fp16 out; timed, so it runs only where
# it wins. Predicted: Llama per-Linear + compile -5-8% at M=1024, -3-6% at 8192. Measured (H200, thirty-sixth
# session, `bash .ci/h200_next.sh perlayer`, .ci/pair_probe.py graph µs, off -> on; 62 cuda tests passed): fp8 W8A8
# M=1024 332.0 -> 310.3, 8192 2512.3 -> 2394.5; int8 321.6 -> 293.7, 2672.4 -> 2259.3 (the block conversion in the
# same run: fp8 311.2 / 2395.3, int8 289.4 / 2271.2). dispatch.W8A8_WS_LAYER = False: off.
W8A8_WS_LAYER = True
W8A8_WS_PATH = "triton:act_quant+gluon:w8a8_ws"
W8A8_WS_COOP_PATH = "triton:act_quant+gluon:w8a8_ws_coop"
# Tiles of 64 tokens (t64) too, up to W8A8_WS_T64_MAX_M: twice the tiles where 128-token tiles leave SMs idle (the
# COOP gated GEMM at M=128: 112 tiles on 132 SMs). Why: the split-plane W8A16 route (forty-first session) ran the
# M=128 gated product at 60.4 µs on COOP tiles of 64 tokens' planes, twice the work of the fp8 W8A8 gated GEMM that
# takes ~44 (its "h out" route 51.7 with both act_quants, thirty-ninth) in the block that misses issue 4's 70 µs by 6.
# Timed candidates, not yet measured on the H200 (`bash .ci/h200_next.sh a8t64`).
W8A8_WS_T64_MAX_M = 256
_WS_CONFIG = {W8A8_WS_PATH: None, W8A8_WS_COOP_PATH: dict(COOP=True), W8A8_WS_PATH + "_t64": dict(BLOCK_T=64),
              W8A8_WS_COOP_PATH + "_t64": dict(COOP=True, BLOCK_T=64)}
# Split-K forms too (sk: SPLIT_K "auto", K in as many equal parts as keep one wave), offered with dispatch.WS_SPLITK = True
# where they cut K. Why: at M=128 the W8A8 down GEMM has 16 (COOP) or 32 tiles for 132 SMs; cuBLAS takes it in ~22
# µs of the fp8 block's 76 (eighth session: a bare split-K fp8 kernel streamed its 58.7 MB in ~27 µs under do_bench,
# with the launch). Prediction: the "h in" route 30.2 -> ~22 µs graph, the fp8 W8A8 block 76 -> ~72. Not measured.
_WS_CONFIG.update({path + "_sk": dict(cfg or {}, SPLIT_K="auto") for path, cfg in list(_WS_CONFIG.items())})
# Both layers (h out, h in) also on the kernel's COOP form (256-row tiles shared by both consumers: a quarter less
# shared-memory traffic per product; Triton's fp8 down GEMM, which beat the 128-row Gluon tiles by 7-13% there, runs
# 128 x 256 tiles; gated: 128 outputs' gate and up rows, no ping-pong), a timed candidate beside the ping-pong form.
# Why: the fp8 W8A8 block at M=8192 was 2.3% over issue 4's 2350 µs with Triton's down GEMM. Predicted: fp8 down within
# 2% of Triton's, block fp8 8192 2403 -> ~2370. Measured (H200, thirty-sixth session, `bash .ci/h200_next.sh coop`; 62
# cuda tests passed): joules per fp8 down GEMM at 8192 Triton 505.4 mJ, COOP 509.8, ping-pong 526.9 (1024: 65.3 / 65.8
# / 68.8); route timings (graph µs, COOP / ping-pong / Triton / cuBLAS) fp8 gated 1024 205.9 / 213.4 / 229.4 / 232.9,
# 8192 1640.8 / 1681.0 / 1873.7 / 1705.0; fp8 down 8192 731.6 / 742.5 / 721.5 (Triton keeps it) / 737.5; int8 gated
# 8192 1545.5 / 1598.1, down 648.0 / 701.2 / 778.4: COOP wins every route but fp8 down at 8192. Block (bench, COOP off /
# on): fp8 W8A8 M=1024 309.0 / 307.6, 8192 2397.4 / 2399.5; int8 290.2 / 285.4, 2249.7 / 2243.7. dispatch.W8A8_WS_COOP = False:
# off.
W8A8_WS_COOP = True


# A dense W8A8 block with h handed over per (token, 64 outputs) group (fused.kernels.w8a8_ws, quant_out / X_GROUPS):
# the gated layer's epilogue quantizes its own tile of h (no bf16 h through memory, no act_quant pass over it), the
# down GEMM scales each K step's product by its group's scales (DeepSeek-V3's fine-grained fp8 GEMM). Why: at M=8192
# the fp8 W8A8 Llama block (2399.5 µs, thirty-sixth session) is 2% over issue 4's 2350 and act_quant(h) costs ~61 mJ
# (~90 µs at the cap: h written in bf16, read back, written in fp8), at 1024 ~7 mJ (~10 µs) of 307.6 against 300.
# Groups are finer than per token: h's quantization error goes down, not up. Predicted (the down GEMM with one
# product in flight per consumer within +5% of the per-token one): fp8 block M=1024 307.6 -> ~300, 8192 2399 ->
# ~2330; int8 alike. Measured (H200, thirty-sixth session, `bash .ci/h200_next.sh grouped` / `grouped2`): the first
# form 1.5x slower (fp8 M=1024 482.3 µs, its two Gluon kernels 466.8 at 364 W: the down GEMM read each K step's token
# scales from global memory inside the loop), more accurate (Llama block vs bf16: int8 29.0 -> 32.7 dB, fp8 23.6 ->
# 23.9). With the scales loaded by TMA with the stage (thirty-seventh, `grouped3`) it was still 1.35x slower (fp8
# M=1024 422.7 against 314.0, 8192 3299.0 against 2447.2; int8 411.7 / 3236.3 against 289.1 / 2268.6, route timings
# in one process): tokens along wgmma's N gave each thread 32 token scales to read a K step, 16 KB of shared-memory
# reads per consumer and step beside the wgmma's 12 KB. The down GEMM now puts tokens along wgmma's M (2 scales a
# thread), with one K group a stage or two, or groups of 128 (GROUPED_FORMS): compiled for sm_90, not yet run.
# Opt-in: dispatch._GROUPED_ENV = 1 times every form against the per-token hand-off, both layers together, once per shape;
# =grouped+grouped_k128 times those forms only; =grouped_k128 (one name) runs that form untimed (probes:
# .ci/block_parts.py).
_GROUPED_ENV = "0"
W8A8_GROUPED = _GROUPED_ENV != "0"
W8A8_GROUPED_FORM = _GROUPED_ENV if "+" not in _GROUPED_ENV else None
GROUPED_PATHS = ("triton:act_quant+gluon:w8a8_ws_coop+group_quant (h out)", "gluon:w8a8_ws_grouped (h in)")


def _grouped_reason(x2, w1, w2, gated: bool) -> str | None:
    """Why a W8A8 block cannot hand h over in groups (the Gluon kernels' needs), or None."""
    if not (x2.is_cuda and x2.dtype in (torch.bfloat16, torch.float16)):
        return "CUDA x in bf16 / fp16"
    H = w1.shape[0] // 2 if gated else w1.shape[0]
    if H % 16:
        return "h's features a multiple of 16 (TMA rows of the down GEMM)"
    return _ws_supports(x2, w1, gated, kernel="w8a8_ws") or _ws_supports(x2, w2, kernel="w8a8_ws")


def _grouped_key(x2, w1, b1, act, w2, b2) -> tuple:
    """The route key of a W8A8 block's hand-off (per token or grouped; both layers)."""
    return ("mlp_block", m_bucket(x2.shape[0]), tuple(w1.shape), tuple(w2.shape), w1.dtype, x2.dtype, b1 is None,
            b2 is None, act, "h grouped")


def _handoff_block(x2, w1, s1, b1, act, gated, w2, s2, b2):
    """A W8A8 block's two layers with h handed over quantized: per token (each layer on its own timed route), or with
    W8A8_GROUPED per (token, 64 outputs) where the Gluon kernels run and it times faster (_graph_pick)."""
    op = "gated" if gated else "linear"

    def tokens():
        return _dense_q_in(_dense_q_out(op, x2, w1, s1, b1, act), w2, s2, b2, "none")

    if not (W8A8_GROUPED and _forced is None and x2.is_cuda):
        return tokens()

    def grouped(form="grouped"):
        return _grouped_block(x2, w1, s1, b1, act, gated, w2, s2, b2, form)

    key = _grouped_key(x2, w1, b1, act, w2, b2)
    others = {}
    if _may_time(key, x2):  # the kernels' needs checked once per shape, when it is timed (not on every call)
        if _grouped_reason(x2, w1, w2, gated) is not None:
            _dense_routes[key] = ("triton", "triton")  # the per-token hand-off, for good
            return tokens()
        if W8A8_GROUPED_FORM in GROUPED_FORMS:
            _dense_routes[key] = (W8A8_GROUPED_FORM,) * 2
            return grouped(W8A8_GROUPED_FORM)
        tokens()  # its layers' routes timed first: the block's timing then replays their picks
        for name in _timed_forms():
            _offer_ws(others, "mlp_block", lambda f=name: grouped(f), name=name, what="grouped hand-off")
    pick = _graph_pick(key, tokens, None, "mlp_block", others=others or None)
    return grouped(pick) if pick in GROUPED_FORMS else tokens()


# the grouped hand-off's forms, timed side by side, (outputs per scale, the down GEMM's config): groups of 64 with
# one K group a stage (a product in flight per consumer, 10 stages) or two (two products, half the waits, 6 stages);
# groups of 128 (the gated GEMM's two COOP consumers trade their absmaxes; one product of 128 K per wait, as
# DeepSeek-V3's GEMM: half the promotions of the 64 forms)
GROUPED_FORMS = {"grouped": (64, dict(BLOCK_K=64)), "grouped_k128": (64, dict(BLOCK_K=128, STAGES=6)),
                 "grouped_g128": (128, dict(BLOCK_K=128, STAGES=6))}


def _timed_forms() -> list:
    """The grouped forms a block's hand-off times: dispatch._GROUPED_ENV's "+"-joined names, or all of them."""
    names = _GROUPED_ENV.split("+") if "+" in _GROUPED_ENV else list(GROUPED_FORMS)
    unknown = [n for n in names if n not in GROUPED_FORMS]
    if unknown:
        raise ValueError(f"dispatch._GROUPED_ENV: unknown forms {unknown}; known: {list(GROUPED_FORMS)}")
    return names


def _grouped_block(x2, w1, s1, b1, act, gated, w2, s2, b2, form: str = "grouped"):
    """act_quant(x); the first layer with h quantized in its epilogue per (token, group of outputs); the down GEMM on
    it (GROUPED_FORMS[form])."""
    from fused.kernels import w8a8_ws as ws

    group, down = GROUPED_FORMS[form]
    xq, xs = _triton_kernels().act_quant(x2, fp8=w1.dtype == torch.float8_e4m3fn)
    hq, hs = ws.w8a8_ws(xq, xs, w1, s1, b1, act, gated, config=dict(COOP=True), quant_out=True, group=group)
    stats[("gated" if gated else "linear", GROUPED_PATHS[0])] += 1
    stats[("linear", GROUPED_PATHS[1])] += 1
    return ws.w8a8_ws(hq, hs, w2, s2, b2, "none", out_dtype=x2.dtype, config=down, group=group)


def _ws_forms(M: int | None = None, coop: bool = True) -> list:
    """The Gluon W8A8 GEMM's route forms at M, (name, path): ping-pong, COOP (``coop``), each also with 64-token
    tiles to W8A8_WS_T64_MAX_M and split-K (dispatch.WS_SPLITK = True); M None: every form (to name a pick)."""
    base = [("gluon", W8A8_WS_PATH)] + [("gluon_coop", W8A8_WS_COOP_PATH)] * coop
    forms = list(base)
    if M is None or M <= W8A8_WS_T64_MAX_M:
        forms += [(name + "_t64", path + "_t64") for name, path in base]
    if M is None or WS_SPLITK:  # (offered only where SPLIT_K "auto" cuts K: _offer_w8a8_ws)
        forms += [(name + "_sk", path + "_sk") for name, path in forms]
    return forms


def _layer_ws_paths(M: int | None = None) -> list:
    """The per-layer W8A8 routes' Gluon candidates at M (W8A8_WS_LAYER; COOP with W8A8_WS_COOP), as _ws_forms."""
    return _ws_forms(M, W8A8_WS_COOP) if W8A8_WS_LAYER else []


def _offer_w8a8_ws(others: dict, key, op: str, x, w, gated: bool, run, out_dtype, name: str = "gluon",
                   rows: int | None = None, pair: bool = False) -> None:
    """Adds the Gluon W8A8 GEMM (``run``) to a W8A8 route's candidates where it runs: sm_90 with Gluon, a 16-bit
    output (x's dtype, or h's for a second layer), TMA-able weights; checked only when the route is to be timed.
    ``rows``: x's rows the GEMM reads (a hand-off's q is padded); ``pair``: w is a gated pair's gate alone."""
    if (W8A8_WS and x.is_cuda and out_dtype in (torch.bfloat16, torch.float16) and _may_time(key, x)
            and _ws_supports(x, w, gated, kernel="w8a8_ws") is None
            and not (name.endswith("_sk") and not _splits(rows or x.shape[0], w, gated and not pair, gated,
                                                          _WS_NAMES[name]))):
        _offer_ws(others, op, run, name=name, what=f"Gluon W8A8 ({name})")


def _w8a8_ws_y(x2, qweight, wscale, bias, act, gated, up=None, config=None):
    """act_quant(x) and the Gluon W8A8 GEMM (``up``: a gated pair's (wu, su, bu)), y in x's dtype."""
    from fused.kernels import w8a8_ws as ws

    xq, xs = _triton_kernels().act_quant(x2, fp8=qweight.dtype == torch.float8_e4m3fn)
    if up is None:
        return ws.w8a8_ws(xq, xs, qweight, wscale, bias, act, gated, out_dtype=x2.dtype, config=config)
    return ws.w8a8_ws_pair(xq, xs, qweight, wscale, bias, *up, act, out_dtype=x2.dtype, config=config)

_H_OUT_PATHS = {"cublas": "cublas+triton:epilogue_quant", "first_layer": "triton:first_layer",
                **{name: path + "+act_quant" for name, path in _ws_forms()}}
_H_IN_PATHS = {"cublas": CUBLAS_PATH, **{name: path.removeprefix("triton:act_quant+") for name, path in _ws_forms()}}
_WS_NAMES = {name: _WS_CONFIG[path] for name, path in _ws_forms()}  # a Gluon pick's w8a8_ws config


def _offer_block_ws(others: dict, key, op, x, qweight, gated, M, run, out_dtype) -> dict:
    """A W8A8 block layer's Gluon candidates at M (_ws_forms, W8A8_WS_COOP gating COOP) into ``others`` as
    run(config); returns {name: runner} for every form, to run a pick."""
    runners = {name: (lambda c=cfg: run(c)) for name, cfg in _WS_NAMES.items()}
    for name, _ in _ws_forms(M, W8A8_WS_COOP):
        _offer_w8a8_ws(others, key, op, x, qweight, gated, runners[name], out_dtype, name=name, rows=M)
    return runners


def _h_out_key(op, M, qweight, xdtype, bias, act) -> tuple:
    """The route key of a W8A8 block's first layer (h handed over quantized)."""
    return (op, m_bucket(M), tuple(qweight.shape), qweight.dtype, xdtype, bias is None, act, "h out")


def _dense_q_out(op, x2, qweight, wscale, bias, act) -> QuantizedAct:
    """A dense W8A8 first layer (``op`` "gated" or "linear", M > 16) giving h quantized."""
    gated, fp8, M = op == "gated", qweight.dtype == torch.float8_e4m3fn, x2.shape[0]
    path = _cuda_path(op, M, True, qweight.dtype, x2.dtype)

    def triton():
        return _quantized(_triton_dense(path, x2, qweight, wscale, bias, act, gated, True), fp8)

    def cublas():
        return _cublas_w8a8(x2, qweight, wscale, bias, act, gated, q_rows=_handoff_rows(M))

    def first_layer():
        from fused.kernels.first_layer import first_layer

        return QuantizedAct(*first_layer(x2, qweight, wscale, bias, act, gated, rows=_handoff_rows(M)), M, x2.dtype)

    def gluon(config=None):
        return _quantized(_w8a8_ws_y(x2, qweight, wscale, bias, act, gated, config=config), fp8)

    key = _h_out_key(op, M, qweight, x2.dtype, bias, act)
    others = {"first_layer": first_layer} if FIRST_LAYER else {}
    runners = _offer_block_ws(others, key, op, x2, qweight, gated, M, gluon, x2.dtype)
    pick = "triton"
    use_cublas = CUBLAS_W8A8 and _cublas_ok(qweight)
    if x2.is_cuda and _forced is None and (use_cublas or others or key in _dense_routes):
        pick = _graph_pick(key, triton, cublas if use_cublas else None, op, others=others or None)
    elif FIRST_LAYER and _forced == "triton" and not x2.is_cuda:
        pick = "first_layer"  # the interpreter (CI): the one-launch route untimed, as measure_route would take it
    stats[(op, _H_OUT_PATHS.get(pick, path + "+act_quant") + " (h out)")] += 1
    return {"cublas": cublas, "first_layer": first_layer, **runners}.get(pick, triton)()


def _dense_q_in(qa: QuantizedAct, qweight, wscale, bias, act):
    """A dense W8A8 second layer ("linear") on h handed over quantized: no act_quant."""
    op = "linear"
    if qa.q.dtype != qweight.dtype:
        raise TypeError(f"{op}: h quantized to {qa.q.dtype} for {qweight.dtype} weights")

    def triton():
        return _triton_kernels().w8_gemm(qa.q[:qa.m], qweight, wscale, bias, act, False, x_scale=qa.s,
                                         out_dtype=qa.dtype)

    def cublas():
        return _cublas_w8a8(None, qweight, wscale, bias, act, False, q_in=qa)

    def gluon(config=None):
        from fused.kernels.w8a8_ws import w8a8_ws

        return w8a8_ws(qa.q, qa.s, qweight, wscale, bias, act, out_dtype=qa.dtype, config=config)

    pick, runners = "triton", {}
    if qa.q.is_cuda and _forced is None:
        key = (op, m_bucket(qa.m), tuple(qweight.shape), qweight.dtype, qa.dtype, bias is None, act, "h in")
        others = {}
        runners = _offer_block_ws(others, key, op, qa.q, qweight, False, qa.m, gluon, qa.dtype)
        use_cublas = CUBLAS_W8A8 and _cublas_ok(qweight)
        if use_cublas or others or key in _dense_routes:
            pick = _graph_pick(key, triton, cublas if use_cublas else None, op, others=others or None)
    stats[(op, _H_IN_PATHS.get(pick, "triton:w8_gemm_w8a8") + " (h in)")] += 1
    return {"cublas": cublas, **runners}.get(pick, triton)()


# Bumped whenever a converted module's buffers or attributes change (fused.modules): recorded calls of
# the old state are dropped.
epoch = 0
_REPLAY_CAP = 64  # recorded signatures per module (one per M, dtype and layout of x)

# Eager calls from a CUDA graph of the module's forward. A recording replays the routes an eager call takes;
# where a layer's fastest route on the GPU (its CUDA-graph pick) is one a recording cannot replay (cuSPARSELt,
# whose 0.3-0.9 ms of host time per call keeps plain calls on the Triton routes; cuBLAS for W8A8), the call's
# signature is instead captured in a CUDA graph (the graph picks) and later calls copy x into its static input,
# replay it and clone the output. Taken when the route timings say the graph picks save at least
# EAGER_GRAPH_GAIN_US of GPU time over the eager picks, for M <= EAGER_GRAPH_MAX_M. The graphs of one device and
# stream share one memory pool (calls on a stream run one after the other, and each copies in and clones out
# around its replay, so one graph's temporaries may reuse another's); the static inputs and outputs they keep
# count against EAGER_GRAPH_MB, past which signatures are recorded as before. dispatch.EAGER_GRAPH_MAX_M = 0: off.
# H200, 2026-12-01 (twelfth session, `bash .ci/h200_next.sh eagergraph`), Llama block, plain calls, off -> on, M =
# 1 / 16 / 128: int8 2:4 W8A8 80.8 / 135.7 / 169.0 -> 68.0 / 69.9 / 72.6 µs, fp8 2:4 W8A8 77.3 / 122.0 / 166.9 ->
# 68.0 / 69.0 / 73.3, int8 2:4 W8A16 80.8 / 135.7 / 206.9 -> 68.7 / 70.3 / 93.8 (graph times 61-66 / 86: a graphed
# call costs 6-7 µs over its graph, a replayed recording ~1). fp8 W8A8 M=128 (cuBLAS down, 4.2 µs of gain) 82.4 ->
# 81.9: no better than the recording, hence the 8 µs bound. Up to M=1024 since the thirteenth session (`bash
# .ci/h200_next.sh thirteenth2`, plain µs at M=1024, bound 128 -> 1024): int8 2:4 W8A8 438.2 -> 242.8, int8 2:4
# W8A16 763.7 -> 449.7 (graph 228 / 433-436; bf16 eager plain 557-564).
EAGER_GRAPH_MAX_M = 1024
EAGER_GRAPH_GAIN_US = 8.0
EAGER_GRAPH_MB = 512.0
# Signatures whose recording is refused (a torch op between the kernels, e.g. SmoothQuant's x·s⁻¹) are graphed too
# (EAGER_GRAPH_REFUSED), else they run the Python path on every call. H200, thirteenth session (`bash
# .ci/h200_next.sh thirteenth2`, `.ci/diag.py smootheager`), smoothed int8 W8A8 Llama block, plain µs off -> on
# (graph): M=1 303.9 -> 85.8 (79.8), M=16 258.7 -> 87.5 (82.0), M=128 255.0 -> 113.8 (107.8).
# dispatch.EAGER_GRAPH_REFUSED = False: off.
EAGER_GRAPH_REFUSED = True
_graph_gain = None  # during a recording: µs of GPU time the graph picks save over the eager picks taken
_graph_pools: dict = {}  # (device index, stream) -> pool handle
_graph_bytes = Counter()  # device index -> bytes of static inputs and outputs held by eager graphs


def _note_gain(kind: str, key, eager_pick: str, graph_pick: str) -> None:
    """Add to the recording's gain what a route's graph pick saves over its eager pick (measure_route timings)."""
    global _graph_gain
    if _graph_gain is None or eager_pick == graph_pick:
        return
    from fused.kernels import tuning

    t = {n: us for us, n in tuning.timings.get((kind + "_graph",) + key, ())}
    if eager_pick in t and graph_pick in t:
        _graph_gain += t[eager_pick] - t[graph_pick]


class GraphedCall:
    """One eager call signature of a module, replayed from a CUDA graph of its forward (see EAGER_GRAPH_MAX_M).
    ``versions``: the module's buffers and their versions at capture (a derived copy, e.g. a cuSPARSELt
    compressed weight, was made from them): a change drops the graph. Bit-equal to the module's calls under a
    CUDA-graph capture (the same routes), not necessarily to its plain calls (those take the eager picks)."""

    __slots__ = ("graph", "x", "y", "stats", "versions", "keep", "nbytes", "dev")

    def __call__(self, x: torch.Tensor):
        for t, v in self.versions:
            if _version(t) != v:
                return None
        self.x.copy_(x)
        self.graph.replay()
        launch.counts["graph_replayed"] += 1
        return self.y.clone()

    def __del__(self):
        if _graph_bytes is not None and hasattr(self, "nbytes"):  # None at interpreter exit; set once captured
            _graph_bytes[self.dev] -= self.nbytes


def _static_like(x: torch.Tensor) -> torch.Tensor:
    """A graph's static input for x's signature (x's strides unless they overlap), holding x. A normal tensor even
    under torch.inference_mode: later calls copy into it, which an inference tensor refuses outside that mode."""
    with torch.inference_mode(False):
        xs = (torch.empty_strided(x.shape, x.stride(), device=x.device, dtype=x.dtype)
              if all(st > 0 or n <= 1 for n, st in zip(x.shape, x.stride())) else torch.empty_like(x))
        xs.copy_(x)
    return xs


def _capture_call(owner, x: torch.Tensor, fn):
    """A GraphedCall for ``fn`` on x's signature, or a string saying why not (the caller keeps the recording)."""
    dev = x.get_device()
    xs = _static_like(x)
    cur = torch.cuda.current_stream(x.device).cuda_stream
    pool = _graph_pools.get((dev, cur))
    if pool is None:
        pool = _graph_pools[(dev, cur)] = torch.cuda.graph_pool_handle()
    saved, runs = Counter(stats), []

    def run():  # the warm-up takes the eager picks, the capture the graph picks: keep the latter's counts
        before = Counter(stats)
        runs.append((fn(xs), stats - before))

    with torch.cuda.device(x.device):  # the side stream and the capture on x's device
        g = _graph_replay(run, pool)
    stats.clear()
    stats.update(saved)
    if g is None:
        return "no graph: capture failed"
    y, captured = runs[-1]
    if not isinstance(y, torch.Tensor):
        return "no graph: the forward returns no tensor"
    c = GraphedCall()
    c.graph, c.x, c.y, c.stats, c.dev = g, xs, y, tuple(captured.items()), dev
    c.versions = tuple((t, _version(t)) for t in owner.buffers())
    # the cuSPARSELt copies the graph reads (a copy dropped from the cache stays valid for it)
    c.keep = tuple(_cslt_weights.get(t) for t, _ in c.versions) if _cslt_weights is not None else ()
    c.nbytes = xs.untyped_storage().nbytes() + y.untyped_storage().nbytes()
    _graph_bytes[dev] += c.nbytes
    return c


def eager(owner, x: torch.Tensor, fn):
    """``fn(x)``, the eager forward of a converted module; on CUDA replayed from a recording after the
    first calls of an input signature (fused.kernels.launch.Replay): the same launches with the same
    configs, without the Python between them (host time of a Llama-3-8B decode block 95 -> 44 µs on the
    H200's host). Call 1 of a signature runs (and tunes), call 2 runs and records, later calls replay. A call
    whose launches take a tensor the recording cannot place (smoothing, autocast, copies) is never replayed.
    Where the recorded call's routes leave GPU time on the table that a CUDA graph would not (see
    EAGER_GRAPH_MAX_M), call 2 also captures the forward in a CUDA graph, and later calls replay that instead.
    ``dispatch.stats`` counts replayed calls as the recorded (or captured) call counted them."""
    if not x.is_cuda or _forced is not None or not launch.ENABLED or launch._rec is not None:
        return fn(x)
    key = (x.shape, x.stride(), x.dtype, x.device, x.data_ptr() % 16, x.requires_grad and torch.is_grad_enabled(),
           torch.is_autocast_enabled("cuda"), torch.are_deterministic_algorithms_enabled(),
           GEMV_MAX_M, A8_GEMV_MAX_M, WIDEN_MIN_M, SPLIT_MIN_M, SPLIT_MAX_M, DECODE_BLOCK_MAX_M, SPARSE_ROUTE,
           GEMV_ROUTE_MAX_M,
           torch._C._cuda_getCurrentRawStream(x.get_device()),  # eager graphs share a pool per stream
           torch.cuda.is_current_stream_capturing())  # a graph capture may take other routes (see _run_sparse)
    cache = owner.__dict__.get("_replays")
    if cache is None or owner.__dict__.get("_replays_epoch") != epoch:  # older states' entries: dropped
        cache = owner.__dict__["_replays"] = {}
        owner.__dict__["_replays_epoch"] = epoch
    r = cache.get(key)
    if r.__class__ is launch.Replay:
        if not launch._hooked():
            for k, n in r.stats:
                stats[k] += n
            return r(x)
        return fn(x)
    if r.__class__ is GraphedCall:
        if launch._hooked():  # a profiler's launch hooks see each kernel as the Python path issues it
            return fn(x)
        y = r(x)
        if y is not None:
            for k, n in r.stats:
                stats[k] += n
            return y
        r = cache[key] = False  # a buffer changed in place: record (or capture) again
    if r is None or key[5] or key[6] or key[-1]:  # first call (tunes), grad/autocast, a capture: not recorded
        if len(cache) >= _REPLAY_CAP:
            cache.clear()
        cache[key] = False
        return fn(x)
    if r is not False:  # not replayable
        return fn(x)
    from fused.kernels import tuning

    global _graph_gain
    before, tuned = Counter(stats), len(tuning._cache)
    rec = launch.start_recording(x, owner.buffers())
    _graph_gain = 0.0
    try:
        y = fn(x)
    finally:
        launch.stop_recording()
        gain, _graph_gain = _graph_gain, None
    out = rec.live.get(y.data_ptr()) if isinstance(y, torch.Tensor) else None
    if len(tuning._cache) != tuned:
        return y  # a config was still being tuned: record on the next call (cache[key] stays False)
    if not rec.ok:
        cache[key] = ("no replay: a launch takes a tensor made outside the kernels (smoothing, autocast, a "
                      "copying reshape of x, a user out=)")
    elif not rec.launches:
        cache[key] = "no replay: no kernel launch"
    elif (out is None or not y.is_contiguous() or y.dtype != rec.allocs[out][1]
          or y.numel() != torch.Size(rec.allocs[out][0]).numel()):
        cache[key] = "no replay: the result is not a kernel's output"
    else:
        shape = None if tuple(y.shape) == rec.allocs[out][0] else tuple(y.shape)
        cache[key] = launch.Replay(rec, out, shape, tuple((stats - before).items()))
    M = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    # a signature that recorded launches cannot replay (a tensor from outside the kernels, or a launch the recorder
    # does not see, e.g. a Gluon GEMM's) would run the Python path on every call: graph it instead
    pays = gain >= EAGER_GRAPH_GAIN_US or (EAGER_GRAPH_REFUSED and not isinstance(cache[key], launch.Replay))
    if pays and 0 < M <= EAGER_GRAPH_MAX_M and isinstance(y, torch.Tensor):
        # the graph picks save `gain` µs of GPU time per call (or the call cannot be replayed otherwise): replay
        # this signature from a CUDA graph instead
        if _graph_bytes[x.get_device()] + 2 * x.numel() * x.element_size() > EAGER_GRAPH_MB * 2**20:
            stats[("eager graph", f"not captured: dispatch.EAGER_GRAPH_MB = {EAGER_GRAPH_MB:g} reached")] += 1
        else:
            c = _capture_call(owner, x, fn)
            if c.__class__ is GraphedCall:
                cache[key] = c
            else:
                stats[("eager graph", c)] += 1
    return y


def replay_status(model) -> tuple[int, list[tuple[str, str]], int]:
    """(input signatures replayed from recorded launches, [(module, reason)] for signatures refused, signatures
    replayed from a CUDA graph of the module) over the modules of ``model`` that ran eager CUDA calls
    (fused.explain prints it)."""
    replayed, refused, graphed = 0, [], 0
    for name, mod in model.named_modules():
        for r in mod.__dict__.get("_replays", {}).values():
            if r.__class__ is launch.Replay:
                replayed += 1
            elif r.__class__ is GraphedCall:
                graphed += 1
            elif isinstance(r, str):
                refused.append((name or "<root>", r))
    return replayed, refused, graphed


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
        path = _cuda_path(op, M, dynamic, wg.dtype, x.dtype)
        if CUBLAS_W8A16 and not dynamic and M >= WIDEN_MIN_M and x.dtype == torch.bfloat16 and _cublas_ok(wg):
            path = _pair_w8a16_route(x2, wg, sg, bg, wu, su, bu, act, path)
        elif WS_SPLIT_MIN_M <= M < WIDEN_MIN_M and path == SPLIT_PATH and W8A16_WS_PAIR:
            path = _pair_ws_mid_route(x2, wg, sg, bg, wu, su, bu, act, path)
        elif CUBLAS_W8A8 and dynamic and M > A8_GEMV_MAX_M and _cublas_ok(wg):
            key = ("gated_pair", m_bucket(M), tuple(wg.shape), wg.dtype, x2.dtype, bg is None, act)
            others = {}
            for name, wpath in _layer_ws_paths(M):
                _offer_w8a8_ws(others, key, op, x2, wg, True, lambda c=_WS_CONFIG[wpath]: _w8a8_ws_y(
                    x2, wg, sg, bg, act, True, up=(wu, su, bu), config=c), x2.dtype, name=name, pair=True)
            pick = _graph_pick(key, lambda: _triton_pair(path, x2, wg, sg, bg, wu, su, bu, act, True),
                               lambda: _cublas_w8a8_pair(x2, wg, sg, bg, wu, su, bu, act), op, others=others or None)
            path = {"cublas": CUBLAS_PATH, **dict(_layer_ws_paths())}.get(pick, path)
    else:
        path, why = plan(op, _fmt(wg), dynamic, x.device, M, dtype=x.dtype, k=K, n=wg.shape[0],  # each read alone
                         **cpu_weight_facts(x.device, wg, wu))
    stats[(op, path)] += 1
    if path.startswith("cpu:"):
        return cpu.run_pair(path, x, wg, sg, bg, wu, su, bu, act, dynamic)
    if path == "reference":
        if _kernels_pkg.strict() and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        return reference.gated_pair_ref(x, wg, sg, bg, wu, su, bu, act, dynamic)
    if path == CUBLAS_W8A16_PATH:
        y = _cublas_w8a16_pair(x2, wg, sg, bg, wu, su, bu, act)
    elif path == WS_PATH:
        y = _w8a16_ws_pair(x2, wg, sg, bg, wu, su, bu, act)
    elif path in _WS_SPLIT_CONFIG:
        y = _w8a16_ws_split(x2, wg, sg, bg, act, True, path, up=(wu, su, bu))
    elif path == CUBLAS_PATH:
        y = _cublas_w8a8_pair(x2, wg, sg, bg, wu, su, bu, act)
    elif path in _WS_CONFIG:
        y = _w8a8_ws_y(x2, wg, sg, bg, act, True, up=(wu, su, bu), config=_WS_CONFIG[path])
    else:
        y = _triton_pair(path, x2, wg, sg, bg, wu, su, bu, act, dynamic)
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def _cublas_w8a16_pair(x2, wg, sg, bg, wu, su, bu, act):
    """_cublas_w8a16 for a gate / up pair in tensors of their own (gated_pair): each weight widened, two cuBLAS GEMMs
    into one [2, M, H] buffer (no stacked copy of the weights), scale_epilogue reading gate and up apart."""
    from fused.kernels.scale_epilogue import scale_epilogue

    k = _triton_kernels()
    y = torch.empty((2, x2.shape[0], wg.shape[0]), device=x2.device, dtype=x2.dtype)
    torch.mm(x2, k.widen(wg, x2.dtype).t(), out=y[0])
    torch.mm(x2, k.widen(wu, x2.dtype).t(), out=y[1])
    return scale_epilogue(y, None, sg, bg, act, True, x2.dtype, up=(su, bu))


def _cublas_w8a8_pair(x2, wg, sg, bg, wu, su, bu, act):
    """_cublas_w8a8 for a gate / up pair in tensors of their own (gated_pair; the W8A8 route of torch.compile's pass,
    as the stacked op has since the seventh session): x quantized once, two cuBLAS GEMMs into one [2, rows, H]
    buffer, scale_epilogue reading gate and up apart."""
    from fused.kernels.scale_epilogue import scale_epilogue

    fp8 = wg.dtype == torch.float8_e4m3fn
    M, dtype, H = x2.shape[0], x2.dtype, wg.shape[0]
    xq, xs = _triton_kernels().act_quant(x2, fp8=fp8, rows=_library_rows(M, fp8))
    y = torch.empty((2, xq.shape[0], H), device=x2.device, dtype=torch.bfloat16 if fp8 else torch.int32)
    if fp8 and CUBLAS_FP8 != "unit" and M >= CUBLAS_FP8_MIN_M and xq.shape[0] == M:  # scales inside (CUBLAS_FP8)
        for i, (w, s) in enumerate(((wg, sg), (wu, su))):
            torch._scaled_mm(xq, w.t(), xs[:, None], s[None, :], out_dtype=torch.bfloat16,
                             use_fast_accum=CUBLAS_FP8 == "rowwise_fast", out=y[i])
        xs = sg = su = None  # applied
    else:
        one = _unit_scale(xq.device)
        for i, w in enumerate((wg, wu)):
            if fp8:
                torch._scaled_mm(xq, w.t(), one, one, out_dtype=torch.bfloat16, out=y[i])
            else:
                torch._int_mm(xq, w.t(), out=y[i])
    return scale_epilogue(y, xs, sg, bg, act, True, dtype, m=M, up=(su, bu))


def _pair_w8a16_route(x2, wg, sg, bg, wu, su, bu, act, path) -> str:
    """_cublas_w8a16_route for gated_pair: ``path`` (Triton on the widened pair) or CUBLAS_W8A16_PATH, timed per
    shape on its first eager call. Why: torch.compile's pass turns a per-Linear Llama block's gate and up into this
    op, which otherwise had only the Triton route where the stacked op takes cuBLAS's faster GEMM (twenty-eighth
    session, Llama gate/up at M=1024: 424 vs 444 µs; at 8192 3065 vs 3267). Two GEMMs of H columns instead of one of
    2H: even for bf16 in a raw A/B (`.ci/halves_probe.py`). Timed in the twenty-ninth session: the per-Linear
    compiled block now runs as the block conversion (int8 W8A16 M=1024 666.4 vs 680.3 µs)."""
    key = ("gated_pair", m_bucket(x2.shape[0]), tuple(wg.shape), wg.dtype, x2.dtype, bg is None, act, "w8a16")
    others = {}
    if (W8A16_WS_PAIR and key[1] <= W8A16_WS_MAX_M and _may_time(key, x2)
            and _ws_supports(x2, wg) is None and _ws_supports(x2, wu) is None):  # no stacked rows to pair: any H
        _offer_ws(others, "gated_pair", lambda: _w8a16_ws_pair(x2, wg, sg, bg, wu, su, bu, act))
    if (W8A16_WS_PAIR and key[1] <= SPLIT_ROUTE_MAX_M and _may_time(key, x2)
            and _split_applies(wg.dtype, x2.dtype)):
        _offer_ws_split(others, "gated_pair", x2, wg, sg, bg, act, up=(wu, su, bu))
    pick = _graph_pick(key, lambda: _triton_pair(path, x2, wg, sg, bg, wu, su, bu, act, False),
                       lambda: _cublas_w8a16_pair(x2, wg, sg, bg, wu, su, bu, act), "gated_pair", w8a16=True,
                       others=others or None)
    return {"cublas": CUBLAS_W8A16_PATH, "ws": WS_PATH, **_WS_SPLIT}.get(pick, path)


def _pair_ws_mid_route(x2, wg, sg, bg, wu, su, bu, act, path) -> str:
    """_ws_mid_route for gated_pair (torch.compile's per-Linear gate / up): ``path`` (Triton's split tiles on the
    pair) or a split-plane Gluon form, from WS_SPLIT_MIN_M below WIDEN_MIN_M."""
    key = ("gated_pair", m_bucket(x2.shape[0]), tuple(wg.shape), wg.dtype, x2.dtype, bg is None, act, "ws mid")
    if key in _nothing_offered:
        return path
    others = {}
    if _may_time(key, x2):
        _offer_ws_split(others, "gated_pair", x2, wg, sg, bg, act, up=(wu, su, bu))
        if not others:
            _nothing_offered.add(key)
    if not others and key not in _dense_routes:
        return path
    pick = _graph_pick(key, lambda: _triton_pair(path, x2, wg, sg, bg, wu, su, bu, act, False), None, "gated_pair",
                       w8a16=True, others=others or None)
    return _WS_SPLIT.get(pick, path)


# The Gluon W8A16 GEMM for gated_pair too (w8a16_ws_pair: the up rows from the up weight's own tensor), as a third
# candidate of the route above. H200 (thirty-second session, `bash .ci/h200_next.sh wspair`): the per-Linear Llama
# int8 W8A16 block under torch.compile at M=1024 in 2 kernels, 614.8 µs (666 on the widened pair's routes); fp8
# W8A16 601.2 (the block conversion 608.1 in the same run). dispatch.W8A16_WS_PAIR = False: off.
W8A16_WS_PAIR = True


def _w8a16_ws_pair(x2, wg, sg, bg, wu, su, bu, act):
    from fused.kernels.w8a16_ws import w8a16_ws_pair

    return w8a16_ws_pair(x2, wg, sg, bg, wu, su, bu, act)


def _triton_pair(path, x2, wg, sg, bg, wu, su, bu, act, dynamic):
    """The Triton launches of gated_pair's CUDA path on 2-D x (as _triton_dense for the stacked op)."""
    k = _triton_kernels()
    up = (wu, su, bu)
    if path == "triton:w8_gemm_split":  # see SPLIT_MAX_M
        y = k.w8_gemm(x2, wg, sg, bg, act, True, up=up, quantize_x=True, x_split=True)
    elif path == SPLIT_ONE_PATH:
        y = k.split_gemm(x2, wg, sg, bg, act, True, up=up)
    elif path == QUANT_ONE_PATH:
        y = k.quant_gemm(x2, wg, sg, bg, act, True, up=up)
    elif path == "triton:act_split+w8_gemm_split":
        planes, xs = k.act_split(x2, fp8=wg.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(planes, wg, sg, bg, act, True, x_scale=xs, out_dtype=x2.dtype, up=up, x_split=True)
    elif path.endswith("w8a16_gemv"):
        y = k.w8a16_gemv(x2, wg, sg, bg, act, True, up=up)
    elif path.endswith("_qx"):
        y = k.w8_gemm(x2, wg, sg, bg, act, True, up=up, quantize_x=True)
    elif dynamic:
        xq, xs = k.act_quant(x2, fp8=wg.dtype == torch.float8_e4m3fn)
        y = k.w8_gemm(xq, wg, sg, bg, act, True, x_scale=xs, out_dtype=x2.dtype, up=up)
    elif x2.shape[0] >= WIDEN_MIN_M and x2.dtype != torch.float32:  # as _triton_dense (see WIDEN_MIN_M); before the
        # twenty-eighth session this pair ran the mixed-input GEMM here, at about half the rate, under its widen label
        y = k.w8_gemm(x2, k.widen(wg, x2.dtype), sg, bg, act, True, up=(k.widen(wu, x2.dtype), su, bu))
    else:
        y = k.w8_gemm(x2, wg, sg, bg, act, True, up=up)
    return y


# 2:4 ops with 8-bit values on CUDA: "packed" (the 2:4 kernels read the packed weight), "unpacked" (unpack24
# to a transient dense copy, then the dense path), "cslt" (2:4 sparse tensor cores through cuSPARSELt, see
# _cslt), "mma" (int8 at M <= 16 unless sparse24_mma.MMA = False: act_split / act_quant + sparse24_mma, 2:4 on mma.sp,
# see _mma_ok),
# or None: the first call of each shape times them and keeps the fastest
# (packed unless another wins by 3%). Env dispatch.SPARSE_ROUTE sets it.
SPARSE_ROUTE: str | None = None
_sparse_routes: dict = {}
# why the cslt route was left out of a shape's route (the error cuSPARSELt / torch raised), by shape key
cslt_errors: dict = {}


def _cslt_shape_ok(N: int, K: int) -> bool:
    # torch's cuSPARSELt constraints for 8-bit: the sparse matrix [N, K] in multiples of 32 (the dense one's
    # rows, M, are padded in _cslt)
    return N % 32 == 0 and K % 32 == 0


# cuSPARSELt's compressed copy of each packed 2:4 weight the cslt route runs on, made on the layer's first cslt
# call and kept while its packed ``values`` tensor lives: compressing costs ~1.5 ms per Llama gate/up weight,
# more than the GEMM it serves. Memory: 0.625 B per weight (8-bit values, W8A8 and W8A16 alike), on top of
# the packed weight (see cslt_cached_bytes; explain and the bench count it). A copy made only to time the
# route is dropped when cslt loses. dispatch.CSLT_CACHE = False: no copies kept, each call compresses again (the route
# is then timed that way, and at these costs cslt does not win).
CSLT_CACHE = True
_cslt_weights = None  # WeakIdKeyDictionary: values -> ((values, meta) versions, compressed)
_cslt_algs: dict = {}  # (compressed shape, dtypes, m bucket) -> cuSPARSELt algorithm id found by its search


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version counter
        return 0


def cslt_cached_bytes(values: torch.Tensor | None = None) -> int:
    """Bytes of the cuSPARSELt copies held for ``values`` (None: for every layer)."""
    if _cslt_weights is None:
        return 0
    held = ([_cslt_weights[values]] if values in _cslt_weights else []) if values is not None \
        else list(_cslt_weights.values())
    return sum(c.numel() * c.element_size() for _, c in held)


# Tiled meta (sparsity.packing.tile_meta): on CUDA a 2:4 layer with 8-bit values and N, K multiples of 64 keeps
# ONE buffer, [values | meta in cuSPARSELt's tile order], which is byte for byte what torch._cslt_compress
# makes; cuSPARSELt runs on the buffer and our kernels read the same values and tiled meta. 0.625 bytes per
# weight for every route instead of 1.25 with a separate compressed copy. The layout was read off cuSPARSELt 0.8
# on sm_90; tiled_meta_wanted checks it once per device and dtype against torch._cslt_compress and keeps
# row-major meta (and the separate copy) where it differs. dispatch.TILED_META = False: row-major meta always.
TILED_META = True
_tiled_checked: dict = {}  # (device, dtype) -> whether cuSPARSELt's layout there is tile_meta's


def _tiled_layout_matches(device: torch.device, dtype: torch.dtype) -> bool:
    from sparsity.packing import pack_24, tile_meta

    key = (str(device), dtype)
    if key not in _tiled_checked:
        g = torch.Generator().manual_seed(0)
        n, k = 128, 128  # two row tiles, two K tiles; bytes 1..126 (no fp8 NaN or -0), positions all 6 kinds
        pos = torch.tensor([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])[torch.randint(6, (n, k // 4), generator=g)]
        w = torch.zeros(n, k // 4, 4, dtype=torch.uint8)
        w.scatter_(2, pos, torch.randint(1, 127, (n, k // 4, 2), generator=g, dtype=torch.uint8))
        w = w.reshape(n, k)
        v, m = pack_24(w)
        ours = torch.cat([v.reshape(-1), tile_meta(m).reshape(-1)])
        try:
            c = torch._cslt_compress(w.view(dtype).to(device))
            _tiled_checked[key] = torch.equal(c.view(torch.uint8).reshape(-1).cpu(), ours)
        except (RuntimeError, ValueError, AttributeError):  # no cuSPARSELt for this device / dtype
            _tiled_checked[key] = False
    return _tiled_checked[key]


def tiled_meta_wanted(values: torch.Tensor) -> bool:
    """Whether a 2:4 layer with these packed values keeps tiled meta in one buffer with them (see TILED_META)."""
    from sparsity.packing import tiled_meta_ok

    if not (TILED_META and values.is_cuda and values.dim() == 2 and values.element_size() == 1):
        return False
    return tiled_meta_ok(values.shape[0], 2 * values.shape[1]) and _tiled_layout_matches(values.device, values.dtype)


def shares_buffer(values: torch.Tensor, meta: torch.Tensor) -> bool:
    """Whether tiled ``meta`` directly follows ``values`` in one storage: the buffer cuSPARSELt runs on."""
    return (meta.dim() == 3 and values.is_contiguous() and meta.is_contiguous()
            and values.untyped_storage().data_ptr() == meta.untyped_storage().data_ptr()
            and meta.storage_offset() == values.storage_offset() + values.numel())


def _cslt_weight(values, meta):
    """The packed 8-bit weight compressed for cuSPARSELt (kept while ``values`` lives, see CSLT_CACHE). Tiled
    meta right after the values in one storage (a layer's usual CUDA form, see TILED_META): that buffer
    itself, no copy."""
    global _cslt_weights
    from fused.kernels.unpack24 import unpack24

    if shares_buffer(values, meta):
        n, half = values.shape
        return torch.empty(0, dtype=values.dtype, device=values.device).set_(
            values.untyped_storage(), values.storage_offset(), (n, half + half // 4))
    if _cslt_weights is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _cslt_weights = WeakIdKeyDictionary()
    version = (_version(values), _version(meta))
    hit = _cslt_weights.get(values)
    if hit is not None and hit[0] == version:
        return hit[1]
    if meta.dim() == 3:  # tiled but apart from the values: the buffer is the two side by side
        c = torch.cat([values.view(torch.uint8).reshape(-1), meta.reshape(-1)]).view(values.dtype).view(
            values.shape[0], -1)
    else:
        c = torch._cslt_compress(unpack24(values, meta))
    if CSLT_CACHE:
        _cslt_weights[values] = (version, c)
    return c


def _drop_cslt_weight(values):
    if _cslt_weights is not None and values in _cslt_weights:
        del _cslt_weights[values]


def _cslt_alg(c, b, out_dtype) -> int:
    """cuSPARSELt's own pick among its algorithms for this shape (searched once per M bucket; 0, its
    default, off CUDA or when first met while a CUDA graph is being captured). On the H200 (graph replays)
    the search halved fp8 times at M >= 1024 and cut bf16 ones by a third."""
    key = (tuple(c.shape), c.dtype, b.dtype, out_dtype, m_bucket(b.shape[1]))
    if key in _cslt_algs or not b.is_cuda or torch.cuda.is_current_stream_capturing():
        return _cslt_algs.get(key, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of torch._C._cusparselt.mm_search (torch 2.11)
        _cslt_algs[key] = int(torch._cslt_sparse_mm_search(c, b, out_dtype=out_dtype, transpose_result=True))
    return _cslt_algs[key]


def _cslt_w8a16_ok(values_dtype, x_dtype) -> bool:
    """Split planes carry int8: 15 bits, e4m3: ~8 (as the dense split path): no finer than fp32 x, and e4m3
    planes no finer than fp16's 11 bits either; such inputs keep the other routes."""
    return x_dtype == torch.bfloat16 or (x_dtype == torch.float16 and values_dtype == torch.int8)


def _cslt(x2, values, meta, wscale, bias, act, gated, dynamic, q_in=None, q_rows=None):
    """2:4 on the sparse tensor cores (cuSPARSELt) with 8-bit operands, on the layer's compressed copy
    (_cslt_weight). W8A8 (``dynamic``): x quantized per token (act_quant). W8A16: x split per token into two
    8-bit planes (act_split: int8 x ≈ s·(256·hi + lo), 15 bits; e4m3 x ≈ s·(hi + lo/16)), stacked as twice
    the rows, so one product gives both and the numerics stay weight-only. Then y = x_q · W_qᵀ in bf16 by
    torch._cslt_sparse_mm, and the planes' sum, per-token and per-channel scales, bias, activation and gate
    in one pass (scale_epilogue). The weight scale is not cuSPARSELt's alpha vector: on the H200 only int8
    takes one. bf16 output whatever x's dtype: fp16 would overflow on the raw int8 products. W8A8 only: ``q_in``
    x already quantized (a QuantizedAct), ``q_rows`` the output quantized (epilogue_quant, a QuantizedAct with
    that many rows)."""
    from fused.kernels.scale_epilogue import scale_epilogue

    fp8 = values.dtype == torch.float8_e4m3fn
    k = _triton_kernels()
    M, dtype = (q_in.m, q_in.dtype) if q_in is not None else (x2.shape[0], x2.dtype)
    planes = None
    if q_in is not None:
        xq, xs = q_in.q, q_in.s
    elif dynamic:
        xq, xs = k.act_quant(x2, fp8=fp8, rows=_library_rows(M, fp8))
    else:
        rows = -(-M // 16) * 16  # per plane: the two make at least 32
        xq, xs = k.act_split(x2, fp8=fp8, rows=rows)
        xq = xq.view(2 * rows, x2.shape[1])
        planes = (rows, 1.0, 1.0 / FP8_SPLIT_LO) if fp8 else (rows, 256.0, 1.0)
    c = _cslt_weight(values, meta)
    b = xq.t()
    y = torch._cslt_sparse_mm(c, b, out_dtype=torch.bfloat16, transpose_result=True,
                              alg_id=_cslt_alg(c, b, torch.bfloat16))
    if q_rows is not None:
        from fused.kernels.epilogue_quant import epilogue_quant

        return QuantizedAct(*epilogue_quant(y, xs, wscale, bias, act, gated, dtype, fp8, M, rows=q_rows,
                                            planes=planes), M, dtype)
    return scale_epilogue(y, xs, wscale, bias, act, gated, dtype, m=M, planes=planes)


def sparse_route_picks(op: str, values: torch.Tensor, dynamic: bool) -> dict:
    """The routes measured so far for a 2:4 layer's shape: {(M bucket, x dtype, bias None, act, hand-off):
    (eager pick, CUDA-graph pick)} ("packed", "unpacked", "cslt" or "mma"; what `explain` lists; hand-off: "", or
    "h out" / "h in" for a block's layers passing h quantized)."""
    return {(k[1], k[4], k[6], k[7], k[8] if len(k) > 8 else ""): v for k, v in _sparse_routes.items()
            if k[0] == op and k[2] == tuple(values.shape) and k[3] == values.dtype and k[5] == dynamic}


def _mma_ok(x2, values, meta, M: int, handoff: str, gated: bool) -> bool:
    """Whether the "mma" route (sparse24_mma, 2:4 decode on the sparse tensor cores) is a candidate: on unless
    sparse24_mma.MMA = False; int8 values with tiled meta, M <= 16, 16-bit x."""
    from fused.kernels import sparse24_mma as sm

    if not sm.MMA or handoff or x2 is None or not x2.is_cuda or not 1 <= M <= 16 or meta.dim() != 3:
        return False
    if x2.dtype not in (torch.bfloat16, torch.float16) or (gated and values.shape[0] % 128):
        return False
    # int8 only: e4m3's mma.sp is lowered by ptxas (sm_90) to two f16 HMMA.SP with conversions and shuffles (616
    # instructions per step against int8's 91, 186 registers) and lost every layer on the H200 (twenty-second
    # session); sparse24_mma still runs it when called directly
    if values.dtype != torch.int8 or torch.cuda.get_device_capability(x2.device) < (8, 0):
        return False
    planes = torch.empty((2, M, x2.shape[1]), dtype=values.dtype, device="meta")
    return sm.check_mma_args(planes, torch.empty(M, device="meta"), values, meta) is None


def _run_sparse(op: str, x, values, meta, wscale, bias, act, dynamic, q_out=False):
    """A 2:4 op on x, or (the quantized hand-off, see HANDOFF; W8A8, M > 16) on a QuantizedAct x; ``q_out``:
    the output as a QuantizedAct."""
    q_in = x if isinstance(x, QuantizedAct) else None
    if q_in is not None:
        if q_in.q.shape[1] != 2 * values.shape[1] or q_in.q.dtype != values.dtype or not dynamic:
            raise ValueError(f"{op}: a quantized {q_in.q.dtype} input of {q_in.q.shape[1]} features does not fit "
                             f"the packed {values.dtype} weight of {2 * values.shape[1]} (W8A8 only)")
        x2, M, device, xdtype = None, q_in.m, q_in.q.device, q_in.dtype
    else:
        _check_input(x, values, op)
        if x.shape[-1] != 2 * values.shape[1]:
            raise ValueError(f"{op}: input has {x.shape[-1]} features, the packed 2:4 weight expects {2 * values.shape[1]}")
        x2 = x.reshape(-1, x.shape[-1])
        M, device, xdtype = x2.shape[0], x.device, x.dtype
    handoff = "h in" if q_in is not None else "h out" if q_out else ""
    if handoff and not (dynamic and M >= HANDOFF_MIN_M and values.dtype != torch.bfloat16):
        raise ValueError(f"{op}: the quantized hand-off is for W8A8 8-bit values above M={HANDOFF_MIN_M - 1}")
    gated = op == "sparse24_gated"
    path, why = plan(op, _fmt(values), dynamic, device, M, dtype=xdtype, k=2 * values.shape[1])
    if path.startswith("cpu:"):
        if handoff:
            raise RuntimeError(f"{op}: the quantized hand-off runs the fused kernels only")
        stats[(op, path)] += 1
        return cpu.run(path, "linear" if op == "sparse24_linear" else "gated", x, cpu.Packed24(values, meta),
                       wscale, bias, act, dynamic)
    if path == "reference":
        if handoff:
            raise RuntimeError(f"{op}: the quantized hand-off runs the fused kernels only")
        stats[(op, path)] += 1
        if _kernels_pkg.strict() and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        ref = reference.sparse24_linear_ref if op == "sparse24_linear" else reference.sparse24_gated_ref
        return ref(x, values, meta, wscale, bias, act, dynamic)

    def out(h):  # the h-out form of a route that makes h in x's dtype
        return _quantized(h, values.dtype == torch.float8_e4m3fn) if q_out else h

    def packed():
        if q_in is not None:
            from fused.kernels.sparse24_linear import sparse24_linear as kernel

            return kernel(q_in.q[:M], values, meta, wscale, bias, act, True, x_scale=q_in.s, out_dtype=xdtype)
        if M <= SPARSE_GEMV_MAX_M:
            # decode: weight-only even for a W8A8 config (dynamic ignored), as for the dense ops
            from fused.kernels.sparse24_gemv import sparse24_gemv

            return sparse24_gemv(x2, values, meta, wscale, bias, act, gated=gated)
        from fused.kernels.sparse24_linear import sparse24_gated, sparse24_linear

        kernel = sparse24_linear if op == "sparse24_linear" else sparse24_gated
        return out(kernel(x2, values, meta, wscale, bias, act, dynamic))

    def unpacked():  # the same weights, dense: exact; the dense path counts its own call in `stats`
        from fused.kernels.unpack24 import unpack24

        dense_op = "linear" if op == "sparse24_linear" else "gated"
        w = unpack24(values, meta)
        if q_in is not None:
            return _dense_q_in(q_in, w, wscale, bias, act)
        if q_out:
            return _dense_q_out(dense_op, x2, w, wscale, bias, act)
        return _run(dense_op, x2, w, wscale, bias, act, dynamic)

    def cslt():
        return _cslt(x2, values, meta, wscale, bias, act, gated, dynamic, q_in=q_in,
                     q_rows=_handoff_rows(M) if q_out else None)

    def mma():  # decode on mma.sp: W8A16 on act_split's two 8-bit planes of x, W8A8 on act_quant's one; the mma
        # kernel a programmatic dependent of the small one (sparse24_mma.PDL). sparse24_mma_x, which splits x in its
        # own programs, was slower on the H200 (twenty-second session: its prologue cost what the launch did)
        from fused.kernels import sparse24_mma as sm
        from fused.kernels.act_quant import act_quant
        from fused.kernels.act_split import act_split

        fp8 = values.dtype == torch.float8_e4m3fn
        pdl = sm.pdl_ok(x2.device)
        q, xs = act_quant(x2, fp8=fp8, pdl=pdl) if dynamic else act_split(x2, fp8=fp8, pdl=pdl)
        return sm.sparse24_mma(q if q.dim() == 3 else q[None], xs, values, meta, wscale, bias, act, gated,
                               out_dtype=xdtype, pdl=pdl)

    route = "packed"
    is_cuda = device.type == "cuda"
    capturing = is_cuda and torch.cuda.is_current_stream_capturing()
    if values.dtype != torch.bfloat16 and M > 0:  # bf16 values: no dense bf16 kernel here; M = 0: nothing to time
        route = SPARSE_ROUTE
        if route is None:
            key = (op, m_bucket(M), tuple(values.shape), values.dtype, xdtype, dynamic, bias is None, act) + (
                (handoff,) if handoff else ())
            routes = _sparse_routes.get(key)
            if routes is None and not capturing:
                cands = {"packed": packed, "unpacked": unpacked}
                # cuSPARSELt, at any M: W8A8 on per-token 8-bit x (in graphs at M <= 16 too, instead of the
                # weight-only GEMV), W8A16 on split planes
                if (is_cuda and (dynamic or _cslt_w8a16_ok(values.dtype, xdtype))
                        and _cslt_shape_ok(values.shape[0], 2 * values.shape[1])):
                    why = _offer(cands, "cslt", cslt, cslt, op, "cuSPARSELt")
                    if why is not None:
                        cslt_errors[key] = why
                if _mma_ok(x2, values, meta, M, handoff, gated):
                    cands["mma"] = mma
                r = measure_route("sparse24_route", key, cands, graph=is_cuda)
                routes = _sparse_routes[key] = r if is_cuda else (r, r)
                if "cslt" in cands and not any("cslt" in v for v in _sparse_picks_all(values).values()):
                    _drop_cslt_weight(values)  # made for the timing only (no route of this shape takes it)
            # eager calls take the route fastest per call; a CUDA graph being captured, the one fastest on the
            # GPU (cuSPARSELt costs 0.3-0.9 ms of host time per call, which a graph replay does not pay). First
            # met under capture (no timing possible there): packed, and measured at the next eager call
            route = "packed" if routes is None else routes[1] if capturing else routes[0]
            if routes is not None and not capturing:
                _note_gain("sparse24_route", key, routes[0], routes[1])
    label = {"unpacked": "triton:unpack24+dense", "cslt": "cusparselt+triton:scale_epilogue",
             "mma": "triton:act_quant+sparse24_mma" if dynamic else "triton:act_split+sparse24_mma"}.get(route, path)
    if route == "cslt" and q_out:
        label = "cusparselt+triton:epilogue_quant"
    stats[(op, label + (f" ({handoff})" if handoff else ""))] += 1
    y = {"unpacked": unpacked, "cslt": cslt, "mma": mma}.get(route, packed)()
    return y if handoff else y.reshape(*x.shape[:-1], y.shape[-1])


def _sparse_picks_all(values: torch.Tensor) -> dict:
    """Every route pick of the shapes of ``values`` (any op, mode, hand-off): whether one still takes cslt."""
    return {k: v for k, v in _sparse_routes.items() if k[2] == tuple(values.shape) and k[3] == values.dtype}


def sparse24_mlp_block(x, v1, m1, s1, b1, v2, m2, s2, b2, act="silu", gated=True, dynamic=True):
    """A 2:4 block (FusedSparseGatedLinear or FusedSparseLinear, then FusedSparseLinear with no activation):
    both layers through their own routes, with h handed over quantized when both are W8A8 above M=16 (see
    HANDOFF; bit-identical to the two layers called one after the other)."""
    op = "sparse24_mlp_block"
    first = "sparse24_gated" if gated else "sparse24_linear"
    _check_input(x, v1, op)
    if v2.device != x.device:
        raise RuntimeError(f"{op}: device mismatch: activations on {x.device}, down weight on {v2.device}")
    H = v1.shape[0] // 2 if gated else v1.shape[0]
    if 2 * v2.shape[1] != H:
        raise ValueError(f"{op}: the down weight expects {2 * v2.shape[1]} features, the first layer gives {H}")
    M = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if (HANDOFF and dynamic and M >= HANDOFF_MIN_M and v1.dtype == v2.dtype and v1.dtype != torch.bfloat16
            and (x.is_cuda or _forced == "triton") and _forced != "reference"):
        qa = _run_sparse(first, x, v1, m1, s1, b1, act, dynamic, q_out=True)
        y = _run_sparse("sparse24_linear", qa, v2, m2, s2, b2, "none", dynamic)
        stats[(op, "per_layer (h quantized)")] += 1
        return y.reshape(*x.shape[:-1], y.shape[-1])
    stats[(op, "per_layer")] += 1
    h = _run_sparse(first, x, v1, m1, s1, b1, act, dynamic)
    return _run_sparse("sparse24_linear", h, v2, m2, s2, b2, "none", dynamic)


def sparse24_linear(x, values, meta, wscale=None, bias=None, act="none", dynamic=False):
    """y = act(x · Wᵀ + b) with W 2:4, packed as (values, meta) + per-row scales (None for bf16 values)."""
    return _run_sparse("sparse24_linear", x, values, meta, wscale, bias, act, dynamic)


def sparse24_gated(x, values, meta, wscale=None, bias=None, act="silu", dynamic=False):
    """act(x · W_gᵀ + b_g) ⊙ (x · W_uᵀ + b_u) with W_g/W_u stacked in one packed 2:4 [2H, K] weight."""
    return _run_sparse("sparse24_gated", x, values, meta, wscale, bias, act, dynamic)


def narrow_mlp(x, weights, params, dims, acts):
    """A whole narrow MLP (packed by fused.narrow.pack_narrow): one fused launch on CUDA, fused.cpu.narrow_mlp
    on the CPU."""
    op = "narrow_mlp"
    _check_input(x, weights, op)
    if x.shape[-1] != dims[0]:
        raise ValueError(f"{op}: input has {x.shape[-1]} features, the MLP expects {dims[0]}")
    fmt = {torch.int8: "int8", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(weights.dtype)
    if fmt is None:
        raise TypeError(f"{op}: packed weights must be int8/float16/bfloat16, got {weights.dtype}")
    path, why = plan(op, fmt, False, x.device)
    stats[(op, path)] += 1
    if path == "cpu:narrow_addmm":
        return cpu_narrow.narrow_mlp(x, weights, params, dims, acts)
    if path == "reference":
        if _kernels_pkg.strict() and x.device.type == "cuda":
            raise RuntimeError(f"fused strict mode: {why}")
        return reference.narrow_mlp_ref(x, weights, params, dims, acts)
    from fused.kernels.narrow_mlp import narrow_mlp as kernel

    # 2-D views keep their strides (the kernel loads through them); N-D inputs are flattened, which
    # copies only when the leading dims cannot be merged
    y = kernel(x.reshape(-1, x.shape[-1]), weights, params, dims, acts)
    return y.reshape(*x.shape[:-1], dims[-1])


def block_applies(device: torch.device) -> bool:
    """Whether the decode block can run for a block on ``device`` at some M: the modules route a block
    through ``mlp_block`` (or its op) only then, and keep their per-layer forward (hooks, paths) elsewhere."""
    return _forced != "reference" and (device.type == "cuda" or _forced == "triton")


_block_routes: dict = {}


def _graph_replay(fn, pool=None):
    """``fn`` captured in a CUDA graph (after a warm-up call on a side stream), or None if it cannot be
    (an op that cannot be captured, or out of memory: each graph keeps its own outputs and temporaries, in
    ``pool`` if given). Captured in thread-local mode: these captures happen inside a user's call, and the
    global mode would make other threads' unsafe CUDA calls (a cudaMalloc, a sync) fail meanwhile."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g, pool=pool, capture_error_mode="thread_local"):
            fn()
    except RuntimeError:
        torch.cuda.current_stream().wait_stream(s)
        return None
    return g


# Routes whose graph replay takes longer than LONG_ROUTE_US (GPU time) are timed sustained: the GPU first runs the
# first candidate for SUSTAIN_WARM_MS, then each do_bench window is ROUTE_REP_MS, and the eager pick is the graph pick
# (from a millisecond of GPU time per call, host time overlaps it: cuSPARSELt's 0.3-0.9 ms per call is the largest).
# Why: on the H200 the 8-bit blocks at M=8192 run at the 700 W power cap (twenty-seventh session, `bash
# .ci/h200_next.sh spread`: SM clock 1380-1620 MHz instead of 1980 within a second of sustained GEMMs; five captures
# of one block timed 2462-2776 µs in 100 ms windows, 2462-2494 in 1 s ones), and 20 ms windows catch whichever clock
# the controller is at: the GPT block's first-layer W8A16 routes timed Triton 1758 / cuBLAS 1917 µs eagerly and
# 1962 / 1857 replayed in the same rounds (gpt_bench.json), so eager calls took Triton and ran 350-400 µs slower per
# block than the graphs. Prepared on the CPU in that session (no device time left); not yet measured.
# From 150 µs since the thirty-fifth session: M=1024's gated routes run at the cap too, where the Gluon W8A8 GEMM
# spends 10% fewer joules than Triton's tiles, yet 20 ms windows at boost clocks timed them within the incumbent's 3%
# (fp8 gated graph µs: Triton 214.2, Gluon 208.1, so Triton kept it and the block ran 321.1 µs, 236.3 mJ, against 312.4
# / 220.8 with Gluon; `bash .ci/h200_next.sh thirty5a` / `thirty5b`); sustained windows: 236.6 / 216.3 (wsblock1).
LONG_ROUTE_US = 150
SUSTAIN_WARM_MS, ROUTE_REP_MS = 1000, 250


def _sustained(graphs: dict) -> bool:
    """Whether a route's candidates are long enough to time sustained (LONG_ROUTE_US); if so, warms the GPU up to its
    sustained clock first with the first capturable candidate."""
    g = next((g for g in graphs.values() if g is not None), None)
    if g is None or not LONG_ROUTE_US:
        return False
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    if ms * 1e3 <= LONG_ROUTE_US:
        return False
    for _ in range(max(1, int(SUSTAIN_WARM_MS / ms))):
        g.replay()
    torch.cuda.synchronize()
    return True


# A route candidate's first output (the call that tunes it) is checked against the incumbent's (the first candidate: the
# path every earlier session tested on the H200) before it is timed: one that disagrees (SQNR below ROUTE_CHECK_DB, or
# NaN / Inf where the incumbent has finite values) is left out with a warning and counted in `stats` (`explain` shows
# it), so a form that is wrong on some GPU or shape is never picked for being fast. The candidates compute the same
# quantized function up to rounding and accumulation order (>= 30 dB apart; the opt-in grouped W8A8 hand-offs quantize
# h differently, ~27 dB from the per-token one for fp8); a wrong kernel's output is noise (<= 0 dB), one that drops one
# of 8 split-K parts ~18 dB. dispatch.ROUTE_CHECK_DB = -inf: off.
ROUTE_CHECK_DB = 20.0
route_refusals: dict = {}  # (route kind,) + key -> [(candidate, why)] left out by the check (fused.explain prints them)


_CHECK_SAMPLES = 1 << 22  # values compared at most (a strided sample of larger outputs: no copy of M=8192's h)


def _route_value(out, step: int):
    """Every ``step``-th value of a route's output as fp32 (QuantizedAct: of its dequantized h), or None (not
    compared)."""
    if isinstance(out, QuantizedAct):
        q = out.q[:out.m].reshape(-1)[::step]
        rows = torch.arange(0, out.m * out.q.shape[1], step, device=q.device) // out.q.shape[1]
        return q.float() * out.s[:out.m].float()[rows]
    return out.reshape(-1)[::step].float() if isinstance(out, torch.Tensor) else None


def _route_shape(out):
    return (out.m, out.q.shape[1]) if isinstance(out, QuantizedAct) else tuple(out.shape) if isinstance(
        out, torch.Tensor) else None


def route_disagrees(ref, out) -> str | None:
    """None if a route candidate's output ``out`` matches the incumbent's ``ref`` (see ROUTE_CHECK_DB), else why not."""
    from lowbit.metrics import sqnr

    shape, oshape = _route_shape(ref), _route_shape(out)
    if shape is None or oshape is None:
        return None
    if shape != oshape:
        return f"shape {oshape} against {shape}"
    step = max(1, -(-math.prod(shape) // _CHECK_SAMPLES))
    r, o = _route_value(ref, step), _route_value(out, step)
    finite = torch.isfinite(r)
    if bool((finite & ~torch.isfinite(o)).any()):
        return "NaN / Inf where the incumbent is finite"
    r, o = r[finite], o[finite]
    if not r.any():  # a zero output (x = 0): it must stay zero
        return None if not o.any() else "nonzero where the incumbent is zero"
    db = sqnr(r, o)
    return None if db >= ROUTE_CHECK_DB else f"SQNR {db:.1f} dB against the incumbent"


def _checked(kind: str, candidates: dict) -> tuple[dict, list]:
    """Each candidate's first call (it tunes its configs there); those whose output disagrees with the first
    candidate's (route_disagrees) left out. Returns the candidates kept and [(name, why)] for those left out."""
    names = list(candidates)
    ref = candidates[names[0]]()
    refv = ref.clone() if isinstance(ref, torch.Tensor) else ref  # (a later candidate may reuse its buffers)
    kept, refused = {names[0]: candidates[names[0]]}, []
    for n in names[1:]:
        why = route_disagrees(refv, candidates[n]()) if ROUTE_CHECK_DB > float("-inf") else None
        if why is None:
            kept[n] = candidates[n]
        else:
            refused.append((n, why))
            warnings.warn(f"{kind}: the {n} route is left out for this shape: {why}", stacklevel=4)
    return kept, refused


def measure_route(kind: str, key, candidates: dict, untimed: str | None = None, graph: bool = False):
    """The name of the fastest of ``candidates`` {name: fn} for a shape, timed interleaved, best of 3 rounds
    each (one do_bench per candidate proved noisy: a 68 µs path once measured 103); another candidate must
    beat the first (the incumbent) by 3%. With FUSED_TUNE=0 or under the interpreter: ``untimed`` (default:
    the first). ``graph``: a pair (the fastest per eager call, the fastest replayed from a CUDA graph, i.e.
    GPU time alone). The timings and the picks are kept in fused.kernels.tuning (bench.json shows them).
    Candidates whose graph replay takes over LONG_ROUTE_US are timed sustained (see there)."""
    from fused.kernels import INTERPRET, tuning

    names = list(candidates)

    def pick(best):
        route = names[0]
        for n in names[1:]:
            if best[n] < 0.97 * best[route] and (route == names[0] or best[n] < best[route]):
                route = n
        return route

    if INTERPRET or os.environ.get("FUSED_TUNE") == "0":
        route = groute = untimed or names[0]
    else:
        from triton.testing import do_bench

        saved = Counter(stats)  # the timing runs are not calls of the model: keep them out of `stats`
        candidates, refused = _checked(kind, candidates)  # each tunes its own configs first
        names = list(candidates)
        graphs = {n: _graph_replay(fn) for n, fn in candidates.items()} if graph else {}
        best = dict.fromkeys(names, float("inf"))
        gbest = dict.fromkeys(names, float("inf"))
        long = _sustained(graphs)
        rep = ROUTE_REP_MS if long else 20
        for _ in range(3):
            for n, fn in candidates.items():
                if graphs.get(n) is not None:
                    gbest[n] = min(gbest[n], do_bench(graphs[n].replay, warmup=5, rep=rep, return_mode="median"))
                    if long:  # host time is noise at this length: the eager pick is the graph pick
                        best[n] = gbest[n]
                        continue
                best[n] = min(best[n], do_bench(fn, warmup=5, rep=rep, return_mode="median"))
        del graphs
        stats.clear()
        stats.update(saved)
        for n, why in refused:
            stats[("route refused", f"{kind} {n}")] += 1
        if refused:
            route_refusals[(kind,) + tuple(key)] = refused
        route, groute = pick(best), pick(gbest)
        tuning.timings[(kind,) + key] = [(round(best[n] * 1e3, 2), n) for n in names]
        if graph:
            tuning.timings[(kind + "_graph",) + key] = [(round(gbest[n] * 1e3, 2), n) for n in names]
    tuning.picks[(kind,) + key] = {"route": route}
    if graph:
        tuning.picks[(kind + "_graph",) + key] = {"route": groute}
        return route, groute
    return route


def _route(key, one_launch, per_layer) -> str:
    """"triton:decode_block" or "per_layer" for a block shape (see measure_route: one launch must win by 3%;
    untimed, it is taken). Decided on GPU time (CUDA-graph replays), for eager calls too: those are replayed
    (fused.dispatch.eager) at a host cost below these blocks' GPU time, while the timing's own eager calls of
    the two launches run the Python path (H200, eleventh session: 108.7 µs eager vs 66.9 µs in a graph, which
    picked the one-launch kernel at 72.5 µs)."""
    pick = measure_route("mlp_block_route", key, {"two launches": per_layer, "one launch": one_launch},
                         untimed="one launch", graph=True)[1]
    return "triton:decode_block" if pick == "one launch" else "per_layer"


# The first layer's route of a W8A8 block decided on the whole block's time, from BLOCK_ROUTE_MIN_M (0: off). Each
# layer's route is timed alone on its shape's first call (the incumbent keeps it unless another wins by 3%), but the
# block is what runs. H200, twenty-sixth session (2026-12-03), fp8 W8A8 Llama block at M=8192: the gated layer's
# route timings were Triton 1700 / cuBLAS 1718 µs (graph), so Triton stayed, and the block took 2696 µs against 2355
# for the two layers' timings added. With it on, a W8A8 block's first call of a shape at M >= BLOCK_ROUTE_MIN_M times
# the first layer's route candidates again as whole blocks (eager calls and CUDA graphs; the down layer on its own
# pick), the layer's own graph pick as the incumbent, and keeps the block's picks for that shape. Measured (H200,
# twenty-seventh session, `bash .ci/h200_next.sh routeab`): with each first-layer route forced, alternating in one
# process, fp8 M=8192 blocks took Triton 2547 / 2651 / 2684 µs, cuBLAS 2434 / 2433 / 2437 (M=1024: 316-333 vs
# 323-341, even). The bench rows do not separate it: with it off this time the layer timing took cuBLAS too (1644
# vs 1721), the same graph routes as with it on, and the blocks took 2671 (off) and 2436 (on), a spread between
# processes that int8 shows as well (2601 / 2682, Triton in both runs). What it buys is that a near tie of the layer
# timings (as in the twenty-sixth session) no longer decides: the block timing kept cuBLAS by 2437 vs 2568; int8 kept
# Triton (2399 vs 3613). On from M=1025; the cost is one block timing per route on a shape's first call.
BLOCK_ROUTE_MIN_M = 1025
_block_first_routes: dict = {}  # block key -> the first layer's (eager, graph) picks, once timed as whole blocks


def _block_first_layer_route(bkey, hkey, per_layer) -> None:
    """Runs ``per_layer`` (a W8A8 block's two layers, h handed over) once, then, if its first layer timed more than
    one route (key ``hkey``), times the block once per route (each forced through _dense_routes[hkey]; the layer's
    own graph pick as the incumbent) and writes the block's (eager, graph) picks to _dense_routes[hkey]."""
    from fused.kernels import tuning

    if bkey in _block_first_routes:
        return
    per_layer()  # the layers' own route timings first: they fill _dense_routes[hkey]
    own = _dense_routes.get(hkey)
    names = [n for _, n in tuning.timings.get(("dense_w8a8_route",) + hkey, [])]  # the routes that ran
    if own is None or len(names) < 2:
        _block_first_routes[bkey] = own
        return

    def forced(name):
        def run():
            _dense_routes[hkey] = (name, name)
            try:
                return per_layer()
            finally:
                _dense_routes[hkey] = own
        return run

    order = [own[1]] + [n for n in names if n != own[1]]
    _dense_routes[hkey] = _block_first_routes[bkey] = measure_route(
        "w8a8_block_first_layer", bkey, {n: forced(n) for n in order}, untimed=own[1], graph=True)


def mlp_block(x, w1, s1, b1, w2, s2, b2, act="silu", gated=True, dynamic=False, smooth1=None, smooth2=None):
    """A whole MLP block, y = down(h): gated h = act(x·W_gᵀ + b_g) ⊙ (x·W_uᵀ + b_u) with w1 [2H, K] stacked
    (FusedGatedLinear's layout), or plain h = act(x·W_1ᵀ + b_1) with w1 [H, K]; then y = h·W_2ᵀ + b_2,
    w2 [D, H]. Both layers dense 8-bit with fp32 per-row scales; ``dynamic``: W8A8 config (used by the
    per-layer path; the decode block is weight-only, as the GEMV); ``smooth1`` [K] / ``smooth2`` [H]:
    the layers' smooth_inv (None: not smoothed). At M <= DECODE_BLOCK_MAX_M on CUDA: one decode_block
    launch (deterministic two-stage under torch.use_deterministic_algorithms); otherwise the two layers
    through ``gated``/``linear``. h is rounded to x's dtype on both paths."""
    op = "mlp_block"
    _check(x, w1, op)
    for name, w in (("w1", w1), ("w2", w2)):
        if w.dtype not in (torch.int8, torch.float8_e4m3fn):
            raise TypeError(f"{op}: {name} must be int8 or float8_e4m3fn (dense 8-bit), got {w.dtype}")
    H = w1.shape[0] // 2 if gated else w1.shape[0]
    if gated and w1.shape[0] % 2:
        raise ValueError(f"{op}: the stacked gate/up weight needs an even row count, got {w1.shape[0]}")
    if w2.device != x.device:
        raise RuntimeError(f"{op}: device mismatch: activations on {x.device}, down weight on {w2.device}")
    if w2.shape[1] != H:
        raise ValueError(f"{op}: the down weight expects {w2.shape[1]} features, the first layer gives {H}")
    x2 = x.reshape(-1, x.shape[-1])
    M = x2.shape[0]
    # both layers W8A8 on 8-bit weights of one format (_check below), h not smoothed
    handoff = (HANDOFF and dynamic and smooth2 is None and M >= HANDOFF_MIN_M and w1.dtype == w2.dtype
               and (x.is_cuda or _forced == "triton") and _forced != "reference")

    def per_layer():
        if handoff:  # see HANDOFF
            x1 = reference.smooth_input(x, smooth1).reshape(-1, x.shape[-1])
            y = _handoff_block(x1, w1, s1, b1, act, gated, w2, s2, b2)
            return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])
        h = _run("gated" if gated else "linear", reference.smooth_input(x, smooth1), w1, s1, b1, act, dynamic)
        return _run("linear", reference.smooth_input(h, smooth2), w2, s2, b2, "none", dynamic)

    def one_launch():
        y = _triton_kernels().decode_block(x2, w1, s1, b1, w2, s2, b2, act, gated, smooth1, smooth2)
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])

    if x.is_cuda and _forced is None:  # the eager hot path: plan()'s choice without its strings
        path = "per_layer"
        if M <= DECODE_BLOCK_MAX_M:
            # measured, not assumed: the first call of a shape times one launch against the two-launch
            # path (each with its own tuned config) and keeps the faster (`tuning.picks` shows it)
            key = (m_bucket(M), x2.shape[1], w1.shape[0], w2.shape[0], gated, dynamic, w1.dtype, x.dtype,
                   smooth1 is not None)
            path = _block_routes.get(key)
            if path is None:
                path = _block_routes[key] = _route(key, one_launch, per_layer)
        elif handoff and BLOCK_ROUTE_MIN_M and M >= BLOCK_ROUTE_MIN_M and not torch.cuda.is_current_stream_capturing():
            hkey = _h_out_key("gated" if gated else "linear", M, w1, x.dtype, b1, act)
            _block_first_layer_route(hkey + (tuple(w2.shape), b2 is None), hkey, per_layer)
    else:
        path = plan(op, _fmt(w1), dynamic, x.device, M)[0]
    stats[(op, path)] += 1
    return per_layer() if path == "per_layer" else one_launch()
