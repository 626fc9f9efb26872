"""ncu target (forty-third session): the Llama int8 W8A16 down projection at M=128 ([4096, 14336], the split planes as
256 rows), as Triton's split pick, the Gluon split-plane GEMM (ping-pong), its split-K "auto" form and the COOP split-K
form: one launch each after a warm-up. On the H100 (forty-third session) their graph times were 52.3 / 54.3 / 52.5 /
64.0 µs: split-K's twice the programs moved nothing. Hypothesis: the tiles re-read x from L2 once per 128 weight rows
(32 N tiles x 256 rows x 14336 B = 117 MB, plus the weight twice, 117 MB: ~235 MB of L2 -> SM bytes in ~52 µs, near
L2's bandwidth), so wider weight tiles, not more programs, would cut it. Read: l1tex__m_xbar2l1tex_read_bytes, L2
throughput %, tensor pipe %.
usage: python .ci/down128_ncu.py"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), ".ci"))
from ncu_target import warm_then_profile  # noqa: E402
from fused.kernels.act_split import act_split  # noqa: E402
from fused.kernels.w8_gemm import w8_gemm  # noqa: E402
from fused.kernels.w8a8_ws import w8a16_ws_split  # noqa: E402

M, D, H = 128, 4096, 14336
torch.manual_seed(0)
w = torch.randint(-127, 128, (D, H), device="cuda", dtype=torch.int8)
ws = torch.rand(D, device="cuda") * 1e-3 + 1e-4
x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
planes, ps = act_split(x)
xq, xs = act_split(x, interleave=True)
runs = [lambda: w8_gemm(planes, w, ws, None, "none", False, x_scale=ps, out_dtype=torch.bfloat16, x_split=True),
        lambda: w8a16_ws_split(xq, xs, w, ws),
        lambda: w8a16_ws_split(xq, xs, w, ws, config=dict(SPLIT_K="auto")),
        lambda: w8a16_ws_split(xq, xs, w, ws, config=dict(COOP=True, SPLIT_K="auto"))]
warm_then_profile(runs, "down128_ncu")
