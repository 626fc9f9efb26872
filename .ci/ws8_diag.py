"""Which shapes and configs of the Gluon fp8 W8A8 GEMM (fused/kernels/w8a8_ws.py) run and match the reference: each
case in a subprocess of its own (a faulting launch ends only that one), CUDA_LAUNCH_BLOCKING on.
usage: python .ci/ws8_diag.py (GPU only)"""
import json
import os
import subprocess
import sys

CASES = [  # M, N (gated: 2H), K, gated, config
    (256, 512, 1024, False, {"PROGRAMS": 1}), (128, 256, 1024, True, {"PROGRAMS": 1}),
    (17, 4136, 528, False, {"PROGRAMS": 3}), (1024, 28672, 4096, True, None), (1024, 4096, 14336, False, None),
]
ONE = """
import sys, json, torch
sys.path.insert(0, '.')
from fused.kernels.act_quant import act_quant
from fused.kernels.w8a8_ws import w8a8_ws
from fused.reference import gated_ref, linear_ref
from lowbit.metrics import sqnr
M, N, K, gated, cfg = json.loads(sys.argv[1])
torch.manual_seed(0)
x = torch.randn(M, K, device='cuda', dtype=torch.bfloat16)
xq, xs = act_quant(x, fp8=True)
q = (torch.randn(N, K, device='cuda') * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
s = torch.rand(N, device='cuda') * 0.01 + 1e-3
y = w8a8_ws(xq, xs, q, s, None, 'silu' if gated else 'none', gated, config=cfg)
torch.cuda.synchronize()
xf = xq[:M].float() * xs[:, None]
ref = (gated_ref if gated else linear_ref)(xf, q, s, None, 'silu' if gated else 'none')
print(f'ok sqnr {sqnr(ref, y.float()):.1f} nan {bool(torch.isnan(y).any())}')
"""
for case in CASES:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    try:
        r = subprocess.run([sys.executable, "-c", ONE, json.dumps(case)], capture_output=True, text=True, timeout=60,
                           env=env)
        out = (r.stdout.strip().splitlines() or [""])[-1] if r.returncode == 0 else \
            "FAIL " + " | ".join(ln for ln in r.stderr.splitlines() if "Error" in ln)[-300:]
    except subprocess.TimeoutExpired:
        out = "TIMEOUT (hang?)"
    print(case, out, flush=True)
