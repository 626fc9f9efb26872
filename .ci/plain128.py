"""Plain (eager) calls of the Llama W8A8 blocks at M=128 against their CUDA-graph time, with the eager replay status
(forty-third session: on an H100 with FUSED_WS_SPLITK=1 the fp8 W8A8 block's plain call took 438-542 µs against 96 in a
graph, while the eager route timings put every Gluon form at 60-240 µs per layer, host-bound). Run with and without
FUSED_WS_SPLITK to see whether the default has it too.
usage: python .ci/plain128.py"""
import os
import sys

import torch
from torch import nn
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused import dispatch  # noqa: E402
from fused.demo import LlamaMLP  # noqa: E402

torch.manual_seed(0)
print("FUSED_WS_SPLITK", os.environ.get("FUSED_WS_SPLITK"), torch.cuda.get_device_name())
for name, cfg in (("fp8 W8A8", fused.FusedFloat8MLP()), ("int8 W8A8", fused.FusedInt8MLP(weight_only=False))):
    m = nn.Sequential(LlamaMLP(4096, 14336)).to(device="cuda", dtype=torch.bfloat16).eval()
    fused.quantize(m, cfg)
    x = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(4):
            m(x)
        torch.cuda.synchronize()
        plain = do_bench(lambda: m(x), warmup=25, rep=200) * 1e3
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(x)
        graph = do_bench(g.replay, warmup=25, rep=200) * 1e3
        dispatch.stats.clear()
        m(x)
        torch.cuda.synchronize()
    print(f"{name}: plain {plain:.1f} µs, graph {graph:.1f} µs, one plain call's paths {dict(dispatch.stats)}")
    print("  replay status", dispatch.replay_status(m))
    print("  picks", {k: v for k, v in dispatch.dense_route_picks("linear", m[0].down.qweight).items()},
          {k: v for k, v in dispatch.dense_route_picks("gated", m[0].gate_up.qweight).items()})
