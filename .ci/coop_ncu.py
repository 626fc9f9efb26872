"""ncu target (fortieth session, NOTES lead 0 after the fortieth): the fp8 W8A8 gated gate/up product at M=1024 as the
block runs it (the Gluon COOP GEMM with its SiLU-mul epilogue, h bf16) and as cuBLAS computes it (torch._scaled_mm
rowwise, y of both halves in bf16, no epilogue), one launch each after a warm-up, so `ncu --launch-skip` picks them:
their DRAM / L2 bytes, L2 hit rate and SM throughput, for the 143 vs 133 mJ gap at the power cap.
usage: python .ci/coop_ncu.py"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from ncu_target import warm_then_profile  # noqa: E402
from fused.kernels.act_quant import act_quant  # noqa: E402
from fused.kernels.w8a8_ws import w8a8_ws  # noqa: E402

M, D, H = 1024, 4096, 14336
torch.manual_seed(0)
w = (torch.randn(2 * H, D, device="cuda") * 0.5).to(torch.float8_e4m3fn)
s = torch.rand(2 * H, device="cuda") * 0.01
xq, xs = act_quant(torch.randn(M, D, device="cuda", dtype=torch.bfloat16), fp8=True)
runs = [lambda: w8a8_ws(xq, xs, w, s, None, "silu", True, config=dict(COOP=True)),
        lambda: torch._scaled_mm(xq, w.t(), xs[:, None], s[None, :], out_dtype=torch.bfloat16, use_fast_accum=True)]
warm_then_profile(runs, "coop_ncu")
