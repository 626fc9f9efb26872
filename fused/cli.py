"""`python -m fused` / `fusedmlp`: demo and explain (bench, profile and sweep arrive with their issues)."""
from __future__ import annotations

import argparse
import json
import sys


def _cmd_demo(args) -> int:
    from fused.demo import format_rows, run_demo

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = run_demo(device, tokens=args.tokens)
    print(format_rows(rows, device, args.tokens))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"wrote {args.json}")
    return 0


def _cmd_explain(args) -> int:
    import copy

    import fused
    from fused.demo import DemoModel, demo_configs

    cfgs = demo_configs()
    if args.config not in cfgs:
        print(f"unknown config {args.config!r}; choose from: {', '.join(cfgs)}", file=sys.stderr)
        return 2
    cfg, blocks = cfgs[args.config]
    model = copy.deepcopy(DemoModel())
    fused.quantize(model, cfg, blocks=blocks)
    fused.explain(model, device=args.device)
    return 0


def _cmd_bench(args) -> int:
    from fused.bench import main as bench_main

    return bench_main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fusedmlp", description="Fused quantized MLP toolkit")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="convert the embedded default model with each config; print a table")
    d.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    d.add_argument("--tokens", type=int, default=16, help="tokens per forward (default 16)")
    d.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    d.set_defaults(func=_cmd_demo)
    e = sub.add_parser("explain", help="convert the demo model with one config and show each op's path")
    e.add_argument("--config", default="int8 W8A16 (blocks)", help="a demo config name")
    e.add_argument("--device", default=None, help="device to plan for (default: where the weights are)")
    e.set_defaults(func=_cmd_explain)
    b = sub.add_parser("bench", help="time our configs against bf16 and torchao (CUDA graphs on a GPU)")
    b.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    b.add_argument("--blocks", default="llama,gpt", help="comma list of llama,gpt")
    b.add_argument("--m", default=None, help="comma list of M (default 1,16,128,1024,8192 on GPU; small on CPU)")
    b.add_argument("--d", type=int, default=None, help="model width (default 4096 on GPU, 256 on CPU)")
    b.add_argument("--h", type=int, default=None, help="hidden width (default 14336 llama / 16384 gpt on GPU)")
    b.add_argument("--full", action="store_true", help="full sizes on the CPU too")
    b.add_argument("--no-baselines", action="store_true", help="skip torch.compile and torchao baselines")
    b.add_argument("--host-profile", action="store_true", help="also cProfile eager calls (CUDA)")
    b.add_argument("--out", default="bench_out", help="folder for bench.json, bench.md, bench.png")
    b.set_defaults(func=_cmd_bench)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
