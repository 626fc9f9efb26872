"""The warp-specialized Gluon W8A16 GEMM (fused/kernels/w8a16_ws.py) on the H200: correctness against fp32 torch (odd
M / N / K, SQNR), then Llama's layers at large M against widen + cuBLAS (the shipped W8A16 route there) and bf16
cuBLAS on a bf16 copy (bf16 eager's layer: the rate to reach), do_bench µs (L2 flushed), 3 alternating rounds.
usage: WS_CFGS='[{"STAGES": 3}, ...]' python .ci/ws_probe.py [M,..]   (config overrides; keys of older sessions'
forms, PP / ORDERED, are dropped)"""
import json
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused.kernels.scale_epilogue import scale_epilogue  # noqa: E402
from fused.kernels.w8a16_ws import default_config, w8a16_ws  # noqa: E402
from fused.kernels.widen import widen  # noqa: E402
from lowbit.metrics import sqnr  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1024,2048,8192").split(",")]
FP8 = os.environ.get("WS_FP8") == "1"  # e4m3 weights instead of int8


def weight(N, K):
    if FP8:  # every e4m3 value but NaN
        q = torch.randint(0, 256, (N, K), device="cuda", dtype=torch.uint8)
        return torch.where((q & 0x7F) == 0x7F, q - 1, q).view(torch.float8_e4m3fn)
    return torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)


cfgs = [{k: v for k, v in c.items() if k in default_config()} for c in json.loads(os.environ.get("WS_CFGS", "[{}]"))]


def label(c, M=None):
    c = dict(default_config(M), **c)
    bits, pad = " bits" if c["FP8_BITS"] else "", f" pad{c['U_PAD']}" if c["U_PAD"] else ""
    halves = " halves" if c["A_HALVES"] else ""
    persist = f" persist{'' if c['PERSIST'] is True else c['PERSIST']}" if c["PERSIST"] else ""
    return f"ws {c['BLOCK_T']}x{c['BLOCK_K']} s{c['STAGES']}/{c['GATED_STAGES']}{bits}{pad}{halves}{persist}"


def ref(x, q, s):
    return (x.float() @ q.float().t()) * s


torch.manual_seed(0)
for M, N, K in ((1, 64, 64), (300, 4096 + 40, 512 + 16), (1024, 4096, 14336)):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    q = weight(N, K)
    s = torch.rand(N, device="cuda") * 0.01
    for c in cfgs:
        r = ref(x, q, s)
        rg = torch.nn.functional.silu(r[:, :N // 2]) * r[:, N // 2:]
        yg = w8a16_ws(x, q, s, act="silu", gated=True, config=c)
        print(f"correct M={M} N={N} K={K} {label(c, M)}: SQNR {sqnr(r, w8a16_ws(x, q, s, config=c).float()):.1f} dB;"
              f" gated {sqnr(rg, yg.float()):.1f} dB")

for name, N, K in (("down", 4096, 14336), ("gate/up", 28672, 4096)):
    q = weight(N, K)
    s = torch.rand(N, device="cuda") * 0.01
    wb = widen(q)
    for M in Ms:
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        runs = {"bf16 cuBLAS (no widening)": lambda: x @ wb.t()}
        if name == "down":
            runs["widen + cuBLAS + scale_epilogue"] = lambda: scale_epilogue(
                x @ widen(q).t(), None, s, None, "none", False, torch.bfloat16, m=M)
            for c in cfgs:
                runs[label(c, M)] = (lambda c=c: w8a16_ws(x, q, s, config=c))
        else:  # the gated layer
            runs["widen + cuBLAS + scale_epilogue (gated)"] = lambda: scale_epilogue(
                x @ widen(q).t(), None, s, None, "silu", True, torch.bfloat16, m=M)
            for c in cfgs:
                runs[label(c, M) + " gated"] = (lambda c=c: w8a16_ws(x, q, s, act="silu", gated=True, config=c))
        t = {k: [] for k in runs}
        for _ in range(3):
            for k, f in runs.items():
                t[k].append(do_bench(f, warmup=20, rep=100) * 1e3)
        flop = 2 * M * N * K
        print(f"Llama {name} M={M}: " + "; ".join(f"{k} {min(v):.1f} µs ({flop / min(v) / 1e6:.0f} TFLOP/s)"
                                                  for k, v in t.items()))
