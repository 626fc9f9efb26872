"""ncu target (thirty-first session): one launch each of the Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py: Llama down
and gated gate/up at M=1024) and bf16 cuBLAS on a bf16 copy of the down weight (the rate to reach), after a warm-up
call each, so `ncu --kernel-name regex:... --launch-skip` can pick them. usage: python .ci/ws_ncu.py"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from ncu_target import warm_then_profile  # noqa: E402
from fused.kernels.w8a16_ws import w8a16_ws  # noqa: E402
from fused.kernels.widen import widen  # noqa: E402

M = 1024
qd = torch.randint(-127, 128, (4096, 14336), device="cuda", dtype=torch.int8)
sd = torch.rand(4096, device="cuda") * 0.01
qg = torch.randint(-127, 128, (28672, 4096), device="cuda", dtype=torch.int8)
sg = torch.rand(28672, device="cuda") * 0.01
wb = widen(qd)
xd = torch.randn(M, 14336, device="cuda", dtype=torch.bfloat16)
xg = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
runs = [lambda: w8a16_ws(xd, qd, sd), lambda: w8a16_ws(xg, qg, sg, act="silu", gated=True), lambda: xd @ wb.t()]
warm_then_profile(runs, "ws_ncu")
