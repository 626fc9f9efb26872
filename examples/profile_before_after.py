"""Profile a model before and after conversion: kernel launches, time, idle, memory, the path each op took.

    python examples/profile_before_after.py          # CPU: a small demo model (2 blocks, d 256), 16 tokens
    python examples/profile_before_after.py --full   # GPU: one Llama-3-8B MLP block (d 4096, h 14336), bf16

Writes <out>/profile.json, profile.png (before vs after bars) and Chrome traces trace_before.json /
trace_after.json (open in https://ui.perfetto.dev). On the CPU there are no kernels: "launches" are the aten
ops called from Python, and the fused ops run the pure-torch reference; the GPU run is the one that shows
launches and time saved.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from fused.demo import DemoModel, Layer, LlamaMLP  # noqa: E402
from fused.profile import before_after  # noqa: E402
from fused.sweep import config_names, get_config  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="a Llama-3-8B MLP block on a CUDA GPU")
    p.add_argument("--config", default="int8 W8A16", help=f"one of: {', '.join(config_names())}")
    p.add_argument("--tokens", type=int, default=None, help="tokens per forward (default 16; --full 1 = decode)")
    p.add_argument("--forwards", type=int, default=None, help="profiled forwards (default 3; --full 20)")
    p.add_argument("--out", default="out/profile-example", help="output directory")
    args = p.parse_args(argv)
    if args.full and not torch.cuda.is_available():
        p.error("--full needs a CUDA GPU")
    try:
        entry = get_config(args.config)
    except ValueError as e:
        p.error(str(e))
    if entry.make is None:
        p.error(f"config {entry.name!r} converts nothing")

    torch.manual_seed(0)
    if args.full:
        device, tokens, forwards = "cuda", args.tokens or 1, args.forwards or 20
        with torch.device(device):
            model = Layer(LlamaMLP(4096, 14336)).to(torch.bfloat16).eval()
        d = 4096
    else:
        device, tokens, forwards = "cpu", args.tokens or 16, args.forwards or 3
        model = DemoModel(256, 704, layers=2).to(torch.bfloat16).eval()
        d = 256
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)
    cmp = before_after(model, x, entry.make(), blocks=entry.blocks, out_dir=args.out, label=entry.name,
                       forwards=forwards)
    print(cmp.format())
    print()
    print(cmp.before.format())
    print(cmp.after.format())
    print(f"wrote {args.out}/profile.json, profile.png, trace_before.json, trace_after.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
