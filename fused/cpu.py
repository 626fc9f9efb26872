"""CPU kernels: pure torch / aten / fbgemm / oneDNN, no Triton. `fused.dispatch` decides which path runs (with
`fused.cpu_routes` where `fused.cpu_isa` finds no VNNI); this file runs it.

Paths (names as `dispatch.plan` and `explain` print them):

  cpu:int8pack        int8 weight-only with bf16 activations at small M (and int8 W8A8 at small M where _int_mm is
                      slow: the int8 codes in bf16): ``torch._weight_int8pack_mm`` reads the int8 weight directly.
  cpu:int8_dequant_mm int8 otherwise: the weight dequantized one N-tile (4 MiB) at a time into the compute dtype (one
                      reused buffer) and multiplied with ``F.linear``; the scale goes on the output.
  cpu:split_int_mm    int8 weight-only, bf16 activations: each token as two int8 planes (`lowbit.split_activation`,
                      x ≈ s·(256·hi + lo), 15 bits), both as rows of one ``torch._int_mm``, combined in fp32.
  cpu:int_mm          int8 W8A8: per-token int8 activations (as the reference), ``torch._int_mm`` (exact int32).
  cpu:qlinear         int8 W8A8 as cpu:int_mm on oneDNN's int8 matmul with the weight reordered once
                      (`cpu_weights.packed_cached` or `pack_weight`); activations as uint8 q + 128, zero point 128.
                      Only where oneDNN's u8 sums are exact (VNNI / AMX).
  cpu:split_qlinear   int8 weight-only: cpu:split_int_mm's two planes on the reordered weight.
  cpu:fbgemm          int8 W8A8 / weight-only on fbgemm's packed weight, 7-bit planes (`fused.cpu_fbgemm`): x86
  cpu:split_fbgemm    without VNNI, where oneDNN's u8 sums saturate.
  cpu:fp8_dequant_mm  float8 e4m3: N-tiles converted exactly to bf16 by integer bit arithmetic, then ``F.linear``
                      (no fast CPU fp8 GEMM exists); 1 byte/weight kept, speed paid on every call.
  cpu:bf16_mm         bf16 weights (2:4 bf16 values): ``F.linear`` per N-tile.
  cpu:s24+<path>      a 2:4 weight: each N-tile expanded exactly to dense 8-/16-bit rows (`sparsity.expand_24`), then
                      <path>. The dense weight never exists at once, so 2:4 keeps its 0.625 B/weight; the expansion
                      runs on every call: on the CPU 2:4 saves memory, not time.

Compute dtype: bf16 activations compute in bf16 (fp32 accumulation inside the GEMMs; fp32 for the dequantized GEMMs
where bf16 GEMMs are slow: `dequant_dtype`); fp32 in fp32; fp16 is upcast to fp32 (exact), the output cast back.

Every path ends with the same epilogue, in place on one tile of output columns at a time while it is in cache
(`_epilogue`): scales, + bias, activation, and for the gated op act(gate) * up. At large M the GEMMs run per tile of
weight rows too (TILE_MIN_M); small products stay whole (WHOLE_ELEMS).

Derived data (packed copies, int8pack's scales in bf16) lives in `fused.cpu_weights`, made once per tensor and remade
when the buffer is modified in place; `cached_bytes` reports it and `fused.explain` counts it.

Threads: every kernel here is an aten op parallelised with at::parallel_for, so torch.set_num_threads applies.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import torch
import torch.nn.functional as F

from fused import cpu_fbgemm, cpu_isa
from fused.cpu_weights import (  # noqa: F401  (the CPU's weight store, used through fused.cpu)
    ONEDNN_MAX_K, FbgemmWeight, _unit_bf16, cacheable, cached_bytes, cast_cached, clear_cache, fbgemm_cached,
    fbgemm_here, onednn_ok, pack_weight, packed_act_bits, packed_cached, packed_only, unpack_weight)
from lowbit import quantize_activation
from lowbit.quant import MIN_SCALE, SPLIT_QMAX
from sparsity.packing import expand_24

DENSE_PATHS = ("cpu:int8pack", "cpu:split_int_mm", "cpu:split_qlinear", "cpu:int8_dequant_mm", "cpu:int_mm",
               "cpu:qlinear", "cpu:fp8_dequant_mm", "cpu:bf16_mm") + cpu_fbgemm.PATHS
# packed-weight paths have no 2:4 form (a 2:4 tile is expanded per call; its packed copy would be remade per call)
PATHS = DENSE_PATHS + tuple("cpu:s24+" + p.removeprefix("cpu:") for p in DENSE_PATHS
                            if "qlinear" not in p and "fbgemm" not in p)

# Thresholds of the VNNI routes (`dispatch._plan_cpu`), measured on a 2-core AVX512-VNNI x86, 2 threads, TinyLlama
# block (d 2048, h 5632) unless named; docs/design.md says why each exists.
#
# torch._weight_int8pack_mm re-dequantizes the weight per block of 4 rows of x, so its cost grows by a weight pass
# per 4 rows: up to M=8 it beats two int8 planes on _int_mm (ms, int8pack / planes: M=8 4.8 / 5.0, 9 6.7 / 5.1).
INT8PACK_MAX_M = 8
# ... a weight that stays in this host's L2 (2 x 1 MiB) makes the extra passes cheap: int8pack to M=16 (d 512 block,
# M=16 3.40 / 4.48 ms); past it such a weight takes one bf16 GEMM on its dequantized copy
INT8PACK_CACHED_BYTES = 2 << 20
INT8PACK_CACHED_MAX_M = 16
# ... a weight of 8 MiB or more stops at int8pack's first 4-row pass: the planes win from M=5 (M=5 3.91 / 4.17 ms)
INT8PACK_LARGE_BYTES = 8 << 20
INT8PACK_LARGE_MAX_M = 4
# bf16 weight-only above int8pack's M and up to here: two int8 planes on _int_mm (cpu:split_int_mm); past M≈56 their
# doubled int8 work loses to one bf16 GEMM on the dequantized tile (M=32 5.61 / 7.28 ms, 64 9.60 / 8.55)
SPLIT_MAX_M = 48
# oneDNN's int8 matmul on a weight reordered once (cpu:qlinear, cpu:split_qlinear) instead of _int_mm, which reorders
# the plain weight on every call (gate/up at M=16: 2.88 ms _int_mm, 0.96 oneDNN). Opt-in (FUSED_CPU_ONEDNN=1 or
# fused.cpu.ONEDNN = True) because the kept copy makes an int8 layer 2 B/weight; fused.pack_for_cpu keeps 1 B/weight.
# On CPUs without VNNI the same switch keeps fbgemm's packed copy (`fused.cpu_routes`).
ONEDNN = os.environ.get("FUSED_CPU_ONEDNN", "0") == "1"
# ... from M=2: at M=1 the plain-weight kernels are as fast, so decode alone makes no copy
ONEDNN_MIN_M = 2
# ... for weights of 2 MiB or more: oneDNN's int8 matmul costs ~20 µs per call before any work, and _int_mm's
# per-call reorder of a weight in L2 is cheap (d 512 blocks were slower packed at every M)
ONEDNN_MIN_BYTES = 2 << 20
# ... and for W8A8 weights whose K is a multiple of this (at least twice it) at any size: _int_mm's reorder reads such
# a weight in power-of-two strides, which collide in the caches ([512, 4096] at M=2: 404 µs _int_mm, 47 oneDNN)
ONEDNN_POW2_K = 1024
# up to this M, W8A16 with bf16 activations on a reordered weight runs cpu:split_qlinear
SPLIT_QLINEAR_MAX_M = 128
# _int_mm with the weight as its first operand where K is a power-of-two multiple (`pow2_k`): the weight is read as
# stored and the few token rows reordered instead, y = (W · qᵀ)ᵀ with the same int32 sums, rows padded to a multiple
# of 8 (gate/up at 16 rows: 2854 µs plain, 1275 swapped); up to INT_MM_SWAP_MAX_ROWS rows
INT_MM_SWAP = True
INT_MM_SWAP_MAX_ROWS = 256
# from this many rows the int8 GEMMs run per tile of weight rows, each tile's epilogue applied while in cache
TILE_MIN_M = 512
# output elements per epilogue tile where the product exists whole: few large tiles (each torch op costs ~5 µs here)
EPILOGUE_ELEMS = 1 << 18
# products of at most this many elements are computed whole and finished in place
WHOLE_ELEMS = 1 << 20
# int8pack's bf16 kernel loads 16 values per step with aligned loads and no tail: K % 16 != 0, or an x or weight not
# 32-byte aligned, reads past the row (garbage or a segfault, torch 2.13)
INT8PACK_K_MULTIPLE = 16
_ALIGN = 64
# bytes of one dequantized weight tile, the tiled paths' temporary (M=64: 1 MiB 17.5 ms, 4 MiB 14.4, 16 MiB 14.8)
TILE_BYTES = 4 << 20
# elements of x per pass of `_split_planes`: its fp32 temporary (1 MiB) stays in L2
PLANE_CHUNK = 1 << 18
# weights per tile of the 2:4 expansion (gate/up, ns per weight: 128 rows 11.4, 1024 rows 4.2, 2048 rows 6.3)
EXPAND_TILE_WEIGHTS = 2 << 20


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
