"""Quantize a Llama-style MLP block (gate/up/down projections + SiLU) with the fused configs.

    python examples/quantize_llama_mlp.py          # CPU, small block (d 256, h 704), 1 and 16 tokens
    python examples/quantize_llama_mlp.py --full   # GPU, Llama-3-8B block (d 4096, h 14336), bf16

For each config: convert a copy with torchao's quantize_ and fused.is_mlp (the whole block becomes one
FusedGatedMLP: gate+up in one op, down in another), show which path each op takes (fused.explain),
the output SQNR against the bf16 block, the weight memory and the time per forward.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
from torchao.quantization import quantize_  # noqa: E402

import fused  # noqa: E402
from fused.demo import Layer, LlamaMLP  # noqa: E402  (transformers' LlamaMLP attribute names)
from fused.sweep import param_bytes, time_side_by_side  # noqa: E402
from lowbit import sqnr  # noqa: E402


CONFIGS = {
    "int8 W8A16": lambda: fused.FusedInt8MLP(),
    "int8 W8A8": lambda: fused.FusedInt8MLP(weight_only=False),
    "fp8 W8A8": lambda: fused.FusedFloat8MLP(),
    "fp8 weight-only": lambda: fused.FusedFloat8MLP(weight_only=True),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="Llama-3-8B block sizes on a CUDA GPU")
    p.add_argument("--tokens", default=None, help="comma-separated token counts (default 1,16; --full 1,16,128,1024)")
    p.add_argument("--iters", type=int, default=None, help="timed forwards (default 5; --full 50)")
    args = p.parse_args(argv)
    if args.full and not torch.cuda.is_available():
        p.error("--full needs a CUDA GPU")
    device = "cuda" if args.full else "cpu"
    d, h = (4096, 14336) if args.full else (256, 704)
    tokens = [int(t) for t in (args.tokens or ("1,16,128,1024" if args.full else "1,16")).split(",")]
    iters = args.iters or (50 if args.full else 5)

    torch.manual_seed(0)
    with torch.device(device):
        base = Layer(LlamaMLP(d, h)).to(torch.bfloat16).eval()
    models = {"bf16": base}
    for name, make in CONFIGS.items():
        q = copy.deepcopy(base)
        quantize_(q, make(), filter_fn=fused.is_mlp)
        models[name] = q
    print(f"Llama-style MLP d {d}, h {h}, bf16 activations, on {device}")
    print(models["int8 W8A16"].mlp)
    fused.explain(models["int8 W8A16"])
    print()

    head = f"{'config':18s}{'weights MiB':>12s}" + "".join(f"{f'SQNR dB M={m}':>15s}{f'ms M={m}':>11s}" for m in tokens)
    print(head)
    rows = {name: [] for name in models}
    for m in tokens:
        x = torch.randn(m, d, device=device, dtype=torch.bfloat16)
        with torch.no_grad():
            ref = base(x)
            outs = {name: mod(x) for name, mod in models.items()}
        times = time_side_by_side([(mod, x) for mod in models.values()], iters=iters)
        for (name, out), ms in zip(outs.items(), times):
            rows[name].append((sqnr(ref, out), ms))
    for name, mod in models.items():
        cells = "".join(f"{s:15.1f}{ms:11.3f}" for s, ms in rows[name])
        print(f"{name:18s}{param_bytes(mod) / 2**20:12.2f}{cells}")
    bad = [n for n in CONFIGS if any(not s > 20 for s, _ in rows[n])]
    if bad:
        print(f"SQNR below 20 dB for {bad}: something is wrong", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
