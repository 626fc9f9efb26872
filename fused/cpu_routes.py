"""CPU routes for int8 weights on CPUs whose int8 GEMMs are not the VNNI ones (`cpu_isa.int8_backend` is not
"onednn"): what `fused.dispatch.plan` returns there instead of the oneDNN / ``torch._int_mm`` paths.

TinyLlama-sized gated block (d 2048, h 5632) on an AVX2-only AMD EPYC (Zen 3), 2 threads, raw ops, median ms for
gate/up [11264, 2048] at M = 1 / 8 / 64: fp32 F.linear 5.5 / 21.0 / 41.9, bf16 2.7 / 18.1 / 143.6,
_weight_int8pack_mm (bf16 x) 1.7 / 5.9 / 53.3, torch._int_mm 336 / 398 / 764 (a fallback loop), fbgemm on two 7-bit
planes 1.2 / 3.1 / 24.6 (`cpu_fbgemm`); oneDNN's u8 matmul: wrong (19 dB: saturated pair sums).
"""
from __future__ import annotations

import torch

from fused import cpu, cpu_isa

_WHY_FBGEMM = ("this CPU's int8 GEMMs saturate u8·s8 pair sums (no VNNI), so fbgemm runs on 7-bit planes "
               "(v = 128·hi + lo, both in [-64, 63]: exact) on its packed copy of the weight")


def applies(fmt: str) -> bool:
    """Whether these routes decide for a weight of format ``fmt`` here."""
    return fmt == "int8" and cpu_isa.int8_backend() != "onednn"


def _copy(weight_packed: bool) -> str:
    return ("the layer's only weight (fused.pack_for_cpu: 1 B/weight)" if weight_packed else
            "a copy kept beside the plain weight (+1 B/weight; fused.pack_for_cpu keeps it alone: 1 B/weight)")


def plan(dynamic: bool, dtype: torch.dtype, m: int, k: int | None, n: int | None, weight_aligned: bool,
         weight_cacheable: bool | None, weight_packed: bool = False, act_bits: int = 8) -> tuple[str, str]:
    """(path, why) for a dense (``weight_cacheable`` True/False) or 2:4 tile (None) int8 weight; ``act_bits`` 7: a
    W8A8 weight packed for 7-bit activations (fused.pack_for_cpu(model, activation_bits=7))."""
    backend = cpu_isa.int8_backend()
    if backend == "fbgemm" and (weight_packed or (weight_cacheable and cpu.ONEDNN)):
        if dynamic and act_bits == 7:
            return "cpu:fbgemm", ("W8A8 with 7-bit per-token activations, asked for (fused.pack_for_cpu(model, "
                                  "activation_bits=7)): one fbgemm pass on its packed weight, ~6 dB below 8-bit")
        if dynamic:
            return "cpu:fbgemm", (f"W8A8: per-token int8 activations; {_WHY_FBGEMM}, {_copy(weight_packed)}; "
                                  "the same int32 sums as the reference")
        return "cpu:split_fbgemm", (f"{str(dtype).removeprefix('torch.')} x as 14 bits per token; {_WHY_FBGEMM}, "
                                    f"{_copy(weight_packed)}")
    no_copy = ("2:4 tile, expanded per call" if weight_cacheable is None else
               "inference tensor: no version counter to keep a packed copy in step" if cpu.ONEDNN else
               "faster: fused.pack_for_cpu(model), fbgemm on the packed weight at 1 B/weight, or FUSED_CPU_ONEDNN=1, "
               "a packed copy kept beside it" if backend == "fbgemm" else cpu_isa.summary())
    fp32 = "fp32 GEMM on int8 activations and weight tiles (exact integers)"
    # int8pack's 4-row passes cost less than a dequantized float GEMM here up to M=8 on any weight (the VNNI routes
    # stop at 4 on large weights because two int8 planes on _int_mm win there; TinyLlama block on AVX2 at M=8, ms:
    # int8pack ~9, dequant + fp32 GEMM 16.0, + bf16 GEMM 34.8)
    pack_max = max(cpu.int8pack_max_m(n, k), cpu.INT8PACK_MAX_M)
    int8pack = m <= pack_max and weight_aligned and (k is None or cpu.int8pack_ok(k))
    if dynamic and int8pack and weight_cacheable is not None:
        return "cpu:int8pack", (f"W8A8: per-token int8 codes (exact in bf16) through torch._weight_int8pack_mm, sums "
                                f"rounded to bf16 (~54 dB), M <= {pack_max} ({no_copy})")
    if dynamic:
        return "cpu:int8_dequant_mm", f"W8A8: per-token int8 activations, {fp32} ({no_copy}; torch._int_mm is slow here)"
    if dtype == torch.bfloat16 and int8pack:
        return "cpu:int8pack", f"torch._weight_int8pack_mm (bf16, M <= {pack_max}; {no_copy})"
    cdt = str(cpu.dequant_dtype(dtype, m)).removeprefix("torch.")
    return "cpu:int8_dequant_mm", f"per-tile dequant + {cdt} GEMM ({no_copy})"
