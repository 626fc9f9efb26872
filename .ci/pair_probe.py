"""torch.compile's gate / up pair (gated_pair) at large M against the block conversion: the Llama block converted per
Linear and compiled (fullgraph, dynamic), beside the block conversion, int8 and fp8 W8A16; CUDA-graph µs (1 s windows)
and GPU µs per kernel, plus which path each dense op took (dispatch.stats). Twenty-eighth session: before it the pair
ran the mixed-input GEMM at M >= 1024 (about half rate) and had no cuBLAS route (W8A16 or W8A8). usage: python .ci/pair_probe.py [M,..]
(twenty-ninth: also kernel launches per forward, memsets and copies left out)"""
import copy
import os
import sys
from collections import defaultdict

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.bench import make_block  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1024,8192").split(",")]
base = make_block("llama", 4096, 14336, "cuda")
models = {}
CONFIGS = {"int8 W8A16": fused.FusedInt8MLP(), "fp8 W8A16": fused.FusedFloat8MLP(weight_only=True),
           "fp8 W8A8": fused.FusedFloat8MLP(), "int8 W8A8": fused.FusedInt8MLP(weight_only=False)}
wanted = os.environ.get("PAIR_CONFIGS", "int8 W8A16,fp8 W8A16,fp8 W8A8").split(",")  # (int8 W8A8 since the 35th)
for label, cfg in ((k, CONFIGS[k]) for k in wanted):
    if os.environ.get("PAIR_BLOCK", "1") == "1":  # PAIR_BLOCK=0: the per-Linear models only
        models[f"{label} block"] = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
    models[f"{label} per-Linear + compile"] = torch.compile(fused.quantize(copy.deepcopy(base), cfg, blocks=False),
                                                            fullgraph=True, dynamic=True)
models["bf16 eager"] = base
with torch.no_grad():
    for M in Ms:
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        ref = base(x).float()
        for name, model in models.items():
            dispatch.stats.clear()
            out = model(x)
            model(x)
            paths = sorted(f"{op}:{p.split(':', 1)[-1]}" for (op, p), n in dispatch.stats.items() if n)
            g = dispatch._graph_replay(lambda: model(x))
            t = do_bench(g.replay, warmup=200, rep=1000, return_mode="median") * 1e3
            err = (out.float() - ref).pow(2).mean() / ref.pow(2).mean()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    g.replay()
                torch.cuda.synchronize()
            per = defaultdict(float)
            launches = 0
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    per[e.name[:60]] += e.device_time / 3
                    launches += "Memset" not in e.name and "Memcpy" not in e.name
            print(f"M={M} {name}: graph {t:.1f} µs, {launches / 3:.0f} kernels per forward, SQNR vs bf16 "
                  f"{-10 * torch.log10(err).item():.1f} dB; paths {paths}", flush=True)
            print("    " + "; ".join(f"{v:.1f} {k}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:6]),
                  flush=True)
            del g
