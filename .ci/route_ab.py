"""A/B of a W8A8 block's first-layer route ("h out": Triton GEMM + act_quant(h), or cuBLAS + epilogue_quant), in one
process, alternating: the route timing picks by a few % on short do_bench runs, the block is timed sustained.
usage: python .ci/route_ab.py [M,...] [fp8|int8]  (H200; prints graph µs per forced pick, bf16 eager beside)."""
import copy
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import _time, make_block  # noqa: E402
from lowbit.metrics import sqnr  # noqa: E402

Ms = [int(m) for m in (sys.argv[1] if len(sys.argv) > 1 else "8192").split(",")]
fmt = sys.argv[2] if len(sys.argv) > 2 else "fp8"
base = make_block("llama", 4096, 14336, "cuda")
cfg = fused.FusedFloat8MLP(weight_only=False) if fmt == "fp8" else fused.FusedInt8MLP(weight_only=False)
model = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
with torch.no_grad():
    for M in Ms:
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        ref = base(x)
        model(x)  # times the routes
        keys = [k for k in dispatch._dense_routes if k[-1] == "h out" and k[1] == dispatch.m_bucket(M)]
        print(f"M={M} {fmt}: measured picks", {k[0]: dispatch._dense_routes[k] for k in keys}, flush=True)
        res = {}
        for rnd in range(3):
            for pick in ("triton", "cublas", "bf16"):
                if pick == "bf16":
                    t = _time(lambda: base(x), x.device)[0]
                else:
                    for k in keys:
                        dispatch._dense_routes[k] = (pick, pick)
                    dispatch.epoch += 1
                    out = model(x)
                    err = sqnr(ref, out)
                    t = _time(lambda: model(x), x.device)[0]
                    print(f"   round {rnd} {pick:6s} {t:8.1f} us  sqnr vs bf16 {float(err):.1f} dB", flush=True)
                res.setdefault(pick, []).append(t)
        print(f"M={M} {fmt} graph µs (3 rounds, alternating): " +
              "; ".join(f"{k} {' / '.join(f'{v:.1f}' for v in vs)}" for k, vs in res.items()), flush=True)
