"""CPU kernels: pure torch / aten, no Triton. `fused.dispatch` decides which path runs; this file runs it.

Paths (names as `dispatch.plan` and `explain` print them):

  cpu:int8pack        int8 weight-only, bf16 activations, small M: ``torch._weight_int8pack_mm`` reads the
                      int8 weight directly (AVX512/AVX2 kernel, dequantizes in registers), per-row scales
                      in bf16.
  cpu:int8_dequant_mm int8 weight-only otherwise: the weight is dequantized one N-tile (4 MiB) at a time
                      into the compute dtype (one reused buffer) and multiplied with ``F.linear``; the
                      scale goes on the output. The full-precision weight never exists at once.
  cpu:split_int_mm    int8 weight-only, bf16 activations, M up to SPLIT_MAX_M where int8pack does not run: each
                      token as two int8 planes (`lowbit.split_activation`, x ≈ s·(256·hi + lo), 15 bits per token),
                      both planes stacked as rows of one ``torch._int_mm`` (the weight read once), combined in fp32
                      (the GPU's W8A16 path at 17 <= M <= 1023 computes the same way).
  cpu:int_mm          int8 W8A8: per-token int8 activations (`lowbit.quantize_activation`, as the
                      reference), ``torch._int_mm`` (exact int32 accumulation), scales/bias/activation in fp32.
  cpu:qlinear         int8 W8A8 as cpu:int_mm, on oneDNN's int8 matmul (``torch.ops.onednn.qlinear_pointwise``)
                      with the weight reordered once into oneDNN's blocked layout (`packed_cached`: a copy kept
                      beside the weight, opt-in; or `pack_weight`'s, the weight's only data: fused.pack_for_cpu);
                      the activations go in as uint8 q + 128 with zero point 128, so the int32 sums are _int_mm's.
  cpu:split_qlinear   int8 weight-only: cpu:split_int_mm's two planes on the reordered weight (both planes as rows
                      of one call); bf16 activations, and on a packed weight any.
  cpu:fp8_dequant_mm  float8 e4m3 (weight-only and W8A8): no CPU fp8 GEMM is fast (``torch._scaled_mm``
                      on the CPU is ~100x slower than int8), so N-tiles of the fp8 weight are converted
                      exactly to bf16 by integer bit arithmetic (3x faster than ``.to(bfloat16)``) and
                      multiplied with ``F.linear``. Computed from the fp8 data on every call: no cached
                      dequantized copy, so memory stays 1 byte/weight, at the cost of speed.
  cpu:bf16_mm         bf16 weights (2:4 bf16 values, FusedBF16MLP): ``F.linear`` per N-tile.
  cpu:s24+<path>      a 2:4 weight (values + 2-bit positions, sparsity.pack_24): each N-tile of rows is
                      expanded exactly to its dense 8-/16-bit rows (sparsity.expand_24: integer shifts),
                      then runs <path> above. The dense weight never exists at once (one tile, ~2M
                      weights, plus its expansion temporaries), so a 2:4 layer keeps its 0.625 B/weight;
                      the expansion costs ~0.2-0.3 ns per weight per call on a 2-core AVX512 x86 (7-10 ms
                      for a TinyLlama MLP block): on the CPU 2:4 saves memory, not time.

Compute dtype: bf16 activations compute in bf16 (fp32 accumulation inside the GEMMs); fp32 in fp32;
fp16 is upcast to fp32 (exact) because the CPU has no fast fp16 GEMM here, and the output cast back. The fp32
GEMMs (``F.linear`` above) run on oneDNN, not MKL (`_linear`). The split paths build their planes with
`_split_planes` (the same numbers as `lowbit.split_activation`, cheaper).

Every path ends with the same epilogue, in place on one tile of output columns at a time while it is in cache
(`_epilogue`): scales, + bias, activation, and for the gated op act(gate) * up (the gate and up tiles side by
side). At large M the GEMMs run per tile of weight rows too (TILE_MIN_M). TinyLlama block at M=1024 on a 2-core
AVX512 x86, whole-tensor epilogue -> tiles (one process, alternating, best ms): int8 W8A16 106.7 -> 92.9, int8
W8A8 73.3 -> 55.2; M <= 256 within +-3% (small products stay whole: WHOLE_ELEMS).

Pre-packing: ``_weight_int8pack_mm`` and ``_int_mm`` take the [N, K] int8 buffer as stored (no repack, no copy), but
``_int_mm`` reorders it (and sums its columns for the zero-point compensation) inside every call. The qlinear paths
reorder it once (`packed_cached`, ~2 ns per weight) and keep that copy: 1 byte per weight more, so an int8 layer on
the CPU holds 2 B/weight (as bf16) for 1.5-7x the speed of _int_mm at 2 <= M <= 64. Opt-in (ONEDNN,
FUSED_CPU_ONEDNN=1): by default int8 keeps 1 B/weight on the plain-weight kernels. Or, at 1 B/weight, the reordered
weight instead of the plain one: `pack_weight` (fused.pack_for_cpu on a model). Derived data (that copy,
int8pack's scales in bf16) is made once per tensor and invalidated when the buffer is modified in place
(``load_state_dict``); its bytes are reported by `cached_bytes` and counted in `fused.explain`. Inference tensors
(no version counter) and 2:4 tiles (expanded per call) get no oneDNN copy.

Threads: every kernel here is an aten op parallelised with at::parallel_for, so torch.get_num_threads()
(torch.set_num_threads) applies; nothing here starts threads of its own.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from fused import cpu_fbgemm, cpu_isa
from lowbit import quantize_activation
from lowbit.quant import MIN_SCALE, SPLIT_QMAX
from sparsity.packing import expand_24

DENSE_PATHS = ("cpu:int8pack", "cpu:split_int_mm", "cpu:split_qlinear", "cpu:int8_dequant_mm", "cpu:int_mm",
               "cpu:qlinear", "cpu:fp8_dequant_mm", "cpu:bf16_mm") + cpu_fbgemm.PATHS
# packed-weight paths have no 2:4 form (a 2:4 tile is expanded per call; its packed copy would be remade per call)
PATHS = DENSE_PATHS + tuple("cpu:s24+" + p.removeprefix("cpu:") for p in DENSE_PATHS
                            if "qlinear" not in p and "fbgemm" not in p)

# torch._weight_int8pack_mm's vectorised kernel works on blocks of 4 rows of x and re-dequantizes the
# weight block for each, so its cost grows by a pass over the weight per 4 rows; the tiled dequantize +
# GEMM path costs one conversion of the weight plus a GEMM. TinyLlama block (d 2048, h 5632), 2-core
# AVX512 x86, 2 threads, ms (int8pack / tiled): M=4 2.5/4.9, M=8 5.0/6.9, M=12 7.0/7.6, M=16 9.5/8.4;
# examples/cpu_edge_bench.py times the whole block. Thirty-ninth session, the split planes through int16
# (`_split_planes`): the block, one process, int8pack / cpu:split_int_mm, ms: M=8 4.73-4.85 / 4.97-5.09, 9 6.66 / 5.08,
# 10 6.57 / 5.36, 12 6.75-6.81 / 5.79-5.80, so int8pack now stops at 8 (its third 4-row pass starts at 9).
INT8PACK_MAX_M = 8
# ... unless the weight stays in this host's L2 (2 x 1 MiB): then the extra passes are cheap and int8pack wins up to
# INT8PACK_CACHED_MAX_M. The demo model's blocks (d 512, h 1408: 1.4 / 0.7 MB per layer), one process, ms,
# cpu:split_int_mm / int8pack: M=8 3.86 / 2.14, 16 4.48 / 3.40, 24 5.30 / 4.66, 32 7.37 / 6.32, 48 10.07 / 8.74; at
# d 1024 (5.8 / 2.9 MB) int8pack loses from M=16 (9.99 / 12.35), as on TinyLlama's 23 / 11.5 MB.
INT8PACK_CACHED_BYTES = 2 << 20
# ... and past it such a weight takes cpu:int8_dequant_mm, not two int8 planes (fortieth session, the same machine,
# one layer alone, median ms, int8pack / dequant + bf16 GEMM / split planes: [2816, 512] gated M=16 0.368 / 0.366 /
# 0.373, 24 0.523 / 0.401 / 0.454, 48 1.021 / 0.621 / 0.704; [512, 1408] M=24 0.238 / 0.217 / 0.310, 48 0.457 /
# 0.296 / 0.422; [1024, 2048] M=16 0.441 / 0.426 / 0.555, 48 1.306 / 0.735 / 0.904; a whole d 512 block:
# examples/results/cpu/int8pack_rule_2026-12-05.md): int8pack's time grows with M as a compute loop, and the planes'
# two int8 products cost more than one bf16 GEMM on a weight in cache. From 4 MB ([4096, 1024] gated: 12 <= M <= 32
# 0.655-1.177 against 0.718-1.249 for the next best) the planes win again, as on TinyLlama.
INT8PACK_CACHED_MAX_M = 16
# ... and a weight of at least INT8PACK_LARGE_BYTES stops at INT8PACK_LARGE_MAX_M, int8pack's first 4-row pass: since
# the planes' _int_mm takes such a weight as its first operand (INT_MM_SWAP), or even without that on wide K, the
# planes win from M=5 (forty-third session, blocks, one process, ms, int8pack to 8 / to 1 (the planes) / bf16 eager:
# TinyLlama (23 / 11.5 MB) M=4 2.54 / 3.59 / 3.21, 5 4.17 / 3.91 / 3.45, 6 4.20 / 3.89 / 3.51, 8 4.77 / 3.94 / 3.72;
# d 1536 h 8960 (27.5 / 13.8 MB, no K a multiple of 1024) M=4 3.09 / 3.62, 5 5.36 / 3.87, 8 6.39 / 4.56 / 4.60; but
# d 1024 h 2816 (5.8 / 2.9 MB) M=5 1.03 / 1.11, 8 1.04 / 1.17: int8pack to 8 there).
INT8PACK_LARGE_BYTES = 8 << 20
INT8PACK_LARGE_MAX_M = 4
# Weight-only int8 with bf16 activations above INT8PACK_MAX_M (or where int8pack cannot run) up to SPLIT_MAX_M:
# split activations on the int8 GEMM (cpu:split_int_mm) instead of the per-tile dequantize + bf16 GEMM. TinyLlama
# block (FusedInt8MLP), 2-core AVX512 x86, 2 threads, one process, the two paths alternated 4 times, best ms
# (twenty-sixth session), dequant -> split (bf16 eager): M=16 5.56 -> 3.87 (3.68), 24 6.55 -> 4.88 (4.43), 32 7.28
# -> 5.61 (5.06), 48 8.89 -> 7.77 (6.19), 64 8.55 -> 9.60 (6.74). Two planes double the int8 GEMM's work, so past
# M≈56 the dequantized bf16 GEMM wins. `FUSED_CPU_SPLIT_MAX_M=0`: off.
SPLIT_MAX_M = int(os.environ.get("FUSED_CPU_SPLIT_MAX_M", "48"))
# oneDNN's int8 matmul on the weight reordered once (cpu:qlinear, cpu:split_qlinear) instead of torch._int_mm, which
# reorders the plain weight on every call. TinyLlama gate/up (11264 x 2048), 2-core AVX512-VNNI x86, 2 threads, ms,
# _int_mm / kept oneDNN copy, int32 sums bit-equal: M=1 0.28 / 0.26, 4 2.25 / 0.31, 16 2.88 / 0.96, 32 3.66 / 1.76,
# 64 5.27 / 3.46, 128 8.54 / 6.84; bf16 F.linear 2.49 / 2.10 / 3.38 / 5.11 / 8.36 / 15.03 (M=1 / 4 / 16 / 32 / 64 /
# 128; int8pack 0.60 at M=1, 5.94 at 16; one layer alone, so its weight partly in the 32 MiB L3). x86 only (the one
# kind of CPU it is measured on).
# Opt-in (FUSED_CPU_ONEDNN=1, or fused.cpu.ONEDNN = True at run time) because of the memory: the kept copy makes an
# int8 layer 2 B/weight on the CPU, as much as bf16, and the default keeps int8's 1 B/weight.
ONEDNN = os.environ.get("FUSED_CPU_ONEDNN", "0") == "1"
# ... from this M: at M=1 the plain-weight kernels are as fast (TinyLlama block, same process, ms, int8pack / split
# on the kept copy 1.72 / 1.64, _int_mm / qlinear 1.34 / 1.37; at M=2 W8A8 3.33 / 1.41), so decode alone makes no copy
ONEDNN_MIN_M = 2
# ... and only for a weight of at least this many bytes (fused.pack_for_cpu leaves smaller ones plain too): oneDNN's
# int8 matmul costs ~20 µs per call before any work here (a 64 x 64 weight at M=1: 20.4 µs, _int_mm 2.5), and a weight
# that stays in L2 makes _int_mm's per-call reorder cheap. One gated layer, 2 threads, µs, plain / oneDNN copy (W8A8
# _int_mm / qlinear; W8A16 its default path / split_qlinear), forty-third session: [2816, 512] (1.4 MiB) M=1 87 / 155,
# 2 122 / 160, 16 203 / 229, 64 537 / 534, 256 1938 / 1886; W8A16 64 / 218 at M=1, 366 / 354 at 16, 801 / 849 at 64;
# [512, 1408] linear M=24 199 / 248, 256 950 / 1130; [4096, 512] (2 MiB) M=24 406 / 356, 256 3204 / 2060, W8A16 M=24
# 668 / 559; [5632, 1024] M=1 126 / 199, 2 333 / 206, 16 553 / 415. Blocks of the demo's size (d 512) were slower
# packed at every M (W8A8 M=1 / 16 / 64 0.348 / 0.459 / 0.790 ms against 0.216 / 0.412 / 0.736).
ONEDNN_MIN_BYTES = 2 << 20
# ... except for W8A8 where K is a multiple of this (and at least twice it): _int_mm's per-call reorder reads such a
# weight in power-of-two strides, which collide in the caches. Raw ops at M = 2 / 16, µs, _int_mm / qlinear: [768,
# 2048] 158 / 41, 203 / 91; [512, 4096] 404 / 47; [512, 3072] 79 / 41; against [768, 2304] 42 / 40, [640, 2560] 45 / 42,
# [2816, 512] 115 / 152 (forty-third session). W8A16 keeps the size rule: its small-M path (int8pack) does no reorder.
ONEDNN_POW2_K = 1024
# Up to this M, W8A16 with bf16 activations runs cpu:split_qlinear (2M rows of 8-bit work); above, as before.
SPLIT_QLINEAR_MAX_M = int(os.environ.get("FUSED_CPU_SPLIT_QLINEAR_MAX_M", "128"))
# oneDNN sums u8 * s8 products (u = q + 128 <= 255) in int32 before subtracting the zero point's share: exact while
# 255 * 127 * K < 2^31
ONEDNN_MAX_K = (2**31 - 1) // (255 * 127)
# torch._int_mm reorders its second operand into oneDNN's layout on every call. Given the plain [N, K] weight there, a K
# that is a multiple of ONEDNN_POW2_K (at least twice it) makes that reorder read in power-of-two strides, which collide
# in the caches; as the first operand the weight is read as stored and the few token rows are reordered instead:
# y = (W · qᵀ)ᵀ, the same int32 sums. Its kernel runs row counts that are multiples of 8 fastest (12 rows as slow as
# 32), so the token rows are padded with zero rows to one. Raw op, TinyLlama gate/up [11264, 2048], 2 threads, µs, rows:
# plain / swapped (unpadded): 2 2188 / 1455, 4 2356 / 1343, 8 2616 / 1301, 12 2658 / 2147, 16 2854 / 1275, 32 3677 /
# 2226, 64 5344 / 4073, 128 8541 / 7526, 256 25198 / 14524; [768, 2048] 16 204 / 91; but [2048, 5632] 4 319 / 585, 16
# 642 / 604 and [5632, 1024] 4 270 / 303: other K keep the plain order (forty-third session). Off:
# FUSED_CPU_INT_MM_SWAP=0. Up to INT_MM_SWAP_MAX_ROWS token rows: the TinyLlama W8A8 block, plain / swapped, ms, M=256
# 35.3 / 31.1, 300 30.5 / 31.2, 1024 (per weight tile) 118.1 / 126.3.
INT_MM_SWAP = os.environ.get("FUSED_CPU_INT_MM_SWAP", "1") != "0"
INT_MM_SWAP_MAX_ROWS = 256
# From this many rows the int8 GEMMs (cpu:int_mm, cpu:split_int_mm) run per tile of weight rows, each tile's scales,
# bias and activation applied while it is in cache; below, one GEMM over every column (see `_columns`).
TILE_MIN_M = 512
# Output elements per epilogue tile where the product exists whole (few rows): a few large tiles, since each torch
# op costs ~5 µs of host time here (M=1, 1024-column tiles: int8 W8A8 block 0.73 -> 1.1 ms).
EPILOGUE_ELEMS = 1 << 18
# Products of at most this many elements are computed whole and finished in place (as before the tiles): below
# it the tiles' extra torch ops cost more host time than the cache saves (M=1 int8 W8A8 block 0.38 -> 0.42 ms).
WHOLE_ELEMS = 1 << 20
# The bf16 AVX512 kernel loads 16 bf16 values of x (and 16 int8 weights) per step with aligned loads and
# no tail handling: K % 16 != 0 reads past the row (garbage or segfault, torch 2.13), as does an x or
# weight whose data pointer is not 32-byte aligned.
INT8PACK_K_MULTIPLE = 16
_ALIGN = 64
# Bytes of one dequantized weight tile: the temporary memory of the tiled paths. Larger tiles make
# fewer, larger GEMMs: TinyLlama block at M=64, 2 threads: 1 MiB 17.5 ms, 4 MiB 14.4 ms, 16 MiB 14.8 ms.
TILE_BYTES = 4 << 20

# Elements of x per pass of `_split_planes` (its fp32 temporary, 1 MiB, stays in this host's 1 MiB L2 per core). bf16
# x, uint8 planes, 2 threads, best of 18+ calls, ms, lowbit.split_activation + torch.cat + xor / chunks of 128K / 256K
# / 512K / the whole x: 608 x 1536 6.86 / 0.76 / 0.57 / 2.08 / 3.64; 128 x 5632 5.17 / 0.59 / 0.44 / 0.40 / 2.83;
# 1024 x 5632 50.9 / 4.8 / 3.7 / 3.1 / 24.1 (one chunk up to 16 x 2048: 0.18 / 0.10)
PLANE_CHUNK = 1 << 18

# Weights per tile of the 2:4 expansion, whatever the compute dtype: TinyLlama gate/up (11264 x 2048), int8,
# 2 threads, ms per expanded weight: 128 rows 11.4, 512 5.3, 1024 4.2, 2048 6.3 (temporaries past L2/L3).
EXPAND_TILE_WEIGHTS = 2 << 20

# tensor -> (version, {dtype: cast copy})
_cache: WeakIdKeyDictionary = WeakIdKeyDictionary()
# int8 weight -> (version, oneDNN's reordered copy, unit scales, zero points)
_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()
# int8 weight -> (version, fbgemm's packed copy)
_fbgemm: WeakIdKeyDictionary = WeakIdKeyDictionary()
# pack_weight's stand-in -> (oneDNN's copy, unit scales, zero points) or FbgemmWeight: the weight's only data
# (clear_cache keeps it)
_only: WeakIdKeyDictionary = WeakIdKeyDictionary()


class FbgemmWeight(NamedTuple):
    """fbgemm's packed copy of an int8 weight (cpu_isa.fbgemm_prepack), as a `pack_weight` stand-in's data."""
    packed: object


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a call with activations of ``dtype`` computes in on the CPU."""
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float32


# From this M a dequantized bf16 GEMM runs in fp32 where bf16 GEMMs are slow (`cpu_isa.bf16_gemm_fast`): at M=1 the
# weight read dominates and bf16 reads half the bytes. TinyLlama block on AVX2, dequant + GEMM, ms, bf16 / fp32:
# M=1 2.9 / 7.1, 8 34.8 / 16.0, 64 60.2 (fp32 from 16) / 59.2
FP32_DEQUANT_MIN_M = 2


def dequant_dtype(dtype: torch.dtype, m: int) -> torch.dtype:
    """The dtype the dequantized-weight GEMMs (cpu:int8_dequant_mm, cpu:fp8_dequant_mm) compute in for activations of
    ``dtype`` at M=m: the compute dtype, but fp32 for bf16 at M >= FP32_DEQUANT_MIN_M where bf16 GEMMs are slow."""
    cdt = compute_dtype(dtype)
    if cdt == torch.bfloat16 and m >= FP32_DEQUANT_MIN_M and not cpu_isa.bf16_gemm_fast():
        return torch.float32
    return cdt


def aligned(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.data_ptr() % _ALIGN == 0


def in_l2(n: int | None, k: int | None) -> bool:
    """Whether an [n, k] int8 weight stays in this host's L2 between calls (INT8PACK_CACHED_BYTES; unknown: no)."""
    return n is not None and k is not None and n * k <= INT8PACK_CACHED_BYTES


def int8pack_max_m(n: int | None, k: int | None) -> int:
    """The largest M that takes cpu:int8pack for an [n, k] int8 weight (size unknown: as for a large one)."""
    if in_l2(n, k):
        return max(INT8PACK_MAX_M, INT8PACK_CACHED_MAX_M)
    large = n is not None and k is not None and n * k >= INT8PACK_LARGE_BYTES
    return min(INT8PACK_MAX_M, INT8PACK_LARGE_MAX_M) if large else INT8PACK_MAX_M


def int8pack_ok(k: int, qweight: torch.Tensor | None = None) -> bool:
    """Whether ``torch._weight_int8pack_mm`` can run this weight (see INT8PACK_K_MULTIPLE)."""
    return k % INT8PACK_K_MULTIPLE == 0 and (qweight is None or aligned(qweight))


def cast_cached(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``t.to(dtype)``, computed once per (tensor, dtype) and reused until ``t`` is modified in place."""
    if t is None or t.dtype == dtype:
        return t
    if type(t) is not torch.Tensor or t.is_inference():
        # fake/functional tensors while tracing, or inference tensors (no version counter): no cache
        return t.to(dtype)
    entry = _cache.get(t)
    if entry is None or entry[0] != t._version:
        entry = (t._version, {})
        _cache[t] = entry
    out = entry[1].get(dtype)
    if out is None:
        out = entry[1][dtype] = t.to(dtype).contiguous()
    return out


def cacheable(t: torch.Tensor | None) -> bool:
    """Whether a copy derived from ``t`` can be kept and invalidated with it: a plain tensor with a version counter
    (not an inference tensor, not a fake or functional one while tracing)."""
    return type(t) is torch.Tensor and not t.is_inference()


def onednn_ok() -> bool:
    """oneDNN's int8 matmul ops are in this torch build, the CPU is x86 (where they are measured), and their u8·s8
    sums are exact here (not on x86 without VNNI: `cpu_isa.onednn_u8_exact`)."""
    return cpu_isa.onednn_u8_exact()


def fbgemm_here() -> bool:
    """Whether the int8 CPU paths run on fbgemm here (`cpu_isa.int8_backend`)."""
    return cpu_isa.int8_backend() == "fbgemm"


def fbgemm_cached(w: torch.Tensor):
    """fbgemm's packed copy of the int8 [N, K] weight, made once per tensor and remade after it is modified in place;
    a `pack_weight` stand-in's own copy."""
    only = _only.get(w) if type(w) is torch.Tensor else None
    if only is not None:
        if not isinstance(only, FbgemmWeight):
            raise RuntimeError("this weight is packed for oneDNN, not fbgemm")
        return only.packed
    entry = _fbgemm.get(w)
    if entry is None or entry[0] != w._version:
        entry = _fbgemm[w] = (w._version, cpu_isa.fbgemm_prepack(w))
    return entry[1]


def onednn_pays(n: int | None, k: int | None, dynamic: bool = True) -> bool:
    """Whether oneDNN's int8 matmul on a reordered [n, k] int8 weight pays here, for W8A8 (``dynamic``) or W8A16
    (ONEDNN_MIN_BYTES, ONEDNN_POW2_K; size unknown: yes)."""
    if n is None or k is None or n * k >= ONEDNN_MIN_BYTES:
        return True
    return dynamic and pow2_k(k)


def onednn_route(k: int | None, weight_cacheable: bool = True, n: int | None = None,
                 dynamic: bool = True) -> str | None:
    """Why the qlinear paths do not run a dense int8 [n, k] weight (W8A8 if ``dynamic``), or None when they do."""
    if not onednn_pays(n, k, dynamic):
        return (f"a weight under {ONEDNN_MIN_BYTES >> 20} MiB stays in L2, where the plain-weight kernels are as fast "
                "or faster (oneDNN's int8 matmul costs ~20 µs per call before any work)")
    if not ONEDNN:
        return "off"
    if not onednn_ok():
        return ("no exact oneDNN int8 matmul here (x86 torch with mkldnn, and VNNI: without it its u8·s8 pair sums "
                "saturate)")
    if not weight_cacheable:
        return "weight is an inference tensor: no version counter to keep a reordered copy in step"
    if k is not None and k > ONEDNN_MAX_K:
        return f"K={k} > {ONEDNN_MAX_K}: oneDNN's uint8 sums could overflow int32"
    return None


def pack_weight(w: torch.Tensor) -> torch.Tensor:
    """oneDNN's reordered copy of the int8 [N, K] CPU weight ``w``, kept, and a stand-in for ``w`` in its place: an
    [N, K] int8 tensor with one byte of storage (expanded), so the layer holds 1 B/weight (the copy) instead of 2.
    The qlinear paths run on the copy at every M; other paths get the plain weight rebuilt for the call
    (`unpack_weight`). `fused.pack_for_cpu` swaps it into a model's layers; their state_dict, load_state_dict and
    device moves go through the plain weight."""
    if w.dtype != torch.int8 or w.dim() != 2 or w.device.type != "cpu":
        raise ValueError(f"pack_weight takes an int8 [N, K] CPU tensor, got {w.dtype} {tuple(w.shape)} on {w.device}")
    if fbgemm_here():  # x86 without VNNI: fbgemm's copy, run on 7-bit planes (fused.cpu_fbgemm)
        data = FbgemmWeight(cpu_isa.fbgemm_prepack(w))
    else:
        if not onednn_ok():
            raise RuntimeError(f"cannot pack int8 weights on this CPU: no exact int8 GEMM with a packed weight here "
                               f"({cpu_isa.summary()})")
        if w.shape[1] > ONEDNN_MAX_K:
            raise RuntimeError(f"cannot pack for oneDNN: K={w.shape[1]} > {ONEDNN_MAX_K} (its uint8 sums could "
                               "overflow int32)")
        data = _reorder(w)
    stand_in = torch.full((), -128, dtype=torch.int8).expand(w.shape)  # -128: never a quantized weight value
    _only[stand_in] = data
    return stand_in


def _reorder(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(oneDNN's reordered copy of the int8 [N, K] weight, unit weight scales [N], zero points [N])."""
    return (torch.ops.onednn.qlinear_prepack(w.contiguous(), None), *_unit_params(w.shape[0]))


@functools.lru_cache(maxsize=64)
def _unit_params(N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit weight scales and zero points [N] for qlinear_pointwise (read only), shared by the layers of one width."""
    return torch.ones(N), torch.zeros(N, dtype=torch.int64)


@functools.lru_cache(maxsize=64)
def _unit_bf16(N: int) -> torch.Tensor:
    """Unit bf16 scales [N] for _weight_int8pack_mm (read only)."""
    return torch.ones(N, dtype=torch.bfloat16)


def packed_only(w) -> bool:
    """Whether ``w`` is a stand-in from `pack_weight` (its data lives only in oneDNN's copy)."""
    return type(w) is torch.Tensor and w in _only


def unpack_weight(w: torch.Tensor) -> torch.Tensor:
    """The plain int8 [N, K] weight of a `pack_weight` stand-in (a new tensor), or ``w`` itself."""
    if not packed_only(w):
        return w
    data = _only[w]
    if isinstance(data, FbgemmWeight):
        return cpu_isa.fbgemm_unpack(data.packed)
    return data[0].to_dense().t().contiguous()


def packed_cached(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(oneDNN's reordered copy of the int8 [N, K] weight, unit weight scales [N], zero points [N]), made once per
    tensor and remade after it is modified in place; a `pack_weight` stand-in's own copy."""
    if packed_only(w):
        if isinstance(_only[w], FbgemmWeight):
            raise RuntimeError("this weight is packed for fbgemm, not oneDNN")
        return _only[w]
    entry = _packed.get(w)
    if entry is None or entry[0] != w._version:
        entry = _packed[w] = (w._version, *_reorder(w))
    return entry[1:]


def cached_bytes(*tensors: torch.Tensor | None) -> int:
    """Bytes held in the CPU caches for these tensors (what `explain` adds to a module's bytes): cast copies, and
    oneDNN's reordered weights, kept beside a weight or a `pack_weight` stand-in's (1 byte per weight)."""
    total = 0
    for t in tensors:
        entry = _cache.get(t) if t is not None else None
        if entry is not None and entry[0] == t._version:
            total += sum(c.numel() * c.element_size() for c in entry[1].values())
        kept = [] if t is None else [d.get(t) for d in (_packed, _fbgemm)]
        if any(e is not None and e[0] == t._version for e in kept) or packed_only(t):
            total += t.numel()  # the packed copy (oneDNN's unit scales and zero points are shared by a width's layers)
    return total


def clear_cache() -> None:
    _cache.clear()
    _packed.clear()
    _fbgemm.clear()


# ----------------------------------------------------------------------------------------------- kernels

def _aligned_rows(x2: torch.Tensor) -> torch.Tensor:
    x2 = x2.contiguous()
    return x2 if x2.data_ptr() % _ALIGN == 0 else x2.clone()  # a fresh allocation is 64-byte aligned


def _absmax_rows(x2: torch.Tensor, out: torch.Tensor, buf: torch.Tensor) -> None:
    """out [n, 1] (x2's dtype) = max |x| per row of x2 [n, K] (bf16 or fp32), NaN for a row with NaN: the max of the bit
    patterns with the sign bit cleared (they order as |x| does, NaN above Inf), an integer reduction. ``buf`` [n, K],
    the int view's dtype. 4x faster than abs + amax for bf16 at 608 x 1536 (1 thread), whose abs is a slow loop."""
    idt, mask = (torch.int16, 0x7FFF) if x2.dtype == torch.bfloat16 else (torch.int32, 0x7FFFFFFF)
    torch.amax(torch.bitwise_and(x2.view(idt), mask, out=buf), -1, keepdim=True, out=out.view(idt))


def _split_planes(x2: torch.Tensor, u8: bool) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """lowbit.split_activation(x2) (x2 bf16 or fp32) as the int8 GEMMs take it: ([2M, K] the hi rows then the lo rows,
    xs [M, 1] fp32, whether every token is finite), the same numbers, int8, or uint8 holding the plane + 128 (``u8``:
    oneDNN's input with zero point 128). Tokens with NaN/Inf get zero planes and a NaN scale (`_nonfinite_rows`
    recomputes them).

    Why not lowbit's: each of its ~20 ops makes a whole fp32 temporary, and its fp32 -> int8 / uint8 casts are slow
    loops here; here a chunk of rows at a time (PLANE_CHUNK) goes through reused buffers that stay in cache, with
    u = v + 128 as int16 (a fast cast): hi = u >> 8, lo = v - 256·hi = (u & 255) - 128, and for oneDNN hi + 128 =
    (u >> 8) ^ 128 and lo + 128 = u & 255 (the int16 -> uint8 cast keeps the low byte). No clamp to ±32639: |x| <=
    amax and x · RN(1 / RN(amax / 32639)) <= 32639 · (1 + 3·2⁻²⁴), which rounds to 32639. 1 thread, ms, lowbit's
    (+ cat, xor) / this: 608 x 384 bf16 ~0.55 / 0.20, 608 x 1536 ~2.2 / 0.69 (all-MiniLM-L6-v2's shapes).
    For W8A8's single plane this form's extra ops cost more than the cache saves (TinyLlama block M=1 0.92 / 1.13
    ms), so it keeps lowbit.quantize_activation."""
    M, K = x2.shape
    q = torch.empty(2 * M, K, dtype=torch.uint8 if u8 else torch.int8)
    rows = max(1, min(M, PLANE_CHUNK // max(K, 1)))
    chunks = [(i, min(i + rows, M)) for i in range(0, M, rows)]

    def part(t, i, j):  # rows i:j of a [M, ...] tensor, or of a [rows, ...] buffer from 0; one chunk (decode, small
        return t if rows == M else t[i:j] if t.shape[0] == M else t[:j - i]  # batches): no slices, ~2-5 µs each here

    ib = torch.empty(rows, K, dtype=torch.int16 if x2.dtype == torch.bfloat16 else torch.int32)
    amax = x2.new_empty(M, 1)
    for i, j in chunks:
        _absmax_rows(part(x2, i, j), part(amax, i, j), part(ib, i, j))
    amax = amax.float()
    finite = bool(amax.isfinite().all())
    xs = (amax / SPLIT_QMAX).clamp_min_(MIN_SCALE)  # IEEE division on the CPU, as lowbit's tensor divisor (tested)
    if not finite:
        xs.masked_fill_(~amax.isfinite(), float("nan"))
    r = xs.reciprocal()
    t, u, w = torch.empty(rows, K), torch.empty(rows, K, dtype=torch.int16), torch.empty(rows, K, dtype=torch.int16)
    for i, j in chunks:
        v = torch.mul(part(x2, i, j), part(r, i, j), out=part(t, i, j))
        if not finite:
            v.nan_to_num_(0.0)
        uc, wc = part(u, i, j), part(w, i, j)
        uc.copy_(v.round_().add_(128))  # ties to even, as lowbit; |v| <= 32639, so v + 128 fits int16 exactly
        torch.bitwise_right_shift(uc, 8, out=wc)
        q[i:j].copy_(wc.bitwise_xor_(128) if u8 else wc)
        torch.bitwise_and(uc, 255, out=wc)
        q[M + i:M + j].copy_(wc if u8 else wc.sub_(128))
    return q, xs, finite


def pow2_k(k: int) -> bool:
    """Whether K is a multiple of ONEDNN_POW2_K of at least twice it: the weights whose reorder inside torch._int_mm
    (and oneDNN's per-call copy) is slow (see INT_MM_SWAP)."""
    return k >= 2 * ONEDNN_POW2_K and k % ONEDNN_POW2_K == 0


def _int_mm(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """q [R, K] int8 · w [N, K]ᵀ -> int32 [R, N] (a view; exact), by torch._int_mm with the weight as its first operand
    where that is faster (INT_MM_SWAP)."""
    R, K = q.shape
    if not (INT_MM_SWAP and 2 <= R <= INT_MM_SWAP_MAX_ROWS and pow2_k(K)):
        return torch._int_mm(q, w.t())
    pad = -R % 8
    if pad:
        q = torch.cat([q, q.new_zeros(pad, K)])
    return torch._int_mm(w, q.t()).t()[:R]


def _fp8_tile_to_bf16(q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Exact float8 e4m3fn -> bf16 by bit arithmetic (e4m3 values are a subset of bf16's), into ``out``
    (int16, q's shape) when given.

    e4m3 bits s.eeee.mmm shifted into bf16's layout (s at bit 15, eeee.mmm at bits 10..4) give a bf16
    whose exponent field is eeee, i.e. the value times 2^-120 (bias 127 instead of 7); e4m3 subnormals
    land on bf16 subnormals with the same factor. Multiplying by 2^120 is exact. NaN is not handled:
    quantized weights are finite (quantize refuses NaN/Inf and clamps to ±448)."""
    t = q.view(torch.int8).to(torch.int16) if out is None else out.copy_(q.view(torch.int8))
    t.bitwise_left_shift_(4).bitwise_and_(-30736)  # 0x87F0: sign bit and the 7 exponent/mantissa bits
    return t.view(torch.bfloat16).mul_(2.0 ** 120)


class Packed24(NamedTuple):
    """A 2:4 weight as sparsity.pack_24 packs it (values [N, K/2], row-major meta [N, ceil(K/8)]): the
    kernels here take it where they take a dense weight and expand one tile of rows at a time."""
    values: torch.Tensor
    meta: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape[0], 2 * self.values.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype


def _tile_rows(w, K: int, itemsize: int) -> int:
    """Rows per N-tile: TILE_BYTES of the converted tile, and for a 2:4 weight at most
    EXPAND_TILE_WEIGHTS (its expansion's temporaries stay in cache)."""
    rows = TILE_BYTES // (K * itemsize)
    if isinstance(w, Packed24):
        rows = min(rows, EXPAND_TILE_WEIGHTS // max(K, 1))
        if w.meta.dim() == 3:  # tiled meta: whole 64-row blocks
            rows = max(64, rows // 64 * 64)
    return min(w.shape[0], max(16, rows))


def _rows(w, i: int, j: int) -> torch.Tensor:
    """Rows i:j of the weight, dense and exact (a 2:4 weight expanded from its packed rows, a fresh and
    so 64-byte-aligned tensor; tiled meta, [N/64, K/64, 512], by its 64-row blocks)."""
    if isinstance(w, Packed24):
        if w.meta.dim() == 3:
            i0, j0 = i // 64 * 64, min(-(-j // 64) * 64, w.values.shape[0])
            d = expand_24(w.values[i0:j0], w.meta[i0 // 64:j0 // 64], "fused CPU 2:4 path")
            return d if (i0, j0) == (i, j) else d[i - i0:j - i0].contiguous()
        return expand_24(w.values[i:j], w.meta[i:j], "fused CPU 2:4 path")
    return w[i:j]


# fp32 GEMMs through oneDNN (mkldnn::_linear_pointwise, on ATen's OpenMP threads) instead of F.linear's MKL sgemm.
# MKL runs on its own OpenMP threads, which spin after each call; between the per-tile GEMMs ATen's threads then
# convert the next tile on the same cores and wait for them. TinyLlama block, fp32 activations, int8 W8A16
# (`examples/cpu_edge_bench.py --tinyllama --fp32-acts`), 2 threads, ms: M=1 32.7 / M=8 42.3 with F.linear (5.4 /
# 14.6 with MKL_NUM_THREADS=1, 4.1 / 15.5 with KMP_BLOCKTIME=0); the same fp32 math (~1e-7 relative) through oneDNN.
_MKLDNN_LINEAR = torch._C._dispatch_has_kernel_for_dispatch_key("mkldnn::_linear_pointwise", "CPU")


# The activations as oneDNN post-ops of the narrow MLP's layers (mkldnn::_linear_pointwise's attr, scalars, algorithm):
# as accurate as torch's ops (against fp64: gelu 147.2 dB, both; gelu_tanh 153.8 / 154.0; silu 148.8 / 146.0; relu
# exact), and no pass over the output per layer. 65536 rows of a 64-wide 5-layer relu MLP, 2 threads, ms: addmm +
# relu_ 39.4 (MKL's spinning threads in the way of the activations; 18.9 in a quieter run), oneDNN + relu_ 28.1,
# oneDNN with the post-op 15.5-17.0 (fp32 nn.Sequential 21.1-29.8).
_ONEDNN_ACT = {"none": ("none", [], ""), "relu": ("relu", [], ""), "gelu": ("gelu", [], "none"),
               "gelu_tanh": ("gelu", [], "tanh"), "silu": ("swish", [], "")}


def _linear(x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, act: str = "none") -> torch.Tensor:
    """act(x2 · wᵀ + b); fp32 through oneDNN where this torch has it (see _MKLDNN_LINEAR), bias and activation
    inside its GEMM (see _ONEDNN_ACT)."""
    if x2.dtype == torch.float32 and _MKLDNN_LINEAR:
        return torch.ops.mkldnn._linear_pointwise(x2, w, b, *_ONEDNN_ACT[act])
    return _act_(F.linear(x2, w, b), act)


def _act_(y: torch.Tensor, act: str) -> torch.Tensor:
    """Activation in place (no extra buffer)."""
    if act == "relu":
        return y.relu_()
    if act == "silu":
        return F.silu(y, inplace=True)
    if act == "gelu":
        return torch.ops.aten.gelu_(y)
    if act == "gelu_tanh":
        return torch.ops.aten.gelu_(y, approximate="tanh")
    if act == "none":
        return y
    raise ValueError(f"unknown activation {act!r}")


def _columns(path: str, x2, qweight, wscale, dynamic):
    """(whole, cols, rows): x2 · dequant(W)ᵀ with the weight (and, W8A8, the token) scales applied, in fp32 for the
    int8 GEMM paths and in x2's dtype for the others (as the GEMM gives it). ``whole``: the [M, N] product, where
    it is small (M·N <= WHOLE_ELEMS) or its weight fits one tile; else None, and cols(i, j) -> [M, j - i] gives
    columns i:j when asked, one tile of weight rows at a time (a tile converted to the compute dtype, or a 2:4 tile
    expanded, only then), ``rows`` at most. ``qweight`` dense, or Packed24 with a "cpu:s24+" path.

    Why per tile: the scales, bias and activation on cache-sized tiles instead of whole [M, N] tensors. On this
    host (2-core AVX512 x86) an in-place bf16 [1024, 11264] · fp32 [11264] product took 27.7 ms and the same on a
    [1024, 1024] tile 0.2 ms; whole-tensor temporaries also pay page faults (an fp32 copy of it, 12 ms). Where the
    product is small the tiles' host time (~5 µs per torch op here) would cost more than they save."""
    packed = isinstance(qweight, Packed24)
    if packed != path.startswith("cpu:s24+"):
        raise ValueError(f"CPU path {path!r} does not take a {'2:4' if packed else 'dense'} weight")
    path = path.replace("s24+", "")
    if not packed and qweight.dtype == torch.int8 and qweight.stride() == (0, 0) and not packed_only(qweight):
        raise RuntimeError("an int8 weight with one byte of storage that is no pack_weight stand-in: a copy of a "
                           "stand-in (fused.pack_for_cpu) lost its oneDNN weight; unpack before copying the tensor")
    if packed_only(qweight) and not path.endswith(("qlinear", "fbgemm")):
        qweight = unpack_weight(qweight)  # transient: this call's plain weight (dispatch names this in its why)
    M, K = x2.shape
    N = qweight.shape[0]
    small = M * N <= WHOLE_ELEMS
    rows = _tile_rows(qweight, K, 2)
    if path in cpu_fbgemm.PATHS:
        if packed or qweight.dtype != torch.int8:
            raise ValueError(f"CPU path {path!r} takes a dense int8 weight")
        y, xs, finite = cpu_fbgemm.product(path, x2, fbgemm_cached(qweight), wscale, dynamic)
        if not finite:
            idx, fixed = _nonfinite_rows(x2, xs, qweight, wscale)
            y[idx] = fixed
        return y, None, N
    if path == "cpu:int8pack" and dynamic:
        # int8 W8A8: the reference's int8 codes are exact in bf16, so the kernel sums the reference's products (fp32
        # accumulation, exact below 2^24), rounded once to bf16 (~54 dB, far under W8A8's ~31); scales in fp32 after
        if packed:
            raise ValueError("cpu:int8pack takes W8A8 on a dense weight only")
        xq, xs = quantize_activation(x2, "int8")
        acc = torch._weight_int8pack_mm(_aligned_rows(xq.to(torch.bfloat16)), qweight, _unit_bf16(N))
        return acc.float().mul_(xs).mul_(wscale), None, rows
    if path == "cpu:int8pack":
        # the kernel wants the scales in x's dtype: cast once, cached
        xa, sc = _aligned_rows(x2), cast_cached(wscale, x2.dtype)
        if packed:  # scale slices cloned: the kernel's vector loads want aligned buffers
            cols = lambda i, j: torch._weight_int8pack_mm(xa, _rows(qweight, i, j), sc[i:j].clone())  # noqa: E731
        else:  # M <= int8pack_max_m: one call over every row
            return torch._weight_int8pack_mm(xa, qweight, sc), None, rows
    elif path in ("cpu:split_int_mm", "cpu:int_mm", "cpu:split_qlinear", "cpu:qlinear"):
        onednn, split = path.endswith("qlinear"), "split" in path
        if onednn and (packed or qweight.dtype != torch.int8):
            raise ValueError(f"CPU path {path!r} takes a dense int8 weight")
        if split:  # both planes in one GEMM: each weight tile is read once
            q, xs, finite = _split_planes(x2, onednn)
        else:
            q, xs = quantize_activation(x2, "int8")
            q = q.view(torch.uint8).bitwise_xor(128) if onednn else q  # oneDNN: q + 128, zero point 128
        if onednn:
            pw, ones, zeros = packed_cached(qweight)
            # q + 128 as uint8 with zero point 128: oneDNN's int32 sums are Σq·w as _int_mm's, each rounded once to
            # fp32 (unit scales), as _int_mm's .float() rounds them
            full = torch.ops.onednn.qlinear_pointwise(q, 1.0, 128, pw, ones, zeros, None, 1.0, 0, torch.float32, "none",
                                                      [], "")
        else:
            # int32: exact, any M/N/K on the CPU. Below TILE_MIN_M rows one GEMM over every column (per-tile calls
            # cost more than they save there), its scales and epilogue still per tile where the product is large
            full = _int_mm(q, qweight) if M < TILE_MIN_M and not packed else None
        fix = _nonfinite_rows(x2, xs, qweight, wscale) if split and not finite else None

        def cols(i, j):
            acc = full[:, i:j] if full is not None else _int_mm(q, _rows(qweight, i, j))
            if split and acc.dtype == torch.int32:  # 256·Σhi·w + Σlo·w = Σv·w exactly (int64)
                acc = acc[:M].long() * 256 + acc[M:]
            elif split:  # oneDNN's fp32 sums: Σlo·w + 256·Σhi·w (exact: a power of two), rounded once; in place on
                acc = acc[M:].add_(acc[:M], alpha=256)  # the lo rows (each column range is asked for once)
            # fp32 in the reference's order: (acc · s_x) · s_w; in place on oneDNN's fp32 columns (each read once)
            out = acc.float().mul_(xs).mul_(wscale[i:j])
            if fix is not None:
                out[fix[0]] = fix[1][:, i:j]
            return out
        if full is not None:
            rows = max(rows, EPILOGUE_ELEMS // M)
    elif path in ("cpu:bf16_mm", "cpu:int8_dequant_mm", "cpu:fp8_dequant_mm"):
        xs = None
        if dynamic and path == "cpu:int8_dequant_mm":
            # int8 W8A8 where torch._int_mm is slow: the int8 activations and weights are exact in fp32, so an fp32
            # GEMM sums the reference's products (exactly below 2^24, else rounded as _int_mm's int32 -> fp32)
            xq, xs = quantize_activation(x2, "int8")
            x2 = xq.float()
        elif dynamic and path != "cpu:bf16_mm":
            # fp8 W8A8: fp8 activations are exact in bf16/fp32, so the GEMM sees the reference's operands
            xq, xs = quantize_activation(x2, "float8_e4m3")
            # by bit arithmetic, as the weight tiles: fp8 -> bf16 by .to() is a scalar loop (608 x 384, 1 thread:
            # 0.90 -> 0.07 ms). It makes the NaN codes of a token with NaN/Inf finite; such a token's scale is
            # NaN or Inf, and its outputs are NaN in the reference (a NaN in every dot): a NaN scale keeps them so
            xb = _fp8_tile_to_bf16(xq)
            xs = xs.masked_fill(~torch.isfinite(xs), float("nan"))
            x2 = xb if x2.dtype == torch.bfloat16 else xb.to(x2.dtype)
        if x2.dtype == torch.bfloat16 and dequant_dtype(x2.dtype, M) == torch.float32:
            x2 = x2.float()  # bf16 GEMMs are slow here at this M; the epilogue casts back
        scale = None if path == "cpu:bf16_mm" else wscale
        fp8 = qweight.dtype == torch.float8_e4m3fn
        same = qweight.dtype == x2.dtype  # bf16 weights, bf16 x: no conversion
        rows = _tile_rows(qweight, K, x2.element_size())
        buf = None if same else x2.new_empty(rows, K, dtype=torch.int16 if fp8 else x2.dtype)  # reused per tile

        def cols(i, j):
            w = _rows(qweight, i, j)
            if fp8:
                w = _fp8_tile_to_bf16(w, buf[: j - i]).to(x2.dtype)  # .to: no-op for bf16
            elif not same:
                w = buf[: j - i].copy_(w)  # int8: |q| <= 127, exact in bf16 and fp32; bf16: exact in fp32
            y = _linear(x2, w)
            if xs is not None:  # W8A8: the scales in fp32, (y · s_x) · s_w
                return y.float().mul_(xs).mul_(scale[i:j])
            return y if scale is None else y.mul_(scale[i:j])  # in x's compute dtype, one rounding
    else:
        raise ValueError(f"unknown CPU path {path!r}; expected one of {PATHS}")
    whole = _assemble(cols, rows, N) if small or rows >= N else None
    return whole, cols, rows


def _nonfinite_rows(x2, xs, qweight, wscale):
    """(rows, their product) for the tokens with NaN/Inf, or None. The split planes hold no Inf (such a token's scale is
    NaN), so its product would be NaN everywhere; computed on the dequantized weight instead, Inf propagates as in the
    reference (±Inf, and NaN only where it is). Only calls with such a token pay for it."""
    bad = xs.view(-1).isnan()
    if not bad.any():
        return None
    idx = bad.nonzero().view(-1)
    sub = "cpu:s24+int8_dequant_mm" if isinstance(qweight, Packed24) else "cpu:int8_dequant_mm"
    return idx, _matmul(sub, x2[idx], qweight, wscale, False).float()


def _assemble(cols, rows: int, N: int) -> torch.Tensor:
    """The [M, N] product from its column tiles (one dense weight tile at a time), each written into one output."""
    if rows >= N:
        return cols(0, N)
    y = None
    for i in range(0, N, rows):
        t = cols(i, min(i + rows, N))
        if y is None:
            y = t.new_empty(t.shape[0], N)
        y[:, i:i + t.shape[1]] = t
    return y


def _matmul(path: str, x2, qweight, wscale, dynamic) -> torch.Tensor:
    """The whole [M, N] product of `_columns` (its scales applied)."""
    whole, cols, rows = _columns(path, x2, qweight, wscale, dynamic)
    return whole if whole is not None else _assemble(cols, rows, qweight.shape[0])


def _finish(a: torch.Tensor, u, b1, b2, act: str) -> torch.Tensor:
    """act(a + b1), or act(a + b1) ⊙ (u + b2) for a gated op, in place on a (and u), each op in the tile's dtype (a
    bf16 op computes in fp32 with the fp32 bias as is and rounds once; an fp32 epilogue measured no better SQNR:
    the GEMM output is already rounded)."""
    if b1 is not None:
        a.add_(b1)
    a = _act_(a, act)
    if u is not None:
        if b2 is not None:
            u.add_(b2)
        a.mul_(u)
    return a


def _epilogue(product, n_out: int, gated: bool, b1, b2, act: str, dtype: torch.dtype) -> torch.Tensor:
    """[M, n_out] in ``dtype`` from `_columns`' product of a plain layer (n_out columns) or of a gated one (gate
    columns [0, n_out), up columns [n_out, 2·n_out)): the whole product at once, or tile by tile of ``rows`` output
    columns, each tile's bias, activation and gate applied while it is in cache."""
    whole, cols, rows = product
    if whole is not None:
        return _finish(whole[:, :n_out], whole[:, n_out:] if gated else None, b1, b2, act).to(dtype).contiguous()
    y = None
    for i in range(0, n_out, rows):
        j = min(i + rows, n_out)
        t = _finish(cols(i, j), cols(n_out + i, n_out + j) if gated else None,
                    None if b1 is None else b1[i:j], None if b2 is None else b2[i:j], act)
        if y is None:
            y = torch.empty(t.shape[0], n_out, dtype=dtype)
        y[:, i:j] = t
    return y


def run(path: str, op: str, x: torch.Tensor, qweight, wscale, bias, act: str, dynamic: bool) -> torch.Tensor:
    """Run ``op`` ("linear" or "gated") through CPU path ``path`` on N-D, possibly strided ``x``; ``qweight``
    a dense [N, K] tensor, or Packed24 (2:4, "cpu:s24+" paths)."""
    K = x.shape[-1]
    N = qweight.shape[0]
    n_out = N if op == "linear" else N // 2
    x2 = x.reshape(-1, K)
    if x2.shape[0] == 0:
        return x.new_empty(*x.shape[:-1], n_out)
    product = _columns(path, x2.to(compute_dtype(x.dtype)), qweight, wscale, dynamic)
    b1, b2 = (bias, None) if op == "linear" or bias is None else (bias[:n_out], bias[n_out:])
    return _epilogue(product, n_out, op != "linear", b1, b2, act, x.dtype).reshape(*x.shape[:-1], n_out)


def run_pair(path: str, x: torch.Tensor, wg, sg, bg, wu, su, bu, act: str, dynamic: bool) -> torch.Tensor:
    """The gated op with gate and up in separate tensors (fused.dispatch.gated_pair) through ``path``: the two
    products side by side, tile by tile where large (concatenating the weights would copy them on every call),
    then `run`'s gated epilogue. Same numbers as `run` on the stacked weights, row for row."""
    K = x.shape[-1]
    H = wg.shape[0]
    x2 = x.reshape(-1, K)
    if x2.shape[0] == 0:
        return x.new_empty(*x.shape[:-1], H)
    xc = x2.to(compute_dtype(x.dtype))
    (g, gcols, rows), (u, ucols, _) = _columns(path, xc, wg, sg, dynamic), _columns(path, xc, wu, su, dynamic)
    if g is not None:  # gate and up have one shape: both whole, or both in tiles
        y = _finish(g, u, bg, bu, act).to(x.dtype).contiguous()
    else:
        def cols(i, j):  # the gate's columns, then the up's: the stacked layout `_epilogue` reads
            return gcols(i, j) if i < H else ucols(i - H, j - H)
        y = _epilogue((None, cols, rows), H, True, bg, bu, act, x.dtype)
    return y.reshape(*x.shape[:-1], H)


# ------------------------------------------------------------------------------------ narrow MLP (fused.narrow)

# packed weights -> (weights version, params, params version, dims, [(W fp32 [N, K], b fp32 [N])])
_narrow_cache: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _narrow_layers(weights: torch.Tensor, params: torch.Tensor, dims) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The dequantized fp32 layers of a packed narrow MLP, unpacked once and reused until either buffer is
    modified in place (at most 8 x 128 x 128 x 4 B = 512 KiB; `narrow_cached_bytes`)."""
    from fused.narrow import unpack_narrow  # (fused.narrow imports fused.dispatch, which imports this module)

    if type(weights) is not torch.Tensor or weights.is_inference() or params.is_inference():
        return unpack_narrow(weights, params, dims)
    stamp = (weights._version, params._version, tuple(dims))
    entry = _narrow_cache.get(weights)
    if entry is None or entry[0] is not params or entry[1] != stamp:
        layers = [(w.contiguous(), b.contiguous()) for w, b in unpack_narrow(weights, params, dims)]
        entry = _narrow_cache[weights] = (params, stamp, layers)
    return entry[2]


def narrow_cached_bytes(weights: torch.Tensor) -> int:
    """Bytes of the fp32 layers cached for these packed narrow weights (what `explain` adds)."""
    entry = _narrow_cache.get(weights)
    return 0 if entry is None else sum(w.numel() * 4 + b.numel() * 4 for w, b in entry[2])


def narrow_mlp(x: torch.Tensor, weights, params, dims, acts) -> torch.Tensor:
    """A whole narrow MLP ("cpu:narrow_addmm"): per layer one fp32 GEMM with the bias added inside (`_linear`: oneDNN
    with the activation as a post-op, or F.linear and the activation in place), in fp32 like the reference
    (fused.reference.narrow_mlp_ref), on the cached fp32 layers; the output in x's dtype."""
    if torch.is_autocast_enabled("cpu"):
        with torch.autocast("cpu", enabled=False):  # fp32 whatever the caller's autocast, as the reference
            return narrow_mlp(x, weights, params, dims, acts)
    h = x.reshape(-1, dims[0]).float()
    for (w, b), act in zip(_narrow_layers(weights, params, dims), acts):
        h = _linear(h, w, b, act)
    return h.to(x.dtype).reshape(*x.shape[:-1], dims[-1])
