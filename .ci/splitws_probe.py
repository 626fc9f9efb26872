"""Feasibility of a Gluon split-plane W8A16 route at M=128 (NOTES lead 1 after the forty-first): the W8A16 split GEMMs
at M=128 are two 8-bit planes per token, i.e. 8-bit x 8-bit GEMMs of 256 rows. Times, do_bench µs (L2 flushed),
the Llama gate/up (gated, [28672, 4096]) and down ([4096, 14336]) shapes:
  * Triton's shipped split picks at M=128 (w8_gemm on act_split's planes: what the W8A16 block runs now);
  * the Gluon split GEMM (w8a8_ws.w8a16_ws_split: the planes interleaved as 256 rows of one 8-bit GEMM, combined
    per token in the epilogue), ping-pong and COOP, a few tile / stage choices, each checked (SQNR) against Triton's;
  * cuBLAS's int8 / fp8 GEMM of the same 256 x K x N product (torch._int_mm / torch._scaled_mm).
Measured (forty-first session, examples/results/h200/forty-first/splitws_probe.txt): do_bench's back-to-back calls
are host-bound for every Gluon form here (93-150 µs: the launcher's Python, ~90 µs a call), so the route timings in a
CUDA graph (the bench's) are the ones to read; the SQNR columns stand (int8 bit-equal to Triton's, "inf").
usage: python .ci/splitws_probe.py"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused.kernels.act_split import act_split  # noqa: E402
from fused.kernels.w8_gemm import w8_gemm  # noqa: E402
from fused.kernels.w8a8_ws import w8a16_ws_split  # noqa: E402
from lowbit.metrics import sqnr  # noqa: E402

D, H, M = 4096, 14336, 128
CFGS = [("pp t128", {}), ("pp t64", dict(BLOCK_T=64)), ("pp t128 s6", dict(STAGES=6)),
        ("coop t128", dict(COOP=True)), ("coop t64", dict(COOP=True, BLOCK_T=64)),
        ("coop t128 s5", dict(COOP=True, STAGES=5))]


def t(fn):
    return min(do_bench(fn, warmup=25, rep=200) for _ in range(3)) * 1e3


torch.manual_seed(0)
rows = []
for fmt in (torch.int8, torch.float8_e4m3fn):
    for name, N, K, gated in (("gated", 2 * H, D, True), ("down", D, H, False)):
        if fmt == torch.int8:
            w = torch.randint(-127, 128, (N, K), device="cuda", dtype=torch.int8)
        else:
            w = (torch.randn(N, K, device="cuda") * 60).clamp(-448, 448).to(fmt)
        ws = torch.rand(N, device="cuda") * 1e-3 + 1e-4
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        planes, ps = act_split(x, fp8=fmt != torch.int8)
        act = "silu" if gated else "none"
        row = {"fmt": str(fmt).split(".")[-1], "layer": name}
        split = lambda: w8_gemm(planes, w, ws, None, act, gated, x_scale=ps,  # noqa: E731
                                out_dtype=torch.bfloat16, x_split=True)
        want = split()
        row["triton split M=128"] = t(split)
        xq, xs = act_split(x, fp8=fmt != torch.int8, interleave=True)  # 256 rows: the planes as tokens
        assert torch.equal(xs, ps) and torch.equal(xq.view(M, 2, K).transpose(0, 1).view(torch.uint8),
                                                   planes.view(torch.uint8))
        for label, cfg in CFGS:
            try:
                got = w8a16_ws_split(xq, xs, w, ws, None, act, gated, config=cfg)
                row[f"gluon {label}"] = t(lambda: w8a16_ws_split(xq, xs, w, ws, None, act, gated, config=cfg))
                row[f"sqnr {label}"] = round(sqnr(want.float(), got.float()), 1)
            except Exception as e:  # noqa: BLE001  (a config that does not build: say so, go on)
                row[f"gluon {label}"] = f"{type(e).__name__}: {str(e)[:60]}"
        wt = w.t()
        if fmt == torch.int8:
            row["cublas 256 rows"] = t(lambda: torch._int_mm(xq, wt))
        else:
            one = torch.ones((), device="cuda")
            row["cublas 256 rows"] = t(lambda: torch._scaled_mm(xq, wt, one, one, out_dtype=torch.bfloat16))
        row["act_split"] = t(lambda: act_split(x, fp8=fmt != torch.int8))
        row["act_split interleaved"] = t(lambda: act_split(x, fp8=fmt != torch.int8, interleave=True))
        rows.append(row)
        print(row, flush=True)

print("\n| fmt | layer | " + " | ".join(k for k in rows[0] if k not in ("fmt", "layer")) + " |")
for r in rows:
    print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
