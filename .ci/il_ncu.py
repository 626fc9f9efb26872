"""ncu target (twenty-ninth session): w8a16_swap's IL gated tile (Llama gate/up) and its down tile at M=1024, int8,
the same 128x256x64 3-stage 8-warp tile: one launch each, IL first. Why the IL gate/up took 515 µs where the down's
per-K-step rate predicts ~400 (identical SASS loops, 291 instructions per K step)."""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from fused.kernels.w8a16_swap import w8a16_swap  # noqa: E402
from lowbit import quantize_weight  # noqa: E402

torch.manual_seed(0)
cfg = dict(BLOCK_N=128, BLOCK_M=256, BLOCK_K=64, GROUP_N=8, SPLIT_K=1, num_stages=3, num_warps=8)
for R, K, gated in ((28672, 4096, True), (4096, 14336, False)):
    q, s = quantize_weight(torch.randn(R, K, device="cuda"), "int8")
    x = torch.randn(1024, K, device="cuda", dtype=torch.bfloat16)
    w8a16_swap(x, q, s, None, "silu" if gated else "none", gated, config=dict(cfg, IL=gated))
    torch.cuda.synchronize()
