"""CPU: one gated MLP block (TinyLlama-1.1B's: d 2048, h 5632, SwiGLU, no bias), ours against PyTorch, one process.

    python benchmarks/cpu_block.py                      # M = 1, 8, 64, torch's thread count
    python benchmarks/cpu_block.py --threads 2 --m 1 8 64
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 python benchmarks/cpu_block.py   # an AVX2 CPU's kernels

Rows, all from the same fp32 weights: fp32 eager, bf16 eager, PyTorch's dynamic int8 quantization
(``torch.ao.quantization.quantize_dynamic``: fbgemm, 7-bit per-tensor activations), ours int8 weight-only (W8A16) with
fp32 and with bf16 activations, ours int8 W8A8 with fp32 activations; ours plain (as converted) and after
``fused.pack_for_cpu`` (on x86 without VNNI also with ``activation_bits=7``). Method: every row runs once per round, rounds interleaved (so load from elsewhere hits all rows
alike) until each row has ``--repeats`` timings of at least 0.1 s of calls; the median ms per call is reported. SQNR
of each output against fp32 eager on the same input (dB). The first line names the CPU, its ISA level and what
`fused.cpu_isa` probed.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings

import torch
from torch import nn

import fused
from fused import cpu_isa
from fused.demo import LlamaMLP
from lowbit import sqnr


def torch_dynamic(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {nn.Linear}, dtype=torch.qint8)


def rows(model: nn.Module) -> dict:
    """name -> (module, activation dtype)."""
    out = {"fp32 eager": (model, torch.float32), "bf16 eager": (copy.deepcopy(model).bfloat16(), torch.bfloat16),
           "torch quantize_dynamic (W8A8, 7-bit acts)": (torch_dynamic(model), torch.float32)}
    for packed in (False, True):
        tag = " packed" if packed else ""
        wo = fused.quantize(copy.deepcopy(model), fused.FusedInt8MLP())
        dyn = fused.quantize(copy.deepcopy(model), fused.FusedInt8MLP(weight_only=False))
        if packed:
            fused.pack_for_cpu(wo, min_bytes=0)
            fused.pack_for_cpu(dyn, min_bytes=0)
        out[f"ours int8 W8A16{tag} (fp32 x)"] = (wo, torch.float32)
        out[f"ours int8 W8A16{tag} (bf16 x)"] = (wo, torch.bfloat16)
        out[f"ours int8 W8A8{tag} (fp32 x)"] = (dyn, torch.float32)
    if fused.cpu.fbgemm_here():  # speed over accuracy, offered on x86 without VNNI
        fast = fused.quantize(copy.deepcopy(model), fused.FusedInt8MLP(weight_only=False))
        fused.pack_for_cpu(fast, min_bytes=0, activation_bits=7)
        out["ours int8 W8A8 packed, 7-bit acts (fp32 x)"] = (fast, torch.float32)
    return out


def time_rows(variants: dict, x: torch.Tensor, repeats: int) -> dict:
    calls = {}
    for name, (m, dt) in variants.items():  # warm up; calls per timing: >= 0.1 s
        xi = x.to(dt)
        m(xi)
        t0 = time.perf_counter()
        m(xi)
        calls[name] = max(1, int(0.1 / max(time.perf_counter() - t0, 1e-6)))
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, (m, dt) in variants.items():
            xi = x.to(dt)
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                m(xi)
            times[name].append((time.perf_counter() - t0) / calls[name] * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d", type=int, default=2048)
    p.add_argument("--h", type=int, default=5632)
    p.add_argument("--m", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = LlamaMLP(a.d, a.h).eval()
    print(f"{cpu_isa.summary()}; {torch.get_num_threads()} threads; torch {torch.__version__}; "
          f"block d {a.d}, h {a.h}")
    with torch.inference_mode():
        variants = rows(model)
        names = list(variants)
        print("| row | " + " | ".join(f"M={m} ms" for m in a.m) + " | " + " | ".join(f"M={m} dB" for m in a.m) + " |")
        print("|---" * (1 + 2 * len(a.m)) + "|")
        ms, db = {n: [] for n in names}, {n: [] for n in names}
        for M in a.m:
            x = torch.randn(M, a.d)
            ref = model(x)
            for n, (m, dt) in variants.items():
                db[n].append(sqnr(ref, m(x.to(dt)).float()))
            for n, t in time_rows(variants, x, a.repeats).items():
                ms[n].append(t)
        for n in names:
            print(f"| {n} | " + " | ".join(f"{t:.2f}" for t in ms[n]) + " | "
                  + " | ".join("–" if n == "fp32 eager" else f"{d:.1f}" for d in db[n]) + " |")


if __name__ == "__main__":
    main()
