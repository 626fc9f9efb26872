"""The warp-specialized Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py, thirtieth session) on the H200: correctness
against fp32 torch (odd M / N / K, SQNR), then Llama's layers at large M against widen + cuBLAS (what W8A16 runs
there now) and bf16 cuBLAS on a bf16 copy (bf16 eager's layer: the rate to reach), do_bench µs (L2 flushed), 3
alternating rounds. usage: python .ci/ws_probe.py [M,..] [cfg overrides k=v ...]"""
import json
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused.kernels.scale_epilogue import scale_epilogue  # noqa: E402
from fused.kernels.w8a16_ws import (default_config, interleave_gate_up, pp_config, swap_config, w8a16_ws,  # noqa: E402
                                   w8a16_ws_pp, w8a16_ws_swap)
from fused.kernels.widen import widen  # noqa: E402
from lowbit.metrics import sqnr  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1024,2048,8192").split(",")]
over = {k: int(v) for k, v in (a.split("=") for a in sys.argv[2:])}


def ref(x, q, s):
    return (x.float() @ q.float().t()) * s


torch.manual_seed(0)
cfgs = [dict(default_config(), STAGES=5)] + [
    dict(swap_config(), SWAP=True, **c) for c in (dict(), dict(STAGES=6), dict(BLOCK_T=256), dict(BLOCK_K=128))] + [
    dict(pp_config(), PP=True)]
if os.environ.get("WS_CFGS"):  # a JSON list of swap_config overrides (pp_config's with "PP": true), e.g.
    # '[{"BLOCK_T": 256, "STAGES": 5}, {"PP": true}]'
    cfgs = [dict(pp_config() if c.get("PP") else swap_config(), SWAP=not c.get("PP"), **c)
            for c in json.loads(os.environ["WS_CFGS"])]
cfgs = [dict(c, **over) for c in cfgs]


def run(x, q, s, c):
    if c.get("PP"):
        return w8a16_ws_pp(x, q, s, c)
    return w8a16_ws_swap(x, q, s, c) if c.get("SWAP") else w8a16_ws(x, q, s, c)


def label(c):
    if c.get("PP"):
        return f"pp {c['BLOCK_N']}x{c['BLOCK_T']}x{c['BLOCK_K']} s{c['STAGES']}"
    if c.get("SWAP"):
        return f"swap {c['BLOCK_N']}x{c['BLOCK_T']}x{c['BLOCK_K']} s{c['STAGES']}"
    return f"ws {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} s{c['STAGES']}"


for M, N, K in ((1, 64, 64), (300, 4096 + 40, 512 + 16), (1024, 4096, 14336)):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    s = torch.rand(N, device="cuda") * 0.01
    for c in cfgs:
        y = run(x, q, s, c)
        print(f"correct M={M} N={N} K={K} {label(c)}: SQNR {sqnr(ref(x, q, s), y.float()):.1f} dB")

# the gated two-consumer form (gate and up rows interleaved by 8, SiLU·mul in its epilogue) against the reference
x = torch.randn(300, 528, device="cuda", dtype=torch.bfloat16)
q = torch.randint(-127, 128, (2 * 208, 528), device="cuda", dtype=torch.int8)
s = torch.rand(2 * 208, device="cuda") * 0.01
r = ref(x, q, s)
r = torch.nn.functional.silu(r[:, :208]) * r[:, 208:]
y = w8a16_ws_pp(x, interleave_gate_up(q), interleave_gate_up(s), gated=True)
print(f"correct gated pp M=300 H=208 K=528: SQNR {sqnr(r, y.float()):.1f} dB")

for name, N, K in (("down", 4096, 14336), ("gate/up", 28672, 4096)):
    q = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
    s = torch.rand(N, device="cuda") * 0.01
    wb = widen(q)
    for M in Ms:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        runs = {"bf16 cuBLAS (no widening)": lambda: x @ wb.t(),
                "widen + cuBLAS": lambda: (x @ widen(q).t())}
        for c in cfgs:
            runs[label(c)] = (lambda c=c: run(x, q, s, c))
        if name == "gate/up":  # the gated layer as W8A16 runs it now, against the gated two-consumer form
            qi, si = interleave_gate_up(q), interleave_gate_up(s)
            runs["widen + cuBLAS + scale_epilogue (gated)"] = lambda: scale_epilogue(
                x @ widen(q).t(), None, s, None, "silu", True, torch.bfloat16, m=M)
            runs["pp gated"] = lambda: w8a16_ws_pp(x, qi, si, gated=True)
        t = {k: [] for k in runs}
        for _ in range(3):
            for k, f in runs.items():
                t[k].append(do_bench(f, warmup=20, rep=100) * 1e3)
        flop = 2 * M * N * K
        print(f"Llama {name} M={M}: " + "; ".join(f"{k} {min(v):.1f} µs ({flop / min(v) / 1e6:.0f} TFLOP/s)"
                                                  for k, v in t.items()))
