"""Why torchao's fp8 weight-only + compile beats our W8A16 at M=1024 (twenty-seventh session: Llama 691.7 vs 699.5 /
702.5 µs, GPT 526.4 vs 550.7 / 551.6). One process, both blocks: the CUDA-graph time (1 s windows) and the GPU µs per
kernel over a few replays, ours (int8 and fp8 W8A16, block conversion) beside torchao's.
usage: python .ci/wo_vs_torchao.py [M] [llama|gpt]"""
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

M = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
kind = sys.argv[2] if len(sys.argv) > 2 else "llama"
d, h = (4096, 14336) if kind == "llama" else (4096, 16384)
base = make_block(kind, d, h, "cuda")


def torchao_fp8_wo():
    from torchao.quantization import Float8WeightOnlyConfig, quantize_

    m = copy.deepcopy(base)
    quantize_(m, Float8WeightOnlyConfig())
    return torch.compile(m)


models = {"bf16 eager": base,
          "ours int8 W8A16": fused.quantize(copy.deepcopy(base), fused.FusedInt8MLP(), blocks=True),
          "ours fp8 W8A16": fused.quantize(copy.deepcopy(base), fused.FusedFloat8MLP(weight_only=True), blocks=True),
          "torchao fp8 wo + compile": torchao_fp8_wo()}
x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    for name, model in models.items():
        model(x)
        model(x)
        g = dispatch._graph_replay(lambda: model(x))
        t = do_bench(g.replay, warmup=25, rep=1000, return_mode="median") * 1e3
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                g.replay()
            torch.cuda.synchronize()
        per = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name[:90]] += e.device_time / 5
        print(f"{kind} M={M} {name}: graph {t:.1f} µs, kernels sum {sum(per.values()):.1f} µs, {len(per)} kernels",
              flush=True)
        for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"    {v:8.1f}  {k}", flush=True)
        del g
