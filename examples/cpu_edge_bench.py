"""CPU benchmark: one gated MLP block (LlamaMLP: SwiGLU, no bias), side by side in one process.

    python examples/cpu_edge_bench.py                          # small smoke run (CI)
    python examples/cpu_edge_bench.py --tinyllama              # d 2048, h 5632 (TinyLlama-1.1B's MLP)
    python examples/cpu_edge_bench.py --d 4096 --h 14336 --m 1 16 --calls 10

Variants, all on the same float weights:
  fp32 eager, bf16 eager                      nn.Linear x3 (MKL / oneDNN)
  torchao int8 weight-only (bf16 acts)        torchao's Int8WeightOnlyConfig on the bf16 model
  ours int8 W8A16 (bf16 acts)                 fused.FusedInt8MLP()                 -> one gated op + one linear
  ours int8 W8A8 (bf16 acts)                  fused.FusedInt8MLP(weight_only=False)
  ours fp8 W8A16, emulated (bf16 acts)        fused.FusedFloat8MLP(weight_only=True), with --fp8
  ours int8 2:4 W8A16 / W8A8 (bf16 acts)      fused.FusedInt8MLP(sparsity="2:4"), with --sparse: the weights
                                              magnitude-pruned to 2:4 first; their SQNR is against the pruned
                                              fp32 model (the kernels' error, not the pruning's)

Method: for each M, every variant runs `calls` forwards per timing window; windows are interleaved
across variants `repeats` times and the best window is reported (ms per forward), so a burst of load
from other processes hits all variants alike. Threads: torch's setting (--threads to change it).
Accuracy: SQNR of each output against fp32 eager (dB; int8 weight quantization alone is ~40 dB).
Weight memory: bytes of the block's weights as stored (+ any cached derived copies for ours).
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import time

import torch
from torch import nn

import fused
from fused import cpu, dispatch
from fused.demo import LlamaMLP  # transformers' LlamaMLP attribute names
from lowbit import sqnr




def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a (possibly torchao subclass) tensor holds: its inner tensors for a wrapper subclass."""
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)
    return t.numel() * t.element_size()


def weight_bytes(model: nn.Module) -> int:
    from fused.explain import converted_modules

    if converted_modules(model):  # ours: buffers + cached derived copies, as fused.explain counts them
        return sum(r["bytes_after"] for r in fused.explain(model, print_table=False))
    return sum(tensor_bytes(t) for t in list(model.parameters()) + list(model.buffers()))


class CpuFlags(nn.Module):
    """The wrapped model with fused.cpu settings changed during its calls, for an A/B in one process: ONEDNN=True
    (oneDNN's int8 matmul on a kept reordered copy of each int8 weight, FUSED_CPU_ONEDNN=1), INT8PACK_CACHED_MAX_M=48
    (the rule before the fortieth session: int8pack up to M=48 on a weight that stays in L2)."""

    def __init__(self, model: nn.Module, **flags):
        super().__init__()
        self.model, self.flags = model, flags

    def forward(self, x):
        old = {k: getattr(cpu, k) for k in self.flags}
        try:
            for k, v in self.flags.items():
                setattr(cpu, k, v)
            return self.model(x)
        finally:
            for k, v in old.items():
                setattr(cpu, k, v)


def build(d: int, h: int, with_fp8: bool, with_torchao: bool, with_sparse: bool = False, onednn_ab: bool = False,
          fp32_acts: bool = False,
          int8pack_ab: bool = False,
          swap_ab: bool = False) -> tuple[dict[str, tuple[nn.Module, torch.dtype]], nn.Module]:
    """The variants, and the fp32 model the 2:4 variants were pruned from (None without --sparse)."""
    torch.manual_seed(0)
    base = LlamaMLP(d, h).eval()
    variants = {
        "fp32 eager": (base, torch.float32),
        "bf16 eager": (copy.deepcopy(base).to(torch.bfloat16), torch.bfloat16),
    }
    if with_torchao:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        ao = copy.deepcopy(base).to(torch.bfloat16)
        quantize_(ao, Int8WeightOnlyConfig())
        variants["torchao int8 weight-only (bf16 acts)"] = (ao, torch.bfloat16)

    def ours(cfg, model=base):
        holder = nn.Sequential(copy.deepcopy(model))  # quantize_ replaces children, not the root
        fused.quantize(holder, cfg)
        return holder

    variants["ours int8 W8A16 (bf16 acts)"] = (ours(fused.FusedInt8MLP()), torch.bfloat16)
    variants["ours int8 W8A8 (bf16 acts)"] = (ours(fused.FusedInt8MLP(weight_only=False)), torch.bfloat16)
    if swap_ab:
        for name, cfg in (("W8A16", fused.FusedInt8MLP()), ("W8A8", fused.FusedInt8MLP(weight_only=False))):
            variants[f"ours int8 {name}, _int_mm unswapped (before)"] = (
                CpuFlags(ours(cfg), INT_MM_SWAP=False), torch.bfloat16)
    if int8pack_ab:
        variants["ours int8 W8A16, int8pack to M=48 (before)"] = (
            CpuFlags(ours(fused.FusedInt8MLP()), INT8PACK_CACHED_MAX_M=48), torch.bfloat16)
        variants["ours int8 W8A16, int8pack to M=8 on large weights (before)"] = (
            CpuFlags(ours(fused.FusedInt8MLP()), INT8PACK_LARGE_MAX_M=8), torch.bfloat16)
    if onednn_ab:  # the oneDNN paths on every weight, also those under cpu.ONEDNN_MIN_BYTES that the default leaves
        forced = dict(ONEDNN=True, ONEDNN_MIN_BYTES=0)  # plain, so the A/B measures that rule too
        variants["ours int8 W8A16, oneDNN copy"] = (CpuFlags(ours(fused.FusedInt8MLP()), **forced), torch.bfloat16)
        variants["ours int8 W8A8, oneDNN copy"] = (CpuFlags(ours(fused.FusedInt8MLP(weight_only=False)), **forced),
                                                   torch.bfloat16)
        for name, cfg in (("W8A16", fused.FusedInt8MLP()), ("W8A8", fused.FusedInt8MLP(weight_only=False))):
            if not cpu.onednn_ok():
                break
            for label, min_bytes in (("pack_for_cpu", None), ("pack_for_cpu, every weight", 0)):
                packed = ours(cfg)  # oneDNN's copy instead of the plain weight: 1 B/weight, every M on the copy; by
                fused.pack_for_cpu(packed, min_bytes=min_bytes)  # default not for weights where it does not pay
                variants[f"ours int8 {name}, {label}"] = (packed, torch.bfloat16)
    if with_fp8:
        variants["ours fp8 W8A16 emulated (bf16 acts)"] = (ours(fused.FusedFloat8MLP(weight_only=True)), torch.bfloat16)
    pruned = None
    if with_sparse:
        from sparsity import prune_24_

        pruned = copy.deepcopy(base)
        prune_24_(pruned)
        variants["ours int8 2:4 W8A16 (bf16 acts)"] = (ours(fused.FusedInt8MLP(sparsity="2:4"), pruned), torch.bfloat16)
        variants["ours int8 2:4 W8A8 (bf16 acts)"] = (
            ours(fused.FusedInt8MLP(weight_only=False, sparsity="2:4"), pruned), torch.bfloat16)
    if fp32_acts:  # the same int8 modules called with fp32 x: exact fp32 math, or (packed W8A16) two int8 planes
        for name in [n for n in variants if n.startswith("ours int8") and "2:4" not in n and "oneDNN" not in n]:
            variants[name.replace(" (bf16 acts)", "") + " (fp32 acts)"] = (variants[name][0], torch.float32)
    return variants, pruned


def time_variants(variants, x32: torch.Tensor, calls: int, repeats: int) -> dict[str, float]:
    inputs = {name: x32.to(dtype) for name, (_, dtype) in variants.items()}
    best = {name: float("inf") for name in variants}
    with torch.inference_mode():
        for name, (model, _) in variants.items():  # warm-up (allocations, one-time casts, oneDNN kernels)
            model(inputs[name])
        for _ in range(repeats):
            for name, (model, _) in variants.items():
                x = inputs[name]
                t0 = time.perf_counter()
                for _ in range(calls):
                    model(x)
                best[name] = min(best[name], (time.perf_counter() - t0) / calls)
    return {k: v * 1e3 for k, v in best.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, default=256, help="model width (default 256: smoke size)")
    ap.add_argument("--h", type=int, default=704, help="MLP hidden width (default 704)")
    ap.add_argument("--tinyllama", action="store_true", help="d=2048, h=5632")
    ap.add_argument("--m", type=int, nargs="+", default=[1, 8, 64], help="rows (tokens) per forward")
    ap.add_argument("--calls", type=int, default=20, help="forwards per timing window")
    ap.add_argument("--repeats", type=int, default=5, help="timing windows per variant (best is reported)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--fp8", action="store_true", help="also time the emulated fp8 path")
    ap.add_argument("--no-torchao", action="store_true", help="skip torchao's Int8WeightOnlyConfig")
    ap.add_argument("--sparse", action="store_true", help="also time int8 2:4 (magnitude-pruned) W8A16 and W8A8")
    ap.add_argument("--swap-ab", action="store_true",
                    help="also time our int8 variants with torch._int_mm's operands in the plain order "
                         "(fused.cpu.INT_MM_SWAP off, FUSED_CPU_INT_MM_SWAP=0), same process")
    ap.add_argument("--onednn-ab", action="store_true",
                    help="also time our int8 variants with fused.cpu.ONEDNN on (FUSED_CPU_ONEDNN=1) on every weight, "
                         "and packed by fused.pack_for_cpu (its default, which leaves weights where oneDNN does not "
                         "pay plain, and on every weight), same process")
    ap.add_argument("--fp32-acts", action="store_true", help="also call our int8 variants with fp32 activations")
    ap.add_argument("--int8pack-ab", action="store_true",
                    help="also time W8A16 with the rules before the fortieth session (int8pack up to M=48 on a "
                         "weight of at most 2 MiB; now up to 16, then dequantize + bf16 GEMM) and before the "
                         "forty-third (int8pack up to M=8 on a weight of 8 MiB or more; now up to 4), same process")
    args = ap.parse_args(argv)
    if args.tinyllama:
        args.d, args.h = 2048, 5632
    if args.threads:
        torch.set_num_threads(args.threads)

    load0 = os.getloadavg()
    variants, pruned = build(args.d, args.h, args.fp8, not args.no_torchao, args.sparse, args.onednn_ab,
                             args.fp32_acts, args.int8pack_ab, args.swap_ab)
    results, accuracy, paths = {}, {}, {}
    for m in args.m:
        x = torch.randn(m, args.d)
        dispatch.stats.clear()
        results[m] = time_variants(variants, x, args.calls, args.repeats)
        paths[m] = sorted({p for (_, p) in dispatch.stats})
        with torch.inference_mode():
            ref = variants["fp32 eager"][0](x)
            ref24 = pruned(x) if pruned is not None else None
            accuracy[m] = {n: sqnr(ref24 if "2:4" in n else ref, mod(x.to(dt)).float()) for n, (mod, dt) in variants.items()}
    load1 = os.getloadavg()
    mem = {name: weight_bytes(model) for name, (model, _) in variants.items()}  # after the runs: caches filled

    fp32, bf16, ao = "fp32 eager", "bf16 eager", "torchao int8 weight-only (bf16 acts)"
    print(f"## Gated MLP block d={args.d} h={args.h} (SwiGLU, no bias), CPU\n")
    print(f"torch {torch.__version__}, {platform.machine()} {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs; best of {args.repeats} x {args.calls} calls, "
          f"interleaved, one process; load average {load0[0]:.2f} at start, {load1[0]:.2f} at end\n")
    print("ms per forward:\n")
    print("| variant | " + " | ".join(f"M={m}" for m in args.m) + " | weights MiB | weights / fp32 |")
    print("|---|" + "---:|" * (len(args.m) + 2))
    for name in variants:
        print(f"| {name} | " + " | ".join(f"{results[m][name]:.3f}" for m in args.m)
              + f" | {mem[name] / 2**20:.1f} | {mem[name] / mem[fp32]:.3f} |")
    refs = [r for r in (fp32, bf16, ao) if r in variants]
    print("\nspeed-up (time of " + " / ".join(refs) + " divided by ours):\n")
    print("| variant | " + " | ".join(f"M={m}" for m in args.m) + " |")
    print("|---|" + "---:|" * len(args.m))
    for name in variants:
        if name.startswith("ours"):
            print(f"| {name} | " + " | ".join(
                " / ".join(f"{results[m][r] / results[m][name]:.2f}x" for r in refs) for m in args.m) + " |")
    print("\nSQNR vs fp32 eager, dB (M=" + ", ".join(map(str, args.m)) + "): " + "; ".join(
        f"{n.split(' (')[0]} " + "/".join(f"{accuracy[m][n]:.1f}" for m in args.m) for n in variants if n != fp32))
    print("our CPU paths: " + "; ".join(f"M={m}: {', '.join(paths[m])}" for m in args.m))
    return results, mem

if __name__ == "__main__":
    main()
