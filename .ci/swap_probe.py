"""The transposed-product W8A16 kernel (fused.kernels.w8a16_swap) against the two widening routes of W8A16 at large M
(dispatch: widen + cuBLAS + scale_epilogue; widen + Triton's 16-bit w8_gemm) and against split activations below
dispatch.WIDEN_MIN_M, per layer of the Llama and GPT blocks, int8 and fp8 weights: CUDA-graph µs, three rounds
alternating the routes in one process, the swap output's SQNR against the reference, and the swap tuner's candidate
times. usage: python .ci/swap_probe.py [M,...] [fmt,...] [llama|gpt]"""
import os
import sys

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from fused import dispatch  # noqa: E402
from fused.kernels import tuning  # noqa: E402
from fused.kernels.w8a16_swap import w8a16_swap  # noqa: E402
from fused.reference import gated_ref, linear_ref  # noqa: E402
from lowbit import quantize_weight, sqnr  # noqa: E402

Ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1024,2048,8192").split(",")]
fmts = (sys.argv[2] if len(sys.argv) > 2 else "int8,float8_e4m3").split(",")
LAYERS = [("llama gate/up", 28672, 4096, True, False, "silu"), ("llama down", 4096, 14336, False, False, "none"),
          ("gpt up", 16384, 4096, False, True, "gelu_tanh"), ("gpt down", 4096, 16384, False, True, "none")]
if len(sys.argv) > 3:  # a model's layers only ("llama" / "gpt")
    LAYERS = [layer for layer in LAYERS if layer[0].startswith(sys.argv[3])]


torch.manual_seed(0)
for fmt in fmts:
    for name, R, K, gated, has_bias, act in LAYERS:
        q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
        b = torch.randn(R, device="cuda") if has_bias else None
        for M in Ms:
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            if M >= dispatch.WIDEN_MIN_M:
                routes = {"widen+cublas": lambda: dispatch._cublas_w8a16(x, q, s, b, act, gated),
                          "widen+triton": lambda: dispatch._triton_dense("triton:w8_gemm", x, q, s, b, act, gated,
                                                                         False)}
            else:  # the default path there: split activations (act_split + the split GEMM)
                split = dispatch._cuda_path("gated" if gated else "linear", M, False, q.dtype, x.dtype)
                routes = {"split": lambda: dispatch._triton_dense(split, x, q, s, b, act, gated, False)}
            routes["swap"] = lambda: w8a16_swap(x, q, s, b, act, gated)
            ref = (gated_ref if gated else linear_ref)(x, q, s, b, act).float()
            db = sqnr(ref, routes["swap"]().float())  # the first call tunes the swap tiles (FUSED_TUNE unset)
            gs = {k: dispatch._graph_replay(f) for k, f in routes.items()}
            rep = 1000 if M >= 4096 else 200
            res = {k: [] for k in gs}
            for _ in range(3):
                for k, g in gs.items():
                    res[k].append(do_bench(g.replay, warmup=100, rep=rep, return_mode="median") * 1e3)
            print(f"{fmt:12s} {name:14s} M={M:5d} " + "  ".join(
                f"{k} {' / '.join(f'{t:.1f}' for t in v)}" for k, v in res.items()) + f"  swap SQNR {db:.1f} dB",
                flush=True)
            key = next((k for k in tuning.timings if k[0] == "w8a16_swap" and k[2] == (R // 2 if gated else R)
                        and k[3] == K and k[5] == q.dtype and k[1] == tuning.m_bucket(M)), None)
            if key:
                best = sorted(tuning.timings[key], key=lambda r: r[0])[:3]
                print("    swap tiles (tuner, L2 flushed): " + "; ".join(
                    f"{t} µs {c['BLOCK_N']}x{c['BLOCK_M']}x{c['BLOCK_K']} s{c['num_stages']} w{c['num_warps']}"
                    f"{' split ' + str(c['SPLIT_K']) if c['SPLIT_K'] > 1 else ''}{' IL' if c.get('IL') else ''}"
                    f"{' PERSIST' if c.get('PERSIST') else ''}"
                    for t, c in best), flush=True)
            del gs
