"""H200 diagnostics: per-kernel device time of our Llama block per config and M, act_quant variants,
Triton launcher internals. Writes to $OUT/diag.txt. Not part of CI."""
import inspect
import os
import sys
import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.getcwd())
import fused  # noqa: E402
from fused.bench import make_block  # noqa: E402
from fused.kernels import act_quant as aq  # noqa: E402

OUT = os.environ.get("OUT", "out")
log = open(os.path.join(OUT, "diag.txt"), "a")


def p(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    log.write(s + "\n")
    log.flush()


def kernels(model, x, iters=5):
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(iters):
                model(x)
            torch.cuda.synchronize()
    rows = []
    for e in pr.key_averages():
        if e.self_device_time_total > 0:
            rows.append((e.self_device_time_total / iters, e.count / iters, e.key[:90]))
    rows.sort(reverse=True)
    tot = sum(r[0] for r in rows)
    return tot, rows


what = sys.argv[1] if len(sys.argv) > 1 else "kernels,actq,launcher"
if "kernels" in what:
    base = make_block("llama", 4096, 14336, "cuda")
    cfgs = {"int8 W8A16": fused.FusedInt8MLP(), "int8 W8A8": fused.FusedInt8MLP(weight_only=False),
            "fp8 W8A8": fused.FusedFloat8MLP()}
    import copy
    for name, cfg in cfgs.items():
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        for M in (1, 16, 128, 1024, 8192):
            if name == "int8 W8A16" and M == 8192:
                continue
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            tot, rows = kernels(m, x)
            p(f"== {name} M={M}: kernel sum {tot:.1f} us")
            for t, c, k in rows[:6]:
                p(f"   {t:9.1f} us  x{c:.0f}  {k}")
        del m
        torch.cuda.empty_cache()
    from fused.kernels import tuning
    for k, v in tuning.timings.items():
        p("timings", k, sorted(v, key=lambda t: t[0])[:4])

if "actq" in what:
    from triton.testing import do_bench
    for K in (4096, 14336):
        x = torch.randn(8192, K, device="cuda", dtype=torch.bfloat16)
        for fp8 in (False, True):
            t = do_bench(lambda: aq.act_quant(x, fp8), warmup=10, rep=50)
            gb = x.numel() * 3 / 1e9
            p(f"act_quant M=8192 K={K} fp8={fp8}: {t*1e3:.1f} us ({gb / (t * 1e-3) / 1e3:.2f} TB/s)")
            q = torch.empty((8192, K), device="cuda", dtype=torch.float8_e4m3fn if fp8 else torch.int8)
            qv = q.view(torch.uint8) if fp8 else q
            s = torch.empty(8192, device="cuda", dtype=torch.float32)
            for block, warps in ((16384, 16), (16384, 32), (4096, 8), (2048, 4), (8192, 8)):
                if block < K and block > 8192:
                    continue
                def f():
                    aq._act_quant_kernel[(8192,)](x, qv, s, K, x.stride(0), x.stride(1), qv.stride(0),
                                                  QMAX=448.0 if fp8 else 127.0, MIN_S=1e-12, FP8=fp8,
                                                  BLOCK_K=min(block, triton.next_power_of_2(K)),
                                                  ONE_PASS=K <= block, num_warps=warps)
                t = do_bench(f, warmup=10, rep=50)
                p(f"    block {block} warps {warps}: {t*1e3:.1f} us")

if "host" in what:
    import cProfile
    import io
    import pstats

    from fused.kernels import launch
    base = make_block("llama", 4096, 14336, "cuda")
    import copy
    for name, cfg in (("int8 W8A16", fused.FusedInt8MLP()), ("fp8 W8A8", fused.FusedFloat8MLP())):
        m = fused.quantize(copy.deepcopy(base), cfg, blocks=True)
        for M in (1, 128):
            x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                for _ in range(5):
                    m(x)
                torch.cuda.synchronize()
                c0 = dict(launch.counts)
                t = time.perf_counter()
                for _ in range(300):
                    m(x)
                host = (time.perf_counter() - t) / 300 * 1e6
                torch.cuda.synchronize()
                tot = (time.perf_counter() - t) / 300 * 1e6
                p(f"{name} M={M}: host {host:.1f} us/call, with sync {tot:.1f}; launches {dict((k, launch.counts[k] - c0[k]) for k in c0)}")
                p(f"    replay_status (replayed signatures, refusals): {fused.dispatch.replay_status(m)}")
                if M == 1:
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(200):
                        m(x)
                    pr.disable()
                    sio = io.StringIO()
                    pstats.Stats(pr, stream=sio).sort_stats("tottime").print_stats(14)
                    p(sio.getvalue()[-3500:])
        del m

if "w8a16big" in what:
    # W8A16 at large M: widen the 8-bit weight to bf16 once per call (exact), then the same tiled kernel
    # with a bf16 B operand (pipelined wgmma, no per-tile widening) vs the mixed-input kernel
    from triton.testing import do_bench

    from fused.kernels.w8_gemm import w8_gemm
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for (N2, K, gated) in ((28672, 4096, True), (4096, 14336, False)):
            q, s_ = quantize_weight(torch.randn(N2, K, device="cuda"), fmt)
            for M in (128, 1024, 8192):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                t_mixed = do_bench(lambda: w8_gemm(x, q, s_, None, "silu", gated), warmup=5, rep=30)
                t_deq = do_bench(lambda: q.to(torch.bfloat16), warmup=5, rep=30)
                wb = q.to(torch.bfloat16)
                t_bf = do_bench(lambda: w8_gemm(x, wb, s_, None, "silu", gated), warmup=5, rep=30)
                ref = w8_gemm(x, q, s_, None, "silu", gated)
                d = (w8_gemm(x, wb, s_, None, "silu", gated).float() - ref.float()).abs().max().item()
                t_cub = do_bench(lambda: torch.mm(x, wb.t()), warmup=5, rep=30)
                p(f"w8a16 {fmt} N={N2} K={K} M={M}: mixed {t_mixed*1e3:.1f}  dequant {t_deq*1e3:.1f} + bf16 tiled {t_bf*1e3:.1f}  (cuBLAS mm alone {t_cub*1e3:.1f}) maxdiff {d:.3g}")

if "launcher" in what:
    from triton.compiler import compiler as cc
    p("== CompiledKernel source (triton", triton.__version__, ")")
    p(inspect.getsource(cc.CompiledKernel)[:6000])
    from triton.runtime import jit
    p(inspect.getsource(jit.JITFunction.run)[:5000])
    m = fused.quantize(make_block("llama", 4096, 14336, "cuda"), fused.FusedInt8MLP(), blocks=True)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(200):
                m(x)
            torch.cuda.synchronize()
            p(f"plain block call M=1: {(time.perf_counter() - t) / 200 * 1e6:.1f} us")
    p(fused.bench.host_profile())

if "gemv" in what:
    # every w8a16_gemv candidate on the Llama shapes, L2 flushed by do_bench: which loop variant streams fastest
    from triton.testing import do_bench

    from fused.kernels.w8a16_gemv import _candidates, w8a16_gemv
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for name, R, K, gated in (("gate_up", 2 * 14336, 4096, True), ("down", 4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                N = R // 2 if gated else R
                res = []
                for c in _candidates(M, N, K, gated):
                    try:
                        t = do_bench(lambda: w8a16_gemv(x, q, s, None, "silu" if gated else "none", gated, config=c),
                                     warmup=10, rep=40, return_mode="median")
                    except Exception as e:  # noqa: BLE001
                        p(f"  {c}: {type(e).__name__}")
                        continue
                    res.append((t * 1e3, c))
                res.sort(key=lambda r: r[0])
                p(f"== gemv {fmt} {name} M={M}: {len(res)} configs")
                for t, c in res[:6]:
                    p(f"  {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s {c}")


if "readbw" in what:
    # Is the decode GEMV's ~2.6 TB/s plateau its access pattern or its arithmetic? Stream the same [BN, BK]
    # int8 tiles with the GEMV's grid but almost no ALU work (xor of int32 words), next to a torch copy.
    import triton.language as tl
    from triton.testing import do_bench

    @triton.jit
    def _read_tiles(w_ptr, out_ptr, N, KW, stride_n, BLOCK_N: tl.constexpr, BLOCK_KW: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_N, BLOCK_KW), dtype=tl.int32)
        for k0 in range(0, KW, BLOCK_KW):
            offs = k0 + tl.arange(0, BLOCK_KW)
            acc ^= tl.load(w_ptr + rows[:, None] * stride_n + offs[None, :], mask=(rows[:, None] < N) & (offs[None, :] < KW), other=0)
        tl.store(out_ptr + rows, tl.xor_sum(acc, axis=1), mask=rows < N)

    for name, R, K in (("gate_up", 2 * 14336, 4096), ("down", 4096, 14336)):
        w = torch.randint(-128, 127, (R, K), device="cuda", dtype=torch.int8)
        w32 = w.view(torch.int32)
        out = torch.empty(R, device="cuda", dtype=torch.int32)
        t = do_bench(lambda: w.clone(), warmup=10, rep=40, return_mode="median")
        p(f"== readbw {name}: torch clone {t * 1e3:.1f} us = {2 * R * K / t / 1e9:.2f} TB/s (read+write)")
        for bn in (16, 32, 64):
            for bk in (256, 512, 1024):
                for warps in (4, 8):
                    f = lambda: _read_tiles[(triton.cdiv(R, bn),)](w32, out, R, K // 4, w32.stride(0), BLOCK_N=bn,  # noqa: E731
                                                                  BLOCK_KW=bk // 4, num_warps=warps)
                    t = do_bench(f, warmup=10, rep=40, return_mode="median")
                    p(f"  BN {bn:3d} BK {bk:5d} warps {warps}: {t * 1e3:6.1f} us {R * K / t / 1e9:5.2f} TB/s")

if "decode8" in what:
    # decode (M = 1, 16) with the weights fed straight into tensor-core MMAs (no per-weight widening): the
    # W8A8 tiled GEMM (act_quant + w8_gemm) and, for W8A16 int8, split activations (act_split + w8_gemm
    # x_split), each config timed; vs the weight-only GEMV's tuned pick. L2 flushed by do_bench.
    from triton.testing import do_bench

    from fused.kernels import w8_gemm as wg
    from fused.kernels.act_quant import act_quant
    from fused.kernels.act_split import act_split
    from fused.kernels.w8a16_gemv import w8a16_gemv
    from lowbit import quantize_weight
    for fmt in ("int8", "float8_e4m3"):
        for name, R, K, gated in (("gate_up", 2 * 14336, 4096, True), ("down", 4096, 14336, False)):
            q, s = quantize_weight(torch.randn(R, K, device="cuda"), fmt)
            N = R // 2 if gated else R
            act = "silu" if gated else "none"
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
                t = do_bench(lambda: w8a16_gemv(x, q, s, None, act, gated), warmup=10, rep=40, return_mode="median")
                p(f"== decode8 {fmt} {name} M={M}: GEMV (tuned pick) {t * 1e3:.1f} us {R * K / t / 1e9:.2f} TB/s")
                xq, xs = act_quant(x, fp8=fmt != "int8")
                modes = [("W8A8 tiled", lambda c: wg.w8_gemm(xq, q, s, None, act, gated, x_scale=xs,
                                                              out_dtype=x.dtype, config=c)),
                         ("W8A8 tiled, x quantized inside", lambda c: wg.w8_gemm(x, q, s, None, act, gated, config=c,
                                                                                  quantize_x=True))]
                if fmt == "int8":
                    planes, ps = act_split(x)
                    modes.append(("split W8A16", lambda c: wg.w8_gemm(planes, q, s, None, act, gated, x_scale=ps,
                                                                       out_dtype=x.dtype, config=c, x_split=True)))
                    modes.append(("split W8A16, planes made inside", lambda c: wg.w8_gemm(
                        x, q, s, None, act, gated, config=c, quantize_x=True, x_split=True)))
                t = do_bench(lambda: act_quant(x, fp8=fmt != "int8"), warmup=10, rep=40, return_mode="median")
                t2 = do_bench(lambda: act_split(x), warmup=10, rep=40, return_mode="median")
                p(f"  act_quant {t * 1e3:.1f} us, act_split {t2 * 1e3:.1f} us")
                for label, fn in modes:
                    res = []
                    for c in wg._candidates(max(M, 2), N, K, gated, True):
                        try:
                            res.append((do_bench(lambda: fn(c), warmup=10, rep=40, return_mode="median") * 1e3, c))
                        except Exception as e:  # noqa: BLE001
                            p(f"  {label} {c}: {type(e).__name__}")
                    res.sort(key=lambda r: r[0])
                    for t, c in res[:3]:
                        p(f"  {label}: {t:6.1f} us {R * K / t / 1e6:5.2f} TB/s {c}")
