"""Where a W8A8 block's spread at large M comes from (twenty-seventh session: the fp8 Llama block at M=8192 took
2671 µs in one process and 2436 in the next with the same routes; in one process its graph replay took 2671 and its
plain call 2476). One process, routes as shipped: for each M, N fresh CUDA graphs of the block (each capture puts the
intermediates at new addresses), each timed as the bench times it, then the per-kernel GPU µs of a few replays of it
from the profiler (which kernel moves), and the plain call between captures.
usage: python .ci/spread_probe.py [M,...] [fp8|int8] [captures]"""
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

Ms = [int(m) for m in (sys.argv[1] if len(sys.argv) > 1 else "8192").split(",")]
fmt = sys.argv[2] if len(sys.argv) > 2 else "fp8"
N = int(sys.argv[3]) if len(sys.argv) > 3 else 5
base = make_block("llama", 4096, 14336, "cuda")
cfg = fused.FusedFloat8MLP(weight_only=False) if fmt == "fp8" else fused.FusedInt8MLP(weight_only=False)
model = fused.quantize(copy.deepcopy(base), cfg, blocks=True)


def kernels(g, reps=5):
    """GPU µs per kernel name (mean over reps) inside graph replays."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    out = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out[e.name[:60]] += e.device_time / reps
    return out


with torch.no_grad():
    for M in Ms:
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        model(x)  # routes and configs
        torch.cuda.synchronize()
        rows = []
        for i in range(N):
            keep = [torch.empty(int(torch.randint(1, 64, ()).item()) * 2**20, dtype=torch.uint8, device="cuda")
                    for _ in range(i)]  # shifts the graph pool's addresses capture to capture
            g = dispatch._graph_replay(lambda: model(x))
            gpu = do_bench(g.replay, warmup=25, rep=100, return_mode="median") * 1e3
            gpu_long = do_bench(g.replay, warmup=25, rep=1000, return_mode="median") * 1e3
            plain = do_bench(lambda: model(x), warmup=25, rep=100, return_mode="median") * 1e3
            ks = kernels(g)
            rows.append((gpu, gpu_long, plain, ks))
            print(f"M={M} {fmt} capture {i}: graph {gpu:.1f} µs (rep 1 s: {gpu_long:.1f}), plain {plain:.1f}, "
                  f"kernels sum {sum(ks.values()):.1f}", flush=True)
            for k, v in sorted(ks.items(), key=lambda kv: -kv[1])[:6]:
                print(f"      {v:8.1f}  {k}", flush=True)
            del g, keep
        gs = [r[0] for r in rows]
        print(f"M={M} {fmt} SUMMARY graph µs over {N} captures: " + " / ".join(f"{v:.1f}" for v in gs) +
              f"; spread {max(gs) - min(gs):.1f}", flush=True)
