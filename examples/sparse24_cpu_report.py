"""2:4 on the CPU: packed bytes per weight, and magnitude vs Wanda pruning accuracy on the demo model.

    PYTHONPATH=. python examples/sparse24_cpu_report.py

Memory is read off real module buffers (FusedSparseLinear allocates exactly what it stores). Accuracy:
fused.demo.DemoModel (4 gated SiLU blocks + 1 GELU block, d 512, fp32), every MLP Linear pruned to 2:4;
Wanda calibrated on random inputs, all evaluated on other random inputs; SQNR of the model output vs the
dense fp32 model, then the same with each 2:4 config packing the pruned model (the CPU path).
"""
import copy

import torch

import fused
from fused.demo import DemoModel
from fused.sparse_modules import FusedSparseLinear
from lowbit import sqnr
from sparsity import bytes_per_weight, prune_24_


def memory_rows():
    rows = []
    for fmt in ("int8", "float8_e4m3", "bfloat16"):
        for n, k in [(14336, 4096), (4096, 14336), (4096, 4096)]:
            mod = FusedSparseLinear(k, n, bias=False, fmt=fmt)  # buffers only: values, meta, scale
            b = mod.weight_bytes()
            assert b == round(bytes_per_weight(n, k, mod.values.dtype, scale=fmt != "bfloat16") * n * k)
            rows.append((fmt, f"{n}x{k}", mod.values.nbytes, mod.meta.nbytes,
                         mod.scale.nbytes if mod.scale is not None else 0, b / (n * k)))
    return rows


def real_pack_row(n=4096, k=4096):
    """Bytes per weight of a real packed int8 weight (pruned and packed from a random fp32 one)."""
    mod = FusedSparseLinear.from_float(torch.randn(n, k), None, "int8")
    return mod.weight_bytes() / (n * k)


def accuracy_rows(inputs="iid", tokens=64, calib_batches=8, seed=0):
    """inputs "iid": x ~ N(0, 1) per channel; "outliers": each channel scaled by a fixed log-normal factor
    (σ = 1), like the outlier features of trained LLMs (the same scales for calibration and evaluation)."""
    torch.manual_seed(seed)
    base = DemoModel().eval()
    d = base.norm.weight.shape[0]
    scale = torch.exp(torch.randn(d)) if inputs == "outliers" else torch.ones(d)
    calib = [torch.randn(16, d) * scale for _ in range(calib_batches)]
    x = torch.randn(tokens, d) * scale
    with torch.no_grad():
        ref = base(x)
    rows = []
    for method in ("magnitude", "wanda"):
        model = copy.deepcopy(base)
        report = prune_24_(model, method, calib if method == "wanda" else None)
        energy = sum(report.values()) / len(report)
        with torch.no_grad():
            rows.append((method, "fp32 (pruned, unpacked)", energy, sqnr(ref, model(x))))
        for name, cfg in [("int8 2:4 W8A16", fused.FusedInt8MLP(sparsity="2:4")),
                          ("fp8 2:4 W8A8", fused.FusedFloat8MLP(sparsity="2:4")),
                          ("bf16 2:4", fused.FusedBF16MLP())]:
            packed = copy.deepcopy(model)
            fused.quantize(packed, cfg)
            with torch.no_grad():
                rows.append((method, name, energy, sqnr(ref, packed(x))))
    return rows


if __name__ == "__main__":
    print("| values | weight | values B | meta B | scales B | bytes / weight |\n|---|---|---|---|---|---|")
    for fmt, shape, v, m, s, bpw in memory_rows():
        print(f"| {fmt} | {shape} | {v} | {m} | {s} | {bpw:.4f} |")
    print(f"\nreal packed int8 4096x4096 (FusedSparseLinear.from_float): {real_pack_row():.4f} bytes / weight\n")
    print("| inputs | pruning | weights | mean kept energy | output SQNR vs dense fp32 (dB) |\n|---|---|---|---|---|")
    for inputs in ("iid", "outliers"):
        for method, name, energy, db in accuracy_rows(inputs):
            print(f"| {inputs} | {method} | {name} | {energy:.3f} | {db:.2f} |")
